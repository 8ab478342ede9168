# The spike of docs/bench/shell-scope.md (composed as it says): a copy run in the foreground of
# a terminal's shell, whose scope holds the shell and the copy and nothing else ("alone"), and
# beside a job the shell left running ("shared"), shipped defaults, the disk never measured
# ("fresh", the daemon's speeds file removed and the daemon restarted), then measured
# ("again"); three rounds.
shell_copy() {
    local label=$1 kind=$2 cmd
    local dd="dd if=/dev/zero of=$DATA/copy bs=1M count=400 conv=fsync"
    rm -f "$DATA/copy"
    # `; true`: the shell waits for dd instead of becoming it.
    case $kind in
        alone) cmd="$dd; true" ;;
        shared) cmd="sleep 100 & $dd; kill \$!" ;;
    esac
    beside_commit "$kind $label" "dd 400 MB from a shell's scope ($kind)" 419430400 \
        systemd-run --scope --quiet --slice=user.slice --unit="tab-$kind-$label" sh -c "$cmd"
    rm -f "$DATA/copy"
}
for round in 1 2 3; do
    for kind in ${SHELL_KINDS:-alone shared}; do
        systemctl stop ioshield
        rm -f /var/lib/ioshield/disks.json
        T=$(date +%s)
        start_ioshield "$T"
        shell_copy "fresh-$round" "$kind"
        shell_copy "again-$round" "$kind"
        journal_since "$T" | grep -E "^(restrict|release) pid [0-9]* \(dd\)|^retune pid|held on its own unit|writeback of the" |
            cut -c1-330 | sed "s/^/e2e: journal $kind $round: /"
        sleep 3
    done
done
pass spike
echo "e2e: $PASSED passed, $FAILED failed" | tee -a "$CHECKS"
