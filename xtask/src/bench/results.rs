//! Reading one run's results directory (written by `tests/vm/stall.sh`) into numbers.
use std::{fs, path::Path};

use anyhow::{Context as _, Result};
use ioshield_tests::load::record::LoadRecord;

use super::matrix::Plan;

/// The innocent loads, in the order tables list them.
pub const LOADS: &[&str] = &[
    "control",
    "write",
    "multiwrite",
    "commit",
    "appender",
    "bulk",
];
/// Loads every run has; `commit` came later, and runs without it still count; a scenario may
/// run others in place of `multiwrite` and `commit` (`loads = control write appender`).
const REQUIRED_LOADS: usize = 2;

pub struct Load {
    pub name: String,
    pub longest_pause_s: f64,
    pub total_paused_s: f64,
    pub wait_s: f64,
    /// Median and 99th percentile of every cycle's time beyond its nominal length (for the
    /// commit load: the commit's latency).
    pub p50_s: f64,
    pub p99_s: f64,
    /// (seconds since the run's start, pause in seconds) of every late cycle.
    pub pauses: Vec<(f64, f64)>,
}

/// One sample of `timeline.txt`.
pub struct Sample {
    pub t: f64,
    pub dirty_mb: f64,
    pub writeback_mb: f64,
}

pub struct Run {
    pub scenario: String,
    pub kernel: String,
    pub repeat: usize,
    pub loads: Vec<Load>,
    /// Offender's first write to the daemon's first `restrict` line.
    pub detect_latency_s: Option<f64>,
    pub daemon_cpu_percent: Option<f64>,
    /// The daemon's largest RSS once it has run [`RSS_SETTLE_S`].
    pub daemon_rss_bytes: Option<u64>,
    /// Its largest RSS at all, its start included.
    pub daemon_rss_peak_bytes: Option<u64>,
    pub timeline: Vec<Sample>,
    /// The offender's first and last write, seconds since the run's start.
    pub offender: Option<(f64, f64)>,
    /// What the offender wrote per second: the load generator's bytes over its span, or a
    /// fixed-size job's size over its time to `sync`.
    pub offender_bytes_per_sec: Option<f64>,
    /// A fixed-size job: seconds from its start to its own end, before `sync` (a copy to a
    /// slow disk ends long before its data is there when the page cache takes it).
    pub offender_exited_after_s: Option<f64>,
    /// (seconds since the run's start, "restrict" | "release" | "measured"): "measured" is the
    /// restriction moving to the disk's speed measured under a backlog (the speed probe's end).
    pub actions: Vec<(f64, String)>,
    /// The first restriction to the disk's first measurement after it.
    pub measured_after_s: Option<f64>,
    /// (seconds since the run's start, the phase the daemon's restriction entered then).
    pub phases: Vec<(f64, Phase)>,
    pub bpf: Vec<BpfProgram>,
}

/// A BPF program's statistics (kernel.bpf_stats_enabled), from the daemon's fdinfo.
pub struct BpfProgram {
    pub tag: String,
    pub kind: String,
    pub run_cnt: u64,
    pub run_time_ns: u64,
}

impl Run {
    pub fn load(&self, name: &str) -> Option<&Load> {
        self.loads.iter().find(|l| l.name == name)
    }

    /// The phase the daemon's restriction was in at `t` (seconds since the run's start).
    pub fn phase_at(&self, t: f64) -> Phase {
        self.phases
            .iter()
            .take_while(|(at, _)| *at <= t)
            .last()
            .map_or(Phase::Before, |(_, p)| *p)
    }
}

#[cfg(test)]
impl Run {
    /// A run with nothing measured, for tests to fill in.
    pub fn empty(scenario: &str, kernel: &str) -> Run {
        Run {
            scenario: scenario.to_string(),
            kernel: kernel.to_string(),
            repeat: 0,
            loads: Vec::new(),
            detect_latency_s: None,
            daemon_cpu_percent: None,
            daemon_rss_bytes: None,
            daemon_rss_peak_bytes: None,
            timeline: Vec::new(),
            offender: None,
            offender_bytes_per_sec: None,
            offender_exited_after_s: None,
            actions: Vec::new(),
            measured_after_s: None,
            phases: Vec::new(),
            bpf: Vec::new(),
        }
    }
}

/// What the daemon's restriction of the offender was doing, by its log: where the innocents'
/// pauses begin says which part of a restriction costs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// No restriction yet.
    Before,
    /// A restriction's first second: its set-up (iocost turned on, the move), and what the
    /// writer dirtied before it still being written.
    Starting,
    /// The writer held at a rate (assumed, a lower bound, or measured).
    Held,
    /// A speed probe's window: the rate left to the kernel's latency control, bursts allowed.
    Window,
    /// A speed probe's forced rate, raised until the disk shows its speed.
    Forced,
    /// Released.
    Released,
}

impl Phase {
    pub const ALL: [Phase; 6] = [
        Phase::Before,
        Phase::Starting,
        Phase::Held,
        Phase::Window,
        Phase::Forced,
        Phase::Released,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Phase::Before => "before",
            Phase::Starting => "first second",
            Phase::Held => "held",
            Phase::Window => "window",
            Phase::Forced => "forced",
            Phase::Released => "released",
        }
    }
}

/// How long [`Phase::Starting`] lasts.
const STARTING_S: f64 = 1.0;

/// Every run of the plan that left results; missing ones are reported and skipped.
pub fn collect(plan: &Plan) -> Result<Vec<Run>> {
    let mut runs = Vec::new();
    for scenario in &plan.scenarios {
        for kernel in &plan.kernels {
            for repeat in 0..plan.repeat {
                let dir = plan.run_dir(scenario, kernel, repeat).join("results");
                match read(&dir, scenario, kernel, repeat) {
                    Ok(r) => runs.push(r),
                    Err(e) => eprintln!("xtask: bench: skipping {}: {e:#}", dir.display()),
                }
            }
        }
    }
    Ok(runs)
}

fn read(dir: &Path, scenario: &str, kernel: &str, repeat: usize) -> Result<Run> {
    let mut records: Vec<(&str, LoadRecord)> = LOADS[..REQUIRED_LOADS]
        .iter()
        .map(|l| Ok((*l, LoadRecord::load(&dir.join(format!("{l}.json")))?)))
        .collect::<Result<_>>()?;
    records.extend(LOADS[REQUIRED_LOADS..].iter().filter_map(|l| {
        LoadRecord::load(&dir.join(format!("{l}.json")))
            .ok()
            .map(|r| (*l, r))
    }));
    // Time zero: the first load's start, so every series of the run shares one axis.
    let t0 = records
        .iter()
        .map(|(_, r)| r.start_s)
        .fold(f64::INFINITY, f64::min);
    let loads = records
        .iter()
        .map(|(name, r)| load(name, r, t0))
        .collect::<Result<_>>()?;
    let offender = LoadRecord::load(&dir.join("offender.json")).ok();
    let offender_span = offender
        .as_ref()
        .and_then(|o| Some((o.start_s - t0, o.cycle_ends_s.last()? - t0)));
    let (actions, phases) = match (
        clock_offset(dir),
        fs::read_to_string(dir.join("daemon.log")),
    ) {
        (Some(offset), Ok(log)) => (
            daemon_actions(&log, offset, t0),
            daemon_phases(&log, offset, t0),
        ),
        _ => (Vec::new(), Vec::new()),
    };
    let detect_latency_s = offender_span.and_then(|(start, _)| {
        actions
            .iter()
            .find(|(_, a)| a == "restrict")
            .map(|(t, _)| t - start)
    });
    let first = |kind: &str| actions.iter().find(|(_, a)| a == kind).map(|(t, _)| *t);
    let measured_after_s = first("restrict").and_then(|restrict| {
        actions
            .iter()
            .find(|(t, a)| a == "measured" && *t >= restrict)
            .map(|(t, _)| t - restrict)
    });
    let (timeline, cpu, rss) = timeline(dir, t0);
    Ok(Run {
        scenario: scenario.to_string(),
        kernel: kernel.to_string(),
        repeat,
        loads,
        detect_latency_s,
        daemon_cpu_percent: cpu,
        daemon_rss_bytes: rss.settled,
        daemon_rss_peak_bytes: rss.peak,
        timeline,
        offender: offender_span,
        offender_bytes_per_sec: offender.as_ref().map(|o| o.bytes_per_sec),
        offender_exited_after_s: offender
            .as_ref()
            .and_then(|o| Some(o.exited_s? - o.start_s)),
        actions,
        measured_after_s,
        phases,
        bpf: bpf_stats(dir),
    })
}

fn load(name: &str, r: &LoadRecord, t0: f64) -> Result<Load> {
    let m = r
        .metrics
        .with_context(|| format!("{name}.json has no metrics"))?;
    let mut previous = r.start_s;
    let mut pauses = Vec::new();
    let mut excess = Vec::with_capacity(r.cycle_ends_s.len());
    for &end in &r.cycle_ends_s {
        let pause = end - previous - r.nominal_s;
        excess.push(pause.max(0.0));
        if pause > 0.0 {
            // Plotted where the pause ended, the moment the load noticed it.
            pauses.push((end - t0, pause));
        }
        previous = end;
    }
    excess.sort_by(f64::total_cmp);
    Ok(Load {
        name: name.to_string(),
        longest_pause_s: m.longest_pause_s,
        total_paused_s: m.total_paused_s,
        wait_s: m.wait_s,
        p50_s: percentile(&excess, 0.50),
        p99_s: percentile(&excess, 0.99),
        pauses,
    })
}

/// The `q` quantile of sorted `v` (nearest rank); 0 when empty.
fn percentile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// realtime - monotonic, from `clock.txt` ("realtime R monotonic M").
pub fn clock_offset(dir: &Path) -> Option<f64> {
    let text = fs::read_to_string(dir.join("clock.txt")).ok()?;
    let f: Vec<&str> = text.split_whitespace().collect();
    match f.as_slice() {
        ["realtime", r, "monotonic", m, ..] => {
            Some(r.parse::<f64>().ok()? - m.parse::<f64>().ok()?)
        }
        _ => None,
    }
}

/// `restrict pid` / `release pid` lines of the daemon's log, and `retune pid` lines that move a
/// restriction to the disk's measured speed (`the disk now measures`), on the loads' clock.
fn daemon_actions(log: &str, offset: f64, t0: f64) -> Vec<(f64, String)> {
    log.lines()
        .filter_map(|line| {
            let kind = if line.contains("INFO retune pid") && line.contains("now measures") {
                "measured"
            } else {
                ["restrict", "release"]
                    .into_iter()
                    .find(|a| line.contains(&format!("INFO {a} pid")))?
            };
            let wall = rfc3339_seconds(line.split_whitespace().next()?)?;
            Some((wall - offset - t0, kind.to_string()))
        })
        .collect()
}

/// The phases of the daemon's restrictions (`restrict`, `retune` and `release` lines), on the
/// loads' clock. A retune's reason names the speed probe's window ("left to the kernel's
/// latency control") and its forced rate ("raised every"); any other holds the writer.
fn daemon_phases(log: &str, offset: f64, t0: f64) -> Vec<(f64, Phase)> {
    let mut phases: Vec<(f64, Phase)> = Vec::new();
    for line in log.lines() {
        let phase = if line.contains("INFO restrict pid") {
            Phase::Starting
        } else if line.contains("INFO release pid") {
            Phase::Released
        } else if line.contains("INFO retune pid") {
            if line.contains("left to the kernel's latency control") {
                Phase::Window
            } else if line.contains("raised every") {
                Phase::Forced
            } else {
                Phase::Held
            }
        } else {
            continue;
        };
        let Some(wall) = line.split_whitespace().next().and_then(rfc3339_seconds) else {
            continue;
        };
        let t = wall - offset - t0;
        if let Some(&(start, Phase::Starting)) = phases.last()
            && t > start + STARTING_S
        {
            phases.push((start + STARTING_S, Phase::Held));
        }
        phases.push((t, phase));
    }
    if let Some(&(start, Phase::Starting)) = phases.last() {
        phases.push((start + STARTING_S, Phase::Held));
    }
    phases
}

/// Seconds since the epoch of a UTC timestamp like `2026-11-22T00:33:11.811095Z` (the format of
/// the daemon's tracing output).
pub fn rfc3339_seconds(s: &str) -> Option<f64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>());
    let (y, mo, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':');
    let (h, mi) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let sec = t.next()?.parse::<f64>().ok()?;
    // Howard Hinnant's days_from_civil.
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (mo + if mo > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + mi * 60) as f64 + sec)
}

/// Seconds after its first sample from which the daemon's RSS counts as settled: in its first
/// second it parses the kernel's BTF and loads its BPF object, and a sample that falls there
/// reads 24-34 MiB against 13-15 MiB afterwards (6.12 bed, docs/bench/stick.md). A table
/// that took the largest sample showed whichever run's sampler happened to hit that second.
const RSS_SETTLE_S: f64 = 2.0;

/// The daemon's RSS over a run, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Rss {
    settled: Option<u64>,
    peak: Option<u64>,
}

/// The vmstat series, and the daemon's CPU (average over the run) and RSS.
fn timeline(dir: &Path, t0: f64) -> (Vec<Sample>, Option<f64>, Rss) {
    let Ok(text) = fs::read_to_string(dir.join("timeline.txt")) else {
        return (Vec::new(), None, Rss::default());
    };
    const PAGE_MB: f64 = 4096.0 / 1e6;
    // /proc/PID/stat counts in USER_HZ, 100 on every Linux architecture ioshield supports.
    const TICKS_PER_S: f64 = 100.0;
    let mut samples = Vec::new();
    let mut ticks: Vec<(f64, f64)> = Vec::new();
    let mut rss_kb: Vec<(f64, u64)> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [up, dirty, wb, rest @ ..] = f.as_slice() else {
            continue;
        };
        let (Ok(up), Ok(dirty), Ok(wb)) =
            (up.parse::<f64>(), dirty.parse::<f64>(), wb.parse::<f64>())
        else {
            continue;
        };
        samples.push(Sample {
            t: up - t0,
            dirty_mb: dirty * PAGE_MB,
            writeback_mb: wb * PAGE_MB,
        });
        if let [tk, rss, ..] = rest {
            if let Ok(tk) = tk.parse::<f64>() {
                ticks.push((up, tk));
            }
            if let Ok(kb) = rss.parse::<u64>() {
                rss_kb.push((up, kb));
            }
        }
    }
    let cpu = match (ticks.first(), ticks.last()) {
        (Some(a), Some(b)) if b.0 > a.0 => Some((b.1 - a.1) / TICKS_PER_S / (b.0 - a.0) * 100.0),
        _ => None,
    };
    let largest = |from: f64| {
        rss_kb
            .iter()
            .filter(|(up, _)| *up >= from)
            .map(|(_, kb)| kb * 1024)
            .max()
    };
    let rss = Rss {
        settled: rss_kb
            .first()
            .and_then(|(start, _)| largest(start + RSS_SETTLE_S)),
        peak: largest(f64::NEG_INFINITY),
    };
    (samples, cpu, rss)
}

/// `bpf-stats.txt`: one line per program, `key: value` pairs from fdinfo.
fn bpf_stats(dir: &Path) -> Vec<BpfProgram> {
    let Ok(text) = fs::read_to_string(dir.join("bpf-stats.txt")) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let get = |k: &str| {
                words
                    .iter()
                    .position(|w| *w == k)
                    .and_then(|i| words.get(i + 1))
                    .map(|s| s.to_string())
            };
            Some(BpfProgram {
                tag: get("prog_tag:")?,
                kind: get("prog_type:").unwrap_or_default(),
                run_cnt: get("run_cnt:")?.parse().ok()?,
                run_time_ns: get("run_time_ns:")?.parse().ok()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run with `loads = control write appender`: each record keeps its own name, whichever
    /// of the optional loads ran.
    #[test]
    fn optional_loads_keep_their_names() {
        let tmp = tempfile::Builder::new()
            .prefix("ioshield-loads-")
            .tempdir()
            .unwrap();
        let dir = tmp.path();
        for (name, nominal, late) in [
            ("control", 0.05, 0.0),
            ("write", 0.05, 0.1),
            ("appender", 1.0, 0.3),
        ] {
            let ends = vec![10.0 + nominal, 10.0 + 2.0 * nominal + late];
            LoadRecord::new(name, nominal, 10.0, ends, 4096)
                .save(&dir.join(format!("{name}.json")))
                .unwrap();
        }
        let run = read(dir, "ioshield", "6.12", 0).unwrap();
        let names: Vec<&str> = run.loads.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["control", "write", "appender"]);
        assert!((run.load("appender").unwrap().longest_pause_s - 0.3).abs() < 1e-6);
        assert!(run.load("commit").is_none());
    }

    /// stall.sh's record of a fixed-size job: its own end (`exited_s`) before the `sync` its
    /// last cycle end waits for.
    #[test]
    fn a_jobs_end_and_its_data_on_the_disk() {
        let tmp = tempfile::Builder::new()
            .prefix("ioshield-job-")
            .tempdir()
            .unwrap();
        let dir = tmp.path();
        for name in ["control", "write"] {
            LoadRecord::new(name, 0.05, 10.0, vec![10.05, 10.1], 4096)
                .save(&dir.join(format!("{name}.json")))
                .unwrap();
        }
        let job = |exited: &str| {
            format!(
                "{{\"load\":\"offender-cp\",\"pid\":7,\"nominal_s\":0,\"start_s\":15.5,\
                 \"cycle_ends_s\":[58.0],\"metrics\":null,\"bytes_written\":400000000,\
                 \"bytes_per_sec\":9411764.7{exited}}}\n"
            )
        };
        fs::write(dir.join("offender.json"), job(",\"exited_s\":18.8")).unwrap();
        let run = read(dir, "none", "6.12", 0).unwrap();
        assert!((run.offender_exited_after_s.unwrap() - 3.3).abs() < 1e-9);
        let (start, end) = run.offender.unwrap();
        assert!((end - start - 42.5).abs() < 1e-9);
        // Records from before stall.sh wrote it: no end of the job's own.
        fs::write(dir.join("offender.json"), job("")).unwrap();
        let run = read(dir, "none", "6.12", 0).unwrap();
        assert_eq!(run.offender_exited_after_s, None);
        assert!(run.offender.is_some());
    }

    #[test]
    fn the_daemons_rss_after_its_start_and_at_its_peak() {
        let tmp = tempfile::Builder::new()
            .prefix("ioshield-rss-")
            .tempdir()
            .unwrap();
        let dir = tmp.path();
        // uptime, nr_dirty, nr_writeback, daemon ticks, daemon RSS KiB ("-" before it runs).
        fs::write(
            dir.join("timeline.txt"),
            "46.2 10 0 - -\n46.75 10 0 12 33728\n47.3 10 0 20 13816\n\
             48.8 10 0 25 14020\n49.3 10 0 30 13900\n",
        )
        .unwrap();
        let (samples, cpu, rss) = timeline(dir, 46.0);
        assert_eq!(samples.len(), 5);
        assert!(cpu.is_some_and(|c| c > 0.0));
        assert_eq!(
            rss,
            Rss {
                // 48.8 s is the first sample 2 s after the daemon's first (46.75 s).
                settled: Some(14020 * 1024),
                peak: Some(33728 * 1024),
            }
        );
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[3.0], 0.99), 3.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn the_daemons_decisions_on_the_loads_clock() {
        let log = "\
1970-01-01T00:00:10.000000Z  INFO restrict pid 194 (ioshield-load) dirtied 6.3 MB
1970-01-01T00:00:20.000000Z  INFO retune pid 194 on /dev/vda: io.weight=1 (the disk's speed is not measured after 10s: the rate held at 50.0 MB/s at least)
1970-01-01T00:00:40.500000Z  INFO retune pid 194 on /dev/vda: io.weight=1 (the disk now measures 90.2 MB/s)
1970-01-01T00:00:51.000000Z  INFO release pid 194 (ioshield-load) on /dev/vda: nothing of it is left
";
        let actions = daemon_actions(log, 2.0, 3.0);
        let kinds: Vec<(f64, &str)> = actions.iter().map(|(t, k)| (*t, k.as_str())).collect();
        assert_eq!(
            kinds,
            [(5.0, "restrict"), (35.5, "measured"), (46.0, "release")]
        );
    }

    fn empty_run() -> Run {
        Run::empty("", "")
    }

    #[test]
    fn the_restrictions_phases_on_the_loads_clock() {
        let log = "\
1970-01-01T00:00:10.000000Z  INFO restrict pid 232 (cp) dirtied 6.3 MB in 67 ms
1970-01-01T00:00:17.000000Z  INFO retune pid 232 on /dev/vda: io.weight=1 (the disk's speed is not known after 7s: its rate left to the kernel's latency control until 10s, to see whether the disk has room)
1970-01-01T00:00:20.000000Z  INFO retune pid 232 on /dev/vda: io.weight=1 (the disk's speed is not measured after 10s: the rate held at 25.0 MB/s (it wrote 21.6 MB/s with 1.08 writes in flight: no room))
1970-01-01T00:00:40.000000Z  INFO retune pid 232 on /dev/vda: io.weight=1 (the disk's speed is not measured after 30s: the rate held at 31.2 MB/s at least (it wrote 24 MB/s with 1.1 writes in flight: a quarter more), raised every 5s until the disk shows its speed)
1970-01-01T00:00:50.000000Z  INFO release pid 232 (cp) on /dev/vda: nothing of it is left
1970-01-01T00:01:00.000000Z  INFO restrict pid 240 (cp) dirtied 6.3 MB in 67 ms
1970-01-01T00:01:00.500000Z  INFO retune pid 240 on /dev/vda: io.weight=1 (the disk now measures 30 MB/s)
";
        let run = Run {
            phases: daemon_phases(log, 2.0, 3.0),
            ..empty_run()
        };
        assert_eq!(
            run.phases,
            [
                (5.0, Phase::Starting),
                (6.0, Phase::Held),
                (12.0, Phase::Window),
                (15.0, Phase::Held),
                (35.0, Phase::Forced),
                (45.0, Phase::Released),
                (55.0, Phase::Starting),
                (55.5, Phase::Held),
            ]
        );
        assert_eq!(run.phase_at(4.9), Phase::Before);
        assert_eq!(run.phase_at(5.5), Phase::Starting);
        assert_eq!(run.phase_at(13.0), Phase::Window);
        assert_eq!(run.phase_at(50.0), Phase::Released);
        assert_eq!(run.phase_at(56.0), Phase::Held);
        // The report indexes its columns by the phase's discriminant.
        for (i, p) in Phase::ALL.iter().enumerate() {
            assert_eq!(*p as usize, i, "{p:?}");
        }
    }

    #[test]
    fn parses_tracing_timestamps() {
        assert_eq!(rfc3339_seconds("1970-01-01T00:00:01.5Z"), Some(1.5));
        // date -u -d 2026-11-22T00:33:11Z +%s
        assert_eq!(
            rfc3339_seconds("2026-11-22T00:33:11.000000Z"),
            Some(1_795_307_591.0)
        );
    }
}
