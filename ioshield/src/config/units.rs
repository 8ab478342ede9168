//! Values as people write them in the config: durations (`8s`, `500ms`) and bandwidths
//! (`30MB/s`, `1.5GiB/s`).
use std::time::Duration;

/// `2s`, `500ms`, `1m`; a bare number means seconds. Values too long for a `Duration` are
/// errors, not panics: a config reload must never kill the daemon.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => {
            Duration::try_from_secs_f64(secs).map_err(|_| format!("`{s}` is too long"))
        }
        Ok(_) => Err(format!("`{s}` is not a positive duration")),
        Err(_) => humantime::parse_duration(s.trim()).map_err(|e| match e {
            humantime::DurationError::NumberOverflow => format!("`{s}` is too long"),
            _ => format!("`{s}` is not a duration like \"1s\" or \"500ms\""),
        }),
    }
}

/// A duration in `min..=max`: the range a setting makes sense in (a 1 ns tick is a busy loop).
pub fn parse_duration_within(s: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let show = |d: Duration| humantime::format_duration(d).to_string();
    let range = format!("between {} and {}", show(min), show(max));
    match parse_duration(s) {
        Ok(d) if (min..=max).contains(&d) => Ok(d),
        Ok(_) => Err(format!("`{s}` is not {range}")),
        Err(e) if e.ends_with("too long") => Err(format!("`{s}` is not {range}")),
        Err(e) => Err(e),
    }
}

/// Bytes (per second); decimal and binary prefixes both accepted, `/s` optional; at least 1.
pub fn parse_bandwidth(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t.strip_suffix("/s").unwrap_or(t).trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a bandwidth like \"30MB/s\""))?;
    let scale = match unit.trim() {
        "" | "B" => 1.0,
        "k" | "kB" | "KB" => 1e3,
        "M" | "MB" => 1e6,
        "G" | "GB" => 1e9,
        "K" | "KiB" => 1024.0,
        "Mi" | "MiB" => 1024.0 * 1024.0,
        "Gi" | "GiB" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "`{s}`: unknown unit `{other}` (use B, kB, MB, GB, KiB, MiB, GiB)"
            ));
        }
    };
    let bytes = value * scale;
    if !bytes.is_finite() || bytes < 1.0 {
        return Err(format!("`{s}` must be more than zero"));
    }
    if bytes > MAX_BYTES as f64 {
        return Err(format!("`{s}` is more than 1 PB"));
    }
    Ok(bytes as u64)
}

/// Far above any disk's bandwidth or any machine's memory, and far below u64::MAX, so products
/// with it (a bandwidth times seconds) cannot overflow.
pub const MAX_BYTES: u64 = 1_000_000_000_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidths() {
        assert_eq!(parse_bandwidth("30MB/s").unwrap(), 30_000_000);
        assert_eq!(parse_bandwidth("1.5GiB/s").unwrap(), 1_610_612_736);
        assert_eq!(parse_bandwidth("512 KiB").unwrap(), 524_288);
        assert!(parse_bandwidth("0MB/s").is_err());
        assert!(parse_bandwidth("fast").is_err());
        assert!(parse_bandwidth("30 furlongs/s").is_err());
    }

    #[test]
    fn durations_and_rates() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("soon").is_err());
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        let (ms, day) = (Duration::from_millis(100), Duration::from_secs(86400));
        assert!(parse_duration_within("0s", ms, day).is_err());
        assert!(parse_duration_within("1ns", ms, day).is_err());
        assert_eq!(
            parse_duration_within("1d", ms, day).unwrap(),
            Duration::from_secs(86400)
        );
        // Too long for a Duration: errors, where they used to panic.
        for huge in [
            "1e20",
            "99999999999999999999",
            "99999999999999999999s",
            "1e308",
        ] {
            let e = parse_duration_within(huge, ms, day).unwrap_err();
            assert!(e.contains("between 100ms and 1day"), "{huge}: {e}");
            assert!(parse_duration(huge).is_err(), "{huge}");
        }
        assert!(parse_bandwidth("1e30").is_err());
        assert!(parse_bandwidth("99999999999999999999GB").is_err());
    }
}
