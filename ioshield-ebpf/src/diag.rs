//! Rare diagnostics through aya-log: a full counter map, an implausible folio size. Each kind is
//! logged at most once per `EVERY_NS` per CPU, so a persistent condition cannot flood the log
//! ring buffer or cost more than the counting it reports on.
use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::map, maps::PerCpuArray};

/// A new (process, disk) key did not fit into the counter map.
pub const COUNTER_MAP_FULL: u32 = 0;
/// A folio's page count was outside 1..=512.
pub const FOLIO_SIZE: u32 = 1;
const KINDS: u32 = 2;
const EVERY_NS: u64 = 10_000_000_000;

#[map]
static LAST_LOGGED: PerCpuArray<u64> = PerCpuArray::with_max_entries(KINDS, 0);

/// True when `kind` may be logged now (and records that it was).
#[inline(always)]
pub fn allow(kind: u32) -> bool {
    let Some(last) = LAST_LOGGED.get_ptr_mut(kind) else {
        return false;
    };
    // SAFETY: helper without preconditions; the slot is this CPU's own.
    let now = unsafe { bpf_ktime_get_ns() };
    unsafe {
        if *last != 0 && now.wrapping_sub(*last) < EVERY_NS {
            return false;
        }
        *last = now;
    }
    true
}
