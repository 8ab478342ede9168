//! `cargo xtask measure probe-cost | daemon-cost | detection`: the figures the issues ask for,
//! from real runs on this machine, with a baseline measured in the same run where one applies.
//! Repeats and prints medians.
use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::cmd::workspace_root;

mod detection;
pub use detection::detection;

const STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

fn ioshield() -> Command {
    Command::new(workspace_root().join("target/release/ioshield"))
}

fn scratch() -> Result<std::path::PathBuf> {
    let dir = Path::new("/var/tmp").join(format!("ioshield-measure-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Writes `mib` MiB with dd and forks `forks` short-lived processes: the events the BPF programs
/// see in a busy minute, compressed.
fn workload(dir: &Path, mib: u32, forks: u32) -> Result<Child> {
    let script = format!(
        "dd if=/dev/zero of={d}/w bs=1M count={mib} status=none; \
         for i in $(seq {forks}); do /bin/true; done; rm -f {d}/w",
        d = dir.display()
    );
    Ok(Command::new("sh").arg("-c").arg(script).spawn()?)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `f` with `kernel.bpf_stats_enabled=1`, restoring the previous value whatever happens.
fn with_bpf_stats<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    let before = std::fs::read_to_string(STATS_SYSCTL)
        .context("reading kernel.bpf_stats_enabled")?
        .trim()
        .to_string();
    std::fs::write(STATS_SYSCTL, "1").context("enabling kernel.bpf_stats_enabled")?;
    let result = f();
    std::fs::write(STATS_SYSCTL, &before).context("restoring kernel.bpf_stats_enabled")?;
    println!("kernel.bpf_stats_enabled restored to {before}");
    result
}

pub fn probe_cost(repeats: usize) -> Result<()> {
    let dir = scratch()?;
    let runs = with_bpf_stats(|| {
        let mut runs: Vec<Vec<(String, u64, u64)>> = Vec::new();
        for _ in 0..repeats {
            let top = ioshield()
                .args(["top", "--json", "--interval", "4s"])
                .stdout(Stdio::piped())
                .spawn()?;
            std::thread::sleep(Duration::from_millis(700));
            workload(&dir, 512, 300)?.wait()?;
            let out = top.wait_with_output()?;
            let v: serde_json::Value =
                serde_json::from_slice(&out.stdout).context("top --json output")?;
            let programs = v["probe"]["programs"]
                .as_array()
                .context("probe.programs")?
                .iter()
                .map(|p| {
                    (
                        p["name"].as_str().unwrap_or("?").to_string(),
                        p["run_count"].as_u64().unwrap_or(0),
                        p["run_time_ns"].as_u64().unwrap_or(0),
                    )
                })
                .collect();
            runs.push(programs);
        }
        Ok(runs)
    })?;
    let _ = std::fs::remove_dir_all(&dir);
    println!("BPF program cost over {repeats} runs (512 MiB dd + 300 forks each), medians:");
    println!("{:<22} {:>12} {:>14}", "program", "events/run", "ns/event");
    for (i, (name, _, _)) in runs[0].iter().enumerate() {
        let mut counts: Vec<f64> = runs.iter().map(|r| r[i].1 as f64).collect();
        let mut per: Vec<f64> = runs
            .iter()
            .filter(|r| r[i].1 > 0)
            .map(|r| r[i].2 as f64 / r[i].1 as f64)
            .collect();
        let per = if per.is_empty() {
            0.0
        } else {
            median(&mut per)
        };
        println!("{name:<22} {:>12.0} {per:>14.0}", median(&mut counts));
    }
    Ok(())
}

/// CPU time of all the process's threads in ns (schedstat: finer than the 10 ms of /proc/PID/stat).
fn cpu_ns(pid: u32) -> Result<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let s = std::fs::read_to_string(task?.path().join("schedstat"))?;
        total += s
            .split_whitespace()
            .next()
            .context("schedstat")?
            .parse::<u64>()?;
    }
    Ok(total)
}

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("VmRSS")
}

/// CPU seconds per hour and RSS of the daemon, idle and under a continuous heavy writer.
pub fn daemon_cost(seconds: u64) -> Result<()> {
    let dir = scratch()?;
    let config = dir.join("ioshield.toml");
    std::fs::write(
        &config,
        format!(
            "[daemon]\naction = \"dry-run\"\nstate_file = \"{}/state.json\"\n",
            dir.display()
        ),
    )?;
    let mut daemon = ioshield()
        .args(["daemon", "--config"])
        .arg(&config)
        .stderr(Stdio::null())
        .spawn()?;
    let pid = daemon.id();
    std::thread::sleep(Duration::from_secs(2));
    let measure = |label: &str, writer: Option<&mut Child>| -> Result<(f64, u64)> {
        let t0 = Instant::now();
        let c0 = cpu_ns(pid)?;
        std::thread::sleep(Duration::from_secs(seconds));
        let cpu = (cpu_ns(pid)? - c0) as f64 / 1e9;
        let wall = t0.elapsed().as_secs_f64();
        if let Some(w) = writer {
            let _ = w.kill();
            let _ = w.wait();
        }
        let per_hour = cpu / wall * 3600.0;
        let rss = rss_kib(pid)?;
        println!(
            "{label:<8} {cpu:.3} s CPU in {wall:.0} s = {per_hour:.1} s per hour ({:.3}% of a core), RSS {rss} KiB",
            cpu / wall * 100.0
        );
        Ok((per_hour, rss))
    };
    let (idle, _) = measure("idle", None)?;
    let mut writer = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "while :; do dd if=/dev/zero of={}/w bs=1M count=256 status=none; done",
            dir.display()
        ))
        .spawn()?;
    let (busy, _) = measure("writing", Some(&mut writer))?;
    println!(
        "heavy writing costs {:.1}x the idle CPU",
        busy / idle.max(1e-9)
    );
    let _ = Command::new("kill").arg(pid.to_string()).status();
    let status = daemon.wait()?;
    let _ = std::fs::remove_dir_all(&dir);
    if !status.success() {
        bail!("the daemon exited with {status}");
    }
    Ok(())
}
