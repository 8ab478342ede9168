//! The write bandwidth each disk is judged against: configured, or learned from the kernel's own
//! estimate (debugfs bdi stats) and, without debugfs, from the highest rate the disk was seen
//! writing (/proc/diskstats).
use std::collections::HashMap;

use crate::{config::Bandwidth, model::sample::Sample, system::devices::DevId};

/// What the kernel itself assumes for a disk it has not measured yet (INIT_BW).
pub const UNMEASURED: f64 = 100e6;
/// No disk is judged against less than this: an estimate of zero (seen from debugfs on an idle
/// disk in the systemd test) would make every writer an offender and every write limit zero.
pub const MINIMUM: f64 = 1e6;
/// Per-tick decay of the observed peak, so a disk that got slower is noticed within minutes.
const PEAK_DECAY: f64 = 0.998;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    pub bytes_per_sec: f64,
    pub source: &'static str,
}

#[derive(Default)]
pub struct BandwidthEstimator {
    peak: HashMap<DevId, f64>,
}

impl BandwidthEstimator {
    pub fn observe(&mut self, sample: &Sample) {
        let dt = sample.elapsed.as_secs_f64();
        for (dev, bytes) in &sample.disk_written {
            let rate = *bytes as f64 / dt;
            let peak = self.peak.entry(*dev).or_default();
            *peak = (*peak * PEAK_DECAY).max(rate);
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
        let peak = self.peak.get(&dev).copied().unwrap_or(0.0);
        // The kernel's figure decays while a disk idles; what the disk was seen doing is a floor.
        if let Some(k) = kernel.filter(|&k| k as f64 >= MINIMUM) {
            return Estimate {
                bytes_per_sec: (k as f64).max(peak),
                source: "kernel estimate",
            };
        }
        match self.peak.get(&dev) {
            Some(&p) if p >= MINIMUM => Estimate {
                bytes_per_sec: p,
                source: "observed peak",
            },
            _ => Estimate {
                bytes_per_sec: UNMEASURED,
                source: "not yet measured",
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_below_the_minimum() {
        let e = BandwidthEstimator::default();
        let dev = DevId {
            major: 999,
            minor: 0,
        };
        assert_eq!(
            e.estimate(dev, Bandwidth::Auto, None).bytes_per_sec,
            UNMEASURED
        );
        assert_eq!(
            e.estimate(dev, Bandwidth::Auto, Some(0)).bytes_per_sec,
            UNMEASURED
        );
        assert_eq!(
            e.estimate(dev, Bandwidth::Auto, Some(30_000_000))
                .bytes_per_sec,
            30e6
        );
        assert_eq!(
            e.estimate(dev, Bandwidth::BytesPerSec(10), None)
                .bytes_per_sec,
            MINIMUM
        );
    }
}
