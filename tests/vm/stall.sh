#!/bin/sh
# The stall benchmark: three innocent loads on the slow data disk while an
# offender floods the page cache, under one of these mitigations (env SCENARIO):
#   none             nothing: the default scheduler (mq-deadline + wbt)
#   thesis           the 2020 thesis's fix: bfq on the data disk, offender in the idle I/O class
#   oracle           the best hand-made fix: offender started in a cgroup with io.max wbps
#   ioshield         ioshield daemon, cgroup action
#   ioshield-ioprio  ioshield daemon, ioprio action
# Every process starts in one shared cgroup, like a desktop session, so the daemon has to find
# the offender among innocent siblings.
# The data disk runs mq-deadline (wbt on) in every scenario but `thesis`: the baseline the first
# measurements used. A 2-vCPU guest's virtio disk has 2 queues, for which the kernel would pick `none`.
# Other env: SCHEDULER (mq-deadline), DURATION (50, seconds the innocent loads run), OFFENDER_START (5),
# OFFENDER_STOP (45), ORACLE_WBPS (20000000, ~2/3 of the disk), CONFIG (daemon config; written
# here if it does not exist), DAEMON_SETTLE (3, seconds the daemon gets to attach its probes,
# then up to 60 more until it says it runs).
# OFFENDER: what floods the page cache, from OFFENDER_START:
#   load  (default) `ioshield-load offender`: 1 MiB writes without pause until OFFENDER_STOP
#         (OFFENDER_RATE=BYTES: at most that many bytes a second, a writer under the disk's speed)
#   cp    `cp` of a 400 MB file from memory (the initramfs) to the data disk, then `sync`
#   cpslow  `cp` from a slow source (a network mount, a slow stick): a FIFO that `ioshield-load
#         offender` fills at OFFENDER_RATE (default 14000000 bytes a second) until OFFENDER_STOP,
#         copied to the data disk, then `sync`
#   tar   `tar x` of 8192 files of 32 KiB (256 MiB) from a tarball in memory, then `sync`
#   tarbig  the same tarball with one file of 200 MB after the small ones (the untar turns
#         into a copy halfway), then `sync`
# cp, cpslow and tar are jobs: offender.json records their size and completion time.
# For experiments and `cargo xtask bench` (all off or empty by default):
#   BDI              per-BDI dirty knobs of the data disk, e.g. "max_bytes=30000000 strict_limit=1" (below)
#   IOCOST_MODEL, IOCOST_QOS  iocost on the data disk (below)
#   BANDWIDTH        the data disk's bandwidth in the generated config (default "auto", as shipped)
#   EARLIER_SPEEDS   disk speeds "measured in an earlier run", as the daemon keeps them in its
#                    speeds_file: "IDENTITY=BYTES_PER_S ...", e.g. "serial:data=25100000" (the
#                    state of a machine whose disk the daemon has measured before) or
#                    "no-room:serial:data=25000000" (whose disk showed no room at that rate);
#                    the daemon keeps what it learns in results/disks.json
#   IOSHIELD_DAEMON, IOSHIELD_DEVICE  extra TOML lines, `;`-separated, for the generated config's
#                    [daemon] and data-device sections, e.g. IOSHIELD_DEVICE='memory_high = "128MiB"'
#   DAEMON_PAUSE=1   SIGSTOP the daemon once it runs and SIGCONT it when the offender starts: its
#                    BPF programs stay attached while its userspace does nothing (and it first
#                    sees the data disk only with the offender); docs/bench/before-offender.md
#   CONTROLLERS      controllers for the root cgroup's children, set before any load, e.g.
#                    "+io +memory" (what the daemon sets up at start; below)
#   DATA_MOUNT_OPTS  ext4 options for the data disk instead of the bed's, e.g. "data=writeback"
#   LRU_GEN          the kernel's multi-gen LRU (/sys/kernel/mm/lru_gen/enabled), e.g. "n" to turn
#                    it off (Debian's 6.12 has it on, 6.1 off); the "stall: lru_gen" line says what it is
#   TIMELINE=1       sample /proc/vmstat (and the daemon's /proc stat/status) every 0.5 s into
#                    timeline.txt: `uptime_s nr_dirty nr_writeback daemon_ticks daemon_rss_kb`
#   IOCOST_TRACE=1   sample the data disk's iocost rate (root io.stat cost.vrate) and write counters
#                    every 0.5 s into iocost.txt (below)
#   DISK_TRACE=1     every 0.25 s, the data disk's write counters into disk.txt (below)
#   PSI_TRACE=1      every 0.25 s, the io pressure of the machine and of the innocents' cgroup
#                    into psi.txt (below)
#   JBD2_TRACE=1     every 0.1 s, each ext4 journal's transaction count and average commit time
#                    into jbd2.txt; every commit's phases, every handle held 40 ms or more and
#                    each ext4 writeback handle's chunk and extent into jbd2-commits.txt (below),
#                    and the load offender's file's inode number into offender-inode
#   OFFENDER_TRACE=1 every 50 ms, where the fixed-size job sleeps (its state, wchan and kernel
#                    stack) and its cgroup's memory.current, memory.high and `high` events, into
#                    offender-trace.txt (below); =2 also its memory.stat's file, file_dirty,
#                    file_writeback and slab (reading memory.stat flushes the cgroup's counters)
#   COMMIT_TRACE=1   every 20 ms (50-200 ms in practice), where the commit load and the data
#                    disk's jbd2 thread wait (their kernel stacks) and the disk's in-flight
#                    requests, into commit-trace.txt (below)
#   INNOCENTS_ON=fast  the innocent loads write to the guest's disk with no throttle ($FAST) instead
#                    of the data disk: a desktop whose system disk stays fast while a copy fills a
#                    USB stick (with `--disk-mbps 10`); the loads no longer share the offender's
#                    journal, only the machine's page cache and dirty limits
#   LOADS            the innocent loads (default "control write multiwrite commit"), e.g. with
#                    `appender` (4 KiB + fdatasync once a second: a light appender) for `commit`,
#                    or `bulk` added (1 MiB through the page cache every 100 ms: a download)
#   NEXT_OFFENDER    START-STOP (seconds): a second `ioshield-load offender`, not related to the
#                    first, writes $DATA/offender-next from START to STOP
#   END_AFTER_RELEASE=S  the loads end S seconds after the daemon's log says it released the
#                    offender, DURATION at the latest
#   BPF_STATS=1      turn on kernel.bpf_stats_enabled and save the daemon's programs' run_cnt and
#                    run_time_ns (from /proc/PID/fdinfo) to bpf-stats.txt before stopping it
# clock.txt always maps the daemon log's wall clock to the loads' CLOCK_MONOTONIC.
set -u
SCENARIO=${SCENARIO:-none}
DURATION=${DURATION:-50}
OFFENDER_START=${OFFENDER_START:-5}
OFFENDER_STOP=${OFFENDER_STOP:-45}
ORACLE_WBPS=${ORACLE_WBPS:-20000000}
CONFIG=${CONFIG:-$RESULTS/ioshield.toml}
DAEMON_SETTLE=${DAEMON_SETTLE:-3}
SCHEDULER=${SCHEDULER:-mq-deadline}
OFFENDER=${OFFENDER:-load}
case ${INNOCENTS_ON:-data} in
    data) LOADS_DIR=$DATA ;;
    fast) LOADS_DIR=${FAST:?stall: INNOCENTS_ON=fast but the guest has no fast disk} ;;
    *) echo "stall: INNOCENTS_ON=$INNOCENTS_ON: not data or fast" >&2; exit 2 ;;
esac
CG=/sys/fs/cgroup
DEV_NAME=${DATA_DEV#/dev/}
DEVNUM=$(cat "/sys/block/$DEV_NAME/dev")

[ "$SCENARIO" = thesis ] && SCHEDULER=bfq
echo "$SCHEDULER" > "/sys/block/$DEV_NAME/queue/scheduler" || exit 2
# BDI: the data disk's per-BDI dirty knobs, `KNOB=VALUE` separated by spaces (for example
# "max_bytes=30000000 strict_limit=1", both from 6.2), written to /sys/class/bdi/MAJ:MIN/ before
# any load starts: the device-level backlog guard, with or without the daemon.
for knob in ${BDI:-}; do
    f=/sys/class/bdi/$DEVNUM/${knob%%=*}
    [ -e "$f" ] || { echo "stall: this kernel has no $f"; exit 2; }
    echo "${knob#*=}" > "$f" || { echo "stall: cannot write ${knob#*=} to $f"; exit 2; }
    echo "stall: bdi ${knob%%=*} = $(cat "$f")"
done
# LRU_GEN: the kernel's multi-gen LRU, set before any load starts.
if [ -n "${LRU_GEN:-}" ]; then
    echo "$LRU_GEN" > /sys/kernel/mm/lru_gen/enabled ||
        { echo "stall: cannot write $LRU_GEN to /sys/kernel/mm/lru_gen/enabled"; exit 2; }
fi
echo "stall: lru_gen enabled = $(cat /sys/kernel/mm/lru_gen/enabled 2>/dev/null || echo absent)"
# IOCOST_MODEL, IOCOST_QOS: iocost for the data disk (the root cgroup's io.cost.model and
# io.cost.qos, without the MAJ:MIN), set before the daemon starts: the daemon then gives an
# offender io.weight 1 instead of an io.max limit, which leaves the disk to the offender whenever
# nobody else uses it.
if [ -n "${IOCOST_MODEL:-}${IOCOST_QOS:-}" ]; then
    grep -qw io "$CG/cgroup.subtree_control" || echo +io > "$CG/cgroup.subtree_control" || exit 2
    [ -z "${IOCOST_MODEL:-}" ] || echo "$DEVNUM $IOCOST_MODEL" > "$CG/io.cost.model" || exit 2
    [ -z "${IOCOST_QOS:-}" ] || echo "$DEVNUM $IOCOST_QOS" > "$CG/io.cost.qos" || exit 2
    echo "stall: iocost model: $(grep "^$DEVNUM" "$CG/io.cost.model")"
    echo "stall: iocost qos: $(grep "^$DEVNUM" "$CG/io.cost.qos")"
fi
# CONTROLLERS: controllers to enable for the root cgroup's children before any load starts, e.g.
# "+io +memory" (what the daemon enables at start), to tell its set-up from what it does after.
for c in ${CONTROLLERS:-}; do
    echo "$c" > "$CG/cgroup.subtree_control" || { echo "stall: cannot enable $c"; exit 2; }
done
[ -n "${CONTROLLERS:-}" ] && echo "stall: root cgroup's children get: $(cat "$CG/cgroup.subtree_control")"
# The data disk's dirty limits as found (after BDI above), to check that the daemon's backlog
# guard (max_dirty) puts them back.
bdi_knobs() {
    for k in strict_limit max_ratio_fine; do
        [ -e "/sys/class/bdi/$DEVNUM/$k" ] && echo "$k=$(cat "/sys/class/bdi/$DEVNUM/$k")"
    done | tr '\n' ' '
}
bdi_before=$(bdi_knobs)
echo "stall: dirty limits of $DEVNUM: ${bdi_before:-none (kernel < 6.2)}"
# The data disk's iocost as found, to check that the daemon puts it back (it turns iocost on
# while it restricts a writer there).
iocost_before=$(grep "^$DEVNUM " "$CG/io.cost.qos" "$CG/io.cost.model" 2> /dev/null)
case $SCENARIO in
    none | oracle | thesis) ;;
    ioshield) ACTION=cgroup ;;
    ioshield-ioprio) ACTION=ioprio ;;
    *) echo "stall: unknown SCENARIO=$SCENARIO"; exit 2 ;;
esac
if [ -n "${DATA_MOUNT_OPTS:-}" ]; then
    umount "$DATA" && mount -t ext4 -o "noinit_itable,$DATA_MOUNT_OPTS" "$DATA_DEV" "$DATA" || {
        echo "stall: mounting $DATA_DEV with $DATA_MOUNT_OPTS failed"
        exit 1
    }
    echo "stall: $DATA_DEV mounted with $(grep " $DATA " /proc/mounts | cut -d' ' -f4)"
fi
echo "stall: scenario=$SCENARIO duration=${DURATION}s offender ${OFFENDER_START}s-${OFFENDER_STOP}s" \
    "on $DATA_DEV ($DEVNUM), scheduler: $(cat "/sys/block/$DEV_NAME/queue/scheduler")," \
    "rotational $(cat "/sys/block/$DEV_NAME/queue/rotational")," \
    "wbt $(cat "/sys/block/$DEV_NAME/queue/wbt_lat_usec" 2> /dev/null || echo -) us"
[ "$LOADS_DIR" = "$DATA" ] || echo "stall: the innocent loads write to $LOADS_DIR (${FAST_DEV:-})"

mkdir -p "$CG/session"
echo $$ > "$CG/session/cgroup.procs"

# The daemon logs wall-clock time, the loads CLOCK_MONOTONIC (= /proc/uptime in a guest that
# never suspends): one reading of each, back to back, lines them up to ~10 ms.
realtime=$(adjtimex | awk '/time.tv_sec/ {s=$2} /time.tv_usec/ {u=$2} END {printf "%d.%06d", s, u}')
echo "realtime $realtime monotonic $(cut -d' ' -f1 /proc/uptime)" > "$RESULTS/clock.txt"

# `;`-separated TOML lines from the environment, one per line.
toml_lines() { [ -n "$1" ] && echo "$1" | tr ';' '\n'; return 0; }

# The fixed-size jobs' sources live in memory (the initramfs), made before any load starts.
SRC=/offender-src
case $OFFENDER in
    load) ;;
    cp)
        mkdir -p "$SRC" && head -c 400000000 /dev/zero > "$SRC/big" || exit 2
        JOB_BYTES=400000000
        ;;
    cpslow)
        mkfifo "$SRC-fifo" || exit 2
        # What the source gave, known once the copy ends.
        JOB_BYTES=
        ;;
    tar | tarbig)
        # 8192 files of 32 KiB under small/; tarbig adds one of 200 MB after them. Written in
        # one pass by ioshield-load: awk making the files and `tar -c` took 40 s of the guest.
        big= JOB_BYTES=268435456
        if [ "$OFFENDER" = tarbig ]; then big="--big 200000000" JOB_BYTES=468435456; fi
        mkdir -p "$SRC" && ioshield-load tarball --out "$SRC/files.tar" --files 8192 \
            --file-size 32KiB $big || exit 2
        ;;
    *) echo "stall: unknown OFFENDER=$OFFENDER"; exit 2 ;;
esac

daemon=
sampler= iocost_sampler= psi_sampler= disk_sampler= jbd2_sampler=
left=
if [ -n "${ACTION:-}" ]; then
    [ -f "$CONFIG" ] || {
        printf '[daemon]\naction = "%s"\n' "$ACTION"
        # TOML forbids a key twice: the default tick only when the extra lines set none.
        case ${IOSHIELD_DAEMON:-} in *tick*) ;; *) echo 'tick = "1s"' ;; esac
        toml_lines "${IOSHIELD_DAEMON:-}"
        if [ -n "${EARLIER_SPEEDS:-}" ]; then
            printf '%s\n' $EARLIER_SPEEDS | awk -F= '{ s = s (NR > 1 ? "," : "") "\"" $1 "\": " $2 }
                END { print "{" s "}" }' > "$RESULTS/disks.json"
        fi
        # In the results, for the host to read what the daemon kept.
        printf 'speeds_file = "%s"\n' "$RESULTS/disks.json"
        # auto (the shipped default) unless told: the daemon must measure the disk itself.
        printf '\n[device."%s"]\nbandwidth = "%s"\n' "$DATA_DEV" "${BANDWIDTH:-auto}"
        toml_lines "${IOSHIELD_DEVICE:-}"
    } > "$CONFIG"
    [ "${BPF_STATS:-0}" = 1 ] && echo 1 > /proc/sys/kernel/bpf_stats_enabled
    ioshield daemon --config "$CONFIG" 2> "$RESULTS/daemon.log" &
    daemon=$!
    sleep "$DAEMON_SETTLE"
    # The settle is what the probes take on a quiet machine (2.6 s on 6.12 here); on a loaded
    # one loading them took longer and the first writer started before the daemon had set up
    # its cgroup. Wait for the line it logs once it protects the machine (up to 60 s more).
    waited=0
    while [ "$waited" -lt 600 ] && kill -0 "$daemon" 2> /dev/null \
        && ! grep -q "ioshield daemon running" "$RESULTS/daemon.log"; do
        sleep 0.1
        waited=$((waited + 1))
    done
    echo "stall: daemon ready $((waited / 10)).$((waited % 10)) s after the ${DAEMON_SETTLE} s settle"
    if ! kill -0 "$daemon" 2> /dev/null; then
        cat "$RESULTS/daemon.log"
        # Last, so that the host can quote it as the reason.
        echo "stall: ioshield daemon exited early: $(head -n 1 "$RESULTS/daemon.log" | cut -c1-200)"
        exit 3
    fi
    if [ "${DAEMON_PAUSE:-0}" = 1 ]; then
        kill -STOP "$daemon"
        (sleep "$OFFENDER_START"; kill -CONT "$daemon") &
        echo "stall: daemon stopped for the ${OFFENDER_START} s to about when the offender starts"
    fi
    # Before any writer: the cgroup set-up a restriction needs is made at start, not while the
    # first offender goes on dirtying pages (checked by `xtask vm ci`).
    {
        echo "root: $(cat "$CG/cgroup.subtree_control")"
        [ -d "$CG/ioshield" ] && echo "ioshield: $(cat "$CG/ioshield/cgroup.subtree_control")"
    } > "$RESULTS/cgroup-at-start.txt"
fi

if [ "${TIMELINE:-0}" = 1 ]; then
    # Fields 14 and 15 of /proc/PID/stat are utime and stime in clock ticks (USER_HZ = 100).
    (
        while :; do
            up=$(cut -d' ' -f1 /proc/uptime)
            vm=$(awk '$1 == "nr_dirty" {d=$2} $1 == "nr_writeback" {w=$2} END {print d, w}' /proc/vmstat)
            ticks=- rss=-
            if [ -n "$daemon" ] && [ -r "/proc/$daemon/stat" ]; then
                ticks=$(awk '{print $14 + $15}' "/proc/$daemon/stat")
                rss=$(awk '$1 == "VmRSS:" {print $2}' "/proc/$daemon/status")
            fi
            echo "$up $vm $ticks $rss"
            sleep 0.5
        done
    ) > "$RESULTS/timeline.txt" &
    sampler=$!
fi
# IOCOST_TRACE=1: every 0.5 s, the data disk's iocost rate (root io.stat `cost.vrate`, the rate
# the kernel's latency control has set, in % of the model) and its diskstats write counters, into
# iocost.txt: `uptime_s vrate sectors_written write_ms in_flight qos_max`.
if [ "${IOCOST_TRACE:-0}" = 1 ]; then
    (
        while :; do
            up=$(cut -d' ' -f1 /proc/uptime)
            vrate=$(awk -v d="$DEVNUM" '$1 == d {for (i = 2; i <= NF; i++) if ($i ~ /^cost.vrate=/) {sub(/cost.vrate=/, "", $i); print $i}}' "$CG/io.stat")
            st=$(awk '{print $7, $8, $9}' "/sys/block/$DEV_NAME/stat")
            qmax=$(awk -v d="$DEVNUM" '$1 == d {for (i = 2; i <= NF; i++) if ($i ~ /^(enable|max)=/) printf "%s ", $i}' "$CG/io.cost.qos")
            echo "$up ${vrate:--} $st ${qmax:--}"
            sleep 0.5
        done
    ) > "$RESULTS/iocost.txt" &
    iocost_sampler=$!
fi

# DISK_TRACE=1: every 0.25 s, the data disk's diskstats write counters into disk.txt:
# `uptime_s sectors_written write_ms`, write_ms being the time its writes spent in flight, summed
# (an independent reading of how fast the disk completed what it was given, for `xtask vm ci`).
# With INNOCENTS_ON=fast, the fast disk's two follow on each line.
# Shell builtins only: a fork per sample would take the guest's CPU from the loads.
if [ "${DISK_TRACE:-0}" = 1 ]; then
    fast_name=${FAST_DEV#/dev/}
    [ "$LOADS_DIR" = "$DATA" ] && fast_name=
    (
        while :; do
            read -r up _ < /proc/uptime
            read -r _ _ _ _ _ _ sectors ms _ < "/sys/block/$DEV_NAME/stat"
            if [ -n "$fast_name" ]; then
                read -r _ _ _ _ _ _ fsectors fms _ < "/sys/block/$fast_name/stat"
                echo "$up $sectors $ms $fsectors $fms"
            else
                echo "$up $sectors $ms"
            fi
            sleep 0.25
        done
    ) > "$RESULTS/disk.txt" &
    disk_sampler=$!
fi

# PSI_TRACE=1: every 0.25 s, the cumulative io stall of the machine (/proc/pressure/io) and of the
# session cgroup, where the innocent loads stay while a restricted offender is moved out, in
# microseconds, into psi.txt: `uptime_s some_total full_total session_some_total session_full_total`.
if [ "${PSI_TRACE:-0}" = 1 ]; then
    (
        totals() {
            awk '{for (i = 2; i <= NF; i++) if ($i ~ /^total=/) {sub(/total=/, "", $i); printf "%s ", $i}}' "$1"
        }
        while :; do
            echo "$(cut -d' ' -f1 /proc/uptime) $(totals /proc/pressure/io)$(totals "$CG/session/io.pressure")"
            sleep 0.25
        done
    ) > "$RESULTS/psi.txt" &
    psi_sampler=$!
fi

# JBD2_TRACE=1: every 0.1 s, `uptime_s` and per journal of /proc/fs/jbd2 `NAME transactions
# avg_commit_us`, into jbd2.txt. The kernel's average weighs each finished commit a quarter
# (j_average_commit_time), so it shows a long commit only once it ended. Shell builtins only.
# Also each commit as it ends, from the kernel's jbd2_run_stats tracepoint (its milliseconds
# locked, flushing and logging, the trace clock close to uptime), and each handle held long
# (jbd2_handle_stats), into jbd2-commits.txt.
TRACEFS=/sys/kernel/tracing
if [ "${JBD2_TRACE:-0}" = 1 ]; then
    [ -d "$TRACEFS/events/jbd2" ] || mount -t tracefs tracefs "$TRACEFS" 2> /dev/null
    echo > "$TRACEFS/trace" 2> /dev/null
    echo 1 > "$TRACEFS/events/jbd2/jbd2_run_stats/enable" 2> /dev/null
    # And each handle held 10 jiffies or more (40 ms at Debian's HZ=250), with its holder: a
    # commit waits for every open handle ("locked" in jbd2_run_stats).
    echo 'interval >= 10' > "$TRACEFS/events/jbd2/jbd2_handle_stats/filter" 2> /dev/null
    echo 1 > "$TRACEFS/events/jbd2/jbd2_handle_stats/enable" 2> /dev/null
    # And what each writeback handle of ext4 maps and submits: a handle is held while its bios
    # pass the disk's throttle, so its extent's length bounds how long a commit waits for it.
    echo 8192 > "$TRACEFS/buffer_size_kb" 2> /dev/null
    echo 1 > "$TRACEFS/events/ext4/ext4_da_write_pages/enable" 2> /dev/null
    echo 1 > "$TRACEFS/events/ext4/ext4_da_write_pages_extent/enable" 2> /dev/null
    (
        while :; do
            read -r up _ < /proc/uptime
            line="$up"
            for f in /proc/fs/jbd2/*/info; do
                n= c=
                while read -r w1 w2 w3 _; do
                    case "$w2 $w3" in
                        "transactions "*) n=$w1 ;;
                        "average transaction") c=${w1%us} ;;
                    esac
                done < "$f"
                d=${f#/proc/fs/jbd2/}
                line="$line ${d%/info} $n $c"
            done
            echo "$line"
            sleep 0.1
        done
    ) > "$RESULTS/jbd2.txt" &
    jbd2_sampler=$!
fi

# A fixed-size job run as the offender, recorded like the load generator's offender: its size,
# its start and the moment its data was on the disk.
job() {
    sleep "$OFFENDER_START"
    start=$(cut -d' ' -f1 /proc/uptime)
    case $OFFENDER in
        cp) cp "$SRC/big" "$DATA/offender-big" ;;
        cpslow)
            ioshield-load offender --file "$SRC-fifo" --rate "${OFFENDER_RATE:-14000000}" \
                --duration "$((OFFENDER_STOP - OFFENDER_START))s" --out /tmp/offender-source.json \
                2>> "$RESULTS/loads.log" &
            cp "$SRC-fifo" "$DATA/offender-big"
            ;;
        tar | tarbig)
            mkdir -p "$DATA/offender-tree" && tar -xf "$SRC/files.tar" -C "$DATA/offender-tree" ;;
    esac
    status=$?
    [ "$OFFENDER" = cpslow ] && JOB_BYTES=$(stat -c %s "$DATA/offender-big")
    # When the job itself ended: a copy to a slow disk "done" long before its data is there.
    exited=$(cut -d' ' -f1 /proc/uptime)
    sync
    end=$(cut -d' ' -f1 /proc/uptime)
    awk -v s="$start" -v x="$exited" -v e="$end" -v b="$JOB_BYTES" -v p="$$" -v l="offender-$OFFENDER" 'BEGIN {
        printf "{\"load\":\"%s\",\"pid\":%d,\"nominal_s\":0,\"start_s\":%s,\"cycle_ends_s\":[%s],", l, p, s, e
        printf "\"metrics\":null,\"bytes_written\":%d,\"bytes_per_sec\":%f,\"exited_s\":%s}\n", b, b / (e - s), x }' \
        > "$RESULTS/offender.json"
    return $status
}

pids=
LOADS=${LOADS:-control write multiwrite commit}
commit_pid=
for load in $LOADS; do
    ioshield-load "$load" --duration "${DURATION}s" --dir "$LOADS_DIR" --out "$RESULTS/$load.json" \
        2>> "$RESULTS/loads.log" &
    pids="$pids $!"
    [ "$load" = commit ] && commit_pid=$!
done

# COMMIT_TRACE=1: why the commit load's fdatasync takes long. Every 20 ms one line
# `uptime_s reads_in_flight writes_in_flight | commit load's stack | jbd2's stack` (the stacks'
# function names, innermost first, 4 frames); while jbd2 waits for open handles, also
# `|| (name) stack` (12 frames) of every task in uninterruptible sleep. The loop forks only for
# its command substitutions and the sleep, yet on the guest's 2 vCPUs it samples every 50-200 ms
# and takes CPU from the loads: a traced run is for diagnosis, not for the bench's tables.
commit_sampler=
if [ "${COMMIT_TRACE:-0}" = 1 ]; then
    jbd2=
    for p in /proc/[0-9]*; do
        read -r c < "$p/comm" 2> /dev/null || continue
        case $c in "jbd2/$DEV_NAME"*) jbd2=${p#/proc/} ;; esac
    done
    stack() {
        n=0 out=
        while read -r _ f && [ $n -lt "$2" ]; do
            f=${f%%+*}
            out="$out $f"
            n=$((n + 1))
        done < "$1" 2> /dev/null
        echo "${out:- -}"
    }
    (
        while :; do
            read -r up _ < /proc/uptime
            read -r r w < "/sys/block/$DEV_NAME/inflight"
            js=$(stack "/proc/$jbd2/stack" 4)
            line="$up $r $w |$(stack "/proc/$commit_pid/stack" 4) |$js"
            # A commit waiting for open handles: who holds them, among the tasks that sleep
            # uninterruptibly (`|| name stack` per task). 6.1 inlines the wait: jbd2 then
            # sleeps in jbd2_journal_commit_transaction itself.
            case $js in *jbd2_journal_wait_updates* | " jbd2_journal_commit_transaction"*)
                for t in /proc/[0-9]*/task/[0-9]*; do
                    read -r _ c st _ < "$t/stat" 2> /dev/null || continue
                    [ "$st" = D ] && [ "${t##*/}" != "$jbd2" ] && line="$line || $c$(stack "$t/stack" 12)"
                done
                ;;
            esac
            echo "$line"
            sleep 0.02
        done
    ) > "$RESULTS/commit-trace.txt" &
    commit_sampler=$!
fi

# OFFENDER_TRACE=1: where the fixed-size job (cp, tar) sleeps. Every 50 ms one line `uptime_s
# state wchan | stack | cur=KiB high=BYTES high_events=N` (its kernel stack's function names,
# innermost first, 8 frames; its cgroup's memory, KiB; =2 adds memory.stat's, KiB) into
# offender-trace.txt. Like COMMIT_TRACE it takes CPU from the loads: for diagnosis only.
offender_sampler=
if [ "${OFFENDER_TRACE:-0}" != 0 ] && [ "$OFFENDER" != load ]; then
    job_comm=$OFFENDER
    [ "$OFFENDER" = tarbig ] && job_comm=tar
    (
        pid=
        while :; do
            if [ -z "$pid" ] || [ ! -e "/proc/$pid" ]; then
                pid=
                for p in /proc/[0-9]*; do
                    read -r c < "$p/comm" 2> /dev/null || continue
                    [ "$c" = "$job_comm" ] && pid=${p#/proc/} && break
                done
            fi
            if [ -n "$pid" ]; then
                read -r up _ < /proc/uptime
                read -r _ _ st _ < "/proc/$pid/stat" 2> /dev/null
                read -r wc < "/proc/$pid/wchan" 2> /dev/null
                out= n=0
                while read -r _ f && [ $n -lt 8 ]; do
                    out="$out ${f%%+*}"
                    n=$((n + 1))
                done < "/proc/$pid/stack" 2> /dev/null
                read -r cgl < "/proc/$pid/cgroup" 2> /dev/null
                cgd=$CG${cgl#0::}
                read -r cur < "$cgd/memory.current" 2> /dev/null
                read -r hi < "$cgd/memory.high" 2> /dev/null
                evh=$(awk '$1 == "high" {print $2}' "$cgd/memory.events" 2> /dev/null)
                mst=
                [ "$OFFENDER_TRACE" = 2 ] && mst=$(awk '$1 == "file" || $1 == "file_dirty" ||
                    $1 == "file_writeback" || $1 == "slab" {printf " %s=%d", $1, $2 / 1024}' \
                    "$cgd/memory.stat" 2> /dev/null)
                echo "$up ${st:--} ${wc:--} |${out:- -} | cur=$((${cur:-0} / 1024)) high=${hi:--} high_events=${evh:--}$mst"
            fi
            sleep 0.05
        done
    ) > "$RESULTS/offender-trace.txt" &
    offender_sampler=$!
fi

offender="ioshield-load offender --file $DATA/offender --delay ${OFFENDER_START}s \
    --duration $((OFFENDER_STOP - OFFENDER_START))s --out $RESULTS/offender.json"
[ -n "${OFFENDER_RATE:-}" ] && offender="$offender --rate $OFFENDER_RATE"
[ "$OFFENDER" = load ] || offender=job
case $SCENARIO in
    thesis)
        if [ "$OFFENDER" = load ]; then
            ionice -c3 $offender 2>> "$RESULTS/loads.log" &
        else
            (ionice -c3 -p "$(sh -c 'echo $PPID')"; job) 2>> "$RESULTS/loads.log" &
        fi
        ;;
    oracle)
        mkdir -p "$CG/oracle"
        echo "$DEVNUM wbps=$ORACLE_WBPS" > "$CG/oracle/io.max"
        # The offender enters its cgroup before it writes anything, as if placed there by hand.
        if [ "$OFFENDER" = load ]; then
            sh -c "echo \$\$ > $CG/oracle/cgroup.procs && exec $offender" 2>> "$RESULTS/loads.log" &
        else
            (sh -c 'echo $PPID' > "$CG/oracle/cgroup.procs"; job) 2>> "$RESULTS/loads.log" &
        fi
        ;;
    *) $offender 2>> "$RESULTS/loads.log" & ;;
esac
pids="$pids $!"
offender_pid=$!
echo "stall: offender pid $!, $(ionice -p "$!")"
# NEXT_OFFENDER: another writer, not related to the first, from START to STOP.
if [ -n "${NEXT_OFFENDER:-}" ]; then
    next_start=${NEXT_OFFENDER%-*} next_stop=${NEXT_OFFENDER#*-}
    ioshield-load offender --file "$DATA/offender-next" --delay "${next_start}s" \
        --duration "$((next_stop - next_start))s" --out "$RESULTS/offender-next.json" \
        2>> "$RESULTS/loads.log" &
    pids="$pids $!"
    echo "stall: next offender pid $!"
fi

# END_AFTER_RELEASE=S: the loads end S seconds after the daemon released the offender, not at
# DURATION: a run that waits for the release of a backlog (written 19-63 s after the offender
# stopped) then costs the VM time that wait took, not its worst case. SIGTERM ends a load
# cleanly, its record written.
ender=
if [ -n "${END_AFTER_RELEASE:-}" ] && [ -n "$daemon" ]; then
    (while ! grep -q "release pid $offender_pid " "$RESULTS/daemon.log"; do sleep 1; done
        echo "stall: the offender released; the loads end in $END_AFTER_RELEASE s"
        sleep "$END_AFTER_RELEASE"
        kill -TERM $pids 2> /dev/null) &
    ender=$!
fi

failed=0
for p in $pids; do
    wait "$p" || failed=1
done
[ -n "$ender" ] && kill "$ender" 2> /dev/null

[ -n "$sampler" ] && kill "$sampler"
[ -n "$iocost_sampler" ] && kill "$iocost_sampler"
[ -n "$psi_sampler" ] && kill "$psi_sampler"
[ -n "$jbd2_sampler" ] && kill "$jbd2_sampler"
if [ "${JBD2_TRACE:-0}" = 1 ]; then
    echo 0 > "$TRACEFS/events/jbd2/jbd2_run_stats/enable" 2> /dev/null
    echo 0 > "$TRACEFS/events/jbd2/jbd2_handle_stats/enable" 2> /dev/null
    echo 0 > "$TRACEFS/events/ext4/ext4_da_write_pages/enable" 2> /dev/null
    echo 0 > "$TRACEFS/events/ext4/ext4_da_write_pages_extent/enable" 2> /dev/null
    grep -E "jbd2_(run|handle)_stats|ext4_da_write_pages" "$TRACEFS/trace" \
        > "$RESULTS/jbd2-commits.txt" 2> /dev/null
    # Whose extents are the load offender's.
    [ -e "$DATA/offender" ] && stat -c %i "$DATA/offender" > "$RESULTS/offender-inode"
fi
[ -n "$disk_sampler" ] && kill "$disk_sampler"
[ -n "$commit_sampler" ] && kill "$commit_sampler"
[ -n "$offender_sampler" ] && kill "$offender_sampler"

if [ -n "$daemon" ]; then
    if [ "${BPF_STATS:-0}" = 1 ]; then
        for f in /proc/$daemon/fdinfo/*; do
            grep -q '^run_cnt' "$f" 2> /dev/null &&
                echo "$(grep -E '^(prog_type|prog_id|prog_tag|run_time_ns|run_cnt):' "$f" | tr -s '\t\n' '  ')"
        done > "$RESULTS/bpf-stats.txt"
    fi
    [ "${DAEMON_PAUSE:-0}" = 1 ] && kill -CONT "$daemon"
    kill -TERM "$daemon"
    wait "$daemon"
    echo "stall: daemon exit $?"
    # What the daemon left behind: it must have removed every cgroup it made (checked below).
    find "$CG" -name cgroup.procs | sed "s|$CG||; s|/cgroup.procs||" > "$RESULTS/cgroups-after.txt"
    left=$(grep '^/ioshield' "$RESULTS/cgroups-after.txt" | tr '\n' ' ')
    iocost_after=$(grep "^$DEVNUM " "$CG/io.cost.qos" "$CG/io.cost.model" 2> /dev/null)
    # A disk the kernel had not set iocost up for keeps a line once it has (off, auto model).
    if [ -n "$iocost_before" ] && [ "$iocost_after" != "$iocost_before" ] ||
        { [ -z "$iocost_before" ] && printf '%s\n' "$iocost_after" | grep -qE 'enable=1|ctrl=user'; }; then
        left="$left iocost on $DEVNUM: before '$iocost_before', after '$iocost_after'"
    fi
    bdi_after=$(bdi_knobs)
    if [ "$bdi_after" != "$bdi_before" ]; then
        left="$left dirty limits of $DEVNUM: before '$bdi_before', after '$bdi_after'"
    fi
    cat "$RESULTS/daemon.log"
fi

for c in "$CG" "$CG"/*/; do
    [ -f "$c/io.stat" ] && echo "${c#$CG} $(grep "^$DEVNUM " "$c/io.stat")"
done > "$RESULTS/io.stat.txt"
grep -E '^(nr_dirty|nr_writeback|nr_dirtied|nr_written) ' /proc/vmstat > "$RESULTS/vmstat.txt"
cat "$RESULTS/loads.log"
# shellcheck disable=SC2046 # one record per load
ioshield-load summarize $(for load in $LOADS; do echo "$RESULTS/$load.json"; done) \
    "$RESULTS"/offender.json | tee "$RESULTS/summary.txt"
if [ -n "$left" ]; then
    # Last, so that the host can quote it as the reason.
    echo "stall: the daemon left changes behind after it exited: $left"
    failed=1
fi
exit $failed
