//! Reading kernel structures without CO-RE: userspace looks the offsets up in the running kernel's
//! BTF (or tracefs `format` files) and overrides these globals before loading.
use aya_ebpf::{Global, helpers::bpf_probe_read_kernel};
use ioshield_common::stat;

use crate::maps::bump_stat;

macro_rules! offsets {
    ($($name:ident),* $(,)?) => { $(
        #[unsafe(no_mangle)]
        pub static $name: Global<u32> = Global::new(0);
        ioshield_common::check_name!(ioshield_common::names::global::$name, $name);
    )* };
}

offsets!(
    // struct folio (or struct page on kernels with writeback_dirty_page)
    FOLIO_FLAGS_OFF,
    // 0 when the kernel has no per-folio page count we can read: then one page per event.
    FOLIO_NR_PAGES_OFF,
    // folio->index (page->index): 0 when unknown, and no file starts are counted.
    FOLIO_INDEX_OFF,
    // struct address_space -> host, struct inode -> i_sb/i_mode/i_rdev, struct super_block -> s_dev
    MAPPING_HOST_OFF,
    INODE_SB_OFF,
    INODE_MODE_OFF,
    INODE_RDEV_OFF,
    SB_DEV_OFF,
    // struct task_struct -> pid, tgid, signal; struct signal_struct -> live
    TASK_PID_OFF,
    TASK_TGID_OFF,
    TASK_SIGNAL_OFF,
    SIGNAL_LIVE_OFF,
    // tracefs record offsets (format files)
    DIRTY_TP_NAME_OFF,
    BDP_BDI_OFF,
    BDP_PAUSE_OFF,
);

/// `1 << PG_head` from the running kernel's `enum pageflags`.
#[unsafe(no_mangle)]
pub static PG_HEAD_MASK: Global<u64> = Global::new(0);
#[unsafe(no_mangle)]
pub static PAGE_SIZE: Global<u64> = Global::new(4096);
ioshield_common::check_name!(ioshield_common::names::global::PG_HEAD_MASK, PG_HEAD_MASK);
ioshield_common::check_name!(ioshield_common::names::global::PAGE_SIZE, PAGE_SIZE);

/// Reads a `T` at `base + offset` in kernel memory, counting failures for userspace.
#[inline(always)]
pub fn read<T>(base: u64, offset: u32) -> Option<T> {
    // SAFETY: bpf_probe_read_kernel validates the address; a bad one is an error, not a fault.
    match unsafe { bpf_probe_read_kernel((base + offset as u64) as *const T) } {
        Ok(v) => Some(v),
        Err(_) => {
            bump_stat(stat::READ_FAILED);
            None
        }
    }
}
