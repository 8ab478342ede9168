# A spike of docs/bench/service-worker.md ("Stop 86: a smaller memory.high"): a service held with
# its own worker, the shipped memory_high ("auto") against 8 MiB and 4 MiB fixed, 3 rounds each.
# Composed as service-worker-keeper.sh is (this file in its place); 6.12 only (--kernel 6.12).
mkdir -p "$DATA/inner" /etc/ioshield
for round in 1 2 3; do
    for mh in auto 8MiB 4MiB; do
        if [ $mh = auto ]; then rm -f /etc/ioshield/ioshield.toml
        else printf '[device."%s"]\nmemory_high = "%s"\n' "$DATA_DEV" "$mh" > /etc/ioshield/ioshield.toml; fi
        systemctl stop ioshield
        rm -f /var/lib/ioshield/disks.json
        T=$(date +%s)
        start_ioshield "$T"
        service_copy "m$mh-fresh-$round"
        service_copy "m$mh-again-$round"
        journal_since "$T" | grep -E "^restrict pid [0-9]* \(dd\)" | grep -o "MemoryHigh=.*" | cut -c1-200 | sed "s/^/e2e: laps $mh $round: /"
        journal_since "$T" | grep -E "memory.high|MemoryHigh" | grep -v "^restrict" | cut -c1-200 | head -8 | sed "s/^/e2e: mem $mh $round: /"
        sleep 2
    done
done
rm -f /etc/ioshield/ioshield.toml
pass spike
echo "e2e: $PASSED passed, $FAILED failed" | tee -a "$CHECKS"
