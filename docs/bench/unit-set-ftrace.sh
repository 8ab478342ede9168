# A spike of docs/bench/unit-set.md ("Stop 86"): where PID 1 spends a restriction of a service in
# place, by the kernel's function_graph tracer (5 ms threshold) on PID 1. Composed as that section
# says, with service_copy() from service-worker.sh; 6.12 only (--kernel 6.12).
T=/sys/kernel/tracing
[ -d $T/events ] || mount -t tracefs tracefs $T
echo "e2e: tracers: $(cat $T/available_tracers)"
echo 0 > $T/tracing_on
echo mono > $T/trace_clock
echo nop > $T/current_tracer
: > $T/set_ftrace_filter
for f in '__x64_sys_*' 'kernfs_fop_write_iter' 'cgroup_file_write' 'cgroup_subtree_control_write' \
         'cgroup_apply_control*' 'cgroup_update_dfl_csses' 'cgroup_migrate*' 'cgroup_attach_lock' \
         'percpu_down_write' 'rcu_sync_enter' 'synchronize_rcu*' 'blk_mq_freeze_queue*' \
         'blk_throtl_init' 'tg_set_*' 'blkg_conf_*' 'ioc_*_write' 'wb_wait_for_completion' \
         'mem_cgroup_css_online' 'cgroup_mkdir' 'cgroup_rmdir' 'css_create' 'online_css' \
         'cgroup_procs_write*' 'cgroup_kn_lock_live' 'mutex_lock' 'down_write' 'vfs_fsync_range' \
         'do_sys_openat2' 'ep_poll' 'blkcg_activate_policy' 'memory_high_write' 'memory_max_write' \
         'io_*_write' 'blkg_create' 'blkg_lookup_create' 'wbt_*' 'rq_qos_*' 'mutex_lock_killable'; do
    echo "$f" >> $T/set_ftrace_filter 2>/dev/null || echo "e2e: no ftrace function $f"
done
echo "e2e: ftrace functions filtered: $(wc -l < $T/set_ftrace_filter)"
echo 1 > $T/set_ftrace_pid
echo 5000 > $T/tracing_thresh
echo function_graph > $T/current_tracer
echo funcgraph-abstime > $T/trace_options 2>/dev/null
echo funcgraph-proc > $T/trace_options 2>/dev/null
echo 16384 > $T/buffer_size_kb
mkdir -p "$DATA/inner"
for round in 1 2 3 4 5 6 7 8; do
    systemctl stop ioshield
    rm -f /var/lib/ioshield/disks.json
    T0=$(date +%s)
    start_ioshield "$T0"
    : > $T/trace
    echo 1 > $T/tracing_on
    service_copy "fresh-$round"
    service_copy "again-$round"
    echo 0 > $T/tracing_on
    cp $T/trace "$RESULTS/trace-$round.txt"
    journalctl -u ioshield -o short-monotonic --no-pager --since "@$T0" | grep -E "restrict pid [0-9]* \(dd\)" |
        sed -E 's/dirtied.*(in [0-9]+ ms: .*)/\1/' | cut -c1-260 | sed "s/^/e2e: laps $round: /"
    grep -v "^#" "$RESULTS/trace-$round.txt" | grep -v "ep_poll\|epoll_wait\|sys_wait4\|sys_waitid" | cut -c1-200 | sed "s/^/e2e: slow $round: /" | head -80
    sleep 3
done
pass spike
echo "e2e: $PASSED passed, $FAILED failed" | tee -a "$CHECKS"
