//! `cargo xtask vm ci`: a few minutes of functional checks per kernel. The smoke run proves the
//! BPF programs load and count on that kernel; the short stall runs prove the test bed still
//! reproduces the stall and that a mitigation removes it (compared within the same job, since
//! the shared host makes absolute numbers noisy).
use std::{
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use super::scenario::{Guest, Run};
use crate::cmd::workspace_root;

/// Short stall runs: the innocent loads run 25 s, the offender writes from 3 s to 22 s.
const STALL_ENV: &[&str] = &["DURATION=25", "OFFENDER_START=3", "OFFENDER_STOP=22"];
const TIMEOUT: Duration = Duration::from_secs(420);
/// Without mitigation the multiwrite load must stall at least this long, or the test bed no
/// longer reproduces the problem and comparisons mean nothing.
const MIN_STALL_S: f64 = 0.5;
/// "Clearly below" no mitigation, in the same job: the longest multiwrite pause under 75% of
/// none's, and the expected wait for a pause to end (the thesis's figure of merit, which weighs
/// every pause) at most half of none's. A gate at 50% of the longest pause alone failed one
/// 6.12 run in three: when the offender has dirtied a few seconds of backlog before the first
/// tick, one pause of 2-3 s remains (see the README's bench) while the rest of the run is clean.
const MAX_LONGEST_RATIO: f64 = 0.75;
const MAX_WAIT_RATIO: f64 = 0.5;

pub fn run(kernels: &[String], out: &Path) -> Result<()> {
    let started = Instant::now();
    let guest = Guest::prepare(None)?;
    let daemon = guest.has_daemon();
    let root = workspace_root();
    let script = |name: &str| root.join("tests/vm").join(name);
    let out = if out.is_absolute() {
        out.to_path_buf()
    } else {
        root.join(out)
    };
    let (mut passed, mut failed) = (0, 0);
    let mut report = |series: &str, check: &str, result: Result<String>| match result {
        Ok(msg) => {
            passed += 1;
            println!("vm {series} {check}: ok: {msg}");
        }
        Err(e) => {
            failed += 1;
            println!("vm {series} {check}: FAILED: {e:#}");
        }
    };
    for series in kernels {
        let dir = out.join(series);
        // A scenario that exits non-zero still leaves its results: the checks read them to say
        // why, and fall back to the exit status.
        let runner = |name: &str, script_name: &str, env: &[String]| -> Result<(i32, PathBuf)> {
            let done = guest.run(&Run {
                series,
                script: &script(script_name),
                out: &dir.join(name),
                env,
                timeout: TIMEOUT,
                echo: false,
            })?;
            Ok((done.status, done.results))
        };
        let smoke_run = runner("smoke", "smoke.sh", &[]);
        report(series, "smoke", smoke_run.and_then(|(s, r)| smoke(&r, s)));

        let stall_as = |name: &str, scenario: &str, extra: &[&str]| {
            let mut env: Vec<String> = STALL_ENV.iter().map(|s| s.to_string()).collect();
            env.push(format!("SCENARIO={scenario}"));
            env.extend(extra.iter().map(|s| s.to_string()));
            let (status, results) = runner(name, "stall.sh", &env)?;
            if status != 0 {
                bail!(
                    "stall.sh exited {status}: {}",
                    last_line(&results.join("scenario.log"))
                );
            }
            pauses(&results)
        };
        // The gate tells the daemon the disk's speed, as the bench did: with the shipped
        // `bandwidth = "auto"` a 30 MB/s disk is only measured once its writeback starts, seconds
        // into the offender's run on this 4 GiB guest, and the backlog dirtied before that
        // remains (issue 10). That run is reported next to the gate, not gated, until it holds.
        let stall = |scenario: &str| stall_as(scenario, scenario, &["BANDWIDTH=30MB/s"]);
        let none = stall("none");
        report(series, "none", describe_baseline(&none));
        let mut mitigations = vec!["oracle"];
        if daemon {
            mitigations.push("ioshield");
        }
        for m in mitigations {
            let result = stall(m).and_then(|p| compare(&p, &none));
            report(series, m, result);
        }
        if daemon {
            let auto = stall_as("ioshield-auto", "ioshield", &["BANDWIDTH=auto"])
                .and_then(|p| compare(&p, &none));
            match auto {
                Ok(msg) => println!("vm {series} ioshield-auto (reported, not gated): {msg}"),
                Err(e) => println!("vm {series} ioshield-auto (reported, not gated): {e:#}"),
            }
        }
    }
    println!(
        "vm: {passed} passed, {failed} failed ({:.0}s)",
        started.elapsed().as_secs_f64()
    );
    if failed > 0 {
        bail!("{failed} vm checks failed (logs in {})", out.display());
    }
    Ok(())
}

/// Longest pause of each innocent load, in seconds.
struct Pauses {
    control: f64,
    write: f64,
    multiwrite: f64,
    multiwrite_wait: f64,
    offender_mb_s: f64,
}

impl Pauses {
    fn line(&self) -> String {
        format!(
            "longest pause control {:.3}s write {:.3}s multiwrite {:.3}s (wait {:.0} ms); \
             offender {:.0} MB/s",
            self.control,
            self.write,
            self.multiwrite,
            self.multiwrite_wait * 1e3,
            self.offender_mb_s
        )
    }
}

fn read_json(path: &Path) -> Result<Value> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn pauses(results: &Path) -> Result<Pauses> {
    let metric = |load: &str, key: &str| -> Result<f64> {
        read_json(&results.join(format!("{load}.json")))?["metrics"][key]
            .as_f64()
            .with_context(|| format!("{load}.json has no {key}"))
    };
    let longest = |load: &str| metric(load, "longest_pause_s");
    let offender = read_json(&results.join("offender.json"))?;
    Ok(Pauses {
        control: longest("control")?,
        write: longest("write")?,
        multiwrite: longest("multiwrite")?,
        multiwrite_wait: metric("multiwrite", "wait_s")?,
        offender_mb_s: offender["bytes_per_sec"].as_f64().unwrap_or(0.0) / 1e6,
    })
}

fn describe_baseline(none: &Result<Pauses>) -> Result<String> {
    let p = none.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
    if p.multiwrite < MIN_STALL_S {
        bail!(
            "no stall reproduced ({}; expected multiwrite >= {MIN_STALL_S}s)",
            p.line()
        );
    }
    Ok(p.line())
}

fn compare(mitigated: &Pauses, none: &Result<Pauses>) -> Result<String> {
    let Ok(none) = none else {
        bail!("no baseline to compare with ({})", mitigated.line());
    };
    let ratio = mitigated.multiwrite / none.multiwrite;
    if ratio > MAX_LONGEST_RATIO {
        bail!(
            "multiwrite longest pause {:.3}s is not below {:.0}% of none's {:.3}s ({})",
            mitigated.multiwrite,
            MAX_LONGEST_RATIO * 100.0,
            none.multiwrite,
            mitigated.line()
        );
    }
    if mitigated.multiwrite_wait > MAX_WAIT_RATIO * none.multiwrite_wait {
        bail!(
            "multiwrite wait {:.0} ms is over {:.0}% of none's {:.0} ms ({})",
            mitigated.multiwrite_wait * 1e3,
            MAX_WAIT_RATIO * 100.0,
            none.multiwrite_wait * 1e3,
            mitigated.line()
        );
    }
    Ok(format!(
        "{} ({:.0}% of none's multiwrite)",
        mitigated.line(),
        ratio * 100.0
    ))
}

/// The last non-empty line of a log, to quote in a one-line failure.
fn last_line(path: &Path) -> String {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(no output)")
        .to_string()
}

/// The smoke run passes when `top` printed its samples, counted the offender's dirtied bytes on
/// the data disk, and its mean rate over the samples agrees with the kernel's own accounting
/// (/proc/PID/io). Not every sample must count it: the offender can sit a whole sample in the
/// very flush stall the bed reproduces, which the agreement of the mean already accounts for.
fn smoke(results: &Path, status: i32) -> Result<String> {
    let data_dev = fs::read_to_string(results.join("data-dev"))?
        .trim()
        .to_string();
    let pid: u64 = fs::read_to_string(results.join("offender.pid"))?
        .trim()
        .parse()
        .context("offender.pid")?;
    let top = fs::read_to_string(results.join("top.json"))?;
    let samples: Vec<Value> = top
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .context("top.json is not one JSON object per line")?;
    if samples.is_empty() || status != 0 {
        // top's error is its first line; the verifier's listing may follow.
        let log = fs::read_to_string(results.join("top.log")).unwrap_or_default();
        let first = log.lines().next().unwrap_or("(no output)");
        bail!("smoke.sh exited {status}; ioshield top: {first}");
    }
    let rates: Vec<f64> = samples
        .iter()
        .map(|s| {
            s["processes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["pid"].as_u64() == Some(pid) && p["device"] == data_dev.as_str())
                .filter_map(|p| p["dirty_bytes_per_sec"].as_f64())
                .sum()
        })
        .collect();
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    let kernel_rate = proc_io_rate(&results.join("offender-io.txt"))?;
    let counted = rates.iter().filter(|&&r| r > 0.0).count();
    let msg = format!(
        "BPF loaded; offender counted on {data_dev} in {counted}/{} samples at {:.1} MB/s \
         (samples {}), /proc/PID/io says {:.1} MB/s",
        rates.len(),
        mean / 1e6,
        rates
            .iter()
            .map(|r| format!("{:.1}", r / 1e6))
            .collect::<Vec<_>>()
            .join("/"),
        kernel_rate / 1e6
    );
    // The offender itself can sit a whole sample in the very flush stall the bed reproduces
    // (seen on 6.12: nobody dirtied a page for 2 s), so not every sample must count it; what
    // must hold is that it is seen, and at a rate the kernel's own accounting agrees with.
    let ratio = mean / kernel_rate.max(1.0);
    if counted == 0 || !(0.5..=1.5).contains(&ratio) {
        bail!("{msg}; counted/kernel = {ratio:.2}, want 0.5-1.5");
    }
    Ok(msg)
}

/// write_bytes per second between the two lines `label uptime write_bytes` smoke.sh recorded.
fn proc_io_rate(path: &Path) -> Result<f64> {
    let text = fs::read_to_string(path)?;
    let nums: Vec<Vec<f64>> = text
        .lines()
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .collect();
    match nums.as_slice() {
        [a, b] if a.len() == 2 && b.len() == 2 && b[0] > a[0] => Ok((b[1] - a[1]) / (b[0] - a[0])),
        _ => bail!("{} is incomplete: {text:?}", path.display()),
    }
}
