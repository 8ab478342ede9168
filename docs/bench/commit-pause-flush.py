#!/usr/bin/env python3
"""What the disk did during the committing service's pauses, from a run of commit-pause-flush.sh
(docs/bench/commit-pause.md, "Stop 87").

usage: python3 docs/bench/commit-pause-flush.py DIR/<kernel>/results [MIN_PAUSE_S]

Per copy: the other service's longest pause and when the copy was restricted; then each pause
over MIN_PAUSE_S (0.2 s) with where it began against the restriction, and over the pause: the
MB/s the disk completed, its writes completed, the most requests in flight, the flushes
completed and the longest stretch in which the disk completed no write at all.
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


def over(samples, a, b):
    inside = [s for s in samples if a - 0.05 <= s[0] <= b + 0.05]
    if len(inside) < 2:
        return "no samples"
    span = inside[-1][0] - inside[0][0]
    mb_s = (inside[-1][2] - inside[0][2]) * 512 / 1e6 / span
    writes = inside[-1][1] - inside[0][1]
    flushes = inside[-1][4] - inside[0][4]
    flush_ms = inside[-1][5] - inside[0][5]
    still, longest = inside[0][0], 0.0
    for prev, cur in zip(inside, inside[1:]):
        if cur[1] != prev[1]:
            still = cur[0]
        longest = max(longest, cur[0] - still)
    return "%.1f MB/s, %d writes, most %d in flight, %d flushes (%d ms), none written for %.2f s" % (
        mb_s, writes, max(s[3] for s in inside), flushes, flush_ms, longest)


for path in sorted(glob.glob(res + "/worker-*.json")):
    label = path.split("worker-")[1][:-5]
    load = json.load(open(path))
    start, nominal, ends = load["start_s"], load["nominal_s"], load["cycle_ends_s"]
    samples = [tuple(map(float, l.split())) for l in open(f"{res}/flush-{label}.txt") if len(l.split()) == 6]
    after = [r for r in restrictions if r[0] >= start]
    at, took = after[0] if after else (start, "?")
    print("%s: longest %.3f s; restricted %.1f s in (%s ms)" % (
        label, load["metrics"]["longest_pause_s"], at - start, took))
    prev = ends[0]
    for end in ends[1:]:
        pause = end - prev - nominal
        if pause > least:
            print("    pause %.3f s at %.1f s (%+.2f s from the restriction): %s" % (
                pause, prev - start, prev - at, over(samples, prev, end)))
        prev = end
