//! Kernel counters -> samples. Loads and attaches the BPF programs, then yields one [`Sample`] per
//! call to [`Probe::sample`]: what each process dirtied and how long it was throttled, per disk,
//! since the previous call, plus process lifecycle events, the global dirty state and each
//! disk's long journal commits.
mod attach;
pub mod burst;
mod counters;
pub mod journal;
mod kernel_log;
mod lifecycle;

use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;

use crate::{
    model::sample::{DiskDelta, Sample},
    system::{
        devices::{DevId, Devices},
        diskstats, vmstat,
    },
};

/// How dirtied bytes are measured on this kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DirtyMode {
    /// raw_tp with the folio's real size (BTF offsets available).
    FolioBytes,
    /// Classic tracepoint, one page per event: undercounts large folios.
    PageEvents,
}

/// What the probe could attach on this kernel, for logs and `status`.
#[derive(Clone, Debug, Serialize)]
pub struct Features {
    pub dirty_tracepoint: String,
    pub dirty_mode: DirtyMode,
    /// `balance_dirty_pages` attached: throttle time is measured.
    pub throttle: bool,
    /// fork/exit events attached; otherwise the tree is rebuilt from /proc each tick.
    pub lifecycle: bool,
    /// Files written from their first page are counted: writers of many small files are told
    /// from copies.
    pub files: bool,
    /// Long journal commits (ext4) are counted.
    pub journal: bool,
    /// The blocks each journal (ext4) logged are counted: its writes are not dirty data written.
    pub journal_logged: bool,
}

/// Cost of one attached BPF program, valid while `kernel.bpf_stats_enabled` is 1.
#[derive(Clone, Debug, Serialize)]
pub struct ProgramCost {
    pub name: String,
    pub run_count: u64,
    pub run_time_ns: u64,
}

pub struct Probe {
    loaded: attach::Loaded,
    counters: counters::CounterReader,
    lifecycle: Option<lifecycle::LifecycleReader>,
    kernel_log: Option<kernel_log::KernelLog>,
    bursts: Option<burst::BurstReader>,
    long_commits: Option<journal::JournalCounts>,
    logged_blocks: Option<journal::JournalCounts>,
    /// Each journal's block size, by the kernel's device number of its filesystem.
    block_sizes: std::collections::HashMap<u32, u64>,
    burst_limits: burst::BurstLimits,
    devices: Devices,
    last: Instant,
    disks: std::collections::HashMap<crate::system::devices::DevId, diskstats::DiskCounters>,
    /// When `disks` was read.
    disks_read: Instant,
}

impl Probe {
    pub fn start() -> Result<Self> {
        let mut loaded = attach::load_and_attach()?;
        let counters = counters::CounterReader::new(&mut loaded.ebpf)?;
        let lifecycle = if loaded.features.lifecycle {
            Some(lifecycle::LifecycleReader::new(&mut loaded.ebpf)?)
        } else {
            None
        };
        let kernel_log = kernel_log::KernelLog::attach(&mut loaded.ebpf);
        let bursts = Some(burst::BurstReader::new(&mut loaded.ebpf)?);
        let long_commits = if loaded.features.journal {
            Some(journal::JournalCounts::new(
                &mut loaded.ebpf,
                ioshield_common::names::map::LONG_COMMITS,
            )?)
        } else {
            None
        };
        let logged_blocks = if loaded.features.journal_logged {
            Some(journal::JournalCounts::new(
                &mut loaded.ebpf,
                ioshield_common::names::map::LOGGED_BLOCKS,
            )?)
        } else {
            None
        };
        let burst_limits = burst::BurstLimits::new(&mut loaded.ebpf)?;
        Ok(Self {
            loaded,
            counters,
            lifecycle,
            kernel_log,
            bursts,
            long_commits,
            logged_blocks,
            block_sizes: std::collections::HashMap::new(),
            burst_limits,
            devices: Devices::default(),
            last: Instant::now(),
            disks: diskstats::read(),
            disks_read: Instant::now(),
        })
    }

    pub fn features(&self) -> &Features {
        &self.loaded.features
    }

    /// The burst reports, for the daemon's loop to wait on (once).
    pub fn take_bursts(&mut self) -> Option<burst::BurstReader> {
        self.bursts.take()
    }

    /// Tells the kernel side each disk's burst limit: `of_disk` for every device counted so far
    /// (partitions count as their disk), `default` for devices not seen yet.
    pub fn set_burst_limits(
        &mut self,
        default: ioshield_common::BurstLimit,
        of_disk: impl Fn(&crate::system::devices::Disk) -> Option<ioshield_common::BurstLimit>,
    ) -> Result<()> {
        self.burst_limits.set_default(default)?;
        for raw in self.counters.raw_devs() {
            let disk = self
                .devices
                .resolve(crate::system::devices::DevId::from_kernel(raw));
            self.burst_limits
                .set(raw, of_disk(&disk).unwrap_or(default))?;
        }
        Ok(())
    }

    /// The disk a device counted by the kernel side belongs to.
    pub fn disk_of(&mut self, dev: crate::system::devices::DevId) -> crate::system::devices::Disk {
        self.devices.resolve(dev)
    }

    pub fn program_costs(&self) -> Vec<ProgramCost> {
        self.loaded.costs()
    }

    /// What each disk's journals logged since the previous call, bytes.
    fn journal_logged(&mut self) -> Vec<(crate::system::devices::Disk, u64)> {
        let Some(logged) = &mut self.logged_blocks else {
            return Vec::new();
        };
        let mut bytes = Vec::new();
        for (raw, blocks) in logged.read() {
            let fs = DevId::from_kernel(raw);
            let block = *self.block_sizes.entry(raw).or_insert_with(|| {
                crate::system::devices::fs_block_size(fs).unwrap_or_else(|| {
                    tracing::debug!("no mount of {fs} found for its block size: 4 KiB taken");
                    4096
                })
            });
            bytes.push((self.devices.resolve(fs), blocks * block));
        }
        bytes
    }

    /// Everything since the previous call (or since start).
    pub fn sample(&mut self) -> Result<Sample> {
        let now = Instant::now();
        let elapsed = now.duration_since(self.last);
        self.last = now;
        if let Some(k) = &mut self.kernel_log {
            k.drain();
        }
        // Events first: a process whose exit we see here has dirtied its last byte, so the
        // counters read next are final for it and can be dropped from the map.
        let lifecycle = match &mut self.lifecycle {
            Some(l) => l.drain(),
            None => Vec::new(),
        };
        let (writes, lost) = self.counters.read(&lifecycle, &mut self.devices)?;
        let now_disks = diskstats::read();
        let disks_read = Instant::now();
        let disks_elapsed = disks_read.duration_since(self.disks_read);
        self.disks_read = disks_read;
        let disks = now_disks
            .iter()
            .map(|(dev, c)| {
                let before = self.disks.get(dev).copied().unwrap_or(*c);
                (*dev, DiskDelta::between(&before, c))
            })
            .collect();
        self.disks = now_disks;
        let journal_logged = self.journal_logged();
        let long_commits = match &mut self.long_commits {
            Some(l) => l
                .read()
                .into_iter()
                .map(|(raw, n)| (self.devices.resolve(DevId::from_kernel(raw)), n))
                .collect(),
            None => Vec::new(),
        };
        Ok(Sample {
            elapsed: if elapsed.is_zero() {
                Duration::from_micros(1)
            } else {
                elapsed
            },
            writes,
            lifecycle,
            dirty: vmstat::dirty_state(),
            disks,
            disks_elapsed,
            long_commits,
            journal_logged,
            lost,
        })
    }
}
