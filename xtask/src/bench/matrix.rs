//! Running the matrix: one guest boot per (repeat, kernel, scenario), repeats outermost so that
//! the shared host's slow moments spread over all scenarios instead of hitting one.
use std::{
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::{
    cmd::{cargo, workspace_root},
    vm::scenario::{Guest, Run},
};

pub struct Plan {
    pub kernels: Vec<String>,
    pub scenarios: Vec<String>,
    pub repeat: usize,
    pub duration: u64,
    /// Seconds the loads go on after the `load` offender stops (`None`: as long as it waited
    /// to start), to see what its release and its backlog do.
    pub after: Option<u64>,
    /// `load`, `cp`, `cpslow`, `tar` or `tarbig` (stall.sh's OFFENDER).
    pub offender: String,
    /// The `load` offender's pace, or `cpslow`'s source's, bytes per second (stall.sh's
    /// OFFENDER_RATE; `None`: as fast as it can). Read through [`Plan::pace`].
    pub offender_rate: Option<u64>,
    pub out: PathBuf,
    /// The data disk's write speed, bytes per second.
    pub disk_bps: u64,
    /// Where the innocent loads write (stall.sh's INNOCENTS_ON): `data`, the offender's disk,
    /// or `fast`, a disk with no throttle.
    pub innocents_on: String,
}

/// The longest slug: a run's directory and its timeline (`timeline-SLUG-6.12.png`) must stay
/// under the 255 bytes a file name may have. A scenario that presets iocost spells out its model
/// and qos lines (about 260 characters), and drawing its timeline failed with "File name too
/// long" after every run had finished.
const SLUG_MAX: usize = 100;

/// A scenario as a file name: `ioshield:limit = 0.8` -> `ioshield_limit___0.8`. A longer one
/// keeps its start and ends with a hash of the whole, so that two scenarios differing only at
/// the end do not share a directory.
pub fn slug(scenario: &str) -> String {
    let full: String = scenario
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if full.len() <= SLUG_MAX {
        return full;
    }
    // FNV-1a: stable across builds and runs, unlike std's hasher, so `--report-only` finds the
    // directories a bench wrote earlier.
    let hash = scenario.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{}-{hash:016x}", &full[..SLUG_MAX - 17])
}

/// `ioshield:limit = 0.8` -> (`ioshield`, Some(`limit = 0.8`)).
pub fn split_variant(scenario: &str) -> (&str, Option<&str>) {
    match scenario.split_once(':') {
        Some((base, lines)) => (base, Some(lines)),
        None => (scenario, None),
    }
}

impl Plan {
    /// `OUT/runs/<scenario>/<kernel>/r<n>`; the guest's results land in its `results/`.
    pub fn run_dir(&self, scenario: &str, kernel: &str, repeat: usize) -> PathBuf {
        self.out
            .join("runs")
            .join(slug(scenario))
            .join(kernel)
            .join(format!("r{repeat}"))
    }

    /// The offender's pace, bytes per second: what was asked, or for `cpslow`, whose source
    /// must have one, 14 MB/s (a writer under the 30 MB/s disk's speed).
    pub fn pace(&self) -> Option<u64> {
        const CPSLOW_SOURCE: u64 = 14_000_000;
        self.offender_rate
            .or((self.offender == "cpslow").then_some(CPSLOW_SOURCE))
    }

    /// The offender's window inside the loads' run: 5 s..45 s of 50 s, and for
    /// short runs (as `vm ci`) 3 s..duration-3 s so it still stops before the loads do; with
    /// `after`, it stops that long before they do.
    pub fn offender_window(&self) -> (u64, u64) {
        let start = if self.duration >= 40 { 5 } else { 3 };
        let after = self.after.unwrap_or(start);
        (start, self.duration.saturating_sub(after).max(start + 1))
    }

    fn env(&self, scenario: &str) -> Vec<String> {
        let (start, stop) = self.offender_window();
        let (base, lines) = split_variant(scenario);
        let mut env = vec![
            format!("SCENARIO={base}"),
            format!("OFFENDER={}", self.offender),
            format!("DURATION={}", self.duration),
            format!("OFFENDER_START={start}"),
            format!("OFFENDER_STOP={stop}"),
            "TIMELINE=1".to_string(),
        ];
        env.push(format!("ORACLE_WBPS={}", self.disk_bps * 2 / 3));
        env.push(format!("INNOCENTS_ON={}", self.innocents_on));
        if let Some(rate) = self.pace() {
            env.push(format!("OFFENDER_RATE={rate}"));
        }
        if scenario.starts_with("ioshield") {
            env.push("BPF_STATS=1".to_string());
            // Every period the disk's speed is judged over, with why it counted or not, and how
            // long the cgroups beside a restriction waited on I/O while its speed probe heard
            // them.
            env.push(
                "IOSHIELD_LOG=info,ioshield::detect::bandwidth=debug,ioshield::others=debug"
                    .to_string(),
            );
        }
        if let Some(lines) = lines {
            env.extend(variant_env(lines));
        }
        env
    }
}

/// The ioshield binary every run uses: a copy, so a rebuild of the tree mid-bench changes nothing.
pub fn binary(given: Option<&Path>, out: &Path) -> Result<PathBuf> {
    let source = match given {
        Some(p) => p.to_path_buf(),
        None => {
            crate::setup::ensure()?;
            cargo(&["build", "--release", "--package", "ioshield"])?;
            workspace_root().join("target/release/ioshield")
        }
    };
    fs::create_dir_all(out)?;
    let copy = out.join("ioshield");
    fs::copy(&source, &copy).with_context(|| format!("copying {}", source.display()))?;
    Ok(copy)
}

pub fn run_all(plan: &Plan, bin: &Path) -> Result<()> {
    let guest = Guest::prepare(Some(bin))?;
    let total = plan.repeat * plan.kernels.len() * plan.scenarios.len();
    let started = Instant::now();
    let mut n = 0;
    for repeat in 0..plan.repeat {
        for kernel in &plan.kernels {
            for scenario in &plan.scenarios {
                n += 1;
                let dir = plan.run_dir(scenario, kernel, repeat);
                eprintln!(
                    "xtask: bench: [{n}/{total}] {scenario} on {kernel}, repeat {} ({:.0} s so far)",
                    repeat + 1,
                    started.elapsed().as_secs_f64()
                );
                run_one(&guest, plan, scenario, kernel, &dir)?;
            }
        }
    }
    eprintln!(
        "xtask: bench: {total} runs in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// One run, tried a second time when it left no results: the runner retries boots that crash
/// early or panic, and this covers whatever else a long matrix runs into.
fn run_one(guest: &Guest, plan: &Plan, scenario: &str, kernel: &str, dir: &Path) -> Result<()> {
    let script = workspace_root().join("tests/vm/stall.sh");
    let env = plan.env(scenario);
    let mut last = String::new();
    for attempt in 1..=2 {
        let _ = fs::remove_dir_all(dir);
        fs::create_dir_all(dir)?;
        let done = guest.run(&Run {
            series: kernel,
            script: &script,
            out: dir,
            env: &env,
            timeout: Duration::from_secs(plan.duration + 300),
            echo: false,
            data_write_bps: Some(plan.disk_bps),
        });
        // A scenario that exits non-zero still counts when it left the loads' numbers.
        last = match &done {
            Ok(d) => format!(
                "xtask: vm {kernel}: scenario exit {} in {:.0}s, results in {}",
                d.status,
                d.wall.as_secs_f64(),
                d.results.display()
            ),
            Err(e) => format!("xtask: {e:#}"),
        };
        fs::write(dir.join("xtask.log"), format!("{last}\n"))
            .with_context(|| format!("writing {}", dir.display()))?;
        if dir.join("results/write.json").is_file() {
            return Ok(());
        }
        eprintln!("xtask: bench: attempt {attempt} failed: {last}");
    }
    bail!("{scenario} on {kernel} failed twice: {last}")
}

/// A scenario's `;`-separated variant lines as stall.sh's environment: `bdi.KNOB = V` lines set
/// the data disk's BDI knobs (BDI), `iocost.model = ...` and `iocost.qos = ...` its iocost
/// (IOCOST_MODEL, IOCOST_QOS), `loads = ...` the innocent loads (LOADS), `lru_gen = ...` the
/// guest's multi-gen LRU (LRU_GEN), `daemon.KEY = V` lines the daemon's `[daemon]` section
/// (IOSHIELD_DAEMON), the others go into its device section (IOSHIELD_DEVICE).
fn variant_env(lines: &str) -> Vec<String> {
    let (mut bdi, mut device, mut env, mut earlier, mut daemon) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for line in lines.split(';').map(str::trim).filter(|l| !l.is_empty()) {
        match line.split_once('=').map(|(k, v)| (k.trim(), v.trim())) {
            Some((key, value)) if key.starts_with("bdi.") => {
                bdi.push(format!("{}={value}", &key["bdi.".len()..]));
            }
            // stall.sh writes the data disk's `bandwidth` itself (auto unless told).
            Some(("bandwidth", value)) => {
                env.push(format!("BANDWIDTH={}", value.trim_matches('"')));
            }
            // A line of the daemon's `[daemon]` section: `daemon.refresh_dirty_counts = "off"`.
            Some((key, value)) if key.starts_with("daemon.") => {
                daemon.push(format!("{} = {value}", &key["daemon.".len()..]));
            }
            // A speed the daemon keeps from an earlier run: `earlier.IDENTITY = BYTES_PER_S`.
            Some((key, value)) if key.starts_with("earlier.") => {
                earlier.push(format!("{}={value}", &key["earlier.".len()..]));
            }
            // The data disk's ext4 options: `mount = data=writeback`.
            Some(("mount", value)) => env.push(format!("DATA_MOUNT_OPTS={value}")),
            // The innocent loads: `loads = control write multiwrite appender`.
            Some(("loads", value)) => env.push(format!("LOADS={value}")),
            // The kernel's multi-gen LRU: `lru_gen = n` turns it off (6.12's Debian kernel has
            // it on, 6.1's off).
            Some(("lru_gen", value)) => env.push(format!("LRU_GEN={value}")),
            Some((key, value)) if key.starts_with("iocost.") => {
                let name = key["iocost.".len()..].to_uppercase();
                env.push(format!("IOCOST_{name}={value}"));
            }
            _ => device.push(line),
        }
    }
    if !bdi.is_empty() {
        env.push(format!("BDI={}", bdi.join(" ")));
    }
    if !earlier.is_empty() {
        env.push(format!("EARLIER_SPEEDS={}", earlier.join(" ")));
    }
    if !daemon.is_empty() {
        env.push(format!("IOSHIELD_DAEMON={}", daemon.join(";")));
    }
    if !device.is_empty() {
        env.push(format!("IOSHIELD_DEVICE={}", device.join(";")));
    }
    env
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_long_scenario_makes_a_short_distinct_file_name() {
        assert_eq!(super::slug("ioshield:limit = 0.8"), "ioshield_limit___0.8");
        let preset = |pct: u32| {
            format!(
                "ioshield:bandwidth = \"10MB/s\";iocost.model = ctrl=user model=linear \
                 rbps=1000000000 rseqiops=100000 rrandiops=100000 wbps=10000000 wseqiops=2441 \
                 wrandiops=2441;iocost.qos = enable=1 ctrl=user rpct=95.00 rlat=5000 wpct=95.00 \
                 wlat=5000 min={pct}.00 max={pct}.00"
            )
        };
        let (a, b) = (super::slug(&preset(100)), super::slug(&preset(75)));
        assert_eq!(a.len(), super::SLUG_MAX);
        assert!(
            a.starts_with("ioshield_bandwidth____10MB_s__iocost.model"),
            "{a}"
        );
        assert_ne!(a, b);
        assert_eq!(a, super::slug(&preset(100)));
        assert!(format!("timeline-{a}-6.12.png").len() < 255);
    }

    /// `cpslow`'s source is paced even when no rate is asked (stall.sh would do the same, but
    /// the bench's table says the pace it ran at); `load` runs as fast as it can unless asked.
    #[test]
    fn a_slow_copy_always_gets_its_source_s_pace() {
        let plan = |offender: &str, offender_rate| super::Plan {
            kernels: vec!["6.12".into()],
            scenarios: vec!["ioshield".into()],
            repeat: 1,
            duration: 50,
            after: None,
            offender: offender.into(),
            offender_rate,
            out: "target/x".into(),
            disk_bps: 30_000_000,
            innocents_on: "data".into(),
        };
        let rate = |p: &super::Plan| {
            p.env("ioshield")
                .into_iter()
                .find(|e| e.starts_with("OFFENDER_RATE="))
        };
        assert_eq!(
            rate(&plan("cpslow", None)).as_deref(),
            Some("OFFENDER_RATE=14000000")
        );
        assert_eq!(
            rate(&plan("cpslow", Some(9_000_000))).as_deref(),
            Some("OFFENDER_RATE=9000000")
        );
        assert_eq!(rate(&plan("load", None)), None);
    }

    #[test]
    fn variant_lines_go_to_the_daemon_the_bdi_iocost_the_disks_speed_or_the_loads() {
        assert_eq!(
            super::variant_env(
                "limit = 0.75; bdi.max_bytes = 8000000;bdi.strict_limit = 1;\
                 iocost.qos = enable=1 min=100;memory_high = \"8MiB\";bandwidth = \"25MB/s\";earlier.serial:data = 25100000;\
                 loads = control write appender;lru_gen = n;daemon.refresh_dirty_counts = \"off\""
            ),
            [
                "IOCOST_QOS=enable=1 min=100",
                "BANDWIDTH=25MB/s",
                "LOADS=control write appender",
                "LRU_GEN=n",
                "BDI=max_bytes=8000000 strict_limit=1",
                "EARLIER_SPEEDS=serial:data=25100000",
                "IOSHIELD_DAEMON=refresh_dirty_counts = \"off\"",
                "IOSHIELD_DEVICE=limit = 0.75;memory_high = \"8MiB\"",
            ]
        );
    }
}
