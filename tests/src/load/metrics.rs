//! The thesis's figures of merit, from cycle timestamps.
//!
//! A cycle's pause is how much longer it took than nominal (its sleep); cycles that were not late
//! pause 0. The wait time is the expected time left in the current pause at a random instant:
//! a pause of length p covers p of the run and leaves p/2 on average, so the sum of p^2/2 over the
//! run's duration.
use serde::{Deserialize, Serialize};

/// Pauses longer than this count as visible stalls (a dropped frame, a lagging keystroke).
pub const NOTICEABLE_PAUSE_S: f64 = 0.1;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    pub cycles: usize,
    pub duration_s: f64,
    pub longest_pause_s: f64,
    pub total_paused_s: f64,
    pub wait_s: f64,
    pub pauses_over_100ms: usize,
}

impl Metrics {
    /// `start` is when the load began its first cycle; `ends` the end of each cycle, in order.
    pub fn from_cycles(start: f64, ends: &[f64], nominal_s: f64) -> Metrics {
        let mut previous = start;
        let mut longest = 0.0f64;
        let mut total = 0.0;
        let mut squares = 0.0;
        let mut over = 0;
        for &end in ends {
            let pause = (end - previous - nominal_s).max(0.0);
            previous = end;
            longest = longest.max(pause);
            total += pause;
            squares += pause * pause;
            if pause > NOTICEABLE_PAUSE_S {
                over += 1;
            }
        }
        let duration = ends.last().map_or(0.0, |&last| last - start);
        Metrics {
            cycles: ends.len(),
            duration_s: duration,
            longest_pause_s: longest,
            total_paused_s: total,
            wait_s: if duration > 0.0 {
                squares / (2.0 * duration)
            } else {
                0.0
            },
            pauses_over_100ms: over,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn punctual_cycles_have_no_pause() {
        let ends: Vec<f64> = (1..=10).map(|i| 100.0 + i as f64 * 0.05).collect();
        let m = Metrics::from_cycles(100.0, &ends, 0.05);
        assert_eq!(m.cycles, 10);
        assert!(close(m.duration_s, 0.5));
        assert!(m.longest_pause_s < 1e-9);
        assert!(m.total_paused_s < 1e-9);
        assert!(m.wait_s < 1e-9);
        assert_eq!(m.pauses_over_100ms, 0);
    }

    #[test]
    fn one_long_cycle() {
        // Nine 50 ms cycles and one of 2.05 s: a 2 s pause in a 2.5 s run.
        let mut ends = Vec::new();
        let mut t = 0.0;
        for i in 0..10 {
            t += if i == 4 { 2.05 } else { 0.05 };
            ends.push(t);
        }
        let m = Metrics::from_cycles(0.0, &ends, 0.05);
        assert!(close(m.longest_pause_s, 2.0));
        assert!(close(m.total_paused_s, 2.0));
        assert!(close(m.duration_s, 2.5));
        // 2^2 / (2 * 2.5)
        assert!(close(m.wait_s, 0.8));
        assert_eq!(m.pauses_over_100ms, 1);
    }

    #[test]
    fn several_pauses_add_up() {
        // Cycles of 0.13, 0.25 and 0.06 s with a nominal 0.05 s: pauses 0.08, 0.2, 0.01.
        let m = Metrics::from_cycles(10.0, &[10.13, 10.38, 10.44], 0.05);
        assert!(close(m.longest_pause_s, 0.2));
        assert!(close(m.total_paused_s, 0.29));
        assert!(close(m.wait_s, (0.0064 + 0.04 + 0.0001) / (2.0 * 0.44)));
        assert_eq!(m.pauses_over_100ms, 1);
    }

    #[test]
    fn early_cycles_do_not_cancel_late_ones() {
        // A cycle shorter than nominal (a timer firing early) is a pause of 0, not a negative one.
        let m = Metrics::from_cycles(0.0, &[0.04, 0.3], 0.05);
        assert!(close(m.total_paused_s, 0.21));
    }

    #[test]
    fn empty_run() {
        let m = Metrics::from_cycles(5.0, &[], 0.05);
        assert_eq!(m.cycles, 0);
        assert_eq!(m.duration_s, 0.0);
        assert_eq!(m.wait_s, 0.0);
    }
}
