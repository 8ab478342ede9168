//! Reports a process the moment it dirties more than its disk can write: the check that lets
//! userspace act within milliseconds instead of at its next tick. One report per (process, disk,
//! window), submitted with a wake-up; every other write only adds to the window.
use aya_ebpf::{
    helpers::bpf_ktime_get_ns,
    macros::map,
    maps::{Array, HashMap, LruHashMap, RingBuf},
};
use ioshield_common::{
    BURST_LIMIT_ENTRIES, BURST_RINGBUF_BYTES, BurstEvent, BurstLimit, BurstWindow,
    COUNTER_MAP_ENTRIES, CounterKey, stat,
};

use crate::maps::bump_stat;

/// Written by userspace: per counted device.
#[map]
pub static BURST_LIMITS: HashMap<u32, BurstLimit> =
    HashMap::with_max_entries(BURST_LIMIT_ENTRIES, 0);

/// Written by userspace: the limit of devices without an entry in `BURST_LIMITS`. (Key 0 of
/// that map, looked up as `get(&0)`, never matched: the key pointer was a promoted constant,
/// not a stack slot.)
#[map]
pub static BURST_DEFAULT: Array<BurstLimit> = Array::with_max_entries(1, 0);

/// Shared by all CPUs (not per-CPU): a writer that migrates keeps one window. Two CPUs updating
/// the same key at once may lose an addition, which only delays a report by a write.
#[map]
pub static BURST_WINDOWS: LruHashMap<CounterKey, BurstWindow> =
    LruHashMap::with_max_entries(COUNTER_MAP_ENTRIES, 0);

#[map]
pub static BURSTS: RingBuf = RingBuf::with_byte_size(BURST_RINGBUF_BYTES, 0);

ioshield_common::check_name!(ioshield_common::names::map::BURST_LIMITS, BURST_LIMITS);
ioshield_common::check_name!(ioshield_common::names::map::BURST_DEFAULT, BURST_DEFAULT);
ioshield_common::check_name!(ioshield_common::names::map::BURST_WINDOWS, BURST_WINDOWS);
ioshield_common::check_name!(ioshield_common::names::map::BURSTS, BURSTS);

#[inline(always)]
pub fn observe(key: &CounterKey, bytes: u64) {
    // SAFETY: map values are plain data; the kernel keeps them alive during the program.
    let limit = match unsafe { BURST_LIMITS.get(key.dev) } {
        Some(l) => *l,
        None => match BURST_DEFAULT.get(0) {
            Some(l) => *l,
            None => return,
        },
    };
    if limit.bytes == 0 {
        return;
    }
    // SAFETY: helper with no arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(w) = BURST_WINDOWS.get_ptr_mut(key) else {
        let fresh = BurstWindow {
            start_ns: now,
            bytes,
            reported: 0,
        };
        // A full LRU map evicts the idlest key; failure only means this write is not windowed.
        let _ = BURST_WINDOWS.insert(key, fresh, 0);
        return;
    };
    // SAFETY: valid map value for the duration of the program.
    let w = unsafe { &mut *w };
    if now.wrapping_sub(w.start_ns) > limit.window_ns {
        w.start_ns = now;
        w.bytes = 0;
        w.reported = 0;
    }
    w.bytes += bytes;
    if w.reported != 0 || w.bytes <= limit.bytes {
        return;
    }
    w.reported = 1;
    match BURSTS.reserve::<BurstEvent>(0) {
        Some(mut entry) => {
            entry.write(BurstEvent {
                tgid: key.tgid,
                dev: key.dev,
                bytes: w.bytes,
                elapsed_ns: now.wrapping_sub(w.start_ns),
                at_ns: now,
            });
            // Default flags: wake the reader. Rare by construction (once per window).
            entry.submit(0);
        }
        None => bump_stat(stat::BURST_DROPPED),
    }
}
