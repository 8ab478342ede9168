//! What a load leaves behind: its cycle timestamps and the metrics computed from them, as JSON.
use std::{fs, path::Path};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use super::metrics::Metrics;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadRecord {
    /// `control`, `write`, `multiwrite` or `offender`.
    pub load: String,
    pub pid: u32,
    /// Nominal cycle length (the load's sleep); 0 for the offender, which never sleeps.
    pub nominal_s: f64,
    /// CLOCK_MONOTONIC seconds when the first cycle began (for the offender: its first write).
    pub start_s: f64,
    /// CLOCK_MONOTONIC seconds at the end of each cycle (offender: each chunk written).
    pub cycle_ends_s: Vec<f64>,
    /// Pause metrics; absent for the offender, whose cycles have no nominal length.
    pub metrics: Option<Metrics>,
    /// Bytes written by the load (and, for the offender, its children and threads).
    pub bytes_written: u64,
    /// `bytes_written` over the time from `start_s` to the last cycle end.
    pub bytes_per_sec: f64,
    /// A fixed-size job of the stall bench (stall.sh writes its record): when the job's own
    /// process ended, before the `sync` that its last cycle end waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exited_s: Option<f64>,
}

impl LoadRecord {
    pub fn new(
        load: &str,
        nominal_s: f64,
        start_s: f64,
        cycle_ends_s: Vec<f64>,
        bytes: u64,
    ) -> Self {
        let metrics =
            (nominal_s > 0.0).then(|| Metrics::from_cycles(start_s, &cycle_ends_s, nominal_s));
        let span = cycle_ends_s.last().map_or(0.0, |&l| l - start_s);
        LoadRecord {
            load: load.to_string(),
            pid: std::process::id(),
            nominal_s,
            start_s,
            cycle_ends_s,
            metrics,
            bytes_written: bytes,
            bytes_per_sec: if span > 0.0 { bytes as f64 / span } else { 0.0 },
            exited_s: None,
        }
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        let json = serde_json::to_string(self)?;
        fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))
    }

    pub fn load(path: &Path) -> Result<Self> {
        let text =
            fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not a load record", path.display()))
    }
}
