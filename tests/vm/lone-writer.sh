#!/bin/sh
# What holds a restricted writer that is alone on the disk: memory.high, iocost's weight, the
# model's speed, iocost's latency targets. A `dd` of zeros to the data disk in cgroup /w, an
# appender (`date >> file` twice a second) in /inn, for each restriction below; prints the
# bytes /w wrote per second (io.stat) in the first 5 s and over the next 15 s, and each second.
# Env: MODEL_BPS (23570374: the e2e's measured model in the run CI failed), REPEAT (2), ROWS
# (space-separated names of the rows below to run; all by default).
# About 15 min per kernel (each run waits for its sync), past the runner's default timeout:
#   cargo xtask vm run --kernel 6.12,6.1 --timeout 2400 --script tests/vm/lone-writer.sh --out target/lone
#   grep -h '^lone' target/lone/*/results/scenario.log
set -u
REPEAT=${REPEAT:-2}
. /scenarios/iocost-bed.sh
mkdir -p $CG/inn $CG/w
wbytes() { sed -n "s/^$DEVNUM .*wbytes=\([0-9]*\).*/\1/p" "$CG/$1/io.stat"; }
# restriction: memory.high of /w in MiB ("max": none), its io.weight, iocost latency target in
# us ("off": iocost off), and whether a second dd in /inn keeps the disk busy.
run() {
    name=$1 mh=$2 weight=$3 lat=$4 busy=$5
    case " ${ROWS:-$name} " in *" $name "*) ;; *) return ;; esac
    if [ "$mh" = max ]; then echo max > $CG/w/memory.high; else echo $((mh << 20)) > $CG/w/memory.high; fi
    echo "default $weight" > $CG/w/io.weight
    if [ "$lat" = off ]; then iocost_off; else model; qos "$lat"; fi
    [ "$busy" = yes ] && { in_cgroup inn dd if=/dev/zero of="$DATA/busy" bs=1M count=100000 & BUSY=$!; }
    in_cgroup w dd if=/dev/zero of="$DATA/big" bs=1M count=100000 &
    pid=$!
    a0=$(wbytes w); sleep 5; a=$(wbytes w); steps=""; prev=$a
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
        sleep 1; c=$(wbytes w); steps="$steps $(( (c - prev) / 100000 ))"; prev=$c
    done
    b=$(wbytes w)
    kill $pid; wait $pid 2>/dev/null
    [ "$busy" = yes ] && { kill $BUSY; wait $BUSY 2>/dev/null; }
    echo "lone $KERNEL $name: first 5 s $(( (a - a0) / 5 )) B/s, next 15 s $(( (b - a) / 15 )) B/s (model $MODEL_BPS); by second, 0.1 MB/s:$steps"
    sync; rm -f "$DATA/big" "$DATA/busy"; sync; sleep 2
}
in_cgroup inn sh -c "'while :; do date >> $DATA/innocent.log; sleep 0.5; done'" &
APPENDER=$!
i=0
while [ $i -lt "$REPEAT" ]; do
    i=$((i + 1))
    run memory.high-32M-only 32 100 off no
    run weight-1-only max 1 5000 no
    run weight-1+memory.high-8M 8 1 5000 no
    run weight-1+memory.high-16M 16 1 5000 no
    run weight-1+memory.high-32M 32 1 5000 no
    run weight-1+memory.high-64M 64 1 5000 no
    run weight-1+memory.high-128M 128 1 5000 no
    run weight-1+memory.high-32M,50ms-targets 32 1 50000 no
    run weight-1+memory.high-32M,disk-busy 32 1 5000 yes
done
kill $APPENDER
iocost_off
sync
