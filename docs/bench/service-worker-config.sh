# A spike of docs/bench/service-worker.md and commit-pause.md ("Stop 86"): a service held with its
# own worker beside a committing service, under configuration variants, 3 rounds each (the disk
# never measured, then measured). Composed as service-worker-keeper.sh is (this file in its
# place), after a line that names the variants: "shipped" (no configuration file) or
# KEY=VALUE for [device."$DATA_DEV"], e.g.
#   echo 'VARIANTS="shipped memory_high=8MiB memory_high=4MiB"'
#   echo 'VARIANTS="shipped limit=0.6 limit=0.5"'
# Summary: python3 docs/bench/service-worker-config.py DIR/<kernel>/console.log
mkdir -p "$DATA/inner" /etc/ioshield
for round in 1 2 3; do
    for variant in $VARIANTS; do
        if [ "$variant" = shipped ]; then
            rm -f /etc/ioshield/ioshield.toml
        else
            key=${variant%%=*} value=${variant#*=}
            # TOML: numbers as they are, anything else quoted.
            case $value in *[!0-9.]*) value="\"$value\"" ;; esac
            printf '[device."%s"]\n%s = %s\n' "$DATA_DEV" "$key" "$value" > /etc/ioshield/ioshield.toml
        fi
        label=$(echo "$variant" | tr '=' '-')
        systemctl stop ioshield
        rm -f /var/lib/ioshield/disks.json
        T=$(date +%s)
        start_ioshield "$T"
        service_copy "$label-fresh-$round"
        service_copy "$label-again-$round"
        journal_since "$T" | grep -E "^restrict pid [0-9]* \(dd\)" | grep -o "IOWriteBandwidthMax=.*" | cut -c1-200 |
            sed "s/^/e2e: laps $label $round: /"
        journal_since "$T" | grep -E "memory.high|MemoryHigh" | grep -v "^restrict" | cut -c1-200 | head -8 |
            sed "s/^/e2e: mem $label $round: /"
        sleep 2
    done
done
rm -f /etc/ioshield/ioshield.toml
pass spike
echo "e2e: $PASSED passed, $FAILED failed" | tee -a "$CHECKS"
