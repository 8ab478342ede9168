//! Boots the systemd guest of `cargo xtask vm e2e`: a small busybox initramfs loads the virtio
//! disk driver and switches to the Debian root image (qemu `snapshot=on`, so the cached image
//! stays as built), carrying the files of the test in `/e2e`. Like the busybox test bed
//! (qemu.rs), it watches the console for the "ioshield-vm:" lines and retries a boot that dies
//! before the test starts.
use std::{
    fs::{self, File},
    io::Write as _,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use super::{
    initramfs::cpio,
    kernels::Kernel,
    modules,
    qemu::{DATA_WRITE_BPS, console_lines, kill},
};

const INIT: &str = include_str!("e2e-init.sh");
const BUSYBOX: &str = "/bin/busybox";
const ATTEMPTS: u32 = 3;
/// The kernel alone reaches the initramfs in a few seconds.
const INIT_TIMEOUT: Duration = Duration::from_secs(120);
/// systemd's boot to the test unit under emulation, on shared cores.
const START_TIMEOUT: Duration = Duration::from_secs(300);
const POWEROFF_TIMEOUT: Duration = Duration::from_secs(30);

/// The initramfs: busybox, the virtio modules in load order, /init, and `files` under /e2e.
pub fn initrd(
    kernel: &Kernel,
    files: &[(&str, FileSource)],
    staging: &Path,
    out: &Path,
) -> Result<()> {
    let _ = fs::remove_dir_all(staging);
    for d in ["bin", "dev", "proc", "sys", "etc", "e2e", "newroot"] {
        fs::create_dir_all(staging.join(d))?;
    }
    fs::copy(BUSYBOX, staging.join("bin/busybox")).context("copying busybox")?;
    fs::set_permissions(
        staging.join("bin/busybox"),
        fs::Permissions::from_mode(0o755),
    )?;
    let src = kernel.modules_dir();
    let mut order = Vec::new();
    for rel in modules::load_order(&src, &["virtio_pci", "virtio_blk"])? {
        let plain = rel.strip_suffix(".xz").unwrap_or(&rel).to_string();
        let to = staging.join("lib/modules").join(&plain);
        fs::create_dir_all(to.parent().expect("module path has a directory"))?;
        // busybox insmod cannot read compressed modules.
        if rel.ends_with(".xz") {
            let out = Command::new("xz").arg("-dc").arg(src.join(&rel)).output()?;
            if !out.status.success() {
                bail!("xz -dc {rel} failed");
            }
            fs::write(&to, out.stdout)?;
        } else {
            fs::copy(src.join(&rel), &to)?;
        }
        order.push(plain);
    }
    fs::write(staging.join("etc/vm-modules"), order.join("\n") + "\n")?;
    write_exec(&staging.join("init"), INIT)?;
    for (name, source) in files {
        let to = staging.join("e2e").join(name);
        match source {
            FileSource::Path(p) => {
                fs::copy(p, &to).with_context(|| format!("copying {}", p.display()))?;
            }
            FileSource::Text(t) => fs::write(&to, t)?,
        }
        fs::set_permissions(&to, fs::Permissions::from_mode(0o755))?;
    }
    cpio(staging, out)
}

pub enum FileSource {
    Path(PathBuf),
    Text(&'static str),
}

pub struct Boot<'a> {
    pub vmlinuz: &'a Path,
    pub initrd: &'a Path,
    pub root: &'a Path,
    pub data: &'a Path,
    pub results: &'a Path,
    /// The systemd unit to boot into.
    pub unit: &'a str,
    pub timeout: Duration,
    pub console_log: &'a Path,
    pub echo: bool,
}

/// Boots until the test has run, calling `prepare` (fresh disks) before every attempt; returns
/// the test's exit status.
pub fn run(boot: &Boot, prepare: &dyn Fn() -> Result<()>) -> Result<i32> {
    for attempt in 1..=ATTEMPTS {
        prepare()?;
        match run_once(boot)? {
            Ok(status) => return Ok(status),
            Err(Early(why)) if attempt < ATTEMPTS => {
                eprintln!("xtask: boot {attempt} failed early ({why}), retrying");
            }
            Err(Early(why)) => bail!(
                "{ATTEMPTS} boots failed before the test started, last: {why} (console: {})",
                boot.console_log.display()
            ),
        }
    }
    unreachable!("the loop returns or bails on its last attempt")
}

/// The guest died or hung before the test started: worth another try.
struct Early(String);

fn command(boot: &Boot) -> Command {
    let drive = |p: &Path| p.display().to_string().replace(',', ",,");
    let mut c = Command::new("qemu-system-x86_64");
    c.args(["-accel", "tcg,thread=multi", "-cpu", "max", "-smp", "2", "-m", "4096"])
        .args(["-nographic", "-no-reboot", "-nic", "none"])
        .arg("-kernel")
        .arg(boot.vmlinuz)
        .arg("-initrd")
        .arg(boot.initrd)
        // panic=-1 reboots on panic, which -no-reboot turns into qemu exiting.
        .arg("-append")
        .arg(format!(
            "console=ttyS0 panic=-1 loglevel=4 systemd.unit={} systemd.show_status=auto",
            boot.unit
        ))
        .arg("-drive")
        .arg(format!(
            "file={},if=none,id=d0,format=raw,snapshot=on",
            drive(boot.root)
        ))
        .args(["-device", "virtio-blk-pci,drive=d0,serial=root"])
        .arg("-drive")
        .arg(format!(
            "file={},if=none,id=d1,format=raw,cache=none,aio=native,throttling.bps-write={DATA_WRITE_BPS}",
            drive(boot.data)
        ))
        .args(["-device", "virtio-blk-pci,drive=d1,serial=data"])
        .arg("-drive")
        .arg(format!("file={},if=none,id=d2,format=raw", drive(boot.results)))
        .args(["-device", "virtio-blk-pci,drive=d2,serial=results"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    c
}

fn run_once(boot: &Boot) -> Result<Result<i32, Early>> {
    let mut log = File::create(boot.console_log)
        .with_context(|| format!("creating {}", boot.console_log.display()))?;
    let mut child = command(boot)
        .stderr(File::create(
            boot.console_log.with_extension("qemu-stderr.log"),
        )?)
        .spawn()
        .context("starting qemu-system-x86_64")?;
    let lines = console_lines(&mut child);
    let started = Instant::now();
    let (mut init, mut test) = (false, false);
    let mut done: Option<(i32, Instant)> = None;
    loop {
        match lines.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                writeln!(log, "{line}")?;
                if boot.echo {
                    println!("{line}");
                }
                init |= line.contains("ioshield-vm: init started");
                test |= line.contains("ioshield-vm: scenario start");
                if let Some(s) = line.split("ioshield-vm: scenario done status=").nth(1) {
                    done = Some((s.trim().parse().unwrap_or(-1), Instant::now()));
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let exit = child.wait()?;
                return match (done, test) {
                    (Some((s, _)), _) => Ok(Ok(s)),
                    (None, false) => Ok(Err(Early(format!("qemu exited ({exit}) during boot")))),
                    (None, true) => bail!(
                        "guest died during the test (qemu {exit}, console: {})",
                        boot.console_log.display()
                    ),
                };
            }
        }
        let elapsed = started.elapsed();
        let early = if !init && elapsed > INIT_TIMEOUT {
            Some("no init")
        } else if !test && elapsed > START_TIMEOUT {
            Some("systemd did not start the test")
        } else {
            None
        };
        if let Some(why) = early {
            kill(&mut child);
            return Ok(Err(Early(format!("{why} after {}s", elapsed.as_secs()))));
        }
        if let Some((s, at)) = done
            && at.elapsed() > POWEROFF_TIMEOUT
        {
            kill(&mut child);
            return Ok(Ok(s));
        }
        if elapsed > boot.timeout {
            kill(&mut child);
            bail!(
                "timed out after {}s (console: {})",
                boot.timeout.as_secs(),
                boot.console_log.display()
            );
        }
    }
}

fn write_exec(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))?;
    Ok(())
}
