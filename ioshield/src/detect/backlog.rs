//! Each disk's part of the machine's dirty and writeback memory, for the backlog trigger.
//!
//! The kernel's per-disk figure cannot be used: before 6.10 debugfs counts only the root
//! cgroup's writeback there, which reads near zero when every process lives in a child cgroup
//! (bench on 6.1: 200 MB dirty, the trigger never fired). The machine's whole figure, used
//! instead until stop 51, counts every disk's backlog against each: a copy to a slow USB stick
//! (700 MB dirty there) made a download of 10 MB/s to the fast system disk, never measured and
//! so judged at the assumed 25 MB/s, look like one whose backlog "would take 28 s to flush",
//! and its restriction paused it 2.1 s on 6.12 (docs/bench/stick.md).
//!
//! So each disk keeps what was dirtied on it (the kernel side's per-process counts) less what
//! it wrote (its own counters), between nothing and the machine's figure. Writes that were
//! never dirtied (the journal, direct I/O) make it low, pages dirtied and then deleted
//! unwritten make it high; the bounds keep either from lasting: it is nothing once the disk
//! writes more than is dirtied on it, and at most what the machine holds.
use std::collections::HashMap;

use crate::{model::sample::Sample, system::devices::DevId};

#[derive(Debug, Default)]
pub struct Backlogs {
    bytes: HashMap<DevId, f64>,
}

impl Backlogs {
    /// Moves each disk's part by a sample's dirtying and writing.
    pub fn observe(&mut self, sample: &Sample) {
        let machine = (sample.dirty.dirty_bytes + sample.dirty.writeback_bytes) as f64;
        let mut dirtied: HashMap<DevId, u64> = HashMap::new();
        for ((_, disk), delta) in &sample.writes {
            *dirtied.entry(disk.id).or_default() += delta.dirtied_bytes;
        }
        for id in dirtied.keys() {
            self.bytes.entry(*id).or_default();
        }
        self.bytes.retain(|id, part| {
            let added = dirtied.get(id).copied().unwrap_or(0) as f64;
            let written = sample.disks.get(id).map_or(0, |d| d.written) as f64;
            *part = (*part + added - written).clamp(0.0, machine);
            *part > 0.0
        });
    }

    /// The disk's part of the machine's backlog, bytes.
    pub fn of(&self, id: DevId) -> f64 {
        self.bytes.get(&id).copied().unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        model::sample::{DiskDelta, WriteDelta},
        system::{devices::Disk, vmstat::DirtyState},
    };

    const MB: u64 = 1_000_000;

    fn disk(minor: u32) -> Disk {
        Disk {
            id: DevId { major: 254, minor },
            name: Some(format!("vd{minor}")),
        }
    }

    /// A sample in which each (disk, dirtied, written) happened, the machine holding `machine`.
    fn sample(machine: u64, disks: &[(u32, u64, u64)]) -> Sample {
        let mut s = Sample {
            dirty: DirtyState {
                dirty_bytes: machine,
                ..DirtyState::default()
            },
            ..Sample::default()
        };
        for (i, &(minor, dirtied, written)) in disks.iter().enumerate() {
            s.writes.insert(
                (100 + i as u32, disk(minor)),
                WriteDelta {
                    dirtied_bytes: dirtied,
                    ..WriteDelta::default()
                },
            );
            s.disks.insert(
                disk(minor).id,
                DiskDelta {
                    written,
                    ..DiskDelta::default()
                },
            );
        }
        s
    }

    /// The stick fills the page cache, the system disk writes its download as it comes: the
    /// machine's backlog is the stick's.
    #[test]
    fn a_slow_disks_backlog_is_not_a_fast_ones() {
        let (stick, system) = (disk(0), disk(32));
        let mut b = Backlogs::default();
        let mut machine = 0;
        for _ in 0..10 {
            machine += 70 * MB;
            b.observe(&sample(
                machine,
                &[(0, 80 * MB, 10 * MB), (32, 10 * MB, 10 * MB)],
            ));
        }
        assert_eq!(b.of(stick.id), 700e6);
        assert_eq!(b.of(system.id), 0.0);
    }

    #[test]
    fn never_under_nothing_nor_over_what_the_machine_holds() {
        let id = disk(0).id;
        let mut b = Backlogs::default();
        // The journal's writes, never dirtied: nothing, not less.
        b.observe(&sample(5 * MB, &[(0, 0, 3 * MB)]));
        assert_eq!(b.of(id), 0.0);
        b.observe(&sample(50 * MB, &[(0, 40 * MB, 0)]));
        assert_eq!(b.of(id), 40e6);
        // Files deleted before they were written: the machine's figure falls, and so does it.
        b.observe(&sample(10 * MB, &[(0, 0, 0)]));
        assert_eq!(b.of(id), 10e6);
        // A disk that wrote it all and is idle is forgotten.
        b.observe(&sample(0, &[(0, 0, 10 * MB)]));
        assert_eq!(b.of(id), 0.0);
        assert!(b.bytes.is_empty());
    }
}
