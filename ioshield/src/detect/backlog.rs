//! Each disk's part of the machine's dirty and writeback memory, for the backlog trigger.
//!
//! The kernel's per-disk figure cannot be used: before 6.10 debugfs counts only the root
//! cgroup's writeback there, which reads near zero when every process lives in a child cgroup
//! (bench on 6.1: 200 MB dirty, the trigger never fired). The machine's whole figure, used
//! instead until stop 51, counts every disk's backlog against each: a copy to a slow USB stick
//! (700 MB dirty there) made a download of 10 MB/s to the fast system disk, never measured and
//! so judged at the assumed 25 MB/s, look like one whose backlog "would take 28 s to flush",
//! and its restriction paused it 2.1 s on 6.12 (docs/bench/stick.md).
//!
//! So each disk keeps what was dirtied on it (the kernel side's per-process counts) less what
//! it wrote (its own counters), between nothing and the machine's figure. Writes that were
//! never dirtied make it low, pages dirtied and then deleted unwritten make it high; the bounds
//! keep either from lasting: it is nothing once the disk writes more than is dirtied on it, and
//! at most what the machine holds.
//!
//! The journal's writes (ext4's, counted by the kernel side) are the ones that last: every
//! `fsync` beside a writer commits, and what its commit logs is written, never dirtied. Left
//! in, they took a slow writer's backlog for less than it was: 28.5 MB dirtied by a writer of
//! 14 MB/s on the bed's 30 MB/s disk counted under 25 MB beside the committing loads, and
//! the trigger waited a tick (`vm ci`, stop 87). So what a disk's journals logged is taken out
//! of what it wrote: that writer was restricted 2.04 (2.22) s in on 6.12 instead of 2.57
//! (2.82), median (worst) of 4 runs each (docs/bench/unwritten-backlog.md, stop 88). The
//! kernel names a journal by its filesystem's device: an external journal's writes (rare) are
//! taken out of the filesystem's disk instead of its own, as far as that disk wrote. Direct
//! I/O, also written and never dirtied, is not told apart: no tracepoint used here sees it,
//! and a program writing so waits for its own writes.
use std::collections::HashMap;

use crate::{
    detect::bandwidth::Estimate,
    model::sample::{DiskDelta, Sample},
    system::devices::DevId,
};

/// Writes in flight on average over a tick from which a disk counts as busy writing its backlog.
/// A disk kept writing has one or more: the bed's 30 MB/s disk held at 25 MB/s 1.3-1.6
/// (docs/bench/speed-probe.md), the 10 MB/s stick 9-21 (docs/bench/stick.md); the fast disk
/// taking a 10 MB/s download as it came had 0.04-0.08 (its speed probe's lines in the stop 51
/// bulk bench). Half of one leaves room for a busy disk's short gaps.
const BEHIND_QUEUE: f64 = 0.5;

/// Writes in flight on average over a span of `seconds`.
fn queue(delta: &DiskDelta, seconds: f64) -> f64 {
    delta.writing() / seconds.max(1e-3)
}

/// A disk's part of the machine's backlog, and what the disk did with it over the last tick.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiskBacklog {
    bytes: f64,
    /// Whether the disk was busy writing over the tick.
    behind: bool,
    /// Whether it was over the sample before too ([`Backlogs::disk`]).
    behind_before: bool,
    /// What it wrote over the tick, bytes per second.
    writing: f64,
    /// Writes in flight on average over the tick.
    queue: f64,
    /// Whether dirty data the disk has not begun to write counts as a backlog before its speed
    /// is known ([`DiskBacklog::flush_seconds`]).
    unwritten_counts: bool,
}

impl DiskBacklog {
    /// The disk's part, and what its counters say it did over a tick of `seconds`.
    pub fn new(bytes: f64, delta: Option<&DiskDelta>, seconds: f64) -> Self {
        let seconds = seconds.max(1e-3);
        let queue = delta.map_or(0.0, |d| queue(d, seconds));
        DiskBacklog {
            bytes,
            behind: queue >= BEHIND_QUEUE,
            behind_before: false,
            writing: delta.map_or(0.0, |d| d.written as f64 / seconds),
            queue,
            unwritten_counts: false,
        }
    }

    /// The same, saying whether the disk was busy writing over the sample before this one too.
    fn behind_before(self, before: bool) -> Self {
        DiskBacklog {
            behind_before: before,
            ..self
        }
    }

    /// The disk's part, bytes.
    pub fn bytes(&self) -> f64 {
        self.bytes
    }

    /// What the disk showed, for the log of a restriction the backlog triggered.
    pub fn describe(&self) -> String {
        format!(
            "{} of dirty data there; it wrote {} with {:.2} writes in flight over the last \
             sample{}",
            crate::display::show_bytes(self.bytes as u64),
            crate::display::show_rate(self.writing),
            self.queue,
            if self.behind && self.behind_before {
                ", busy over the one before too"
            } else {
                ""
            }
        )
    }

    /// The same, saying whether the disk may be as slow as the speed it is assumed at until
    /// measured (removable, on USB or an SD/MMC slot, or rotational,
    /// [`crate::system::devices::Kind`]): there dirty data
    /// the kernel has not begun to write counts as a backlog at once.
    pub fn unwritten_counts(self, counts: bool) -> Self {
        DiskBacklog {
            unwritten_counts: counts,
            ..self
        }
    }

    /// How long the disk would take to write its part, for the backlog trigger; `None` while
    /// that says nothing.
    ///
    /// A disk not measured is judged at a guess. On a solid-state disk its backlog says how
    /// long a flush would take only once the disk is busy writing it. Before, it is dirty data
    /// the kernel keeps unwritten (up to 30 s, or its background threshold) on a disk that is
    /// likely far faster than the guess: a download of 10 MB/s to the fast system disk was
    /// restricted for a backlog "of 2.6 s" that the disk had not begun to write.
    ///
    /// On a disk that may be that slow, waiting is what costs: a writer of 14 MB/s on the
    /// bed's 30 MB/s disk, under the rate a writer must keep up at the guess, built 377 MB
    /// before the kernel began to write it, 28 s in. That backlog stays charged to the cgroup
    /// it was dirtied in, shared with the innocents there, and a restriction does not reach
    /// it: 408 of the 424 MB written in such a run went out at their weight, and the
    /// committing load paused 1.3-3.7 s as it went (stop 61, traced at stop 62). There the unwritten backlog
    /// counts at once.
    ///
    /// Once it writes, what it writes is a floor for its speed: the kernel's periodic flush of
    /// that download's expired pages kept the disk busy for a tick, and judged at the guess its
    /// 47 MB "would take 1.9 s", so the download was restricted (6.12, CI of stop 56).
    ///
    /// That floor needs a sample the disk was busy over from its start: in one the flush
    /// began late in, what it wrote over the whole sample says little of its speed. The
    /// download's 50 MB left after such a sample, the fast disk having written under the guess
    /// over it with 0.5 writes or more in flight, "would take 2.0 s" (6.12, `vm ci` of stop
    /// 65, 1 run in about 6). So on a solid-state disk the backlog counts once the disk has
    /// been busy over two samples in a row, and is judged by the second.
    pub fn flush_seconds(&self, estimate: &Estimate) -> Option<f64> {
        if estimate.capacity {
            Some(self.bytes / estimate.bytes_per_sec)
        } else {
            (self.behind && self.behind_before || self.unwritten_counts)
                .then(|| self.bytes / estimate.bytes_per_sec.max(self.writing))
        }
    }
}

/// The shortest span a backlog's projected crossing is looked at again after: a crossing
/// due sooner is looked at then. At most ten steps a second more while a backlog nears the
/// limit.
const SOONEST_LOOK: f64 = 0.1;
/// The least span a backlog's growth is measured over: steps the kernel's burst reports wake
/// come a few milliseconds apart, over which the disk's counters say little. Not more than
/// [`SOONEST_LOOK`]: the step a projection takes measures the growth again.
pub const GROWTH_SPAN: f64 = 0.1;
const _: () = assert!(GROWTH_SPAN <= SOONEST_LOOK);

/// The backlog trigger between ticks: when a disk's part, growing as it did from `before`
/// (bytes, and seconds ago) to `bytes` now, judged to take `flush_seconds` to write, will take
/// more than `limit` seconds; seconds from now, `None` when it does not grow or is over
/// already. A tick judges the backlog a second apart: a writer of 12.5 MB/s on the bed's 30
/// MB/s disk crossed the 25 MB it may leave unwritten up to a tick before one saw it, and was
/// restricted 1.9-2.9 s in (`vm ci` slow writer, stop 88).
pub fn seconds_until_over(
    before: (f64, f64),
    bytes: f64,
    flush_seconds: f64,
    limit: f64,
) -> Option<f64> {
    let (was, ago) = before;
    if ago < GROWTH_SPAN || flush_seconds <= 0.0 || flush_seconds > limit || bytes <= was {
        return None;
    }
    // The speed the backlog is judged at, kept: the bytes that take `limit` at it.
    let over = bytes / flush_seconds * limit;
    let growth = (bytes - was) / ago;
    // Just past the crossing: at it exactly, the count may fall a hair short.
    Some(((over - bytes) / growth * 1.05).max(SOONEST_LOOK))
}

#[derive(Debug, Default)]
pub struct Backlogs {
    bytes: HashMap<DevId, f64>,
    /// The disks busy writing over the sample before the last one observed, and over the last.
    behind: [Vec<DevId>; 2],
}

impl Backlogs {
    /// Moves each disk's part by a sample's dirtying and writing.
    pub fn observe(&mut self, sample: &Sample) {
        let seconds = sample.disks_elapsed.as_secs_f64();
        let [before, last] = &mut self.behind;
        std::mem::swap(before, last);
        last.clear();
        last.extend(
            sample
                .disks
                .iter()
                .filter(|(_, d)| queue(d, seconds) >= BEHIND_QUEUE)
                .map(|(id, _)| *id),
        );
        let machine = (sample.dirty.dirty_bytes + sample.dirty.writeback_bytes) as f64;
        let mut dirtied: HashMap<DevId, u64> = HashMap::new();
        for ((_, disk), delta) in &sample.writes {
            *dirtied.entry(disk.id).or_default() += delta.dirtied_bytes;
        }
        for id in dirtied.keys() {
            self.bytes.entry(*id).or_default();
        }
        let mut journal: HashMap<DevId, u64> = HashMap::new();
        for (disk, bytes) in &sample.journal_logged {
            *journal.entry(disk.id).or_default() += bytes;
        }
        self.bytes.retain(|id, part| {
            let added = dirtied.get(id).copied().unwrap_or(0) as f64;
            let written = sample.disks.get(id).map_or(0, |d| d.written);
            let written = written.saturating_sub(journal.get(id).copied().unwrap_or(0)) as f64;
            *part = (*part + added - written).clamp(0.0, machine);
            *part > 0.0
        });
    }

    /// The disk's part of the machine's backlog, bytes.
    pub fn of(&self, id: DevId) -> f64 {
        self.bytes.get(&id).copied().unwrap_or(0.0)
    }

    /// The disk's part and what it did over `sample`, the last one observed, and whether it
    /// was busy over the one before too.
    pub fn disk(&self, id: DevId, sample: &Sample) -> DiskBacklog {
        DiskBacklog::new(
            self.of(id),
            sample.disks.get(&id),
            sample.disks_elapsed.as_secs_f64(),
        )
        .behind_before(self.behind[0].contains(&id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        model::sample::{DiskDelta, WriteDelta},
        system::{devices::Disk, vmstat::DirtyState},
    };

    const MB: u64 = 1_000_000;

    fn disk(minor: u32) -> Disk {
        Disk {
            id: DevId { major: 254, minor },
            name: Some(format!("vd{minor}")),
        }
    }

    /// A sample in which each (disk, dirtied, written) happened, the machine holding `machine`.
    fn sample(machine: u64, disks: &[(u32, u64, u64)]) -> Sample {
        let mut s = Sample {
            dirty: DirtyState {
                dirty_bytes: machine,
                ..DirtyState::default()
            },
            ..Sample::default()
        };
        for (i, &(minor, dirtied, written)) in disks.iter().enumerate() {
            s.writes.insert(
                (100 + i as u32, disk(minor)),
                WriteDelta {
                    dirtied_bytes: dirtied,
                    ..WriteDelta::default()
                },
            );
            s.disks.insert(
                disk(minor).id,
                DiskDelta {
                    written,
                    ..DiskDelta::default()
                },
            );
        }
        s
    }

    fn busy(written: u64, write_ms: u64) -> DiskDelta {
        DiskDelta {
            written,
            write_ms,
            ..DiskDelta::default()
        }
    }

    /// A measured disk is judged at its speed, busy or not; one that is not is judged only
    /// while busy, at the faster of the guess and what it writes.
    #[test]
    fn a_backlog_is_judged_at_what_the_disk_shows_it_writes() {
        let guessed = Estimate::ASSUMED;
        let measured = Estimate {
            capacity: true,
            measured: true,
            ..Estimate::ASSUMED
        };
        let tick = 0.1;
        // 47 MB of a download's expired pages, the fast disk writing 15 MB of it in the tick
        // with 3 writes in flight on average, as over the tick before.
        let fast = DiskBacklog::new(47e6, Some(&busy(15 * MB, 300)), tick).behind_before(true);
        assert!(fast.behind);
        let s = fast.flush_seconds(&guessed).unwrap();
        assert!((s - 47.0 / 150.0).abs() < 1e-9, "{s}");
        assert_eq!(fast.flush_seconds(&measured), Some(47e6 / 25e6));
        // The stick writing 1 MB of its backlog in the tick: judged at the guess, not slower.
        let stick = DiskBacklog::new(47e6, Some(&busy(MB, 900)), tick).behind_before(true);
        assert_eq!(stick.flush_seconds(&guessed), Some(47e6 / 25e6));
        // Idle or nearly: nothing to say of a disk not measured.
        let idle = DiskBacklog::new(47e6, Some(&busy(MB, 40)), tick);
        assert!(!idle.behind);
        assert_eq!(idle.flush_seconds(&guessed), None);
        assert_eq!(
            DiskBacklog::new(47e6, None, tick).flush_seconds(&guessed),
            None
        );
        assert_eq!(idle.flush_seconds(&measured), Some(47e6 / 25e6));
        // Idle, on a disk that may be as slow as the guess: the unwritten backlog counts.
        let idle_maybe_slow = idle.unwritten_counts(true);
        assert_eq!(idle_maybe_slow.flush_seconds(&guessed), Some(47e6 / 25e6));
        let unwritten = DiskBacklog::new(47e6, None, tick).unwritten_counts(true);
        assert_eq!(unwritten.flush_seconds(&guessed), Some(47e6 / 25e6));
        // Busy there, it is judged as anywhere: at the faster of the guess and what it writes.
        let fast_maybe_slow = fast.unwritten_counts(true);
        assert_eq!(
            fast_maybe_slow.flush_seconds(&guessed),
            Some(47.0e6 / 150.0e6)
        );
    }

    /// A solid-state disk not measured: its backlog counts from the second sample in a row it
    /// is busy over, judged by what it wrote in that one.
    #[test]
    fn a_solid_state_disks_backlog_counts_once_it_is_busy_over_two_samples() {
        let system = disk(32);
        let guessed = Estimate::ASSUMED;
        let second = |written, write_ms| {
            let mut s = sample(200 * MB, &[(32, 0, written)]);
            s.disks.insert(system.id, busy(written, write_ms));
            s.disks_elapsed = std::time::Duration::from_secs(1);
            s
        };
        let mut b = Backlogs::default();
        b.observe(&sample(200 * MB, &[(32, 150 * MB, 0)]));
        // The periodic flush begins late in a sample: 20 MB written, 0.6 writes in flight on
        // average. Alone, that sample would judge the 130 MB left at the guess: 5.2 s.
        let late = second(20 * MB, 600);
        b.observe(&late);
        let judged = |b: &Backlogs, s: &Sample| b.disk(system.id, s);
        let first = judged(&b, &late);
        assert!(first.behind && !first.behind_before);
        assert_eq!(first.flush_seconds(&guessed), None);
        // Busy over the next one from its start, it writes the rest at its own speed.
        let whole = second(110 * MB, 1500);
        b.observe(&whole);
        let then = judged(&b, &whole);
        let s = then.flush_seconds(&guessed).unwrap();
        assert!((s - 20.0 / 110.0).abs() < 1e-9, "{s}");
        assert!(
            then.describe().contains("busy over the one before too"),
            "{}",
            then.describe()
        );
        // A disk that may be as slow as the guess is judged from the first.
        assert_eq!(
            first.unwritten_counts(true).flush_seconds(&guessed),
            Some(130e6 / 25e6)
        );
        // A sample it was idle over ends the run: that one and the next count nothing.
        let idle = second(0, 0);
        b.observe(&idle);
        assert_eq!(judged(&b, &idle).flush_seconds(&guessed), None);
        b.observe(&late);
        assert_eq!(judged(&b, &late).flush_seconds(&guessed), None);
    }

    /// The stick fills the page cache, the system disk writes its download as it comes: the
    /// machine's backlog is the stick's.
    #[test]
    fn a_slow_disks_backlog_is_not_a_fast_ones() {
        let (stick, system) = (disk(0), disk(32));
        let mut b = Backlogs::default();
        let mut machine = 0;
        for _ in 0..10 {
            machine += 70 * MB;
            b.observe(&sample(
                machine,
                &[(0, 80 * MB, 10 * MB), (32, 10 * MB, 10 * MB)],
            ));
        }
        assert_eq!(b.of(stick.id), 700e6);
        assert_eq!(b.of(system.id), 0.0);
    }

    /// A backlog that grows is looked at again when it will be over the limit, not at the
    /// next tick; one that does not grow, or is measured over too short a span, is left to it.
    #[test]
    fn a_growing_backlog_is_looked_at_when_it_will_be_over() {
        // 20 MB judged at 25 MB/s (0.8 s), 12.5 MB/s more over the last second: 25 MB, what
        // takes 1 s, comes 0.4 s from now, looked at a little after.
        let due = seconds_until_over((7.5e6, 1.0), 20e6, 0.8, 1.0).unwrap();
        assert!((due - 0.42).abs() < 1e-9, "{due}");
        // At the crossing already or over it: looked at soon, or left to the decision.
        assert_eq!(
            seconds_until_over((7.5e6, 1.0), 25e6, 0.99999, 1.0),
            Some(SOONEST_LOOK)
        );
        assert_eq!(seconds_until_over((7.5e6, 1.0), 30e6, 1.2, 1.0), None);
        // Not growing, nothing to judge, or a span too short to say how fast it grows.
        assert_eq!(seconds_until_over((20e6, 1.0), 20e6, 0.8, 1.0), None);
        assert_eq!(seconds_until_over((0.0, 1.0), 0.0, 0.0, 1.0), None);
        assert_eq!(seconds_until_over((19e6, 0.05), 20e6, 0.8, 1.0), None);
    }

    /// A slow writer's backlog beside committing loads: what the journal logged is not taken
    /// for the writer's dirty data written.
    #[test]
    fn the_journals_writes_leave_the_backlog_as_it_is() {
        let id = disk(0).id;
        let (mut counted, mut uncounted) = (Backlogs::default(), Backlogs::default());
        let mut machine = 0;
        for _ in 0..5 {
            // 5.6 MB dirtied a tick, 0.7 MB of it written by the loads' fsyncs, with 0.3 MB
            // of their commits logged.
            machine += 5 * MB;
            let mut s = sample(machine, &[(0, 5_600_000, 1_000_000)]);
            uncounted.observe(&s);
            s.journal_logged.push((disk(0), 300_000));
            counted.observe(&s);
        }
        assert_eq!(counted.of(id), 24.5e6);
        assert_eq!(uncounted.of(id), 23e6);
        // Bounded as ever: a journal said to have logged more than the disk wrote takes nothing.
        let mut s = sample(machine, &[(0, 0, 100_000)]);
        s.journal_logged.push((disk(0), 300_000));
        counted.observe(&s);
        assert_eq!(counted.of(id), 24.5e6);
    }

    #[test]
    fn never_under_nothing_nor_over_what_the_machine_holds() {
        let id = disk(0).id;
        let mut b = Backlogs::default();
        // Writes never dirtied and not counted as the journal's: nothing, not less.
        b.observe(&sample(5 * MB, &[(0, 0, 3 * MB)]));
        assert_eq!(b.of(id), 0.0);
        b.observe(&sample(50 * MB, &[(0, 40 * MB, 0)]));
        assert_eq!(b.of(id), 40e6);
        // Files deleted before they were written: the machine's figure falls, and so does it.
        b.observe(&sample(10 * MB, &[(0, 0, 0)]));
        assert_eq!(b.of(id), 10e6);
        // A disk that wrote it all and is idle is forgotten.
        b.observe(&sample(0, &[(0, 0, 10 * MB)]));
        assert_eq!(b.of(id), 0.0);
        assert!(b.bytes.is_empty());
    }
}
