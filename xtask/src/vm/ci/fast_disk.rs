//! The speed probe on a disk five times faster than assumed (the "ioshield-fast probe" check):
//! a window in which the disk completes the held writer's writes with time to spare must force
//! the rate up. Whether the disk had that time is read twice: by the daemon, and here from the
//! disk's own counters (stall.sh's `DISK_TRACE`), so that a run in which the emulated disk was
//! not fast (the host's shared CPU and disk behind qemu: CI of stop 49 saw the 150 MB/s disk
//! complete 24 and 44 MB/s in its windows) is told apart from a probe that missed the room.
use std::{fs, path::Path};

use anyhow::{Context as _, Result, bail};

use super::{HELD, LISTENING, daemon_log, decisions, excerpt, kept_speeds, window_top};

/// The fast disk of the probe check: qemu's throttle at 150 MB/s (under emulation it completes
/// 60-105 MB/s under a backlog).
pub(super) const FAST_DISK_BPS: u64 = 150_000_000;

/// How many times the window's highest rate the disk must complete its writes at, kept busy, to
/// show room: the daemon's `speed_probe` steps up only to half that speed (`ROOM_MARGIN`), and
/// only when that is a quarter above the rate (`QUARTER`): 1.25 / 0.5. It asks that of the
/// window in all and of each whole span of it in which the writer used its rate
/// (`Spans::slowest`, since stop 73), so the counters are read the same way.
const ROOM_SPEED: f64 = 2.5;

/// The share of the window's highest rate the writer must have completed, in the window and in
/// a span, for the daemon to judge the disk by it (`LISTENED_BUSY`).
const USED_SHARE: f64 = 0.6;

/// How far over [`ROOM_SPEED`] the counters must show the disk before a run that stepped
/// without room fails: this reading and the daemon's own bound their windows and spans a
/// sample apart (0.25 s of a 3 s window). CI of stop 80 read a window at 63 MB/s kept busy
/// where the daemon had read 60, against a bound of 62.5: the same disk, on either side of it.
const READING_MARGIN: f64 = 1.1;

/// The least seconds of a span: the daemon's `pressure::MIN_SPAN`.
const SPAN_SECONDS: f64 = 0.75;

/// What the probe check found in one run.
pub(super) enum Probe {
    /// The step that forced the rate up for the room the disk showed (an excerpt of its line).
    Room(String),
    /// No window in which the disk, by its own counters, completed its writes fast enough to
    /// show room: the run says nothing of the probe.
    NotFast(String),
}

/// The speed probe forced the rate of a restriction on a disk not measured above the assumed
/// speed because the disk showed room to spare: the first such `retune` line, from its "after".
/// Without one, whether the disk's counters showed room in a window: if they did, the probe
/// missed it.
pub(super) fn forced_by_room(run: &Path) -> Result<Probe> {
    let text = daemon_log(run)?;
    let windows = disk_windows(run, &text)?;
    let seen = windows
        .iter()
        .map(DiskWindow::describe)
        .collect::<Vec<_>>()
        .join("; ");
    if let Some(line) = text
        .lines()
        .find(|l| l.contains("retune pid") && l.contains("writes in flight: room to spare)"))
    {
        // The counters' reading beside the daemon's, in every run's line.
        return Ok(Probe::Room(format!(
            "{} (the disk's counters in its windows: {seen})",
            excerpt(line, "not measured after", "room to spare)")
        )));
    }
    let said = || decisions(&text, HELD).join(" | ");
    if windows.is_empty() {
        bail!(
            "no step with room to spare, and no window the disk's counters cover; the daemon's \
             decisions: {}",
            said()
        );
    }
    if windows.iter().any(DiskWindow::fast) {
        bail!(
            "no step with room to spare, though the disk's counters showed it fast in a window \
             ({seen}); the daemon's decisions: {}",
            said()
        );
    }
    Ok(Probe::NotFast(format!(
        "the disk was not fast in any window, by its counters: {seen}"
    )))
}

/// The rate a probe step forced because the disk showed room, bytes/s, from its line: "...
/// the rate held at 50.0 MB/s at least (it wrote ...: room to spare)".
pub(super) fn room_rate(line: &str) -> Option<f64> {
    let (before, _) = line.split_once(" MB/s at least (it wrote")?;
    let (_, mb) = before.rsplit_once("the rate held at ")?;
    mb.parse::<f64>().ok().map(|v| v * 1e6)
}

/// The rate a step forced for the room the disk showed (`room`, its line), without the disk
/// showing its speed under it, is what the daemon kept of the disk when it stopped: a lower
/// bound at least that rate in its speeds file, from which the next restriction starts
/// (`SpeedProbe::room_proven`). A disk measured meanwhile keeps its speed instead.
pub(super) fn room_kept(run: &Path, room: &str) -> Result<String> {
    let Some(rate) = room_rate(room) else {
        bail!("no forced rate in the room step: {room}");
    };
    let kept = kept_speeds(run)?;
    if let Some((k, v)) = kept.iter().find(|(k, _)| k.starts_with("serial:")) {
        return Ok(format!(
            "not applicable: the disk was measured ({k} = {:.1} MB/s)",
            v / 1e6
        ));
    }
    // The held writer's own lower bound may be as high: the daemon must say the bound is the
    // probe's.
    let Some(proven) = daemon_log(run)?
        .lines()
        .find(|l| l.contains(ROOM_PROVEN))
        .map(str::to_string)
    else {
        bail!(
            "room shown for {:.1} MB/s, but the daemon never kept a rate the probe forced: {kept:?}",
            rate / 1e6
        );
    };
    // The step's line shows the rate to 0.1 MB/s.
    match kept.iter().find(|(k, _)| k.starts_with("at-least:")) {
        Some((k, v)) if *v >= rate - 0.05e6 => Ok(format!(
            "kept {k} = {:.1} MB/s (room shown for {:.1}; {})",
            v / 1e6,
            rate / 1e6,
            excerpt(&proven, "at least ", ROOM_PROVEN)
        )),
        _ => bail!(
            "room shown for {:.1} MB/s, but the speeds file kept no lower bound that high: \
             {kept:?}",
            rate / 1e6
        ),
    }
}

/// The first room step keeps the writer's memory.high where the held rate had it, and raises
/// it as the disk is heard keeping up (`SpeedProbe::room_ramp`), to a second of the forced rate
/// (the shipped `max_flush_seconds`): raised at once, a false room's 30 MB/s disk queued the
/// writer's 47 MB before anything heard it (docs/bench/speed-probe.md, stop 70). Read from the
/// room step's line to the next step, take-back or release. The next step may come first: six
/// spans (stop 72) take 4.5-6 s at readings every 250 ms, and a step from a forced rate has the
/// memory.high of its own rate at once; the ramp must have risen by then.
pub(super) fn memory_high_ramped(run: &Path) -> Result<String> {
    ramped_in(&daemon_log(run)?)
}

/// How the daemon says the disk kept up under a room step, one span more
/// (`probe_hearing::hear_others`).
const KEPT_UP: &str = "the disk kept up under the rate forced for room";

fn ramped_in(text: &str) -> Result<String> {
    let is_room =
        |l: &str| l.contains("retune pid") && l.contains("writes in flight: room to spare)");
    let mut lines = text.lines().skip_while(|l| !is_room(l));
    let Some(step) = lines.next() else {
        bail!("no room step in the daemon's log");
    };
    let Some(rate) = room_rate(step) else {
        bail!("no forced rate in the room step: {step}");
    };
    let Some(at_step) = memory_high(step) else {
        bail!("no memory.high in the room step: {step}");
    };
    // The daemon shows memory.high in whole MiB, rounded down.
    let full = (rate / f64::from(1u32 << 20)) as u64;
    if at_step >= full {
        bail!(
            "memory.high {at_step}M at the room step for {:.1} MB/s: raised at once",
            rate / 1e6
        );
    }
    let mut seen = vec![at_step];
    let mut spans = 0;
    let mut next_step = false;
    for line in lines {
        if line.contains(KEPT_UP) {
            spans += 1;
        } else if line.contains("retune pid") {
            // The ramp's retunes repeat the step's words; the next step names another rate.
            if room_rate(line).is_some_and(|r| r != rate) || line.contains("a quarter more") {
                next_step = true;
                break;
            }
            seen.extend(memory_high(line));
        } else if line.contains("release pid") || line.contains("seemed to show: back to") {
            return Ok(format!(
                "not applicable: the room step ended before its memory.high reached {full}M \
                 ({})",
                show(&seen)
            ));
        }
        if seen.last().is_some_and(|m| *m >= full) {
            break;
        }
    }
    let rose = seen.windows(2).all(|w| w[0] <= w[1]);
    match seen.last() {
        Some(last) if *last >= full && rose && spans > 0 => Ok(format!(
            "memory.high {} under the room step for {:.1} MB/s, over {spans} span(s) the disk \
             kept up",
            show(&seen),
            rate / 1e6
        )),
        Some(last) if next_step && *last > at_step && rose && spans > 0 => Ok(format!(
            "memory.high {} under the room step for {:.1} MB/s, over {spans} span(s) the disk \
             kept up, until the next step",
            show(&seen),
            rate / 1e6
        )),
        _ => bail!(
            "memory.high {} under the room step for {:.1} MB/s, {spans} span(s) heard kept up: \
             not up to the forced rate's {full}M step by step",
            show(&seen),
            rate / 1e6
        ),
    }
}

/// The `memory.high=NM` of a daemon's retune line, MiB.
fn memory_high(line: &str) -> Option<u64> {
    let (_, after) = line.split_once(" memory.high=")?;
    after.split_once('M')?.0.parse().ok()
}

fn show(seen: &[u64]) -> String {
    seen.iter()
        .map(|m| format!("{m}M"))
        .collect::<Vec<_>>()
        .join(" -> ")
}

/// How the daemon says a rate its speed probe forced for the disk's room is kept as a lower
/// bound (`probe_hearing::keep_room_proven`).
const ROOM_PROVEN: &str = "the speed probe forced that rate for the room the disk showed";

/// A run's outcome in words, for the check's line.
pub(super) fn said(run: &Result<Probe>) -> String {
    match run {
        Ok(Probe::Room(ok)) => ok.clone(),
        Ok(Probe::NotFast(why)) => why.clone(),
        Err(e) => format!("{e:#}"),
    }
}

/// A speed-probe window as the disk's counters saw it, from the window's line to the step's.
struct DiskWindow {
    /// The highest rate the window let the writer write, bytes/s.
    top: f64,
    /// What the disk completed in all.
    all: Completed,
    /// The span of the window, among those in which the writer used its rate, that the disk
    /// completed slowest kept busy.
    slowest: Option<Completed>,
}

/// What the disk completed over some seconds.
#[derive(Clone, Copy)]
struct Completed {
    seconds: f64,
    /// Bytes/s.
    wrote: f64,
    /// What it would complete kept busy: bytes over the time its writes were in flight.
    busy: f64,
}

impl Completed {
    fn between(a: &DiskSample, b: &DiskSample) -> Completed {
        let seconds = b.at - a.at;
        let bytes = (b.sectors - a.sectors) * 512.0;
        let writing = (b.write_ms - a.write_ms) / 1000.0;
        Completed {
            seconds,
            wrote: bytes / seconds,
            busy: if writing > 0.0 {
                bytes / writing
            } else {
                f64::INFINITY
            },
        }
    }

    /// Whether these seconds showed room under a rate of `top`, with a margin for the reading.
    fn roomy(&self, top: f64) -> bool {
        self.wrote >= USED_SHARE * top && self.busy >= READING_MARGIN * ROOM_SPEED * top
    }
}

impl DiskWindow {
    /// `samples`: the disk's readings from the window's start to its step.
    fn read(top: f64, samples: &[&DiskSample]) -> Option<DiskWindow> {
        let (a, b) = (*samples.first()?, *samples.last()?);
        if b.at - a.at < 1.0 {
            return None;
        }
        let mut spans = Vec::new();
        let mut start = a;
        for &s in samples {
            if s.at - start.at >= SPAN_SECONDS {
                spans.push(Completed::between(start, s));
                start = s;
            }
        }
        let slowest = spans
            .into_iter()
            .filter(|s| s.wrote >= USED_SHARE * top)
            .min_by(|x, y| x.busy.total_cmp(&y.busy));
        Some(DiskWindow {
            top,
            all: Completed::between(a, b),
            slowest,
        })
    }

    fn fast(&self) -> bool {
        self.all.roomy(self.top) && self.slowest.is_none_or(|s| s.roomy(self.top))
    }

    fn describe(&self) -> String {
        let slowest = self.slowest.map_or_else(String::new, |s| {
            format!(
                " (its slowest {:.2}s wrote {:.1} MB/s, {:.0} MB/s kept busy)",
                s.seconds,
                s.wrote / 1e6,
                s.busy / 1e6
            )
        });
        format!(
            "it wrote {:.1} MB/s, {:.0} MB/s kept busy{slowest}, under a rate of at most {:.1} \
             MB/s",
            self.all.wrote / 1e6,
            self.all.busy / 1e6,
            self.top / 1e6
        )
    }
}

/// The windows of the daemon's log (`text`) measured on `disk.txt`: each from its line to the
/// restriction's next line, where the step judged it.
fn disk_windows(run: &Path, text: &str) -> Result<Vec<DiskWindow>> {
    let results = run.join("results");
    let Some(offset) = crate::bench::clock_offset(&results) else {
        bail!("no clock.txt in {}", results.display());
    };
    let samples = disk_samples(&results.join("disk.txt"))?;
    let uptime = |l: &str| {
        l.split_whitespace()
            .next()
            .and_then(crate::bench::rfc3339_seconds)
            .map(|t| t - offset)
    };
    let lines = decisions(text, HELD);
    let mut windows = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(top) = line.contains(LISTENING).then(|| window_top(line)).flatten() else {
            continue;
        };
        let (Some(from), Some(to)) = (uptime(line), lines.get(i + 1).and_then(|l| uptime(l)))
        else {
            continue;
        };
        let within = samples
            .iter()
            .skip_while(|s| s.at < from)
            .take_while(|s| s.at <= to);
        windows.extend(DiskWindow::read(top, &within.collect::<Vec<_>>()));
    }
    Ok(windows)
}

/// One line of `disk.txt`: `uptime_s sectors_written write_ms`.
struct DiskSample {
    at: f64,
    sectors: f64,
    write_ms: f64,
}

fn disk_samples(path: &Path) -> Result<Vec<DiskSample>> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    // The sampler is killed mid-line at the end: a short last line is skipped.
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace().map(|v| v.parse::<f64>().ok());
            Some(DiskSample {
                at: f.next()??,
                sectors: f.next()??,
                write_ms: f.next()??,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::{Probe, forced_by_room};

    /// The probe check finds the room step in a daemon log as 6.1 wrote it; without one it
    /// fails when the disk's counters showed room in a window, and says the run tells nothing
    /// when they did not: in all, in any span the writer used its rate in, or beyond the
    /// reading's margin.
    #[test]
    fn the_probe_check_reads_the_room_step_and_the_disk() {
        let dir = crate::vm::ci::tests::run_dir("fast");
        let log = dir.join("results/daemon.log");
        // The guest booted at 12:00:00 UTC: its uptime is the seconds since.
        std::fs::write(
            dir.join("results/clock.txt"),
            "realtime 1795867200.0 monotonic 0.0\n",
        )
        .unwrap();
        assert_eq!(
            crate::bench::rfc3339_seconds("2026-11-28T12:00:00Z"),
            Some(1_795_867_200.0)
        );
        let restrict =
            "2026-11-28T12:00:00Z  INFO restrict pid 140 (ioshield-load) dirtied 6.3 MB\n";
        let listen = "2026-11-28T12:00:07Z  INFO retune pid 140 on /dev/vda: io.weight=1 (iocost \
            on, disk not measured: modelled at 25.0MB/s, the kernel's latency control setting the \
            rate between 6.2MB/s and 25.0MB/s) memory.high=32M (the disk's speed is not known \
            after 7s: its rate left to the kernel's latency control until 10s, to see whether \
            the disk has room) pid=140 action=\"retune\"\n";
        let none = "2026-11-28T12:00:10Z  INFO retune pid 140 on /dev/vda: io.weight=1 (the \
            disk's speed is not measured after 10s: the rate held at 25.0 MB/s (it wrote 23.7 \
            MB/s with 0.98 writes in flight: no room)) pid=140 action=\"retune\"\n";
        let room = "2026-11-28T12:00:15Z  INFO retune pid 140 on /dev/vda: io.weight=1 \
            memory.high=47M (the disk's speed is not measured after 15s: the rate held at 50.0 \
            MB/s at least (it wrote 27.6 MB/s with 0.12 writes in flight: room to spare), raised \
            every 5s until the disk shows its speed) pid=140 action=\"retune\"\n";
        // From 7 to 10 s the disk wrote 24 MB/s (46875 sectors a second) with its writes in
        // flight 0.98 of the time (slow: 24 MB/s kept busy), or 0.12 of it (200 MB/s).
        let disk = |in_flight: &dyn Fn(f64) -> f64| {
            let mut ms = 0.0;
            (0..=20)
                .map(|i| {
                    let t = 6.0 + 0.25 * f64::from(i);
                    let line = format!("{t} {:.0} {ms:.0}\n", 46_875.0 * (t - 6.0));
                    ms += 1000.0 * 0.25 * in_flight(t);
                    line
                })
                .collect::<String>()
                + "11.25 2"
        };
        let write_disk = |in_flight: &dyn Fn(f64) -> f64| {
            std::fs::write(dir.join("results/disk.txt"), disk(in_flight)).unwrap();
        };
        let not_fast = || match forced_by_room(&dir).unwrap() {
            Probe::NotFast(why) => why,
            Probe::Room(r) => panic!("room in {r}"),
        };
        std::fs::write(&log, format!("{restrict}{listen}{none}")).unwrap();
        write_disk(&|_| 0.98);
        let why = not_fast();
        assert!(
            why.contains("it wrote 24.0 MB/s, 24 MB/s kept busy (its slowest 0.75s wrote 24.0"),
            "{why}"
        );
        write_disk(&|_| 0.12);
        let e = forced_by_room(&dir).err().unwrap().to_string();
        assert!(
            e.contains("no step with room to spare, though the disk's counters showed it fast")
                && e.contains("200 MB/s kept busy")
                && e.contains("restrict pid 140"),
            "{e}"
        );
        // Roomy in all (97 MB/s kept busy), but from 8 to 9 s it queued: the span from 7.75 s
        // completed 64 MB/s kept busy, under the 62.5 a step wants with the reading's margin,
        // and the daemon judges span by span.
        write_disk(&|t| if (8.0..9.0).contains(&t) { 0.5 } else { 0.12 });
        let why = not_fast();
        assert!(
            why.contains("97 MB/s kept busy (its slowest 0.75s wrote 24.0 MB/s, 64 MB/s kept"),
            "{why}"
        );
        // 67 MB/s kept busy throughout: over the daemon's bound, within the reading's margin.
        write_disk(&|_| 0.36);
        let why = not_fast();
        assert!(why.contains("67 MB/s kept busy (its slowest"), "{why}");
        write_disk(&|_| 0.12);
        std::fs::write(&log, format!("{restrict}{listen}{none}{room}")).unwrap();
        match forced_by_room(&dir).unwrap() {
            Probe::Room(r) => assert_eq!(
                r,
                "not measured after 15s: the rate held at 50.0 MB/s at least (it wrote 27.6 MB/s \
                 with 0.12 writes in flight: room to spare) (the disk's counters in its windows: \
                 it wrote 24.0 MB/s, 200 MB/s kept busy (its slowest 0.75s wrote 24.0 MB/s, 200 \
                 MB/s kept busy), under a rate of at most 25.0 MB/s)"
            ),
            Probe::NotFast(why) => panic!("not fast: {why}"),
        }
        std::fs::write(&log, restrict).unwrap();
        let e = forced_by_room(&dir).err().unwrap().to_string();
        assert!(e.contains("no window the disk's counters cover"), "{e}");
    }

    /// The ramp check follows memory.high from the room step (6.12's 8 MiB beside others) to
    /// the forced rate's, or to the next step, and fails when the step raised it at once or it
    /// stopped short (or never rose before the next step).
    #[test]
    fn the_ramp_check_wants_memory_high_raised_step_by_step() {
        let retune = |t: &str, mh: u64, why: &str| {
            format!(
                "2026-12-05T17:58:{t}Z  INFO retune pid 246 on /dev/vda: io.weight=25 (iocost \
                 on, disk not measured: modelled at 25.0MB/s, the rate held at 53.0MB/s) \
                 memory.high={mh}M ({why}) pid=246 action=\"retune\"\n"
            )
        };
        let room = "the disk's speed is only known to be at least 26.5 MB/s after 10s: the rate \
            held at 53.1 MB/s at least (it wrote 25.2 MB/s with 0.14 writes in flight: room to \
            spare), raised every 5s until the disk shows its speed";
        let kept = |t: &str, n: u32| {
            format!(
                "2026-12-05T17:58:{t}Z  INFO /dev/vda: the disk kept up under the rate forced \
                 for room (24.4 MB/s with 0.20 writes in flight), {n} span(s) of 0.75s: the \
                 writer's memory.high goes up\n"
            )
        };
        let held = retune("38", 8, "the disk's speed is not known after 7s");
        let ramped = [
            held.clone(),
            retune("41", 8, room),
            kept("41.8", 1),
            retune("41.9", 22, room),
            kept("42.8", 2),
            retune("42.9", 36, room),
            kept("43.8", 3),
            retune("43.9", 50, room),
        ]
        .concat();
        assert_eq!(
            super::ramped_in(&ramped).unwrap(),
            "memory.high 8M -> 22M -> 36M -> 50M under the room step for 53.1 MB/s, over 3 \
             span(s) the disk kept up"
        );
        let at_once = [held.clone(), retune("41", 50, room)].concat();
        let e = super::ramped_in(&at_once).unwrap_err().to_string();
        assert!(
            e.contains("memory.high 50M at the room step for 53.1 MB/s: raised at once"),
            "{e}"
        );
        let short = [
            held.clone(),
            retune("41", 8, room),
            kept("41.8", 1),
            retune("41.9", 22, room),
        ]
        .concat();
        let e = super::ramped_in(&short).unwrap_err().to_string();
        assert!(e.contains("not up to the forced rate's 50M"), "{e}");
        let taken_back = format!(
            "{short}2026-12-05T17:58:42Z  INFO /dev/vda: the disk queued 0.60 writes in flight \
             completing 30.9 MB/s under the rate forced to 53.1 MB/s for the room the disk \
             seemed to show: back to 26.5 MB/s, no room to spare at it\n"
        );
        let n = super::ramped_in(&taken_back).unwrap();
        assert!(n.starts_with("not applicable: the room step ended"), "{n}");
        // The next step, from the forced rate, before the ramp's last span.
        let next = "the disk's speed is only known to be at least 53.1 MB/s after 15s: the rate \
            held at 106.2 MB/s at least (it wrote 44.0 MB/s with 0.15 writes in flight: room \
            to spare), raised every 5s until the disk shows its speed";
        let cut = format!("{short}{}", retune("46", 101, next));
        assert_eq!(
            super::ramped_in(&cut).unwrap(),
            "memory.high 8M -> 22M under the room step for 53.1 MB/s, over 1 span(s) the disk \
             kept up, until the next step"
        );
        let flat = [held.clone(), retune("41", 8, room), retune("46", 101, next)].concat();
        let e = super::ramped_in(&flat).unwrap_err().to_string();
        assert!(e.contains("not up to the forced rate's 50M"), "{e}");
        assert!(super::ramped_in(&held).is_err(), "no room step");
    }

    /// The room check reads the step's forced rate, also from a line whose restriction names
    /// its rate too, and wants a lower bound at least that high kept, unless the disk was
    /// measured.
    #[test]
    fn room_shown_is_kept_as_a_lower_bound() {
        let step = "2026-11-28T01:26:15Z  INFO retune pid 236 on /dev/vda: io.weight=1 (iocost \
            on, disk not measured: modelled at 25.0MB/s, the rate held at 53.2MB/s) \
            memory.high=51M (the disk's speed is only known to be at least 26.7 MB/s after 15s: \
            the rate held at 53.5 MB/s at least (it wrote 21.2 MB/s with 0.09 writes in flight: \
            room to spare), raised every 5s until the disk shows its speed) pid=236";
        assert_eq!(super::room_rate(step), Some(53.5e6));
        assert_eq!(
            super::room_rate("the rate held at 25.0 MB/s (it wrote"),
            None
        );
        let dir = crate::vm::ci::tests::run_dir("room-kept");
        let kept = dir.join("results/disks.json");
        let log = dir.join("results/daemon.log");
        let check = |json: &str| {
            std::fs::write(&kept, json).unwrap();
            super::room_kept(&dir, step).map_err(|e| e.to_string())
        };
        // A bound as high, but not the probe's: the daemon did not say it kept the room.
        std::fs::write(&log, format!("{step}\n")).unwrap();
        let e = check(r#"{"at-least:serial:data": 53460000.0}"#).unwrap_err();
        assert!(e.contains("never kept a rate the probe forced"), "{e}");
        let proven = "2026-11-28T01:26:17Z  INFO /dev/vda: at least 53.5 MB/s: the speed probe \
            forced that rate for the room the disk showed, and the disk did not show its speed \
            under it; later restrictions there start from it\n";
        std::fs::write(&log, format!("{step}\n{proven}")).unwrap();
        assert_eq!(
            check(r#"{"at-least:serial:data": 53460000.0}"#).unwrap(),
            "kept at-least:serial:data = 53.5 MB/s (room shown for 53.5; at least 53.5 MB/s: the \
             speed probe forced that rate for the room the disk showed)"
        );
        assert!(check(r#"{"at-least:serial:data": 107000000.0}"#).is_ok());
        // The held writer's own bound, below the room: the room was not kept.
        let e = check(r#"{"at-least:serial:data": 26740158.2}"#).unwrap_err();
        assert!(e.contains("room shown for 53.5 MB/s"), "{e}");
        assert!(check("{}").is_err());
        assert!(
            check(r#"{"serial:data": 80000000.0}"#)
                .unwrap()
                .starts_with("not applicable: the disk was measured")
        );
    }
}
