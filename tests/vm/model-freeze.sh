#!/bin/sh
# How long an io.cost.model write freezes the data disk (the kernel freezes the queue until
# every request in flight completes), by the disk's iocost state, with an unrestricted `dd`
# flooding the page cache from a cgroup of its own and the committing load (4 KiB + fdatasync
# every 100 ms) beside it in another (docs/bench/model-freeze.md, stop 55).
# Env: PHASES (default "off pinned off-after"), each 24 s: `off` iocost off (the bed's
# mq-deadline with wbt); `pinned` on at a 25 MB/s model, vrate 100%; `pinned-w1` the same with
# the flood at io.weight 1; `adaptive-w1` the kernel's latency control (vrate 25-100%), weight 1;
# `*-quiet` each write waits (up to 2 s) for at most 2 writes in flight; `off-after` off again
# after iocost was on. DIRTY_BYTES / DIRTY_BACKGROUND_BYTES: the kernel's limits (default: the
# bed's ratios). Six model writes per phase, 25 and 30 MB/s in turn, 2 s apart.
# Writes one "PHASE: model writes: ..." line and the commit load's summary line per phase.
set -u
CG=/sys/fs/cgroup
B=${DATA_DEV#/dev/}
D=$(cat /sys/block/$B/dev)
[ -n "${DIRTY_BYTES:-}" ] && echo "$DIRTY_BYTES" > /proc/sys/vm/dirty_bytes
[ -n "${DIRTY_BACKGROUND_BYTES:-}" ] && echo "$DIRTY_BACKGROUND_BYTES" > /proc/sys/vm/dirty_background_bytes
echo mq-deadline > /sys/block/$B/queue/scheduler
echo "+io +memory" > $CG/cgroup.subtree_control
mkdir -p $CG/flood $CG/loads
echo $$ > $CG/loads/cgroup.procs
up() { cut -d' ' -f1 /proc/uptime; }
in_flight() { awk '{print $2}' /sys/block/$B/inflight; }
model() {
    echo "$D ctrl=user model=linear rbps=1000000000 rseqiops=100000 rrandiops=100000 wbps=$1 wseqiops=$(($1 / 4096)) wrandiops=$(($1 / 4096))" > $CG/io.cost.model
}
PINNED="enable=1 ctrl=user rpct=95.00 rlat=5000 wpct=95.00 wlat=5000 min=100.00 max=100.00"
ADAPTIVE="enable=1 ctrl=user rpct=95.00 rlat=50000 wpct=95.00 wlat=50000 min=25.00 max=100.00"
echo "model-freeze: wbt $(cat /sys/block/$B/queue/wbt_lat_usec) us, nr_requests $(cat /sys/block/$B/queue/nr_requests), max_sectors_kb $(cat /sys/block/$B/queue/max_sectors_kb)"
model 25000000
phase() { # NAME QOS WEIGHT QUIET
    name=$1 qos=$2 weight=$3 quiet=$4
    if [ "$qos" = off ]; then echo "$D enable=0" > $CG/io.cost.qos; else echo "$D $qos" > $CG/io.cost.qos; fi
    echo "default $weight" > $CG/flood/io.weight 2> /dev/null
    ioshield-load commit --duration 24s --dir "$DATA" --out "$RESULTS/commit-$name.json" > /dev/null 2>&1 &
    commit=$!
    sh -c "echo \$\$ > $CG/flood/cgroup.procs; exec dd if=/dev/zero of=$DATA/flood bs=1M count=100000" 2> /dev/null &
    flood=$!
    most=0
    for k in $(seq 40); do n=$(in_flight); [ "$n" -gt "$most" ] && most=$n; usleep 100000; done
    w=25000000 out=""
    for i in 1 2 3 4 5 6; do
        [ $w = 25000000 ] && w=30000000 || w=25000000
        waited=0
        if [ "$quiet" = 1 ]; then
            while [ "$(in_flight)" -gt 2 ] && [ $waited -lt 2000 ]; do usleep 10000; waited=$((waited + 10)); done
        fi
        n=$(in_flight); t0=$(up); model $w; t1=$(up)
        out="$out $(echo "$t0 $t1" | awk '{printf "%.2f", $2 - $1}')s($n in flight, waited ${waited}ms)"
        sleep 2
    done
    kill $flood; wait $commit
    echo "$name: at most $most writes in flight in the flood's first 4 s; model writes:$out"
    ioshield-load summarize "$RESULTS/commit-$name.json" 2>&1 | tail -n 1
    sync; rm -f "$DATA/flood"; sync
}
for p in ${PHASES:-off pinned off-after}; do
    case $p in
        off | off-after) phase $p off 100 0 ;;
        pinned) phase $p "$PINNED" 100 0 ;;
        pinned-w1) phase $p "$PINNED" 1 0 ;;
        adaptive-w1) phase $p "$ADAPTIVE" 1 0 ;;
        pinned-quiet) phase $p "$PINNED" 100 1 ;;
        adaptive-w1-quiet) phase $p "$ADAPTIVE" 1 1 ;;
        *) echo "model-freeze: unknown phase $p"; exit 2 ;;
    esac
done
echo "$D enable=0" > $CG/io.cost.qos
