#!/bin/sh
# The stall benchmark (facts.md §3): three innocent loads on the slow data disk while an
# offender floods the page cache, under one of these mitigations (env SCENARIO):
#   none             nothing: the default scheduler (mq-deadline + wbt)
#   thesis           the 2020 thesis's fix: bfq on the data disk, offender in the idle I/O class
#   oracle           the best hand-made fix: offender started in a cgroup with io.max wbps
#   ioshield         ioshield daemon, cgroup action
#   ioshield-ioprio  ioshield daemon, ioprio action
# Every process starts in one shared cgroup, like a desktop session, so the daemon has to find
# the offender among innocent siblings.
# The data disk runs mq-deadline (wbt on) in every scenario but `thesis`: the baseline facts.md
# measured. A 2-vCPU guest's virtio disk has 2 queues, for which the kernel would pick `none`.
# Other env: SCHEDULER (mq-deadline), DURATION (50, seconds the innocent loads run), OFFENDER_START (5),
# OFFENDER_STOP (45), ORACLE_WBPS (20000000, ~2/3 of the disk), CONFIG (daemon config; written
# here if it does not exist), DAEMON_SETTLE (3, seconds the daemon gets to attach its probes).
set -u
SCENARIO=${SCENARIO:-none}
DURATION=${DURATION:-50}
OFFENDER_START=${OFFENDER_START:-5}
OFFENDER_STOP=${OFFENDER_STOP:-45}
ORACLE_WBPS=${ORACLE_WBPS:-20000000}
CONFIG=${CONFIG:-$RESULTS/ioshield.toml}
DAEMON_SETTLE=${DAEMON_SETTLE:-3}
SCHEDULER=${SCHEDULER:-mq-deadline}
CG=/sys/fs/cgroup
DEV_NAME=${DATA_DEV#/dev/}
DEVNUM=$(cat "/sys/block/$DEV_NAME/dev")

[ "$SCENARIO" = thesis ] && SCHEDULER=bfq
echo "$SCHEDULER" > "/sys/block/$DEV_NAME/queue/scheduler" || exit 2
case $SCENARIO in
    none | oracle | thesis) ;;
    ioshield) ACTION=cgroup ;;
    ioshield-ioprio) ACTION=ioprio ;;
    *) echo "stall: unknown SCENARIO=$SCENARIO"; exit 2 ;;
esac
echo "stall: scenario=$SCENARIO duration=${DURATION}s offender ${OFFENDER_START}s-${OFFENDER_STOP}s" \
    "on $DATA_DEV ($DEVNUM), scheduler: $(cat "/sys/block/$DEV_NAME/queue/scheduler")," \
    "rotational $(cat "/sys/block/$DEV_NAME/queue/rotational")," \
    "wbt $(cat "/sys/block/$DEV_NAME/queue/wbt_lat_usec" 2> /dev/null || echo -) us"

mkdir -p "$CG/session"
echo $$ > "$CG/session/cgroup.procs"

daemon=
if [ -n "${ACTION:-}" ]; then
    [ -f "$CONFIG" ] || cat > "$CONFIG" <<TOML
[daemon]
tick = "1s"
action = "$ACTION"

[device."$DATA_DEV"]
bandwidth = "30MB/s"
TOML
    ioshield daemon --config "$CONFIG" 2> "$RESULTS/daemon.log" &
    daemon=$!
    sleep "$DAEMON_SETTLE"
    if ! kill -0 "$daemon" 2> /dev/null; then
        cat "$RESULTS/daemon.log"
        # Last, so that the host can quote it as the reason.
        echo "stall: ioshield daemon exited early: $(head -n 1 "$RESULTS/daemon.log" | cut -c1-200)"
        exit 3
    fi
fi

pids=
for load in control write multiwrite; do
    ioshield-load "$load" --duration "${DURATION}s" --dir "$DATA" --out "$RESULTS/$load.json" \
        2>> "$RESULTS/loads.log" &
    pids="$pids $!"
done

offender="ioshield-load offender --file $DATA/offender --delay ${OFFENDER_START}s \
    --duration $((OFFENDER_STOP - OFFENDER_START))s --out $RESULTS/offender.json"
case $SCENARIO in
    thesis) ionice -c3 $offender 2>> "$RESULTS/loads.log" & ;;
    oracle)
        mkdir -p "$CG/oracle"
        echo "$DEVNUM wbps=$ORACLE_WBPS" > "$CG/oracle/io.max"
        # The offender enters its cgroup before it writes anything, as if placed there by hand.
        sh -c "echo \$\$ > $CG/oracle/cgroup.procs && exec $offender" 2>> "$RESULTS/loads.log" &
        ;;
    *) $offender 2>> "$RESULTS/loads.log" & ;;
esac
pids="$pids $!"
echo "stall: offender pid $!, $(ionice -p "$!")"

failed=0
for p in $pids; do
    wait "$p" || failed=1
done

if [ -n "$daemon" ]; then
    kill -TERM "$daemon"
    wait "$daemon"
    echo "stall: daemon exit $?"
    # What the daemon left behind: it should have restored everything.
    find "$CG" -name cgroup.procs | sed "s|$CG||; s|/cgroup.procs||" > "$RESULTS/cgroups-after.txt"
    cat "$RESULTS/daemon.log"
fi

for c in "$CG" "$CG"/*/; do
    [ -f "$c/io.stat" ] && echo "${c#$CG} $(grep "^$DEVNUM " "$c/io.stat")"
done > "$RESULTS/io.stat.txt"
grep -E '^(nr_dirty|nr_writeback|nr_dirtied|nr_written) ' /proc/vmstat > "$RESULTS/vmstat.txt"
cat "$RESULTS/loads.log"
ioshield-load summarize "$RESULTS"/control.json "$RESULTS"/write.json \
    "$RESULTS"/multiwrite.json "$RESULTS"/offender.json | tee "$RESULTS/summary.txt"
exit $failed
