//! How long each step of a restriction took. The offender keeps dirtying pages, charged to its
//! old cgroup, until the last step is done: these milliseconds are backlog the innocents pay
//! for, so the decision's log line says where they went.
use std::{
    fmt,
    time::{Duration, Instant},
};

#[derive(Debug, Clone)]
pub struct Stopwatch {
    started: Instant,
    last: Instant,
    laps: Vec<(&'static str, Duration)>,
    /// Steps done on another thread meanwhile: part of the total, not added to it.
    alongside: Vec<(&'static str, Duration)>,
}

impl Default for Stopwatch {
    fn default() -> Self {
        Self::start()
    }
}

impl Stopwatch {
    pub fn start() -> Self {
        let now = Instant::now();
        Self {
            started: now,
            last: now,
            laps: Vec::new(),
            alongside: Vec::new(),
        }
    }

    /// Ends `step` now; a step that took under a millisecond is left out of the line.
    pub fn lap(&mut self, step: &'static str) {
        let now = Instant::now();
        self.laps.push((step, now - self.last));
        self.last = now;
    }

    /// Takes in `other`'s steps as done alongside this stopwatch's.
    pub fn alongside(&mut self, other: Stopwatch) {
        self.alongside.extend(other.laps);
    }

    pub fn total(&self) -> Duration {
        self.last - self.started
    }

    /// The steps lapped so far, in order.
    #[cfg(test)]
    pub fn steps(&self) -> Vec<&'static str> {
        self.laps.iter().map(|(step, _)| *step).collect()
    }

    /// The steps done alongside so far, in order.
    #[cfg(test)]
    pub fn steps_alongside(&self) -> Vec<&'static str> {
        self.alongside.iter().map(|(step, _)| *step).collect()
    }
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

impl fmt::Display for Stopwatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", ms(self.total()))?;
        let shown = |laps: &[(&'static str, Duration)]| -> Vec<String> {
            laps.iter()
                .filter(|(_, d)| *d >= Duration::from_millis(1))
                .map(|(step, d)| format!("{step} {}", ms(*d)))
                .collect()
        };
        let (own, alongside) = (shown(&self.laps), shown(&self.alongside));
        if !own.is_empty() {
            write!(f, ": {}", own.join(", "))?;
        }
        if !alongside.is_empty() {
            write!(f, "; alongside: {}", alongside.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_the_steps_that_took_time() {
        let t0 = Instant::now();
        let w = Stopwatch {
            started: t0,
            last: t0 + Duration::from_millis(252),
            laps: vec![
                ("cgroup", Duration::from_micros(300)),
                ("move", Duration::from_millis(31)),
                ("iocost", Duration::from_micros(220_700)),
            ],
            alongside: Vec::new(),
        };
        assert_eq!(w.to_string(), "252 ms: move 31 ms, iocost 221 ms");
    }

    #[test]
    fn steps_done_alongside_are_named_apart_and_not_added() {
        let t0 = Instant::now();
        let mut w = Stopwatch {
            started: t0,
            last: t0 + Duration::from_millis(60),
            laps: vec![
                ("move", Duration::from_millis(31)),
                ("iocost wait", Duration::from_millis(29)),
            ],
            alongside: Vec::new(),
        };
        let other = Stopwatch {
            started: t0,
            last: t0 + Duration::from_millis(58),
            laps: vec![("iocost qos", Duration::from_millis(58))],
            alongside: Vec::new(),
        };
        w.alongside(other);
        assert_eq!(
            w.to_string(),
            "60 ms: move 31 ms, iocost wait 29 ms; alongside: iocost qos 58 ms"
        );
    }

    #[test]
    fn laps_add_up_to_the_total() {
        let mut w = Stopwatch::start();
        w.lap("a");
        std::thread::sleep(Duration::from_millis(2));
        w.lap("b");
        let sum: Duration = w.laps.iter().map(|(_, d)| *d).sum();
        assert_eq!(sum, w.total());
        assert_eq!(
            w.laps.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            ["a", "b"]
        );
    }
}
