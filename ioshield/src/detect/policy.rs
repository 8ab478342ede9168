//! Per-disk hysteresis: restrict when the top subtree's rate passes `restrict_at` of the disk's
//! bandwidth (or the dirty backlog would take longer than `max_flush_seconds` to flush while it
//! dirties over `release_at`, or the kernel reported a process dirtying faster than the disk
//! writes); release when the restricted subtree stays under `release_at` for `hold`.
use std::time::{Duration, Instant};

use crate::config::DevicePolicy;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub pid: u32,
    pub score: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Trigger {
    /// Subtree rate over `restrict_at` of bandwidth.
    Rate,
    /// Backlog flush time over `max_flush_seconds`, with this offender still adding to it at
    /// `rate` (the larger of its average and its last second's, bytes per second).
    FlushTime { seconds: f64, rate: f64 },
    /// The kernel saw it dirty this many bytes in this many seconds, faster than the disk
    /// writes: restricted before a backlog exists rather than after. `judged_after`: from the
    /// kernel's crossing to this decision.
    Burst {
        bytes: u64,
        seconds: f64,
        judged_after: Duration,
    },
}

/// A kernel burst report of a choosable process, as the decision sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BurstReport {
    pub offender: Candidate,
    pub bytes: u64,
    pub seconds: f64,
    /// When the kernel saw the limit crossed.
    pub crossed: Instant,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    Restrict {
        offender: Candidate,
        trigger: Trigger,
    },
    Release {
        root: u32,
        calm_for: Duration,
    },
}

#[derive(Clone, Debug)]
pub struct Held {
    pub root: u32,
    calm_since: Option<Instant>,
}

#[derive(Default, Debug)]
pub struct DiskState {
    pub held: Option<Held>,
}

pub struct Inputs {
    pub now: Instant,
    /// Best eligible subtree on this disk.
    pub offender: Option<Candidate>,
    /// The same subtree's rate over about the last second: a writer that began a few seconds
    /// ago adds to the backlog at its full rate while its average still climbs.
    pub offender_recent: f64,
    /// Current score of the restricted root's subtree (0 if it is gone).
    pub held_score: f64,
    /// The restricted root has exited and nothing of its subtree lives.
    pub held_gone: bool,
    pub bandwidth: f64,
    pub flush_seconds: Option<f64>,
    /// A choosable process the kernel reported since the last decision, with what it dirtied.
    pub burst: Option<BurstReport>,
}

impl DiskState {
    pub fn step(&mut self, i: &Inputs, p: &DevicePolicy) -> Option<Decision> {
        match &mut self.held {
            None => {
                if let Some(b) = i.burst
                    && p.burst_seconds > 0.0
                {
                    return Some(Decision::Restrict {
                        offender: b.offender,
                        trigger: Trigger::Burst {
                            bytes: b.bytes,
                            seconds: b.seconds,
                            judged_after: i.now.saturating_duration_since(b.crossed),
                        },
                    });
                }
                let o = i.offender?;
                let trigger = if o.score > p.restrict_at * i.bandwidth {
                    Trigger::Rate
                } else if p.max_flush_seconds > 0.0
                    && let Some(seconds) = i.flush_seconds
                    && seconds > p.max_flush_seconds
                    && let rate = o.score.max(i.offender_recent)
                    && rate > p.release_at * i.bandwidth
                {
                    Trigger::FlushTime { seconds, rate }
                } else {
                    return None;
                };
                Some(Decision::Restrict {
                    offender: o,
                    trigger,
                })
            }
            Some(h) => {
                if i.held_gone {
                    return Some(Decision::Release {
                        root: h.root,
                        calm_for: Duration::ZERO,
                    });
                }
                if i.held_score >= p.release_at * i.bandwidth {
                    h.calm_since = None;
                    return None;
                }
                let since = *h.calm_since.get_or_insert(i.now);
                let calm_for = i.now.duration_since(since);
                (calm_for >= p.hold).then_some(Decision::Release {
                    root: h.root,
                    calm_for,
                })
            }
        }
    }

    pub fn hold(&mut self, root: u32) {
        self.held = Some(Held {
            root,
            calm_since: None,
        });
    }

    pub fn clear(&mut self) {
        self.held = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn inputs(now: Instant, score: f64, held_score: f64) -> Inputs {
        Inputs {
            now,
            offender: Some(Candidate { pid: 42, score }),
            offender_recent: score,
            held_score,
            held_gone: false,
            bandwidth: 30e6,
            flush_seconds: None,
            burst: None,
        }
    }

    #[test]
    fn restricts_over_threshold_and_releases_after_hold() {
        let p = Config::default().default_device;
        let mut s = DiskState::default();
        let t0 = Instant::now();
        assert_eq!(
            s.step(&inputs(t0, 20e6, 0.0), &p),
            None,
            "20 of 30 MB/s is under 70%"
        );
        let d = s.step(&inputs(t0, 22e6, 0.0), &p).unwrap();
        assert!(matches!(
            d,
            Decision::Restrict {
                trigger: Trigger::Rate,
                ..
            }
        ));
        s.hold(42);
        // Still writing at a limited 15 MB/s: above release_at (6 MB/s), stays restricted.
        assert_eq!(
            s.step(&inputs(t0 + Duration::from_secs(5), 15e6, 15e6), &p),
            None
        );
        let calm = t0 + Duration::from_secs(6);
        assert_eq!(s.step(&inputs(calm, 1e6, 1e6), &p), None);
        assert_eq!(
            s.step(&inputs(calm + Duration::from_secs(9), 1e6, 1e6), &p),
            None
        );
        // A burst resets the calm period.
        assert_eq!(
            s.step(&inputs(calm + Duration::from_secs(9), 9e6, 9e6), &p),
            None
        );
        assert_eq!(
            s.step(&inputs(calm + Duration::from_secs(15), 1e6, 1e6), &p),
            None
        );
        let d = s
            .step(&inputs(calm + Duration::from_secs(26), 1e6, 1e6), &p)
            .unwrap();
        assert!(matches!(d, Decision::Release { root: 42, .. }));
    }

    #[test]
    fn flush_time_trigger_needs_an_active_writer() {
        let mut p = Config::default().default_device;
        p.max_flush_seconds = 2.0;
        let mut s = DiskState::default();
        let t0 = Instant::now();
        let mut i = inputs(t0, 10e6, 0.0);
        i.flush_seconds = Some(5.0);
        assert!(matches!(
            s.step(&i, &p),
            Some(Decision::Restrict {
                trigger: Trigger::FlushTime { .. },
                ..
            })
        ));
        i.offender = Some(Candidate {
            pid: 42,
            score: 1e6,
        });
        i.offender_recent = 1e6;
        assert_eq!(
            s.step(&i, &p),
            None,
            "a trickle is not the cause of the backlog"
        );
        // A writer that began a second ago: its average has not caught up with what it adds.
        i.offender_recent = 14e6;
        assert!(matches!(
            s.step(&i, &p),
            Some(Decision::Restrict {
                trigger: Trigger::FlushTime { .. },
                ..
            })
        ));
        // Nor does the last second make a rate trigger of a writer under it.
        i.flush_seconds = None;
        i.offender_recent = 29e6;
        assert_eq!(s.step(&i, &p), None);
    }

    #[test]
    fn a_burst_restricts_at_once_unless_turned_off() {
        let mut p = Config::default().default_device;
        let mut s = DiskState::default();
        let mut i = inputs(Instant::now(), 0.0, 0.0);
        i.offender = None;
        let crossed = i.now - Duration::from_millis(12);
        i.burst = Some(BurstReport {
            offender: Candidate { pid: 7, score: 9e7 },
            bytes: 9_000_000,
            seconds: 0.1,
            crossed,
        });
        assert!(matches!(
            s.step(&i, &p),
            Some(Decision::Restrict {
                offender: Candidate { pid: 7, .. },
                trigger: Trigger::Burst {
                    bytes: 9_000_000,
                    judged_after,
                    ..
                },
            }) if judged_after == Duration::from_millis(12)
        ));
        p.burst_seconds = 0.0;
        assert_eq!(s.step(&i, &p), None);
        // Already holding someone on this disk: a burst does not stack a second restriction.
        p.burst_seconds = 0.25;
        s.hold(42);
        assert_eq!(s.step(&i, &p), None);
    }

    #[test]
    fn a_vanished_subtree_is_released_at_once() {
        let p = Config::default().default_device;
        let mut s = DiskState::default();
        let t0 = Instant::now();
        s.hold(42);
        let mut i = inputs(t0, 0.0, 0.0);
        i.held_gone = true;
        assert!(matches!(s.step(&i, &p), Some(Decision::Release { .. })));
    }
}
