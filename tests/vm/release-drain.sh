#!/bin/sh
# What innocents pay when a weight-held writer's job ends with its backlog still dirty, and the
# restriction is released at once (its cgroup removed, iocost put back 10 s later, as the daemon
# does) or only once the backlog is written (docs/bench/memory-high-weight.md: without
# memory.high the committing load's longest pauses came at that moment). A `dd` in /par/w held by
# io.weight 1 (its parent's weight 1 too, as under ioshield's parent cgroup; ioshield's model of
# MODEL_BPS and measured-disk qos, set by hand) writes for WRITE s beside `ioshield-load write`
# and `commit` in /inn (PHASE s), then exits.
# Variants (name:memory.high of /w in MiB or max:release):
#   now    w removed at the writer's exit, iocost off 10 s later
#   drain  w removed once its dirty and writeback pages are under 1 MiB (70 s at most), iocost
#          off then
# Prints the innocents' longest pauses before and after the exit, and how long the drain took.
# Env: MODEL_BPS (23570374), REPEAT (2), WRITE (20), PHASE (100: the drain of a writer that filled
# the dirty limit, up to 70 s, and some time after it), VARIANTS (see the end).
#   cargo xtask vm run --kernel 6.12,6.1 --timeout 1800 --script tests/vm/release-drain.sh --out target/drain
#   grep -h -A3 '^drain' target/drain/*/results/scenario.log
set -u
REPEAT=${REPEAT:-2}
WRITE=${WRITE:-20}
PHASE=${PHASE:-100}
VARIANTS=${VARIANTS:-"32M,now:32:now max,now:max:now max,drain:max:drain"}
. /scenarios/iocost-bed.sh
mkdir -p $CG/inn $CG/par
echo "+io +memory" > $CG/par/cgroup.subtree_control || exit 2
echo "default 1" > $CG/par/io.weight
W=$CG/par/w
# Removes the writer's cgroup, retrying for up to 5 s, and says so if it cannot: while a killed
# writer went on (the first version's fault), every rmdir failed with EBUSY and the release
# measured was none.
remove_w() {
    n=0
    until rmdir $W 2> /dev/null; do
        n=$((n + 1)); [ $n -ge 50 ] && { echo "  $W not removed: $(cat $W/cgroup.procs | wc -l) processes"; return 1; }
        sleep 0.1
    done
}
backlog_mib() { awk '$1 == "file_dirty" || $1 == "file_writeback" { s += $2 } END { print int(s / 1048576) }' $W/memory.stat; }
# The innocents' longest cycle ending before and after time $2 in a load's record $1, and when
# the one after ended.
split_longest() {
    tr ',[]' '\n\n\n' < "$1" | awk -v t="$2" -F: '
        /"start_s"/ { prev = $2 } /"nominal_s"/ { nom = $2 }
        /^[0-9.]+$/ && prev != "" {
            d = $1 - prev - nom
            if ($1 < t) { if (d > b) b = d } else if (d > a) { a = d; at = $1 - t }
            prev = $1
        }
        END { printf "%.3f s before, %.3f s after (ending %.1f s after)", b, a, at }'
}
run() {
    name=$1 high=$2 release=$3
    out=/tmp/drain-$name
    rm -rf "$out"; mkdir -p "$out" $W
    echo "default 1" > $W/io.weight
    if [ "$high" = max ]; then echo max; else echo $((high << 20)); fi > $W/memory.high
    iocost_on
    loads=
    for load in write commit; do
        in_cgroup inn ioshield-load "$load" --duration "${PHASE}s" --dir "$DATA" --out "$out/$load.json" 2>> "$out/loads.log" &
        loads="$loads $!"
    done
    sleep 2
    in_cgroup par/w dd if=/dev/zero of="$DATA/big" bs=1M count=100000 &
    pid=$!
    sleep "$WRITE"
    kill $pid; wait $pid 2>/dev/null
    exit_at=$(now) left=$(backlog_mib)
    if [ "$release" = drain ]; then
        waited=0
        while [ "$(backlog_mib)" -ge 1 ] && [ $waited -lt 700 ]; do sleep 0.1; waited=$((waited + 1)); done
        drained=$(awk -v a="$exit_at" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
        [ $waited -ge 700 ] && drained="$drained (given up with $(backlog_mib) MiB left)"
        remove_w; iocost_off
    else
        remove_w; sleep 10; iocost_off; drained=-
    fi
    for l in $loads; do wait "$l"; done
    echo "drain $KERNEL $name: the writer left $left MiB dirty or under writeback at its exit; drained in $drained s"
    for load in write commit; do
        [ -f "$out/$load.json" ] && echo "  $load longest $(split_longest "$out/$load.json" "$exit_at") the exit" ||
            { echo "  $load: no record"; cat "$out/loads.log"; }
    done
    ioshield-load summarize "$out/write.json" "$out/commit.json"
    clean_data
}
run_variants
