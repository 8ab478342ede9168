#!/bin/sh
# What an innocent pays when it arrives beside a restricted writer whose memory.high was opened
# while it wrote alone (issue 10's lead for keeping a lone writer's speed: memory.high, not the
# weight, holds it; docs/bench/lone-writer.md). A `dd` of zeros in cgroup /w held by iocost
# weight 1 (ioshield's model and measured-disk qos), its memory.high at OPEN for 15 s; then the
# innocents (`ioshield-load write` and `commit`, PHASE s) start in /inn and DELAY s later
# memory.high closes to 32 MiB, as a daemon that saw them would ("never": it stays open).
# "closed" keeps 32 MiB throughout: the baseline. Prints the innocents' summary, the writer's rate
# alone and beside them (what the disk completed, /sys/block/*/stat: io.stat counts bios as they
# are submitted, and a writer pushed to reclaim submits hundreds of MB at once), and its dirty and
# writeback bytes when they arrived.
# Env: MODEL_BPS (23570374), REPEAT (2), PHASE (40), VARIANTS (see the end).
#   cargo xtask vm run --kernel 6.12,6.1 --timeout 1800 --script tests/vm/opener.sh --out target/opener
#   grep -h -A8 '^opener' target/opener/*/results/scenario.log
set -u
REPEAT=${REPEAT:-2}
PHASE=${PHASE:-40}
VARIANTS=${VARIANTS:-"closed:32:0 open-max:max:0.2 open-max,1s:max:1 open-max,never:max:never"}
. /scenarios/iocost-bed.sh
mkdir -p $CG/inn $CG/w
# Bytes the disk completed writing (sectors of 512 bytes).
done_bytes() { awk '{ print $7 * 512 }' "/sys/block/$DEV_NAME/stat"; }
rate() { awk -v b="$1" -v t="$2" -v b2="$3" -v t2="$4" 'BEGIN { printf "%d", (b2 - b) / (t2 - t) }'; }
memstat() { awk -v k="$1" '$1 == k { print int($2 / 1048576) }' $CG/w/memory.stat; }
iocost_on
echo "default 1" > $CG/w/io.weight
high() { if [ "$1" = max ]; then echo max; else echo $(($1 << 20)); fi > $CG/w/memory.high; }
# name, memory.high in MiB while alone ("max": none), seconds until it closes ("never")
run() {
    name=$1 open=$2 delay=$3
    out=/tmp/opener-$name
    rm -rf "$out"; mkdir -p "$out"
    high "$open"
    in_cgroup w dd if=/dev/zero of="$DATA/big" bs=1M count=100000 &
    pid=$!
    sleep 5; a=$(done_bytes) ta=$(now); sleep 10; b=$(done_bytes) tb=$(now)
    dirty=$(memstat file_dirty) writeback=$(memstat file_writeback)
    loads=
    for load in write commit; do
        in_cgroup inn ioshield-load "$load" --duration "${PHASE}s" --dir "$DATA" --out "$out/$load.json" 2>> "$out/loads.log" &
        loads="$loads $!"
    done
    if [ "$delay" = never ]; then
        sleep "$PHASE"
    else
        sleep "$delay"; high 32; sleep $((PHASE - 1))
    fi
    c=$(done_bytes) tc=$(now)
    for l in $loads; do wait "$l"; done
    sleep 1
    kill $pid; wait $pid 2>/dev/null
    echo "opener $KERNEL $name: writer alone $(rate "$a" "$ta" "$b" "$tb") B/s, beside the innocents $(rate "$b" "$tb" "$c" "$tc") B/s (model $MODEL_BPS); at their arrival /w had $dirty MiB dirty, $writeback MiB under writeback; memory.high closed to 32 MiB after $delay s"
    ioshield-load summarize "$out/write.json" "$out/commit.json" || cat "$out/loads.log"
    clean_data
}
run_variants
