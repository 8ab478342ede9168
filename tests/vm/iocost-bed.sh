# Sourced by the guest scripts that set the data disk's iocost up by hand (lone-writer.sh,
# opener.sh, release-drain.sh) as `. /scenarios/iocost-bed.sh`: the runner puts every script of
# tests/vm there. mq-deadline on the data disk, io and memory for the root's children, and:
#   model          ioshield's linear model of a disk of MODEL_BPS (23570374: the e2e's measured
#                  model in the run CI failed in stop 29)
#   qos [LAT]      its io.cost.qos for a measured disk, latency targets LAT us (5000), on
#   iocost_on      both; iocost_off turns it off
#   in_cgroup CG CMD...   CMD in cgroup CG; only in the background (`&`): the exec makes `$!` the
#                  command itself, so that killing it stops it (without, the kill hit a subshell
#                  and the writer went on through later runs, filling the disk)
#   now            seconds since boot, the loads' clock
#   clean_data     removes what a run left on the data disk (its writer's file, the loads' logs)
#   run_variants   REPEAT times, `run NAME A B` for every NAME:A:B of VARIANTS; then iocost off
CG=/sys/fs/cgroup
MODEL_BPS=${MODEL_BPS:-23570374}
DEV_NAME=${DATA_DEV#/dev/}
DEVNUM=$(cat "/sys/block/$DEV_NAME/dev")
echo mq-deadline > "/sys/block/$DEV_NAME/queue/scheduler" || exit 2
echo "+io +memory" > $CG/cgroup.subtree_control || exit 2
model() {
    echo "$DEVNUM ctrl=user model=linear rbps=1000000000 rseqiops=100000 rrandiops=100000 wbps=$MODEL_BPS wseqiops=$((MODEL_BPS / 4096)) wrandiops=$((MODEL_BPS / 4096))" > $CG/io.cost.model
}
qos() {
    lat=${1:-5000}
    echo "$DEVNUM enable=1 ctrl=user rpct=95.00 rlat=$lat wpct=95.00 wlat=$lat min=100.00 max=100.00" > $CG/io.cost.qos
}
iocost_on() { model; qos; }
iocost_off() { echo "$DEVNUM enable=0" > $CG/io.cost.qos; }
in_cgroup() { cg=$1; shift; exec sh -c "echo \$\$ > $CG/$cg/cgroup.procs; exec $*"; }
now() { cut -d' ' -f1 /proc/uptime; }
clean_data() { sync; rm -f "$DATA/big" "$DATA"/write-*.log "$DATA"/commit-*.log; sync; sleep 2; }
run_variants() {
    i=0
    while [ $i -lt "$REPEAT" ]; do
        i=$((i + 1))
        for v in $VARIANTS; do
            name=${v%%:*} rest=${v#*:}
            run "$name" "${rest%%:*}" "${rest#*:}"
        done
    done
    iocost_off
    sync
}
