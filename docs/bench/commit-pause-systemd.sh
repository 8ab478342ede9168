# A spike of docs/bench/commit-pause.md ("Stop 86"): what the other service's commits wait for beside
# a service held by its write limit on a systemd host. function_graph (10 ms threshold) on the
# committing load and the disk's jbd2 thread; composed as unit-set-ftrace.sh is (this file in its
# place, after a line `ROUNDS=N` for more than 6 rounds); 6.12 only (--kernel 6.12). Summaries:
# python3 docs/bench/commit-pause-systemd.py DIR/6.12/results (what each pause waited for) and
# python3 docs/bench/commit-pause-queue.py DIR/6.12/results (the disk's queue around each restriction)
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
DISK=$(basename "$DATA_DEV")
JBD2=$(pgrep -x "jbd2/$DISK-8" | head -n1)
echo "e2e: jbd2 thread of $DISK: ${JBD2:-none}"
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
    echo 1 > $T/tracing_on
    # The disk's queue (uptime, in-flight reads and writes, sectors written so far): meant
    # every 50 ms, every ~0.3 s under the tracer (stop 87; each sample forks).
    ( while :; do echo "$(cut -d' ' -f1 /proc/uptime) $(cat /sys/block/$DISK/inflight) $(awk '{print $7}' /sys/block/$DISK/stat)"; sleep 0.05; done > "$RESULTS/queue-$label.txt" ) &
    QPID=$!
    service_copy "$label"
    kill $QPID
    echo 0 > $T/tracing_on
    cp $T/trace "$RESULTS/trace-$label.txt"
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
