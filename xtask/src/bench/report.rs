//! The bench's outputs: a markdown table (also printed) and the JSON of every run.
use std::fmt::Write as _;

use anyhow::Result;
use serde_json::json;

use super::{
    frontier,
    matrix::Plan,
    results::{LOADS, Phase, Run},
    stats::{Summary, summarize},
};

/// The loads the tables compare; `control` does no I/O and only shows the host's noise.
pub const TABLE_LOADS: &[&str] = &["write", "multiwrite", "commit", "appender", "bulk"];

pub fn markdown(plan: &Plan, runs: &[Run]) -> String {
    let mut md = String::new();
    let (start, stop) = plan.offender_window();
    let _ = writeln!(
        md,
        "# ioshield stall bench\n\n{} s loads, offender `{}` from {start} s{}, data disk {} MB/s, \
         {}up to {} repeats; median (min-max) of the repeats; `x none` = median over the same \
         kernel's `none` median, from this bench. p50/p99: of every cycle's time beyond its \
         nominal length (for `commit`, the fdatasync latency).\n",
        plan.duration,
        plan.offender,
        if plan.offender == "load" {
            let pace = plan
                .pace()
                .map(|r| format!(" at most {:.1} MB/s", r as f64 / 1e6))
                .unwrap_or_default();
            format!(" to {stop} s{pace}")
        } else if let Some(rate) = plan.pace().filter(|_| plan.offender == "cpslow") {
            format!(
                " (`cp` from a source paced at {:.1} MB/s to {stop} s, timed to `sync`)",
                rate as f64 / 1e6
            )
        } else {
            " (a fixed-size job)".to_string()
        },
        plan.disk_bps / 1_000_000,
        if plan.innocents_on == "fast" {
            "the innocent loads on a second disk with no throttle, "
        } else {
            ""
        },
        plan.repeat
    );
    for kernel in &plan.kernels {
        for load in TABLE_LOADS {
            if !runs
                .iter()
                .any(|r| r.kernel == *kernel && r.load(load).is_some())
            {
                continue;
            }
            let _ = writeln!(md, "## {kernel}, {load}\n");
            let _ = writeln!(
                md,
                "| scenario | runs | longest pause s | x none | total paused s | x none | \
                 wait ms | x none | p50 ms | p99 ms | control longest s |"
            );
            let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|");
            let metric = |scenario: &str, f: &dyn Fn(&Run) -> Option<f64>| {
                let v: Vec<f64> = runs
                    .iter()
                    .filter(|r| r.kernel == *kernel && r.scenario == scenario)
                    .filter_map(f)
                    .collect();
                summarize(&v)
            };
            let of = |l: &'static str, pick: fn(&super::results::Load) -> f64| {
                move |r: &Run| r.load(l).map(pick)
            };
            let longest = of(load, |l| l.longest_pause_s);
            let total = of(load, |l| l.total_paused_s);
            let wait = of(load, |l| l.wait_s);
            let control = of("control", |l| l.longest_pause_s);
            let p50 = of(load, |l| l.p50_s);
            let p99 = of(load, |l| l.p99_s);
            let none = [
                metric("none", &longest),
                metric("none", &total),
                metric("none", &wait),
            ];
            for scenario in &plan.scenarios {
                let cells = [
                    metric(scenario, &longest),
                    metric(scenario, &total),
                    metric(scenario, &wait),
                ];
                let Some(n) = cells[0].as_ref().map(|s| s.n) else {
                    continue;
                };
                let mut row = format!("| {scenario} | {n} |");
                for (i, cell) in cells.iter().enumerate() {
                    let (scale, dec) = if i == 2 { (1e3, 0) } else { (1.0, 2) };
                    let _ = write!(
                        row,
                        " {} | {} |",
                        cell.as_ref().map_or("-".into(), |s| s.show(scale, dec)),
                        ratio(cell.as_ref(), none[i].as_ref())
                    );
                }
                for q in [&p50, &p99] {
                    let cell = metric(scenario, q);
                    let _ = write!(row, " {} |", cell.map_or("-".into(), |s| s.show(1e3, 0)));
                }
                let c = metric(scenario, &control);
                let _ = writeln!(md, "{row} {} |", c.map_or("-".into(), |s| s.show(1.0, 2)));
            }
            md.push('\n');
        }
        offender_section(&mut md, plan, kernel, runs);
        frontier_section(&mut md, plan, kernel, runs);
        daemon_section(&mut md, plan, kernel, runs);
        phase_section(&mut md, kernel, runs);
    }
    md
}

fn ratio(x: Option<&Summary>, none: Option<&Summary>) -> String {
    match (x, none) {
        (Some(x), Some(n)) if n.median > 0.0 => format!("{:.2}", x.median / n.median),
        _ => "-".into(),
    }
}

/// What the offender kept of its speed: the writer's side of the trade. For a fixed-size job
/// also when it ended by itself and when its data was on the disk: under the page cache a copy
/// to a slow disk ends at once and its `sync` (an unmount, a "safely remove") waits for the rest.
fn offender_section(md: &mut String, plan: &Plan, kernel: &str, runs: &[Run]) {
    let of = |scenario: &str, field: fn(&Run) -> Option<f64>| {
        let v: Vec<f64> = runs
            .iter()
            .filter(|r| r.kernel == kernel && r.scenario == scenario)
            .filter_map(field)
            .collect();
        summarize(&v)
    };
    let rate = |scenario: &str| of(scenario, |r| r.offender_bytes_per_sec);
    let ended = |scenario: &str| of(scenario, |r| r.offender_exited_after_s);
    let on_disk = |scenario: &str| {
        of(scenario, |r| {
            r.offender_exited_after_s?;
            r.offender.map(|(start, end)| end - start)
        })
    };
    let none = rate("none");
    let job = plan.offender != "load";
    let _ = writeln!(
        md,
        "## {kernel}, the offender ({})\n\n| scenario | offender MB/s | x none |{}\n|---|---|---|{}",
        if job {
            "job size over its time to `sync`"
        } else {
            "bytes it dirtied per second while it ran"
        },
        if job {
            " job ended s | data on disk s |"
        } else {
            ""
        },
        if job { "---|---|" } else { "" }
    );
    for scenario in &plan.scenarios {
        let Some(r) = rate(scenario) else { continue };
        let times = if job {
            let show = |s: Option<Summary>| s.map_or("-".to_string(), |s| s.show(1.0, 1));
            format!(" {} | {} |", show(ended(scenario)), show(on_disk(scenario)))
        } else {
            String::new()
        };
        let _ = writeln!(
            md,
            "| {scenario} | {} | {} |{times}",
            r.show(1e-6, 1),
            ratio(Some(&r), none.as_ref())
        );
    }
    md.push('\n');
}

/// The trade in one table: each scenario's innocents' longest pause against the writer's speed,
/// and which scenario beats it on both (none: it is on the frontier).
fn frontier_section(md: &mut String, plan: &Plan, kernel: &str, runs: &[Run]) {
    let points = frontier::points(&plan.scenarios, kernel, runs, TABLE_LOADS);
    if points.iter().all(|p| p.speed.is_none()) {
        return;
    }
    let _ = writeln!(
        md,
        "## {kernel}, the frontier

Each run's longest pause of any innocent load ({}), \
         median (min-max) over the runs, against the offender's speed x none; a scenario is \
         off the frontier when another one's median pause is no longer and its offender no \
         slower, better in one of the two. The same in `frontier-{kernel}.png`.\n\n\
         | scenario | innocents' longest pause s | offender x none | beaten by |\n|---|---|---|---|",
        TABLE_LOADS.join(", ")
    );
    for p in points {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            p.scenario,
            p.pause.show(1.0, 2),
            p.speed.map_or("-".into(), |s| format!("{s:.2}")),
            p.beaten_by.as_deref().unwrap_or("- (on the frontier)")
        );
    }
    md.push('\n');
}

/// Detection latency, the daemon's cost, and the BPF programs' cost per event.
fn daemon_section(md: &mut String, plan: &Plan, kernel: &str, runs: &[Run]) {
    let daemon_runs: Vec<&Run> = runs
        .iter()
        .filter(|r| r.kernel == kernel && r.scenario.starts_with("ioshield"))
        .collect();
    if daemon_runs.is_empty() {
        return;
    }
    let _ = writeln!(md, "## {kernel}, the daemon\n");
    let _ = writeln!(
        md,
        "| scenario | detection latency s | restricts per run | disk measured s after the first restriction | daemon CPU % | daemon RSS MiB | peak RSS MiB |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for scenario in plan.scenarios.iter().filter(|s| s.starts_with("ioshield")) {
        let mine: Vec<&&Run> = daemon_runs
            .iter()
            .filter(|r| r.scenario == *scenario)
            .collect();
        let mib = |field: fn(&Run) -> Option<u64>| -> Vec<f64> {
            mine.iter()
                .filter_map(|r| field(r).map(|b| b as f64))
                .collect()
        };
        let show = |v: Vec<f64>, scale: f64, dec: usize| {
            summarize(&v).map_or("-".into(), |s| s.show(scale, dec))
        };
        let restricts: Vec<f64> = mine
            .iter()
            .map(|r| r.actions.iter().filter(|(_, a)| a == "restrict").count() as f64)
            .collect();
        let measured: Vec<f64> = mine.iter().filter_map(|r| r.measured_after_s).collect();
        let measured = format!(
            "{} in {} of {} runs",
            show(measured.clone(), 1.0, 1),
            measured.len(),
            mine.len()
        );
        let _ = writeln!(
            md,
            "| {scenario} | {} | {} | {measured} | {} | {} | {} |",
            show(
                mine.iter().filter_map(|r| r.detect_latency_s).collect(),
                1.0,
                2
            ),
            show(restricts, 1.0, 0),
            show(
                mine.iter().filter_map(|r| r.daemon_cpu_percent).collect(),
                1.0,
                1
            ),
            show(mib(|r| r.daemon_rss_bytes), 1.0 / (1024.0 * 1024.0), 1),
            show(mib(|r| r.daemon_rss_peak_bytes), 1.0 / (1024.0 * 1024.0), 1),
        );
    }
    md.push('\n');
    // kernel.bpf_stats_enabled adds two clock reads per program run, so these are upper bounds.
    let mut programs: Vec<(String, String, u64, u64)> = Vec::new();
    for r in &daemon_runs {
        for p in &r.bpf {
            match programs.iter_mut().find(|q| q.0 == p.tag) {
                Some(q) => {
                    q.2 += p.run_cnt;
                    q.3 += p.run_time_ns;
                }
                None => programs.push((p.tag.clone(), p.kind.clone(), p.run_cnt, p.run_time_ns)),
            }
        }
    }
    if programs.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "BPF programs over all daemon runs (kernel.bpf_stats_enabled; fdinfo has no names):\n\n\
         | prog tag | type | events | ns/event |\n|---|---|---|---|"
    );
    programs.sort_by_key(|p| std::cmp::Reverse(p.2));
    for (tag, kind, cnt, ns) in programs {
        let per = if cnt > 0 { ns as f64 / cnt as f64 } else { 0.0 };
        let _ = writeln!(md, "| {tag} | {kind} | {cnt} | {per:.0} |");
    }
    md.push('\n');
}

/// Each daemon run's longest innocent pause by the phase of the restriction it began in: which
/// part of a restriction costs the innocents (a speed probe's window, its forced rate, the
/// restriction's first second).
fn phase_section(md: &mut String, kernel: &str, runs: &[Run]) {
    let mine: Vec<&Run> = runs
        .iter()
        .filter(|r| r.kernel == kernel && !r.phases.is_empty())
        .collect();
    if mine.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## {kernel}, where the longest pauses began

Longest pause s of the innocent loads \
         ({}) that began in each phase of the daemon's restriction, by its log: the first \
         second after `restrict`, held, a speed probe's window (the rate left to the kernel's \
         latency control), its forced rate, after `release`.\n",
        TABLE_LOADS.join(", ")
    );
    let header: Vec<&str> = Phase::ALL.iter().map(|p| p.label()).collect();
    let _ = writeln!(
        md,
        "| scenario | run | {} |\n|---|---|{}",
        header.join(" | "),
        "---|".repeat(header.len())
    );
    for r in mine {
        let mut longest = [None::<f64>; Phase::ALL.len()];
        let pauses = TABLE_LOADS
            .iter()
            .filter_map(|l| r.load(l))
            .flat_map(|l| &l.pauses);
        for &(end, pause) in pauses {
            // `Phase::ALL` lists the phases in their declaration order.
            let i = r.phase_at(end - pause) as usize;
            longest[i] = Some(longest[i].map_or(pause, |m: f64| m.max(pause)));
        }
        let cells: Vec<String> = longest
            .iter()
            .map(|l| l.map_or("-".into(), |s| format!("{s:.2}")))
            .collect();
        let _ = writeln!(
            md,
            "| {} | r{} | {} |",
            r.scenario,
            r.repeat,
            cells.join(" | ")
        );
    }
    md.push('\n');
}

pub fn json(runs: &[Run]) -> Result<String> {
    let mut rows = Vec::new();
    for r in runs {
        for name in LOADS {
            let Some(l) = r.load(name) else { continue };
            let mut row = json!({
                "scenario": r.scenario,
                "kernel": r.kernel,
                "repeat": r.repeat,
                "load": name,
                "longest_pause_s": l.longest_pause_s,
                "total_paused_s": l.total_paused_s,
                "wait_s": l.wait_s,
                "p50_s": l.p50_s,
                "p99_s": l.p99_s,
                "offender_bytes_per_sec": r.offender_bytes_per_sec,
                "offender_exited_after_s": r.offender_exited_after_s,
            });
            if r.scenario.starts_with("ioshield") {
                row["detect_latency_s"] = json!(r.detect_latency_s);
                row["daemon_cpu_percent"] = json!(r.daemon_cpu_percent);
                row["daemon_rss_bytes"] = json!(r.daemon_rss_bytes);
                row["daemon_rss_peak_bytes"] = json!(r.daemon_rss_peak_bytes);
            }
            rows.push(row);
        }
    }
    Ok(serde_json::to_string_pretty(&json!({ "runs": rows }))? + "\n")
}
