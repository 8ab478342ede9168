//! Types shared by the kernel side (`ioshield-ebpf`) and userspace (`ioshield`).
//!
//! Everything here is `#[repr(C)]` and laid out without implicit padding, because the same bytes are
//! written by BPF programs and read back by userspace through map and ring-buffer APIs.
#![no_std]

/// Key of the per-CPU counter map: one writer (thread group) on one device.
///
/// `dev` is the kernel's internal `dev_t` (`major << 20 | minor`). It is the superblock's device when
/// the folio path is used (a partition, or an anonymous device for btrfs/overlay) and the bdi's
/// device when it is parsed from a tracepoint's bdi name; userspace maps both to a whole disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CounterKey {
    pub tgid: u32,
    pub dev: u32,
}

/// Cumulative counters for one [`CounterKey`], one copy per CPU. Userspace sums the CPUs and takes
/// differences between ticks, so the kernel side never resets anything.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Bytes of page cache this writer dirtied (folio size, or one page per event in fallback mode).
    pub dirtied_bytes: u64,
    /// Number of dirty-folio events (one per folio).
    pub dirtied_events: u64,
    /// Number of times `balance_dirty_pages` paused this writer.
    pub throttle_pauses: u64,
    /// Total pause time requested by `balance_dirty_pages`, in milliseconds.
    pub throttle_ms: u64,
    /// Folios dirtied at a file's first page (index 0): about one per file written from its
    /// start. Zero where the kernel side cannot read a folio's index.
    pub files_started: u64,
}

/// What happened to a process, as reported through the lifecycle ring buffer.
pub mod lifecycle {
    /// A new process (not a thread) was forked.
    pub const FORK: u32 = 1;
    /// The last thread of a process exited.
    pub const EXIT: u32 = 2;
    /// A process exec'd a new program: its name changed.
    pub const EXEC: u32 = 3;
}

/// One lifecycle event. `ppid` is the forking process for [`lifecycle::FORK`] and unused for exits.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LifecycleEvent {
    pub kind: u32,
    pub pid: u32,
    pub ppid: u32,
    pub _pad: u32,
    pub comm: [u8; 16],
}

/// A per-disk burst limit, written by userspace into `BURST_LIMITS` (key: the kernel's `dev_t`
/// as counted) and `BURST_DEFAULT` (every device without an entry of its own). A process that dirties more
/// than `bytes` on one device within `window_ns` is reported at once through `BURSTS`: it alone
/// dirties faster than the disk writes, and waiting for the next tick would let it build the
/// backlog other processes stall on. `bytes == 0` turns the check off.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BurstLimit {
    pub window_ns: u64,
    pub bytes: u64,
}

/// Kernel-side state of one (process, device) window; userspace never reads it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BurstWindow {
    pub start_ns: u64,
    pub bytes: u64,
    /// Non-zero once this window has been reported: one record per window, never one per write.
    pub reported: u64,
}

/// One burst report, as queued in the `BURSTS` ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BurstEvent {
    pub tgid: u32,
    pub dev: u32,
    /// Bytes dirtied in the window when the limit was crossed.
    pub bytes: u64,
    /// Time from the window's first write to the crossing.
    pub elapsed_ns: u64,
    /// When the crossing happened (`bpf_ktime_get_ns`, CLOCK_MONOTONIC): how long userspace
    /// took to act on it is part of what the offender dirties before it is held.
    pub at_ns: u64,
}

/// Indexes into the per-CPU `STATS` array: things userspace must be told about.
pub mod stat {
    /// A new key could not be added to the counter map (it is full).
    pub const COUNTER_MAP_FULL: u32 = 0;
    /// A lifecycle event was dropped because the ring buffer was full.
    pub const RINGBUF_DROPPED: u32 = 1;
    /// A kernel structure read (`bpf_probe_read_kernel`) failed.
    pub const READ_FAILED: u32 = 2;
    /// A burst report was dropped because its ring buffer was full.
    pub const BURST_DROPPED: u32 = 3;
    pub const COUNT: u32 = 4;
}

/// Map sizes, shared so userspace can report how full they are.
pub const COUNTER_MAP_ENTRIES: u32 = 16384;
pub const LIFECYCLE_RINGBUF_BYTES: u32 = 512 * 1024;
/// At most one report per (process, disk, window): a few per second even on a busy machine.
pub const BURST_RINGBUF_BYTES: u32 = 64 * 1024;
/// Devices with a burst limit of their own (`BURST_LIMITS`).
pub const BURST_LIMIT_ENTRIES: u32 = 1024;
/// Journals with a commit running at once (one per mounted ext4 filesystem at most).
pub const JOURNAL_ENTRIES: u32 = 256;

/// The BPF object's names, as both sides spell them. The kernel side checks at compile time that
/// each of its programs, maps and globals is named as listed here ([`names::same`]), and
/// userspace looks them up only through these constants.
pub mod names {
    /// Programs (their function names in `ioshield-ebpf`).
    pub mod program {
        pub const DIRTY_FOLIO: &str = "dirty_folio";
        pub const DIRTY_FOLIO_EVENTS: &str = "dirty_folio_events";
        pub const BALANCE_DIRTY_PAGES: &str = "balance_dirty_pages";
        pub const PROCESS_FORK: &str = "process_fork";
        pub const PROCESS_EXEC: &str = "process_exec";
        pub const PROCESS_EXIT: &str = "process_exit";
        pub const JOURNAL_COMMIT_START: &str = "journal_commit_start";
        pub const JOURNAL_COMMIT_END: &str = "journal_commit_end";
        pub const JOURNAL_LOGGED: &str = "journal_logged";
    }

    pub mod map {
        pub const COUNTERS: &str = "COUNTERS";
        pub const STATS: &str = "STATS";
        pub const LIFECYCLE: &str = "LIFECYCLE";
        pub const BURST_LIMITS: &str = "BURST_LIMITS";
        pub const BURST_DEFAULT: &str = "BURST_DEFAULT";
        pub const BURST_WINDOWS: &str = "BURST_WINDOWS";
        pub const BURSTS: &str = "BURSTS";
        pub const COMMITS_RUNNING: &str = "COMMITS_RUNNING";
        pub const LONG_COMMITS: &str = "LONG_COMMITS";
        pub const LOGGED_BLOCKS: &str = "LOGGED_BLOCKS";
    }

    /// Globals userspace sets before loading: struct and record offsets (`u32`), and three
    /// `u64` values.
    pub mod global {
        pub const FOLIO_FLAGS_OFF: &str = "FOLIO_FLAGS_OFF";
        pub const FOLIO_NR_PAGES_OFF: &str = "FOLIO_NR_PAGES_OFF";
        pub const FOLIO_INDEX_OFF: &str = "FOLIO_INDEX_OFF";
        pub const MAPPING_HOST_OFF: &str = "MAPPING_HOST_OFF";
        pub const INODE_SB_OFF: &str = "INODE_SB_OFF";
        pub const INODE_MODE_OFF: &str = "INODE_MODE_OFF";
        pub const INODE_RDEV_OFF: &str = "INODE_RDEV_OFF";
        pub const SB_DEV_OFF: &str = "SB_DEV_OFF";
        pub const TASK_PID_OFF: &str = "TASK_PID_OFF";
        pub const TASK_TGID_OFF: &str = "TASK_TGID_OFF";
        pub const TASK_SIGNAL_OFF: &str = "TASK_SIGNAL_OFF";
        pub const SIGNAL_LIVE_OFF: &str = "SIGNAL_LIVE_OFF";
        pub const DIRTY_TP_NAME_OFF: &str = "DIRTY_TP_NAME_OFF";
        pub const BDP_BDI_OFF: &str = "BDP_BDI_OFF";
        pub const BDP_PAUSE_OFF: &str = "BDP_PAUSE_OFF";
        pub const COMMIT_START_DEV_OFF: &str = "COMMIT_START_DEV_OFF";
        pub const COMMIT_END_DEV_OFF: &str = "COMMIT_END_DEV_OFF";
        pub const RUN_STATS_DEV_OFF: &str = "RUN_STATS_DEV_OFF";
        pub const RUN_STATS_LOGGED_OFF: &str = "RUN_STATS_LOGGED_OFF";
        pub const LONG_COMMIT_NS: &str = "LONG_COMMIT_NS";
        pub const PG_HEAD_MASK: &str = "PG_HEAD_MASK";
        pub const PAGE_SIZE: &str = "PAGE_SIZE";
    }

    /// `a == b`, usable in a `const` assertion.
    pub const fn same(a: &str, b: &str) -> bool {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        let mut i = 0;
        while i < a.len() {
            if a[i] != b[i] {
                return false;
            }
            i += 1;
        }
        true
    }

    /// Fails the build unless `$item` is spelled as `$name` says.
    #[macro_export]
    macro_rules! check_name {
        ($name:path, $item:ident) => {
            const _: () = assert!(
                $crate::names::same($name, stringify!($item)),
                "name differs from ioshield_common::names"
            );
        };
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data, `repr(C)`, no padding, every bit pattern valid.
    unsafe impl aya::Pod for super::CounterKey {}
    unsafe impl aya::Pod for super::Counters {}
    unsafe impl aya::Pod for super::LifecycleEvent {}
    unsafe impl aya::Pod for super::BurstLimit {}
    unsafe impl aya::Pod for super::BurstEvent {}
}
