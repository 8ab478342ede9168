//! Whether a restricted writer has company on its disk: other processes that write there.
//!
//! While they do, its `memory.high` is tightened (`config::MemoryHigh::beside_others`). The
//! writeback of its dirty pages holds ext4's journal handle while iocost makes each bio wait for
//! the writer's share, and every other process that needs the journal (an `fdatasync`, a new
//! file, an mtime update) waits for that handle: the fewer contiguous dirty pages the writer
//! has, the shorter the wait (docs/bench/commit-pause.md). Alone, it keeps the larger
//! `memory.high`, which lets it write faster (docs/bench/lone-writer.md).
use std::collections::HashMap;

use crate::{config::MemoryHigh, detect::bandwidth::Estimate, display::show_rate};

/// The bytes per second other processes dirty on the disk, from each process's own smoothed
/// rate there (`rates`, every writer, excluded ones too: they are the ones to protect). Not
/// counted: the restriction's own processes (`inside`), and kernel threads or processes no
/// longer known (`user_process` false): jbd2 dirties the filesystem's metadata on behalf of
/// the writer's own allocations.
pub fn others_rate(
    rates: &HashMap<u32, f64>,
    inside: impl Fn(u32) -> bool,
    user_process: impl Fn(u32) -> bool,
) -> f64 {
    rates
        .iter()
        .filter(|(pid, _)| !inside(**pid) && user_process(**pid))
        .map(|(_, rate)| rate)
        .sum()
}

/// What the writers beside a restriction make of its `memory.high`.
#[derive(Debug, PartialEq)]
pub enum Company {
    /// Others write beside it: `memory.high` at most `bytes`; `why` says so in the log.
    Beside { bytes: u64, why: String },
    /// Nobody else writes there: the configured size stands, for a writer alone.
    Alone,
    /// Not ioshield's to change: a size was configured or `memory.high` is off, or the disk's
    /// speed is not known and the writer not held at most at the judged speed or a write
    /// limit (the speed probe's forced rates need the larger size to be used).
    Unchanged,
}

impl Company {
    /// The clause a retune's reason ends with, if any.
    pub fn clause(&self) -> Option<&str> {
        match self {
            Company::Beside { why, .. } => Some(why),
            Company::Alone => Some("alone on the disk"),
            Company::Unchanged => None,
        }
    }
}

/// How `memory_high` applies while others write `others` bytes per second beside a restriction
/// on a disk judged by `estimate`.
pub fn judge(memory_high: MemoryHigh, estimate: Estimate, others: f64) -> Company {
    let Some(bytes) = memory_high
        .beside_others(estimate.bytes_per_sec)
        .filter(|_| estimate.capacity)
    else {
        return Company::Unchanged;
    };
    if others <= 0.0 {
        return Company::Alone;
    }
    Company::Beside {
        bytes,
        why: format!(
            "others write {} beside it: memory.high at most {}M",
            show_rate(others),
            bytes >> 20
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(bytes_per_sec: f64) -> Estimate {
        Estimate {
            bytes_per_sec,
            source: "configured",
            measured: true,
            capacity: true,
        }
    }

    #[test]
    fn only_user_processes_outside_the_restriction_count() {
        let rates = HashMap::from([(10, 30e6), (11, 5e6), (20, 41e3), (2, 9e3), (30, 2e3)]);
        let inside = |pid| pid == 10 || pid == 11;
        let user = |pid| pid != 2;
        assert_eq!(others_rate(&rates, inside, user), 43e3);
        assert_eq!(others_rate(&rates, |_| true, user), 0.0);
    }

    #[test]
    fn tightened_only_with_company_on_a_disk_of_known_speed() {
        let auto = MemoryHigh::Auto;
        let beside = judge(auto, known(30e6), 41e3);
        assert_eq!(
            beside,
            Company::Beside {
                bytes: MemoryHigh::BESIDE_OTHERS_FLOOR,
                why: "others write 41 kB/s beside it: memory.high at most 8M".into()
            }
        );
        assert_eq!(
            beside.clause(),
            Some("others write 41 kB/s beside it: memory.high at most 8M")
        );
        // A fast disk: a quarter of a second of it.
        assert!(matches!(
            judge(auto, known(400e6), 1e4),
            Company::Beside {
                bytes: 100_000_000,
                ..
            }
        ));
        assert_eq!(judge(auto, known(30e6), 0.0), Company::Alone);
        assert_eq!(Company::Alone.clause(), Some("alone on the disk"));
        assert_eq!(judge(auto, Estimate::ASSUMED, 41e3), Company::Unchanged);
        let lower_bound = Estimate {
            capacity: false,
            ..known(30e6)
        };
        assert_eq!(judge(auto, lower_bound, 41e3), Company::Unchanged);
        assert_eq!(
            judge(MemoryHigh::Off, known(30e6), 41e3),
            Company::Unchanged
        );
        assert_eq!(
            judge(MemoryHigh::Bytes(64 << 20), known(30e6), 0.0),
            Company::Unchanged
        );
        assert_eq!(Company::Unchanged.clause(), None);
    }
}
