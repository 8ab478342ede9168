# A spike of docs/bench/commit-pause.md ("Stop 87"): the disk's requests and cache flushes while
# a service held by its write limit copies beside a committing service, on a systemd host,
# without a tracer. Every ~50 ms (bash builtins and one sleep per sample) the 30 MB/s disk's
# counters go to $RESULTS/flush-LABEL.txt: uptime, writes completed, sectors written, requests
# in flight, flushes completed, ms spent in flushes. Composed as service-worker-config.sh is
# (this file in its place, after a line `ROUNDS=N`); summary:
# python3 docs/bench/commit-pause-flush.py DIR/<kernel>/results
DISK=$(basename "$DATA_DEV")
sample_disk() {
    local up stat
    while :; do
        read -r up _ < /proc/uptime
        read -r -a stat < "/sys/block/$DISK/stat"
        echo "$up ${stat[4]} ${stat[6]} ${stat[8]} ${stat[15]:-0} ${stat[16]:-0}"
        sleep 0.05
    done
}
sampled_copy() {
    local label=$1
    sample_disk > "$RESULTS/flush-$label.txt" &
    local sampler=$!
    service_copy "$label"
    kill $sampler
}
mkdir -p "$DATA/inner"
for round in $(seq "${ROUNDS:-6}"); do
    systemctl stop ioshield
    rm -f /var/lib/ioshield/disks.json
    T0=$(date +%s)
    start_ioshield "$T0"
    sampled_copy "fresh-$round"
    sampled_copy "again-$round"
    sleep 3
done
journalctl -o short-monotonic --no-pager -b > "$RESULTS/journal-all.txt"
pass spike
echo "e2e: $PASSED passed, $FAILED failed" | tee -a "$CHECKS"
