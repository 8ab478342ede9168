//! One scenario run: host tools and guest binaries ready once, then per run a kernel, an
//! initramfs with the script, fresh disks, a boot, and the results unpacked.
use std::{
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use super::{disks, initramfs, kernels, qemu};
use crate::{
    cmd::{cargo, workspace_root},
    setup,
};

/// What the host needs to build and boot guests (facts.md §4).
const HOST_PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "busybox-static",
    "e2fsprogs",
    "cpio",
    "kmod",
    "xz-utils",
];

/// Host side, ready to boot guests: tools installed, guest binaries built.
pub struct Guest {
    binaries: Vec<PathBuf>,
    cache: PathBuf,
}

pub struct Run<'a> {
    pub series: &'a str,
    pub script: &'a Path,
    pub out: &'a Path,
    pub env: &'a [String],
    pub timeout: Duration,
    pub echo: bool,
}

pub struct Done {
    pub status: i32,
    pub results: PathBuf,
    pub wall: Duration,
}

impl Guest {
    /// `ioshield`: a prebuilt binary to test instead of this workspace's release build.
    pub fn prepare(ioshield: Option<&Path>) -> Result<Guest> {
        setup::apt_install(HOST_PACKAGES)?;
        let root = workspace_root();
        let release = root.join("target/release");
        let ioshield = match ioshield {
            Some(bin) => {
                cargo(&[
                    "build",
                    "--release",
                    "--package",
                    "ioshield-tests",
                    "--bin",
                    "ioshield-load",
                ])?;
                bin.to_path_buf()
            }
            None => {
                // ioshield's build embeds the BPF object, which needs the toolchain from setup.
                setup::ensure()?;
                cargo(&[
                    "build",
                    "--release",
                    "--package",
                    "ioshield",
                    "--package",
                    "ioshield-tests",
                    "--bin",
                    "ioshield",
                    "--bin",
                    "ioshield-load",
                ])?;
                release.join("ioshield")
            }
        };
        if !ioshield.is_file() {
            anyhow::bail!("{} does not exist", ioshield.display());
        }
        Ok(Guest {
            binaries: vec![ioshield, release.join("ioshield-load")],
            cache: root.join("target/vm-cache"),
        })
    }

    /// The host's ioshield has the `daemon` subcommand (scenarios using it can run).
    pub fn has_daemon(&self) -> bool {
        std::process::Command::new(&self.binaries[0])
            .args(["daemon", "--help"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    pub fn run(&self, run: &Run) -> Result<Done> {
        let started = Instant::now();
        let kernel = kernels::fetch(run.series, &self.cache)?;
        // Only what a previous run left: OUT may hold other things.
        let _ = fs::remove_dir_all(run.out.join("results"));
        fs::create_dir_all(run.out).with_context(|| format!("creating {}", run.out.display()))?;
        // Per-run scratch space, so two runs (say, in two terminals) do not share disks.
        let work = self
            .cache
            .join(format!("work/{}-{}", run.series, std::process::id()));
        let _ = fs::remove_dir_all(&work);
        fs::create_dir_all(&work)?;
        let initrd = work.join("initrd.cpio");
        initramfs::build(
            &initramfs::Contents {
                kernel: &kernel,
                binaries: &self.binaries,
                scenario: run.script,
                env: run.env,
            },
            &work.join("root"),
            &initrd,
        )?;
        let (data, results) = (work.join("data.img"), work.join("results.img"));
        let boot = qemu::Boot {
            vmlinuz: &kernel.vmlinuz(),
            initrd: &initrd,
            data: &data,
            results: &results,
            timeout: run.timeout,
            console_log: &run.out.join("console.log"),
            echo: run.echo,
        };
        let mut attempt = 1;
        let extracted = loop {
            let status = qemu::run(&boot, &|| disks::create(&data, &results));
            let extracted = status.and_then(|s| {
                disks::extract_results(&results, &run.out.join("results")).map(|()| s)
            });
            // Multi-threaded TCG occasionally crashes the guest kernel mid-run (seen on 6.12: an
            // int3 oops in __folio_mark_dirty while tracepoint text was being patched): that is
            // the emulator, not the scenario, so run it once more.
            let panicked =
                fs::read_to_string(boot.console_log).is_ok_and(|c| c.contains("Kernel panic"));
            if extracted.is_err() && panicked && attempt < 2 {
                eprintln!(
                    "xtask: vm {}: the guest kernel panicked (see {}); running the scenario again",
                    run.series,
                    boot.console_log.display()
                );
                let _ = fs::remove_dir_all(run.out.join("results"));
                attempt += 1;
                continue;
            }
            break extracted;
        };
        let _ = fs::remove_dir_all(&work);
        Ok(Done {
            status: extracted?,
            results: run.out.join("results"),
            wall: started.elapsed(),
        })
    }
}
