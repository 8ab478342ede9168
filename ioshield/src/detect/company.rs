//! Whether a restricted writer has company on its disk: other processes that write there.
//!
//! While they do, its `memory.high` is tightened (`config::MemoryHigh::beside_others`). The
//! writeback of its dirty pages holds ext4's journal handle while iocost makes each bio wait for
//! the writer's share, and every other process that needs the journal (an `fdatasync`, a new
//! file, an mtime update) waits for that handle: the fewer contiguous dirty pages the writer
//! has, the shorter the wait (docs/bench/commit-pause.md). Alone, it keeps the larger
//! `memory.high`, which lets it write faster (docs/bench/lone-writer.md). So does a writer the
//! tighter size starves: one that leaves its disk idle under it ([`Starving`]).
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
    /// Others write beside it, but the tighter size left its disk idle ([`Starving`], `why`):
    /// the configured size stands.
    Starved { why: String },
    /// Not ioshield's to change: a size was configured or `memory.high` is off, or the disk's
    /// speed is not known (the speed probe of such a disk was measured with the larger size,
    /// and changes it in its steps).
    Unchanged,
}

impl Company {
    /// The clause a retune's reason ends with, if any.
    pub fn clause(&self) -> Option<&str> {
        match self {
            Company::Beside { why, .. } | Company::Starved { why } => Some(why),
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

/// The share of its speed under which a disk, held beside others at the tighter size, counts as
/// starved by it.
pub const STARVED_SHARE: f64 = 0.6;
/// Samples in a row (about seconds) a starved disk takes to tell: the restriction's first ones
/// write the backlog it began with.
pub const STARVED_SAMPLES: u32 = 3;

/// Whether a writer held at the tighter `memory.high` beside others leaves its disk idle. The
/// tighter size shortens the others' pauses only while the writer's writeback is what the disk
/// does; under it on 6.12 a copy dirtied 12 MB/s for the 25 MB/s disk (0.48x of its unmitigated
/// speed) and the committing load paused no shorter than under 32 MiB (0.26 s either way, the
/// copy at 0.80x there), while on 6.1 the copy kept the disk busy at 8 MiB (1.03x) and the
/// commit pause fell from 0.23 to 0.06 s (docs/bench/starved.md). Once starved, the writer keeps
/// the configured size for the rest of its restriction: each change of `memory.high` is a
/// retune, and lowered below what its cgroup holds the daemon would reclaim the difference.
#[derive(Debug, Default)]
pub struct Starving {
    /// The disk's write rate over the latest sample, bytes per second.
    completed: Option<f64>,
    /// Samples in a row that the disk wrote under [`STARVED_SHARE`] of its speed while the
    /// writer was held at the tighter size and dirtying.
    low: u32,
    /// Why the writer was found starved, once it was.
    starved: Option<String>,
}

impl Starving {
    /// The disk wrote `bytes` over `seconds`.
    pub fn sampled(&mut self, bytes: u64, seconds: f64) {
        self.completed = (seconds > 0.0).then(|| bytes as f64 / seconds);
    }

    /// One held tick: whether the writer is held at the tighter size (`tight`, in bytes), it
    /// dirties `dirtying` and the disk is judged at `bw`. A writer that stopped dirtying (under
    /// a quarter of the disk's speed) leaves the disk idle by itself, not starved.
    pub fn judge(&mut self, tight: Option<u64>, dirtying: f64, bw: f64) {
        let (Some(bytes), Some(completed), None) = (tight, self.completed, &self.starved) else {
            return;
        };
        if completed < STARVED_SHARE * bw && dirtying >= 0.25 * bw {
            self.low += 1;
        } else {
            self.low = 0;
        }
        if self.low >= STARVED_SAMPLES {
            self.starved = Some(format!(
                "others write beside it, but at {}M its disk wrote {} of its {}: memory.high \
                 as for a writer alone",
                bytes >> 20,
                show_rate(completed),
                show_rate(bw)
            ));
        }
    }

    /// What `company` makes of the writer's memory.high once it was found starved.
    pub fn apply(&self, company: Company) -> Company {
        match (company, &self.starved) {
            (Company::Beside { .. }, Some(why)) => Company::Starved { why: why.clone() },
            (company, _) => company,
        }
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

    /// Three samples in a row under 0.6 of the disk's speed while held tight and dirtying: the
    /// configured size from then on, for good; a writer that stopped dirtying is not starved.
    #[test]
    fn a_writer_the_tighter_size_starves_keeps_the_configured_size() {
        let beside = || judge(MemoryHigh::Auto, known(25e6), 41e3);
        let mut s = Starving::default();
        let tight = Some(8 << 20);
        let tick = |s: &mut Starving, completed: u64, dirtying: f64| {
            s.sampled(completed, 1.0);
            s.judge(tight, dirtying, 25e6);
        };
        // The backlog it began with keeps the disk busy; then two idle seconds, a busy one.
        for completed in [25_000_000, 12_000_000, 12_000_000, 20_000_000] {
            tick(&mut s, completed, 12e6);
        }
        assert!(matches!(s.apply(beside()), Company::Beside { .. }));
        // Stopped dirtying: not starved, however idle the disk.
        for _ in 0..5 {
            tick(&mut s, 1_000_000, 2e6);
        }
        assert!(matches!(s.apply(beside()), Company::Beside { .. }));
        // Not held tight (alone, or lightened): nothing is judged.
        for _ in 0..5 {
            s.sampled(12_000_000, 1.0);
            s.judge(None, 12e6, 25e6);
        }
        assert!(matches!(s.apply(beside()), Company::Beside { .. }));
        for _ in 0..3 {
            tick(&mut s, 12_000_000, 12e6);
        }
        let starved = s.apply(beside());
        assert_eq!(
            starved.clause(),
            Some(
                "others write beside it, but at 8M its disk wrote 12.0 MB/s of its 25.0 MB/s: \
                 memory.high as for a writer alone"
            )
        );
        // For good, busy disk or not; alone stays alone.
        tick(&mut s, 25_000_000, 25e6);
        assert!(matches!(s.apply(beside()), Company::Starved { .. }));
        assert_eq!(s.apply(Company::Alone), Company::Alone);
    }
}
