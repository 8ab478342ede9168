//! The kernel's own write bandwidth estimate per device, from debugfs
//! (`/sys/kernel/debug/bdi/M:m/stats`).
use super::devices::DevId;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BdiStats {
    pub write_bandwidth: u64,
}

/// Whether the kernel offers per-BDI byte limits (`max_bytes`, `strict_limit`: 6.2 and later).
pub fn has_byte_limits(dev: DevId) -> bool {
    std::path::Path::new(&format!("/sys/class/bdi/{dev}/max_bytes")).exists()
}

pub fn stats(dev: DevId) -> Option<BdiStats> {
    let text = std::fs::read_to_string(format!("/sys/kernel/debug/bdi/{dev}/stats")).ok()?;
    parse(&text)
}

fn parse(text: &str) -> Option<BdiStats> {
    let kib = |key: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .map(|v| v * 1024)
    };
    Some(BdiStats {
        write_bandwidth: kib("BdiWriteBandwidth:")?,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_debugfs_stats() {
        let s = super::parse(
            "BdiWriteback:                8 kB\nBdiReclaimable:           4168 kB\n\
             BdiWriteBandwidth:       57928 kBps\n",
        )
        .unwrap();
        assert_eq!(s.write_bandwidth, 57928 * 1024);
        assert!(super::parse("nothing").is_none());
    }
}
