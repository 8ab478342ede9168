//! Whether a restriction due for release waits until its writer's backlog is written.
//!
//! A writer that stops (exits, or calms down) leaves the pages it dirtied in its cgroup, dirty
//! or under writeback. Lifting its restriction then hands that backlog the disk at the others'
//! weight, and they stall behind it: in the guest, a writer released with 571-585 MiB left
//! stalled the buffered innocents 3.0-3.1 s and a committing one 4.1-7.5 s, while holding the
//! restriction until the backlog was written kept them at 0.17-0.21 s
//! (docs/bench/memory-high-weight.md, `tests/vm/release-drain.sh`). While the machine's dirty
//! memory is under the kernel's background threshold nothing writes the backlog until its
//! inode expires, 30 s after it was dirtied, at the flusher's next round; a writeback that
//! stopped half-way restarts that clock (on 6.12, of the 370 MiB dirty when a writer stopped,
//! 55 MiB were written at once, then nothing for 31 s). So the wait goes on while the backlog keeps
//! shrinking and gives up only after that delay without any of it written. A deadline from the
//! first moment instead (the kernel's delay and twice the backlog at the disk's speed) ran out
//! in one `vm ci` run with a writer's 335 MB still unwritten 62 s after it stopped. The wait is
//! bounded: a calm writer that keeps a little dirty must not hold its restriction for ever.
use std::time::{Duration, Instant};

/// A backlog this small is written in a moment on any disk: the release goes ahead.
pub const DRAINED: u64 = 4 * 1024 * 1024;
/// What the backlog must shrink by to count as being written: it moves a little with the
/// writer's last pages and the memory controller's batching.
const PROGRESS: u64 = 1024 * 1024;
/// The longest a release waits, whatever the backlog.
const WAIT_MAX: Duration = Duration::from_secs(300);
/// Added to the kernel's delay: the flusher's round and the disk's queue.
const WAIT_SLACK: Duration = Duration::from_secs(5);

/// A release that waits for the backlog: since when, the least backlog seen and when, and how
/// long it may go without shrinking.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Drain {
    pub since: Instant,
    least: u64,
    shrank_at: Instant,
    patience: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// Hold the restriction a while longer; `started` the first time.
    Wait { started: bool },
    /// Release now: `waited` is how long the backlog was waited for, if at all, and `left`
    /// what was still there when the wait gave up.
    Release {
        waited: Option<Duration>,
        left: Option<u64>,
    },
}

impl Verdict {
    /// What a release says of its wait, for its log line: nothing when it did not wait.
    pub fn said(&self) -> String {
        match *self {
            Verdict::Wait { .. }
            | Verdict::Release {
                waited: None,
                left: _,
            } => String::new(),
            Verdict::Release {
                waited: Some(w),
                left: None,
            } => format!("; its backlog written in {:.1}s", w.as_secs_f64()),
            Verdict::Release {
                waited: Some(w),
                left: Some(left),
            } => format!(
                "; {} of its backlog still unwritten after {:.1}s",
                crate::display::show_bytes(left),
                w.as_secs_f64()
            ),
        }
    }
}

/// Whether to release now, given the restriction's backlog (`None`: cannot tell, e.g. no
/// memory controller or the unit's cgroup is gone), how long the kernel may leave dirty pages
/// unwritten (`system::vmstat::writeback_delay`, asked only when a wait begins) and the wait so
/// far, which this updates.
pub fn judge(
    backlog: Option<u64>,
    kernel_delay: impl FnOnce() -> Duration,
    now: Instant,
    wait: &mut Option<Drain>,
) -> Verdict {
    let waited = wait.map(|w| now.duration_since(w.since));
    let Some(backlog) = backlog.filter(|b| *b > DRAINED) else {
        *wait = None;
        return Verdict::Release { waited, left: None };
    };
    let Some(w) = wait else {
        *wait = Some(Drain {
            since: now,
            least: backlog,
            shrank_at: now,
            patience: (kernel_delay() + WAIT_SLACK).min(WAIT_MAX),
        });
        return Verdict::Wait { started: true };
    };
    if backlog + PROGRESS <= w.least {
        w.least = backlog;
        w.shrank_at = now;
    }
    if now.duration_since(w.since) < WAIT_MAX && now.duration_since(w.shrank_at) < w.patience {
        return Verdict::Wait { started: false };
    }
    *wait = None;
    Verdict::Release {
        waited,
        left: Some(backlog),
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
                judge(b, delay, now, &mut wait),
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
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut wait = None;
        assert_eq!(
            judge(Some(600 * MIB), delay, t0, &mut wait),
            Verdict::Wait { started: true }
        );
        assert_eq!(
            judge(Some(40 * MIB), delay, at(20), &mut wait),
            Verdict::Wait { started: false }
        );
        assert_eq!(
            judge(Some(MIB), delay, at(21), &mut wait),
            Verdict::Release {
                waited: Some(Duration::from_secs(21)),
                left: None
            }
        );
        assert_eq!(wait, None);
    }

    /// As on 6.12: part of the backlog written at once, then nothing until the inode expires
    /// again, 30 s after that writeback; the wait outlasts the pause and sees it written.
    #[test]
    fn a_backlog_that_resumes_after_the_kernels_delay_is_waited_for() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut wait = None;
        judge(Some(362 * MIB), delay, t0, &mut wait);
        judge(Some(311 * MIB), delay, at(8), &mut wait);
        // Not shrinking for 39 s from the start, but for only 31 s since it last did.
        judge(Some(311 * MIB), delay, at(39), &mut wait);
        assert_eq!(
            judge(Some(310 * MIB + 512 * 1024), delay, at(39), &mut wait),
            Verdict::Wait { started: false }
        );
        assert_eq!(
            judge(Some(200 * MIB), delay, at(42), &mut wait),
            Verdict::Wait { started: false }
        );
        assert_eq!(
            judge(Some(0), delay, at(50), &mut wait),
            Verdict::Release {
                waited: Some(Duration::from_secs(50)),
                left: None
            }
        );
    }

    #[test]
    fn a_backlog_that_is_not_written_releases_after_the_kernels_delay() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut wait = None;
        judge(Some(30 * MIB), delay, t0, &mut wait);
        assert_eq!(
            judge(Some(30 * MIB), delay, at(39), &mut wait),
            Verdict::Wait { started: false }
        );
        assert_eq!(
            judge(Some(30 * MIB), delay, at(40), &mut wait),
            Verdict::Release {
                waited: Some(Duration::from_secs(40)),
                left: Some(30 * MIB)
            }
        );
        // However long it keeps shrinking, the wait is bounded.
        let mut wait = None;
        let mut backlog = 8u64 << 30;
        judge(Some(backlog), delay, t0, &mut wait);
        let mut s = 0;
        let verdict = loop {
            s += 10;
            backlog -= 2 * MIB;
            match judge(Some(backlog), delay, at(s), &mut wait) {
                Verdict::Wait { .. } => continue,
                v => break v,
            }
        };
        assert_eq!(s, WAIT_MAX.as_secs());
        assert!(matches!(verdict, Verdict::Release { left: Some(_), .. }));
    }
}
