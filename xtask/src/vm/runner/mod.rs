//! The one place that starts qemu: a Debian kernel, the guest's root, fresh disks, a boot
//! (retried when the emulator, not the scenario, failed) and the guest's results unpacked on the
//! host. Callers (scenario.rs, e2e.rs) only say what to boot.
mod console;
mod disks;
mod qemu;
pub use qemu::DATA_WRITE_BPS;

use std::{
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use self::console::{Attempt, Watch};
use super::{
    initramfs,
    kernels::{self, Kernel},
    rootfs,
    sysboot::{self, FileSource},
};
use crate::{cmd::workspace_root, setup};

/// What the host needs to build and boot either kind of guest, in one list so
/// that nothing further down installs packages of its own.
const HOST_PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "busybox-static",
    "e2fsprogs",
    "cpio",
    "kmod",
    "xz-utils",
    "debootstrap",
];
/// About 1 in 20 boots of 6.12 under multi-threaded TCG dies before init runs anything.
const ATTEMPTS: u32 = 3;
/// systemd's boot to the test unit under emulation, on shared cores.
const SYSTEMD_START_TIMEOUT: Duration = Duration::from_secs(300);

/// What the guest boots into.
pub enum Root<'a> {
    /// The busybox initramfs is the whole system: its init (init.sh) runs `script` with `env`
    /// exported and `binaries` on PATH (tests/vm/README.md).
    Busybox {
        binaries: &'a [PathBuf],
        script: &'a Path,
        env: &'a [String],
    },
    /// The debootstrapped Debian 12 image (rootfs.rs) with systemd as PID 1, booted into `unit`;
    /// the initramfs (e2e-init.sh) hands `files` to it in /e2e.
    Debian {
        unit: &'a str,
        files: &'a [(&'a str, FileSource)],
    },
}

pub struct Options<'a> {
    /// Kernel series, as kernels.rs knows them.
    pub series: &'a str,
    pub root: Root<'a>,
    /// Gets `console.log` (and qemu's stderr) and the guest's results in `results/`.
    pub out: &'a Path,
    /// Kill the guest after this long, boot included.
    pub timeout: Duration,
    /// Copy the console to stdout.
    pub echo: bool,
    /// The data disk's write speed, if not the bed's usual [`qemu::DATA_WRITE_BPS`].
    pub data_write_bps: Option<u64>,
}

pub struct Done {
    /// The scenario's exit status, as init reported it.
    pub status: i32,
    pub results: PathBuf,
    pub wall: Duration,
}

/// Boots `o.series` with `o.root` until the scenario has run, and unpacks its results.
pub fn run(o: &Options) -> Result<Done> {
    let started = Instant::now();
    setup::apt_install(HOST_PACKAGES)?;
    let cache = workspace_root().join("target/vm-cache");
    let kernel = kernels::fetch(o.series, &cache)?;
    // Only what a previous run left: OUT may hold other things.
    let results = o.out.join("results");
    let _ = fs::remove_dir_all(&results);
    fs::create_dir_all(o.out).with_context(|| format!("creating {}", o.out.display()))?;
    // Per-run scratch space, so two runs (say, in two terminals) do not share disks.
    let work = cache.join(format!("work/{}-{}", o.series, std::process::id()));
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work)?;
    let status = boot(o, &kernel, &cache, &work);
    let _ = fs::remove_dir_all(&work);
    Ok(Done {
        status: status?,
        results,
        wall: started.elapsed(),
    })
}

/// The initrd for `root` in `work`, and the root image with the unit to boot when the
/// initramfs is not the whole system.
fn prepare<'a>(
    root: &Root<'a>,
    kernel: &Kernel,
    cache: &Path,
    work: &Path,
) -> Result<(PathBuf, Option<(PathBuf, &'a str)>)> {
    let initrd = work.join("initrd.cpio");
    let staging = work.join("initrd");
    match root {
        Root::Busybox {
            binaries,
            script,
            env,
        } => {
            let contents = initramfs::Contents {
                kernel,
                binaries,
                scenario: script,
                env,
            };
            initramfs::build(&contents, &staging, &initrd)?;
            Ok((initrd, None))
        }
        Root::Debian { unit, files } => {
            let image = rootfs::image(cache, kernel)?;
            sysboot::initrd(kernel, files, &staging, &initrd)?;
            Ok((initrd, Some((image, *unit))))
        }
    }
}

/// How often a scenario whose guest kernel panicked runs again.
const PANIC_RERUNS: u32 = 2;

fn boot(o: &Options, kernel: &Kernel, cache: &Path, work: &Path) -> Result<i32> {
    let (initrd, image) = prepare(&o.root, kernel, cache, work)?;
    let (data, results) = (work.join("data.img"), work.join("results.img"));
    // Debian guests boot a whole system whose disks the e2e script knows: only the bench's
    // busybox guests get the fast disk.
    let fast = matches!(o.root, Root::Busybox { .. }).then(|| work.join("fast.img"));
    let machine = qemu::Machine {
        vmlinuz: &kernel.vmlinuz(),
        initrd: &initrd,
        image: image.as_ref().map(|(path, unit)| (path.as_path(), *unit)),
        data: &data,
        data_write_bps: o.data_write_bps.unwrap_or(qemu::DATA_WRITE_BPS),
        results: &results,
        fast: fast.as_deref(),
    };
    let watch = Watch {
        console_log: &o.out.join("console.log"),
        echo: o.echo,
        timeout: o.timeout,
        start_timeout: image.is_some().then_some(SYSTEMD_START_TIMEOUT),
    };
    let mut reruns = 0;
    loop {
        let extracted = boot_until_run(&machine, &watch)
            .and_then(|s| disks::extract_results(&results, &o.out.join("results")).map(|()| s));
        // Multi-threaded TCG occasionally crashes the guest kernel (seen on 6.12: an int3 oops
        // in __folio_mark_dirty while tracepoint text was being patched, and one in
        // free_unref_page 2.9 s into a boot with no daemon at all, kernel text patched by its
        // own static keys): that is the emulator, not the scenario, so run it again. Twice: it
        // hit 2 of 12 e2e boots in one session (stop 38), so one rerun left a red CI about once
        // in forty series.
        let panicked =
            fs::read_to_string(watch.console_log).is_ok_and(|c| c.contains("Kernel panic"));
        if extracted.is_err() && panicked && reruns < PANIC_RERUNS {
            eprintln!(
                "xtask: vm {}: the guest kernel panicked (see {}, kept as console.panicked{}.log); \
                 running the scenario again",
                o.series,
                watch.console_log.display(),
                reruns + 1
            );
            let _ = fs::remove_dir_all(o.out.join("results"));
            // Kept for whoever wants to know where it crashed: the rerun writes console.log anew.
            let _ = fs::rename(
                watch.console_log,
                o.out.join(format!("console.panicked{}.log", reruns + 1)),
            );
            reruns += 1;
            continue;
        }
        return extracted;
    }
}

/// Boots on fresh disks until the scenario has run; returns its exit status.
fn boot_until_run(m: &qemu::Machine, w: &Watch) -> Result<i32> {
    for attempt in 1..=ATTEMPTS {
        disks::create(m.data, m.results, m.fast)?;
        match console::boot(qemu::command(m), w)? {
            Attempt::Done(status) => return Ok(status),
            Attempt::Failed(why) => bail!("{why} (console: {})", w.console_log.display()),
            Attempt::Early(why) if attempt < ATTEMPTS => {
                eprintln!("xtask: boot {attempt} failed early ({why}), retrying");
            }
            Attempt::Early(why) => bail!(
                "{ATTEMPTS} boots failed before the scenario started, last: {why} (console: {})",
                w.console_log.display()
            ),
        }
    }
    unreachable!("the loop returns or bails on its last attempt")
}
