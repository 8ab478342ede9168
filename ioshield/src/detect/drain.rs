//! Whether a restriction due for release waits until its writer's backlog is written.
//!
//! A writer that stops (exits, or calms down) leaves the pages it dirtied in its cgroup, dirty
//! or under writeback. Lifting its restriction then hands that backlog the disk at the others'
//! weight, and they stall behind it: in the guest, a writer released with 571-585 MiB left
//! stalled the buffered innocents 3.0-3.1 s and a committing one 4.1-7.5 s, while holding the
//! restriction until the backlog was written kept them at 0.17-0.21 s
//! (docs/bench/memory-high-weight.md, `tests/vm/release-drain.sh`). While the machine's dirty
//! memory is under the kernel's background threshold nothing writes the backlog until its pages
//! expire (30 s after they were first dirtied, at the flusher's next round): in `vm ci` a writer
//! that stopped after 9 s left 349-367 MB that no one wrote in the next 23 s. So the wait allows
//! that delay, then twice the backlog's time at the disk's speed. It is bounded: a calm writer
//! that keeps a little dirty must not hold its restriction for ever.
use std::time::{Duration, Instant};

/// A backlog this small is written in a moment on any disk: the release goes ahead.
pub const DRAINED: u64 = 4 * 1024 * 1024;
/// The longest a release waits, whatever the backlog.
const WAIT_MAX: Duration = Duration::from_secs(300);
/// Added to the time the backlog takes at the disk's speed: others' writes share the disk,
/// and the speed may be measured low.
const WAIT_SLACK: Duration = Duration::from_secs(5);

/// A release that waits for the backlog, since when and for how long at most.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Drain {
    pub since: Instant,
    pub budget: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// Hold the restriction a while longer; `started` the first time.
    Wait { started: bool },
    /// Release now: `waited` is how long the backlog was waited for, if at all, and `left`
    /// what was still there when it ran out of time.
    Release {
        waited: Option<Duration>,
        left: Option<u64>,
    },
}

/// Whether to release now, given the restriction's backlog (`None`: cannot tell, e.g. no
/// memory controller or the unit's cgroup is gone), the disk's speed in bytes per second, how
/// long the kernel may leave dirty pages unwritten (`system::vmstat::writeback_delay`, asked
/// only when a wait begins) and the wait so far, which this updates.
pub fn judge(
    backlog: Option<u64>,
    bandwidth: f64,
    kernel_delay: impl FnOnce() -> Duration,
    now: Instant,
    wait: &mut Option<Drain>,
) -> Verdict {
    let waited = wait.map(|w| now.duration_since(w.since));
    let Some(backlog) = backlog.filter(|b| *b > DRAINED) else {
        *wait = None;
        return Verdict::Release { waited, left: None };
    };
    match *wait {
        None => {
            let at_speed = Duration::from_secs_f64(
                (2.0 * backlog as f64 / bandwidth.max(1.0)).min(WAIT_MAX.as_secs_f64()),
            );
            *wait = Some(Drain {
                since: now,
                budget: (kernel_delay() + at_speed + WAIT_SLACK).min(WAIT_MAX),
            });
            Verdict::Wait { started: true }
        }
        Some(w) if now.duration_since(w.since) < w.budget => Verdict::Wait { started: false },
        Some(_) => {
            *wait = None;
            Verdict::Release {
                waited,
                left: Some(backlog),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;
    /// The kernel's defaults: pages expire after 30 s, the flusher looks every 5 s.
    fn delay() -> Duration {
        Duration::from_secs(35)
    }

    #[test]
    fn a_small_or_unknown_backlog_releases_at_once() {
        let now = Instant::now();
        let mut wait = None;
        for b in [None, Some(0), Some(DRAINED)] {
            assert_eq!(
                judge(b, 30e6, delay, now, &mut wait),
                Verdict::Release {
                    waited: None,
                    left: None
                }
            );
            assert_eq!(wait, None);
        }
    }

    #[test]
    fn a_backlog_holds_the_release_until_written() {
        let t0 = Instant::now();
        let mut wait = None;
        assert_eq!(
            judge(Some(600 * MIB), 30e6, delay, t0, &mut wait),
            Verdict::Wait { started: true }
        );
        let w = wait.unwrap();
        // The kernel's delay, twice the 21 s the backlog takes at 30 MB/s, and the slack.
        assert!((w.budget.as_secs_f64() - 81.9).abs() < 0.1, "{w:?}");
        let t1 = t0 + Duration::from_secs(20);
        assert_eq!(
            judge(Some(40 * MIB), 30e6, delay, t1, &mut wait),
            Verdict::Wait { started: false }
        );
        assert_eq!(
            judge(
                Some(MIB),
                30e6,
                delay,
                t1 + Duration::from_secs(1),
                &mut wait
            ),
            Verdict::Release {
                waited: Some(Duration::from_secs(21)),
                left: None
            }
        );
        assert_eq!(wait, None);
    }

    #[test]
    fn a_backlog_that_is_not_written_releases_after_the_budget() {
        let t0 = Instant::now();
        let mut wait = None;
        judge(Some(30 * MIB), 30e6, delay, t0, &mut wait);
        let budget = wait.unwrap().budget;
        assert!(budget < Duration::from_secs(43), "{budget:?}");
        assert_eq!(
            judge(Some(30 * MIB), 30e6, delay, t0 + budget, &mut wait),
            Verdict::Release {
                waited: Some(budget),
                left: Some(30 * MIB)
            }
        );
        // However slow the disk, the wait is bounded.
        judge(Some(8 << 30), 1.0, delay, t0, &mut wait);
        assert_eq!(wait.unwrap().budget, WAIT_MAX);
    }
}
