#!/bin/sh
# How long each write a retune makes takes while a writer forced above the disk's speed has
# filled the disk's queue (a speed-probe room step on a disk without that room): io.max,
# io.weight, memory.high under what the cgroup holds, and io.cost.qos, which on 6.12 freezes the
# queue until every request in flight completes (docs/bench/speed-probe.md, stop 50).
# Env: MODEL_BPS (25000000, the assumed disk), FORCED_PCT (174: the rate forced to 43.5 MB/s),
# REPEAT (3), SCHEDULER (the bed's mq-deadline; `none` lets hundreds of requests queue in the
# driver). One line per repeat in RESULTS/qos-freeze.txt.
MODEL_BPS=${MODEL_BPS:-25000000}
FORCED_PCT=${FORCED_PCT:-174}
REPEAT=${REPEAT:-3}
. /scenarios/iocost-bed.sh
[ -z "${SCHEDULER:-}" ] || echo "$SCHEDULER" > "/sys/block/$DEV_NAME/queue/scheduler" || exit 2
took() { echo "$1 $2" | awk '{printf "%.2f", $1 - $2}'; }
forced() {
    echo "$DEVNUM enable=1 ctrl=user rpct=95.00 rlat=50000 wpct=95.00 wlat=50000 min=$1 max=$1" > $CG/io.cost.qos
}
in_flight() { awk '{print $2}' "/sys/block/$DEV_NAME/inflight"; }
mkdir -p $CG/w
model
forced "$FORCED_PCT"
echo "default 1" > $CG/w/io.weight
echo 41M > $CG/w/memory.high
in_cgroup w dd if=/dev/zero of="$DATA/big" bs=1M count=100000 2> /dev/null &
writer=$!
i=0
while [ $i -lt "$REPEAT" ]; do
    i=$((i + 1))
    sleep 5
    queued=$(in_flight)
    t0=$(now); echo "$DEVNUM wbps=$MODEL_BPS" > $CG/w/io.max
    t1=$(now); echo "$DEVNUM wbps=max" > $CG/w/io.max
    t2=$(now); echo "default 2" > $CG/w/io.weight
    t3=$(now); echo "default 1" > $CG/w/io.weight
    t4=$(now); echo 8M > $CG/w/memory.high
    t5=$(now); queued_then=$(in_flight)
    forced $((FORCED_PCT + 1))
    t6=$(now)
    echo "$KERNEL $(grep -o "\[[^]]*\]" "/sys/block/$DEV_NAME/queue/scheduler") run $i: $queued writes in flight ($queued_then at the qos write): io.max $(took "$t1" "$t0") s and back $(took "$t2" "$t1") s, io.weight $(took "$t3" "$t2") s and back $(took "$t4" "$t3") s, memory.high 41M to 8M $(took "$t5" "$t4") s, io.cost.qos $(took "$t6" "$t5") s" \
        | tee -a "$RESULTS/qos-freeze.txt"
    echo 41M > $CG/w/memory.high
done
kill "$writer"
wait "$writer" 2> /dev/null
iocost_off
exit 0
