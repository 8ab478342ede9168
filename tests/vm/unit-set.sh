#!/bin/bash
# What a systemd `SetUnitProperties` that sets MemoryHigh= costs while the unit's writer dirties
# pages, by how far above the unit's memory the new MemoryHigh lands (docs/bench/unit-set.md).
# Run in the systemd guest instead of the end-to-end script:
#   cargo xtask vm e2e --script tests/vm/unit-set.sh --out target/vm-unit-set --kernel 6.12,6.1
# The daemon reads MemoryCurrent, then asks for MemoryHigh no lower than that: the kernel's
# memory.high write reclaims, in the writer of that file (systemd), whatever the cgroup holds
# above the new value by then. Each trial starts a `dd` from /dev/zero to the 30 MB/s disk as a
# unit, lets it write for DELAY seconds (the daemon restricts ~0.07 s after the first write),
# then sets one of:
#   current    MemoryHigh = MemoryCurrent as read just before (what the daemon did)
#   plus16m    MemoryHigh = MemoryCurrent + 16 MiB
#   plus64m    MemoryHigh = MemoryCurrent + 64 MiB
#   rate       MemoryHigh = MemoryCurrent + its growth between two reads over 0.25 s, at least
#              8 MiB (a candidate for the daemon, not taken: docs/bench/unit-set.md)
#   weight     IOWeight=1 only (the call's cost without any MemoryHigh)
# and prints one line per trial: the call's milliseconds and what the cgroup held.
set -u
ROUNDS=${ROUNDS:-5}
DELAY=${DELAY:-0.15}
OUT="$RESULTS/unit-set.txt"
: > "$OUT"
now_ms() { echo $(($(date +%s%N) / 1000000)); }
prop() { systemctl show "$1" -p "$2" --value 2>/dev/null; }
trial() {
    local variant=$1 round=$2 unit="w-$1-$2" cur high t0 t1 after events c0 m0 m1 growth
    systemd-run --quiet --unit="$unit" dd if=/dev/zero of="$DATA/$unit" bs=1M count=400 2> /dev/null
    sleep "$DELAY"
    m0=$(now_ms)
    c0=$(prop "$unit.service" MemoryCurrent)
    cur=$(prop "$unit.service" MemoryCurrent)
    m1=$(now_ms)
    case $variant in
        current) high=$cur ;;
        plus16m) high=$((cur + (16 << 20))) ;;
        plus64m) high=$((cur + (64 << 20))) ;;
        rate)
            growth=$(((cur - c0) * 250 / (m1 > m0 ? m1 - m0 : 1)))
            high=$((cur + (growth > (8 << 20) ? growth : (8 << 20))))
            ;;
        weight) high= ;;
    esac
    t0=$(now_ms)
    if [ -n "$high" ]; then
        systemctl set-property --runtime "$unit.service" "MemoryHigh=$high"
    else
        systemctl set-property --runtime "$unit.service" IOWeight=1
    fi
    t1=$(now_ms)
    after=$(prop "$unit.service" MemoryCurrent)
    events=$(tr '\n' ' ' < "/sys/fs/cgroup/system.slice/$unit.service/memory.events" 2> /dev/null)
    echo "$variant round=$round ms=$((t1 - t0)) current_before=$((cur >> 20))M high=$(( ${high:-0} >> 20))M current_after=$((after >> 20))M events: $events" |
        tee -a "$OUT"
    systemctl stop "$unit.service" 2> /dev/null
    rm -f "$DATA/$unit"
    sync
    sleep 1
}
# A no-op call first, so that systemctl and the bus are warm for every variant alike.
systemctl set-property --runtime systemd-journald.service IOWeight=100 2> /dev/null
for round in $(seq 1 "$ROUNDS"); do
    for variant in current plus16m plus64m rate weight; do
        trial "$variant" "$round"
    done
done
for variant in current plus16m plus64m rate weight; do
    echo "$variant: ms $(awk -v v="$variant" '$1 == v { sub("ms=", "", $3); printf "%s ", $3 }' "$OUT")"
done | tee "$RESULTS/unit-set-summary.txt"
echo "e2e: 1 passed, 0 failed"
