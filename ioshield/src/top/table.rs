//! The human-readable `top` table. Rates in MB/s (10^6 bytes), like dd reports them.
use std::fmt::Write as _;

use super::Report;

const MB: f64 = 1e6;

fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

pub fn render(r: &Report, rows: usize) -> String {
    let mut out = String::new();
    let d = &r.dirty;
    let _ = writeln!(
        out,
        "ioshield top: {:.1} s window | dirty {} (background at {}, throttled at {}) | writeback {}",
        r.interval_secs,
        size(d.dirty_bytes),
        size(d.background_threshold_bytes),
        size(d.dirty_threshold_bytes),
        size(d.writeback_bytes),
    );
    for dev in &r.devices {
        let _ = writeln!(
            out,
            "  {:<12} disk writes {:>8.1} MB/s   dirtied {:>8.1} MB/s",
            dev.device,
            dev.write_bytes_per_sec / MB,
            dev.dirty_bytes_per_sec / MB
        );
    }
    let lost = &r.probe.lost;
    if lost.counter_map_full + lost.lifecycle_events_dropped > 0 {
        let _ = writeln!(
            out,
            "  warning: {} counter updates and {} process events lost (kernel maps full)",
            lost.counter_map_full, lost.lifecycle_events_dropped
        );
    }
    let _ = writeln!(
        out,
        "{:>8} {:<10} {:<24} {:<12} {:>10} {:>10} {:>14}",
        "PID", "USER", "COMMAND", "DEVICE", "DIRTY MB/s", "TREE MB/s", "THROTTLED ms/s"
    );
    for p in r.processes.iter().take(rows) {
        let comm = if p.exited {
            format!("{} [exited]", p.comm)
        } else {
            p.comm.clone()
        };
        let _ = writeln!(
            out,
            "{:>8} {:<10.10} {:<24.24} {:<12} {:>10.1} {:>10.1} {:>14.0}",
            p.pid,
            p.user,
            comm,
            p.device,
            p.dirty_bytes_per_sec / MB,
            p.tree_dirty_bytes_per_sec / MB,
            p.throttled_ms_per_sec
        );
    }
    if r.processes.len() > rows {
        let _ = writeln!(out, "  ... {} more rows (--rows)", r.processes.len() - rows);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_are_binary_units() {
        assert_eq!(super::size(512), "512.0 B");
        assert_eq!(super::size(3 * 1024 * 1024), "3.0 MiB");
    }
}
