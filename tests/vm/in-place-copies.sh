#!/bin/bash
# Held in place: six 400 MB copies (`dd ... conv=fsync`), each a service of its own started by
# systemd-run, next to a commit load service (4 KiB + fdatasync every 100 ms), with the shipped
# configuration (tau 4 s, hold 5 s to keep it short). Run on the systemd test bed:
#   cargo xtask package && cargo xtask vm e2e --kernel 6.12,6.1 --script tests/vm/in-place-copies.sh --out DIR
# Per copy, a line in DIR/<kernel>/results/summary.txt: its time, the commit's longest pause,
# releases as calm mid-copy, and how long after the copy started the disk first wrote 2 MB in
# half a second (`stall`): a unit held in place gets the io controller with ioshield's write
# property, and until stop 54 what its writer had dirtied waited for the kernel's periodic
# writeback (docs/bench/writeback-kick.md). The samples (every 100 ms: the unit's memory.stat,
# memory.high and io.max, the disk's written sectors) are in sample-N.txt.
set -u
log() { echo "in-place: $*"; }
journal_since() { journalctl -u ioshield -o cat --no-pager --since "@$1" 2>/dev/null; }
wait_for() { local end=$((SECONDS + $1)); shift; until "$@"; do [ "$SECONDS" -ge "$end" ] && return 1; sleep 0.5; done; }
journal_has() { journal_since "$1" | grep -q -- "$2"; }
T0=$(date +%s)
dpkg -i "$DEB" > "$RESULTS/dpkg.log" 2>&1 || { log "dpkg -i failed: $(tail -n 3 "$RESULTS/dpkg.log")"; exit 1; }
wait_for 90 journal_has "$T0" "probes attached"
cat > /etc/ioshield/ioshield.toml <<EOT
[daemon]
tau = "4s"
[device."$DATA_DEV"]
hold = "5s"
EOT
# The speed estimator's periods in the journal, as in the e2e: whether the disk is measured.
mkdir -p /etc/systemd/system/ioshield.service.d
printf '[Service]\nEnvironment=IOSHIELD_LOG=info,ioshield::detect::bandwidth=debug\n' \
    > /etc/systemd/system/ioshield.service.d/debug-log.conf
systemctl daemon-reload
T1=$(date +%s)
systemctl restart ioshield
wait_for 90 journal_has "$T1" "probes attached"
DEVB=${DATA_DEV#/dev/}
# sample UNIT PID: one line every 100 ms while PID lives (bash builtins only: no fork per line).
sample() {
    local cg=/sys/fs/cgroup/system.slice/$1 pid=$2 k v file dirty wb high st iomax
    while [ -d "/proc/$pid" ]; do
        file=0 dirty=0 wb=0 high=- iomax=-
        if [ -r "$cg/memory.stat" ]; then
            while read -r k v; do
                case $k in file) file=$v ;; file_dirty) dirty=$v ;; file_writeback) wb=$v ;; esac
            done < "$cg/memory.stat"
            high=$(<"$cg/memory.high")
            iomax=$(<"$cg/io.max")
        fi
        st=$(<"/sys/block/$DEVB/stat")
        set -- $st
        echo "$EPOCHREALTIME $7 $file $dirty $wb $high ${iomax//[$'\n' ]/,}"
        sleep 0.1
    done
}
for i in $(seq 1 "${COPIES:-6}"); do
    systemd-run --unit="commit-$i" /e2e/ioshield-load commit --duration 300s --dir "$DATA" \
        --out "$RESULTS/commit-$i.json" > /dev/null 2>&1
    sleep 3
    rm -f "$DATA/copy"
    sync
    t=$(date +%s)
    systemd-run --quiet --unit="copy-$i" dd if=/dev/zero of="$DATA/copy" bs=1M count=400 conv=fsync
    pid=$(systemctl show -P MainPID "copy-$i.service")
    sample "copy-$i.service" "$pid" > "$RESULTS/sample-$i.txt"
    systemctl stop "commit-$i"
    sleep 1
    commit=$(/e2e/ioshield-load summarize "$RESULTS/commit-$i.json" 2>/dev/null | awk '$1 == "commit" { print $3 }')
    calm=$(journal_since "$t" | grep -c "^release pid $pid .*< 20%")
    # The copy's time from the first to the last sample; the stall: until the disk first wrote
    # 2 MB (4096 sectors) within half a second.
    awk -v i="$i" -v commit="${commit:-?}" -v calm="$calm" '
        { t[NR] = $1; w[NR] = $2 }
        END {
            stall = "-"
            for (a = 1; a <= NR && stall == "-"; a++)
                for (b = a; b <= NR && t[b] - t[a] < 0.5; b++)
                    if (w[b] - w[a] >= 4096) { stall = sprintf("%.1f", t[a] - t[1]); break }
            printf "COPY %d: %.1f s, commit longest pause %s, released as calm %d, stall %s s\n", i, t[NR] - t[1], commit, calm, stall
        }' "$RESULTS/sample-$i.txt" | tee -a "$RESULTS/summary.txt"
    sleep 6
done
journalctl -u ioshield -o short-monotonic --no-pager > "$RESULTS/ioshield.journal"
# The estimator's periods keep their numbers in journal fields (BYTES, WRITES_QUEUED, ...).
journalctl -u ioshield -o json --no-pager MESSAGE="disk period" > "$RESULTS/disk-periods.json"
