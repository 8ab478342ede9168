#!/usr/bin/env python3
"""What the dirty-count refresh costs on a real CPU rather than the bench's emulated guest.

A `dd` writes to a file on the current directory's disk from a cgroup of its own; this process
reads the cgroup's memory.stat (which flushes the memcg's counters, as the daemon's refresh
does) and, as the baseline, its usage file (which flushes nothing) every 20 ms, 250 reads each,
alternating, 3 rounds; it prints the CPU time per read of each (this thread's CPU clock, the
sleep's wake-up included) and the difference, which is what one refresh costs. Works on a
cgroup v2 host and on one whose memory controller is on v1. Run as root:
    python3 docs/bench/refresh-cost/host.py
"""
import os, statistics, subprocess, sys, time

V2 = "/sys/fs/cgroup/cgroup.controllers"
if os.path.exists(V2) and "memory" in open(V2).read():
    parent, usage = "/sys/fs/cgroup", "memory.current"
    with open(f"{parent}/cgroup.subtree_control", "w") as f:
        f.write("+memory")
else:
    parent, usage = "/sys/fs/cgroup/memory", "memory.usage_in_bytes"
cg = f"{parent}/ioshield-refresh-cost"
os.makedirs(cg, exist_ok=True)
target = os.path.abspath("refresh-cost.data")
dd = subprocess.Popen(["sh", "-c", f"echo $$ > {cg}/cgroup.procs; exec dd if=/dev/zero "
                       f"of={target} bs=1M count=100000 status=none"])
try:
    time.sleep(2)

    def per_read(name, n=250, every=0.02):
        fd = os.open(f"{cg}/{name}", os.O_RDONLY)
        t0 = time.thread_time()
        for _ in range(n):
            os.pread(fd, 16384, 0)
            time.sleep(every)
        t1 = time.thread_time()
        os.close(fd)
        return (t1 - t0) / n * 1e6

    stat, base = [], []
    for _ in range(3):
        base.append(per_read(usage))
        stat.append(per_read("memory.stat"))
    if dd.poll() is not None:
        sys.exit("the writer ended during the measurement: nothing was flushed under load")
    print(f"kernel {os.uname().release}, {parent}")
    print(f"{usage} every 20 ms: {statistics.median(base):.1f} us CPU per read "
          f"({min(base):.1f}-{max(base):.1f})")
    print(f"memory.stat every 20 ms: {statistics.median(stat):.1f} us CPU per read "
          f"({min(stat):.1f}-{max(stat):.1f})")
    d = statistics.median(stat) - statistics.median(base)
    print(f"one refresh: {d:.1f} us; at 50 a second {d * 50 / 1e4:.2f}% of a CPU")
finally:
    dd.kill()
    dd.wait()
    os.remove(target)
    time.sleep(0.5)
    os.rmdir(cg)
