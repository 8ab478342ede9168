//! Reads the per-CPU counter map and turns cumulative kernel counters into per-tick deltas.
use std::collections::{HashMap, HashSet};

use anyhow::{Context as _, Result};
use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray, PerCpuHashMap},
};
use ioshield_common::{CounterKey, Counters, names::map, stat};

use crate::{
    model::sample::{Lifecycle, Lost, WriteDelta, Writes},
    system::{
        devices::{DevId, Devices},
        procfs,
    },
};

/// Every this many reads, keys of processes that vanished without an exit event (ring buffer
/// overflow, or started before we attached) are removed so the map cannot fill up.
const SWEEP_EVERY: u32 = 30;

pub struct CounterReader {
    map: PerCpuHashMap<MapData, CounterKey, Counters>,
    stats: PerCpuArray<MapData, u64>,
    previous: HashMap<CounterKey, Counters>,
    previous_stats: [u64; stat::COUNT as usize],
    reads: u32,
}

impl CounterReader {
    pub fn new(ebpf: &mut Ebpf) -> Result<Self> {
        let map = PerCpuHashMap::try_from(
            ebpf.take_map(map::COUNTERS)
                .with_context(|| format!("map {}", map::COUNTERS))?,
        )?;
        let stats = PerCpuArray::try_from(
            ebpf.take_map(map::STATS)
                .with_context(|| format!("map {}", map::STATS))?,
        )?;
        Ok(Self {
            map,
            stats,
            previous: HashMap::new(),
            previous_stats: [0; stat::COUNT as usize],
            reads: 0,
        })
    }

    pub fn read(&mut self, events: &[Lifecycle], devices: &mut Devices) -> Result<(Writes, Lost)> {
        let mut writes = Writes::new();
        let mut current = HashMap::with_capacity(self.previous.len());
        for entry in self.map.iter() {
            let (key, per_cpu) = entry.context("reading the COUNTERS map")?;
            let total = per_cpu.iter().fold(Counters::default(), |mut acc, c| {
                acc.dirtied_bytes += c.dirtied_bytes;
                acc.dirtied_events += c.dirtied_events;
                acc.throttle_pauses += c.throttle_pauses;
                acc.throttle_ms += c.throttle_ms;
                acc.files_started += c.files_started;
                acc
            });
            // Less than last time: the key was evicted from the LRU map and counts anew.
            let before = self
                .previous
                .get(&key)
                .copied()
                .filter(|b| {
                    total.dirtied_bytes >= b.dirtied_bytes && total.throttle_ms >= b.throttle_ms
                })
                .unwrap_or_default();
            let delta = WriteDelta {
                dirtied_bytes: total.dirtied_bytes.saturating_sub(before.dirtied_bytes),
                throttle_pauses: total.throttle_pauses.saturating_sub(before.throttle_pauses),
                throttle_ms: total.throttle_ms.saturating_sub(before.throttle_ms),
                files_started: total.files_started.saturating_sub(before.files_started),
            };
            current.insert(key, total);
            if delta.is_zero() {
                continue;
            }
            let disk = devices.resolve(DevId::from_kernel(key.dev));
            writes.entry((key.tgid, disk)).or_default().add(&delta);
        }
        self.previous = current;
        self.forget(events);
        Ok((writes, self.lost()?))
    }

    /// The devices (as the kernel side counts them) written since the last sweep.
    pub fn raw_devs(&self) -> HashSet<u32> {
        self.previous
            .keys()
            .map(|k| k.dev)
            .filter(|&d| d != 0)
            .collect()
    }

    fn forget(&mut self, events: &[Lifecycle]) {
        self.reads += 1;
        let exited: HashSet<u32> = events
            .iter()
            .filter_map(|e| match e {
                Lifecycle::Exit { pid, .. } => Some(*pid),
                _ => None,
            })
            .collect();
        let sweep = self.reads.is_multiple_of(SWEEP_EVERY);
        let gone: Vec<CounterKey> = self
            .previous
            .keys()
            .filter(|k| exited.contains(&k.tgid) || (sweep && !procfs::alive(k.tgid)))
            .copied()
            .collect();
        for key in gone {
            // Already gone from the map is fine; anything else only delays the clean-up.
            let _ = self.map.remove(&key);
            self.previous.remove(&key);
        }
    }

    fn lost(&mut self) -> Result<Lost> {
        let mut totals = [0u64; stat::COUNT as usize];
        for (i, slot) in totals.iter_mut().enumerate() {
            *slot = self
                .stats
                .get(&(i as u32), 0)
                .context("reading the STATS map")?
                .iter()
                .sum();
        }
        let delta = |i: u32| totals[i as usize].saturating_sub(self.previous_stats[i as usize]);
        let lost = Lost {
            counter_map_full: delta(stat::COUNTER_MAP_FULL),
            lifecycle_events_dropped: delta(stat::RINGBUF_DROPPED),
            bursts_dropped: delta(stat::BURST_DROPPED),
            kernel_reads_failed: delta(stat::READ_FAILED),
        };
        self.previous_stats = totals;
        Ok(lost)
    }
}
