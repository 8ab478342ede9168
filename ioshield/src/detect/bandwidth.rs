//! The write bandwidth each disk is judged against: configured, or learned from what the disk
//! itself completes while it is saturated, or, before that, an assumed slow disk.
//!
//! Why not the kernel's figure (debugfs `BdiWriteBandwidth`): for a disk that has not written
//! back yet it is `INIT_BW` (100 MiB/s, shown as 104.9 MB/s), so a 30 MB/s disk was judged as
//! three times faster than it is and its write limit set above its speed; later it moves in
//! jumps (the test bed's 30 MB/s disk read 104.2, 94.5, 75.9, 23.9 and 218 MB/s within seconds
//! of a backlog, under cgroup writeback), and a judgement that flips with it flips the limit
//! too. The disk's completion rate during the seconds it is busy (/proc/diskstats: bytes written
//! per second with requests in flight) is its real speed under this load, and is there within a
//! second of a backlog forming.
use std::collections::HashMap;

use crate::{config::Bandwidth, model::sample::Sample, system::devices::DevId};

/// What a disk did over a period still being judged.
#[derive(Clone, Copy, Default)]
struct Period {
    bytes: u64,
    busy: f64,
    writing: f64,
    elapsed: f64,
}

/// The speed a disk is judged at before anything measured it: about what a USB 2 stick, an SD
/// card or a disk behind a slow link writes. Judging an unknown disk as that slow restricts a fast
/// writer at once, before its backlog exists; a restriction on a disk that is only assumed slow
/// limits the writer to a share of that speed; if the disk is faster, the limit keeps it from
/// ever being busy enough to be measured, so after a while the daemon raises the write limit
/// step by step (keeping memory.high) until the disk shows its speed (`daemon::engine`).
/// The kernel's own starting point (INIT_BW, 100 MiB/s) is no better a guess, and it is not a
/// safe one: it judged the test bed's 30 MB/s disk as three times faster than it is.
pub const UNMEASURED: f64 = 25e6;
/// No disk is judged against less than this: an estimate of zero (seen from debugfs on an idle
/// disk in the systemd test) would make every writer an offender and every write limit zero.
pub const MINIMUM: f64 = 1e6;
/// A tick counts as a measurement of the disk's speed only when it was busy this much of it:
/// a half-idle disk's bytes per busy millisecond measure its latency, not its speed.
const SATURATED: f64 = 0.8;
/// ... and when writes were queued on it: on average at least this many in flight (the summed
/// time writes spent in flight, over the period). Busy time alone misleads: 6.1 counts the time
/// since the previous completion as busy, so a disk with an fdatasync every 100 ms and a writer
/// held at 12.5 MB/s by its write limit looked saturated at 5.4 MB/s (the 6.1 cp bench: the
/// 30 MB/s disk was then judged at 5.4 MB/s, the copy limited to 2.7 MB/s, and that speed
/// kept for the next start).
const QUEUED: f64 = 0.8;
/// Weight of a new saturated measurement: a few seconds of backlog settle the value.
const LEARN_WEIGHT: f64 = 0.3;
/// Consecutive unsaturated periods whose slowest rate still beats the assumed speed make that
/// rate a floor for the disk's speed: the disk completed at least that much, steadily, without
/// being the bottleneck. Seen on the 6.1 test bed: with its write limit lifted to measure the
/// disk, the writer wrote 42 MB/s for a minute while the disk was never 80% busy, so the disk
/// stayed "not measured" and the writer unlimited. Five seconds, so that a cache absorbing a
/// burst (the bed's disk once completed 151 MB/s for a second) does not count.
const SUSTAINED_PERIODS: usize = 5;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    pub bytes_per_sec: f64,
    pub source: &'static str,
    /// False while the figure is an assumption, not the disk's speed: a write limit derived
    /// from it could hold a fast disk's writer far below its speed for good (a limited writer
    /// never keeps the disk busy enough to be measured).
    pub measured: bool,
}

impl Estimate {
    /// What a disk that has not been measured is judged at.
    pub const ASSUMED: Estimate = Estimate {
        bytes_per_sec: UNMEASURED,
        source: "not yet measured, assumed as slow as a USB stick",
        measured: false,
    };
}

#[derive(Default)]
pub struct BandwidthEstimator {
    /// Completion rate while saturated, smoothed.
    learned: HashMap<DevId, f64>,
    /// Disks whose learned value came from an earlier run and has not been measured since.
    from_earlier: std::collections::HashSet<DevId>,
    /// What each disk did since the last judged period: samples come every tick and also at
    /// every burst report, and a 50 ms sample's bytes per busy second measure a few
    /// completions, not a speed (the test bed's 30 MB/s disk read 168 MB/s that way).
    pending: HashMap<DevId, Period>,
    /// Completion rates of the latest unsaturated periods, newest last.
    unsaturated: HashMap<DevId, std::collections::VecDeque<f64>>,
    /// Disks whose learned value is a floor from unsaturated periods, not a saturated speed.
    floor_only: std::collections::HashSet<DevId>,
}

/// The shortest period a disk's speed is judged over.
const PERIOD: f64 = 1.0;

impl BandwidthEstimator {
    pub fn observe(&mut self, sample: &Sample) {
        let elapsed = sample.elapsed.as_secs_f64();
        for (dev, delta) in &sample.disks {
            let p = self.pending.entry(*dev).or_default();
            p.bytes += delta.written;
            p.busy += delta.busy_ms as f64 / 1000.0;
            p.writing += delta.write_ms as f64 / 1000.0;
            p.elapsed += elapsed;
            let Period {
                bytes,
                busy,
                writing,
                elapsed: dt,
            } = *p;
            if dt < PERIOD {
                continue;
            }
            self.pending.remove(dev);
            let saturated = bytes > 0 && busy >= SATURATED * dt && writing >= QUEUED * dt;
            tracing::debug!(
                disk = %dev,
                bytes,
                busy_s = busy,
                writes_in_flight = writing / dt,
                seconds = dt,
                saturated,
                "disk period"
            );
            let recent = self.unsaturated.entry(*dev).or_default();
            if saturated {
                recent.clear();
                let speed = bytes as f64 / busy.min(dt);
                self.from_earlier.remove(dev);
                self.floor_only.remove(dev);
                self.learned
                    .entry(*dev)
                    .and_modify(|v| *v += LEARN_WEIGHT * (speed - *v))
                    .or_insert(speed);
                continue;
            }
            recent.push_back(bytes as f64 / dt);
            if recent.len() > SUSTAINED_PERIODS {
                recent.pop_front();
            }
            if recent.len() < SUSTAINED_PERIODS {
                continue;
            }
            let floor = recent.iter().copied().fold(f64::INFINITY, f64::min);
            // A disk that completed more than it is judged at, steadily, is at least that fast,
            // whatever the lower figure came from: a saturated period misread (a flush-bound
            // second), an earlier run, or an earlier floor.
            let improves = match self.learned.get(dev) {
                None => floor > UNMEASURED,
                Some(&v) => floor > v,
            };
            if improves {
                self.learned.insert(*dev, floor);
                self.from_earlier.remove(dev);
                self.floor_only.insert(*dev);
            }
        }
    }

    /// The disk's measured speed, if it has been saturated (now or in an earlier run).
    pub fn learned(&self, dev: DevId) -> Option<f64> {
        self.learned.get(&dev).copied()
    }

    /// Starts from a speed measured in an earlier run; the first measurement replaces it.
    pub fn seed(&mut self, dev: DevId, bytes_per_sec: f64) {
        if bytes_per_sec >= MINIMUM && !self.learned.contains_key(&dev) {
            self.learned.insert(dev, bytes_per_sec);
            self.from_earlier.insert(dev);
        }
    }

    pub fn estimate(&self, dev: DevId, configured: Bandwidth) -> Estimate {
        let mut e = self.estimate_unchecked(dev, configured);
        e.bytes_per_sec = e.bytes_per_sec.max(MINIMUM);
        e
    }

    fn estimate_unchecked(&self, dev: DevId, configured: Bandwidth) -> Estimate {
        if let Bandwidth::BytesPerSec(b) = configured {
            return Estimate {
                bytes_per_sec: b as f64,
                source: "configured",
                measured: true,
            };
        }
        if let Some(&speed) = self.learned.get(&dev).filter(|&&s| s >= MINIMUM) {
            return Estimate {
                bytes_per_sec: speed,
                source: if self.from_earlier.contains(&dev) {
                    "measured in an earlier run"
                } else if self.floor_only.contains(&dev) {
                    "at least what it wrote for 5 s without being saturated"
                } else {
                    "measured while saturated"
                },
                measured: true,
            };
        }
        Estimate::ASSUMED
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::sample::DiskDelta;

    const DEV: DevId = DevId {
        major: 254,
        minor: 16,
    };

    /// A second in which the disk wrote `written` bytes and was busy `busy_ms`, with writes
    /// queued on it while busy (one and a half on average).
    fn tick(written: u64, busy_ms: u64) -> Sample {
        queued(written, busy_ms, busy_ms * 3 / 2)
    }

    fn queued(written: u64, busy_ms: u64, write_ms: u64) -> Sample {
        Sample {
            elapsed: Duration::from_secs(1),
            disks: HashMap::from([(
                DEV,
                DiskDelta {
                    written,
                    busy_ms,
                    write_ms,
                },
            )]),
            ..Sample::default()
        }
    }

    fn short(written: u64, busy_ms: u64, ms: u64) -> Sample {
        Sample {
            elapsed: Duration::from_millis(ms),
            ..tick(written, busy_ms)
        }
    }

    #[test]
    fn a_busy_disk_without_queued_writes_is_not_measured() {
        let mut e = BandwidthEstimator::default();
        // The 6.1 cp bench: 5.4 MB in a second "busy" for 900 ms (6.1's io_ticks counts the
        // gaps between an fdatasync every 100 ms), the copy held at 12.5 MB/s by its write
        // limit: writes were in flight a third of the time.
        e.observe(&queued(5_400_000, 900, 330));
        assert!(!e.estimate(DEV, Bandwidth::Auto).measured);
        // The same disk with the copy's backlog queued on it.
        e.observe(&queued(29_000_000, 1000, 6_000));
        let est = e.estimate(DEV, Bandwidth::Auto);
        assert!(est.measured);
        assert!((est.bytes_per_sec - 29e6).abs() < 1.0, "{est:?}");
    }

    #[test]
    fn never_below_the_minimum() {
        let e = BandwidthEstimator::default();
        assert_eq!(
            e.estimate(DEV, Bandwidth::BytesPerSec(10)).bytes_per_sec,
            MINIMUM
        );
    }

    #[test]
    fn an_unmeasured_disk_is_assumed_slow_and_says_so() {
        let mut e = BandwidthEstimator::default();
        let est = e.estimate(DEV, Bandwidth::Auto);
        assert_eq!(est, Estimate::ASSUMED);
        assert!(!est.measured);
        // A burst absorbed by the disk's cache, unsaturated: no measurement.
        e.observe(&tick(151_000_000, 300));
        assert_eq!(e.estimate(DEV, Bandwidth::Auto), Estimate::ASSUMED);
        // Short samples (taken at burst reports) are judged together, over a second or more.
        let mut e = BandwidthEstimator::default();
        for _ in 0..19 {
            e.observe(&short(1_500_000, 50, 50));
        }
        assert!(!e.estimate(DEV, Bandwidth::Auto).measured, "0.95 s so far");
        e.observe(&short(1_500_000, 50, 50));
        let est = e.estimate(DEV, Bandwidth::Auto);
        assert!(est.measured);
        assert!((est.bytes_per_sec - 30e6).abs() < 1.0, "{est:?}");
    }

    #[test]
    fn a_saturated_disk_is_judged_by_what_it_completes() {
        let mut e = BandwidthEstimator::default();
        // The test bed's 30 MB/s disk with a backlog: busy the whole second.
        e.observe(&tick(30_000_000, 1000));
        let est = e.estimate(DEV, Bandwidth::Auto);
        assert_eq!(est.source, "measured while saturated");
        assert!((est.bytes_per_sec - 30e6).abs() < 1.0);
        // Busy 90% of a tick: the rate per busy second.
        e.observe(&tick(27_000_000, 900));
        assert!((e.learned(DEV).unwrap() - 30e6).abs() < 1.0);
        // A half-idle tick says nothing about the speed.
        e.observe(&tick(1_000_000, 100));
        assert!((e.learned(DEV).unwrap() - 30e6).abs() < 1.0);
        // A value from an earlier run is used until the disk is measured again.
        let mut e2 = BandwidthEstimator::default();
        e2.seed(DEV, 25e6);
        let est = e2.estimate(DEV, Bandwidth::Auto);
        assert_eq!(
            (est.bytes_per_sec, est.source),
            (25e6, "measured in an earlier run")
        );
        e2.observe(&tick(30_000_000, 1000));
        let est = e2.estimate(DEV, Bandwidth::Auto);
        assert_eq!(est.source, "measured while saturated");
        // The configured value still wins.
        let est = e.estimate(DEV, Bandwidth::BytesPerSec(50_000_000));
        assert_eq!(est.bytes_per_sec, 50e6);
    }

    #[test]
    fn a_disk_that_keeps_up_without_saturating_is_at_least_that_fast() {
        let mut e = BandwidthEstimator::default();
        // A cache taking a burst, then an idle second: no floor.
        e.observe(&tick(151_000_000, 300));
        e.observe(&tick(0, 0));
        for _ in 0..3 {
            e.observe(&tick(42_000_000, 600));
        }
        assert!(!e.estimate(DEV, Bandwidth::Auto).measured);
        // The 6.1 bed: 42 MB/s, 60% busy, for five seconds: the disk does at least 40 MB/s.
        e.observe(&tick(40_000_000, 600));
        e.observe(&tick(43_000_000, 600));
        let est = e.estimate(DEV, Bandwidth::Auto);
        assert!(est.measured, "{est:?}");
        assert_eq!(
            est.source,
            "at least what it wrote for 5 s without being saturated"
        );
        assert!((est.bytes_per_sec - 40e6).abs() < 1.0, "{est:?}");
        // A steadier, faster stretch raises the floor; a slower one does not lower it.
        for _ in 0..5 {
            e.observe(&tick(50_000_000, 600));
        }
        assert!((e.learned(DEV).unwrap() - 50e6).abs() < 1.0);
        for _ in 0..5 {
            e.observe(&tick(5_000_000, 100));
        }
        assert!((e.learned(DEV).unwrap() - 50e6).abs() < 1.0);
        // A saturated measurement is the disk's speed: it replaces the floor.
        e.observe(&tick(30_000_000, 1000));
        let est = e.estimate(DEV, Bandwidth::Auto);
        assert_eq!(est.source, "measured while saturated");
        // Slower stretches never lower a saturated measurement; a faster one proves it low.
        let saturated = e.learned(DEV).unwrap();
        for _ in 0..5 {
            e.observe(&tick(20_000_000, 600));
        }
        assert_eq!(
            e.estimate(DEV, Bandwidth::Auto).source,
            "measured while saturated"
        );
        assert_eq!(e.learned(DEV), Some(saturated));
        for _ in 0..5 {
            e.observe(&tick(60_000_000, 600));
        }
        assert!((e.learned(DEV).unwrap() - 60e6).abs() < 1.0);
        // Slower than the assumed speed proves nothing.
        let mut slow = BandwidthEstimator::default();
        for _ in 0..10 {
            slow.observe(&tick(10_000_000, 500));
        }
        assert!(!slow.estimate(DEV, Bandwidth::Auto).measured);
    }
}
