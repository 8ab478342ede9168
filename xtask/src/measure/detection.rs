//! `cargo xtask measure detection`: how long after the bench's offenders start (a `cp` from
//! memory, a `tar x` of 8192 small files, a `dd` of 1 MiB writes without pause like the load
//! offender) the daemon restricts them, on this machine's own CPU and disk, with the shipped
//! configuration on a disk it has never measured (what a fresh install meets). The qemu bench's
//! detection includes its emulated CPU, which runs the writers, the daemon's step and the
//! kernel's side of a restriction tens of times slower than a real one; this is the same path at
//! a real machine's speed.
use std::{
    collections::VecDeque,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc::{Receiver, channel},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use super::{ioshield, median, scratch};
use crate::cmd::workspace_root;

/// Large enough that the copy outlasts its report at any speed a page cache dirties at.
const SOURCE_MIB: u32 = 400;

/// What the daemon's `restrict` line says about one restriction, in ms.
#[derive(Debug, PartialEq)]
struct Reported {
    /// The kernel's window: the time the writer took to dirty what it was reported for.
    window: f64,
    /// From the kernel's report to the daemon's decision.
    judged_after: f64,
    /// The actuator's own time for the restriction.
    actuator: f64,
    /// The disk's speed the writer was judged against, as the daemon says it.
    against: String,
}

/// Reads the figures of a line like "restrict pid 5143 (cp) dirtied 6.3 MB in 3 ms on /dev/vda,
/// ... (judged 0 ms after): ioprio idle (1 processes, in 0 ms)".
fn parse_restrict_line(line: &str) -> Option<Reported> {
    let number_after = |text: &str, marker: &str| -> Option<f64> {
        let rest = &text[text.find(marker)? + marker.len()..];
        rest.split_whitespace().next()?.parse().ok()
    };
    let after_dirtied = &line[line.find(" dirtied ")?..];
    let speed_at = line.find("faster than the disk's ")? + "faster than the disk's ".len();
    let against = line[speed_at..].split(" (judged").next()?.to_string();
    Some(Reported {
        against,
        window: number_after(after_dirtied, " in ")?,
        judged_after: number_after(line, "(judged ")?,
        actuator: number_after(&line[line.rfind(" processes, in ")?..], " processes, in ")?,
    })
}

/// Lines of the daemon's log kept to show when what was waited for never came.
const TAIL: usize = 20;

/// The daemon's log lines, each with the moment it arrived.
struct Log {
    lines: Receiver<(Instant, String)>,
    tail: VecDeque<String>,
}

impl Log {
    fn follow(daemon: &mut Child) -> Result<Log> {
        let stderr = daemon.stderr.take().context("the daemon's stderr")?;
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        Ok(Log {
            lines: rx,
            tail: VecDeque::new(),
        })
    }

    /// The first line from now on that contains `needle`, with its arrival.
    fn wait_for(&mut self, needle: &str, within: Duration) -> Result<(Instant, String)> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((at, line)) => {
                    if line.contains(needle) {
                        return Ok((at, line));
                    }
                    if self.tail.len() == TAIL {
                        self.tail.pop_front();
                    }
                    self.tail.push_back(line);
                }
                Err(_) => {
                    let tail = Vec::from(self.tail.clone()).join("\n");
                    bail!(
                        "no daemon line with {needle:?} within {within:?}; its last lines:\n{tail}"
                    )
                }
            }
        }
    }
}

/// The shipped configuration, with its state and speeds files in `dir`: the disk unmeasured.
fn shipped_config(dir: &Path) -> Result<PathBuf> {
    let shipped = std::fs::read_to_string(workspace_root().join("packaging/ioshield.toml"))?;
    let mut replaced = 0;
    let text: Vec<String> = shipped
        .lines()
        .map(|l| {
            let key = l.split('=').next().unwrap_or("").trim();
            match key {
                "state_file" | "speeds_file" => {
                    replaced += 1;
                    format!("{key} = \"{}/{key}.json\"", dir.display())
                }
                _ => l.to_string(),
            }
        })
        .collect();
    if replaced != 2 {
        bail!("packaging/ioshield.toml: expected one state_file and one speeds_file line");
    }
    let path = dir.join("ioshield.toml");
    std::fs::write(&path, text.join("\n") + "\n")?;
    Ok(path)
}

/// The offenders, as the bench runs them.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Job {
    Copy,
    Untar,
    Dd,
}

impl Job {
    const ALL: [Job; 3] = [Job::Copy, Job::Untar, Job::Dd];

    fn label(self) -> &'static str {
        match self {
            Job::Copy => "cp",
            Job::Untar => "tar x",
            Job::Dd => "dd",
        }
    }

    /// The job writing into `dst` (a directory that exists and is empty), its input in `sources`.
    fn spawn(self, sources: &Sources, dst: &Path) -> Result<Child> {
        let mut command = match self {
            Job::Copy => {
                let mut c = Command::new("cp");
                c.arg(&sources.file).arg(dst.join("copy"));
                c
            }
            Job::Untar => {
                let mut c = Command::new("tar");
                c.arg("-xf").arg(&sources.tarball).arg("-C").arg(dst);
                c
            }
            Job::Dd => {
                let mut c = Command::new("dd");
                c.args(["if=/dev/zero", "bs=1M", "status=none"])
                    .arg(format!("count={SOURCE_MIB}"))
                    .arg(format!("of={}", dst.join("dd").display()));
                c
            }
        };
        Ok(command.spawn()?)
    }
}

/// The inputs, in memory (tmpfs) when there is room: read from memory, the writers dirty as fast
/// as this machine can, the harshest case for the window.
struct Sources {
    file: PathBuf,
    tarball: PathBuf,
}

impl Sources {
    fn make(dir: &Path) -> Result<Sources> {
        let shm = Path::new("/dev/shm");
        let in_memory = shm.is_dir()
            && Command::new("df")
                .args(["--output=avail", "-B1M"])
                .arg(shm)
                .output()
                .ok()
                .and_then(|o| String::from_utf8(o.stdout).ok())
                .and_then(|s| s.lines().nth(1)?.trim().parse::<u64>().ok())
                .is_some_and(|mib| mib > 3 * u64::from(SOURCE_MIB));
        let at = if in_memory { shm } else { dir };
        let sources = Sources {
            file: at.join(format!("ioshield-measure-{}.src", std::process::id())),
            tarball: at.join(format!("ioshield-measure-{}.tar", std::process::id())),
        };
        let status = Command::new("dd")
            .args(["if=/dev/zero", "bs=1M", "status=none"])
            .arg(format!("count={SOURCE_MIB}"))
            .arg(format!("of={}", sources.file.display()))
            .status()?;
        if !status.success() {
            bail!("dd could not write {}", sources.file.display());
        }
        ioshield_tests::load::tarball::write(
            &sources.tarball,
            ioshield_tests::load::tarball::Contents {
                files: 8192,
                file_size: 32 * 1024,
                big: None,
            },
        )?;
        Ok(sources)
    }
}

impl Drop for Sources {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_file(&self.tarball);
    }
}

pub fn detection(repeats: usize) -> Result<()> {
    let dir = scratch()?;
    let result = Sources::make(&dir).and_then(|sources| {
        let rows = measure(&dir, &sources, repeats)?;
        for job in Job::ALL {
            report(job, &rows);
        }
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&dir);
    result
}

type Row = (Job, f64, Reported);

fn measure(dir: &Path, sources: &Sources, repeats: usize) -> Result<Vec<Row>> {
    let config = shipped_config(dir)?;
    let mut daemon = ioshield()
        .args(["daemon", "--config"])
        .arg(&config)
        .stderr(Stdio::piped())
        .spawn()?;
    let result = Log::follow(&mut daemon).and_then(|mut log| {
        log.wait_for("ioshield daemon running", Duration::from_secs(60))?;
        let dst = dir.join("out");
        let mut rows = Vec::new();
        // Interleaved, so that a machine slower for a while slows every job alike.
        for _ in 0..repeats {
            for job in Job::ALL {
                let (ms, reported) = run_one(job, sources, &dst, &mut log, rows.is_empty())?;
                rows.push((job, ms, reported));
            }
        }
        Ok(rows)
    });
    let _ = Command::new("kill").arg(daemon.id().to_string()).status();
    let status = daemon.wait()?;
    let rows = result?;
    if !status.success() {
        bail!("the daemon exited with {status}");
    }
    Ok(rows)
}

/// One run of `job`: the time from its spawn to the daemon's `restrict` line about it, and
/// what that line says.
fn run_one(
    job: Job,
    sources: &Sources,
    dst: &Path,
    log: &mut Log,
    first: bool,
) -> Result<(f64, Reported)> {
    let _ = std::fs::remove_dir_all(dst);
    std::fs::create_dir_all(dst)?;
    // Nothing of the last job left to write: the next starts on a quiet disk.
    Command::new("sync").status()?;
    std::thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    let mut child = job.spawn(sources, dst)?;
    let pid = child.id();
    let restricted = log.wait_for(&format!("restrict pid {pid} "), Duration::from_secs(20));
    child.wait()?;
    let (at, line) = restricted?;
    // A writer restricted for its backlog rather than reported by the kernel has no window: on
    // this machine it dirtied slower than the disk is judged to write.
    let reported = parse_restrict_line(&line).with_context(|| {
        format!(
            "{} was not reported by the kernel; the daemon said: {line}",
            job.label()
        )
    })?;
    let ms = at.duration_since(started).as_secs_f64() * 1e3;
    if first {
        // How this host restricts (the action `auto` chose), once.
        println!(
            "the daemon: {}",
            &line[line.find("restrict pid").unwrap_or(0)..]
        );
    }
    println!(
        "{} restricted {ms:.1} ms after its spawn: window {:.0} ms, judged {:.0} ms after, \
         actuator {:.0} ms (the disk judged at {})",
        job.label(),
        reported.window,
        reported.judged_after,
        reported.actuator,
        reported.against
    );
    // One restriction per disk: the next job is reported once this one is released.
    log.wait_for(&format!("release pid {pid} "), Duration::from_secs(60))?;
    Ok((ms, reported))
}

fn report(job: Job, rows: &[Row]) {
    let rows: Vec<&Row> = rows.iter().filter(|r| r.0 == job).collect();
    let column = |f: &dyn Fn(&Row) -> f64| {
        let mut v: Vec<f64> = rows.iter().map(|r| f(r)).collect();
        let worst = v.iter().copied().fold(0.0, f64::max);
        (median(&mut v), worst)
    };
    println!("{}: {} runs, median (worst), ms:", job.label(), rows.len());
    for (name, (m, w)) in [
        ("spawn to restriction", column(&|r| r.1)),
        ("kernel's window", column(&|r| r.2.window)),
        ("report to decision", column(&|r| r.2.judged_after)),
        ("actuator", column(&|r| r.2.actuator)),
    ] {
        println!("  {name:<22} {m:>8.1} ({w:.1})");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_figures_of_a_restrict_line_are_read() {
        let line = "2026-12-06T20:28:43.024952Z  INFO restrict pid 5143 (cp) dirtied 6.3 MB in 3 ms \
                    on /dev/vda, faster than the disk's 25.0 MB/s (judged 1 ms after): ioprio idle \
                    (1 processes, in 0 ms) pid=5143 action=\"restrict\"";
        assert_eq!(
            parse_restrict_line(line),
            Some(Reported {
                window: 3.0,
                judged_after: 1.0,
                actuator: 0.0,
                against: "25.0 MB/s".into(),
            })
        );
        let cgroup = "restrict pid 191 (cp) dirtied 6.3 MB in 121 ms on /dev/vda, faster than \
                      the disk's 25.0 MB/s (judged 18 ms after): io.weight=1 (iocost on, disk not \
                      measured: modelled at 25.0MB/s, the rate held at 25.0MB/s) memory.high=8M (1 \
                      processes, in 42 ms: iocost journal 9 ms, set-up 2 ms)";
        assert_eq!(
            parse_restrict_line(cgroup),
            Some(Reported {
                window: 121.0,
                judged_after: 18.0,
                actuator: 42.0,
                against: "25.0 MB/s".into(),
            })
        );
    }

    #[test]
    fn the_window_is_read_whatever_unit_the_bytes_are_shown_in() {
        let line = "restrict pid 9 (dd) dirtied 1.2 GB in 40 ms on /dev/nvme0n1, faster than the \
                    disk's 4.8 GB/s (judged 1 ms after): ioprio idle (1 processes, in 2 ms)";
        let read = parse_restrict_line(line).unwrap();
        assert_eq!((read.window, read.against.as_str()), (40.0, "4.8 GB/s"));
    }

    #[test]
    fn a_line_without_the_figures_is_not_read() {
        assert_eq!(
            parse_restrict_line("restrict pid 5 (x) by its backlog"),
            None
        );
    }
}
