//! The kernel's counts per journal (ext4's jbd2): the long commits (an `fsync` on that
//! filesystem waited at least [`LONG_COMMIT`] for each), and the blocks logged.
use std::{collections::HashMap, time::Duration};

use anyhow::{Context as _, Result};
use aya::{
    Ebpf,
    maps::{HashMap as BpfHashMap, MapData},
};

/// The shortest commit counted: a pause a person at an interactive program notices, and far
/// above what commits take without one (4-5 ms on an idle filesystem in the host test, 6-16 ms
/// on average on the bed's 30 MB/s disk while a writer is held, stop 58). Under the speed
/// probe's forced rates commits took up to 312 ms on the bed's 150 MB/s disk and up to 308 ms
/// on its 30 MB/s disk (stop 59, docs/bench/history.md).
pub const LONG_COMMIT: Duration = Duration::from_millis(120);

/// Reads one of the cumulative counts (`LONG_COMMITS`, `LOGGED_BLOCKS`) each tick
/// and hands on what is new.
pub(super) struct JournalCounts {
    map: BpfHashMap<MapData, u32, u64>,
    seen: HashMap<u32, u64>,
}

impl JournalCounts {
    pub(super) fn new(ebpf: &mut Ebpf, name: &str) -> Result<Self> {
        let map = ebpf.take_map(name).with_context(|| format!("map {name}"))?;
        Ok(Self {
            map: BpfHashMap::try_from(map)?,
            seen: HashMap::new(),
        })
    }

    /// What was counted since the previous call, per filesystem device as the kernel counts it.
    pub(super) fn read(&mut self) -> Vec<(u32, u64)> {
        let mut new = Vec::new();
        for (dev, count) in self.map.iter().flatten() {
            let before = self.seen.insert(dev, count).unwrap_or(0);
            if count > before {
                new.push((dev, count - before));
            }
        }
        new
    }
}
