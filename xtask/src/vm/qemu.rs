//! Boots the guest under qemu's software emulation (no KVM here, facts.md §4), watches its
//! serial console for init's progress lines, and retries boots that die before the scenario
//! starts (about 1 in 20 for 6.12 under multi-threaded TCG).
use std::{
    fs::File,
    io::{BufRead as _, BufReader, Write as _},
    path::Path,
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

/// The slow disk: 30 MB/s of writes, like a modest hard disk or a cheap SD card.
pub const DATA_WRITE_BPS: u64 = 30_000_000;
const MEMORY_MB: u32 = 4096;
const ATTEMPTS: u32 = 3;
/// Boot to init takes 2-3 s alone; the host's cores are shared, so allow plenty.
const BOOT_TIMEOUT: Duration = Duration::from_secs(120);
/// After init says it is done, `poweroff -f` should end qemu almost at once.
const POWEROFF_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Boot<'a> {
    pub vmlinuz: &'a Path,
    pub initrd: &'a Path,
    pub data: &'a Path,
    pub results: &'a Path,
    /// Whole run, boot included.
    pub timeout: Duration,
    pub console_log: &'a Path,
    /// Also copy the console to our stdout.
    pub echo: bool,
}

/// How one boot ended.
enum Attempt {
    /// init reported the scenario's exit status.
    Done(i32),
    /// The guest died or hung before the scenario started: worth another try.
    Early(String),
    /// The scenario started but the run did not complete.
    Failed(String),
}

/// Boots until the scenario has run, calling `prepare` (fresh disks) before every attempt.
/// Returns the scenario's exit status.
pub fn run(boot: &Boot, prepare: &dyn Fn() -> Result<()>) -> Result<i32> {
    for attempt in 1..=ATTEMPTS {
        prepare()?;
        match run_once(boot)? {
            Attempt::Done(status) => return Ok(status),
            Attempt::Failed(why) => bail!("{why} (console: {})", boot.console_log.display()),
            Attempt::Early(why) if attempt < ATTEMPTS => {
                eprintln!("xtask: boot {attempt} failed early ({why}), retrying");
            }
            Attempt::Early(why) => bail!(
                "{ATTEMPTS} boots failed before the scenario started, last: {why} (console: {})",
                boot.console_log.display()
            ),
        }
    }
    unreachable!("the loop returns or bails on its last attempt")
}

fn command(boot: &Boot) -> Command {
    let mut c = Command::new("qemu-system-x86_64");
    c.args(["-accel", "tcg,thread=multi", "-cpu", "max", "-smp", "2"])
        .args(["-m", &MEMORY_MB.to_string()])
        .args(["-nographic", "-no-reboot", "-nic", "none"])
        .arg("-kernel")
        .arg(boot.vmlinuz)
        .arg("-initrd")
        .arg(boot.initrd)
        // panic=-1 reboots on panic, which -no-reboot turns into qemu exiting.
        .args(["-append", "console=ttyS0 panic=-1 loglevel=4"])
        .arg("-drive")
        .arg(format!(
            "file={},if=none,id=d0,format=raw,cache=none,aio=native,throttling.bps-write={DATA_WRITE_BPS}",
            drive_path(boot.data)
        ))
        .args(["-device", "virtio-blk-pci,drive=d0,serial=data"])
        .arg("-drive")
        .arg(format!(
            "file={},if=none,id=d1,format=raw",
            drive_path(boot.results)
        ))
        .args(["-device", "virtio-blk-pci,drive=d1,serial=results"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    c
}

/// qemu's -drive option separates with commas; a comma in a path is written twice.
fn drive_path(p: &Path) -> String {
    p.display().to_string().replace(',', ",,")
}

fn run_once(boot: &Boot) -> Result<Attempt> {
    let mut log = File::create(boot.console_log)
        .with_context(|| format!("creating {}", boot.console_log.display()))?;
    let stderr_log = boot.console_log.with_extension("qemu-stderr.log");
    let mut child = command(boot)
        .stderr(File::create(&stderr_log)?)
        .spawn()
        .context("starting qemu-system-x86_64")?;
    let lines = console_lines(&mut child);
    let started = Instant::now();
    let (mut init_started, mut scenario_started, mut status) = (false, false, None);
    let mut done_at: Option<Instant> = None;
    let outcome = loop {
        match lines.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                writeln!(log, "{line}")?;
                if boot.echo {
                    println!("{line}");
                }
                init_started |= line.contains("ioshield-vm: init started");
                scenario_started |= line.contains("ioshield-vm: scenario start");
                if let Some(s) = line.split("ioshield-vm: scenario done status=").nth(1) {
                    status = Some(s.trim().parse().unwrap_or(-1));
                    done_at = Some(Instant::now());
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // The console closed: qemu has exited.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let exit = child.wait()?;
                break match (status, scenario_started) {
                    (Some(s), _) => Attempt::Done(s),
                    (None, false) => Attempt::Early(format!("qemu exited ({exit}) during boot")),
                    (None, true) => {
                        Attempt::Failed(format!("guest died during the scenario (qemu {exit})"))
                    }
                };
            }
        }
        let elapsed = started.elapsed();
        if !init_started && elapsed > BOOT_TIMEOUT {
            kill(&mut child);
            break Attempt::Early(format!("no init after {}s", BOOT_TIMEOUT.as_secs()));
        }
        if elapsed > boot.timeout {
            kill(&mut child);
            break match status {
                Some(s) => Attempt::Done(s),
                None if scenario_started => {
                    Attempt::Failed(format!("timed out after {}s", boot.timeout.as_secs()))
                }
                None => Attempt::Early(format!("timed out after {}s", boot.timeout.as_secs())),
            };
        }
        if let (Some(s), Some(at)) = (status, done_at)
            && at.elapsed() > POWEROFF_TIMEOUT
        {
            kill(&mut child);
            break Attempt::Done(s);
        }
    };
    Ok(outcome)
}

/// Console lines from a reader thread, so the caller can keep time while the guest is silent.
pub(super) fn console_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut buf = Vec::new();
        while reader.read_until(b'\n', &mut buf).unwrap_or(0) > 0 {
            let line = String::from_utf8_lossy(&buf);
            if tx
                .send(line.trim_end_matches(['\r', '\n']).to_string())
                .is_err()
            {
                break;
            }
            buf.clear();
        }
    });
    rx
}

pub(super) fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}
