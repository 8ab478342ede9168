//! The smoke run's verdict (tests/vm/smoke.sh): the BPF programs load on the guest's kernel and
//! count the offender's dirtied bytes, as the kernel's own accounting does.
use std::{fs, path::Path};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

/// The smoke run passes when `top` printed its samples and counted the offender's dirtied bytes
/// on the data disk in every one of them.
pub fn check(results: &Path, status: i32) -> Result<String> {
    let data_dev = fs::read_to_string(results.join("data-dev"))?
        .trim()
        .to_string();
    let pid: u64 = fs::read_to_string(results.join("offender.pid"))?
        .trim()
        .parse()
        .context("offender.pid")?;
    let top = fs::read_to_string(results.join("top.json"))?;
    let samples: Vec<Value> = top
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .context("top.json is not one JSON object per line")?;
    if samples.is_empty() || status != 0 {
        // top's error is its first line; the verifier's listing may follow.
        let log = fs::read_to_string(results.join("top.log")).unwrap_or_default();
        let first = log.lines().next().unwrap_or("(no output)");
        bail!("smoke.sh exited {status}; ioshield top: {first}");
    }
    let rates: Vec<f64> = samples
        .iter()
        .map(|s| {
            s["processes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["pid"].as_u64() == Some(pid) && p["device"] == data_dev.as_str())
                .filter_map(|p| p["dirty_bytes_per_sec"].as_f64())
                .sum()
        })
        .collect();
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    let kernel_rate = proc_io_rate(&results.join("offender-io.txt"))?;
    let counted = rates.iter().filter(|&&r| r > 0.0).count();
    let msg = format!(
        "BPF loaded; offender counted on {data_dev} in {counted}/{} samples at {:.1} MB/s \
         (samples {}), /proc/PID/io says {:.1} MB/s",
        rates.len(),
        mean / 1e6,
        rates
            .iter()
            .map(|r| format!("{:.1}", r / 1e6))
            .collect::<Vec<_>>()
            .join("/"),
        kernel_rate / 1e6
    );
    // The offender itself can sit a whole sample in the very flush stall the bed reproduces
    // (seen on 6.12: nobody dirtied a page for 2 s), so not every sample must count it; what
    // must hold is that it is seen, and at a rate the kernel's own accounting agrees with.
    let ratio = mean / kernel_rate.max(1.0);
    if counted == 0 || !(0.5..=1.5).contains(&ratio) {
        bail!("{msg}; counted/kernel = {ratio:.2}, want 0.5-1.5");
    }
    Ok(msg)
}

/// write_bytes per second between the two lines `label uptime write_bytes` smoke.sh recorded.
fn proc_io_rate(path: &Path) -> Result<f64> {
    let text = fs::read_to_string(path)?;
    let nums: Vec<Vec<f64>> = text
        .lines()
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .collect();
    match nums.as_slice() {
        [a, b] if a.len() == 2 && b.len() == 2 && b[0] > a[0] => Ok((b[1] - a[1]) / (b[0] - a[0])),
        _ => bail!("{} is incomplete: {text:?}", path.display()),
    }
}
