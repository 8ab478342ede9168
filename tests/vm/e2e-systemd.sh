#!/bin/bash
# End-to-end test of the ioshield Debian package on a real systemd system (run by
# `cargo xtask vm e2e`, see xtask/src/vm/e2e.rs). The guest is Debian 12 booted with systemd as
# PID 1; this script is the oneshot `ioshield-e2e.service`. It installs the package with dpkg, runs
# a heavy writer and an innocent loop in one scope (like a login session), and checks that the
# daemon moves only the writer into a limited scope of its own in the session's slice, bound to
# the session, holds it by IOWeight=1 under iocost (turned on by the daemon: the kernel's rate
# control of an assumed slow disk at first, then a model from the disk's measured speed, pinned,
# once the probe has the disk measured), lifts the limits again and puts the disk's
# iocost back, restricts again after a restart, undoes everything on stop;
# that a service whose main process writes is limited in place and put back exactly; that a
# user's own unit is limited through that user's systemd and stays where it is; that with the
# shipped iocost = "auto" the limit is IOWriteBandwidthMax= (weights need "on" there); that the
# next instance after a SIGKILL puts limits and iocost back; that an encrypted disk (dm-crypt, as LUKS) is judged by the speed kept under its UUID, limited through the disk below it, never measured by that limit, and with nothing kept measured as the disk while its writer keeps most of it; and that the package removes and purges cleanly. It also measures a
# copy in user.slice next to a committing service in system.slice, with and without ioshield.
#
# Environment (from the runner): DEB (the package), DATA_DEV (the 30 MB/s disk), DATA (its mount
# point), RESULTS (saved to the host), E2E_MEASURE (1: also the baselines of the MEASURE lines).
# Every check prints `PASS name` or `FAIL name: detail`; the last line is
# `e2e: N passed, M failed`, and the exit status is 1 if anything failed.
set -u
PASSED=0
FAILED=0
CHECKS="$RESULTS/checks.txt"
CTL=/run/e2e
mkdir -p "$CTL"
: > "$CHECKS"

pass() { echo "PASS $1" | tee -a "$CHECKS"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL $1: $2" | tee -a "$CHECKS"; FAILED=$((FAILED + 1)); }
# check NAME DETAIL CMD...: PASS when CMD succeeds, else FAIL with DETAIL.
check() {
    local name=$1 detail=$2
    shift 2
    if "$@"; then pass "$name"; else fail "$name" "$detail"; fi
}
# wait_for SECONDS CMD...: polls CMD every half second until it succeeds or time runs out.
wait_for() {
    local end=$((SECONDS + $1))
    shift
    until "$@"; do
        [ "$SECONDS" -ge "$end" ] && return 1
        sleep 0.5
    done
}
log() { echo "e2e: $*"; }
# The daemon's journal since the unix time $1, message text only.
journal_since() { journalctl -u ioshield -o cat --no-pager --since "@$1" 2>/dev/null; }
journal_has() { journal_since "$1" | grep -q -- "$2"; }
# start_ioshield SINCE: starts the daemon and waits for its probes (SINCE: unix time, taken before).
start_ioshield() {
    systemctl start ioshield
    wait_for 90 journal_has "$1" "probes attached"
}
# latency CASE START PID [SINCE]: how long after START (unix time with fractions, taken when the
# writer was told to write, or SINCE) the daemon logged `restrict pid PID`; a TIME line in the
# results.
latency() {
    local at since=${4:-the writer was told to write}
    at=$(journalctl -u ioshield -o short-unix --no-pager --since "@${2%.*}" 2>/dev/null |
        grep -m1 " restrict pid $3 " | awk '{print $1}')
    echo "TIME $1: $(awk -v a="${at:-0}" -v b="$2" -v since="$since" 'BEGIN { if (a > 0) printf "restricted %.2f s after %s", a - b, since; else printf "not restricted" }')" |
        tee -a "$CHECKS"
}
now() { date +%s.%N; }
cgroup_of() { sed -n 's/^0:://p' "/proc/$1/cgroup" 2>/dev/null; }
in_unit() { cgroup_of "$1" | grep -q "/$2\$"; }
# No write limit left on the process's cgroup, as the kernel shows it (io.max, io.weight).
unlimited() {
    local cg="/sys/fs/cgroup$(cgroup_of "$1")"
    [ -d "/proc/$1" ] && ! grep -qE 'wbps=[0-9]' "$cg/io.max" && ! grep -qx 'default 1' "$cg/io.weight"
}
# The scope ioshield moved a process into, aside from a writer it holds in their scope.
aside_scope_of() { cgroup_of "$1" | grep -o 'ioshield-[0-9]*-r[0-9]*-aside-[0-9-]*\.scope$'; }
prop() { systemctl show "$1" -p "$2" --value 2>/dev/null; }
# The unit has no write limit (any more).
no_write_limit() { case "$(prop "$1" IOWriteBandwidthMax)" in "" | *infinity*) true ;; *) false ;; esac; }
# The unit is held by weight: IOWeight=1 (the daemon's iocost does the holding).
weighted() { test "$(prop "$1" IOWeight)" = 1; }
# Neither a write limit nor ioshield's weight.
unheld() { no_write_limit "$1" && ! weighted "$1"; }
# The data disk's iocost settings, as the root cgroup shows them (without MAJ:MIN).
DEVNUM=$(cat "/sys/block/${DATA_DEV#/dev/}/dev")
iocost_qos() { sed -n "s/^$DEVNUM //p" /sys/fs/cgroup/io.cost.qos; }
iocost_model() { sed -n "s/^$DEVNUM //p" /sys/fs/cgroup/io.cost.model; }
# ioshield's QoS (act/iocost.rs QOS): on, user-set, the rate pinned at the model's.
IOSHIELD_QOS="enable=1 ctrl=user rpct=95.00 rlat=5000 wpct=95.00 wlat=5000 min=100.00 max=100.00"
iocost_ours() { test "$(iocost_qos)" = "$IOSHIELD_QOS"; }
# Before the disk is measured: the rate held at the model (act/iocost.rs HELD_QOS, ioshield's
# QoS when held at the model itself), or, while the speed probe listens or once it forced the
# rate up, under the kernel's latency control (ADAPTIVE_QOS).
iocost_unmeasured() {
    iocost_qos | grep -qE '^enable=1 ctrl=user rpct=95.00 rlat=(5000|50000) wpct=95.00 wlat=(5000|50000) min=[0-9]+.00 max=[0-9]+.00$'
}
model_wbps() { iocost_model | sed -n 's/.* wbps=\([0-9]*\) .*/\1/p'; }
# Before the daemon ever restricted anything: what every undo must put back.
QOS0=$(iocost_qos)
MODEL0=$(iocost_model)
# A disk the kernel had not set iocost up for keeps a line once it has: then off and automatic
# (no enable=1, no ctrl=user) is as it was; else the lines as they were.
# The data disk's iocost key: "on", or the shipped default (the line taken out); reloaded as
# SIGHUP does, and waited for.
iocost_config() {
    local t
    t=$(date +%s)
    sed -i '/^iocost = "on"$/d' /etc/ioshield/ioshield.toml
    [ "$1" = on ] && echo 'iocost = "on"' >> /etc/ioshield/ioshield.toml
    systemctl reload ioshield
    wait_for 10 journal_has "$t" "configuration reloaded"
}
iocost_restored() {
    if [ -z "$QOS0$MODEL0" ]; then
        ! printf '%s\n%s\n' "$(iocost_qos)" "$(iocost_model)" | grep -qE 'enable=1|ctrl=user'
    else
        test "$(iocost_qos)" = "$QOS0" -a "$(iocost_model)" = "$MODEL0"
    fi
}
# Off again after a release (act/iocost.rs settle_lingering): the QoS as it was, the model as it
# was or ioshield's linear one, kept for the next restriction and put back at stop.
iocost_off() {
    if [ -z "$QOS0$MODEL0" ]; then
        ! iocost_qos | grep -qE 'enable=1|ctrl=user'
    else
        test "$(iocost_qos)" = "$QOS0"
    fi && { test "$(iocost_model)" = "$MODEL0" ||
        iocost_model | grep -qE '^ctrl=user model=linear rbps=1000000000 rseqiops=100000 '; }
}
# Processes left in ioshield's scopes that still have a write limit, as "scope: pids".
limited_leftovers() {
    local dir unit pids
    for dir in /sys/fs/cgroup/*.slice/ioshield-*.scope /sys/fs/cgroup/*/*.slice/ioshield-*.scope; do
        [ -d "$dir" ] || continue
        unit=${dir##*/}
        pids=$(tr '\n' ' ' < "$dir/cgroup.procs")
        [ -n "$pids" ] || continue
        unheld "$unit" && continue
        echo "$unit: $pids"
    done
}
snapshot() {
    {
        echo "== $1"
        systemd-cgls --no-pager /system.slice 2>&1
        echo "io.cost.qos: $(iocost_qos)"
        echo "io.cost.model: $(iocost_model)"
        for f in /sys/fs/cgroup/system.slice/ioshield-*.scope/io.max /sys/fs/cgroup/system.slice/ioshield-*.scope/io.weight \
            /sys/fs/cgroup/system.slice/ioshield-*.scope/io.stat \
            /sys/fs/cgroup/system.slice/fake-session.scope/io.stat; do
            [ -e "$f" ] && echo "$f: $(cat "$f")"
        done
    } >> "$RESULTS/cgroups.txt"
}

# --- install --------------------------------------------------------------------------------
T0=$(date +%s)
log "installing $DEB"
if dpkg -i "$DEB" > "$RESULTS/dpkg-install.log" 2>&1; then
    pass install
else
    fail install "dpkg -i exited $?: $(tail -n 5 "$RESULTS/dpkg-install.log" | tr '\n' ' ')"
fi
cat "$RESULTS/dpkg-install.log"
check enabled "systemctl is-enabled: $(systemctl is-enabled ioshield 2>&1)" \
    test "$(systemctl is-enabled ioshield 2>/dev/null)" = enabled
# Loading and attaching the BPF programs takes a while under emulation.
wait_for 90 journal_has "$T0" "probes attached"
check active-after-install "systemctl is-active: $(systemctl is-active ioshield)" \
    test "$(systemctl is-active ioshield)" = active
check probes-attached "no 'probes attached' in journalctl -u ioshield" journal_has "$T0" "probes attached"

# --- configure: the shipped defaults (bandwidth and action auto: the daemon measures the disk
# and acts through systemd), with shorter smoothing and hold, so the release comes within the
# test's patience, and iocost = "on" (on systemd hosts the default, "auto", keeps
# IOWriteBandwidthMax=: checked in the last sections, where the line is taken out).
mkdir -p /etc/ioshield
cat > /etc/ioshield/ioshield.toml <<EOF
[daemon]
tau = "4s"
[device."$DATA_DEV"]
hold = "5s"
iocost = "on"
EOF
check check-config "$(ioshield check-config /etc/ioshield/ioshield.toml 2>&1 | tail -n 3 | tr '\n' ' ')" \
    ioshield check-config /etc/ioshield/ioshield.toml
# The speed estimator's periods go to the journal, so that a disk speed far off (38.7 MB/s for
# the 30 MB/s disk once) can be read afterwards; the drop-in goes before the purge check.
mkdir -p /etc/systemd/system/ioshield.service.d
printf '[Service]\nEnvironment=IOSHIELD_LOG=info,ioshield::detect::bandwidth=debug\n' \
    > /etc/systemd/system/ioshield.service.d/e2e-log.conf
systemctl daemon-reload
T1=$(date +%s)
systemctl restart ioshield
wait_for 90 journal_has "$T1" "probes attached"
check active-after-restart "systemctl is-active: $(systemctl is-active ioshield)" \
    test "$(systemctl is-active ioshield)" = active
check systemd-backend "the daemon did not choose systemd for the cgroup action: $(journal_since "$T1" | grep -i action | head -n 3 | tr '\n' ' ')" \
    journal_has "$T1" "cgroup action through systemd"

# --- a writer and an innocent loop share one scope, like a login session ---------------------
cat > "$CTL/session.sh" <<'EOF'
# Innocent: small appends twice a second. Writer: 1 MiB buffered writes while $CTL/write exists,
# idle (but alive) otherwise, gone once $CTL/quit exists. The writer leads a session of its own
# (setsid, as a service's main process does): that must not hide it. Without job control the
# background job is no group leader, so setsid execs in place and $! is the writer.
sh -c 'echo $$ > "$CTL/innocent.pid"; while :; do date >> "$DATA/innocent.log"; sleep 0.5; done' &
setsid perl -e '
    my ($file, $ctl) = @ARGV;
    open(my $f, ">", $file) or die "$file: $!";
    my $buf = "\0" x (1 << 20);
    my $written = 0;
    until (-e "$ctl/quit") {
        if (-e "$ctl/write") {
            syswrite($f, $buf) or die "write: $!";
            # Stay within the 8 GiB disk: start over at 2 GiB.
            if (($written += 1 << 20) >= 2 << 30) { seek($f, 0, 0); $written = 0; }
        } else {
            select(undef, undef, undef, 0.2);
        }
    }' "$DATA/big" "$CTL" &
echo $! > "$CTL/writer.pid"
wait
EOF
T2=$(date +%s)
CTL=$CTL DATA=$DATA systemd-run --scope --unit=fake-session.scope --description="fake login session" \
    --property=TasksMax=99 --property=MemoryMax=3G -- bash "$CTL/session.sh" > "$RESULTS/fake-session.log" 2>&1 &
wait_for 20 test -s "$CTL/writer.pid" -a -s "$CTL/innocent.pid"
WRITER=$(cat "$CTL/writer.pid" 2>/dev/null)
INNOCENT=$(cat "$CTL/innocent.pid" 2>/dev/null)
log "writer pid ${WRITER:-?}, innocent pid ${INNOCENT:-?}"
check session-scope "writer in $(cgroup_of "$WRITER"), innocent in $(cgroup_of "$INNOCENT")" \
    eval 'in_unit "$WRITER" fake-session.scope && in_unit "$INNOCENT" fake-session.scope'
check writer-leads-its-session "writer $WRITER is in session $(ps -o sid= -p "${WRITER:-0}" | tr -d ' ')" \
    test "$(ps -o sid= -p "${WRITER:-0}" | tr -d ' ')" = "$WRITER"
# Only now: ioshield restricts a writer within ~50 ms of its first write (the kernel's burst
# report), so the placement above is checked before it writes.
GO=$(now)
touch "$CTL/write"

wait_for 120 journal_has "$T2" "^restrict pid"
RESTRICT=$(journal_since "$T2" | grep -m1 "^restrict pid")
latency shared-scope "$GO" "$WRITER"
log "journal: ${RESTRICT:-no restrict line}"
check restrict-logged "no 'restrict pid' in the journal within 120 s" test -n "$RESTRICT"
check restrict-chose-writer "expected pid $WRITER: $RESTRICT" \
    eval 'echo "$RESTRICT" | grep -q "^restrict pid $WRITER "'
# Held in its session's scope, the innocent moved aside into a scope of its own in the same
# slice, bound to the session (act/placement.rs: moved out, the writer's file would stay written
# through the session's scope, unlimited).
SCOPE=fake-session.scope
wait_for 10 aside_scope_of "$INNOCENT" > /dev/null
ASIDE=$(aside_scope_of "$INNOCENT")
snapshot "restricted"
check writer-held-in-its-session "writer's cgroup is $(cgroup_of "$WRITER")" \
    in_unit "$WRITER" fake-session.scope
check innocent-moved-aside "innocent's cgroup is $(cgroup_of "$INNOCENT")" \
    eval 'cgroup_of "$INNOCENT" | grep -q "^/system.slice/ioshield-[0-9]*-r[0-9]*-aside-[0-9-]*\.scope$"'
check aside-bound-to-session "BindsTo of ${ASIDE:-no scope}: $(prop "${ASIDE:-none}" BindsTo)" \
    eval 'prop "$ASIDE" BindsTo | grep -qw fake-session.scope'
# Its TasksMax= and MemoryMax= go with it (never widen what a process may do).
check aside-keeps-limits "${ASIDE:-no scope}: TasksMax=$(prop "${ASIDE:-none}" TasksMax) MemoryMax=$(prop "${ASIDE:-none}" MemoryMax)" \
    eval 'test "$(prop "$ASIDE" TasksMax)" = 99 -a "$(prop "$ASIDE" MemoryMax)" = 3221225472'
check aside-unheld "${ASIDE:-no scope}: IOWeight=$(prop "${ASIDE:-none}" IOWeight) IOWriteBandwidthMax='$(prop "${ASIDE:-none}" IOWriteBandwidthMax)' MemoryHigh=$(prop "${ASIDE:-none}" MemoryHigh)" \
    eval 'test -n "$ASIDE" && unheld "$ASIDE" && test "$(prop "$ASIDE" MemoryHigh)" = infinity'
SCG=/system.slice/fake-session.scope
LIMIT=$(prop "${SCOPE:-none}" IOWriteBandwidthMax)
log "$SCOPE IOWriteBandwidthMax=$LIMIT io.max: $(cat "/sys/fs/cgroup$SCG/io.max" 2>/dev/null)"
# The disk is not measured yet (a fresh install): the first restriction holds the writer by
# IOWeight=1 under iocost the daemon turns on with the assumed slow disk's model, the rate held
# there (its journal line; the disk may be measured seconds later).
QOS_AT_RESTRICT=$(iocost_qos)
check scope-weight-unmeasured "$RESTRICT; io.cost.qos then: '$QOS_AT_RESTRICT'; now IOWriteBandwidthMax='$LIMIT' IOWeight=$(prop "${SCOPE:-none}" IOWeight)" \
    eval 'echo "$RESTRICT" | grep -q "IOWeight=1 (iocost on, disk not measured: modelled at 25.0MB/s, .*on fake-session\.scope itself through systemd; its other processes \[[0-9, ]*\] moved aside to new scope $ASIDE in system\.slice, bound to fake-session\.scope" &&
        weighted "$SCOPE" && iocost_unmeasured'
# The held rate keeps the disk short of a backlog; a disk that shows room to spare while the
# kernel's latency control lets the writer burst (3 s before the steps at 10 s and 15 s) has the
# rate forced up then (doubling while the room lasts), any other from 30 s a quarter every 5 s, until the disk falls behind it and so shows its speed (or the backlog
# before the restriction showed it already); then iocost's model is that speed, pinned.
# What the scope writes to the disk is what io.stat counts (bios, after throttling).
wbytes() { sed -n "s/^$DEVNUM .*wbytes=\([0-9]*\).*/\1/p" "/sys/fs/cgroup/$1/io.stat" 2>/dev/null; }
wchar() { sed -n 's/^wchar: //p' "/proc/$WRITER/io"; }
disk_measured() { ioshield status 2>/dev/null | grep -E "^$DATA_DEV .*bandwidth" | grep -qE '\(measured'; }
wait_for 90 disk_measured
log "disk: $(ioshield status 2>&1 | grep -E "^$DATA_DEV .*bandwidth")"
wait_for 30 eval 'weighted "$SCOPE" && iocost_ours'
snapshot "held by weight"
RETUNE=$(journal_since "$T2" | grep -m1 "^retune pid $WRITER .*IOWeight=1")
log "journal: ${RETUNE:-no retune to IOWeight=1}"
check scope-weight "${SCOPE:-no scope}: IOWeight=$(prop "${SCOPE:-none}" IOWeight), IOWriteBandwidthMax='$(prop "${SCOPE:-none}" IOWriteBandwidthMax)', io.weight: $(cat "/sys/fs/cgroup$SCG/io.weight" 2>&1 | tr '\n' ' ')" \
    eval 'weighted "$SCOPE" && no_write_limit "$SCOPE" && grep -qx "default 1" "/sys/fs/cgroup$SCG/io.weight"'
check iocost-on "io.cost.qos of $DEVNUM: '$(iocost_qos)' (before: '$QOS0')" iocost_ours
MODEL_BPS=$(model_wbps)
# The estimator's last periods on the data disk (its debug lines' fields): bytes, seconds, writes
# queued on average.
periods() {
    journalctl -u ioshield -o json --no-pager --since "@$1" 2>/dev/null | grep '"disk period"' |
        grep "\"IOSHIELD_DISK\":\"$DEVNUM\"" | tail -n 8 | perl -ne '
            my %f = map { /"IOSHIELD_(\w+)":"([^"]*)"/ } /"IOSHIELD_\w+":"[^"]*"/g;
            printf "%s B/%.2f s q%.1f; ", $f{BYTES}, $f{SECONDS}, $f{WRITES_QUEUED};'
}
log "disk periods up to the measurement: $(periods "$T2")"
# Measured, not the kernel's initial 100 MiB/s guess: the model is near the disk's 30 MB/s.
check iocost-model-measured "io.cost.model of $DEVNUM: '$(iocost_model)'" \
    test "${MODEL_BPS:-0}" -gt 10000000 -a "${MODEL_BPS:-0}" -lt 36000000
# The weight does not hold a writer that nobody else wants the disk from (the innocent's appends
# are a few bytes): over 20 s the scope writes at least 40% of the modelled speed. A weight that
# held it would leave it its 1% share, or as little as a busy neighbour leaves it (0-6 MB/s of a
# 23.6 MB/s model on 6.12 in docs/bench/lone-writer.md; 7-11 on 6.1, where this does not run). What the writer keeps is bounded by
# MemoryHigh=32M, not by the weight: 60-82% of the model in the e2e runs, 71-92% on cgroupfs
# (the weight without memory.high: 100%, on 6.12), and its 1 s rates swing from 1 to 25 MB/s.
# Since stop 33 MemoryHigh tightens to 8M while others write beside the writer on a measured
# disk; the innocent's appends (one page dirtied now and then) stay under what the daemon's
# rates keep, so the writer is "alone on the disk" here and keeps 32M (its retune line says
# which; 8M left 53-59% of the model in tests/vm/lone-writer.sh on 6.12; counting such light
# appenders as company made a once-a-second committer pause longer on 6.12, not shorter:
# docs/bench/light-appender.md). The check
# wanted 60% until stop 30, which passed only because the disk is measured low here (19-24 MB/s
# of 30) and failed CI once at 59.6%; the fraction kept is a SPEED line in the results, the
# 2 s steps in the log.
MEASURE=20
S0=$(wbytes "${SCG#/}"); F0=$(wbytes "system.slice/${ASIDE:-none}"); C0=$(wchar)
STEPS=""; PREV=$S0
for _ in $(seq $((MEASURE / 2))); do
    sleep 2
    NOW=$(wbytes "${SCG#/}")
    STEPS="$STEPS $(( (${NOW:-0} - ${PREV:-0}) / 2000000 ))"
    PREV=$NOW
done
S1=$(wbytes "${SCG#/}"); F1=$(wbytes "system.slice/${ASIDE:-none}"); C1=$(wchar)
RATE=$(( (${S1:-0} - ${S0:-0}) / MEASURE ))
RATES="$SCOPE wrote $RATE B/s (MB/s by 2 s:$STEPS), ${ASIDE:-no aside scope} $(( (${F1:-0} - ${F0:-0}) / MEASURE )) B/s, writer wchar $(( (${C1:-0} - ${C0:-0}) / MEASURE )) B/s"
log "held by weight: $RATES (model ${MODEL_BPS:-?} B/s)"
echo "SPEED weight-1, alone: $(( RATE * 100 / (${MODEL_BPS:-0} + 1) ))% of the model ($RATE of ${MODEL_BPS:-?} B/s)" |
    tee -a "$CHECKS"
check weight-keeps-writer-speed "$RATES, model ${MODEL_BPS:-?} B/s" \
    test "$RATE" -gt 0 -a "$RATE" -ge $(( ${MODEL_BPS:-0} * 4 / 10 ))
check innocent-stays-aside "innocent loop's cgroup is $(cgroup_of "$INNOCENT")" in_unit "$INNOCENT" "${ASIDE:-none}"
STATUS=$(ioshield status 2>&1)
echo "$STATUS" > "$RESULTS/status-restricted.txt"
check status-shows-offender "ioshield status: $(echo "$STATUS" | head -n 5 | tr '\n' ' ')" \
    eval 'echo "$STATUS" | grep -qw "$WRITER"'
# The unit holding the limits, by name: where `systemctl status` would find the writer.
check status-names-scope "ioshield status: $(echo "$STATUS" | grep restricted: | tr '\n' ' ')" \
    eval 'echo "$STATUS" | grep -q "restricted: pid $WRITER (.*) in ${SCOPE:-no-scope} for "'
check status-root-only "an unprivileged user could query the socket" \
    eval '! setpriv --reuid=65534 --regid=65534 --clear-groups ioshield status > /dev/null 2>&1'
# What `systemctl status ioshield` shows (sd_notify STATUS=), and the watchdog is on.
check status-text "StatusText=$(prop ioshield StatusText)" \
    eval 'prop ioshield StatusText | grep -q "restricting pid $WRITER "'
check watchdog "WatchdogUSec=$(prop ioshield WatchdogUSec)" \
    eval 'case "$(prop ioshield WatchdogUSec)" in "" | 0 | infinity) false ;; *) true ;; esac'

# --- the writer stops writing: released, limits lifted (it stays in its scope), iocost put back --
rm -f "$CTL/write"
T3=$(date +%s)
wait_for 120 journal_has "$T3" "^release pid $WRITER "
RELEASE=$(journal_since "$T3" | grep -m1 "^release pid")
log "journal: ${RELEASE:-no release line}"
check release-logged "no 'release pid $WRITER' in the journal within 120 s" test -n "$RELEASE"
# systemd writes the cgroup's io.max from its realize queue, possibly after answering the
# daemon's SetUnitProperties: poll briefly instead of reading it once.
wait_for 10 eval 'unheld "${SCOPE:-none}" && unlimited "$WRITER"'
snapshot "released"
LIFTED="IOWriteBandwidthMax=$(prop "${SCOPE:-none}" IOWriteBandwidthMax) IOWeight=$(prop "${SCOPE:-none}" IOWeight)"
check limits-lifted "$SCOPE still has $LIFTED, $(systemctl is-active "$SCOPE" 2>&1)" \
    unheld "${SCOPE:-none}"
check released-unlimited "writer's cgroup $(cgroup_of "$WRITER") still limits it" unlimited "$WRITER"
# iocost outlives the release until the disk's queue is short, 10 s at most (act/iocost.rs
# LINGER_MAX), then is off again; its model is put back at stop (iocost-restored-on-stop).
wait_for 15 iocost_off
check iocost-off-on-release "io.cost.qos of $DEVNUM '$QOS0' -> '$(iocost_qos)', model '$MODEL0' -> '$(iocost_model)'" \
    iocost_off
check innocent-untouched "innocent loop's cgroup is $(cgroup_of "$INNOCENT"), ${ASIDE:-no scope}: IOWriteBandwidthMax='$(prop "${ASIDE:-none}" IOWriteBandwidthMax)'" \
    eval 'in_unit "$INNOCENT" "$ASIDE" && unheld "$ASIDE"'

# --- restricted again, then the service stops: everything undone -----------------------------
touch "$CTL/write"
T4=$(date +%s)
wait_for 120 journal_has "$T4" "^restrict pid"
check restrict-again "no second 'restrict pid' within 120 s" journal_has "$T4" "^restrict pid"
wait_for 10 weighted "$SCOPE"
snapshot "restricted again"
# The disk's speed is known now: held by weight from the start.
AGAIN=$(journal_since "$T4" | grep -m1 "^restrict pid")
check restrict-again-by-weight "$AGAIN" \
    eval 'echo "$AGAIN" | grep -q "IOWeight=1 (iocost on, disk modelled at "'
wait_for 10 iocost_ours
check iocost-on-again "io.cost.qos of $DEVNUM: '$(iocost_qos)'" iocost_ours
# A package upgrade restarts the daemon while the writer keeps writing: restricted again, in
# its session's scope (the innocent already aside).
T5=$(date +%s)
GO=$(now)
systemctl restart ioshield
wait_for 120 journal_has "$T5" "^restrict pid $WRITER "
latency restart "$GO" "$WRITER" "systemctl restart ioshield (loading the BPF programs included)"
check restart-restricts-again "no 'restrict pid $WRITER' within 120 s of a restart: $(journal_since "$T5" | grep -E 'restrict|cannot' | head -n 3 | tr '\n' ' ')" \
    journal_has "$T5" "^restrict pid $WRITER "
# The speed came from the state directory: held by weight at once.
check restart-by-weight "$(journal_since "$T5" | grep -m1 "^restrict pid $WRITER ")" \
    eval 'journal_since "$T5" | grep -m1 "^restrict pid $WRITER " | grep -q "IOWeight=1 (iocost on"' 
systemctl stop ioshield
rm -f "$CTL/write"
snapshot "after stop"
STATE=$(systemctl is-active ioshield)
check stop-clean "after systemctl stop: $STATE, result $(prop ioshield Result)" \
    eval 'test "$STATE" = inactive'
LEFT=$(limited_leftovers)
check stop-restores "limited scopes still hold processes: $LEFT" test -z "$LEFT"
check stop-unlimited "writer's cgroup $(cgroup_of "$WRITER") still limits it" unlimited "$WRITER"
check iocost-restored-on-stop "io.cost.qos of $DEVNUM '$QOS0' -> '$(iocost_qos)', model '$MODEL0' -> '$(iocost_model)'" \
    iocost_restored
journalctl -u ioshield -o cat --no-pager --since "@$T4" | tail -n 20

# The scope the innocent was moved aside to is bound to the session: ending the session ends
# both.
systemctl stop fake-session.scope 2>/dev/null
check session-stop-ends-writer "writer $WRITER still runs after the session stopped, in $(cgroup_of "$WRITER")" \
    wait_for 15 eval '! kill -0 "$WRITER" 2>/dev/null'
check session-stop-ends-aside "innocent $INNOCENT still runs after the session stopped, in $(cgroup_of "$INNOCENT")" \
    wait_for 15 eval '! kill -0 "$INNOCENT" 2>/dev/null'
touch "$CTL/quit"
rm -f "$DATA/big"

# --- a service whose main process writes: limited in place, nothing moves -------------------
T6=$(date +%s)
start_ioshield "$T6"
cat > "$CTL/backup.pl" <<'PERL'
my ($file, $ctl) = @ARGV;
open(my $f, ">", $file) or die "$file: $!";
my $buf = "\0" x (1 << 20);
my $written = 0;
my $held;
# A variable: `"x" x (256 << 20)` would be folded into the program when perl compiles it, and
# every process running this would hold 256 MiB from its start.
my $alloc = 256 << 20;
while (1) {
    # backup-alloc: the process also holds 256 MiB of its own (a backup that indexes what it
    # writes), as a build's compiler does.
    if (-e "$ctl/backup-alloc") { $held //= "x" x $alloc; } else { undef $held; }
    if (-e "$ctl/backup-write") {
        syswrite($f, $buf) or die "write: $!";
        if (($written += 1 << 20) >= 2 << 30) { seek($f, 0, 0); $written = 0; }
    } else {
        select(undef, undef, undef, 0.2);
    }
}
PERL
T7=$(date +%s)
systemd-run --unit=nightly-backup --property=IPAddressDeny=any --property=TasksMax=16 --property=IOWeight=50 \
    perl "$CTL/backup.pl" "$DATA/backup" "$CTL" > /dev/null 2>&1
BACKUP=$(prop nightly-backup.service MainPID)
log "nightly-backup.service main pid ${BACKUP:-?}"
# Read before it writes: the restriction follows its first write within ~50 ms.
BEFORE_W=$(prop nightly-backup.service IOWriteBandwidthMax)
BEFORE_M=$(prop nightly-backup.service MemoryHigh)
BEFORE_IOW=$(prop nightly-backup.service IOWeight)
GO=$(now)
touch "$CTL/backup-write"
wait_for 120 journal_has "$T7" "^restrict pid $BACKUP "
latency service-main-process "$GO" "$BACKUP"
BRESTRICT=$(journal_since "$T7" | grep -m1 "^restrict pid $BACKUP ")
log "journal: ${BRESTRICT:-no restrict line}"
check service-restricted "no 'restrict pid $BACKUP' within 120 s: $(journal_since "$T7" | grep -E 'restrict|cannot' | head -n 3 | tr '\n' ' ')" \
    test -n "$BRESTRICT"
check service-in-place "not limited in place: $BRESTRICT" \
    eval 'echo "$BRESTRICT" | grep -q "on nightly-backup.service itself"'
check service-not-moved "main process's cgroup is $(cgroup_of "$BACKUP")" in_unit "$BACKUP" nightly-backup.service
check service-limited "IOWeight=$(prop nightly-backup.service IOWeight) (was $BEFORE_IOW), IOWriteBandwidthMax=$(prop nightly-backup.service IOWriteBandwidthMax), io.cost.qos '$(iocost_qos)'" \
    eval 'weighted nightly-backup.service && iocost_ours'
check service-keeps-confinement "IPAddressDeny=$(prop nightly-backup.service IPAddressDeny) TasksMax=$(prop nightly-backup.service TasksMax)" \
    eval 'test -n "$(prop nightly-backup.service IPAddressDeny)" && test "$(prop nightly-backup.service TasksMax)" = 16'
rm -f "$CTL/backup-write"
T8=$(date +%s)
wait_for 120 journal_has "$T8" "^release pid $BACKUP "
check service-released "no 'release pid $BACKUP' within 120 s" journal_has "$T8" "^release pid $BACKUP "
AFTER_W=$(prop nightly-backup.service IOWriteBandwidthMax)
AFTER_M=$(prop nightly-backup.service MemoryHigh)
AFTER_IOW=$(prop nightly-backup.service IOWeight)
check service-limits-restored "IOWriteBandwidthMax '$BEFORE_W' -> '$AFTER_W', MemoryHigh '$BEFORE_M' -> '$AFTER_M', IOWeight '$BEFORE_IOW' -> '$AFTER_IOW'" \
    eval 'test "$AFTER_W" = "$BEFORE_W" -a "$AFTER_M" = "$BEFORE_M" -a "$AFTER_IOW" = "$BEFORE_IOW" -a "$BEFORE_IOW" = 50'
# iocost outlives the release until the disk's queue is short, 10 s at most (act/iocost.rs
# LINGER_MAX).
wait_for 15 iocost_off
check service-iocost-off "io.cost.qos of $DEVNUM '$QOS0' -> '$(iocost_qos)'" iocost_off
systemctl stop nightly-backup.service
check service-stop-ends-writer "pid $BACKUP still runs after systemctl stop" \
    wait_for 15 eval '! kill -0 "$BACKUP" 2>/dev/null'

# --- a confined service's child writes next to another worker: the service held, both in it ---
# The writer never leaves its files' writeback (docs/bench/service-worker.md): the whole
# service is held, its other worker with it, and nothing moves, so its confinement holds as it
# did. The writer tries to connect to a local listener whenever a probe file appears, and
# writes the outcome next to it: IPAddressDeny=any must hold before, while and after it is
# restricted.
cat > "$CTL/netwriter.pl" <<'PERL'
use IO::Socket::INET;
my ($file, $ctl, $port) = @ARGV;
open(my $f, ">", $file) or die "$file: $!";
my $buf = "\0" x (1 << 20);
my $written = 0;
while (1) {
    for my $probe (glob("$ctl/net-probe-*")) {
        next if $probe =~ /\.result/;
        my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Timeout => 3);
        open(my $r, ">", "$probe.result.tmp") or die;
        print $r ($s ? "connected" : "refused: $!");
        close $r;
        rename("$probe.result.tmp", "$probe.result");
        unlink $probe;
    }
    if (-e "$ctl/net-write") {
        syswrite($f, $buf) or die "write: $!";
        if (($written += 1 << 20) >= 1 << 30) { seek($f, 0, 0); $written = 0; }
    } else {
        select(undef, undef, undef, 0.2);
    }
}
PERL
PORT=7070
perl -MIO::Socket::INET -e 'my $s = IO::Socket::INET->new(Listen => 16, LocalAddr => "127.0.0.1:'"$PORT"'", ReuseAddr => 1) or die "listen: $!"; while (my $c = $s->accept) { close $c }' &
LISTENER=$!
# net_probe NAME: has the writer connect once; prints "connected" or "refused: ...".
net_probe() {
    rm -f "$CTL/net-probe-$1.result"
    touch "$CTL/net-probe-$1"
    wait_for 15 test -e "$CTL/net-probe-$1.result"
    cat "$CTL/net-probe-$1.result" 2>/dev/null || echo "no answer"
}
sleep 1
# Without the check below a "refused" would prove nothing: the listener answers the unconfined.
check net-listener "an unconfined process cannot connect to 127.0.0.1:$PORT" \
    perl -MIO::Socket::INET -e 'IO::Socket::INET->new(PeerAddr => "127.0.0.1:'"$PORT"'", Timeout => 3) or exit 1'
T11=$(date +%s)
systemd-run --unit=net-confined --property=IPAddressDeny=any \
    bash -c 'sh -c "while :; do date >> $1/confined-innocent.log; sleep 0.5; done" &
             echo $! > "$2/net-innocent.pid"
             perl "$2/netwriter.pl" "$1/netwriter" "$2" '"$PORT"' &
             echo $! > "$2/netwriter.pid"
             wait' net-confined "$DATA" "$CTL" > /dev/null 2>&1
wait_for 20 test -s "$CTL/netwriter.pid" -a -s "$CTL/net-innocent.pid"
NETW=$(cat "$CTL/netwriter.pid" 2>/dev/null)
NETI=$(cat "$CTL/net-innocent.pid" 2>/dev/null)
log "net-confined.service: writer ${NETW:-?}, innocent ${NETI:-?}"
BEFORE=$(net_probe before)
check net-denied-before "the writer's connect before any restriction: $BEFORE" \
    eval 'echo "$BEFORE" | grep -q "^refused"'
GO=$(now)
touch "$CTL/net-write"
wait_for 120 journal_has "$T11" "^restrict pid ${NETW:-none} "
latency confined-service-child "$GO" "${NETW:-none}"
NRESTRICT=$(journal_since "$T11" | grep -m1 "^restrict pid ${NETW:-none} ")
log "journal: ${NRESTRICT:-no restrict line}"
check net-restricted "no 'restrict pid ${NETW:-?}' within 120 s: $(journal_since "$T11" | grep -E 'restrict|cannot' | head -n 3 | tr '\n' ' ')" \
    test -n "$NRESTRICT"
check net-held-in-service "writer's cgroup is $(cgroup_of "$NETW"), the other worker's $(cgroup_of "$NETI")" \
    eval 'in_unit "$NETW" net-confined.service && in_unit "$NETI" net-confined.service'
check net-service-weighted "IOWeight of net-confined.service: $(prop net-confined.service IOWeight), io.cost.qos '$(iocost_qos)'" \
    eval 'weighted net-confined.service && iocost_ours'
check net-worker-named "the restrict line does not say the other worker ${NETI:-?} is held with it: ${NRESTRICT:-none}" \
    eval 'echo "$NRESTRICT" | grep -q "on net-confined.service itself .*its other processes \[.*\b$NETI\b.*\] held with it"'
WHILE=$(net_probe restricted)
check net-denied-restricted "the writer's connect while restricted: $WHILE" \
    eval 'echo "$WHILE" | grep -q "^refused"'
rm -f "$CTL/net-write"
T12=$(date +%s)
wait_for 120 journal_has "$T12" "^release pid ${NETW:-none} "
check net-released "no 'release pid ${NETW:-?}' within 120 s" journal_has "$T12" "^release pid ${NETW:-none} "
check net-service-unheld "net-confined.service after the release: IOWeight $(prop net-confined.service IOWeight), IOWriteBandwidthMax '$(prop net-confined.service IOWriteBandwidthMax)'" \
    unheld net-confined.service
AFTER=$(net_probe released)
check net-denied-released "the writer's connect after release: $AFTER" \
    eval 'echo "$AFTER" | grep -q "^refused"'
systemctl stop net-confined.service
check net-stop-ends-writer "pid ${NETW:-?} still runs after systemctl stop net-confined" \
    wait_for 15 eval '! kill -0 "$NETW" 2>/dev/null'
kill "$LISTENER" 2>/dev/null
rm -f "$DATA/netwriter"

# --- a Delegate=yes unit (a container engine's): nothing written inside it --------------------
# The writer runs in a sub-cgroup the unit made itself, as a container engine's payload does:
# that subtree belongs to the unit, so ioshield may only use ioprio, and says so.
T13=$(date +%s)
cat > "$CTL/box.sh" <<'EOF'
# $1: data directory, $2: control directory. Traced into the results: how the payload was made.
exec 2> "$RESULTS/box.log"
set -x
cg=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
mkdir "$cg/payload" || exit 1
echo $$ > "$cg/payload/cgroup.procs" || exit 1
echo $$ > "$2/box.pid"
exec perl "$2/backup.pl" "$1/box" "$2"
EOF
systemd-run --unit=box --property=Delegate=yes --setenv=RESULTS="$RESULTS" \
    bash "$CTL/box.sh" "$DATA" "$CTL" > "$RESULTS/box-run.log" 2>&1
wait_for 20 test -s "$CTL/box.pid"
BOXW=$(cat "$CTL/box.pid" 2>/dev/null)
if [ -z "$BOXW" ]; then
    systemctl status box.service --no-pager >> "$RESULTS/box-run.log" 2>&1
    journalctl -u box.service --no-pager >> "$RESULTS/box-run.log" 2>&1
    log "box.service did not start its payload: $(tail -n 5 "$RESULTS/box-run.log" "$RESULTS/box.log" 2>&1 | tr '\n' ' ')"
    BOXW=none
fi
BOXCG=/sys/fs/cgroup/system.slice/box.service
log "box.service (Delegate=yes): writer ${BOXW:-?} in $(cgroup_of "${BOXW:-0}")"
# The same writer as the backup service's: it writes while backup-write exists.
GO=$(now)
touch "$CTL/backup-write"
[ "$BOXW" = none ] || wait_for 120 journal_has "$T13" "^restrict pid $BOXW "
latency delegated-unit "$GO" "${BOXW:-none}"
DRESTRICT=$(journal_since "$T13" | grep -m1 "^restrict pid ${BOXW:-none} ")
log "journal: ${DRESTRICT:-no restrict line}"
check delegated-restricted "no 'restrict pid ${BOXW:-?}' within 120 s: $(journal_since "$T13" | grep -E 'restrict|cannot' | head -n 3 | tr '\n' ' ')" \
    test -n "$DRESTRICT"
check delegated-says-why "the decision does not name the delegated subtree: $DRESTRICT" \
    eval 'echo "$DRESTRICT" | grep -q "delegated subtree of box.service"'
check delegated-ioprio "ionice -p ${BOXW:-?}: $(ionice -p "${BOXW:-0}" 2>&1)" \
    eval 'ionice -p "$BOXW" | grep -q "^idle"'
check delegated-not-moved "writer's cgroup is $(cgroup_of "${BOXW:-0}")" \
    eval 'test "$(cgroup_of "$BOXW")" = /system.slice/box.service/payload'
check delegated-untouched "io.max in box.service: $(cat "$BOXCG/io.max" "$BOXCG/payload/io.max" 2>&1 | tr '\n' ' '), IOWriteBandwidthMax='$(prop box.service IOWriteBandwidthMax)'" \
    eval '! grep -qE "[rw](bps|iops)=[0-9]" "$BOXCG/io.max" "$BOXCG/payload/io.max" 2>/dev/null && no_write_limit box.service'
rm -f "$CTL/backup-write"
T14=$(date +%s)
[ "$BOXW" = none ] || wait_for 120 journal_has "$T14" "^release pid $BOXW "
check delegated-released "no 'release pid ${BOXW:-?}' within 120 s, ionice: $(ionice -p "${BOXW:-0}" 2>&1)" \
    eval 'journal_has "$T14" "^release pid $BOXW " && ! ionice -p "$BOXW" | grep -q "^idle"'
systemctl stop box.service
rm -f "$DATA/box"

# --- a user's own unit: limited through that user's systemd, inside user@UID.service --------
# A lingering user's manager (no login needed); its units live in user@UID.service, which only
# that manager may change. The package's drop-in delegates io to user managers.
useradd --create-home e2euser > /dev/null 2>&1
UUID_=$(id -u e2euser)
UCG=/sys/fs/cgroup/user.slice/user-$UUID_.slice/user@$UUID_.service
loginctl enable-linger e2euser
wait_for 60 test -S "/run/user/$UUID_/systemd/private"
check user-manager-running "user@$UUID_.service is $(systemctl is-active "user@$UUID_.service")" \
    test -S "/run/user/$UUID_/systemd/private"
usys() { runuser -u e2euser -- env XDG_RUNTIME_DIR="/run/user/$UUID_" "$@"; }
uprop() { usys systemctl --user show "$1" -p "$2" --value 2>/dev/null; }
check user-io-delegated "controllers of user@$UUID_.service: $(cat "$UCG/cgroup.controllers" 2>&1)" \
    grep -qw io "$UCG/cgroup.controllers"
UCTL=/run/e2e-user
mkdir -p "$UCTL" "$DATA/e2euser"
chown e2euser "$DATA/e2euser"
chmod 755 "$UCTL"
cp "$CTL/backup.pl" "$UCTL/backup.pl"
# On a quiet disk no restriction holds, the model set up ahead follows the speed the daemon
# judges the disk at (daemon/engine match_iocost_models): the user unit's restriction then finds it
# in place and only turns iocost on, where it once waited 1557 ms for a model write.
# The status document's speed, not the table's (rounded to 0.1 MB/s: a model 4.9% off read as
# over 5%).
judged_bps() {
    ioshield status --json 2>/dev/null | awk -v d="\"$DEVNUM\"," '
        $1 == "\"dev\":" && $2 == d { found = 1; next }
        found && $1 == "\"bandwidth_bytes_per_sec\":" { sub(/,$/, "", $2); print $2; exit }'
}
model_follows() {
    awk -v m="$(model_wbps)" -v b="$(judged_bps)" \
        'BEGIN { exit !(m > 0 && b > 0 && (m - b) ^ 2 <= (0.05 * b) ^ 2) }'
}
wait_for 60 model_follows
check model-follows-speed "io.cost.model wbps=$(model_wbps), the disk judged at $(judged_bps) B/s: $(journal_since "$T0" | grep "model moved" | tail -n 1)" \
    model_follows
# A desktop's user units write a little all the time (a browser's profile, an editor's
# backups): the first such write has the daemon reach the user's systemd in the background,
# so that a restriction there does not wait for the bridge (1.2-1.4 s in this guest).
T9=$(date +%s)
usys systemd-run --user --quiet --unit=user-notes sh -c \
    "for i in 1 2 3; do echo note \$i >> '$DATA/e2euser/notes'; sync '$DATA/e2euser/notes'; sleep 1; done"
wait_for 30 journal_has "$T9" "^connected to user $UUID_'s systemd ahead"
check user-manager-reached-ahead "no 'connected to user $UUID_'s systemd ahead' within 30 s of its unit's writes: $(journal_since "$T9" | head -n 3 | tr '\n' ' ')" \
    journal_has "$T9" "^connected to user $UUID_'s systemd ahead"
usys systemd-run --user --unit=user-backup perl "$UCTL/backup.pl" "$DATA/e2euser/backup" "$UCTL" \
    > "$RESULTS/user-run.log" 2>&1
UPID=$(uprop user-backup.service MainPID)
log "user-backup.service (user $UUID_) main pid ${UPID:-?}: $(cat "$RESULTS/user-run.log")"
UBEFORE_W=$(uprop user-backup.service IOWriteBandwidthMax)
UBEFORE_M=$(uprop user-backup.service MemoryHigh)
UBEFORE_IOW=$(uprop user-backup.service IOWeight)
GO=$(now)
touch "$UCTL/backup-write"
wait_for 120 journal_has "$T9" "^restrict pid ${UPID:-none} "
latency user-unit "$GO" "${UPID:-none}"
URESTRICT=$(journal_since "$T9" | grep -m1 "^restrict pid ${UPID:-none} ")
log "journal: ${URESTRICT:-no restrict line}"
check user-unit-restricted "no 'restrict pid ${UPID:-?}' within 120 s: $(journal_since "$T9" | grep -E 'restrict|cannot' | head -n 3 | tr '\n' ' ')" \
    test -n "$URESTRICT"
check user-unit-model-in-place "$URESTRICT" eval '! echo "$URESTRICT" | grep -q "iocost model "'
check user-unit-through-its-manager "not limited in place through user $UUID_'s systemd: $URESTRICT" \
    eval 'echo "$URESTRICT" | grep -q "on user-backup.service itself through user $UUID_.s systemd"'
check user-unit-not-moved "cgroup is $(cgroup_of "${UPID:-0}")" \
    eval 'cgroup_of "$UPID" | grep -q "^/user.slice/user-$UUID_.slice/user@$UUID_.service/app.slice/user-backup.service$"'
check user-unit-limited "IOWeight=$(uprop user-backup.service IOWeight), io.weight: $(cat "$UCG/app.slice/user-backup.service/io.weight" 2>&1 | tr '\n' ' '), io.cost.qos '$(iocost_qos)'" \
    eval 'grep -qx "default 1" "$UCG/app.slice/user-backup.service/io.weight" && iocost_ours'
check user-unit-listed "systemctl --user no longer lists it" \
    eval 'usys systemctl --user is-active --quiet user-backup.service'
rm -f "$UCTL/backup-write"
T10=$(date +%s)
wait_for 120 journal_has "$T10" "^release pid ${UPID:-none} "
check user-unit-released "no 'release pid ${UPID:-?}' within 120 s" journal_has "$T10" "^release pid ${UPID:-none} "
UAFTER_W=$(uprop user-backup.service IOWriteBandwidthMax)
UAFTER_M=$(uprop user-backup.service MemoryHigh)
UAFTER_IOW=$(uprop user-backup.service IOWeight)
check user-unit-limits-restored "IOWriteBandwidthMax '$UBEFORE_W' -> '$UAFTER_W', MemoryHigh '$UBEFORE_M' -> '$UAFTER_M', IOWeight '$UBEFORE_IOW' -> '$UAFTER_IOW'" \
    eval 'test "$UAFTER_W" = "$UBEFORE_W" -a "$UAFTER_M" = "$UBEFORE_M" -a "$UAFTER_IOW" = "$UBEFORE_IOW"'
# iocost outlives the release until the disk's queue is short, 10 s at most (act/iocost.rs
# LINGER_MAX).
wait_for 15 iocost_off
check user-unit-iocost-off "io.cost.qos of $DEVNUM '$QOS0' -> '$(iocost_qos)'" iocost_off
usys systemctl --user stop user-backup.service

# --- a real login session: a dd from its shell is held there, its other job moved aside -----
# runuser -l goes through PAM with pam_systemd: logind makes session-N.scope (a unit of PID 1's
# in user-UID.slice) holding runuser, the login shell, an innocent loop and the dd.
cat > "$UCTL/login.sh" <<'EOF'
sh -c 'while :; do date >> "$1/innocent.log"; sleep 0.5; done' innocent "$1" &
echo $! > "$2/login-innocent.pid"
# dd only once the test says so, so that where it lives is checked before it writes.
(while [ ! -e "$2/dd-go" ]; do sleep 0.2; done; exec dd if=/dev/zero of="$1/dd" bs=1M count=1500 2> /dev/null) &
echo $! > "$2/dd.pid"
wait
EOF
chmod 644 "$UCTL/login.sh"
rm -f "$UCTL/dd-go" "$UCTL/dd.pid" "$UCTL/login-innocent.pid"
chmod 777 "$UCTL"
T15=$(date +%s)
runuser -l e2euser -c "bash $UCTL/login.sh $DATA/e2euser $UCTL" > "$RESULTS/login.log" 2>&1 &
wait_for 20 test -s "$UCTL/dd.pid" -a -s "$UCTL/login-innocent.pid"
DD=$(cat "$UCTL/dd.pid" 2>/dev/null)
LINNOCENT=$(cat "$UCTL/login-innocent.pid" 2>/dev/null)
# logind numbers sessions with a seat or tty, others are c1, c2, ...
SESSION=$(cgroup_of "${DD:-0}" | grep -o 'session-[^/]*\.scope$')
log "login session ${SESSION:-?}: dd ${DD:-?}, innocent ${LINNOCENT:-?}: $(loginctl list-sessions --no-legend 2>&1 | tr '\n' ' ')"
check login-session "dd's cgroup is $(cgroup_of "${DD:-0}"), not a logind session scope" \
    eval 'cgroup_of "$DD" | grep -q "^/user.slice/user-$UUID_.slice/session-[^/]*\.scope$"'
GO=$(now)
touch "$UCTL/dd-go"
wait_for 120 journal_has "$T15" "^restrict pid ${DD:-none} "
latency login-session-dd "$GO" "${DD:-none}"
LRESTRICT=$(journal_since "$T15" | grep -m1 "^restrict pid ${DD:-none} ")
log "journal: ${LRESTRICT:-no restrict line}"
check login-restricted "no 'restrict pid ${DD:-?}' within 120 s: $(journal_since "$T15" | grep -E 'restrict|cannot' | head -n 3 | tr '\n' ' ')" \
    test -n "$LRESTRICT"
wait_for 10 aside_scope_of "$LINNOCENT" > /dev/null
LASIDE=$(aside_scope_of "$LINNOCENT")
check login-dd-held-in-session "dd's cgroup is $(cgroup_of "${DD:-0}")" in_unit "${DD:-0}" "${SESSION:-none}"
check login-scope-limited "IOWeight of ${SESSION:-no session}: $(prop "${SESSION:-none}" IOWeight), io.cost.qos '$(iocost_qos)'" \
    eval 'weighted "$SESSION" && iocost_ours'
check login-innocent-aside "innocent's cgroup is $(cgroup_of "${LINNOCENT:-0}")" \
    eval 'cgroup_of "$LINNOCENT" | grep -q "^/user.slice/user-$UUID_.slice/ioshield-[0-9]*-r[0-9]*-aside-[0-9-]*\.scope$"'
check login-aside-bound "BindsTo of ${LASIDE:-no scope}: $(prop "${LASIDE:-none}" BindsTo)" \
    eval 'prop "$LASIDE" BindsTo | grep -qw "$SESSION"'
SID=${SESSION#session-}
SID=${SID%.scope}
loginctl terminate-session "$SID"
check login-end-ends-dd "dd ${DD:-?} still runs after loginctl terminate-session $SID, in $(cgroup_of "${DD:-0}")" \
    wait_for 20 eval '! kill -0 "$DD" 2>/dev/null'
check login-end-ends-innocent "the session's innocent loop survived terminate-session" \
    wait_for 20 eval '! kill -0 "$LINNOCENT" 2>/dev/null'
loginctl disable-linger e2euser

# --- measured: a copy in user.slice next to a database-like service in system.slice ---------
# (and, with iocost = "on", the same copy in system.slice, next to the service)
# Under hierarchical weights the held copy's IOWeight=1 counts inside user.slice, which weighs
# as much as system.slice: what does a system service's commit wait across slices? The same job
# with ioshield stopped, then running with iocost = "on" (the disk's speed known from its state
# directory), then with the shipped iocost = "auto" (IOWriteBandwidthMax= at 75% of the disk's
# speed on a systemd host): 400 MB
# written by dd with conv=fsync in user.slice (its time is the copy's throughput, its flush
# included), next to ioshield-load's commit load (4 KiB + fdatasync every 100 ms) as a service
# in system.slice. Printed as MEASURE lines; the only check is that the copy was held by weight.
# The runs with ioshield stopped, here and for the untar below, only with E2E_MEASURE=1
# (`cargo xtask vm e2e --measure`): they check nothing, and took a minute of CI's VM time.
# beside_commit TITLE WHAT BYTES CMD...: CMD, timed, next to ioshield-load's commit load (4 KiB +
# fdatasync every 100 ms) as a service in system.slice; prints `MEASURE TITLE: WHAT in T s (MB/s),
# commit longest pause ...` (its record: $RESULTS/TITLE-with-dashes.json).
beside_commit() {
    local title=$1 what=$2 bytes=$3 name rec t0 t1 commit
    shift 3
    name=$(echo "$title" | tr ' ' '-')
    rec="$RESULTS/$name.json"
    systemd-run --unit="commit-$name" /e2e/ioshield-load commit --duration 300s --dir "$DATA" \
        --out "$rec" > /dev/null 2>&1
    sleep 3
    t0=$(now)
    "$@" > /dev/null 2>&1
    t1=$(now)
    sleep 2
    systemctl stop "commit-$name"
    wait_for 10 test -s "$rec"
    commit=$(/e2e/ioshield-load summarize "$rec" 2>/dev/null |
        awk '$1 == "commit" { print "commit longest pause " $3 ", paused " $4 " in total, " $6 " pauses over 100 ms" }')
    echo "MEASURE $title: $what in $(awk -v a="$t0" -v b="$t1" -v n="$bytes" 'BEGIN { printf "%.1f s (%.1f MB/s)", b - a, n / 1e6 / (b - a) }'), ${commit:-no commit record}" |
        tee -a "$CHECKS"
}
cross_slice() {
    local label=$1 slice=${2:-user.slice}
    rm -f "$DATA/copy"
    # The copy's MemoryHigh= well into the copy (restricted in its first second).
    (sleep 9; systemctl show -P MemoryHigh "copy-$label.service" > "$RESULTS/memory-high-$label") &
    beside_commit "cross-slice $label" "dd 400 MB in $slice" 419430400 \
        systemd-run --wait --quiet --slice="$slice" --unit="copy-$label" \
        dd if=/dev/zero of="$DATA/copy" bs=1M count=400 conv=fsync
    rm -f "$DATA/copy"
}
systemctl stop ioshield
[ "${E2E_MEASURE:-0}" = 1 ] && cross_slice without-ioshield
T20=$(date +%s)
start_ioshield "$T20"
cross_slice with-ioshield-iocost
XRESTRICT=$(journal_since "$T20" | grep -m1 "^restrict pid [0-9]* (dd) ")
log "journal: ${XRESTRICT:-no restrict line for dd}"
check cross-slice-by-weight "${XRESTRICT:-no 'restrict pid ... (dd)' line}" \
    eval 'echo "$XRESTRICT" | grep -q "IOWeight=1 (iocost on, .* on copy-with-ioshield-iocost.service itself"'
# Inside one slice the weight counts against the service's own: the same copy in system.slice.
T22=$(date +%s)
cross_slice same-slice-iocost system.slice
XRESTRICT=$(journal_since "$T22" | grep -m1 "^restrict pid [0-9]* (dd) ")
log "journal: ${XRESTRICT:-no restrict line for dd}"
check same-slice-by-weight "${XRESTRICT:-no 'restrict pid ... (dd)' line}" \
    eval 'echo "$XRESTRICT" | grep -q "IOWeight=1 (iocost on, .* on copy-same-slice-iocost.service itself"'
# The shipped defaults on a disk never measured (the speeds file put aside until the untar
# below), as a new install meets its first copy: the write limit, in place. Beside the
# committing service the limit counts as the disk's speed (8 MiB, daemon/engine/mod.rs
# held_speed), but not in the restriction's first 2 s (limit_counts): the service keeps the page
# cache it dirtied before, and 8 MiB at once had 6.12's commit pause 0.77 s against 0.28.
systemctl stop ioshield
mv /var/lib/ioshield/disks.json "$RESULTS/disks-before-fresh.json" 2> /dev/null
sed -i '/^iocost = "on"$/d' /etc/ioshield/ioshield.toml
T21=$(date +%s)
start_ioshield "$T21"
cross_slice with-ioshield-default
XRESTRICT=$(journal_since "$T21" | grep -m1 "^restrict pid [0-9]* (dd) ")
log "journal: ${XRESTRICT:-no restrict line for dd}"
check cross-slice-default-write-limit "${XRESTRICT:-no 'restrict pid ... (dd)' line}" \
    eval 'echo "$XRESTRICT" | grep -q "IOWriteBandwidthMax=$DATA_DEV [0-9.]*MB/s .*on copy-with-ioshield-default.service itself"'
XPID=$(echo "$XRESTRICT" | awk '{ print $3 }')
# when PATTERN: the unix time of the daemon's first journal line since T21 matching PATTERN.
when() { journalctl -u ioshield -o short-unix --no-pager --since "@$T21" 2>/dev/null | grep -m1 -- "$1" | awk '{ print $1 }'; }
ONSET_HELD=$(journal_since "$T21" | grep -m1 "^$DATA_DEV: pid ${XPID:-none}: held on its own unit")
ONSET_AT=$(when " restrict pid ${XPID:-none} ")
EIGHT_AT=$(when " retune pid ${XPID:-none} on $DATA_DEV: .*MemoryHigh=8M ")
log "journal: ${ONSET_HELD:-no 'held on its own unit' line}; restricted at ${ONSET_AT:-never}, MemoryHigh=8M at ${EIGHT_AT:-never}"
check fresh-in-place-onset "${XRESTRICT:-no restrict line} | ${ONSET_HELD:-no 'held on its own unit' line} | 8M at ${EIGHT_AT:-never}, restricted at ${ONSET_AT:-never}" \
    eval 'echo "$XRESTRICT" | grep -q "25.0 MB/s.*MemoryHigh=32M on copy-with-ioshield-default.service itself" &&
        echo "$ONSET_HELD" | grep -q "memory.high at most 8M after its first 2s" &&
        awk -v a="${ONSET_AT:-0}" -v b="${EIGHT_AT:-0}" "BEGIN { exit !(a > 0 && b - a >= 1.9 && b - a < 5) }"'
# In place, the copy's MemoryHigh= was asked no lower than what the unit held at the restriction
# (20-34 MB where 8 MiB was meant, for the whole copy, until stop 53): the daemon lowers it over
# the written pages afterwards, never under its dirty and writeback pages. How low it is 9 s in
# is logged, not checked: until stop 54 a held copy sometimes crawled, its pages dirty and
# unwritten for up to 5 s, and was released mid-copy and restricted again (the
# writeback-started checks below), and its value depended on when that happened.
for label in with-ioshield-iocost with-ioshield-default; do
    mh=$(cat "$RESULTS/memory-high-$label" 2> /dev/null)
    lowered=$(journal_since "$T20" | grep -m3 "^copy-$label.service: memory.high lowered from" | tr '\n' '|')
    log "copy-$label.service MemoryHigh 9 s into the copy: ${mh:-not read}; ${lowered:-never lowered}"
    check "memory-high-lowered-$label" "asked above its budget: $(journal_since "$T20" | grep -m2 "^copy-$label.service: MemoryHigh set at" | tr '\n' '|'), never lowered" \
        eval 'test -n "$lowered"'
done
# Each copy service ended, and systemd unloaded it, before its restriction was released: the
# settings ioshield gave it went with it (no runtime drop-in left), so its undo has nothing to
# do and must not stay pending (it did, retried at every release and after every restart).
wait_for 30 eval 'journal_since "$T21" | grep -q "^release pid [0-9]* (dd) "'
check gone-unit-settings-gone "left: $(ls -d /run/systemd/system.control/copy-*.service.d 2>&1 | tr '\n' ' ')" \
    eval '! ls -d /run/systemd/system.control/copy-*.service.d > /dev/null 2>&1'
check gone-unit-not-pending "$(journal_since "$T20" | grep -m2 'NoSuchUnit' | tr '\n' '|') $(ioshield status 2>&1 | grep 'undo pending')" \
    eval '! journal_since "$T20" | grep -q "NoSuchUnit" && ! ioshield status 2>&1 | grep -q "undo pending"'
# A unit held in place gets the io controller with ioshield's write property; what its writer
# dirtied before then waited for the kernel's periodic writeback (up to 5 s) while the writer
# crawled at 1-2 MB/s, and 8 of 18 copies of 6 runs were released as calm mid-copy and
# restricted again. The daemon starts the writeback of the files the unit writes at once
# (act/writeback_kick.rs): of a root service's, and of a user's own unit's (another user's
# process: CAP_SYS_PTRACE in the unit's bounding set).
for unit in copy-with-ioshield-iocost copy-same-slice-iocost copy-with-ioshield-default; do
    check "writeback-started-$unit" "no '$unit.service: writeback of the ...' line: $(journal_since "$T20" | grep -m2 "^$unit.service: " | tr '\n' '|')" \
        journal_has "$T20" "^$unit.service: writeback of the [0-9]* file(s) its processes write started"
done
check writeback-started-user-unit "no 'user-backup.service: writeback of the ...' line: $(journal_since "$T0" | grep -m2 "^user-backup.service: [wt]" | tr '\n' '|')" \
    journal_has "$T0" "^user-backup.service: writeback of the [0-9]* file(s) its processes write started"
CALM=$(journal_since "$T20" | grep "^release pid [0-9]* (dd) .*< 20% of")
check held-copies-not-released-as-calm "a copy writing all along was let go as calm: $(echo "$CALM" | tr '\n' '|')" \
    test -z "$CALM"

# --- copies from a shell's scope, held there, shipped defaults -----------------------------
# Two copies, one after the other, each by `sh` in a scope of its own beside a `sleep` (as in a
# terminal's tab with a job left running: the copy is held in the scope, the `sleep` moved aside
# into a scope of its own), both started by this script's shell. The second is restricted as the
# copy, not as the shell: until stop 83 the first copy's rate, still in the shell's 8 s average,
# made the shell the offender (its scope never started: 5 s without a decision, then the copy
# 4-5 s late; subtrees now end at unit boundaries, model/tree.rs ancestry_in_unit). A third
# copy's scope holds only the copy and its shell waiting for it (a terminal's tab in the
# foreground): held there, nothing moved (act/placement.rs).
T25=$(date +%s)
for n in 1 2 3; do
    rm -f "$DATA/copy"
    JOB="sleep 100 & dd if=/dev/zero of=$DATA/copy bs=1M count=200 conv=fsync; kill \$!"
    [ "$n" = 3 ] && JOB="dd if=/dev/zero of=$DATA/copy bs=1M count=200 conv=fsync; true"
    systemd-run --scope --quiet --slice=user.slice --unit="term-$n" sh -c "$JOB" > /dev/null 2>&1
done
rm -f "$DATA/copy"
sleep 2
HELD=$(journal_since "$T25" | grep "^restrict pid [0-9]* ")
log "journal: $(echo "$HELD" | cut -c1-300 | tr '\n' '|')"
for n in 1 2; do
    check "shell-copy-$n" "${HELD:-no restrict line}" \
        eval 'echo "$HELD" | grep -q "^restrict pid [0-9]* (dd) .* on term-$n\.scope itself through systemd; its other processes \[[0-9, ]*\] moved aside to new scope ioshield-[0-9]*-r[0-9]*-aside-[0-9-]*\.scope in user\.slice, bound to term-$n\.scope"'
done
check tab-copy-in-place "${HELD:-no restrict line}" \
    eval 'echo "$HELD" | grep -q "^restrict pid [0-9]* (dd) .* on term-3\.scope itself through systemd, nothing moved"'
check shell-only-the-copies "${HELD:-no restrict line}" \
    eval 'test "$(echo "$HELD" | grep -c .)" -ge 3 && ! echo "$HELD" | grep -qv "^restrict pid [0-9]* (dd) "'
# Held where they are, the copies keep their speed: none is let go as calm mid-copy (split off
# into scopes of their own until stop 84, a copy crawled at 1.9 MB/s for 5 s and was, under this
# script's `hold = "5s"`: docs/bench/split-scope.md).
CALM=$(journal_since "$T25" | grep "^release pid [0-9]* (dd) .*< 20% of")
check shell-copies-not-released-as-calm "a copy writing all along was let go as calm: $(echo "$CALM" | tr '\n' '|')" \
    test -z "$CALM"
check shell-nothing-pending "$(ioshield status 2>&1 | grep 'undo pending')" \
    eval '! ioshield status 2>&1 | grep -q "undo pending"'

# --- measured: an untar of many small files as a service, shipped defaults ------------------
# `tar x` of 8192 files of 32 KiB (from a tarball in memory) as a system service, then `sync`,
# next to the committing service, with ioshield stopped and with the shipped defaults: held by
# IOWriteBandwidthMax= and, once the daemon sees the files it writes, lightened: MemoryHigh=128M
# under the same limit (act/method.rs LIGHT_WRITER_MEMORY_HIGH), not the 8 MiB of a writer
# beside others, which held the untar to about half its speed on the cgroupfs bench.
# The tarball is written in one pass by ioshield-load (as stall.sh's untar offender's is).
SMALL_TAR=/dev/shm/small.tar
/e2e/ioshield-load tarball --out "$SMALL_TAR" --files 8192 --file-size 32KiB
log "untar source: $(stat -c %s "$SMALL_TAR" 2>/dev/null || echo missing) bytes in $SMALL_TAR"
# The untar's time includes the `sync` after it.
untar_job() {
    systemd-run --wait --quiet --unit="untar-$1" tar -xf "$SMALL_TAR" -C "$DATA/untar"
    sync
}
untar() {
    rm -rf "$DATA/untar" && mkdir -p "$DATA/untar" && sync
    beside_commit "untar $1" "8192 files of 32 KiB in system.slice" 268435456 untar_job "$1"
    rm -rf "$DATA/untar"
}
systemctl stop ioshield
# The speeds as they were before the copy on the fresh disk.
cp "$RESULTS/disks-before-fresh.json" /var/lib/ioshield/disks.json 2> /dev/null ||
    rm -f /var/lib/ioshield/disks.json
[ "${E2E_MEASURE:-0}" = 1 ] && untar without-ioshield
T23=$(date +%s)
start_ioshield "$T23"
untar with-ioshield-default
UNTAR=$(journal_since "$T23" | grep -m1 "^restrict pid [0-9]* (tar) ")
UNTAR_PID=$(echo "$UNTAR" | awk '{ print $3 }')
log "journal: ${UNTAR:-no restrict line for tar}"
LIGHT=$(journal_since "$T23" | grep -m1 "^retune pid ${UNTAR_PID:-none} .*MemoryHigh=128M through systemd (.*its writers write many small files")
log "journal: ${LIGHT:-no retune of tar to MemoryHigh=128M for its small files}"
check untar-lightened-under-write-limit \
    "${UNTAR:-no 'restrict pid ... (tar)' line}; then: $(journal_since "$T23" | grep "^retune pid ${UNTAR_PID:-none} " | head -3 | tr '\n' '|')" \
    eval 'echo "$UNTAR" | grep -q "IOWriteBandwidthMax=$DATA_DEV [0-9.]*MB/s .*on untar-with-ioshield-default.service itself" &&
        echo "$LIGHT" | grep -q "IOWriteBandwidthMax=$DATA_DEV [0-9.]*MB/s MemoryHigh=128M through systemd"'
rm -f "$SMALL_TAR"

# --- a held writer whose processes then need memory (a build's compiler) --------------------
# A service writes 150 MB (restricted in place: MemoryHigh= for its page cache), then a child
# allocates 256 MiB. MemoryHigh= counts all of it: kept at the budget alone, the kernel would put
# the allocating process to sleep for up to 2 s every 256 KiB it is over (half an hour for this
# one; `timeout` ends it at 60 s). The daemon lifts MemoryHigh= at its next tick once the unit
# holds more of its own than its page cache budget; the write limit alone holds it then.
# Seconds to allocate (and fill) 256 MiB, printed; nothing if killed at 60 s (perl-base has no
# Time::HiRes: timed by date).
cat > /run/alloc.sh << 'ALLOC'
t0=$(date +%s.%N)
timeout 60 perl -e 'my $x = "x" x (256 << 20); exit 0' || exit 1
t1=$(date +%s.%N)
echo "$t0 $t1" | awk '{ printf "%.2f\n", $2 - $1 }'
ALLOC
ALONE=$(sh /run/alloc.sh)
T24=$(date +%s)
rm -f "$DATA/build1" "$DATA/build2"
systemd-run --wait --quiet --unit=build-like --setenv=DATA="$DATA" --setenv=OUT="$RESULTS/build-alloc" \
    sh -c 'dd if=/dev/zero of="$DATA/build1" bs=1M count=150 status=none
        sh /run/alloc.sh > "$OUT" 2>&1
        dd if=/dev/zero of="$DATA/build2" bs=1M count=50 status=none' > /dev/null 2>&1
HELD_ALLOC=$(cat "$RESULTS/build-alloc" 2> /dev/null)
rm -f "$DATA/build1" "$DATA/build2"
BUILD=$(journal_since "$T24" | grep -m1 "^restrict pid [0-9]* (dd) ")
log "journal: ${BUILD:-no restrict line for the build-like dd}; $(journal_since "$T24" | grep -m2 "^build-like.service: memory.high" | tr '\n' '|')"
echo "MEASURE build-like: 256 MiB allocated in ${HELD_ALLOC:-nothing (killed at 60 s)} s held, ${ALONE:-?} s alone" | tee -a "$CHECKS"
check build-like-restricted "${BUILD:-no 'restrict pid ... (dd)' line}" \
    eval 'echo "$BUILD" | grep -q "MemoryHigh=[0-9]*M on build-like.service itself"'
check memory-follows-the-build "256 MiB allocated in ${HELD_ALLOC:-nothing, killed at 60 s} s held (alone: ${ALONE:-?} s)" \
    eval 'awk -v t="${HELD_ALLOC:-x}" "BEGIN { exit !(t ~ /^[0-9.]+\$/ && t < 10) }"'
iocost_config on

# --- the system bus restarts, PID 1 re-executes, then the daemon is killed: the limits still come off
# Last, because restarting dbus disturbs logind. A service whose main process writes is limited
# in place; the daemon's bus connection dies with dbus and must be remade for the lift, which
# comes after PID 1 has re-executed too (as a systemd upgrade makes it). Then it
# is restricted again and the daemon is killed with SIGKILL: systemd restarts it
# (Restart=on-failure) and the new instance undoes what its journal says the dead one changed.
# With the shipped iocost = "auto" (reloaded, as SIGHUP does): on a systemd host, held by
# IOWriteBandwidthMax=, the limit the daemon also uses before a disk is measured.
T16=$(date +%s)
iocost_config default
check reload-iocost-default "no 'configuration reloaded' after systemctl reload: $(journal_since "$T16" | tail -n 3 | tr '\n' ' ')" \
    journal_has "$T16" "configuration reloaded"
systemd-run --unit=late-backup perl "$CTL/backup.pl" "$DATA/late" "$CTL" > /dev/null 2>&1
LATE=$(prop late-backup.service MainPID)
late_limits() { echo "$(prop late-backup.service IOWriteBandwidthMax)|$(prop late-backup.service MemoryHigh)|$(prop late-backup.service IOWeight)|$(iocost_qos)"; }
LBEFORE=$(late_limits)
touch "$CTL/backup-write"
wait_for 120 journal_has "$T16" "^restrict pid ${LATE:-none} "
check bus-restart-restricted "no 'restrict pid ${LATE:-?}' within 120 s" journal_has "$T16" "^restrict pid ${LATE:-none} "
check default-write-limit "$(journal_since "$T16" | grep -m1 "^restrict pid ${LATE:-none} "), $(late_limits)" \
    eval 'journal_since "$T16" | grep -m1 "^restrict pid ${LATE:-none} " | grep -q "IOWriteBandwidthMax=$DATA_DEV [0-9.]*MB/s .*on late-backup.service itself" && prop late-backup.service IOWriteBandwidthMax | grep -q "^$DATA_DEV [0-9]"'
systemctl restart dbus
check bus-restarted "dbus is $(systemctl is-active dbus)" wait_for 30 eval 'test "$(systemctl is-active dbus)" = active'
systemctl daemon-reexec
check pid1-reexecuted "systemd answers $(systemctl is-system-running 2>&1)" \
    wait_for 30 eval 'systemctl show -p Version --value | grep -q .'
rm -f "$CTL/backup-write"
T17=$(date +%s)
wait_for 120 journal_has "$T17" "^release pid ${LATE:-none} "
check bus-restart-lifted "limits '$LBEFORE' -> '$(late_limits)' after release (journal: $(journal_since "$T17" | grep -iE 'release|undo|fail|bus' | head -n 3 | tr '\n' ' '))" \
    wait_for 10 eval 'test "$(late_limits)" = "$LBEFORE"'
# Restricted again, still under iocost = "auto" (a write limit), then reloaded with iocost =
# "on": the held unit moves to the weight in place, through systemd, at the next tick (until
# stop 59 a reload froze every held restriction until its release). The crash below then has
# both to undo: the unit's limits as the restriction found them, and the disk's iocost.
T18=$(date +%s)
touch "$CTL/backup-write"
wait_for 120 journal_has "$T18" "^restrict pid ${LATE:-none} "
check bus-restart-restricts-again "no 'restrict pid ${LATE:-?}' within 120 s after the bus restarted: $(journal_since "$T18" | grep -E 'restrict|cannot|fail' | head -n 3 | tr '\n' ' ')" \
    journal_has "$T18" "^restrict pid ${LATE:-none} "
wait_for 10 eval 'test "$(late_limits)" != "$LBEFORE"'
check restricts-again-by-write-limit "late-backup.service: $(late_limits)" \
    eval 'prop late-backup.service IOWriteBandwidthMax | grep -q "^$DATA_DEV [0-9]" && ! weighted late-backup.service'
# Its process then holds 256 MiB of its own: MemoryHigh= is lifted (its write limit alone holds
# it), and the retune must leave it lifted.
T26=$(date +%s)
touch "$CTL/backup-alloc"
LIFT="^late-backup.service: memory.high lifted"
wait_for 60 journal_has "$T26" "$LIFT"
check held-unit-memory-lifted "MemoryHigh=$(prop late-backup.service MemoryHigh); $(journal_since "$T26" | grep -m2 "^late-backup.service: " | tr '\n' '|')" \
    eval 'journal_has "$T26" "$LIFT" && test "$(prop late-backup.service MemoryHigh)" = infinity'
T25=$(date +%s)
iocost_config on
RETUNE="^retune pid ${LATE:-none} .*IOWeight=1 .*through systemd (its memory.high left lifted"
wait_for 30 journal_has "$T25" "$RETUNE"
check reload-retunes-held-unit "no retune to IOWeight=1, memory.high left lifted, within 30 s of the reload: $(journal_since "$T25" | grep -E "configuration|pid ${LATE:-none} |cannot" | head -n 3 | tr '\n' ' ')" \
    journal_has "$T25" "$RETUNE"
wait_for 10 eval 'weighted late-backup.service && iocost_ours && no_write_limit late-backup.service'
LDURING=$(late_limits)
check retuned-by-weight-alone "late-backup.service after the retune: $LDURING" \
    eval 'no_write_limit late-backup.service && test "$(prop late-backup.service MemoryHigh)" = infinity'
check crash-before-by-weight "late-backup.service before the kill: $LDURING" \
    eval 'weighted late-backup.service && iocost_ours'
rm -f "$CTL/backup-write" "$CTL/backup-alloc"
KILLED=$(prop ioshield MainPID)
T19=$(date +%s)
kill -9 "$KILLED"
wait_for 120 journal_has "$T19" "restored what a previous instance left"
check crash-recovered "after kill -9 of pid $KILLED: $(systemctl is-active ioshield), journal: $(journal_since "$T19" | grep -m1 'restored what' )" \
    journal_has "$T19" "restored what a previous instance left: [1-9]"
check crash-undone "limits '$LBEFORE' -> '$LDURING' -> '$(late_limits)' after the daemon was killed and restarted" \
    wait_for 10 eval 'test "$(late_limits)" = "$LBEFORE"'
systemctl stop late-backup.service
rm -f "$DATA/late"

# --- an encrypted disk (dm-crypt, as LUKS): its speed kept under its UUID, not measured by its limit
# A desktop's root is often LUKS (and LVM) over its disk: the file system's disk is then dm-N,
# which has no WWN, serial or model in sysfs. The speed an earlier run kept for it is found under
# its device-mapper UUID. dm-crypt with a throwaway key stands in for LUKS (cryptsetup only adds
# the header on the disk): its workers encrypt the writes and send them to the disk below,
# charged to the writer's cgroup, where systemd puts the writer's limit.
systemctl stop ioshield
umount "$DATA" || log "umount $DATA: still in use by $(grep -l " $DATA" /proc/[0-9]*/mountinfo 2> /dev/null | head -n 3)"
MAPPED_UUID=CRYPT-LUKS2-0e2e0e2e0e2e0e2e0e2e0e2e0e2e0e2e-e2e-mapped
MAPPED_KEY=$(head -c 64 /dev/urandom | od -An -tx1 | tr -d ' \n')
MAPPED=
if modprobe dm_crypt && dmsetup create e2e-mapped --uuid "$MAPPED_UUID" \
    --table "0 $(blockdev --getsz "$DATA_DEV") crypt aes-xts-plain64 $MAPPED_KEY 0 $DATA_DEV 0" &&
    mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1,nodiscard /dev/mapper/e2e-mapped &&
    mount -o noinit_itable /dev/mapper/e2e-mapped "$DATA"; then
    MAPPED=/dev/$(basename "$(readlink -f /dev/mapper/e2e-mapped)")
    pass mapped-setup
else
    fail mapped-setup "dm_crypt, dmsetup, mkfs or mount failed: $(dmsetup ls 2>&1 | tr '\n' ' ')"
fi
log "mapped: $MAPPED ($(cat "/sys/block/${MAPPED#/dev/}/dm/uuid" 2>&1)) over $DATA_DEV, $(dmsetup table e2e-mapped | cut -d' ' -f3-4)"
# What the mapping writes at, encryption included (the emulated CPU's AES is part of it).
MS0=$(now)
dd if=/dev/zero of="$DATA/direct" bs=1M count=150 oflag=direct status=none
MS1=$(now)
rm -f "$DATA/direct"
MDIRECT=$(awk -v t0="$MS0" -v t1="$MS1" 'BEGIN { printf "%d", 150 * 1048576 / (t1 - t0) }')
log "mapped: 150 MiB written direct through the mapping at $MDIRECT B/s"
# What an earlier run would have kept for it: 28 MB/s (the data disk does 30).
SPEEDS=/var/lib/ioshield/disks.json
cp "$SPEEDS" "$RESULTS/disks-before-mapped.json" 2> /dev/null || rm -f "$RESULTS/disks-before-mapped.json"
KEY="\"dm-uuid:$MAPPED_UUID\": 28000000.0"
if grep -q '"' "$SPEEDS" 2> /dev/null; then
    perl -0pi -e "s/^\\{/{$KEY,/" "$SPEEDS"
else
    echo "{$KEY}" > "$SPEEDS"
fi
log "speeds file: $(tr -d '\n' < "$SPEEDS")"
T30=$(date +%s)
start_ioshield "$T30"
systemd-run --unit=mapped-writer --property=Type=exec \
    dd if=/dev/zero of="$DATA/mapped" bs=1M count=3000 status=none
wait_for 60 journal_has "$T30" "^restrict pid .* on $MAPPED,"
MJUDGED=$(journal_since "$T30" | grep -m1 "^$MAPPED: judging writers against")
MRESTRICT=$(journal_since "$T30" | grep -m1 "^restrict pid .* on $MAPPED,")
MLIMIT=$(prop mapped-writer.service IOWriteBandwidthMax)
log "journal: $MJUDGED | $MRESTRICT | IOWriteBandwidthMax=$MLIMIT"
check mapped-speed-kept "${MJUDGED:-no judging line for $MAPPED}" \
    eval 'echo "$MJUDGED" | grep -q "judging writers against 28.0 MB/s (measured in an earlier run)"'
# Held in place, limited on the mapped disk itself, below its kept speed.
check mapped-restricted "${MRESTRICT:-no restriction on $MAPPED}; IOWriteBandwidthMax='$MLIMIT'" \
    eval 'echo "$MRESTRICT" | grep -q "faster than the disk.s 28.0 MB/s.*IOWriteBandwidthMax=$MAPPED [0-9.]*MB/s .*on mapped-writer.service itself" &&
        test "$(echo "$MLIMIT" | awk "{ print (\$2 < 28000000) }")" = 1'
# The kernel holds the limit: systemd writes it on the disk the mapping originates from (its
# block_get_originating: vdb's 254:16 for dm-0 here), where the mapped writes arrive still
# charged to the writer's cgroup, or on the mapped disk's own number. What the cgroup wrote
# through the limited disk over 6 s stays under the limit (which the daemon may retune
# meanwhile: the higher of the two read), though memory.high alone may hold it there too: the
# rate is a bound, io.max the proof.
MDEV=$(cat "/sys/block/${MAPPED#/dev/}/dev" 2> /dev/null)
MBELOW=$(cat /sys/block/"${MAPPED#/dev/}"/slaves/*/dev 2> /dev/null | tr '\n' ' ')
MCG=/sys/fs/cgroup/system.slice/mapped-writer.service
MLIMITED=
for d in $MDEV $MBELOW; do
    grep -q "^$d .*wbps=[0-9]" "$MCG/io.max" 2> /dev/null && MLIMITED=$d && break
done
check mapped-io-max "io.max of mapped-writer.service: $(tr '\n' ' ' < "$MCG/io.max" 2>&1) (want a wbps limit on $MDEV or $MBELOW)" \
    test -n "$MLIMITED"
mwbps() { sed -n "s/^${MLIMITED:-none} .*wbps=\([0-9]*\).*/\1/p" "$MCG/io.max" 2> /dev/null; }
mwbytes() { sed -n "s/^${MLIMITED:-none} .*wbytes=\([0-9]*\).*/\1/p" "$MCG/io.stat" 2> /dev/null; }
ML0=$(mwbps)
MT0=$(now)
MW0=$(mwbytes)
sleep 6
MW1=$(mwbytes)
MT1=$(now)
ML1=$(mwbps)
MRATE=$(awk -v b="$((${MW1:-0} - ${MW0:-0}))" -v t0="$MT0" -v t1="$MT1" 'BEGIN { printf "%d", b / (t1 - t0) }')
MBOUND=$((${ML0:-0} > ${ML1:-0} ? ${ML0:-0} : ${ML1:-0}))
log "mapped: mapped-writer.service wrote $MRATE B/s through ${MLIMITED:-no limited disk} over 6 s under wbps=${ML0:-none} then ${ML1:-none}"
# The throttle's slices let a little over the limit through now and then (up to 3.6% here).
check mapped-held "mapped-writer.service wrote $MRATE B/s through ${MLIMITED:-no limited disk} over 6 s under wbps=${ML0:-none} then ${ML1:-none}" \
    test "$MRATE" -gt 1000000 -a "$MRATE" -le $((MBOUND * 110 / 100))
# Not measured by its own limit: the writes it holds back below the mapping count as in flight
# on it, and a measurement from them lowered the limit again (a linear mapping: 19.5-20.6 MB/s,
# the limit then 14.6-15.4 MB/s, within 2 s in 3 of 6 runs before stop 79).
MREMEASURED=$(journal_since "$T30" | grep -m1 "on $MAPPED: .*the disk now measures")
check mapped-not-measured-by-its-limit "$MREMEASURED" test -z "$MREMEASURED"
systemctl stop mapped-writer.service
rm -f "$DATA/mapped"
# Nothing kept, as on a new install: judged at the assumed speed, restricted, then let write
# faster by the speed probe. What the daemon measures and keeps is the disk's, not what the
# writer sends in bursts under memory.high and the limit below (6.12 before stop 80: 8.8-16.2
# MB/s measured and kept for a mapping that writes 29.8 MB/s direct).
systemctl stop ioshield
if [ -e "$RESULTS/disks-before-mapped.json" ]; then
    cp "$RESULTS/disks-before-mapped.json" "$SPEEDS"
else
    rm -f "$SPEEDS"
fi
T31=$(date +%s)
start_ioshield "$T31"
systemd-run --unit=mapped-fresh --property=Type=exec \
    dd if=/dev/zero of="$DATA/fresh" bs=1M count=3000 status=none
wait_for 60 journal_has "$T31" "^restrict pid .* on $MAPPED,"
check mapped-fresh-restricted "$(journal_since "$T31" | grep -m1 "^$MAPPED: judging writers against") | $(journal_since "$T31" | grep -m1 "^restrict pid .* on $MAPPED,")" \
    journal_has "$T31" "^restrict pid .* on $MAPPED, faster than the disk.s 25.0 MB/s"
# The speed probe lets it write at 25 MB/s after 10 s, then 50: its measurement comes then.
MFW0=$(awk '{ print $7 }' "/sys/block/${DATA_DEV#/dev/}/stat")
MFT0=$(now)
sleep 25
MFW1=$(awk '{ print $7 }' "/sys/block/${DATA_DEV#/dev/}/stat")
MFT1=$(now)
systemctl stop mapped-fresh.service
systemctl stop ioshield
MMEASURES=$(journal_since "$T31" | grep "on $MAPPED: .*the disk now measures" | sed 's/.*the disk now measures \([0-9.]*\) MB\/s.*/\1/' | tr '\n' ' ')
MKEPT=$(sed -n "s/.*\"dm-uuid:$MAPPED_UUID\": *\([0-9.eE+]*\).*/\1/p" "$SPEEDS" 2> /dev/null)
log "mapped, nothing kept: measured ${MMEASURES:-never} MB/s, kept ${MKEPT:-nothing} B/s, direct $MDIRECT B/s"
check mapped-measured-as-the-disk "measured ${MMEASURES:-never} MB/s and kept ${MKEPT:-nothing} B/s; written direct at $MDIRECT B/s" \
    awk -v m="$MMEASURES" -v k="${MKEPT:-0}" -v d="$MDIRECT" 'BEGIN {
        n = split(m, v, " ")
        for (i = 1; i <= n; i++) if (v[i] * 1e6 < 0.75 * d) exit 1
        exit (k > 0 && k < 0.75 * d) }'
# Held by the limit and memory.high while its speed is found, the writer still keeps most of
# the disk: on 6.12 memory.high alone, with the writer's dirty counts left to the kernel's 2 s
# flush, let it write in bursts (15-18 MB/s through the disk over 32 s, of 29.6 direct, stop
# 81's spike), and too little queued for the disk to be measured in 2 of 5 runs.
MFRATE=$(awk -v b="$(((MFW1 - MFW0) * 512))" -v t0="$MFT0" -v t1="$MFT1" 'BEGIN { printf "%d", b / (t1 - t0) }')
log "mapped, nothing kept: the writer wrote $MFRATE B/s through $DATA_DEV over 25 s"
check mapped-fresh-writer-speed "the writer wrote $MFRATE B/s through $DATA_DEV over 25 s while its speed was found; written direct at $MDIRECT B/s" \
    test "$MFRATE" -ge $((MDIRECT * 65 / 100))
rm -f "$DATA/fresh"
umount "$DATA"
dmsetup remove e2e-mapped || fail mapped-cleanup "dmsetup remove: $(dmsetup ls 2>&1 | tr '\n' ' ')"
# The data disk holds the mapping's ciphertext now: a file system again for what follows.
mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1,nodiscard "$DATA_DEV"
mount -o noinit_itable "$DATA_DEV" "$DATA"

# --- remove, then purge --------------------------------------------------------------------
systemctl start ioshield # remove must stop a running service
if dpkg -r ioshield > "$RESULTS/dpkg-remove.log" 2>&1; then
    pass remove
else
    fail remove "dpkg -r exited $?: $(tail -n 5 "$RESULTS/dpkg-remove.log" | tr '\n' ' ')"
fi
cat "$RESULTS/dpkg-remove.log"
check remove-stops-service "ioshield is $(systemctl is-active ioshield) after remove" \
    eval '! pgrep -x ioshield > /dev/null && test "$(systemctl is-active ioshield)" != active'
check remove-binary "/usr/bin/ioshield is still there" test ! -e /usr/bin/ioshield
check remove-user-drop-in "the user@.service drop-in is still there" \
    test ! -e /usr/lib/systemd/system/user@.service.d/50-ioshield.conf
# debhelper's postrm masks the unit on remove (so a leftover enable symlink cannot start it) and
# unmasks it on purge.
check remove-unit "unit file left: $(ls /lib/systemd/system/ioshield.service /usr/lib/systemd/system/ioshield.service 2>/dev/null)" \
    eval '! ls /lib/systemd/system/ioshield.service /usr/lib/systemd/system/ioshield.service > /dev/null 2>&1'
check remove-keeps-conffile "/etc/ioshield/ioshield.toml is gone after remove (conffiles stay until purge)" \
    test -e /etc/ioshield/ioshield.toml
# The measured disk speeds stay until purge (a reinstall starts right).
check remove-keeps-state "/var/lib/ioshield after remove: $(ls /var/lib/ioshield 2>&1 | tr '\n' ' ')" \
    test -e /var/lib/ioshield/disks.json
check remove-status "dpkg status: $(dpkg-query -W -f='${Status}' ioshield 2>&1)" \
    test "$(dpkg-query -W -f='${Status}' ioshield 2>/dev/null)" = "deinstall ok config-files"
if dpkg --purge ioshield > "$RESULTS/dpkg-purge.log" 2>&1; then
    pass purge
else
    fail purge "dpkg --purge exited $?: $(tail -n 5 "$RESULTS/dpkg-purge.log" | tr '\n' ' ')"
fi
cat "$RESULTS/dpkg-purge.log"
rm -rf /etc/systemd/system/ioshield.service.d
LEFT=$(find /etc/ioshield /var/lib/ioshield /etc/systemd/system /var/lib/systemd/deb-systemd-helper-enabled \
    /var/lib/systemd/deb-systemd-helper-masked -name 'ioshield*' ! -name 'ioshield-e2e*' 2>/dev/null)
check purge-clean "left after purge: $LEFT" test -z "$LEFT"
check purge-status "dpkg still knows it: $(dpkg-query -W -f='${Status}' ioshield 2>&1)" \
    eval '! dpkg-query -W ioshield > /dev/null 2>&1'

journalctl -u ioshield -o short-monotonic --no-pager > "$RESULTS/ioshield.journal" 2>&1
# What each judged second of a disk showed (the fields of the daemon's "disk period" lines),
# which the journal's text leaves out: where a disk's speed came from.
journalctl -u ioshield -o json --no-pager \
    --output-fields=MESSAGE,IOSHIELD_DISK,IOSHIELD_BYTES,IOSHIELD_SECONDS,IOSHIELD_WRITES_QUEUED,IOSHIELD_BACKLOG,IOSHIELD_DRAINED,IOSHIELD_HOLD 2>&1 |
    grep '"MESSAGE":"disk period' > "$RESULTS/disk-periods.json"
echo "e2e: $PASSED passed, $FAILED failed" | tee -a "$CHECKS"
[ "$FAILED" -eq 0 ]
