//! The trade each scenario of a bench makes: the innocents' longest pause against what the
//! offender keeps of its speed, and which scenarios no other one beats on both. Issue 10 chose
//! the defaults by this frontier; every bench now prints it (and draws it, `plot::frontiers`)
//! so that a candidate is judged against the others measured the same day.
use super::{
    results::Run,
    stats::{Summary, summarize},
};

/// One scenario on one kernel.
pub struct Point {
    pub scenario: String,
    /// Each run's longest pause of any innocent load, over the runs.
    pub pause: Summary,
    /// The offender's median speed over the same kernel's `none` median.
    pub speed: Option<f64>,
    /// A scenario whose median pause is no longer and whose writer keeps no less, better in
    /// one of the two: this one is off the frontier.
    pub beaten_by: Option<String>,
}

/// The points of `kernel`'s runs, in `scenarios` order; `innocents` are the loads whose pauses
/// count (not `control`, which does no I/O).
pub fn points(scenarios: &[String], kernel: &str, runs: &[Run], innocents: &[&str]) -> Vec<Point> {
    let speed_of = |scenario: &str| {
        let v: Vec<f64> = of(runs, kernel, scenario)
            .filter_map(|r| r.offender_bytes_per_sec)
            .collect();
        summarize(&v).map(|s| s.median)
    };
    let none = speed_of("none").filter(|n| *n > 0.0);
    let mut points: Vec<Point> = scenarios
        .iter()
        .filter_map(|scenario| {
            let worst: Vec<f64> = of(runs, kernel, scenario)
                .filter_map(|r| {
                    innocents
                        .iter()
                        .filter_map(|l| r.load(l))
                        .map(|l| l.longest_pause_s)
                        .reduce(f64::max)
                })
                .collect();
            Some(Point {
                scenario: scenario.clone(),
                pause: summarize(&worst)?,
                speed: speed_of(scenario).zip(none).map(|(s, n)| s / n),
                beaten_by: None,
            })
        })
        .collect();
    for i in 0..points.len() {
        let (pause, Some(speed)) = (points[i].pause.median, points[i].speed) else {
            continue;
        };
        points[i].beaten_by = points
            .iter()
            .find(|o| {
                o.speed.is_some_and(|s| {
                    o.pause.median <= pause && s >= speed && (o.pause.median < pause || s > speed)
                })
            })
            .map(|o| o.scenario.clone());
    }
    points
}

/// One scenario's runs on one kernel.
fn of<'a>(runs: &'a [Run], kernel: &'a str, scenario: &'a str) -> impl Iterator<Item = &'a Run> {
    runs.iter()
        .filter(move |r| r.kernel == kernel && r.scenario == scenario)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::results::Load;

    fn run(scenario: &str, kernel: &str, pauses: &[(&str, f64)], speed: f64) -> Run {
        let mut r = Run::empty(scenario, kernel);
        r.loads = pauses
            .iter()
            .map(|&(name, longest)| Load {
                name: name.to_string(),
                longest_pause_s: longest,
                total_paused_s: 0.0,
                wait_s: 0.0,
                p50_s: 0.0,
                p99_s: 0.0,
                pauses: Vec::new(),
            })
            .collect();
        r.offender_bytes_per_sec = Some(speed);
        r
    }

    #[test]
    fn each_run_counts_its_worst_innocent_and_a_slower_longer_pausing_scenario_is_beaten() {
        let runs = [
            run("none", "6.12", &[("write", 6.0), ("commit", 8.0)], 20e6),
            run("none", "6.12", &[("write", 5.0), ("commit", 7.0)], 20e6),
            // The idle `control` load's pause is the host's, never the trade's.
            run("a", "6.12", &[("control", 9.0), ("commit", 0.3)], 20e6),
            run("a", "6.12", &[("write", 0.2), ("commit", 0.1)], 22e6),
            run("b", "6.12", &[("commit", 0.5)], 10e6),
            run("c", "6.12", &[("commit", 0.1)], 8e6),
            run("a", "6.1", &[("commit", 5.0)], 1e6),
        ];
        let scenarios: Vec<String> = ["none", "a", "b", "c", "missing"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let p = points(&scenarios, "6.12", &runs, &["write", "commit"]);
        let names: Vec<&str> = p.iter().map(|p| p.scenario.as_str()).collect();
        assert_eq!(names, ["none", "a", "b", "c"]);
        assert_eq!((p[0].pause.median, p[0].pause.max), (7.5, 8.0));
        assert_eq!((p[1].pause.min, p[1].pause.max), (0.2, 0.3));
        assert_eq!(p[1].speed, Some(21e6 / 20e6));
        assert_eq!(p[0].beaten_by.as_deref(), Some("a"));
        assert_eq!(p[1].beaten_by, None);
        assert_eq!(p[2].beaten_by.as_deref(), Some("a"));
        // Pauses less than `a` at a lower speed: a trade, not beaten.
        assert_eq!(p[3].beaten_by, None);
    }

    #[test]
    fn without_a_reference_there_is_no_speed_to_compare() {
        let runs = [run("a", "6.12", &[("commit", 0.3)], 20e6)];
        let p = points(&["a".to_string()], "6.12", &runs, &["commit"]);
        assert_eq!(p[0].speed, None);
        assert_eq!(p[0].beaten_by, None);
    }
}
