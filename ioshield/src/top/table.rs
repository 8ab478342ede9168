//! The human-readable `top` table. Rates in MB/s (10^6 bytes), like dd reports them.
use std::fmt::Write as _;

use super::report::{ProcessRow, Report};
use crate::display::printable;

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

/// What `top` prints per window, apart from the rows.
pub struct Layout {
    pub rows: usize,
    /// The full command line instead of the process name (`-c`).
    pub cmdline: bool,
    /// Rows were filtered (`-p`, `-u`, `-o`): an empty table says so.
    pub filtered: bool,
}

/// The lines above the table: page-cache state against the kernel's thresholds, each disk's
/// write and dirty rates, lost events.
pub fn summary(r: &Report) -> Vec<String> {
    let d = &r.dirty;
    let mut lines = vec![format!(
        "ioshield top {}: {:.1} s window | dirty {} (background at {}, throttled at {}) | writeback {}",
        r.time,
        r.interval_secs,
        size(d.dirty_bytes),
        size(d.background_threshold_bytes),
        size(d.dirty_threshold_bytes),
        size(d.writeback_bytes),
    )];
    for dev in &r.devices {
        lines.push(format!(
            "  {:<12} disk writes {:>8.1} MB/s   dirtied {:>8.1} MB/s",
            dev.device,
            dev.write_bytes_per_sec / MB,
            dev.dirty_bytes_per_sec / MB
        ));
    }
    let lost = &r.probe.lost;
    if lost.counter_map_full + lost.lifecycle_events_dropped > 0 {
        lines.push(format!(
            "  warning: {} counter updates and {} process events lost (kernel maps full)",
            lost.counter_map_full, lost.lifecycle_events_dropped
        ));
    }
    lines
}

/// Said instead of an empty table.
pub fn nothing_dirtied(r: &Report, filtered: bool) -> String {
    if filtered {
        format!(
            "no process matching the filters dirtied the page cache in this {:.1} s window",
            r.interval_secs
        )
    } else {
        format!(
            "no process dirtied the page cache in this {:.1} s window",
            r.interval_secs
        )
    }
}

pub const HEADERS: [&str; 8] = [
    "PID",
    "USER",
    "DEVICE",
    "DIRTY MB/s",
    "TREE MB/s",
    "THROTTLED ms/s",
    "UNIT",
    "COMMAND",
];

/// One row's cells, in the order of [`HEADERS`].
pub fn cells(p: &ProcessRow, cmdline: bool) -> [String; 8] {
    let name = if cmdline { &p.cmdline } else { &p.comm };
    let command = if p.exited {
        format!("{} [exited]", printable(name))
    } else {
        printable(name)
    };
    [
        p.pid.to_string(),
        p.user.clone(),
        p.device.clone(),
        format!("{:.1}", p.dirty_bytes_per_sec / MB),
        format!("{:.1}", p.tree_dirty_bytes_per_sec / MB),
        format!("{:.0}", p.throttled_ms_per_sec),
        p.unit.as_deref().map_or_else(|| "-".into(), printable),
        command,
    ]
}

pub fn render(r: &Report, layout: &Layout) -> String {
    let mut out = String::new();
    for line in summary(r) {
        let _ = writeln!(out, "{line}");
    }
    if r.processes.is_empty() {
        let _ = writeln!(out, "{}", nothing_dirtied(r, layout.filtered));
        return out;
    }
    let h = HEADERS;
    let _ = writeln!(
        out,
        "{:>8} {:<10} {:<12} {:>10} {:>10} {:>14} {:<24} {}",
        h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
    );
    for p in r.processes.iter().take(layout.rows) {
        let c = cells(p, layout.cmdline);
        // The command goes last, so a full command line (-c) is never cut.
        let _ = writeln!(
            out,
            "{:>8} {:<10.10} {:<12} {:>10} {:>10} {:>14} {:<24.24} {}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
        );
    }
    if r.processes.len() > layout.rows {
        let _ = writeln!(
            out,
            "  ... {} more rows (--rows)",
            r.processes.len() - layout.rows
        );
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
