//! How much of the time the processes beside a restriction waited on I/O: the cgroups' "some"
//! stall totals (`system::pressure`), sampled at the daemon's ticks, as the highest share any
//! one of them spent waiting since the last judged sample.
use std::{
    collections::HashMap,
    path::PathBuf,
    time::{Duration, Instant},
};

/// The shortest time a share is judged over: a stall of a tenth of a second is a third of a
/// short span and a tenth of a tick, and only the second is a sign of a hurt neighbour.
pub const MIN_SPAN: Duration = Duration::from_millis(750);

/// The share of the time a cgroup beside the restriction spent with a task waiting on I/O.
#[derive(Clone, Debug, PartialEq)]
pub struct Stall {
    pub share: f64,
    /// The cgroup that waited most (absolute path), if any waited at all.
    pub cgroup: Option<PathBuf>,
}

/// The stall totals at the last judged sample, and when.
#[derive(Clone, Debug, Default)]
pub struct OthersStall {
    base: Option<(Instant, HashMap<PathBuf, u64>)>,
}

impl OthersStall {
    /// Forgets the last sample: the next one starts afresh.
    pub fn reset(&mut self) {
        self.base = None;
    }

    /// Whether a sample at `now` would be judged or start afresh: one under [`MIN_SPAN`] after
    /// the last judged one says nothing, and need not be read.
    pub fn due(&self, now: Instant) -> bool {
        self.base
            .as_ref()
            .is_none_or(|(at, _)| now.saturating_duration_since(*at) >= MIN_SPAN)
    }

    /// The worst stall since the last judged sample, given the cgroups' "some" totals (in
    /// microseconds) at `now`; `None` for the first sample and under [`MIN_SPAN`] after the last
    /// judged one. A cgroup not in both samples (made or removed between them) says nothing.
    pub fn observe(&mut self, now: Instant, totals: HashMap<PathBuf, u64>) -> Option<Stall> {
        let Some((at, base)) = &self.base else {
            self.base = Some((now, totals));
            return None;
        };
        let span = now.saturating_duration_since(*at);
        if span < MIN_SPAN {
            return None;
        }
        let worst = totals
            .iter()
            .filter_map(|(dir, total)| Some((dir, total.saturating_sub(*base.get(dir)?))))
            .filter(|(_, waited)| *waited > 0)
            .max_by_key(|(_, waited)| *waited);
        let stall = Stall {
            share: worst.map_or(0.0, |(_, w)| w as f64 / 1e6 / span.as_secs_f64()),
            cgroup: worst.map(|(d, _)| d.clone()),
        };
        self.base = Some((now, totals));
        Some(stall)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(of: &[(&str, u64)]) -> HashMap<PathBuf, u64> {
        of.iter().map(|(d, t)| (PathBuf::from(d), *t)).collect()
    }

    #[test]
    fn the_worst_cgroups_share_of_the_span_is_judged() {
        let t0 = Instant::now();
        let mut s = OthersStall::default();
        assert_eq!(s.observe(t0, totals(&[("/a", 100), ("/b", 0)])), None);
        // Under the shortest span: nothing judged, and the base stays.
        let early = t0 + Duration::from_millis(100);
        assert!(!s.due(early));
        assert_eq!(s.observe(early, totals(&[("/a", 50_100)])), None);
        let t1 = t0 + Duration::from_secs(1);
        assert!(s.due(t1));
        let got = s
            .observe(
                t1,
                totals(&[("/a", 100_100), ("/b", 250_000), ("/c", 900_000)]),
            )
            .unwrap();
        assert!((got.share - 0.25).abs() < 1e-9, "{got:?}");
        assert_eq!(got.cgroup, Some(PathBuf::from("/b")));
        // Judged from the last judged sample on.
        let t2 = t1 + Duration::from_secs(2);
        let got = s
            .observe(t2, totals(&[("/a", 100_100), ("/b", 250_000)]))
            .unwrap();
        assert_eq!(
            got,
            Stall {
                share: 0.0,
                cgroup: None
            }
        );
        s.reset();
        assert!(s.due(t2));
        assert_eq!(s.observe(t2, totals(&[("/a", 1)])), None);
    }
}
