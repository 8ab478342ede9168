#!/usr/bin/env python3
"""Every step the speed probe forced for room, and what the disk did in the 5 s after it.

Usage: python3 docs/bench/room66/room_steps.py DIR...  (searched for daemon.log files; the bench
writes the daemon's debug log, whose "disk period" lines hold each tick's disk counters)

For each step: the rate forced, what the window before it showed, the take-back (by the disk's
queue or the others' wait) with its delay, and per tick after the step the disk's MB/s and
writes in flight. Stop 66 read the false rooms of the 30 MB/s disk and the true ones of the
150 MB/s disk this way (docs/bench/speed-probe.md).
"""
import datetime
import glob
import os
import re
import sys


def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


STEP = re.compile(
    r"held at ([\d.]+) MB/s at least \(it wrote ([\d.]+) MB/s with ([\d.]+) writes"
)
PERIOD = re.compile(r"disk period disk=(\S+) bytes=(\d+) seconds=(\S+) writes_queued=(\S+)")

for root in sys.argv[1:]:
    for log in sorted(glob.glob(os.path.join(root, "**", "daemon.log"), recursive=True)):
        lines = open(log).read().splitlines()
        steps = [(ts(l.split()[0]), l) for l in lines if "room to spare" in l and "retune" in l]
        periods = []
        for l in lines:
            m = PERIOD.search(l)
            if m:
                rate = int(m.group(2)) / float(m.group(3)) / 1e6
                periods.append((ts(l.split()[0]), rate, float(m.group(4))))
        takes = [
            (ts(l.split()[0]), "disk" if "the disk queued" in l else "others")
            for l in lines
            if "the disk seemed to show: back to" in l
        ]
        for at, line in steps:
            m = STEP.search(line)
            if not m:
                continue
            back = [f"{t - at:.1f} s by {k}" for t, k in takes if at < t <= at + 6]
            print(
                f"{log}: forced {m.group(1)} MB/s after a window of {m.group(2)} MB/s with "
                f"{m.group(3)} in flight; taken back: {', '.join(back) or 'no'}"
            )
            after = [p for p in periods if at < p[0] <= at + 5.5 and p[1] > 1]
            print(
                "    after: "
                + " ".join(f"{t - at:.1f}s {r:.0f} MB/s q{q:.2f}" for t, r, q in after)
            )
