# A spike of docs/bench/commit-pause.md ("Stop 86", "Stop 87"): what the other service's commits
# wait for beside a service held by its write limit on a systemd host. function_graph (10 ms
# threshold) on the committing load and the disk's jbd2 thread (TRACE=0: no tracer), and the
# 30 MB/s disk's counters every ~50 ms (0.1-0.3 s in practice; bash builtins and one sleep per
# sample) in $RESULTS/disk-LABEL.txt: uptime, writes completed, sectors written, requests in
# flight, flushes completed, ms spent in flushes. Composed as unit-set-ftrace.sh is (this file
# in its place), after a line `ROUNDS=N` (default 6) and `TRACE=0` if wanted; 6.12 only
# (--kernel 6.12). Summaries: python3 docs/bench/commit-pause-systemd.py DIR/6.12/results (what
# each pause waited for, traced runs) and python3 docs/bench/commit-pause-disk.py
# DIR/6.12/results (what the disk did around each restriction and over each pause).
TRACE=${TRACE:-1}
T=/sys/kernel/tracing
[ -d $T/events ] || mount -t tracefs tracefs $T
echo 0 > $T/tracing_on
echo mono > $T/trace_clock
echo nop > $T/current_tracer
: > $T/set_ftrace_filter
for f in '__x64_sys_fdatasync' '__x64_sys_fsync' '__x64_sys_write' '__x64_sys_pwrite64' '__x64_sys_openat' \
         'ext4_sync_file' 'file_write_and_wait_range' 'file_check_and_advance_wb_err' \
         'jbd2_log_wait_commit' 'jbd2_complete_transaction' 'jbd2_journal_commit_transaction' \
         'jbd2_journal_finish_inode_data_buffers' 'jbd2_journal_submit_inode_data_buffers' \
         'ext4_journal_submit_inode_data_buffers' 'ext4_journal_finish_inode_data_buffers' \
         'filemap_fdatawait_range_keep_errors' 'filemap_fdatawrite_wbc' 'folio_wait_writeback' \
         'balance_dirty_pages' 'balance_dirty_pages_ratelimited_flags' 'wait_transaction_locked' \
         'start_this_handle' 'add_transaction_credits' 'jbd2_journal_stop' 'jbd2__journal_start' \
         'ext4_buffered_write_iter' 'generic_perform_write' 'ext4_da_write_begin' 'ext4_da_write_end' \
         '__filemap_get_folio' 'jbd2_journal_wait_updates' 'jbd2_journal_write_metadata_buffer' \
         'jbd2_submit_inode_data' 'journal_submit_commit_record' 'journal_wait_on_commit_record' \
         'blkdev_issue_flush' 'submit_bio_wait' 'ext4_writepages' 'mpage_prepare_extent_to_map' \
         'ext4_map_blocks' 'down_write' 'down_read' 'mutex_lock' 'io_schedule' 'schedule_timeout'; do
    echo "$f" >> $T/set_ftrace_filter 2>/dev/null || echo "e2e: no ftrace function $f"
done
echo "e2e: ftrace functions filtered: $(wc -l < $T/set_ftrace_filter)"
echo 10000 > $T/tracing_thresh
echo function_graph > $T/current_tracer
echo funcgraph-abstime > $T/trace_options 2>/dev/null
echo funcgraph-proc > $T/trace_options 2>/dev/null
echo 32768 > $T/buffer_size_kb
# Untraced: no tracer hooked into the kernel at all.
[ "$TRACE" = 1 ] || echo nop > $T/current_tracer
DISK=$(basename "$DATA_DEV")
JBD2=$(pgrep -x "jbd2/$DISK-8" | head -n1)
echo "e2e: jbd2 thread of $DISK: ${JBD2:-none}"
sample_disk() {
    local up stat
    while :; do
        read -r up _ < /proc/uptime
        read -r -a stat < "/sys/block/$DISK/stat"
        echo "$up ${stat[4]} ${stat[6]} ${stat[8]} ${stat[15]:-0} ${stat[16]:-0}"
        sleep 0.05
    done
}
traced_copy() {
    local label=$1
    (
        for _ in $(seq 100); do
            p=$(systemctl show -p MainPID --value "commit-worker-$label" 2>/dev/null)
            [ "${p:-0}" -gt 0 ] && break
            sleep 0.1
        done
        echo "$p $JBD2" > $T/set_ftrace_pid
        echo "e2e: tracing commit load $p and jbd2 $JBD2 for $label"
    ) &
    : > $T/trace
    [ "$TRACE" = 1 ] && echo 1 > $T/tracing_on
    sample_disk > "$RESULTS/disk-$label.txt" &
    local sampler=$!
    service_copy "$label"
    kill $sampler
    echo 0 > $T/tracing_on
    [ "$TRACE" = 1 ] && cp $T/trace "$RESULTS/trace-$label.txt"
}
mkdir -p "$DATA/inner"
for round in $(seq "${ROUNDS:-6}"); do
    systemctl stop ioshield
    rm -f /var/lib/ioshield/disks.json
    T0=$(date +%s)
    start_ioshield "$T0"
    traced_copy "fresh-$round"
    traced_copy "again-$round"
    journalctl -u ioshield -o short-monotonic --no-pager --since "@$T0" | grep -E "restrict pid [0-9]* \(dd\)" |
        sed -E 's/dirtied.*(in [0-9]+ ms: .*)/\1/' | cut -c1-200 | sed "s/^/e2e: laps $round: /"
    sleep 3
done
journalctl -o short-monotonic --no-pager -b > "$RESULTS/journal-all.txt"
pass spike
echo "e2e: $PASSED passed, $FAILED failed" | tee -a "$CHECKS"
