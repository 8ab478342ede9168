//! How much of the last second the processes beside a restriction waited on I/O: the
//! cgroups' "some" stall totals (`system::pressure`), sampled at the daemon's ticks and, while
//! a speed probe hears them, every [`EVERY`] in between, as the most any one of them waited
//! within the last [`WINDOW`] (the way a PSI trigger judges, without the CAP_SYS_RESOURCE
//! the kernel wants for a trigger window under 2 s).
use std::{
    collections::{HashMap, VecDeque},
    path::PathBuf,
    time::{Duration, Instant},
};

/// The span a wait is judged over: a stall of a tenth of a second is a tenth of it, and only
/// a longer one is a sign of a hurt neighbour.
pub const WINDOW: Duration = Duration::from_secs(1);

/// How often the totals are read while a probe hears the others: read at the ticks only, a
/// false room was taken back 0.9-1.9 s after its step, when the committing load had paused
/// 0.3-0.5 s already (docs/bench/speed-probe.md, stop 49).
pub const EVERY: Duration = Duration::from_millis(100);

/// How much of the last [`WINDOW`] a cgroup beside the restriction spent with a task waiting
/// on I/O.
#[derive(Clone, Debug, PartialEq)]
pub struct Stall {
    /// The wait over the window (over the span since the oldest sample, when that is longer).
    pub share: f64,
    /// The cgroup that waited most (absolute path), if any waited at all.
    pub cgroup: Option<PathBuf>,
}

/// The stall totals of the last [`WINDOW`], and the newest sample before it.
#[derive(Clone, Debug, Default)]
pub struct OthersStall {
    samples: VecDeque<(Instant, HashMap<PathBuf, u64>)>,
}

impl OthersStall {
    /// Forgets the samples: the next one starts afresh.
    pub fn reset(&mut self) {
        self.samples.clear();
    }

    /// Whether a sample at `now` is due: about [`EVERY`] after the last one (a timer of that
    /// period wakes a little early or late, and a tick's reading falls between).
    pub fn due(&self, now: Instant) -> bool {
        self.samples
            .back()
            .is_none_or(|(at, _)| now.saturating_duration_since(*at) >= EVERY - EVERY / 5)
    }

    /// The worst wait within the last [`WINDOW`], given the cgroups' "some" totals (in
    /// microseconds) at `now`; `None` for the first sample. The wait is counted from the newest
    /// sample at least a window old (from the first one, early on): as a share of the window,
    /// so that 150 ms of waiting says 15% whether it came in the first 0.3 s after a step or
    /// over the whole second. A cgroup not in both samples (made or removed between them) says
    /// nothing.
    pub fn observe(&mut self, now: Instant, totals: HashMap<PathBuf, u64>) -> Option<Stall> {
        while self
            .samples
            .get(1)
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) >= WINDOW)
        {
            self.samples.pop_front();
        }
        let stall = self.samples.front().map(|(at, base)| {
            let span = now.saturating_duration_since(*at).max(WINDOW);
            let worst = totals
                .iter()
                .filter_map(|(dir, total)| Some((dir, total.saturating_sub(*base.get(dir)?))))
                .filter(|(_, waited)| *waited > 0)
                .max_by_key(|(_, waited)| *waited);
            Stall {
                share: worst.map_or(0.0, |(_, w)| w as f64 / 1e6 / span.as_secs_f64()),
                cgroup: worst.map(|(d, _)| d.clone()),
            }
        });
        self.samples.push_back((now, totals));
        stall
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(of: &[(&str, u64)]) -> HashMap<PathBuf, u64> {
        of.iter().map(|(d, t)| (PathBuf::from(d), *t)).collect()
    }

    #[test]
    fn the_worst_wait_within_the_last_second_is_judged() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = OthersStall::default();
        assert!(s.due(t0));
        assert_eq!(s.observe(t0, totals(&[("/a", 100), ("/b", 0)])), None);
        assert!(!s.due(t0 + ms(50)));
        assert!(s.due(t0 + ms(99)));
        // 150 ms of waiting 0.3 s after the first sample: 15% of the window already.
        let got = s
            .observe(t0 + ms(300), totals(&[("/a", 100), ("/b", 150_000)]))
            .unwrap();
        assert!((got.share - 0.15).abs() < 1e-9, "{got:?}");
        assert_eq!(got.cgroup, Some(PathBuf::from("/b")));
        // Counted from the newest sample at least a second old: at 1.2 s, from 0 still (the
        // sample at 0.3 s is under a second old), at 1.4 s from 0.3 s.
        let got = s
            .observe(t0 + ms(1200), totals(&[("/a", 250_100), ("/b", 150_000)]))
            .unwrap();
        assert!((got.share - 0.25 / 1.2).abs() < 1e-9, "{got:?}");
        assert_eq!(got.cgroup, Some(PathBuf::from("/a")));
        let got = s
            .observe(t0 + ms(1400), totals(&[("/a", 250_100), ("/b", 150_000)]))
            .unwrap();
        assert!((got.share - 0.25 / 1.1).abs() < 1e-9, "{got:?}");
        // A cgroup made since says nothing; nobody waiting says 0 and no cgroup.
        let got = s
            .observe(t0 + ms(3000), totals(&[("/a", 250_100), ("/c", 900_000)]))
            .unwrap();
        assert_eq!(
            got,
            Stall {
                share: 0.0,
                cgroup: None
            }
        );
        s.reset();
        assert!(s.due(t0 + ms(3000)));
        assert_eq!(s.observe(t0 + ms(3000), totals(&[("/a", 1)])), None);
    }
}
