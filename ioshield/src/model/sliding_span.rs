//! Readings of cumulative counters, kept back to the latest one a span of at least a given
//! length may start at: each new reading then judges what happened over the last such span,
//! not over whole ticks. The others' waits on I/O and the disk's queue under a room step are
//! both heard every 250 ms and judged over the last 750 ms this way.
use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

/// A point in time readings are taken at: a clock's, or seconds heard since some start.
pub trait At: Copy {
    /// How long after `earlier` this is (zero if before it).
    fn since(self, earlier: Self) -> Duration;
}

impl At for Instant {
    fn since(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl At for Duration {
    fn since(self, earlier: Self) -> Duration {
        self.saturating_sub(earlier)
    }
}

/// The readings since the latest one a span may still start at, and when each was taken.
#[derive(Clone, Debug, PartialEq)]
pub struct SlidingSpan<T, R> {
    readings: VecDeque<(T, R)>,
}

impl<T, R> Default for SlidingSpan<T, R> {
    fn default() -> Self {
        SlidingSpan {
            readings: VecDeque::new(),
        }
    }
}

/// The span a new reading judges: how long it is, the reading it starts at and the new one.
pub struct Span<'a, R> {
    pub length: Duration,
    pub start: &'a R,
    pub end: &'a R,
}

impl<T: At, R> SlidingSpan<T, R> {
    /// Forgets every reading: the next one starts afresh.
    pub fn reset(&mut self) {
        self.readings.clear();
    }

    /// When the latest reading was taken.
    pub fn last_at(&self) -> Option<T> {
        self.readings.back().map(|(at, _)| *at)
    }

    /// The latest reading.
    pub fn last(&self) -> Option<&R> {
        self.readings.back().map(|(_, reading)| reading)
    }

    /// Keeps `reading`, taken at `at`, and returns the span from the latest earlier reading at
    /// least `min` before it, if one is that old.
    pub fn push(&mut self, at: T, reading: R, min: Duration) -> Option<Span<'_, R>> {
        let old_enough = |then: T| at.since(then) >= min;
        // Readings before the latest old enough one start no span any more.
        while self
            .readings
            .get(1)
            .is_some_and(|(then, _)| old_enough(*then))
        {
            self.readings.pop_front();
        }
        self.readings.push_back((at, reading));
        let (then, start) = self.readings.front()?;
        let (_, end) = self.readings.back()?;
        (self.readings.len() > 1 && old_enough(*then)).then(|| Span {
            length: at.since(*then),
            start,
            end,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Judged from the latest reading at least the span before, never from the new one alone,
    /// and sliding as readings come.
    #[test]
    fn each_reading_judges_the_shortest_span_of_at_least_min_that_ends_at_it() {
        let mut s = SlidingSpan::<Duration, u64>::default();
        assert_eq!(s.last_at(), None);
        let mut push = |at: u64, total: u64| {
            s.push(ms(at), total, ms(750))
                .map(|span| (span.length, *span.start, *span.end))
        };
        assert_eq!(push(0, 0), None, "alone");
        assert_eq!(push(250, 10), None);
        assert_eq!(push(500, 20), None);
        assert_eq!(push(750, 35), Some((ms(750), 0, 35)));
        assert_eq!(push(1000, 40), Some((ms(750), 10, 40)));
        // A reading long after the last judges from it alone.
        assert_eq!(push(2500, 41), Some((ms(1500), 40, 41)));
        assert_eq!(push(2600, 41), Some((ms(1600), 40, 41)), "still from 1000");
        assert_eq!(s.last(), Some(&41));
        s.reset();
        assert_eq!((s.last_at(), s.last()), (None, None));
        assert!(s.push(ms(2700), 0, ms(750)).is_none(), "afresh");
        assert_eq!(s.last_at(), Some(ms(2700)));
    }

    /// A clock that went back (readings of one `Instant` never do; seconds summed as floats
    /// might round) judges no span rather than panicking.
    #[test]
    fn a_reading_before_the_last_judges_no_span() {
        let mut s = SlidingSpan::<Duration, u64>::default();
        assert!(s.push(ms(1000), 0, ms(750)).is_none());
        assert!(s.push(ms(900), 0, ms(750)).is_none());
    }
}
