//! Counts the journal commits (ext4's jbd2) that took long, per filesystem device: every
//! `fsync` there waited for each. The kernel counts that wait as nobody's I/O pressure (the
//! committing thread sleeps on the journal, not on I/O), yet it is the stall a process that
//! commits its own few bytes feels; under a restriction mostly a writeback pass of the held
//! writer holding a journal handle while its bios wait their turn (docs/bench/history.md,
//! stop 59).
//!
//! It also sums the blocks each journal logged: writes the disk makes that nobody dirtied, which
//! the backlog trigger must not take for dirty data written (`detect::backlog`).
use aya_ebpf::{
    Global,
    helpers::bpf_ktime_get_ns,
    macros::{map, tracepoint},
    maps::HashMap,
    programs::TracePointContext,
};
use ioshield_common::JOURNAL_ENTRIES;

/// Record offsets of `dev` in `jbd2_start_commit` and `jbd2_end_commit`, from their format files.
#[unsafe(no_mangle)]
pub static COMMIT_START_DEV_OFF: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
pub static COMMIT_END_DEV_OFF: Global<u32> = Global::new(0);
/// Record offsets of `dev` and `blocks_logged` in `jbd2_run_stats`, from its format file.
#[unsafe(no_mangle)]
pub static RUN_STATS_DEV_OFF: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
pub static RUN_STATS_LOGGED_OFF: Global<u32> = Global::new(0);
/// The shortest commit counted; 0 counts none.
#[unsafe(no_mangle)]
pub static LONG_COMMIT_NS: Global<u64> = Global::new(0);
ioshield_common::check_name!(
    ioshield_common::names::global::COMMIT_START_DEV_OFF,
    COMMIT_START_DEV_OFF
);
ioshield_common::check_name!(
    ioshield_common::names::global::COMMIT_END_DEV_OFF,
    COMMIT_END_DEV_OFF
);
ioshield_common::check_name!(
    ioshield_common::names::global::RUN_STATS_DEV_OFF,
    RUN_STATS_DEV_OFF
);
ioshield_common::check_name!(
    ioshield_common::names::global::RUN_STATS_LOGGED_OFF,
    RUN_STATS_LOGGED_OFF
);
ioshield_common::check_name!(
    ioshield_common::names::global::LONG_COMMIT_NS,
    LONG_COMMIT_NS
);

/// When each journal's running commit began; a journal commits one transaction at a time.
#[map]
pub static COMMITS_RUNNING: HashMap<u32, u64> = HashMap::with_max_entries(JOURNAL_ENTRIES, 0);

/// How many long commits each journal made, cumulative: userspace takes differences.
#[map]
pub static LONG_COMMITS: HashMap<u32, u64> = HashMap::with_max_entries(JOURNAL_ENTRIES, 0);

ioshield_common::check_name!(
    ioshield_common::names::map::COMMITS_RUNNING,
    COMMITS_RUNNING
);
ioshield_common::check_name!(ioshield_common::names::map::LONG_COMMITS, LONG_COMMITS);

/// How many blocks each journal logged (its metadata copies, descriptor, revoke and commit
/// blocks), cumulative: userspace takes differences.
#[map]
pub static LOGGED_BLOCKS: HashMap<u32, u64> = HashMap::with_max_entries(JOURNAL_ENTRIES, 0);
ioshield_common::check_name!(ioshield_common::names::map::LOGGED_BLOCKS, LOGGED_BLOCKS);

#[tracepoint(category = "jbd2", name = "jbd2_start_commit")]
pub fn journal_commit_start(ctx: TracePointContext) -> i32 {
    // SAFETY: the offset comes from the tracepoint's format file; the read is checked.
    let Ok(dev) = (unsafe { ctx.read_at::<u32>(COMMIT_START_DEV_OFF.load() as usize) }) else {
        return 0;
    };
    // SAFETY: helper with no arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    // A full map only means this journal's commits go uncounted.
    let _ = COMMITS_RUNNING.insert(dev, now, 0);
    0
}
ioshield_common::check_name!(
    ioshield_common::names::program::JOURNAL_COMMIT_START,
    journal_commit_start
);

#[tracepoint(category = "jbd2", name = "jbd2_end_commit")]
pub fn journal_commit_end(ctx: TracePointContext) -> i32 {
    // SAFETY: as above.
    let Ok(dev) = (unsafe { ctx.read_at::<u32>(COMMIT_END_DEV_OFF.load() as usize) }) else {
        return 0;
    };
    // SAFETY: map values are plain data, alive for the duration of the program.
    let Some(started) = (unsafe { COMMITS_RUNNING.get(dev) }).copied() else {
        return 0;
    };
    let _ = COMMITS_RUNNING.remove(dev);
    let long = LONG_COMMIT_NS.load();
    // SAFETY: helper with no arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    if long == 0 || now.wrapping_sub(started) < long {
        return 0;
    }
    // One journal thread commits a device's transactions in turn: no other CPU adds at once.
    match LONG_COMMITS.get_ptr_mut(dev) {
        // SAFETY: valid map value for the duration of the program.
        Some(count) => unsafe { *count += 1 },
        None => {
            let _ = LONG_COMMITS.insert(dev, 1, 0);
        }
    }
    0
}
ioshield_common::check_name!(
    ioshield_common::names::program::JOURNAL_COMMIT_END,
    journal_commit_end
);

/// Fires once per commit, after its blocks are written: a few times a second per busy journal.
#[tracepoint(category = "jbd2", name = "jbd2_run_stats")]
pub fn journal_logged(ctx: TracePointContext) -> i32 {
    // SAFETY: the offsets come from the tracepoint's format file; the reads are checked.
    let Ok(dev) = (unsafe { ctx.read_at::<u32>(RUN_STATS_DEV_OFF.load() as usize) }) else {
        return 0;
    };
    // SAFETY: as above.
    let Ok(blocks) = (unsafe { ctx.read_at::<u32>(RUN_STATS_LOGGED_OFF.load() as usize) }) else {
        return 0;
    };
    // One journal thread commits a device's transactions in turn: no other CPU adds at once.
    match LOGGED_BLOCKS.get_ptr_mut(dev) {
        // SAFETY: valid map value for the duration of the program.
        Some(count) => unsafe { *count += u64::from(blocks) },
        None => {
            let _ = LOGGED_BLOCKS.insert(dev, u64::from(blocks), 0);
        }
    }
    0
}
ioshield_common::check_name!(
    ioshield_common::names::program::JOURNAL_LOGGED,
    journal_logged
);
