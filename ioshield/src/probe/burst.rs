//! The kernel's burst reports (a process dirtying faster than its disk writes), and the per-disk
//! limits the kernel checks them against.
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use aya::{
    Ebpf,
    maps::{Array, HashMap as BpfHashMap, MapData, RingBuf},
};
use ioshield_common::{BurstEvent, BurstLimit, names::map};
use tokio::io::{Interest, unix::AsyncFd};

use crate::system::devices::DevId;

/// One report: `pid` dirtied `bytes` on `dev` within `elapsed`, crossing the limit at `crossed`.
#[derive(Clone, Debug, PartialEq)]
pub struct Burst {
    pub pid: u32,
    pub dev: DevId,
    pub bytes: u64,
    pub elapsed: Duration,
    pub crossed: Instant,
}

impl Burst {
    pub fn bytes_per_sec(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64().max(1e-3)
    }
}

/// Waits on the ring buffer; the daemon's loop owns it so that a report wakes the loop at once.
pub struct BurstReader {
    ring: AsyncFd<RingBuf<MapData>>,
}

impl BurstReader {
    pub(super) fn new(ebpf: &mut Ebpf) -> Result<Self> {
        let map = ebpf
            .take_map(map::BURSTS)
            .with_context(|| format!("map {}", map::BURSTS))?;
        let ring = RingBuf::try_from(map)?;
        // SAFETY: the ring buffer owns its map's fd, and the AsyncFd owns the ring buffer: the
        // fd stays open for as long as it is registered.
        let ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
            .map_err(|e| anyhow::anyhow!("polling the burst ring buffer: {e}"))?;
        Ok(Self { ring })
    }

    /// Every report queued, waiting for the first one.
    pub async fn next_batch(&mut self) -> Result<Vec<Burst>> {
        loop {
            let mut guard = self.ring.readable_mut().await?;
            let ring = guard.get_inner_mut();
            let mut out = Vec::new();
            let (now, mono) = (Instant::now(), monotonic_ns());
            while let Some(item) = ring.next() {
                if item.len() < size_of::<BurstEvent>() {
                    continue;
                }
                // SAFETY: the kernel side writes exactly one BurstEvent per record.
                let ev: BurstEvent = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
                out.push(Burst {
                    pid: ev.tgid,
                    dev: DevId::from_kernel(ev.dev),
                    bytes: ev.bytes,
                    elapsed: Duration::from_nanos(ev.elapsed_ns),
                    // `Instant` reads CLOCK_MONOTONIC too, the kernel's clock for BPF programs.
                    crossed: now
                        .checked_sub(Duration::from_nanos(mono.saturating_sub(ev.at_ns)))
                        .unwrap_or(now),
                });
            }
            guard.clear_ready();
            if !out.is_empty() {
                return Ok(out);
            }
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds, as `bpf_ktime_get_ns` counts.
fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        (t.tv_sec() as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.tv_nsec() as u64)
    })
}

/// Writes the limits into the kernel's map, only when they change.
pub(super) struct BurstLimits {
    map: BpfHashMap<MapData, u32, BurstLimit>,
    default: Array<MapData, BurstLimit>,
    written: HashMap<u32, BurstLimit>,
    default_written: Option<BurstLimit>,
}

impl BurstLimits {
    pub(super) fn new(ebpf: &mut Ebpf) -> Result<Self> {
        let map = ebpf
            .take_map(map::BURST_LIMITS)
            .with_context(|| format!("map {}", map::BURST_LIMITS))?;
        let default = ebpf
            .take_map(map::BURST_DEFAULT)
            .with_context(|| format!("map {}", map::BURST_DEFAULT))?;
        Ok(Self {
            map: BpfHashMap::try_from(map)?,
            default: Array::try_from(default)?,
            written: HashMap::new(),
            default_written: None,
        })
    }

    /// The limit of devices without one of their own.
    pub(super) fn set_default(&mut self, limit: BurstLimit) -> Result<()> {
        if self.default_written == Some(limit) {
            return Ok(());
        }
        self.default
            .set(0, limit, 0)
            .with_context(|| format!("{} entry", map::BURST_DEFAULT))?;
        tracing::debug!(
            "default burst limit: {} bytes in {} ms",
            limit.bytes,
            limit.window_ns / 1_000_000
        );
        self.default_written = Some(limit);
        Ok(())
    }

    /// `raw_dev` is the device as the kernel side counts it.
    pub(super) fn set(&mut self, raw_dev: u32, limit: BurstLimit) -> Result<()> {
        if self.written.get(&raw_dev) == Some(&limit) {
            return Ok(());
        }
        self.map
            .insert(raw_dev, limit, 0)
            .with_context(|| format!("{} entry for device {raw_dev}", map::BURST_LIMITS))?;
        tracing::debug!(
            "burst limit for device {raw_dev}: {} bytes in {} ms",
            limit.bytes,
            limit.window_ns / 1_000_000
        );
        self.written.insert(raw_dev, limit);
        Ok(())
    }
}
