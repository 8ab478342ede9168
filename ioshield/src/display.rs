//! How values are shown to people in logs, `status` and `top`.

/// `30.0 MB/s`.
pub fn show_rate(bytes_per_sec: f64) -> String {
    format!("{}/s", scaled(bytes_per_sec))
}

/// `12.5 MB`.
pub fn show_bytes(bytes: u64) -> String {
    scaled(bytes as f64)
}

/// Decimal units, as disks and `dd` count.
fn scaled(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2} GB", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1} MB", v / 1e6)
    } else {
        format!("{:.0} kB", v / 1e3)
    }
}

/// A process name as it may be printed on a terminal: any program can name itself with escape
/// sequences, which would otherwise reach the reader's terminal raw.
pub fn printable(name: &str) -> String {
    name.chars()
        .flat_map(|c| -> Box<dyn Iterator<Item = char>> {
            if c.is_control() {
                Box::new(c.escape_default())
            } else {
                Box::new(std::iter::once(c))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(show_rate(30e6), "30.0 MB/s");
        assert_eq!(show_rate(1.5e9), "1.50 GB/s");
        assert_eq!(show_rate(2e3), "2 kB/s");
        assert_eq!(show_bytes(7_500_000), "7.5 MB");
    }

    #[test]
    fn escape_sequences_are_shown_not_sent() {
        assert_eq!(printable("dd"), "dd");
        assert_eq!(printable("x\u{1b}[2Jy"), "x\\u{1b}[2Jy");
        assert_eq!(printable("a\tb"), "a\\tb");
        assert_eq!(printable("naïve"), "naïve");
    }
}
