# The spike of docs/bench/service-worker.md (composed as shell-scope.md says, with this file in
# place of shell-scope.sh): a service whose script runs a committing worker (4 KiB + fdatasync
# every 100 ms, "inner") in the background and a copy in the foreground, beside a committing
# service of its own ("outer", beside_commit's), shipped defaults, the disk never measured
# ("fresh", the daemon's speeds file removed and the daemon restarted), then measured
# ("again"); three rounds.
service_copy() {
    local label=$1 inner="$RESULTS/inner-$1.json" sum
    rm -f "$DATA/copy" "$inner"
    beside_commit "worker $label" "dd 400 MB from a service beside its own committing worker" 419430400 \
        systemd-run --wait --quiet --unit="svc-$label" bash -c '
            /e2e/ioshield-load commit --duration 300s --dir "$1/inner" --out "$2" &
            sleep 2
            dd if=/dev/zero of="$1/copy" bs=1M count=400 conv=fsync
            kill $!; wait' svc "$DATA" "$inner"
    sum=$(/e2e/ioshield-load summarize "$inner" 2>/dev/null |
        awk '$1 == "commit" { print "inner longest pause " $3 ", paused " $4 " in total, " $6 " pauses over 100 ms" }')
    echo "MEASURE worker $label inner: ${sum:-no inner record}" | tee -a "$CHECKS"
    rm -f "$DATA/copy"
}
mkdir -p "$DATA/inner"
for round in 1 2 3; do
    systemctl stop ioshield
    rm -f /var/lib/ioshield/disks.json
    T=$(date +%s)
    start_ioshield "$T"
    service_copy "fresh-$round"
    service_copy "again-$round"
    journal_since "$T" | grep -E "^(restrict|release) pid [0-9]* \(dd\)|^retune pid|held on its own unit|writeback of the" |
        cut -c1-330 | sed "s/^/e2e: journal worker $round: /"
    sleep 3
done
pass spike
echo "e2e: $PASSED passed, $FAILED failed" | tee -a "$CHECKS"
