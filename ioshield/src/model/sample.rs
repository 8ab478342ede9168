//! One tick's worth of what the kernel told us.
use std::{collections::HashMap, time::Duration};

use crate::system::{
    devices::{DevId, Disk},
    diskstats::DiskCounters,
    vmstat::DirtyState,
};

/// What one process did to one disk since the previous sample.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteDelta {
    pub dirtied_bytes: u64,
    pub throttle_pauses: u64,
    pub throttle_ms: u64,
    /// Files it wrote from their first page (see `ioshield_common::Counters::files_started`).
    pub files_started: u64,
}

impl WriteDelta {
    pub fn add(&mut self, other: &WriteDelta) {
        self.dirtied_bytes += other.dirtied_bytes;
        self.throttle_pauses += other.throttle_pauses;
        self.throttle_ms += other.throttle_ms;
        self.files_started += other.files_started;
    }

    pub fn is_zero(&self) -> bool {
        *self == WriteDelta::default()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    Fork { pid: u32, ppid: u32, comm: String },
    Exec { pid: u32, comm: String },
    Exit { pid: u32, comm: String },
}

/// Events the kernel side could not record, since the previous sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Lost {
    pub counter_map_full: u64,
    pub lifecycle_events_dropped: u64,
    /// Burst reports the kernel could not queue: the tick still sees those writers.
    pub bursts_dropped: u64,
    pub kernel_reads_failed: u64,
}

/// What each process did to each disk: keyed by (tgid, whole disk).
pub type Writes = HashMap<(u32, Disk), WriteDelta>;

#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub elapsed: Duration,
    pub writes: Writes,
    /// In the order the kernel reported them; all happened before `writes` was read.
    pub lifecycle: Vec<Lifecycle>,
    pub dirty: DirtyState,
    /// What each disk did since the previous sample.
    pub disks: HashMap<DevId, DiskDelta>,
    /// The time `disks` spans, from one read of the disks' counters to the next. Not `elapsed`:
    /// they are read after the processes' counters, whose reading takes longer at some samples
    /// than at others (thousands of map entries, new devices to resolve; slower still under
    /// emulation), and a disk's speed is bytes over this interval.
    pub disks_elapsed: Duration,
    /// Journal commits of [`crate::probe::journal::LONG_COMMIT`] or more since the previous
    /// sample, per disk (the filesystem's device resolved to its disk).
    pub long_commits: Vec<(Disk, u64)>,
    /// Bytes the filesystems' journals (ext4) logged since the previous sample, per disk: part
    /// of what the disk wrote (`disks`), never dirtied.
    pub journal_logged: Vec<(Disk, u64)>,
    pub lost: Lost,
}

/// One disk's counters over a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DiskDelta {
    /// Bytes written.
    pub written: u64,
    /// Milliseconds writes spent in flight, summed over requests.
    pub write_ms: u64,
    /// Requests in flight when the span ended.
    pub in_flight: u64,
}

impl DiskDelta {
    /// What the disk did from the `before` reading of its counters to the `now` one.
    pub fn between(before: &DiskCounters, now: &DiskCounters) -> Self {
        DiskDelta {
            written: now.written_bytes.saturating_sub(before.written_bytes),
            write_ms: now.write_ms.saturating_sub(before.write_ms),
            in_flight: now.in_flight,
        }
    }

    /// Seconds writes spent in flight, summed over requests: over a span of time, the average
    /// number of writes queued or in service is this divided by the span.
    pub fn writing(&self) -> f64 {
        self.write_ms as f64 / 1000.0
    }
}
