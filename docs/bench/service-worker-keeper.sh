# A side spike of docs/bench/service-worker.md ("Is the io controller's enabling the slow first
# call?"): composed as that file says, with service_copy() from service-worker.sh and this file
# after it in place of the rest of service-worker.sh. 6.12 only: --kernel 6.12.
# Does a unit keeping the io controller on in system.slice make the first SetUnitProperties quick?
mkdir -p "$DATA/inner"
for round in 1 2 3; do
    for keeper in off on; do
        systemctl stop io-keeper 2>/dev/null
        [ $keeper = on ] && systemd-run --quiet --unit=io-keeper --property=IOAccounting=yes sleep infinity
        sleep 2
        echo "e2e: keeper $keeper round $round: system.slice subtree_control: $(cat /sys/fs/cgroup/system.slice/cgroup.subtree_control)"
        systemctl stop ioshield
        rm -f /var/lib/ioshield/disks.json
        T=$(date +%s)
        start_ioshield "$T"
        service_copy "k$keeper-fresh-$round"
        echo "e2e: keeper $keeper round $round between: system.slice subtree_control: $(cat /sys/fs/cgroup/system.slice/cgroup.subtree_control)"
        service_copy "k$keeper-again-$round"
        journal_since "$T" | grep -E "^restrict pid [0-9]* \(dd\)" | grep -o "in [0-9]* ms: .*" | cut -c1-200 | sed "s/^/e2e: laps keeper $keeper round $round: /"
    done
done
systemctl stop io-keeper 2>/dev/null
pass spike
echo "e2e: $PASSED passed, $FAILED failed" | tee -a "$CHECKS"
