//! The smoke run's verdict (tests/vm/smoke.sh): the BPF programs load on the guest's kernel and
//! count the offender's dirtied bytes, as the kernel's own accounting does.
use std::{fs, path::Path};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

/// The smoke run passes when `top` printed its samples and counted the offender's dirtied bytes
/// on the data disk in every one of them in which that disk took file data, and at a rate the
/// kernel's own accounting agrees with.
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
    let per_sample = sample_rates(&samples, pid, &data_dev);
    let rates: Vec<f64> = per_sample.iter().map(|&(offender, _)| offender).collect();
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
    let missed = missed(&per_sample);
    if !missed.is_empty() {
        bail!(
            "{msg}; the offender was not counted in {}",
            missed.join(", ")
        );
    }
    let ratio = mean / kernel_rate.max(1.0);
    if counted == 0 || !(0.5..=1.5).contains(&ratio) {
        bail!("{msg}; counted/kernel = {ratio:.2}, want 0.5-1.5");
    }
    Ok(msg)
}

/// Samples that should have counted the offender and did not, from `(offender, disk)` rates.
/// The offender itself can sit a whole sample in the very flush stall the bed reproduces (seen
/// on 6.12: nobody dirtied a page for 2 s), so a sample that took no file data on the data disk
/// need not count it; any other must, as the offender is the only process writing files there.
fn missed(per_sample: &[(f64, f64)]) -> Vec<String> {
    per_sample
        .iter()
        .enumerate()
        .filter(|(_, (offender, disk))| *disk >= QUIET_DISK_B_S && *offender <= 0.0)
        .map(|(i, (_, disk))| {
            format!(
                "sample {} ({:.1} MB/s dirtied by others)",
                i + 1,
                disk / 1e6
            )
        })
        .collect()
}

/// Page dirtying on the data disk below this in a sample is not file data: the ext4 journal
/// dirties a few metadata blocks (kB/s) even while the offender sits in the stall, and the
/// offender writes at the disk's 30 MB/s or faster.
const QUIET_DISK_B_S: f64 = 1e6;

/// Per sample of `top --json`: bytes per second `pid` dirtied on `device`, and all processes.
fn sample_rates(samples: &[Value], pid: u64, device: &str) -> Vec<(f64, f64)> {
    samples
        .iter()
        .map(|s| {
            let on_device = s["processes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["device"] == device);
            let (mut offender, mut all) = (0.0, 0.0);
            for p in on_device {
                let rate = p["dirty_bytes_per_sec"].as_f64().unwrap_or(0.0);
                all += rate;
                if p["pid"].as_u64() == Some(pid) {
                    offender += rate;
                }
            }
            (offender, all)
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_per_sample_on_the_data_disk() {
        let samples: Vec<Value> = [
            r#"{"processes":[{"pid":7,"device":"/dev/vda","dirty_bytes_per_sec":3e7},
                {"pid":7,"device":"/dev/vdb","dirty_bytes_per_sec":5.0}]}"#,
            r#"{"processes":[{"pid":9,"device":"/dev/vda","dirty_bytes_per_sec":4096.0}]}"#,
            r#"{"processes":[]}"#,
        ]
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
        assert_eq!(
            sample_rates(&samples, 7, "/dev/vda"),
            [(3e7, 3e7), (0.0, 4096.0), (0.0, 0.0)]
        );
    }

    #[test]
    fn only_a_sample_without_file_data_may_miss_the_offender() {
        assert!(missed(&[(3e7, 3e7), (0.0, 4096.0), (0.0, 0.0)]).is_empty());
        assert_eq!(
            missed(&[(3e7, 3e7), (0.0, 2e7)]),
            ["sample 2 (20.0 MB/s dirtied by others)"]
        );
    }
}
