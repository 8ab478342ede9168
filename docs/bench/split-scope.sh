# The spike of docs/bench/split-scope.md (composed as it says).
# Spike: a copy from a shell's scope (split into a scope of its own by the daemon), shipped
# defaults, the disk never measured, then measured.
scope_copy() {
    local label=$1
    rm -f "$DATA/copy"
    beside_commit "scope $label" "dd 400 MB in a shared scope" 419430400 \
        systemd-run --scope --quiet --slice=user.slice --unit="term-$label" \
        sh -c "sleep 100 & dd if=/dev/zero of=$DATA/copy bs=1M count=400 conv=fsync; kill \$!"
    rm -f "$DATA/copy"
}
for label in fresh again; do
    T=$(date +%s)
    scope_copy "$label"
    journal_since "$T" | grep -E "^(restrict|release) pid [0-9]* \(dd\)|^retune pid|held on its own unit|writeback of the|write limit lifted|write limit not lifted|not held meanwhile|putting its limits back" | cut -c1-330 |
        sed 's/^/e2e: journal: /'
    sleep 3
done
pass spike
echo "e2e: $PASSED passed, $FAILED failed" | tee -a "$CHECKS"
