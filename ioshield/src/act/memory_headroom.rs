//! A held writer's `memory.high`: its page cache budget on top of what its cgroup holds
//! besides page cache ([`memory_high_for`]), followed while it is held
//! ([`memory_high_to_follow`]), and on systemd hosts the `MemoryHigh=` to ask systemd for at
//! the restriction: not below what the unit will hold by the time systemd writes it. The
//! kernel's `memory.high` write reclaims, in the writer of that file (systemd, PID 1 or the
//! user's manager), everything the cgroup holds above the new value, dirty pages included: it
//! waits for their writeback, and systemd answers nobody meanwhile. Asked for the unit's memory
//! as read a moment before, the e2e's calls took up to 432 ms (five of six over 160) while the
//! writer kept adding pages in between (37-96 ms without that reclaim). The room must stay
//! small: what the unit may hold above its memory at the restriction is dirty data iocost then
//! writes at the offender's weight, which the innocents' commits wait for (room from the
//! writer's growth, 40-100 MB in the e2e, doubled the longest commit pause beside it;
//! docs/bench/unit-set.md); the follower brings it down over clean pages once written.

use crate::system::cgroups::MemoryUse;

/// Room above the unit's memory for a writer not held yet: what it adds during a call of
/// about 40 ms at the page cache speed of the e2e's guest (about 200 MB/s below the dirty
/// thresholds).
const HEADROOM: u64 = 8 << 20;

/// Whether the unit's writer grows during the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    /// Not held yet: the restriction's first call.
    Growing,
    /// Held by the MemoryHigh ioshield set before (a retune): room for it would be added at
    /// every retune, the limit creeping up by that much each time (42, 51, 59, 67 ... MB in
    /// the e2e).
    Held,
}

/// The `memory.high` that leaves a cgroup holding `used` a page cache of `budget` bytes: the
/// budget on top of what it holds besides page cache. `memory.high` counts everything; a
/// writer held to the budget alone whose processes need memory (a build's compilers, a backup
/// tool's index) would be throttled on every allocation, the kernel putting each of them to
/// sleep for up to 2 s while the cgroup stays over it.
pub fn memory_high_for(budget: u64, used: Option<MemoryUse>) -> u64 {
    budget.saturating_add(used.map_or(0, |u| u.beside_cache()))
}

/// The most clean page cache one `memory.high` step has the writer of the file reclaim:
/// dropping clean pages does not wait for the disk, but a unit that read gigabytes before it
/// wrote holds that much.
const CLEAN_STEP: u64 = 256 << 20;

/// Room above a held writer's dirty and writeback pages when its `memory.high` is lowered: what
/// it adds during the write (its rate is held by then: at 30 MB/s, 3 MB in a 100 ms call).
const HELD_ROOM: u64 = 4 << 20;

/// A change smaller than this is not worth a write (a systemd call on systemd hosts): a cgroup
/// over its `memory.high` by less gives the difference back from its page cache.
const SLACK: u64 = 1 << 20;

/// What a held writer's `memory.high` (`used.high`) should become for its page cache `budget`,
/// if anything ([`memory_high_for`]): raised at once when what the cgroup holds besides page
/// cache grew into it, lowered when it was set above the budget (a unit limited in place,
/// [`memory_high_to_ask`], or memory given back), but never under its dirty and writeback pages
/// with [`HELD_ROOM`] for what the writer adds meanwhile, nor by more than [`CLEAN_STEP`] at a
/// time: the write then only drops clean pages, which takes no wait on the disk.
///
/// A writer whose processes hold more of their own than [`own_memory_lift`] has it lifted
/// (`u64::MAX`) instead where something else holds its writes (`held_otherwise`: a write limit
/// or iocost's weight): over its `memory.high`, a process that allocates is put to sleep for
/// up to 2 s every 256 KiB, so a limit raised once a tick would let it grow by the budget per
/// tick and no faster. Held by `memory.high` alone, it is only raised.
pub fn memory_high_to_follow(budget: u64, used: MemoryUse, held_otherwise: bool) -> Option<u64> {
    if used.high == u64::MAX {
        // Lifted (a light writer, or one with memory of its own): not set again.
        return None;
    }
    if held_otherwise && used.beside_cache() >= own_memory_lift(budget) {
        return Some(u64::MAX);
    }
    let target = memory_high_for(budget, Some(used));
    if target > used.high.saturating_add(SLACK) {
        return Some(target);
    }
    let floor = used
        .beside_cache()
        .saturating_add(used.backlog)
        .saturating_add(HELD_ROOM)
        .max(used.high.saturating_sub(CLEAN_STEP));
    let lowered = target.max(floor);
    (lowered.saturating_add(SLACK) <= used.high).then_some(lowered)
}

/// How much of its own memory (besides page cache) a held writer's cgroup may hold before its
/// `memory.high` is lifted ([`memory_high_to_follow`]): as much as its page cache budget. A
/// copy or `dd` holds 1-3 MB besides its page cache; an untar's files cost the kernel inodes
/// and dentries, and it is held by a larger budget once seen (`Method::lightened`).
pub fn own_memory_lift(budget: u64) -> u64 {
    budget
}

/// `wanted`, or what the unit holds now (`current`, bytes), with [`HEADROOM`] for a growing
/// writer, if that is more.
pub fn memory_high_to_ask(wanted: u64, current: u64, writer: Writer) -> u64 {
    let room = match writer {
        Writer::Growing => HEADROOM,
        Writer::Held => 0,
    };
    wanted.max(current.saturating_add(room))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn above_what_the_unit_holds_the_wanted_value_stands() {
        assert_eq!(
            memory_high_to_ask(32 * MIB, 10 * MIB, Writer::Growing),
            32 * MIB
        );
        assert_eq!(
            memory_high_to_ask(32 * MIB, 10 * MIB, Writer::Held),
            32 * MIB
        );
    }

    #[test]
    fn below_it_a_growing_writer_keeps_room_for_what_it_adds_during_the_call() {
        assert_eq!(
            memory_high_to_ask(8 * MIB, 30 * MIB, Writer::Growing),
            38 * MIB
        );
        assert_eq!(
            memory_high_to_ask(30 * MIB, 30 * MIB, Writer::Growing),
            38 * MIB
        );
        // systemd's "not known" (u64::MAX): no limit asked below infinity, as before.
        assert_eq!(
            memory_high_to_ask(8 * MIB, u64::MAX, Writer::Growing),
            u64::MAX
        );
    }

    fn used(current: u64, file: u64, backlog: u64, high: u64) -> MemoryUse {
        MemoryUse {
            current,
            file,
            backlog,
            high,
        }
    }

    #[test]
    fn the_budget_is_page_cache_on_top_of_the_rest() {
        assert_eq!(memory_high_for(8 * MIB, None), 8 * MIB);
        // A compiler's 300 MiB beside 2 MiB of page cache.
        let build = used(302 * MIB, 2 * MIB, MIB, 8 * MIB);
        assert_eq!(memory_high_for(8 * MIB, Some(build)), 308 * MIB);
    }

    #[test]
    fn memory_that_grew_beside_the_cache_raises_it_at_once() {
        let slab = used(7 * MIB, 2 * MIB, MIB, 8 * MIB);
        assert_eq!(memory_high_to_follow(8 * MIB, slab, true), Some(13 * MIB));
        // At the target, or within a MiB of it: nothing to write.
        assert_eq!(
            memory_high_to_follow(8 * MIB, used(7 * MIB, 2 * MIB, MIB, 13 * MIB), true),
            None
        );
        assert_eq!(
            memory_high_to_follow(8 * MIB, used(8 * MIB, 7 * MIB, 6 * MIB, 9 * MIB - 1), true),
            None
        );
        // Nor just above it, with its dirty pages under the floor.
        assert_eq!(
            memory_high_to_follow(8 * MIB, used(10 * MIB, 9 * MIB, 5 * MIB, 10 * MIB), true),
            None
        );
    }

    #[test]
    fn a_writer_with_memory_of_its_own_has_it_lifted() {
        let build = used(302 * MIB, 2 * MIB, MIB, 8 * MIB);
        assert_eq!(memory_high_to_follow(8 * MIB, build, true), Some(u64::MAX));
        // Held by memory.high alone (the speed probe's unlimited step): raised, not lifted.
        assert_eq!(
            memory_high_to_follow(8 * MIB, build, false),
            Some(308 * MIB)
        );
        assert_eq!(
            memory_high_to_follow(8 * MIB, used(10 * MIB, 2 * MIB, MIB, 9 * MIB), true),
            Some(u64::MAX)
        );
        // Under a larger budget (an untar's), its kernel memory for the files is followed.
        assert_eq!(
            memory_high_to_follow(128 * MIB, used(60 * MIB, 20 * MIB, MIB, 128 * MIB), true),
            Some(168 * MIB)
        );
    }

    #[test]
    fn a_limit_set_above_the_budget_comes_down_over_clean_pages_only() {
        // The e2e's in-place copy: asked 33.7 MB as it held 25.3 MB, now written back.
        let written = used(34 * MIB, 33 * MIB, 2 * MIB, 34 * MIB);
        assert_eq!(memory_high_to_follow(8 * MIB, written, true), Some(9 * MIB));
        // Still 20 MiB dirty: no lower than that with room for what it adds.
        let dirty = used(34 * MIB, 33 * MIB, 20 * MIB, 34 * MIB);
        assert_eq!(memory_high_to_follow(8 * MIB, dirty, true), Some(25 * MIB));
        // 2 GiB of clean cache read before it wrote: a step at a time.
        let reader = used(2048 * MIB, 2047 * MIB, 4 * MIB, 2056 * MIB);
        assert_eq!(
            memory_high_to_follow(8 * MIB, reader, true),
            Some(1800 * MIB)
        );
        // Lifted for a light writer: left alone.
        assert_eq!(
            memory_high_to_follow(8 * MIB, used(34 * MIB, 33 * MIB, 0, u64::MAX), true),
            None
        );
    }

    #[test]
    fn a_held_writer_gets_no_room_so_that_retunes_do_not_creep_up() {
        let mut high = memory_high_to_ask(8 * MIB, 30 * MIB, Writer::Growing);
        for _ in 0..5 {
            // Held at its MemoryHigh, the unit holds about that much.
            high = memory_high_to_ask(8 * MIB, high, Writer::Held);
        }
        assert_eq!(high, 38 * MIB);
    }
}
