#!/usr/bin/env python3
"""The table of unit-set.md's "Stop 86" from a run of unit-set-ftrace.sh.

usage: python3 docs/bench/unit-set-ftrace.py DIR/6.12

For each restriction the spike printed ("e2e: laps N: [mono] ... restrict pid P (dd) in T ms:
..."), PID 1's calls over the tracer's 5 ms threshold inside it (its start is the journal
line's time less T): the io controller turned on in the slice (cgroup.subtree_control, and the
grace period inside it), the first io.max on the disk (tg_set_limit), and any other system call.
"""
import re
import sys

run = sys.argv[1]
console = open(f"{run}/console.log", errors="replace").read()
laps = re.findall(
    r"laps (\d+): \[\s*([\d.]+)\] e2e ioshield\[\d+\]: restrict pid \d+ \(dd\) in (\d+) ms: (.*)",
    console,
)
print("| round | copy | restriction ms | unit read ms | unit set ms "
      "| io on in system.slice: ms (of it `synchronize_rcu`) | first `io.max` on the disk ms "
      "| other PID 1 calls over 5 ms |")
print("|---|---|---|---|---|---|---|---|")
seen = set()
for rnd, at, total, rest in laps:
    copy = "again" if rnd in seen else "fresh"
    seen.add(rnd)
    end = float(at)
    start = end - int(total) / 1000
    unit_read = re.search(r"unit read (\d+)", rest)
    unit_set = re.search(r"unit set (\d+)", rest)
    subtree = rcu = io_max = last_rcu = None
    other = []
    for line in open(f"{run}/results/trace-{rnd}.txt", errors="replace"):
        m = re.match(r"\s*([\d.]+) \|.*\|\s*[*#!@$+]?\s*([\d.]+) us \|\s*\} /\* (\S+) \*/", line)
        if not m or not start <= float(m.group(1)) <= end:
            continue
        ms, function = float(m.group(2)) / 1000, m.group(3)
        if function == "synchronize_rcu":
            last_rcu = ms
        elif function == "cgroup_subtree_control_write":
            subtree, rcu = ms, last_rcu
        elif function == "tg_set_limit":
            io_max = ms
        elif function.startswith("__x64_sys_") and function not in (
            "__x64_sys_write",
            "__x64_sys_epoll_wait",
        ):
            other.append(f"{function[len('__x64_sys_'):]} {ms:.0f}")
    print(
        f"| {rnd} | {copy} | {total} | {unit_read.group(1) if unit_read else '?'} "
        f"| {unit_set.group(1) if unit_set else '?'} "
        f"| {'%.0f (%.0f)' % (subtree, rcu or 0) if subtree else '-'} "
        f"| {'%.0f' % io_max if io_max else '-'} | {', '.join(other) or '-'} |"
    )
