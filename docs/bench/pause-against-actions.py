#!/usr/bin/env python3
"""Where a load's pauses fall against the daemon's actions, in an e2e spike's results
(docs/bench/commit-pause.md, "Stop 87").

usage: python3 docs/bench/pause-against-actions.py RESULTS_DIR [NAME_FILTER] [MIN_PAUSE_S]

For each worker-*.json (the committing service's load) whose name contains NAME_FILTER, its
pauses over MIN_PAUSE_S (default 0.1 s, beyond the load's 0.1 s cycle), each with when it
began (seconds into the load) and the daemon's last restrict/retune/release before it (the rate
or weight set, and how long before the pause began). The loads' CLOCK_MONOTONIC and the
journal's kernel timestamps (journal.txt, `-o short-monotonic`) are the same clock in the guest.
"""
import glob
import json
import re
import sys

res = sys.argv[1]
filt = sys.argv[2] if len(sys.argv) > 2 else ""
least = float(sys.argv[3]) if len(sys.argv) > 3 else 0.1
actions = []
for line in open(res + "/journal.txt", errors="replace"):
    m = re.match(r"\[\s*([\d.]+)\] \S+ ioshield\[\d+\]: ((restrict|retune|release) pid .*)", line)
    if m:
        what = re.search(r"IOWriteBandwidthMax=\S+ ([\d.]+MB/s)|IOWeight=\d+", m.group(2))
        actions.append((float(m.group(1)), m.group(3), (what.group(1) or what.group(0)) if what else ""))
for path in sorted(glob.glob(res + "/worker-*.json")):
    if filt not in path:
        continue
    load = json.load(open(path))
    start, nominal = load["start_s"], load["nominal_s"]
    print(path.split("worker-")[1][:-5], "longest %.3f s" % load["metrics"]["longest_pause_s"])
    prev = start
    for end in load["cycle_ends_s"]:
        pause = end - prev - nominal
        if pause > least:
            before = [a for a in actions if a[0] <= prev + 0.05]
            last = "after %s %s %+.1f s" % (before[-1][1], before[-1][2], prev - before[-1][0]) if before else "-"
            print("    %.3f s at %.1f s (%s)" % (pause, prev - start, last))
        prev = end
