//! What each disk has done, from /proc/diskstats: bytes written (sectors are always 512 bytes
//! there), the time writes spent in flight, and the requests in flight now. Busy time (`io_ticks`) is not read: it misled
//! both kernels of the test bed (`detect::bandwidth`).
use std::collections::HashMap;

use super::devices::DevId;

/// Cumulative counters of one disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskCounters {
    pub written_bytes: u64,
    /// Milliseconds write requests spent in flight, summed over requests: over an interval, the
    /// average number of writes queued or in service.
    pub write_ms: u64,
    /// Requests (reads and writes) in flight at the reading.
    pub in_flight: u64,
}

pub fn read() -> HashMap<DevId, DiskCounters> {
    let text = std::fs::read_to_string("/proc/diskstats").unwrap_or_default();
    parse(&text)
}

fn parse(text: &str) -> HashMap<DevId, DiskCounters> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let id = DevId {
                major: f.first()?.parse().ok()?,
                minor: f.get(1)?.parse().ok()?,
            };
            let sectors: u64 = f.get(9)?.parse().ok()?;
            let write_ms: u64 = f.get(10)?.parse().ok()?;
            let in_flight: u64 = f.get(11)?.parse().ok()?;
            Some((
                id,
                DiskCounters {
                    written_bytes: sectors * 512,
                    write_ms,
                    in_flight,
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_sectors_written_write_time_and_requests_in_flight() {
        let m = super::parse(" 254       0 vda 100 0 800 10 50 0 2048 30 3 40 45 0 0 0 0\n");
        let c = m[&super::DevId {
            major: 254,
            minor: 0,
        }];
        assert_eq!(c.written_bytes, 2048 * 512);
        assert_eq!(c.write_ms, 30);
        assert_eq!(c.in_flight, 3);
    }
}
