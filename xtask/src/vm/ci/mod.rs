//! `cargo xtask vm ci`: a few minutes of functional checks per kernel. The smoke run proves the
//! BPF programs load and count on that kernel; the short stall runs prove the test bed still
//! reproduces the stall and that a mitigation removes it (compared within the same job, since
//! the shared host makes absolute numbers noisy).
mod build_like;
mod desktop;
mod fast_disk;
mod slow_writer;
mod smoke;

use std::{
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use ioshield_tests::load::{metrics::Metrics, record::LoadRecord};

use self::fast_disk::Probe;
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
/// A mitigated wait this short is clean whatever none's: 6.12's bed stalls little (none's wait
/// 25-50 ms in stop 84's two full runs), and the guard's 11-13 ms then failed half of 25 ms
/// once; the load's own cycle is 100 ms.
const CLEAN_WAIT_S: f64 = 0.02;

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
        let runner = |name: &str,
                      script_name: &str,
                      env: &[String],
                      data_write_bps: Option<u64>|
         -> Result<(i32, PathBuf)> {
            let done = guest.run(&Run {
                series,
                script: &script(script_name),
                out: &dir.join(name),
                env,
                timeout: TIMEOUT,
                echo: false,
                data_write_bps,
            })?;
            Ok((done.status, done.results))
        };
        let smoke_run = runner("smoke", "smoke.sh", &[], None);
        report(
            series,
            "smoke",
            smoke_run.and_then(|(s, r)| smoke::check(&r, s)),
        );

        // `extra` comes after STALL_ENV: the guest exports them in order, so it may override.
        let stall_at = |name: &str, scenario: &str, extra: &[&str], data_write_bps| {
            let mut env: Vec<String> = STALL_ENV.iter().map(|s| s.to_string()).collect();
            env.push(format!("SCENARIO={scenario}"));
            env.extend(extra.iter().map(|s| s.to_string()));
            let (status, results) = runner(name, "stall.sh", &env, data_write_bps)?;
            if status != 0 {
                bail!(
                    "stall.sh exited {status}: {}",
                    last_line(&results.join("scenario.log"))
                );
            }
            pauses(&results)
        };
        let stall_as =
            |name: &str, scenario: &str, extra: &[&str]| stall_at(name, scenario, extra, None);
        // Gated twice: with the disk's speed given (as the bench's first tables did) and with
        // the shipped `bandwidth = "auto"`, where the daemon must judge a disk it has never
        // measured (issue 10: the kernel's burst reports and the assumed slow disk).
        let stall = |scenario: &str| stall_as(scenario, scenario, &["BANDWIDTH=30MB/s"]);
        // The bed's stall varies from run to run, on 6.12 most (multiwrite 0.42-2.5 s in one
        // session, stop 87): one run compared with was a coin's throw. Two runs always, a
        // third when neither stalled, to tell quiet runs from a bed that no longer reproduces
        // the problem; the mitigated runs are compared with their median, which no run was
        // chosen for (stop 86's CI: 6.12 stalled 0.41 then 0.48 s, and the drain's 0.35 s
        // failed against the first alone).
        let mut none = vec![
            stall("none"),
            stall_as("none-2", "none", &["BANDWIDTH=30MB/s"]),
        ];
        if !none.iter().flatten().any(reproduces) {
            none.push(stall_as("none-3", "none", &["BANDWIDTH=30MB/s"]));
        }
        let baseline = describe_baseline(&none);
        let none = median_pauses(&none);
        report(series, "none", baseline);
        // A check of daemon logic the kernel hardly changes runs on one kernel of the bed
        // (`ONE_KERNEL`): both kernels for every check took 18-23 minutes of the VM time.
        let here = |run: &str| runs_here(run, series, kernels);
        if daemon {
            let held = stall("ioshield");
            let result = held.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"));
            report(series, "ioshield", result.and_then(|p| compare(p, &none)));
            let auto = stall_as("ioshield-auto", "ioshield", &["BANDWIDTH=auto"])
                .and_then(|p| compare(&p, &none));
            report(series, "ioshield-auto", auto);
            // Both kernels of the bed have iocost: the shipped configuration turns it on for the
            // disk while it restricts (stall.sh fails the run if it is not put back), with a
            // model of the disk's speed where that is known, and the kernel's rate control of
            // an assumed slow disk (capped at its model) where it has never been measured.
            report(
                series,
                "ioshield iocost",
                held_by_iocost(&dir.join("ioshield"), "disk modelled at 30.0MB/s"),
            );
            report(
                series,
                "ioshield-auto iocost",
                held_by_iocost(&dir.join("ioshield-auto"), "disk not measured"),
            );
            // Held at the assumed speed and in the speed probe's window, beside the innocent
            // loads, the writer of a disk never measured has the 8 MiB a disk of known speed
            // gives it, on both kernels: 6.12's dirty counts are refreshed by the daemon, 6.1's
            // are current by themselves (docs/bench/held-rate.md, stop 71).
            report(
                series,
                "ioshield-auto memory.high beside others",
                held_beside_others_unmeasured(&dir.join("ioshield-auto")),
            );
            // Under a write limit (`iocost = "off"`, and what systemd hosts run) on a disk never
            // measured, the limit counts as the disk's speed for the writers beside the held
            // one: 8 MiB at the assumed speed's limit, a quarter of a second of each step of
            // the probe's. At 32 MiB the writeback queued under the limit held every journal
            // commit beside it: 0.39-0.49 s while held on 6.12, 0.22-0.29 at 8 MiB
            // (docs/bench/write-limit-memory.md, stop 82).
            if here("ioshield-auto-limit") {
                let limit = stall_as(
                    "ioshield-auto-limit",
                    "ioshield",
                    &["BANDWIDTH=auto", "IOSHIELD_DEVICE=iocost = \"off\""],
                )
                .and_then(|p| {
                    let said = held_by_limit_beside_others_in(&daemon_log(
                        &dir.join("ioshield-auto-limit"),
                    )?)?;
                    Ok(format!("{said}; {}", compare(&p, &none)?))
                });
                report(series, "ioshield-auto write limit beside others", limit);
            }
            // The 30 MB/s disk queues in the probe's first window when its writer fills the
            // rate it is held at: that answer stands for the restriction, and no second window
            // costs the innocents again. Under the shipped memory.high the writer stays under
            // that rate on this bed (16.6-23.0 of 25 MB/s with about 0.2 writes in flight in
            // every `ioshield-auto` run of stops 56-57): the disk showed room, and a check on
            // that run had nothing to check. Its own run has no memory.high ("no room" in 2 of
            // 2 runs on 6.12 at stop 57, and in stops 66-67's CI at weight 10). At the latency
            // control's weight 25 (stop 68) its window showed room in the one CI run (25.6
            // MB/s with 0.28 writes in flight), as in 10 of 12 bench runs, all of them taken
            // back at the step: a take-back that leaves "no room" at the rate held before
            // answers as such a window would, and is checked the same way (from stop 69; "not
            // applicable" only for room never taken back).
            if here("ioshield-auto-window") {
                let window = stall_as(
                    "ioshield-auto-window",
                    "ioshield",
                    &["BANDWIDTH=auto", "IOSHIELD_DEVICE=memory_high = \"off\""],
                )
                .and_then(|_| one_window_after_no_room(&dir.join("ioshield-auto-window")));
                report(series, "ioshield-auto one window", window);
                // The next restriction on that disk, by a daemon started with all the last one
                // kept (its answer with the lower bound it may have shown beside it, or the
                // bed's answer when it showed none): no window at all. Its answer alone is not
                // what a restarted daemon reads: given at 26.4 MB/s for a restriction at a bound
                // of 26.4, it does not stand for one at the model's 25 (CI of stop 54).
                let first = dir.join("ioshield-auto-window");
                let (kept, all_kept) = kept_no_room(&first)
                    .ok()
                    .flatten()
                    .and_then(|k| Some((k, all_kept(&first).ok()?)))
                    .unwrap_or_else(|| (BED_NO_ROOM.to_string(), BED_NO_ROOM.to_string()));
                let earlier = format!("EARLIER_SPEEDS={all_kept}");
                let again = stall_as(
                    "ioshield-auto-again",
                    "ioshield",
                    &["BANDWIDTH=auto", &earlier],
                )
                .and_then(|p| {
                    let answer = kept
                        .rsplit('=')
                        .next()
                        .and_then(|r| r.parse::<f64>().ok())
                        .with_context(|| format!("no rate in the kept answer {kept}"))?;
                    let run = dir.join("ioshield-auto-again");
                    let said = no_window_after_kept_answer(&run, answer)?;
                    Ok(format!("{said} ({kept}); {}", compare(&p, &none)?))
                });
                report(series, "ioshield-auto kept answer", again);
            }
            // An untar of small files slows itself (ext4's metadata): held at weight 1 under
            // 32 MiB it ran at about half its speed; seen writing many small files it goes on
            // at weight 10 under 128 MiB (docs/bench/small-files.md).
            //
            // Run again once when the untar was never restricted for its speed: on a slow host
            // (stop 60's CI run: 14.6 MB/s) it dirties under the rate a writer must keep up
            // on a disk assumed at 25 MB/s, and only the backlog trigger restricts it, near its
            // end. Such a run says nothing of the lightening (`slow_untar`).
            if here("ioshield-auto-tar") {
                let tar_run = |name: &str| {
                    stall_as(name, "ioshield", &["BANDWIDTH=auto", "OFFENDER=tar"]).and_then(|p| {
                        let run = dir.join(name);
                        match lightened(&run) {
                            Ok(light) => Ok(Untar::Lightened(format!("{light}; {}", p.line()))),
                            Err(e) => match slow_untar(&run)? {
                                Some(slow) => Ok(Untar::TooSlow(format!("{slow} ({e:#})"))),
                                None => Err(e),
                            },
                        }
                    })
                };
                let untar = match tar_run("ioshield-auto-tar") {
                    Ok(Untar::Lightened(ok)) => Ok(ok),
                    Err(e) => Err(e),
                    Ok(Untar::TooSlow(first)) => match tar_run("ioshield-auto-tar-again") {
                        Ok(Untar::Lightened(ok)) => {
                            Ok(format!("{ok} (on a second run; the first: {first})"))
                        }
                        Ok(Untar::TooSlow(again)) => {
                            Ok(format!("not applicable: {again}; a first run too: {first}"))
                        }
                        Err(e) => Err(e.context(format!("a second run; the first: {first}"))),
                    },
                };
                report(series, "ioshield-auto tar lightened", untar);
            }
            // The innocent loads write beside the offender on a disk of known speed: its
            // memory.high is 8 MiB instead of 32 (shorter journal waits for the others), and the
            // daemon's reads of its memory.stat keep the kernel pacing it by its dirty pages
            // rather than by memory.high's reclaim penalty (docs/bench/dirty-counts.md).
            report(
                series,
                "ioshield memory.high beside others",
                tightened_beside_others(
                    &dir.join("ioshield"),
                    &held,
                    min_held_beside_others_mb_s(series),
                ),
            );
            // A copy to a stick beside a desktop writing to its own disk: only the copy is
            // restricted, not the download on the system disk (docs/bench/stick.md).
            if here("ioshield-desktop") {
                let desktop = stall_at(
                    "ioshield-desktop",
                    "ioshield",
                    desktop::ENV,
                    Some(desktop::STICK_BPS),
                )
                .and_then(|_| desktop::only_the_stick_restricted(&dir.join("ioshield-desktop")));
                report(series, "ioshield-desktop stick", desktop);
            }
            // A writer under the rate threshold on a disk never measured is restricted for the
            // backlog it builds before the kernel writes any of it (docs/bench/unwritten-backlog.md).
            if here("ioshield-auto-slow") {
                let slow =
                    stall_as("ioshield-auto-slow", "ioshield", slow_writer::ENV).and_then(|p| {
                        let run = dir.join("ioshield-auto-slow");
                        let early = slow_writer::restricted_early(&run)?;
                        let cut = slow_writer::backlog_cut(&run)?;
                        Ok(format!("{early}; {cut}; {}", p.line()))
                    });
                report(series, "ioshield-auto slow writer", slow);
            }
            // A held writer whose processes then need memory, as a build's compilers do: its
            // memory.high is lifted once they hold more than its page cache budget, instead of
            // the kernel putting every allocation of theirs to sleep (docs/bench/memory-follow.md).
            if here("ioshield-build") {
                let build = runner("ioshield-build", "build-like.sh", &[], None)
                    .and_then(|(status, results)| build_like::memory_followed(&results, status));
                report(series, "ioshield build memory", build);
            }
            // The cgroup set-up a restriction needs was there before the first writer: made
            // at the first restriction it took 28-76 ms while the offender went on dirtying.
            report(
                series,
                "ioshield set-up at start",
                set_up_at_start(&dir.join("ioshield")),
            );
            // A disk never measured and five times faster than assumed: the speed probe forces
            // the rate up because the disk keeps up with room to spare, instead of holding the
            // writer at the assumed 25 MB/s (docs/bench/speed-probe.md). Room can show only at
            // the steps at 10 and 15 s, each after its window; the writer runs 29 s so that the
            // forced steps after them are logged too (6.12's held writer sometimes shows room
            // only at the second).
            //
            // Run again once when no room showed: on 6.12 the held writer, bound by its
            // memory.high, sometimes does not use the held rate in the window (14.7 of 25 MB/s,
            // under the 60% a window needs, `LISTENED_BUSY`), and the host's shared disk and
            // CPU sometimes slow the fast disk (0.44 in flight at 17.7 MB/s, stop 35; 0.98 at
            // 23.7 and 0.45 at 19.8 in both runs of stop 49's CI). A run whose disk, by its own
            // counters, was never fast enough in a window to show room says nothing of the
            // probe (`Probe::NotFast`; read as the daemon reads it, in all and span by span:
            // CI of stop 80 failed two 6.1 runs whose slowest spans were 50-60 MB/s kept busy);
            // the check fails when a run missed room the disk showed, or when neither run
            // showed room for any other reason.
            if here("ioshield-fast") {
                let fast_run = |name: &str| {
                    stall_at(
                        name,
                        "ioshield",
                        &[
                            "BANDWIDTH=auto",
                            "DURATION=35",
                            "OFFENDER_STOP=32",
                            "DISK_TRACE=1",
                        ],
                        Some(fast_disk::FAST_DISK_BPS),
                    )
                    .and_then(|p| {
                        Ok(match fast_disk::forced_by_room(&dir.join(name))? {
                            Probe::Room(probe) => {
                                let kept = fast_disk::room_kept(&dir.join(name), &probe)?;
                                let ramp = fast_disk::memory_high_ramped(&dir.join(name))?;
                                Probe::Room(format!("{probe}; {kept}; {ramp}; {}", p.line()))
                            }
                            not_fast => not_fast,
                        })
                    })
                };
                let fast = match fast_run("ioshield-fast") {
                    Ok(Probe::Room(ok)) => Ok(ok),
                    first => match (fast_run("ioshield-fast-again"), first) {
                        (Ok(Probe::Room(ok)), first) => Ok(format!(
                            "{ok} (on a second run; the first: {})",
                            fast_disk::said(&first)
                        )),
                        (Ok(Probe::NotFast(again)), Ok(Probe::NotFast(first))) => {
                            Ok(format!("not applicable: {again}; a first run too: {first}"))
                        }
                        (again, first) => Err(anyhow::anyhow!(
                            "{}; a first run: {}",
                            fast_disk::said(&again),
                            fast_disk::said(&first)
                        )),
                    },
                };
                report(series, "ioshield-fast probe", fast);
            }
            // A writer that stops with hundreds of MiB dirty in its cgroup (no memory.high): its
            // release waits until that backlog is written, which kept the others' pauses at
            // 0.17-0.21 s where releasing at once stalled them 3-7 s (tests/vm/release-drain.sh).
            // Its 330-430 MB, under the kernel's background threshold, wait for their inode to
            // expire (30 s after the writeback that stopped half-way at the exit) before
            // anything writes them: released 19-46 s after the exit here, once more than 63 s
            // (CI, 6.12, stop 34), so the loads run 78 s past it. A second writer starts 8 s
            // after the first stopped, while that wait goes on: it is restricted at its first
            // report, not left unheld until the backlog is written (docs/bench/newcomer.md).
            let drained = stall_as(
                "ioshield-drain",
                "ioshield",
                &[
                    "BANDWIDTH=30MB/s",
                    "DURATION=90",
                    "OFFENDER_STOP=12",
                    "NEXT_OFFENDER=20-26",
                    "END_AFTER_RELEASE=8",
                    "IOSHIELD_DEVICE=memory_high = \"off\"",
                ],
            );
            let newcomer = drained
                .as_ref()
                .map_err(|e| anyhow::anyhow!("{e:#}"))
                .and_then(|_| newcomer_held_while_draining(&dir.join("ioshield-drain")));
            let drained = drained.and_then(|p| {
                let drained = released_after_its_backlog(&dir.join("ioshield-drain"))?;
                Ok(format!("{drained}; {}", compare(&p, &none)?))
            });
            report(series, "ioshield-drain release", drained);
            report(series, "ioshield-drain newcomer", newcomer);
            // The backlog guard alone (max_dirty, no restriction): the kernel's per-disk dirty
            // limit from 6.2 on; stall.sh fails the run if the knobs are not put back.
            if has_bdi_byte_limits(series) {
                let guard = stall_as(
                    "ioshield-guard",
                    "ioshield",
                    &["BANDWIDTH=30MB/s", GUARD_ALONE],
                )
                .and_then(|p| {
                    guarded(&dir.join("ioshield-guard"))?;
                    compare(&p, &none)
                });
                report(series, "ioshield-guard", guard);
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

/// Runs that check daemon logic the kernel hardly changes, each on the one kernel of the bed
/// named here: the speed probe's window with the kept answer after it and the stick's second
/// disk on 6.12, the untar's small files,
/// the build's memory and the fast disk's speed probe on 6.1 (the systemd e2e, on 6.12, has an
/// untar and a build of its own).
const ONE_KERNEL: &[(&str, &str)] = &[
    ("ioshield-auto-window", "6.12"),
    ("ioshield-desktop", "6.12"),
    ("ioshield-auto-slow", "6.12"),
    ("ioshield-auto-tar", "6.1"),
    ("ioshield-build", "6.1"),
    ("ioshield-fast", "6.1"),
    ("ioshield-auto-limit", "6.12"),
];

/// Whether `run` runs on the kernel `series` when `kernels` are tested: every run not in
/// [`ONE_KERNEL`] on each; one that is on its kernel, or on each when its kernel is not tested
/// (`vm ci --kernel 6.1` runs every check).
fn runs_here(run: &str, series: &str, kernels: &[String]) -> bool {
    match ONE_KERNEL.iter().find(|(r, _)| *r == run) {
        Some((_, only)) => *only == series || !kernels.iter().any(|k| k == only),
        None => true,
    }
}

/// The daemon's device section for the guard-alone run: decide without acting, cap the disk's
/// dirty data at 0.25 s of its speed (docs/bench/backlog-guard.md).
const GUARD_ALONE: &str = "IOSHIELD_DEVICE=action = \"dry-run\";max_dirty = \"250ms\"";

/// Whether a kernel series of the bed (`6.1`, `6.12`) has per-BDI `max_bytes` and
/// `strict_limit` (6.2 and later).
fn has_bdi_byte_limits(series: &str) -> bool {
    series_at_least(series, (6, 2))
}

/// Whether a kernel series (`6.1`, `6.12`) is `min` (major, minor) or later; an unreadable one
/// is not.
fn series_at_least(series: &str, min: (u32, u32)) -> bool {
    let mut parts = series.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= min
}

/// The daemon capped the data disk's dirty data at 0.25 s of the configured 30 MB/s.
fn guarded(run: &Path) -> Result<()> {
    if !daemon_log(run)?.contains("backlog guard: the disk's dirty data capped at 7.5 MB") {
        bail!("no backlog guard of 7.5 MB in {}", run.display());
    }
    Ok(())
}

/// The daemon's log of a stall run (`OUT/<kernel>/<run>`).
fn daemon_log(run: &Path) -> Result<String> {
    let log = run.join("results/daemon.log");
    fs::read_to_string(&log).with_context(|| format!("reading {}", log.display()))
}

/// What a stall run's daemon kept in its speeds file (`results/disks.json`), by key.
/// Empty when it kept nothing (it writes the file only once it has a speed to keep).
fn kept_speeds(run: &Path) -> Result<std::collections::BTreeMap<String, f64>> {
    let file = run.join("results/disks.json");
    if !file.exists() && run.join("results/daemon.log").exists() {
        return Ok(Default::default());
    }
    let text = fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{}: not a map of rates: {text}", file.display()))
}

/// After a speed-probe window in which the disk showed no room, the restriction asks no other
/// window until its release, which comes late enough for the second one to have been due
/// (its step is 5 s after the first). A window that showed room answers here only once the
/// rate forced up for it is taken back with "no room" at the rate held before (the latency
/// control's weight of stop 68 shows room on this disk in most windows): the probe is then
/// where a window without room leaves it, and the next step was due 5 s after the forced one.
/// Room never taken back answers nothing: the 30 MB/s disk sometimes looks roomy
/// (docs/bench/one-window.md). Nor does the release's time where the answer came from the
/// second window, the probe's last (the first saw the writer use too little of its rate): no
/// window is due after it however long the restriction holds (seen on 6.1, CI of stop 46: the
/// answer at 15 s, the release 3 s later).
fn one_window_after_no_room(run: &Path) -> Result<String> {
    let text = daemon_log(run)?;
    let decisions = decisions(
        &text,
        &[
            "restrict pid",
            "retune pid",
            "release pid",
            DUE_FOR_RELEASE,
            TAKEN_BACK,
        ],
    );
    let said = || decisions.join(" | ");
    let Some(at) = decisions.iter().position(|l| {
        (l.contains("retune pid") && l.contains("writes in flight: no room)"))
            || l.contains(TAKEN_BACK)
    }) else {
        if let Some(room) = decisions.iter().find(|l| l.contains("room to spare)")) {
            return Ok(format!(
                "not applicable: the disk showed room and the rate forced up for it was not \
                 taken back: {}",
                excerpt(room, "not measured after", "room to spare)")
            ));
        }
        if let Some(idle) = decisions.iter().find(|l| l.contains(TOO_LITTLE)) {
            return Ok(format!(
                "not applicable: no window answered, the writer used too little of its rate: {}",
                excerpt(idle, "not measured after", TOO_LITTLE)
            ));
        }
        bail!(
            "no window answered \"no room\"; the daemon's decisions: {}",
            said()
        );
    };
    let answer = decisions[at];
    let taken_back = answer.contains(TAKEN_BACK);
    // The next step was due 5 s after the one that forced the rate up for the room.
    let stepped = if taken_back {
        let Some(step) = decisions[..at]
            .iter()
            .rposition(|l| l.contains("room to spare)"))
        else {
            bail!("a take-back with no step for room before it: {}", said());
        };
        step
    } else {
        at
    };
    let rest = &decisions[at + 1..];
    let end = rest.iter().position(|l| {
        l.contains("release pid") || l.contains(DUE_FOR_RELEASE) || l.contains("restrict pid")
    });
    let window = rest[..end.unwrap_or(rest.len())]
        .iter()
        .find(|l| l.contains(LISTENING));
    if let Some(window) = window {
        bail!("a window after the disk had answered: {answer} then {window}");
    }
    let time = |l: &str| {
        l.split_whitespace()
            .next()
            .and_then(crate::bench::rfc3339_seconds)
    };
    let Some(release) = end
        .map(|e| rest[e])
        .filter(|l| l.contains("release pid") || l.contains(DUE_FOR_RELEASE))
    else {
        bail!(
            "no release after the answer; the daemon's decisions: {}",
            said()
        );
    };
    let held = time(release)
        .zip(time(decisions[stepped]))
        .map(|(r, a)| r - a);
    let kept = match kept_no_room(run)? {
        Some(kept) => format!("kept as {kept}"),
        None if taken_back && answer.contains(FIRST_TAKE_BACK) => {
            "not kept: a disk's first take-back holds for its restriction only".to_string()
        }
        None => bail!("the answer is not kept in the daemon's speeds file: {answer}"),
    };
    let restricted = decisions[..at]
        .iter()
        .rposition(|l| l.contains("restrict pid"))
        .map_or(0, |r| r + 1);
    let last_window = decisions[restricted..at]
        .iter()
        .any(|l| l.contains(TOO_LITTLE));
    let said_so = if taken_back {
        excerpt(answer, "/dev/", TAKEN_BACK)
    } else {
        excerpt(answer, "not measured after", "no room)")
    };
    match held {
        Some(s) if s >= 5.0 || last_window => Ok(format!(
            "{}{said_so}, and no window in the {s:.0} s {}to the release; {kept}",
            if last_window && s < 5.0 {
                "the probe's last window (the first saw too little of the rate used): "
            } else {
                ""
            },
            if taken_back { "from the step " } else { "" },
        )),
        _ => bail!(
            "released {held:?} s after the {}, before a second window was due: {}",
            if taken_back {
                "step taken back"
            } else {
                "answer"
            },
            said()
        ),
    }
}

/// The daemon's take-back of a rate forced up for room that leaves "no room" at the rate held
/// before it (`SpeedProbe::take_back`).
const TAKEN_BACK: &str = "no room to spare at it";
/// What the daemon adds to a take-back's line when it keeps its answer for this restriction only.
const FIRST_TAKE_BACK: &str = "its answer holds for this restriction only";

const DUE_FOR_RELEASE: &str = "is due for release; held until the ";

/// What a daemon kept of the bed's 30 MB/s disk after a window showed no room at the assumed
/// speed, in the form of `EARLIER_SPEEDS` (tests/vm/stall.sh).
const BED_NO_ROOM: &str = "no-room:serial:data=25000000";

/// The first "no room" rate the daemon of a stall run kept in its speeds file
/// (`results/disks.json`), as `IDENTITY=BYTES_PER_S`.
fn kept_no_room(run: &Path) -> Result<Option<String>> {
    Ok(kept_speeds(run)?
        .iter()
        .find(|(k, _)| k.starts_with("no-room:"))
        .map(|(k, v)| format!("{k}={v:.0}")))
}

/// Everything the daemon of a stall run kept in its speeds file, as `EARLIER_SPEEDS` has it.
fn all_kept(run: &Path) -> Result<String> {
    Ok(kept_speeds(run)?
        .iter()
        .map(|(k, v)| format!("{k}={v:.0}"))
        .collect::<Vec<_>>()
        .join(" "))
}

/// A restriction on a disk whose "no room" answer (at `answer` bytes/s) the daemon started with
/// said so and held the rate without a window. A window after the disk showed a lower bound
/// the answer does not cover (a quarter above it, the daemon's `covered_by_no_room`) is the
/// daemon forgetting a contradicted answer, as it should: not applicable; so is one at a rate
/// the answer is not for. A bound it covers (the bed's held writer shows 26.7-26.9 MB/s under
/// an answer at 25) leaves the answer standing: a window then fails.
fn no_window_after_kept_answer(run: &Path, answer: f64) -> Result<String> {
    let text = daemon_log(run)?;
    let decisions = decisions(&text, HELD);
    if let Some(at) = decisions
        .iter()
        .position(|l| l.contains("left to the kernel's latency control"))
    {
        let bound = "(the disk is at least ";
        if let Some(faster) = decisions[..at]
            .iter()
            .find(|l| rate_after(l, bound).is_some_and(|v| !covered_by_no_room(v, answer)))
        {
            return Ok(format!(
                "not applicable: a lower bound the answer does not cover came first: {}",
                excerpt(faster, bound, "/s)")
            ));
        }
        if let Some(top) = window_top(decisions[at]).filter(|t| !covered_by_no_room(*t, answer)) {
            return Ok(format!(
                "not applicable: the window's rate went up to {:.1} MB/s, not the answer's {:.1}",
                top / 1e6,
                answer / 1e6
            ));
        }
        bail!("a window despite the kept answer: {}", decisions[at]);
    }
    let said = "no speed-probe window in this restriction";
    let Some(line) = text.lines().find(|l| l.contains(said)) else {
        bail!(
            "no restriction held the rate for the kept answer; the daemon's decisions: {}",
            decisions.join(" | ")
        );
    };
    Ok(excerpt(line, said, " in an earlier one").to_string())
}

/// An untar writes many small files: seen so from its files (the kernel side counts the files
/// it writes from their first page), it went on at `io.weight=10` with `memory.high` 128 MiB
/// (the daemon's `Method::lightened`: 0.44-0.58x of its unmitigated speed at weight 1 on 6.12)
/// without waiting for the probe's window, with every limit written.
fn lightened(run: &Path) -> Result<String> {
    let text = daemon_log(run)?;
    if let Some(failed) = text
        .lines()
        .find(|l| l.contains("cannot change the limits"))
    {
        bail!("a limit not written: {failed}");
    }
    let decisions = decisions(&text, HELD);
    let said = || decisions.join(" | ");
    let Some(at) = decisions
        .iter()
        .position(|l| l.contains("retune pid") && l.contains(": io.weight=10 "))
    else {
        bail!(
            "the untar was never lightened; the daemon's decisions: {}",
            said()
        );
    };
    let line = decisions[at];
    let how = excerpt(line, "io.weight=10", " (");
    if !line.contains(") memory.high=128M (") {
        bail!("lightened without the light writer's memory.high of 128M: {how} ({line})");
    }
    if !line.contains(SMALL_FILES) {
        bail!("lightened, but not for its small files: {line}");
    }
    if decisions[..at].iter().any(|l| l.contains(LISTENING)) {
        bail!("lightened only after a speed-probe window: {}", said());
    }
    Ok(excerpt(line, SMALL_FILES, "while they do").to_string())
}

/// What the untar run showed of the lightening.
enum Untar {
    /// Lightened for its small files, as it should be (what the check says of it).
    Lightened(String),
    /// Too slow on this host to be restricted for its speed: nothing to say ([`slow_untar`]).
    TooSlow(String),
}

/// The rate a writer's tree must keep up to be restricted on a disk not measured: the shipped
/// `restrict_at` of the assumed 25 MB/s (the daemon's `Estimate::ASSUMED`).
const ASSUMED_RESTRICT_BPS: f64 = 0.7 * 25e6;

/// Why an untar that was never lightened says nothing of the lightening, if it does: it dirtied
/// under [`ASSUMED_RESTRICT_BPS`] on average (its bytes over the time its process ran), and no
/// restriction came from its speed or a burst of it, only from the disk's backlog or none (and
/// no limit was refused).
fn slow_untar(run: &Path) -> Result<Option<String>> {
    let text = daemon_log(run)?;
    let for_speed = decisions(&text, &["restrict pid"])
        .into_iter()
        .find(|l| !l.contains("whose dirty backlog would take"));
    if for_speed.is_some() || text.contains("cannot change the limits") {
        return Ok(None);
    }
    let record = LoadRecord::load(&run.join("results/offender.json"))?;
    let ran = record
        .exited_s
        .context("offender.json has no exit time for the untar")?
        - record.start_s;
    let rate = record.bytes_written as f64 / ran.max(f64::EPSILON);
    Ok((rate < ASSUMED_RESTRICT_BPS).then(|| {
        format!(
            "the untar dirtied {:.1} MB/s in its {ran:.1} s, under the {:.1} MB/s a writer must \
             keep up on a disk assumed at 25 MB/s, and was restricted only for the disk's \
             backlog, if at all",
            rate / 1e6,
            ASSUMED_RESTRICT_BPS / 1e6
        )
    }))
}

/// Whether the daemon's "no room" answer at `answer` bytes/s stands for a restriction at, or a
/// lower bound of, `rate` (the daemon's `speed_probe::covered_by_no_room`).
fn covered_by_no_room(rate: f64, answer: f64) -> bool {
    let share = rate / answer;
    (0.95..1.25).contains(&share)
}

/// The rate in MB/s right after `from` in a daemon's line, in bytes/s.
fn rate_after(line: &str, from: &str) -> Option<f64> {
    let (_, rest) = line.split_once(from)?;
    let (mb, _) = rest.split_once(" MB/s")?;
    mb.parse::<f64>().ok().map(|v| v * 1e6)
}

/// The highest rate a window's line says the kernel's latency control may set, bytes/s:
/// "...setting the rate between 6.2MB/s and 26.5MB/s)".
fn window_top(line: &str) -> Option<f64> {
    let (_, rest) = line.split_once("setting the rate between ")?;
    let (_, top) = rest.split_once(" and ")?;
    let (mb, _) = top.split_once("MB/s")?;
    mb.parse::<f64>().ok().map(|v| v * 1e6)
}

/// How a probe step says its window showed nothing (`daemon::speed_probe`).
const TOO_LITTLE: &str = "too little of the rate used to tell)";
/// A restriction lightened for the files its writers write.
const SMALL_FILES: &str = "its writers write many small files";
/// A speed-probe window's line.
const LISTENING: &str = "its rate left to the kernel's latency control";

/// The daemon's restrict and retune lines.
const HELD: &[&str] = &["restrict pid", "retune pid"];

/// The lines of a daemon log that hold any of `kinds` ("restrict pid", ...), in order.
fn decisions<'a>(text: &'a str, kinds: &[&str]) -> Vec<&'a str> {
    text.lines()
        .filter(|l| kinds.iter().any(|k| l.contains(k)))
        .collect()
}

/// The part of `line` from `from` to the end of `to`, or all of it.
fn excerpt<'a>(line: &'a str, from: &str, to: &str) -> &'a str {
    let start = line.find(from).unwrap_or(0);
    let end = line[start..]
        .find(to)
        .map_or(line.len(), |i| start + i + to.len());
    &line[start..end]
}

/// The writer's release waited for the backlog it left in its cgroup and came once that was
/// written: the daemon's "held until" line, then a release that says its backlog was written.
fn released_after_its_backlog(run: &Path) -> Result<String> {
    let text = daemon_log(run)?;
    let decisions = || {
        text.lines()
            .filter(|l| l.contains("restrict pid") || l.contains("release"))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let Some(at) = text.find(DUE_FOR_RELEASE) else {
        bail!(
            "no release waited for a backlog; the daemon's decisions: {}",
            decisions()
        );
    };
    let held = text[at..].lines().next().unwrap_or_default();
    let pid = waiting_pid(&text, at);
    let Some(release) = text[at..]
        .lines()
        .find(|l| l.contains(&format!("release pid {pid} ")))
    else {
        bail!("held for its backlog ({held}) and never released");
    };
    let Some(from) = release.find("its backlog written in ") else {
        bail!("released before its backlog was written: {release}");
    };
    let said = |l: &'static str, line: &str| -> String {
        line[l.len()..]
            .split(" its writers left")
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let written = release[from..].split(';').next().unwrap_or_default();
    Ok(format!(
        "held for {}, {written}",
        said(DUE_FOR_RELEASE, held)
    ))
}

/// The pid of a "pid N is due for release" line that starts at `at` in the daemon's log.
fn waiting_pid(text: &str, at: usize) -> &str {
    text[..at]
        .rsplit_once("pid ")
        .map_or("", |(_, pid)| pid.trim())
}

/// A writer that starts while a restriction whose writers are gone waits for its backlog is
/// restricted at its first report, before that release: the "judged meanwhile" line, then the
/// newcomer's restriction, then (if within the run) the first one's release.
fn newcomer_held_while_draining(run: &Path) -> Result<String> {
    let text = daemon_log(run)?;
    let Some(at) = text.find(DUE_FOR_RELEASE) else {
        bail!("no release waited for a backlog");
    };
    let due = text[at..].lines().next().unwrap_or_default();
    if !due.contains("the disk's next writer is judged meanwhile") {
        bail!("the waiting restriction still holds the disk: {due}");
    }
    let pid = waiting_pid(&text, at);
    let after: Vec<&str> = text[at..].lines().collect();
    let released = after
        .iter()
        .position(|l| l.contains(&format!("release pid {pid} ")))
        .unwrap_or(after.len());
    let Some(newcomer) = after[..released]
        .iter()
        .find(|l| l.contains("restrict pid ") && !l.contains(&format!("restrict pid {pid} ")))
    else {
        let next = after
            .iter()
            .find(|l| l.contains("restrict pid "))
            .map_or("never".to_string(), |l| format!("only after it: {l}"));
        bail!("no other writer restricted while pid {pid}'s release waited ({next})");
    };
    let who = excerpt(newcomer, "restrict pid ", ")");
    let how = excerpt(newcomer, "dirtied ", "after)");
    let waited = if released < after.len() {
        "released after it"
    } else {
        "still waiting at the end of the run"
    };
    Ok(format!(
        "{who} {how}, while pid {pid}'s restriction waited for its backlog ({waited})"
    ))
}

/// The daemon's first restriction in a stall run, on a disk of known speed with the innocent
/// loads writing beside the offender, tightened memory.high to 8 MiB (docs/bench/commit-pause.md).
fn tightened_beside_others(run: &Path, held: &Result<Pauses>, min_mb_s: f64) -> Result<String> {
    let text = daemon_log(run)?;
    let (restrict, said) = restricted_beside_others(&text)?;
    if !restrict.contains(" memory.high=8M") {
        bail!("memory.high not 8M ({said}): {restrict}");
    }
    let Ok(held) = held else {
        bail!("no offender's rate to judge (others write {said})");
    };
    if held.offender_mb_s < min_mb_s {
        bail!(
            "the writer held at 8M dirtied {:.1} MB/s, under {min_mb_s} (others write {said})",
            held.offender_mb_s
        );
    }
    Ok(format!(
        "others write {said}; the writer held at 8M dirtied {:.1} MB/s",
        held.offender_mb_s
    ))
}

/// The daemon's first restriction in a log, and what the "others write" line before it said
/// (that the innocent loads wrote beside the offender when it was made).
fn restricted_beside_others(text: &str) -> Result<(&str, &str)> {
    let restrict = text
        .lines()
        .find(|l| l.contains("restrict pid"))
        .context("the daemon restricted nothing")?;
    let said = text
        .lines()
        .take_while(|l| !l.contains("restrict pid"))
        .find_map(|l| l.split_once(": others write ").map(|(_, w)| w))
        .with_context(|| format!("no \"others write\" line before the restriction: {restrict}"))?;
    Ok((restrict, said))
}

/// The daemon's first restriction in a run on a disk never measured, with the innocent loads
/// writing beside the offender, and every window of its speed probe, at memory.high 8 MiB.
fn held_beside_others_unmeasured(run: &Path) -> Result<String> {
    held_beside_others_unmeasured_in(&daemon_log(run)?)
}

fn held_beside_others_unmeasured_in(text: &str) -> Result<String> {
    let (restrict, said) = restricted_beside_others(text)?;
    if !restrict.contains("disk not measured") {
        bail!("the restriction was not on a disk never measured: {restrict}");
    }
    if !restrict.contains(" memory.high=8M") {
        bail!("held at the assumed speed without 8M beside others ({said}): {restrict}");
    }
    let windows: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("retune pid") && l.contains("latency control setting the rate"))
        .collect();
    if let Some(window) = windows.iter().find(|l| !l.contains(" memory.high=8M")) {
        bail!("a window without 8M beside others ({said}): {window}");
    }
    Ok(format!(
        "others write {said}; held at 8M, and in {} window(s)",
        windows.len()
    ))
}

/// The daemon's first restriction by a write limit on a disk never measured, with the innocent
/// loads writing beside the offender, at memory.high 8 MiB, and each step of the speed probe's
/// with others beside it at a quarter of a second of its limit (8 to 32 MiB).
fn held_by_limit_beside_others_in(text: &str) -> Result<String> {
    let (restrict, said) = restricted_beside_others(text)?;
    // The speed the restriction was judged at: the last such line before it.
    let unmeasured = text
        .lines()
        .take_while(|l| !l.contains("restrict pid"))
        .filter(|l| l.contains("judging writers against"))
        .last()
        .is_some_and(|l| l.contains("not yet measured"));
    if !unmeasured {
        bail!("the restriction was not on a disk never measured: {restrict}");
    }
    if !restrict.contains("io.max wbps=") {
        bail!("not held by a write limit: {restrict}");
    }
    if !restrict.contains(" memory.high=8M") {
        bail!("held by a write limit without 8M beside others ({said}): {restrict}");
    }
    let steps: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("retune pid") && l.contains("doubled every"))
        .filter(|l| l.contains("beside it"))
        .collect();
    for step in &steps {
        let field = |key: &str, unit: &str| {
            let at = step.find(key)? + key.len();
            step[at..].split(unit).next()?.parse::<f64>().ok()
        };
        let (Some(limit), Some(high)) = (field("wbps=", "MB/s"), field("memory.high=", "M")) else {
            bail!("a probe step without a write limit and memory.high: {step}");
        };
        // Never above the 32 MiB the assumed speed's restriction starts with.
        let wanted = ((limit * 1e6 * 0.25) as u64 >> 20).clamp(8, 32);
        if high as u64 != wanted {
            bail!("a probe step at {limit} MB/s with memory.high {high}M, not {wanted}M: {step}");
        }
    }
    Ok(format!(
        "others write {said}; held at 8M, and {} step(s) of the probe at a quarter second of \
         their limit",
        steps.len()
    ))
}

/// What a writer held at 8 MiB beside others dirties at least (the disk writes 25-27 MB/s of
/// the configured 30), on a kernel whose dirty counts the daemon refreshes (6.8 and later):
/// paced by them it keeps the disk busy (23.4-26.6 MB/s in this check on 6.12), where
/// memory.high's reclaim penalty held it to 12-16 MB/s until the daemon refreshed them
/// (`refresh_dirty_counts`, docs/bench/dirty-counts.md).
const MIN_HELD_BESIDE_OTHERS_MB_S: f64 = 18.0;
/// The same on kernels that keep the counts fresh themselves (6.1). There the writer held at
/// 8 MiB dirtied 16.7-20.9 MB/s in 15 runs of this check at stop 57, stop 47's daemon (when
/// the gate of 18 was set for both kernels) 19.3 and 20.0, with the refresh forced 17.4 and
/// 18.8: iocost's weight over the short queue memory.high leaves keeps it at two thirds of the
/// disk whatever the daemon does about the counts (README, "What falls short"). The gate of 18
/// failed CI at 17.5 (stop 56) on that noise; this one still catches a writer held to the 12-14
/// of memory.high's reclaim penalty.
const MIN_HELD_BESIDE_OTHERS_FRESH_COUNTS_MB_S: f64 = 15.0;

/// The gate of the check on a kernel series of the bed: where the daemon refreshes the held
/// writer's dirty counts (6.8 and later, `refresh_dirty_counts = "auto"`) and where not.
fn min_held_beside_others_mb_s(series: &str) -> f64 {
    if series_at_least(series, (6, 8)) {
        MIN_HELD_BESIDE_OTHERS_MB_S
    } else {
        MIN_HELD_BESIDE_OTHERS_FRESH_COUNTS_MB_S
    }
}

/// The daemon's first restriction in a stall run held the offender by iocost weight: 1, or 10
/// for the restriction's first 2 s and 1 at the next change of its weight.
fn held_by_iocost(run: &Path, model: &str) -> Result<String> {
    let text = daemon_log(run)?;
    held_by_iocost_in(&text, model)
}

fn held_by_iocost_in(text: &str, model: &str) -> Result<String> {
    let mut lines = text.lines().skip_while(|l| !l.contains("restrict pid"));
    let restrict = lines.next().context("the daemon restricted nothing")?;
    let at = restrict.find("io.weight").unwrap_or(0);
    let said = restrict[at..].to_string();
    if restrict.contains(&format!("io.weight=1 (iocost on, {model}")) {
        return Ok(said);
    }
    if !restrict.contains(&format!("io.weight=10 (iocost on, {model}"))
        || !restrict.contains("for its first 2s, then io.weight=1 ")
    {
        bail!("not held by iocost weight ({model}): {restrict}");
    }
    let pid = restrict
        .split("restrict pid ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap_or("?");
    // A retune within the onset (memory.high as others start writing) keeps its weight.
    let after = lines
        .find(|l| l.contains(&format!("retune pid {pid} on ")) && !l.contains("io.weight=10 "))
        .with_context(|| format!("no retune of pid {pid} after the onset: {restrict}"))?;
    if !after.contains("io.weight=1 ") {
        bail!("not at io.weight 1 after the onset: {after}");
    }
    Ok(format!(
        "{said}; then {}",
        &after[after.find("io.weight").unwrap_or(0)..]
    ))
}

/// Before any writer, ioshield's parent cgroup existed with `io` and `memory` enabled down to
/// it (stall.sh's `cgroup-at-start.txt`).
fn set_up_at_start(run: &Path) -> Result<String> {
    let path = run.join("results/cgroup-at-start.txt");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let enabled = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .is_some_and(|c| {
                let c: Vec<&str> = c.split_whitespace().collect();
                c.contains(&"io") && c.contains(&"memory")
            })
    };
    if !enabled("root:") || !enabled("ioshield:") {
        bail!(
            "not set up before the first writer: {}",
            text.lines().collect::<Vec<_>>().join("; ")
        );
    }
    // And iocost set up (off, with its model) on the disk before the first restriction, which
    // then only turned it on: no `iocost model` step in its line.
    let log = daemon_log(run)?;
    let first = |what: &str| log.lines().position(|l| l.contains(what));
    let restrict = match (first("iocost set up, off"), first("restrict pid")) {
        (Some(set_up), Some(restrict)) if set_up < restrict => log.lines().nth(restrict),
        (set_up, restrict) => bail!(
            "iocost not set up before the first restriction (set up at line {set_up:?}, first \
             restriction at line {restrict:?} of the daemon's log)"
        ),
    };
    let restrict = restrict.unwrap_or_default();
    if restrict.contains("iocost model ") {
        bail!("the first restriction wrote the iocost model set up ahead: {restrict}");
    }
    let took = restrict
        .split_once("processes, in ")
        .and_then(|(_, t)| t.split(')').next())
        .unwrap_or("?");
    Ok(format!(
        "{}; iocost set up before the first restriction, which took {took}",
        text.lines().collect::<Vec<_>>().join("; ")
    ))
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

fn pauses(results: &Path) -> Result<Pauses> {
    let metrics = |load: &str| -> Result<Metrics> {
        LoadRecord::load(&results.join(format!("{load}.json")))?
            .metrics
            .with_context(|| format!("{load}.json has no metrics"))
    };
    let (control, write, multiwrite) = (
        metrics("control")?,
        metrics("write")?,
        metrics("multiwrite")?,
    );
    Ok(Pauses {
        control: control.longest_pause_s,
        write: write.longest_pause_s,
        multiwrite: multiwrite.longest_pause_s,
        multiwrite_wait: multiwrite.wait_s,
        offender_mb_s: LoadRecord::load(&results.join("offender.json"))?.bytes_per_sec / 1e6,
    })
}

fn reproduces(p: &Pauses) -> bool {
    p.multiwrite >= MIN_STALL_S
}

/// The baseline runs, and whether the bed reproduced the stall in any of them.
fn describe_baseline(runs: &[Result<Pauses>]) -> Result<String> {
    let said = runs
        .iter()
        .map(|r| match r {
            Ok(p) => p.line(),
            Err(e) => format!("failed: {e:#}"),
        })
        .collect::<Vec<_>>()
        .join("; then ");
    let median = median_pauses(runs).map_err(|e| anyhow::anyhow!("{e:#} ({said})"))?;
    if !runs.iter().flatten().any(reproduces) {
        bail!(
            "no stall reproduced in {} runs (expected multiwrite >= {MIN_STALL_S}s): {said}",
            runs.len()
        );
    }
    Ok(format!(
        "median of {} runs: multiwrite {:.3}s (wait {:.0} ms), compared with; {said}",
        runs.iter().flatten().count(),
        median.multiwrite,
        median.multiwrite_wait * 1e3
    ))
}

/// The median of each figure over the runs that finished (of two, their mean).
fn median_pauses(runs: &[Result<Pauses>]) -> Result<Pauses> {
    let done: Vec<&Pauses> = runs.iter().flatten().collect();
    if done.is_empty() {
        let why = runs
            .iter()
            .filter_map(|r| r.as_ref().err().map(|e| format!("{e:#}")))
            .collect::<Vec<_>>()
            .join("; ");
        bail!("no baseline run finished: {why}");
    }
    let median = |f: fn(&Pauses) -> f64| {
        let mut v: Vec<f64> = done.iter().map(|p| f(p)).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    Ok(Pauses {
        control: median(|p| p.control),
        write: median(|p| p.write),
        multiwrite: median(|p| p.multiwrite),
        multiwrite_wait: median(|p| p.multiwrite_wait),
        offender_mb_s: median(|p| p.offender_mb_s),
    })
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
    if mitigated.multiwrite_wait > (MAX_WAIT_RATIO * none.multiwrite_wait).max(CLEAN_WAIT_S) {
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

#[cfg(test)]
mod tests {
    /// A fresh run directory with its `results/` for a check to read, removed when dropped, also
    /// when an assertion fails (a check's test left its directory in /tmp on every run).
    pub(in crate::vm::ci) struct RunDir(tempfile::TempDir);

    impl std::ops::Deref for RunDir {
        type Target = std::path::Path;

        fn deref(&self) -> &std::path::Path {
            self.0.path()
        }
    }

    pub(in crate::vm::ci) fn run_dir(name: &str) -> RunDir {
        let dir = tempfile::Builder::new()
            .prefix(&format!("ioshield-{name}-"))
            .tempdir()
            .unwrap();
        std::fs::create_dir_all(dir.path().join("results")).unwrap();
        RunDir(dir)
    }

    /// The first restriction is held by weight 1, or by 10 for its onset and then by 1.
    #[test]
    fn held_by_iocost_reads_the_onset_and_the_weight_after_it() {
        use super::held_by_iocost_in;
        let model = "disk not measured";
        let restrict = |w: u16, onset: &str| {
            format!(
                "2026-12-05T00:00:01Z  INFO restrict pid 217 (ioshield-load) tree 12.6 MB/s on \
                 /dev/vda, whose dirty backlog would take 1.4s to flush > 1s: io.weight={w} \
                 (iocost on, disk not measured: modelled at 25.0MB/s, the rate held at \
                 25.0MB/s) memory.high=8M{onset} (1 processes, in 79 ms)\n"
            )
        };
        let retune = |w: u16| {
            format!(
                "2026-12-05T00:00:03Z  INFO retune pid 217 on /dev/vda: io.weight={w} (iocost \
                 on, disk not measured: modelled at 25.0MB/s) memory.high=8M (held)\n"
            )
        };
        let onset = " for its first 2s, then io.weight=1";
        assert!(held_by_iocost_in(&restrict(1, ""), model).is_ok());
        let ok = restrict(10, onset) + &retune(10) + &retune(1);
        let said = held_by_iocost_in(&ok, model).unwrap();
        assert!(said.ends_with("then io.weight=1 (iocost on, disk not measured: modelled at 25.0MB/s) memory.high=8M (held)"), "{said}");
        // Never back to 1, or at 10 without the onset's words: not held as it should be.
        assert!(held_by_iocost_in(&(restrict(10, onset) + &retune(10)), model).is_err());
        assert!(held_by_iocost_in(&(restrict(10, onset) + &retune(2)), model).is_err());
        assert!(held_by_iocost_in(&(restrict(10, "") + &retune(1)), model).is_err());
        assert!(held_by_iocost_in(&restrict(1, ""), "disk modelled at 30.0MB/s").is_err());
        assert!(held_by_iocost_in("", model).is_err());
    }

    /// The one-window check fails on a window after a "no room" answer, a window's or a
    /// take-back's, and on a release too soon to tell, and passes a run whose disk showed room
    /// never taken back, or whose windows the writer used too little of, as not applicable.
    #[test]
    fn the_one_window_check_wants_no_window_after_no_room() {
        let dir = run_dir("onewin");
        let log = dir.join("results/daemon.log");
        let restrict =
            "2026-11-27T02:43:28.959150Z  INFO restrict pid 196 (ioshield-load) dirtied 6.3 MB\n";
        let window = |s: u32| {
            format!(
                "2026-11-27T02:43:{}.0Z  INFO retune pid 196 on /dev/vda: io.weight=1 (the disk's \
                 speed is not known after 7s: its rate left to the kernel's latency control until \
                 10s, to see whether the disk has room) pid=196 action=\"retune\"\n",
                28 + s
            )
        };
        let no_room = "2026-11-27T02:43:39.113266Z  INFO retune pid 196 on /dev/vda: io.weight=1 \
            (the disk's speed is not measured after 10s: the rate held at 25.0 MB/s (it wrote \
            16.1 MB/s with 0.70 writes in flight: no room)) pid=196 action=\"retune\"\n";
        let release = |s: u32| {
            format!(
                "2026-11-27T02:43:{s}.0Z  INFO release pid 196 (ioshield-load) on /dev/vda: \
                 nothing of it is left\n"
            )
        };
        let check = |text: String| {
            std::fs::write(&log, text).unwrap();
            super::one_window_after_no_room(&dir)
        };
        // The check fails, saying `why`.
        let fails = |text: String, why: &str| {
            let e = check(text).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        };
        // The daemon's speeds file, with or without the "no room" answer.
        let keep_no_room = |no_room: bool| {
            let text = if no_room {
                r#"{"at-least:serial:data": 2e7, "no-room:serial:data": 25000000.0}"#
            } else {
                r#"{"at-least:serial:data": 2e7}"#
            };
            std::fs::write(dir.join("results/disks.json"), text).unwrap();
        };
        keep_no_room(false);
        fails(
            format!("{restrict}{}{no_room}{}", window(7), release(49)),
            "not kept in the daemon's speeds file",
        );
        keep_no_room(true);
        let ok = check(format!("{restrict}{}{no_room}{}", window(7), release(49))).unwrap();
        assert!(
            ok.starts_with(
                "not measured after 10s: the rate held at 25.0 MB/s (it wrote 16.1 \
                            MB/s with 0.70 writes in flight: no room), and no window in the 10 s"
            ),
            "{ok}"
        );
        assert!(
            ok.ends_with("; kept as no-room:serial:data=25000000"),
            "{ok}"
        );
        fails(
            format!(
                "{restrict}{}{no_room}{}{}",
                window(7),
                window(13),
                release(49)
            ),
            "a window after the disk had answered",
        );
        fails(
            format!("{restrict}{}{no_room}{}", window(7), release(42)),
            "before a second window was due",
        );
        // A writer that leaves a backlog behind: its wait for it ends the windows as a release
        // does, and a window before it still fails.
        let due = "2026-11-27T02:43:48.0Z  INFO /dev/vda: pid 196 is due for release; held until \
                   the 310 MB its writers left are written\n";
        let ok = check(format!("{restrict}{}{no_room}{due}", window(7))).unwrap();
        assert!(ok.contains("and no window in the 9 s"), "{ok}");
        fails(
            format!("{restrict}{}{no_room}{}{due}", window(7), window(13)),
            "a window after the disk had answered",
        );
        fails(
            format!("{restrict}{}{no_room}", window(7)),
            "no release after the answer",
        );
        // The answer from the second window, the probe's last: no window is due after it.
        let idle = no_room.replace("no room)", "too little of the rate used to tell)");
        let second = no_room
            .replace("02:43:39", "02:43:44")
            .replace("after 10s", "after 15s");
        let ok = check(format!(
            "{restrict}{}{idle}{}{second}{}",
            window(7),
            window(12),
            release(47)
        ))
        .unwrap();
        assert!(
            ok.starts_with(
                "the probe's last window (the first saw too little of the rate used): not \
                 measured after 15s"
            ) && ok.contains("no window in the 3 s to the release"),
            "{ok}"
        );
        // Too little in an earlier restriction says nothing of this one.
        fails(
            format!(
                "{restrict}{}{idle}{}{restrict}{}{no_room}{}",
                window(7),
                release(40),
                window(7),
                release(42)
            ),
            "before a second window was due",
        );
        fails(format!("{restrict}{}", window(7)), "no window answered");
        let room = no_room.replace(
            "0.70 writes in flight: no room)",
            "0.12 writes in flight: room to spare)",
        );
        let ok = check(format!("{restrict}{}{room}{}", window(7), release(49))).unwrap();
        assert!(
            ok.starts_with("not applicable: the disk showed room"),
            "{ok}"
        );
        let idle = no_room.replace("no room)", "too little of the rate used to tell)");
        let ok = check(format!("{restrict}{}{idle}{}", window(7), release(49))).unwrap();
        assert!(ok.starts_with("not applicable: no window answered"), "{ok}");
        // Room taken back with "no room" at the rate held before answers as a window without
        // room would: no window after it, the release 5 s or more after the step it took back.
        let back = "2026-11-27T02:43:40.0Z  INFO /dev/vda: others waited on I/O 16% of the time \
            under the rate forced to 50.0 MB/s for the room the disk seemed to show: back to 25.0 \
            MB/s, no room to spare at it (/sys/fs/cgroup/session waited most); the first \
            take-back on this disk: its answer holds for this restriction only\n";
        keep_no_room(false);
        let ok = check(format!(
            "{restrict}{}{room}{back}{}",
            window(7),
            release(49)
        ))
        .unwrap();
        assert_eq!(
            ok,
            "/dev/vda: others waited on I/O 16% of the time under the rate forced to 50.0 MB/s \
             for the room the disk seemed to show: back to 25.0 MB/s, no room to spare at it, and \
             no window in the 10 s from the step to the release; not kept: a disk's first \
             take-back holds for its restriction only"
        );
        // A daemon that kept nothing wrote no speeds file at all (6.12's CI run of stop 85).
        std::fs::remove_file(dir.join("results/disks.json")).unwrap();
        let nothing_kept = check(format!(
            "{restrict}{}{room}{back}{}",
            window(7),
            release(49)
        ))
        .unwrap();
        assert_eq!(nothing_kept, ok);
        fails(
            format!("{restrict}{}{no_room}{}", window(7), release(49)),
            "not kept in the daemon's speeds file",
        );
        fails(
            format!(
                "{restrict}{}{room}{back}{}{}",
                window(7),
                window(15),
                release(49)
            ),
            "a window after the disk had answered",
        );
        fails(
            format!("{restrict}{}{room}{back}{}", window(7), release(43)),
            "s after the step taken back, before a second window was due",
        );
        fails(
            format!("{restrict}{back}{}", release(49)),
            "no step for room",
        );
        // A later take-back keeps its answer: the speeds file must have it.
        let later = back.replace(
            "; the first take-back on this disk: its answer holds for this restriction only",
            "",
        );
        fails(
            format!("{restrict}{}{room}{later}{}", window(7), release(49)),
            "not kept in the daemon's speeds file",
        );
        keep_no_room(true);
        let ok = check(format!(
            "{restrict}{}{room}{later}{}",
            window(7),
            release(49)
        ))
        .unwrap();
        assert!(
            ok.ends_with("; kept as no-room:serial:data=25000000"),
            "{ok}"
        );
    }

    /// The kept-answer check fails on any window and on a run whose restriction did not say it
    /// held the rate for the kept answer.
    #[test]
    fn the_kept_answer_check_wants_no_window_at_all() {
        let dir = run_dir("kept");
        let log = dir.join("results/daemon.log");
        let restrict = "2026-11-27T05:00:00Z  INFO restrict pid 196 (cp) dirtied 6.3 MB\n";
        let held = "2026-11-27T05:00:00Z  INFO /dev/vda: no speed-probe window in this \
            restriction: the disk showed no room at 25.0 MB/s in an earlier one\n";
        let window = "2026-11-27T05:00:07Z  INFO retune pid 196 on /dev/vda: io.weight=1 (the \
            disk's speed is not known after 7s: its rate left to the kernel's latency control \
            until 10s, to see whether the disk has room) pid=196 action=\"retune\"\n";
        let check = |text: String| {
            std::fs::write(&log, text).unwrap();
            super::no_window_after_kept_answer(&dir, 25e6)
        };
        assert_eq!(
            check(format!("{restrict}{held}")).unwrap(),
            "no speed-probe window in this restriction: the disk showed no room at 25.0 MB/s in \
             an earlier one"
        );
        let e = check(format!("{restrict}{window}{held}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("a window despite the kept answer"), "{e}");
        let faster = "2026-11-27T05:00:05Z  INFO retune pid 196 on /dev/vda: io.weight=1 (iocost \
            on, disk not measured: modelled at 25.0MB/s, the rate held at 31.5MB/s) memory.high=32M \
            (the disk is at least 31.7 MB/s) pid=196 action=\"retune\"\n";
        assert_eq!(
            check(format!("{restrict}{held}{faster}{window}")).unwrap(),
            "not applicable: a lower bound the answer does not cover came first: (the disk is at \
             least 31.7 MB/s)"
        );
        // A bound under a quarter above the answer leaves it standing.
        let covered = faster.replace("31.7 MB/s", "26.9 MB/s");
        let e = check(format!("{restrict}{held}{covered}{window}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("a window despite the kept answer"), "{e}");
        // The bound in the window's own line (6.1, CI of stop 41): 26.5 MB/s, one the answer
        // covers since stop 46.
        let bound_window = "2026-11-27T08:43:39Z  INFO retune pid 145 on /dev/vda: io.weight=1 \
            (iocost on, disk not measured: modelled at 25.0MB/s, the kernel's latency control \
            setting the rate between 6.2MB/s and 26.5MB/s) memory.high=32M (the disk's speed is \
            not known after 8s: its rate left to the kernel's latency control until 10s)\n";
        let e = check(format!("{restrict}{held}{bound_window}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("a window despite the kept answer"), "{e}");
        // At a rate the answer does not cover, it is not applicable.
        let beyond = bound_window.replace("26.5MB/s", "31.3MB/s");
        assert_eq!(
            check(format!("{restrict}{held}{beyond}")).unwrap(),
            "not applicable: the window's rate went up to 31.3 MB/s, not the answer's 25.0"
        );
        let e = check(restrict.to_string()).unwrap_err().to_string();
        assert!(
            e.contains("no restriction held the rate") && e.contains("restrict pid 196"),
            "{e}"
        );
    }

    /// The light-writer check wants a retune to weight 10 with 128 MiB for the untar's small
    /// files, before any speed-probe window, and every limit written.
    #[test]
    fn the_light_writer_check_wants_weight_10_and_128m_for_small_files() {
        let dir = run_dir("light");
        let log = dir.join("results/daemon.log");
        let restrict = "2026-11-27T07:12:01.1Z  INFO restrict pid 235 (exe) dirtied 6.3 MB in \
                        165 ms on /dev/vda: io.weight=1 (iocost on, disk not measured: modelled \
                        at 25.0MB/s, the rate held at 25.0MB/s) memory.high=32M (1 processes)\n";
        let window = "2026-11-27T07:12:08.1Z  INFO retune pid 235 on /dev/vda: io.weight=1 \
                      (iocost on, disk not measured: modelled at 25.0MB/s, the kernel's latency \
                      control setting the rate between 6.2MB/s and 25.0MB/s) memory.high=32M \
                      (the disk's speed is not known after 7s: its rate left to the kernel's \
                      latency control until 10s, to see whether the disk has room)\n";
        let light = "2026-11-27T07:12:02.1Z  INFO retune pid 235 on /dev/vda: io.weight=10 \
                     (iocost on, disk not measured: modelled at 25.0MB/s, the rate held at \
                     25.0MB/s) memory.high=128M (the disk's speed is not measured: held at the \
                     assumed 25.0 MB/s; its writers write many small files (292 files a second, 32 KiB \
                     each) and dirty 1.1 MB/s, under 25.0 MB/s: held at io.weight 10 while \
                     they do)\n";
        std::fs::write(&log, format!("{restrict}{light}")).unwrap();
        let said = super::lightened(&dir).unwrap();
        assert!(
            said.starts_with("its writers write many small files (292"),
            "{said}"
        );
        assert!(said.ends_with("while they do"), "{said}");
        // Never lightened.
        std::fs::write(&log, format!("{restrict}{window}")).unwrap();
        let e = super::lightened(&dir).unwrap_err().to_string();
        assert!(e.contains("never lightened"), "{e}");
        // Lightened but the held memory.high kept, or lifted.
        for other in ["memory.high=32M ", ""] {
            let kept = light.replace("memory.high=128M ", other);
            std::fs::write(&log, format!("{restrict}{kept}")).unwrap();
            let e = super::lightened(&dir).unwrap_err().to_string();
            assert!(e.contains("without the light writer's memory.high"), "{e}");
        }
        // Lightened for a window's verdict, not its files.
        let by_window = light.replace(
            "write many small files (292 files a second, 32 KiB each)",
            "used too little of the rate to tell",
        );
        std::fs::write(&log, format!("{restrict}{window}{by_window}")).unwrap();
        let e = super::lightened(&dir).unwrap_err().to_string();
        assert!(e.contains("not for its small files"), "{e}");
        // Lightened for its files, but only after a window.
        std::fs::write(&log, format!("{restrict}{window}{light}")).unwrap();
        let e = super::lightened(&dir).unwrap_err().to_string();
        assert!(e.contains("only after a speed-probe window"), "{e}");
        // A limit the kernel refused.
        let refused = "2026-11-27T07:12:12.1Z  WARN cannot change the limits on /dev/vda: \
                       writing io.weight: Invalid argument\n";
        std::fs::write(&log, format!("{restrict}{window}{light}{refused}")).unwrap();
        let e = super::lightened(&dir).unwrap_err().to_string();
        assert!(e.contains("a limit not written"), "{e}");
    }

    /// An untar that was never lightened says nothing of it only when it dirtied under the
    /// rate a writer must keep up on the assumed disk and no restriction came from its speed.
    #[test]
    fn a_slow_untar_restricted_only_for_the_backlog_says_nothing_of_the_lightening() {
        let dir = run_dir("slow-untar");
        let log = dir.join("results/daemon.log");
        let offender = dir.join("results/offender.json");
        let record = |bytes: u64, ran: f64| {
            format!(
                "{{\"load\":\"offender-tar\",\"pid\":126,\"nominal_s\":0,\"start_s\":19.34,\
                 \"cycle_ends_s\":[50.30],\"metrics\":null,\"bytes_written\":{bytes},\
                 \"bytes_per_sec\":8670395.8,\"exited_s\":{}}}",
                19.34 + ran
            )
        };
        let by_backlog = "2026-11-29T17:31:00.8Z  INFO restrict pid 168 (exe) tree 12.8 MB/s on \
                          /dev/vda, whose dirty backlog would take 9.4s to flush > 1s: \
                          io.weight=1 (iocost on) memory.high=32M (1 processes)\n";
        let by_burst = "2026-11-29T17:30:45.1Z  INFO restrict pid 168 (exe) dirtied 6.3 MB in \
                        165 ms on /dev/vda: io.weight=1 (iocost on) memory.high=32M\n";
        // Stop 60's CI run: 256 MiB in 18.4 s, restricted near its end for the backlog.
        std::fs::write(&offender, record(268_435_456, 18.38)).unwrap();
        std::fs::write(&log, by_backlog).unwrap();
        let said = super::slow_untar(&dir).unwrap().expect("a slow untar");
        assert!(
            said.starts_with("the untar dirtied 14.6 MB/s in its 18.4 s"),
            "{said}"
        );
        // Never restricted at all.
        std::fs::write(&log, "").unwrap();
        assert!(super::slow_untar(&dir).unwrap().is_some());
        // A limit refused: a failure whatever the untar's speed.
        let refused = "2026-11-29T17:31:01.8Z  WARN cannot change the limits on /dev/vda: \
                       writing io.weight: Invalid argument\n";
        std::fs::write(&log, format!("{by_backlog}{refused}")).unwrap();
        assert_eq!(super::slow_untar(&dir).unwrap(), None);
        // Restricted for a burst: the lightening should have followed.
        std::fs::write(&log, format!("{by_burst}{by_backlog}")).unwrap();
        assert_eq!(super::slow_untar(&dir).unwrap(), None);
        // Fast enough to be restricted for its speed.
        std::fs::write(&offender, record(268_435_456, 12.0)).unwrap();
        std::fs::write(&log, by_backlog).unwrap();
        assert_eq!(super::slow_untar(&dir).unwrap(), None);
    }

    /// The drain check wants the wait and a release after the backlog was written, and says
    /// what it saw otherwise.
    #[test]
    fn the_drain_check_wants_the_release_after_the_backlog() {
        let dir = run_dir("drain");
        let log = dir.join("results/daemon.log");
        let restrict = "2026-11-26T12:00:00Z  INFO restrict pid 140 (ioshield-load) dirtied 6.3 \
            MB\n";
        let held = "2026-11-26T12:00:09Z  INFO /dev/vda: pid 140 is due for release; held until \
            the 301.2 MB its writers left are written\n";
        let release = |why: &str| {
            format!(
                "2026-11-26T12:00:20Z  INFO release pid 140 (ioshield-load) on /dev/vda: nothing \
                 of it is left{why}; 3 restored, 0 kept as changed by someone else, 0 gone \
                 pid=140 action=\"release\"\n"
            )
        };
        let check = |text: &str| {
            std::fs::write(&log, text).unwrap();
            super::released_after_its_backlog(&dir)
        };
        let at_once = release("");
        let e = check(&format!("{restrict}{at_once}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no release waited") && e.contains("release pid 140"),
            "{e}"
        );
        let e = check(&format!("{restrict}{held}")).unwrap_err().to_string();
        assert!(e.contains("never released"), "{e}");
        let late = release("; 40.0 MB of its backlog still unwritten after 46.9s");
        let e = check(&format!("{restrict}{held}{late}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("released before its backlog was written"), "{e}");
        let drained = release("; its backlog written in 11.3s");
        assert_eq!(
            check(&format!("{restrict}{held}{drained}")).unwrap(),
            "held for 301.2 MB, its backlog written in 11.3s"
        );
    }

    /// The newcomer check wants another writer restricted after the wait began apart and
    /// before that restriction's release.
    #[test]
    fn the_newcomer_check_wants_the_next_writer_held_during_the_wait() {
        let dir = run_dir("newcomer");
        let log = dir.join("results/daemon.log");
        let first = "2026-11-29T04:02:46Z  INFO restrict pid 214 (ioshield-load) dirtied 7.5 MB \
            in 152 ms on /dev/vda, faster than the disk's 30.0 MB/s (judged 9 ms after): \
            io.weight=1\n";
        let apart = "2026-11-29T04:02:51Z  INFO /dev/vda: pid 214 is due for release; held \
            until the 27.3 MB its writers left are written; its processes gone, the disk's next \
            writer is judged meanwhile\n";
        let held = "2026-11-29T04:02:51Z  INFO /dev/vda: pid 214 is due for release; held \
            until the 27.3 MB its writers left are written\n";
        let next = "2026-11-29T04:02:52Z  INFO restrict pid 216 (ioshield-load) dirtied 7.5 MB \
            in 101 ms on /dev/vda, faster than the disk's 30.0 MB/s (judged 4 ms after): \
            io.weight=1\n";
        let release = "2026-11-29T04:02:53Z  INFO release pid 214 (ioshield-load) on /dev/vda: \
            nothing of it is left; its backlog written in 1.0s; 0 restored\n";
        let check = |text: &str| {
            std::fs::write(&log, text).unwrap();
            super::newcomer_held_while_draining(&dir)
        };
        let e = check(&format!("{first}{held}{release}{next}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("still holds the disk"), "{e}");
        let e = check(&format!("{first}{apart}{release}{next}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no other writer restricted while pid 214's release waited")
                && e.contains("only after it"),
            "{e}"
        );
        assert_eq!(
            check(&format!("{first}{apart}{next}{release}")).unwrap(),
            "restrict pid 216 (ioshield-load) dirtied 7.5 MB in 101 ms on /dev/vda, faster than \
             the disk's 30.0 MB/s (judged 4 ms after), while pid 214's restriction waited for \
             its backlog (released after it)"
        );
        // The release check follows the waiting restriction's pid, not the newcomer's.
        let next_release = release.replace("pid 214", "pid 216");
        let text = format!("{first}{apart}{next}{next_release}");
        std::fs::write(&log, text).unwrap();
        let e = super::released_after_its_backlog(&dir)
            .unwrap_err()
            .to_string();
        assert!(e.contains("never released"), "{e}");
    }

    /// 6.1's held writer kept 32 MiB beside the loads until stop 71 (its dirty counts are
    /// current without the daemon's refresh, but only the refresh counted).
    #[test]
    fn the_unmeasured_holding_check_wants_8m_held_and_in_every_window() {
        let others =
            "INFO /dev/vda: pid 157: others write 24 kB/s beside it: memory.high at most 8M\n";
        let restrict = |high: &str| {
            format!(
                "INFO restrict pid 157 (ioshield-load) dirtied 6.3 MB in 81 ms on /dev/vda: \
                 io.weight=1 (iocost on, disk not measured: modelled at 25.0MB/s, the rate held \
                 at 25.0MB/s) memory.high={high} (1 processes)\n"
            )
        };
        let window = |high: &str| {
            format!(
                "INFO retune pid 157 on /dev/vda: io.weight=25 (iocost on, disk not measured: \
                 modelled at 25.0MB/s, the kernel's latency control setting the rate between \
                 6.2MB/s and 25.8MB/s) memory.high={high} (the disk's speed is not known)\n"
            )
        };
        let check = super::held_beside_others_unmeasured_in;
        let ok = check(&format!("{others}{}{}", restrict("8M"), window("8M"))).unwrap();
        assert_eq!(
            ok,
            "others write 24 kB/s beside it: memory.high at most 8M; held at 8M, and in 1 \
             window(s)"
        );
        for bad in [
            format!("{others}{}{}", restrict("32M"), window("32M")),
            format!("{others}{}{}", restrict("8M"), window("32M")),
            format!("{}{others}{}", restrict("8M"), window("8M")),
            format!(
                "{others}{}",
                restrict("8M").replace("disk not measured", "disk modelled")
            ),
            others.to_string(),
        ] {
            assert!(check(&bad).is_err(), "{bad}");
        }
    }

    /// Under a write limit on a disk never measured: 8M at the restriction, a quarter second of
    /// each probe step's limit with others beside it.
    #[test]
    fn the_write_limit_holding_check_wants_8m_and_a_quarter_second_of_each_step() {
        let judged = "INFO /dev/vda: judging writers against 25.0 MB/s (not yet measured, \
            assumed as slow as a USB stick)\n";
        let others =
            "INFO /dev/vda: pid 244: others write 24 kB/s beside it: memory.high at most 8M\n";
        let restrict = |high: &str| {
            format!(
                "INFO restrict pid 244 (cp) dirtied 6.3 MB in 46 ms on /dev/vda, faster than \
                 the disk's 25.0 MB/s (judged 10 ms after): io.max wbps=18.8MB/s \
                 memory.high={high} (1 processes)\n"
            )
        };
        let step = |wbps: &str, high: &str| {
            format!(
                "INFO retune pid 244 on /dev/vda: io.max wbps={wbps}MB/s memory.high={high} (the \
                 disk's speed is not measured after 15s: writes at {wbps} MB/s, doubled every 5s \
                 until it is measured; others write 66 kB/s beside it: memory.high at most \
                 {high})\n"
            )
        };
        let check = super::held_by_limit_beside_others_in;
        let good = format!(
            "{judged}{others}{}{}{}",
            restrict("8M"),
            step("25.0", "8M"),
            step("50.0", "11M")
        );
        assert_eq!(
            check(&good).unwrap(),
            "others write 24 kB/s beside it: memory.high at most 8M; held at 8M, and 2 step(s) \
             of the probe at a quarter second of their limit"
        );
        for bad in [
            format!("{judged}{others}{}", restrict("32M")),
            format!("{judged}{others}{}{}", restrict("8M"), step("50.0", "32M")),
            format!("{others}{}", restrict("8M")),
            format!(
                "{judged}{}{others}{}",
                judged.replace(
                    "25.0 MB/s (not yet measured, assumed as slow as a USB stick)",
                    "29.8 MB/s (measured)"
                ),
                restrict("8M")
            ),
            format!(
                "{judged}{others}{}",
                restrict("8M").replace("io.max wbps=18.8MB/s", "io.weight=1")
            ),
            judged.to_string(),
        ] {
            assert!(check(&bad).is_err(), "{bad}");
        }
    }

    /// The tightening check wants the "others write" line before the restriction, 8M in it,
    /// and the writer held there dirtying at least `MIN_HELD_BESIDE_OTHERS_MB_S`.
    #[test]
    fn the_tightening_check_wants_8m_beside_others() {
        let dir = run_dir("beside");
        let held = |mb_s: f64| super::Pauses {
            control: 0.01,
            write: 0.07,
            multiwrite: 0.06,
            multiwrite_wait: 0.0,
            offender_mb_s: mb_s,
        };
        let check_at = |log: &str, mb_s: f64| {
            std::fs::write(dir.join("results/daemon.log"), log).unwrap();
            super::tightened_beside_others(&dir, &Ok(held(mb_s)), 18.0)
        };
        let check = |log: &str| check_at(log, 26.6);
        let others =
            "INFO /dev/vda: pid 202: others write 41 kB/s beside it: memory.high at most 8M\n";
        let restrict = |high: &str| {
            format!(
                "INFO restrict pid 202 (ioshield-load) dirtied 6.3 MB in 86 ms on /dev/vda: \
                 io.weight=1 (iocost on, disk modelled at 30.0MB/s) memory.high={high} (1 processes)\n"
            )
        };
        assert_eq!(
            check(&format!("{others}{}", restrict("8M"))).unwrap(),
            "others write 41 kB/s beside it: memory.high at most 8M; the writer held at 8M \
             dirtied 26.6 MB/s"
        );
        // Held by memory.high's penalty (6.12 with the kernel's stale dirty counts).
        let e = check_at(&format!("{others}{}", restrict("8M")), 12.1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("dirtied 12.1 MB/s, under 18"), "{e}");
        let no_run =
            super::tightened_beside_others(&dir, &Err(anyhow::anyhow!("stall failed")), 18.0);
        assert!(no_run.is_err());
        assert!(check(&format!("{others}{}", restrict("32M"))).is_err());
        assert!(check(&restrict("8M")).is_err());
        assert!(check(&format!("{}{others}", restrict("8M"))).is_err());
        assert!(check(others).is_err());
    }

    #[test]
    fn the_set_up_check_wants_io_and_memory_down_to_the_parent() {
        let dir = run_dir("setup");
        let file = dir.join("results/cgroup-at-start.txt");
        let log = dir.join("results/daemon.log");
        std::fs::write(
            &file,
            "root: cpuset cpu io memory pids\nioshield: io memory\n",
        )
        .unwrap();
        let set_up = "2026-11-25T12:00:01Z  INFO 254:0: iocost set up, off, modelled at \
            25.0MB/s, ahead of a restriction there\n";
        let restrict = "2026-11-25T12:00:05Z  INFO restrict pid 140 (cp) dirtied 6.3 MB ... \
            (1 processes, in 61 ms: move 25 ms, iocost qos 33 ms)\n";
        std::fs::write(&log, format!("{set_up}{restrict}")).unwrap();
        let ok = super::set_up_at_start(&dir).unwrap();
        assert!(
            ok.ends_with("which took 61 ms: move 25 ms, iocost qos 33 ms"),
            "{ok}"
        );
        let slow = restrict.replace("move 25 ms,", "move 25 ms, iocost model 40 ms,");
        std::fs::write(&log, format!("{set_up}{slow}")).unwrap();
        let e = super::set_up_at_start(&dir).unwrap_err().to_string();
        assert!(e.contains("wrote the iocost model set up ahead"), "{e}");
        std::fs::write(&log, format!("{restrict}{set_up}")).unwrap();
        let e = super::set_up_at_start(&dir).unwrap_err().to_string();
        assert!(
            e.contains("iocost not set up before the first restriction"),
            "{e}"
        );
        std::fs::write(&log, format!("{set_up}{restrict}")).unwrap();
        std::fs::write(&file, "root: cpuset cpu pids\n").unwrap();
        let e = super::set_up_at_start(&dir).unwrap_err().to_string();
        assert!(
            e.contains("not set up before the first writer: root: cpuset"),
            "{e}"
        );
        std::fs::write(&file, "root: io memory\nioshield: io\n").unwrap();
        assert!(super::set_up_at_start(&dir).is_err());
    }

    #[test]
    fn kernel_series_with_per_bdi_byte_limits() {
        assert!(!super::has_bdi_byte_limits("6.1"));
        assert!(super::has_bdi_byte_limits("6.2"));
        assert!(super::has_bdi_byte_limits("6.12"));
        assert!(super::has_bdi_byte_limits("7.0"));
        assert!(!super::has_bdi_byte_limits("5.19"));
        assert!(!super::has_bdi_byte_limits("unknown"));
    }

    #[test]
    fn the_held_writers_gate_is_higher_where_the_daemon_refreshes_its_counts() {
        assert_eq!(super::min_held_beside_others_mb_s("6.12"), 18.0);
        assert_eq!(super::min_held_beside_others_mb_s("6.8"), 18.0);
        assert_eq!(super::min_held_beside_others_mb_s("6.1"), 15.0);
        assert_eq!(super::min_held_beside_others_mb_s("6.7"), 15.0);
    }

    /// A run of one kernel runs there alone when both are tested, and on the one tested
    /// otherwise; every other run runs on each.
    #[test]
    fn one_kernel_runs_on_theirs_or_on_the_one_tested() {
        let both = ["6.1".to_string(), "6.12".to_string()];
        assert!(super::runs_here("ioshield-desktop", "6.12", &both));
        assert!(!super::runs_here("ioshield-desktop", "6.1", &both));
        assert!(super::runs_here("ioshield-fast", "6.1", &both));
        assert!(!super::runs_here("ioshield-fast", "6.12", &both));
        let old = ["6.1".to_string()];
        assert!(super::runs_here("ioshield-desktop", "6.1", &old));
        assert!(super::runs_here("ioshield-drain", "6.1", &both));
        assert!(super::runs_here("ioshield-drain", "6.12", &both));
    }

    #[test]
    fn a_wait_is_compared_with_none_unless_it_is_clean() {
        let pauses = |multiwrite: f64, wait: f64| super::Pauses {
            control: 0.02,
            write: multiwrite,
            multiwrite,
            multiwrite_wait: wait,
            offender_mb_s: 30.0,
        };
        // stop 84's failed 6.12 run: none waited 25 ms, the guard 13.
        let none = Ok(pauses(0.767, 0.025));
        assert!(super::compare(&pauses(0.242, 0.013), &none).is_ok());
        // Over half of none's, and not clean.
        let stalled = Ok(pauses(3.7, 0.292));
        assert!(super::compare(&pauses(0.6, 0.16), &stalled).is_err());
        assert!(super::compare(&pauses(0.6, 0.12), &stalled).is_ok());
        // The longest pause is judged as before.
        assert!(super::compare(&pauses(0.6, 0.013), &none).is_err());
    }

    /// The bed reproduces the stall when any baseline run stalled; the mitigated runs are
    /// compared with the runs' median.
    #[test]
    fn a_baseline_is_the_median_of_its_runs() {
        let pauses = |multiwrite: f64, wait: f64| super::Pauses {
            control: 0.05,
            write: multiwrite,
            multiwrite,
            multiwrite_wait: wait,
            offender_mb_s: 32.0,
        };
        // Stop 86's CI on 6.12: 0.41 then 0.48 s, and a third run not made.
        let quiet = [Ok(pauses(0.412, 0.023)), Ok(pauses(0.479, 0.010))];
        let e = super::describe_baseline(&quiet).unwrap_err();
        assert!(
            e.to_string().starts_with("no stall reproduced in 2 runs"),
            "{e}"
        );
        let three = [
            Ok(pauses(0.412, 0.023)),
            Ok(pauses(0.479, 0.010)),
            Ok(pauses(1.96, 0.114)),
        ];
        let ok = super::describe_baseline(&three).unwrap();
        assert!(
            ok.starts_with("median of 3 runs: multiwrite 0.479s (wait 23 ms)"),
            "{ok}"
        );
        assert!(
            ok.contains("multiwrite 0.412s") && ok.contains("multiwrite 1.960s"),
            "{ok}"
        );
        // Of two, their mean: the drain's 0.35 s is then below 75% of it.
        let two = [Ok(pauses(0.412, 0.023)), Ok(pauses(1.96, 0.114))];
        let median = super::median_pauses(&two).unwrap();
        assert!((median.multiwrite - 1.186).abs() < 1e-9);
        assert!((median.multiwrite_wait - 0.0685).abs() < 1e-9);
        assert!(super::compare(&pauses(0.352, 0.003), &Ok(median)).is_ok());
        // A run that failed is left out, and said.
        let one_failed = [Err(anyhow::anyhow!("guest died")), Ok(pauses(0.9, 0.05))];
        let ok = super::describe_baseline(&one_failed).unwrap();
        assert!(
            ok.starts_with("median of 1 runs: multiwrite 0.900s"),
            "{ok}"
        );
        assert!(ok.contains("failed: guest died"), "{ok}");
        let none_done = [
            Err(anyhow::anyhow!("guest died")),
            Err(anyhow::anyhow!("timeout")),
        ];
        let e = super::describe_baseline(&none_done).unwrap_err();
        assert!(e.to_string().contains("guest died; timeout"), "{e}");
    }
}
