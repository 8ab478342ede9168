# A spike's tail for tests/vm/e2e-systemd.sh (docs/bench/write-limit-memory.md, "On a systemd
# host"): two copies beside the committing service with the package's shipped configuration,
# the first on a disk never measured. Run as
#   { sed -n '1,/^# --- configure:/p' tests/vm/e2e-systemd.sh | sed '$d'
#     sed -n '/^beside_commit() {/,/^}/p; /^cross_slice() {/,/^}/p' tests/vm/e2e-systemd.sh
#     cat docs/bench/write-limit-systemd.sh; } > /tmp/spike.sh
#   cargo xtask package && cargo xtask vm e2e --kernel 6.12,6.1 --script /tmp/spike.sh --out DIR
# (`--deb PKG` for another build); its MEASURE and journal lines are in DIR/<kernel>/console.log.
for label in fresh-default again-default; do
    T=$(date +%s)
    cross_slice "$label" system.slice
    journal_since "$T" | grep -E "^(restrict|release) pid [0-9]* \(dd\)|^retune pid|held on its own unit" | cut -c1-330 |
        sed 's/^/e2e: journal: /'
    log "MemoryHigh 9 s in: $(cat "$RESULTS/memory-high-$label" 2>/dev/null)"
    sleep 3
done
pass spike
echo "e2e: $PASSED passed, $FAILED failed" | tee -a "$CHECKS"
