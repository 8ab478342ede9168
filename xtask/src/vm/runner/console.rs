//! One boot: starts qemu, copies the guest's serial console to a log, follows init's
//! `ioshield-vm:` lines (init.sh, e2e-run.sh) and kills a guest that hangs.
use std::{
    fs::File,
    io::{BufRead as _, BufReader, Write as _},
    path::Path,
    process::{Child, Command},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

/// Boot to init takes 2-3 s alone; the host's cores are shared, so allow plenty.
const INIT_TIMEOUT: Duration = Duration::from_secs(120);
/// After init says it is done, `poweroff -f` should end qemu almost at once.
const POWEROFF_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Watch<'a> {
    pub console_log: &'a Path,
    /// Also copy the console to our stdout.
    pub echo: bool,
    /// Whole run, boot included.
    pub timeout: Duration,
    /// Boot to the scenario's start, when something (systemd) stands between init and it.
    pub start_timeout: Option<Duration>,
}

/// How one boot ended.
pub enum Attempt {
    /// init reported the scenario's exit status.
    Done(i32),
    /// The guest died or hung before the scenario started: worth another try.
    Early(String),
    /// The scenario started but the run did not complete.
    Failed(String),
}

/// What init has said so far.
#[derive(Default)]
struct Progress {
    init: bool,
    started: bool,
    /// The scenario's exit status, and when init reported it.
    done: Option<(i32, Instant)>,
}

impl Progress {
    fn see(&mut self, line: &str) {
        self.init |= line.contains("ioshield-vm: init started");
        self.started |= line.contains("ioshield-vm: scenario start");
        if let Some(s) = line.split("ioshield-vm: scenario done status=").nth(1) {
            self.done = Some((s.trim().parse().unwrap_or(-1), Instant::now()));
        }
    }

    /// Where the guest got to, as an outcome for a boot that ends now.
    fn outcome(&self, why: String) -> Attempt {
        match (self.done, self.started) {
            (Some((s, _)), _) => Attempt::Done(s),
            (None, true) => Attempt::Failed(why),
            (None, false) => Attempt::Early(why),
        }
    }
}

pub fn boot(mut command: Command, w: &Watch) -> Result<Attempt> {
    let mut log = File::create(w.console_log)
        .with_context(|| format!("creating {}", w.console_log.display()))?;
    let mut child = command
        .stderr(File::create(
            w.console_log.with_extension("qemu-stderr.log"),
        )?)
        .spawn()
        .context("starting qemu-system-x86_64")?;
    let lines = console_lines(&mut child);
    let started = Instant::now();
    let mut p = Progress::default();
    loop {
        match lines.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                writeln!(log, "{line}")?;
                if w.echo {
                    println!("{line}");
                }
                p.see(&line);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // The console closed: qemu has exited.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let exit = child.wait()?;
                return Ok(match p.outcome(String::new()) {
                    Attempt::Early(_) => {
                        Attempt::Early(format!("qemu exited ({exit}) during boot"))
                    }
                    Attempt::Failed(_) => {
                        Attempt::Failed(format!("guest died during the scenario (qemu {exit})"))
                    }
                    done => done,
                });
            }
        }
        let elapsed = started.elapsed();
        let hung = if !p.init && elapsed > INIT_TIMEOUT {
            Some(Attempt::Early(format!(
                "no init after {}s",
                INIT_TIMEOUT.as_secs()
            )))
        } else if let Some(limit) = w.start_timeout
            && !p.started
            && elapsed > limit
        {
            Some(Attempt::Early(format!(
                "the scenario did not start after {}s",
                limit.as_secs()
            )))
        } else if elapsed > w.timeout {
            Some(p.outcome(format!("timed out after {}s", w.timeout.as_secs())))
        } else if let Some((s, at)) = p.done
            && at.elapsed() > POWEROFF_TIMEOUT
        {
            Some(Attempt::Done(s))
        } else {
            None
        };
        if let Some(outcome) = hung {
            kill(&mut child);
            return Ok(outcome);
        }
    }
}

/// Console lines from a reader thread, so the caller can keep time while the guest is silent.
fn console_lines(child: &mut Child) -> mpsc::Receiver<String> {
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

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_init_lines() {
        let mut p = Progress::default();
        p.see("[    1.2] ioshield-vm: init started");
        assert!(matches!(p.outcome("x".into()), Attempt::Early(_)));
        p.see("ioshield-vm: scenario start");
        assert!(matches!(p.outcome("x".into()), Attempt::Failed(_)));
        p.see("ioshield-vm: scenario done status=3\r");
        assert!(matches!(p.outcome("x".into()), Attempt::Done(3)));
        p.see("ioshield-vm: scenario done status=?");
        assert!(matches!(p.outcome("x".into()), Attempt::Done(-1)));
    }
}
