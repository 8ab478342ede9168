#!/bin/sh
# Which cgroup file's read has the kernel flush a memcg's counts (what balance_dirty_pages reads
# for a writer held by memory.high; on 6.8+ they are otherwise up to 2 s stale, docs/bench/
# dirty-counts.md) and at what cost: 3000 reads of each file of a cgroup holding a busy writer
# (memory.current flushes nothing: the baseline of the loop), then a `dd` held at memory.high=8M
# for 12 s per refresher (none, memory.stat, cpu.stat every 20 ms, twice each), its dirtying
# rate from /proc/PID/io. Stop 55: cpu.stat flushes them too on 6.12, at about half the cost.
set -u
CG=/sys/fs/cgroup
echo "+memory +io" > $CG/cgroup.subtree_control
mkdir -p $CG/w $CG/me
echo $$ > $CG/me/cgroup.procs
echo 8M > $CG/w/memory.high
sh -c "echo \$\$ > $CG/w/cgroup.procs; exec dd if=/dev/zero of=$DATA/f bs=1M count=100000" 2>/dev/null &
DD=$!
sleep 3
up() { cut -d' ' -f1 /proc/uptime; }
stime() { awk '{print $14+$15}' /proc/$$/stat; }
for f in memory.current memory.stat cpu.stat memory.numa_stat io.stat; do
    [ -e $CG/w/$f ] || continue
    t0=$(up); s0=$(stime); i=0
    while [ $i -lt 3000 ]; do read -r l < $CG/w/$f; i=$((i+1)); done
    t1=$(up); s1=$(stime)
    echo "cost $f: 3000 reads in $(echo "$t0 $t1" | awk '{print $2-$1}') s wall, $((s1-s0)) ticks cpu"
done
wchar() { awk '/^wchar/ {print $2}' /proc/$DD/io; }
for mode in none memory.stat cpu.stat none memory.stat cpu.stat; do
    if [ $mode != none ]; then
        ( while :; do read -r l < $CG/w/$mode; usleep 20000; done ) &
        R=$!
    else R=; fi
    sleep 2
    w0=$(wchar); t0=$(up)
    sleep 10
    d=$(awk '/^file_dirty / {printf "%d", $2/1024}' $CG/w/memory.stat)
    w1=$(wchar); t1=$(up)
    [ -n "$R" ] && kill $R
    echo "effect $mode: dd dirtied $(echo "$w0 $w1 $t0 $t1" | awk '{printf "%.1f", ($2-$1)/($4-$3)/1e6}') MB/s; high events $(awk '/^high/ {print $2}' $CG/w/memory.events); file_dirty KiB (read here, flushes):$d"
done
kill $DD
