#!/usr/bin/env python3
"""The disk's queue around each restriction in a run of commit-pause-systemd.sh
(docs/bench/commit-pause.md, "Stop 87").

usage: python3 docs/bench/commit-pause-queue.py DIR/6.12/results [MIN_PAUSE_S]

Per copy: the committing load's longest pause, when the copy was restricted (seconds into the
load) and how long the call took, and the disk's writes in flight (mean, most) and completed
MB/s over the second before the restriction, the two after it and 5-8 s after it; then each
pause over MIN_PAUSE_S (0.2 s) with where it began against the restriction and the queue over
it. The queue file's samples are ~0.3 s apart under the tracer: "-" is a pause with fewer than
two samples in it.
"""
import glob
import json
import re
import sys

res = sys.argv[1]
least = float(sys.argv[2]) if len(sys.argv) > 2 else 0.2
restrictions = []
for line in open(res + "/journal.txt", errors="replace"):
    m = re.match(r"\[\s*([\d.]+)\] \S+ ioshield\[\d+\]: restrict pid .* in (\d+) ms:", line)
    if m:
        restrictions.append((float(m.group(1)), m.group(2)))


def queue_over(samples, a, b):
    inside = [x for x in samples if a <= x[0] <= b]
    if len(inside) < 2:
        return "-"
    mb_s = (inside[-1][3] - inside[0][3]) * 512 / 1e6 / (inside[-1][0] - inside[0][0])
    writes = [x[2] for x in inside]
    return "%.1f (most %d) in flight, %.1f MB/s" % (sum(writes) / len(writes), max(writes), mb_s)


for path in sorted(glob.glob(res + "/worker-*.json")):
    label = path.split("worker-")[1][:-5]
    load = json.load(open(path))
    start, nominal, ends = load["start_s"], load["nominal_s"], load["cycle_ends_s"]
    samples = [tuple(map(float, l.split())) for l in open(f"{res}/queue-{label}.txt") if len(l.split()) == 4]
    after = [r for r in restrictions if r[0] >= start]
    if not after:
        print(label, "not restricted")
        continue
    at, took = after[0]
    print("%s: longest %.3f s; restricted %.1f s in (%s ms); queue -1..0 s: %s; 0..1 s: %s; 1..2 s: %s; 5..8 s: %s" % (
        label, load["metrics"]["longest_pause_s"], at - start, took, queue_over(samples, at - 1, at),
        queue_over(samples, at, at + 1), queue_over(samples, at + 1, at + 2), queue_over(samples, at + 5, at + 8)))
    prev = ends[0]
    for end in ends[1:]:
        pause = end - prev - nominal
        if pause > least:
            print("    pause %.3f s at %.1f s (%+.2f s from the restriction): %s" % (
                pause, prev - start, prev - at, queue_over(samples, prev, end)))
        prev = end
