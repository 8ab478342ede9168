#!/usr/bin/env python3
"""What the disk did around each restriction and over each of the committing service's pauses,
from a run of commit-pause-systemd.sh (docs/bench/commit-pause.md, "Stop 87").

usage: python3 docs/bench/commit-pause-disk.py DIR/6.12/results [MIN_PAUSE_S]

Per copy: the other service's longest pause, when the copy was restricted (seconds into the
load) and how long the call took, the disk over the second before the restriction's line, the
two after it and 5-8 s after it; then each pause over MIN_PAUSE_S (0.2 s) with where it began
against the restriction and the disk over it: MB/s completed, the most requests in flight, and
where the samples have them, writes and flushes completed and the longest stretch with no
write completed. Reads disk-LABEL.txt (uptime, writes done, sectors written, in flight,
flushes done, flush ms) and the first traced run's queue-LABEL.txt (uptime, reads and writes
in flight, sectors written; one sample every ~0.3 s, which forked); flush-LABEL.txt is the
untraced run's name for disk-LABEL.txt. "-": fewer than two samples. Last, per kind of copy
(fresh, again): the longest pauses' median and most, how many over 0.25 s, and the systemd
call's time, its "unit read" and "unit set" laps.
"""
import glob
import json
import os
import re
import statistics
import sys

res = sys.argv[1]
least = float(sys.argv[2]) if len(sys.argv) > 2 else 0.2
restrictions = []
for line in open(res + "/journal.txt", errors="replace"):
    m = re.match(r"\[\s*([\d.]+)\] \S+ ioshield\[\d+\]: restrict pid .* in (\d+) ms:.*unit read (\d+) ms.*unit set (\d+) ms", line)
    if m:
        restrictions.append((float(m.group(1)), m.group(2), int(m.group(4)), int(m.group(3))))


def samples_of(label):
    """(uptime, writes done or None, sectors, in flight, flushes or None, flush ms or None)."""
    for name in ("disk", "flush"):
        path = f"{res}/{name}-{label}.txt"
        if os.path.exists(path):
            return [tuple(map(float, l.split())) for l in open(path) if len(l.split()) == 6]
    rows = [l.split() for l in open(f"{res}/queue-{label}.txt") if len(l.split()) == 4]
    return [(float(t), None, float(sectors), float(writes), None, None) for t, _, writes, sectors in rows]


def disk_over(samples, a, b):
    inside = [s for s in samples if a - 0.05 <= s[0] <= b + 0.05]
    if len(inside) < 2:
        return "-"
    first, last = inside[0], inside[-1]
    said = "%.1f MB/s, most %d in flight" % (
        (last[2] - first[2]) * 512 / 1e6 / (last[0] - first[0]), max(s[3] for s in inside))
    if first[1] is not None:
        still, longest = first[0], 0.0
        for prev, cur in zip(inside, inside[1:]):
            if cur[1] != prev[1]:
                still = cur[0]
            longest = max(longest, cur[0] - still)
        said += ", %d writes, %d flushes (%d ms), none written for %.2f s" % (
            last[1] - first[1], last[4] - first[4], last[5] - first[5], longest)
    return said


kinds = {}
for path in sorted(glob.glob(res + "/worker-*.json")):
    label = path.split("worker-")[1][:-5]
    load = json.load(open(path))
    start, nominal, ends = load["start_s"], load["nominal_s"], load["cycle_ends_s"]
    samples = samples_of(label)
    after = [r for r in restrictions if r[0] >= start]
    if not after:
        print(label, "not restricted")
        continue
    at, took, unit_set, unit_read = after[0]
    kinds.setdefault(label.rsplit("-", 1)[0], []).append(
        (load["metrics"]["longest_pause_s"], unit_set, unit_read, int(took)))
    print("%s: longest %.3f s; restricted %.1f s in (%s ms, unit set %d); -1..0 s: %s; 0..1 s: %s; 1..2 s: %s; 5..8 s: %s" % (
        label, load["metrics"]["longest_pause_s"], at - start, took, unit_set, disk_over(samples, at - 1, at),
        disk_over(samples, at, at + 1), disk_over(samples, at + 1, at + 2), disk_over(samples, at + 5, at + 8)))
    prev = ends[0]
    for end in ends[1:]:
        pause = end - prev - nominal
        if pause > least:
            print("    pause %.3f s at %.1f s (%+.2f s from the restriction): %s" % (
                pause, prev - start, prev - at, disk_over(samples, prev, end)))
        prev = end

for kind, runs in kinds.items():
    longest = [r[0] for r in runs]
    sets, reads, calls = ([r[i] for r in runs] for i in (1, 2, 3))
    print("%s: the other service's longest %.3f s median (%.3f max), %d of %d over 0.25 s; the call "
          "%d-%d ms, unit read %d ms median (%d-%d), unit set %d ms median (%d max)" % (
              kind, statistics.median(longest), max(longest), sum(x > 0.25 for x in longest), len(runs),
              min(calls), max(calls), statistics.median(reads), min(reads), max(reads),
              statistics.median(sets), max(sets)))
