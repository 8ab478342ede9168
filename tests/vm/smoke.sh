#!/bin/sh
# Smoke test for a guest kernel: `ioshield top` must load its BPF programs and count a writer.
# An offender writes to the data disk while `top --json` samples three times; /proc/PID/io of
# the offender is read around the sampling as the kernel's own figure to compare with.
# Env (all optional): SMOKE_SAMPLES (3), SMOKE_INTERVAL (2s).
set -u
SAMPLES=${SMOKE_SAMPLES:-3}
INTERVAL=${SMOKE_INTERVAL:-2s}

ioshield-load offender --file "$DATA/offender" --delay 1s --out "$RESULTS/offender.json" \
    2> "$RESULTS/offender.log" &
off=$!
echo "$off" > "$RESULTS/offender.pid"
# Let the offender get going, so every sample sees it writing.
sleep 2

snapshot() { # label: uptime and the offender's write_bytes, as one line
    echo "$1 $(cut -d' ' -f1 /proc/uptime) $(grep '^write_bytes' "/proc/$off/io" | cut -d' ' -f2)"
}
# The programs attach while the offender is stopped: under multi-threaded TCG, turning the
# dirty tracepoint on while another vCPU runs __folio_mark_dirty can execute the breakpoint the
# kernel patches in on the way (an int3 oops there; the 6.12 smoke panicked three boots in a row
# at stop 57, with the offender writing as top attached). It writes again once top says so.
kill -STOP "$off"
IOSHIELD_LOG=info ioshield top --json --count "$SAMPLES" --interval "$INTERVAL" \
    > "$RESULTS/top.json" 2> "$RESULTS/top.log" &
top=$!
waited=0
while [ "$waited" -lt 600 ] && kill -0 "$top" 2> /dev/null &&
    ! grep -q "probes attached" "$RESULTS/top.log"; do
    sleep 0.1
    waited=$((waited + 1))
done
kill -CONT "$off"
snapshot before > "$RESULTS/offender-io.txt"
wait "$top"
top_status=$?
snapshot after >> "$RESULTS/offender-io.txt"
echo "top exit $top_status"
cat "$RESULTS/top.log"

kill -TERM "$off"
wait "$off"
cat "$RESULTS/offender.log"
grep -o '"comm":"ioshield-load"[^}]*' "$RESULTS/top.json" | head -n 5
exit "$top_status"
