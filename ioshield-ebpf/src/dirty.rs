//! Who dirties the page cache, in bytes, per (process, device).
use aya_ebpf::{
    EbpfContext,
    helpers::bpf_probe_read_kernel,
    macros::{raw_tracepoint, tracepoint},
    programs::{RawTracePointContext, TracePointContext},
};
use ioshield_common::CounterKey;

use crate::{
    bdi, burst, diag,
    kernel::{
        DIRTY_TP_NAME_OFF, FOLIO_FLAGS_OFF, FOLIO_INDEX_OFF, FOLIO_NR_PAGES_OFF, INODE_MODE_OFF,
        INODE_RDEV_OFF, INODE_SB_OFF, MAPPING_HOST_OFF, PAGE_SIZE, PG_HEAD_MASK, SB_DEV_OFF, read,
    },
    maps::with_counters,
};

/// `writeback_dirty_folio(struct folio *folio, struct address_space *mapping)` (or `_page`). Runs
/// in the context of the task that dirtied the folio, like `task_io_account_write`.
#[raw_tracepoint(tracepoint = "writeback_dirty_folio")]
pub fn dirty_folio(ctx: RawTracePointContext) -> i32 {
    let folio: u64 = ctx.arg(0);
    let mapping: u64 = ctx.arg(1);
    let bytes = folio_pages(&ctx, folio) * PAGE_SIZE.load();
    let dev = mapping_dev(mapping).unwrap_or(0);
    account(&ctx, dev, bytes, file_start(folio));
    0
}
ioshield_common::check_name!(ioshield_common::names::program::DIRTY_FOLIO, dirty_folio);

/// Fallback when BTF offsets are missing: the classic tracepoint, one page per event, device from
/// the record's bdi name. Undercounts large folios; userspace says so in the log.
#[tracepoint(category = "writeback", name = "writeback_dirty_folio")]
pub fn dirty_folio_events(ctx: TracePointContext) -> i32 {
    // SAFETY: offset comes from the tracepoint's format file; the read is checked.
    let name: [u8; 32] = match unsafe { ctx.read_at(DIRTY_TP_NAME_OFF.load() as usize) } {
        Ok(n) => n,
        Err(_) => return 0,
    };
    account(&ctx, bdi::parse_dev(&name), PAGE_SIZE.load(), 0);
    0
}
ioshield_common::check_name!(
    ioshield_common::names::program::DIRTY_FOLIO_EVENTS,
    dirty_folio_events
);

#[inline(always)]
fn account<C: EbpfContext>(ctx: &C, dev: u32, bytes: u64, files: u64) {
    let key = CounterKey {
        tgid: ctx.tgid(),
        dev,
    };
    with_counters(ctx, &key, |c| {
        c.dirtied_bytes += bytes;
        c.dirtied_events += 1;
        c.files_started += files;
    });
    burst::observe(&key, bytes);
}

/// 1 when the folio is its file's first page: a writer of many small files starts one per
/// file, a copy one in all. Userspace tells them apart by bytes per file started.
#[inline(always)]
fn file_start(folio: u64) -> u64 {
    let off = FOLIO_INDEX_OFF.load();
    if off == 0 {
        return 0;
    }
    match read::<u64>(folio, off) {
        Some(0) => 1,
        _ => 0,
    }
}

#[inline(always)]
fn folio_pages<C: EbpfContext>(ctx: &C, folio: u64) -> u64 {
    let nr_off = FOLIO_NR_PAGES_OFF.load();
    if nr_off == 0 {
        return 1;
    }
    let Some(flags) = read::<u64>(folio, FOLIO_FLAGS_OFF.load()) else {
        return 1;
    };
    if flags & PG_HEAD_MASK.load() == 0 {
        return 1;
    }
    match read::<u32>(folio, nr_off) {
        // A corrupt or misread count must not blow the totals up: large folios are <= PMD size.
        Some(n) if (1..=512).contains(&n) => n as u64,
        Some(n) => {
            if diag::allow(diag::FOLIO_SIZE) {
                aya_log_ebpf::warn!(ctx, "implausible folio page count {}: counted as 1", n);
            }
            1
        }
        None => 1,
    }
}

const S_IFMT: u16 = 0o170000;
const S_IFBLK: u16 = 0o060000;

/// The device a dirty folio will be written to. Filesystem metadata (ext4 bitmaps, directories,
/// the journal) is dirtied through the block device's own inode, whose superblock is the bdev
/// pseudo-filesystem: for those, the device is the inode's `i_rdev`.
#[inline(always)]
fn mapping_dev(mapping: u64) -> Option<u32> {
    let host: u64 = read(mapping, MAPPING_HOST_OFF.load())?;
    let mode: u16 = read(host, INODE_MODE_OFF.load())?;
    if mode & S_IFMT == S_IFBLK {
        return read(host, INODE_RDEV_OFF.load());
    }
    let sb: u64 = read(host, INODE_SB_OFF.load())?;
    // SAFETY: checked kernel read.
    unsafe { bpf_probe_read_kernel((sb + SB_DEV_OFF.load() as u64) as *const u32) }.ok()
}
