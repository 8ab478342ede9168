//! Bytes each disk has written, from /proc/diskstats (sectors are always 512 bytes there).
use std::collections::HashMap;

use super::devices::DevId;

pub fn bytes_written() -> HashMap<DevId, u64> {
    let text = std::fs::read_to_string("/proc/diskstats").unwrap_or_default();
    parse(&text)
}

fn parse(text: &str) -> HashMap<DevId, u64> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let id = DevId {
                major: f.first()?.parse().ok()?,
                minor: f.get(1)?.parse().ok()?,
            };
            let sectors: u64 = f.get(9)?.parse().ok()?;
            Some((id, sectors * 512))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_sectors_written() {
        let m = super::parse(" 254       0 vda 100 0 800 10 50 0 2048 30 0 40 40 0 0 0 0\n");
        assert_eq!(
            m[&super::DevId {
                major: 254,
                minor: 0
            }],
            2048 * 512
        );
    }
}
