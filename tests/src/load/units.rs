//! Durations and sizes as people type them on a command line.
use std::time::Duration;

/// `50`, `50s`, `500ms`, `2m`, `1.5s`; a bare number means seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration like `50s` or `500ms`"))?;
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("`{s}` has an unknown unit (use ms, s, m or h)")),
    };
    Ok(Duration::from_secs_f64(value * scale))
}

/// `1048576`, `512K`, `1M`, `1MiB`, `2G`: binary multiples, as `dd` reads them.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size like `1MiB` or `512K`"))?;
    let scale: u64 = match unit.trim().trim_end_matches("iB").trim_end_matches('B') {
        "" => 1,
        "K" | "k" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return Err(format!("`{s}` has an unknown unit (use K, M or G)")),
    };
    value
        .checked_mul(scale)
        .ok_or_else(|| format!("`{s}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("50").unwrap(), Duration::from_secs(50));
        assert_eq!(parse_duration("50s").unwrap(), Duration::from_secs(50));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5y").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_size("512K").unwrap(), 512 << 10);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert!(parse_size("1T").is_err());
        assert!(parse_size("lots").is_err());
    }
}
