//! `ioshield-load summarize`: the metrics of several records side by side.
use std::{fmt::Write as _, path::PathBuf};

use anyhow::Result;
use serde::Serialize;

use super::{metrics::Metrics, record::LoadRecord};

#[derive(Debug, Serialize)]
pub struct Row {
    pub file: String,
    pub load: String,
    pub pid: u32,
    pub metrics: Option<Metrics>,
    pub bytes_written: u64,
    pub bytes_per_sec: f64,
}

pub fn rows(files: &[PathBuf]) -> Result<Vec<Row>> {
    files
        .iter()
        .map(|f| {
            let r = LoadRecord::load(f)?;
            Ok(Row {
                file: f.display().to_string(),
                load: r.load,
                pid: r.pid,
                metrics: r.metrics,
                bytes_written: r.bytes_written,
                bytes_per_sec: r.bytes_per_sec,
            })
        })
        .collect()
}

pub fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:<12} {:>7} {:>8} {:>8} {:>9} {:>7} {:>10}  {}\n",
        "load", "cycles", "longest", "paused", "wait", ">100ms", "MB/s", "file"
    );
    for r in rows {
        let mb_s = r.bytes_per_sec / 1e6;
        match &r.metrics {
            Some(m) => writeln!(
                out,
                "{:<12} {:>7} {:>7.3}s {:>7.2}s {:>7.1}ms {:>7} {:>10.3}  {}",
                r.load,
                m.cycles,
                m.longest_pause_s,
                m.total_paused_s,
                m.wait_s * 1e3,
                m.pauses_over_100ms,
                mb_s,
                r.file
            ),
            None => writeln!(
                out,
                "{:<12} {:>7} {:>8} {:>8} {:>9} {:>7} {:>10.3}  {}",
                r.load, "-", "-", "-", "-", "-", mb_s, r.file
            ),
        }
        .expect("writing to a String");
    }
    out
}
