//! The write bandwidth each disk is judged against: configured, or learned from what the disk
//! itself completes while it is saturated, or the kernel's own estimate once that estimate has
//! moved off its initial guess.
//!
//! Why not the kernel's figure alone: for a disk that has not written back yet it is `INIT_BW`
//! (100 MiB/s, shown as 104.9 MB/s), so a 30 MB/s disk was judged as three times faster than it
//! is and its write limit set above its speed. The disk's completion rate during the seconds it
//! is busy (/proc/diskstats: bytes written per millisecond with requests in flight) is its real
//! speed under this load, and is there from the first second of a backlog.
use std::collections::HashMap;

use crate::{config::Bandwidth, model::sample::Sample, system::devices::DevId};

/// The speed a disk is judged at before anything measured it: about what a USB 2 stick, an SD
/// card or a disk behind a slow link writes. Judging an unknown disk as that slow restricts a fast
/// writer at once, before its backlog exists; a restriction on a disk that is only assumed slow
/// sets no write limit (`Estimate::measured`), so a faster disk shows its speed under the
/// writer's own writeback within a second or two, and the restriction is retuned or released.
/// The kernel's own starting point (INIT_BW, 100 MiB/s) is no better a guess, and it is not a
/// safe one: it judged the test bed's 30 MB/s disk as three times faster than it is.
pub const UNMEASURED: f64 = 25e6;
/// The kernel's INIT_BW exactly: 100 MiB/s (`BdiWriteBandwidth: 102400 kBps`).
const KERNEL_INITIAL: u64 = 100 << 20;
/// No disk is judged against less than this: an estimate of zero (seen from debugfs on an idle
/// disk in the systemd test) would make every writer an offender and every write limit zero.
pub const MINIMUM: f64 = 1e6;
/// A tick counts as a measurement of the disk's speed only when it was busy this much of it:
/// a half-idle disk's bytes per busy millisecond measure its latency, not its speed.
const SATURATED: f64 = 0.8;
/// Weight of a new saturated measurement: a few seconds of backlog settle the value.
const LEARN_WEIGHT: f64 = 0.3;
/// Per-tick decay of the observed peak, so a disk that got slower is noticed within minutes.
const PEAK_DECAY: f64 = 0.998;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    pub bytes_per_sec: f64,
    pub source: &'static str,
}

const NOT_MEASURED: &str = "not yet measured, assumed as slow as a USB stick";
const OBSERVED_PEAK: &str = "not yet measured, the fastest it was seen writing";

impl Estimate {
    /// False while the figure is an assumption or a lower bound, not the disk's speed: then a
    /// write limit derived from it could hold a fast disk's writer far below its speed for good
    /// (a limited writer never keeps the disk busy enough to be measured).
    pub fn measured(&self) -> bool {
        self.source != NOT_MEASURED && self.source != OBSERVED_PEAK
    }
}

#[derive(Default)]
pub struct BandwidthEstimator {
    /// Completion rate while saturated, smoothed.
    learned: HashMap<DevId, f64>,
    /// Disks whose learned value came from an earlier run and has not been measured since.
    from_earlier: std::collections::HashSet<DevId>,
    peak: HashMap<DevId, f64>,
}

impl BandwidthEstimator {
    pub fn observe(&mut self, sample: &Sample) {
        let dt = sample.elapsed.as_secs_f64();
        for (dev, &bytes) in &sample.disk_written {
            let rate = bytes as f64 / dt;
            let peak = self.peak.entry(*dev).or_default();
            *peak = (*peak * PEAK_DECAY).max(rate);
            let busy = sample.disk_busy_ms.get(dev).copied().unwrap_or(0) as f64 / 1000.0;
            if bytes > 0 && busy >= SATURATED * dt {
                let speed = bytes as f64 / busy.min(dt);
                self.from_earlier.remove(dev);
                self.learned
                    .entry(*dev)
                    .and_modify(|v| *v += LEARN_WEIGHT * (speed - *v))
                    .or_insert(speed);
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

    /// `kernel` is the kernel's own estimate for the disk (debugfs), when it can be read.
    pub fn estimate(&self, dev: DevId, configured: Bandwidth, kernel: Option<u64>) -> Estimate {
        let mut e = self.estimate_unchecked(dev, configured, kernel);
        e.bytes_per_sec = e.bytes_per_sec.max(MINIMUM);
        e
    }

    fn estimate_unchecked(
        &self,
        dev: DevId,
        configured: Bandwidth,
        kernel: Option<u64>,
    ) -> Estimate {
        if let Bandwidth::BytesPerSec(b) = configured {
            return Estimate {
                bytes_per_sec: b as f64,
                source: "configured",
            };
        }
        if let Some(&speed) = self.learned.get(&dev).filter(|&&s| s >= MINIMUM) {
            return Estimate {
                bytes_per_sec: speed,
                source: if self.from_earlier.contains(&dev) {
                    "measured in an earlier run"
                } else {
                    "measured while saturated"
                },
            };
        }
        let peak = self.peak.get(&dev).copied().unwrap_or(0.0);
        // The kernel's figure decays while a disk idles; what the disk was seen doing is a floor.
        // Its initial guess is no measurement at all.
        if let Some(k) = kernel.filter(|&k| k as f64 >= MINIMUM && !is_initial_guess(k)) {
            return Estimate {
                bytes_per_sec: (k as f64).max(peak),
                source: "kernel estimate",
            };
        }
        match self.peak.get(&dev) {
            Some(&p) if p > UNMEASURED => Estimate {
                bytes_per_sec: p,
                source: OBSERVED_PEAK,
            },
            _ => Estimate {
                bytes_per_sec: UNMEASURED,
                source: NOT_MEASURED,
            },
        }
    }
}

/// The kernel's estimate starts at INIT_BW and moves towards the real speed only slowly, and
/// only while that disk writes back (the test bed's 30 MB/s disk read 104.2 MB/s seconds into a
/// backlog; under cgroup writeback it also read 94.5 and 218 MB/s). Anything within a quarter of
/// INIT_BW is taken for that guess, not for a measurement.
fn is_initial_guess(kernel: u64) -> bool {
    (kernel as f64 / KERNEL_INITIAL as f64 - 1.0).abs() < 0.25
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const DEV: DevId = DevId {
        major: 254,
        minor: 16,
    };

    fn tick(written: u64, busy_ms: u64) -> Sample {
        Sample {
            elapsed: Duration::from_secs(1),
            disk_written: HashMap::from([(DEV, written)]),
            disk_busy_ms: HashMap::from([(DEV, busy_ms)]),
            ..Sample::default()
        }
    }

    #[test]
    fn never_below_the_minimum() {
        let e = BandwidthEstimator::default();
        assert_eq!(
            e.estimate(DEV, Bandwidth::Auto, None).bytes_per_sec,
            UNMEASURED
        );
        assert_eq!(
            e.estimate(DEV, Bandwidth::Auto, Some(0)).bytes_per_sec,
            UNMEASURED
        );
        assert_eq!(
            e.estimate(DEV, Bandwidth::Auto, Some(30_000_000))
                .bytes_per_sec,
            30e6
        );
        assert_eq!(
            e.estimate(DEV, Bandwidth::BytesPerSec(10), None)
                .bytes_per_sec,
            MINIMUM
        );
    }

    #[test]
    fn the_kernels_initial_guess_is_not_a_measurement() {
        let mut e = BandwidthEstimator::default();
        // An idle disk: the kernel still says INIT_BW, nothing was seen.
        let est = e.estimate(DEV, Bandwidth::Auto, Some(102_400 * 1024));
        assert_eq!((est.bytes_per_sec, est.source), (UNMEASURED, NOT_MEASURED));
        assert!(!est.measured());
        // Seen writing slower than the assumption: that says nothing about its speed.
        e.observe(&tick(5_000_000, 300));
        let est = e.estimate(DEV, Bandwidth::Auto, Some(102_400 * 1024));
        assert_eq!((est.bytes_per_sec, est.source), (UNMEASURED, NOT_MEASURED));
        // A first burst absorbed by the disk's cache, faster than assumed: a lower bound.
        e.observe(&tick(40_000_000, 300));
        let est = e.estimate(DEV, Bandwidth::Auto, Some(102_400 * 1024));
        assert_eq!((est.bytes_per_sec, est.source), (40e6, OBSERVED_PEAK));
        assert!(!est.measured());
        // A few seconds into writeback it has barely moved: still the guess.
        let est = e.estimate(DEV, Bandwidth::Auto, Some(104_200_000));
        assert_eq!(est.source, OBSERVED_PEAK);
        // Once far from it, it is the kernel's measurement (with what was seen as a floor).
        let est = e.estimate(DEV, Bandwidth::Auto, Some(60_000_000));
        assert_eq!((est.bytes_per_sec, est.source), (60e6, "kernel estimate"));
        assert!(est.measured());
    }

    #[test]
    fn a_saturated_disk_is_judged_by_what_it_completes() {
        let mut e = BandwidthEstimator::default();
        // The test bed's 30 MB/s disk with a backlog: busy the whole second.
        e.observe(&tick(30_000_000, 1000));
        let est = e.estimate(DEV, Bandwidth::Auto, Some(102_400 * 1024));
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
        let est = e2.estimate(DEV, Bandwidth::Auto, None);
        assert_eq!(
            (est.bytes_per_sec, est.source),
            (25e6, "measured in an earlier run")
        );
        e2.observe(&tick(30_000_000, 1000));
        let est = e2.estimate(DEV, Bandwidth::Auto, None);
        assert_eq!(est.source, "measured while saturated");
        // The configured value still wins.
        let est = e.estimate(DEV, Bandwidth::BytesPerSec(50_000_000), None);
        assert_eq!(est.bytes_per_sec, 50e6);
    }
}
