//! The maps shared with userspace and the one way counters are added to.
use aya_ebpf::{
    EbpfContext,
    macros::map,
    maps::{LruPerCpuHashMap, PerCpuArray, RingBuf},
};
use ioshield_common::{
    COUNTER_MAP_ENTRIES, CounterKey, Counters, LIFECYCLE_RINGBUF_BYTES, LifecycleEvent, stat,
};

/// LRU: when it is full, the (process, disk) keys untouched the longest make room. Otherwise
/// 16k idle processes that each dirtied one page would fill it for good and hide every later
/// writer; an evicted key that comes back starts from zero, which userspace reads as a reset.
#[map]
pub static COUNTERS: LruPerCpuHashMap<CounterKey, Counters> =
    LruPerCpuHashMap::with_max_entries(COUNTER_MAP_ENTRIES, 0);

#[map]
pub static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::COUNT, 0);

#[map]
pub static LIFECYCLE: RingBuf = RingBuf::with_byte_size(LIFECYCLE_RINGBUF_BYTES, 0);

ioshield_common::check_name!(ioshield_common::names::map::COUNTERS, COUNTERS);
ioshield_common::check_name!(ioshield_common::names::map::STATS, STATS);
ioshield_common::check_name!(ioshield_common::names::map::LIFECYCLE, LIFECYCLE);

const BPF_NOEXIST: u64 = 1;
const EEXIST: i32 = 17;
/// Userspace drains the ring buffer every tick, so it never needs waking per event.
const BPF_RB_NO_WAKEUP: u64 = 1;

pub fn bump_stat(index: u32) {
    if let Some(slot) = STATS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, valid for the duration of the program.
        unsafe { *slot += 1 };
    }
}

/// Finds (or creates) this CPU's counters for `key` and lets `update` change them.
#[inline(always)]
pub fn with_counters<C: EbpfContext>(ctx: &C, key: &CounterKey, update: impl Fn(&mut Counters)) {
    if let Some(slot) = COUNTERS.get_ptr_mut(key) {
        // SAFETY: per-CPU value, only this CPU writes it.
        update(unsafe { &mut *slot });
        return;
    }
    let mut fresh = Counters::default();
    update(&mut fresh);
    match COUNTERS.insert(key, fresh, BPF_NOEXIST) {
        Ok(()) => {}
        // Another CPU created the key between our lookup and insert; our slot is still zero.
        Err(e) if e == -EEXIST => {
            if let Some(slot) = COUNTERS.get_ptr_mut(key) {
                update(unsafe { &mut *slot });
            }
        }
        Err(_) => {
            bump_stat(stat::COUNTER_MAP_FULL);
            if crate::diag::allow(crate::diag::COUNTER_MAP_FULL) {
                aya_log_ebpf::warn!(
                    ctx,
                    "counter map full ({} keys): pid {} not counted",
                    COUNTER_MAP_ENTRIES,
                    key.tgid
                );
            }
        }
    }
}

pub fn emit_lifecycle(event: LifecycleEvent) {
    match LIFECYCLE.reserve::<LifecycleEvent>(0) {
        Some(mut entry) => {
            entry.write(event);
            entry.submit(BPF_RB_NO_WAKEUP);
        }
        None => bump_stat(stat::RINGBUF_DROPPED),
    }
}
