#!/bin/sh
# A held writer whose processes then need memory, as a build's do (its compilers are forked
# after the restriction began, into the restriction's cgroup): a shell writes to the data disk
# through `dd` children until the daemon (the shipped configuration, the cgroup action:
# memory.high for its page cache) restricts the shell, then a child of it allocates 256 MiB
# (busybox dd's buffer), then it writes 50 MB more. memory.high counts all of a cgroup's memory: held at the page cache
# budget alone, the kernel puts the allocating process to sleep for up to 2 s every 256 KiB it
# is over. The same allocation is timed alone first.
# Writes to RESULTS: daemon.log, alloc.txt ("alone S" and "held S", seconds by /proc/uptime;
# "held" missing if killed at 60 s; "again" after the restriction's retune to io.max, if any
# within 20 s of a reload of the daemon's configuration with `iocost = "off"`, SIGHUP, after the
# allocation),
# restricted.txt (the restriction's cgroup, its memory.high after the allocation, "reloaded",
# its memory.high after the retune). Exits non-zero when the writer was never restricted.
# INFLIGHT_TRACE=1: every 0.1 s, `uptime_s reads writes` in flight on the data disk
# (/sys/block/*/inflight) into inflight.txt.
set -u
# Every process in a cgroup of its own, as on any systemd host (stall.sh's `session`): writers
# left in the root cgroup bypass iocost, whose restriction turns the kernel's writeback
# throttling (wbt) off: what the next dd children dirtied there before their shell was
# restricted went to the disk unthrottled, up to 141 writes in flight, and the daemon's
# `io.cost.model` write waited 3-8 s for them (docs/bench/model-freeze.md).
mkdir -p /sys/fs/cgroup/session
echo $$ > /sys/fs/cgroup/session/cgroup.procs
uptime_s() { cut -d' ' -f1 /proc/uptime; }
# Seconds busybox dd takes to allocate and fill a 256 MiB buffer; nothing when killed.
alloc() {
    t0=$(uptime_s)
    timeout 60 dd if=/dev/zero of=/dev/null bs=256M count=1 2> /dev/null || return 1
    awk -v a="$t0" -v b="$(uptime_s)" 'BEGIN { printf "%.2f\n", b - a }'
}
echo "alone $(alloc)" > "$RESULTS/alloc.txt"
tracer=
if [ "${INFLIGHT_TRACE:-0}" = 1 ]; then
    while :; do
        echo "$(uptime_s) $(cat "/sys/block/${DATA_DEV#/dev/}/inflight")"
        usleep 100000
    done > "$RESULTS/inflight.txt" &
    tracer=$!
fi

CONFIG=/tmp/ioshield.toml
printf '[daemon]\naction = "cgroup"\ntick = "1s"\nspeeds_file = "%s"\n' "$RESULTS/disks.json" > "$CONFIG"
ioshield daemon --config "$CONFIG" 2> "$RESULTS/daemon.log" &
daemon=$!
waited=0
while [ "$waited" -lt 600 ] && kill -0 "$daemon" 2> /dev/null \
    && ! grep -q "ioshield daemon running" "$RESULTS/daemon.log"; do
    sleep 0.1
    waited=$((waited + 1))
done
kill -0 "$daemon" 2> /dev/null || {
    echo "build-like: the daemon exited early: $(head -n 1 "$RESULTS/daemon.log")"
    exit 3
}

# The shell writes through short-lived children until it is restricted itself (the daemon
# takes the parent of a loop of writers; grep's cgroup is the shell's, inherited at the fork),
# so that its next child is forked into the restriction's cgroup, as make's compilers are.
(
    i=0
    while [ "$i" -lt 20 ] && ! grep -q "^0::/ioshield/" /proc/self/cgroup; do
        dd if=/dev/zero of="$DATA/build$i" bs=1M count=30 2> /dev/null
        i=$((i + 1))
    done
    cat /proc/self/cgroup > "$RESULTS/restricted.txt"
    held=$(alloc) && echo "held $held" >> "$RESULTS/alloc.txt"
    cg=$(sed -n 's/^0:://p' /proc/self/cgroup)
    echo "memory.high after: $(cat "/sys/fs/cgroup$cg/memory.high" 2> /dev/null)" >> "$RESULTS/restricted.txt"
    # The configuration edited and reloaded (as `systemctl reload` does), to hold writers by
    # io.max instead of iocost: the restriction is retuned in place at the next tick, its
    # limits written again, and the lifted memory.high must stay lifted for the next compiler.
    # A reload that changes nothing need not retune (a writer lightened by the speed probe,
    # as on 6.1 in stop 60's CI, is stepped no more).
    printf '[device.default]\niocost = "off"\n' >> "$CONFIG"
    kill -HUP "$daemon"
    echo "reloaded" >> "$RESULTS/restricted.txt"
    dd if=/dev/zero of="$DATA/build-last" bs=1M count=50 2> /dev/null
    retuned() {
        sed -n '/configuration reloaded/,$p' "$RESULTS/daemon.log" | grep -q "retune pid .*: io.max wbps="
    }
    waited=0
    while [ "$waited" -lt 200 ] && ! retuned; do
        usleep 100000
        waited=$((waited + 1))
    done
    if retuned; then
        echo "memory.high after the retune: $(cat "/sys/fs/cgroup$cg/memory.high")" \
            >> "$RESULTS/restricted.txt"
        again=$(alloc) && echo "again $again" >> "$RESULTS/alloc.txt"
    fi
    sync
)
[ -n "$tracer" ] && kill "$tracer"
kill -TERM "$daemon"
wait "$daemon"
rm -f "$DATA"/build*
cat "$RESULTS/alloc.txt" "$RESULTS/restricted.txt"
grep -E "restrict pid|memory.high (raised|lowered|lifted)" "$RESULTS/daemon.log" | cut -c1-300
grep -q "^0::/ioshield/" "$RESULTS/restricted.txt" || {
    echo "build-like: the writer was never restricted"
    exit 1
}
