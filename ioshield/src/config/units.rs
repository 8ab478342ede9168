//! Values as people write them in the config: durations (`8s`, `500ms`) and bandwidths
//! (`30MB/s`, `1.5GiB/s`).
use std::time::Duration;

/// `2s`, `500ms`, `1m`; a bare number means seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => Ok(Duration::from_secs_f64(secs)),
        Ok(_) => Err(format!("`{s}` is not a positive duration")),
        Err(_) => humantime::parse_duration(s.trim())
            .map_err(|_| format!("`{s}` is not a duration like \"1s\" or \"500ms\"")),
    }
}

pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("`{s}` must be longer than zero"));
    }
    Ok(d)
}

/// Bytes per second; decimal and binary prefixes both accepted, `/s` optional.
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
    Ok(bytes as u64)
}

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
        assert!(parse_positive_duration("0s").is_err());
    }
}
