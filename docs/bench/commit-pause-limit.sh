# A spike of docs/bench/commit-pause.md ("Stop 86"): the write limit's fraction for a service held
# on a systemd host: the shipped limit = 0.75 against 0.6 and 0.5, 3 rounds each. Composed as
# service-worker-keeper.sh is (this file in its place); 6.12 only (--kernel 6.12).
mkdir -p "$DATA/inner" /etc/ioshield
for round in 1 2 3; do
    for mh in 0.75 0.6 0.5; do
        if [ $mh = 0.75 ]; then rm -f /etc/ioshield/ioshield.toml
        else printf '[device."%s"]\nlimit = %s\n' "$DATA_DEV" "$mh" > /etc/ioshield/ioshield.toml; fi
        systemctl stop ioshield
        rm -f /var/lib/ioshield/disks.json
        T=$(date +%s)
        start_ioshield "$T"
        service_copy "l$mh-fresh-$round"
        service_copy "l$mh-again-$round"
        journal_since "$T" | grep -E "^restrict pid [0-9]* \(dd\)" | grep -o "IOWriteBandwidthMax=.*" | cut -c1-200 | sed "s/^/e2e: laps $mh $round: /"
        journal_since "$T" | grep -E "memory.high|MemoryHigh" | grep -v "^restrict" | cut -c1-200 | head -8 | sed "s/^/e2e: mem $mh $round: /"
        sleep 2
    done
done
rm -f /etc/ioshield/ioshield.toml
pass spike
echo "e2e: $PASSED passed, $FAILED failed" | tee -a "$CHECKS"
