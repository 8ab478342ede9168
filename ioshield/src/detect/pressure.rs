//! How much of the time the processes beside a restriction waited on I/O: the cgroups' "some"
//! stall totals (`system::pressure`), sampled every [`HEAR_EVERY`] while heard, as the highest
//! share any one of them spent waiting over the last [`MIN_SPAN`] or more.
use std::{
    collections::HashMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use crate::model::sliding_span::SlidingSpan;

/// The shortest time a share is judged over: a stall of a tenth of a second is a third of a
/// short span and a tenth of a tick, and only the second is a sign of a hurt neighbour.
pub const MIN_SPAN: Duration = Duration::from_millis(750);

/// How often the others are heard while a step that forced the rate up for room may be taken
/// back, each reading judging the [`MIN_SPAN`] or more that ends at it. Heard at the daemon's
/// 1 s ticks, every take-back of stop 69's status bench came 2.0 s after its step (the first
/// second judged clean, the second not), while the committing load's pauses under those false
/// rooms began 0.25-1.7 s after it.
pub const HEAR_EVERY: Duration = Duration::from_millis(250);

/// The share of the time a cgroup beside the restriction spent with a task waiting on I/O.
#[derive(Clone, Debug, PartialEq)]
pub struct Stall {
    pub share: f64,
    /// The cgroup that waited most (absolute path), if any waited at all.
    pub cgroup: Option<PathBuf>,
}

impl Stall {
    /// The cgroup that waited most, for the daemon's log.
    pub fn most(&self) -> String {
        self.cgroup
            .as_ref()
            .map_or_else(|| "none".to_string(), |c| c.display().to_string())
    }
}

/// The stall totals read since the oldest one a span may still start from, and when.
#[derive(Clone, Debug, Default)]
pub struct OthersStall {
    totals: SlidingSpan<Instant, HashMap<PathBuf, u64>>,
}

impl OthersStall {
    /// Forgets every sample: the next one starts afresh.
    pub fn reset(&mut self) {
        self.totals.reset();
    }

    /// Whether a sample at `now` is worth reading: not within [`HEAR_EVERY`] of the last one
    /// (the engine hears the others before and after each step of a tick, and between ticks),
    /// less 10 ms, so that the hearing timer's own jitter does not skip a reading.
    pub fn due(&self, now: Instant) -> bool {
        self.totals.last_at().is_none_or(|at| {
            now.saturating_duration_since(at) >= HEAR_EVERY - Duration::from_millis(10)
        })
    }

    /// The worst stall over the span from the latest sample at least [`MIN_SPAN`] before `now`
    /// to `now`, given the cgroups' "some" totals (in microseconds) at `now`; `None` while no
    /// sample is that old. A cgroup not in both samples (made or removed between them) says
    /// nothing.
    pub fn observe(&mut self, now: Instant, totals: HashMap<PathBuf, u64>) -> Option<Stall> {
        let span = self.totals.push(now, totals, MIN_SPAN)?;
        let worst = span
            .end
            .iter()
            .filter_map(|(dir, total)| Some((dir, total.saturating_sub(*span.start.get(dir)?))))
            .filter(|(_, waited)| *waited > 0)
            .max_by_key(|(_, waited)| *waited);
        Some(Stall {
            share: worst.map_or(0.0, |(_, w)| w as f64 / 1e6 / span.length.as_secs_f64()),
            cgroup: worst.map(|(d, _)| d.clone()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(of: &[(&str, u64)]) -> HashMap<PathBuf, u64> {
        of.iter().map(|(d, t)| (PathBuf::from(d), *t)).collect()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Each reading judges the span from the latest one at least `MIN_SPAN` before it: heard
    /// every 250 ms, a stall is judged 750 ms after the span it falls in began, not at the
    /// next whole second.
    #[test]
    fn the_worst_cgroups_share_of_the_last_span_is_judged() {
        let t0 = Instant::now();
        let mut s = OthersStall::default();
        assert!(s.due(t0));
        assert_eq!(s.observe(t0, totals(&[("/a", 100), ("/b", 0)])), None);
        // Within a hearing's interval of the last reading: not worth reading.
        assert!(!s.due(t0 + ms(100)));
        assert!(s.due(t0 + HEAR_EVERY));
        // Nothing judged until a reading is a whole span old.
        let b = |t: u64| totals(&[("/a", 100), ("/b", t)]);
        assert_eq!(s.observe(t0 + ms(250), b(100_000)), None);
        assert_eq!(s.observe(t0 + ms(500), b(150_000)), None);
        let got = s
            .observe(
                t0 + ms(750),
                totals(&[("/a", 100), ("/b", 200_000), ("/c", 900_000)]),
            )
            .unwrap();
        // /c was not there at the span's start: it says nothing.
        assert!((got.share - 0.2 / 0.75).abs() < 1e-9, "{got:?}");
        assert_eq!(got.cgroup, Some(PathBuf::from("/b")));
        // The span slides: from 250 ms on, /b waited 0.1 s of 0.75.
        let got = s.observe(t0 + ms(1000), b(200_000)).unwrap();
        assert!((got.share - 0.1 / 0.75).abs() < 1e-9, "{got:?}");
        // A reading a second and a half after the last judges from it alone.
        let got = s.observe(t0 + ms(2500), b(200_000)).unwrap();
        assert_eq!(
            got,
            Stall {
                share: 0.0,
                cgroup: None
            }
        );
        s.reset();
        assert!(s.due(t0 + ms(2510)));
        assert_eq!(s.observe(t0 + ms(2510), totals(&[("/a", 1)])), None);
    }
}
