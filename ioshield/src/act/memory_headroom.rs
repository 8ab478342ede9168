//! The `MemoryHigh=` to ask systemd for on a unit that holds a writer: not below what the unit
//! will hold by the time systemd writes it. The kernel's `memory.high` write reclaims, in the
//! writer of that file (systemd, PID 1 or the user's manager), everything the cgroup holds
//! above the new value, dirty pages included: it waits for their writeback, and systemd
//! answers nobody meanwhile. Asked for the unit's memory as read a moment before, the e2e's
//! calls took up to 432 ms (five of six over 160) while the writer kept adding pages in
//! between (37-96 ms without that reclaim). The room must stay small: what the unit may hold above its memory at the
//! restriction is dirty data iocost then writes at the offender's weight, which the innocents'
//! commits wait for (room from the writer's growth, 40-100 MB in the e2e, doubled the longest
//! commit pause beside it; docs/bench/unit-set.md).

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
