//! How long `balance_dirty_pages` pauses each writer. Fires only while a task is throttled.
use aya_ebpf::{EbpfContext as _, macros::tracepoint, programs::TracePointContext};
use ioshield_common::CounterKey;

use crate::{
    bdi,
    kernel::{BDP_BDI_OFF, BDP_PAUSE_OFF},
    maps::with_counters,
};

#[tracepoint(category = "writeback", name = "balance_dirty_pages")]
pub fn balance_dirty_pages(ctx: TracePointContext) -> i32 {
    // SAFETY: offsets come from the tracepoint's format file; reads are checked.
    let pause_ms: i64 = match unsafe { ctx.read_at(BDP_PAUSE_OFF.load() as usize) } {
        Ok(p) => p,
        Err(_) => return 0,
    };
    if pause_ms <= 0 {
        return 0;
    }
    let name: [u8; 32] = match unsafe { ctx.read_at(BDP_BDI_OFF.load() as usize) } {
        Ok(n) => n,
        Err(_) => return 0,
    };
    let key = CounterKey {
        tgid: ctx.tgid(),
        dev: bdi::parse_dev(&name),
    };
    with_counters(&ctx, &key, |c| {
        c.throttle_pauses += 1;
        c.throttle_ms += pause_ms as u64;
    });
    0
}
ioshield_common::check_name!(
    ioshield_common::names::program::BALANCE_DIRTY_PAGES,
    balance_dirty_pages
);
