#!/usr/bin/env python3
"""The tables of service-worker.md's and commit-pause.md's "Stop 86" from a run of
service-worker-config.sh (or of its two earlier forms, whose labels were m<memory_high> and
l<limit>).

usage: python3 docs/bench/service-worker-config.py DIR/<kernel>/console.log

Per variant and copy (fresh: the disk never measured; again: measured): the write limit each
restriction set, the other service's longest pause (median and runs), its paused total, the
copy's speed, the held service's own worker's longest pause (median and runs) and paused total.
"""
import re
import statistics
import sys

console = open(sys.argv[1], errors="replace").read()
rows = {}
order = []
measure = re.compile(
    r"MEASURE worker (\S+)-(fresh|again)-\d: dd 400 MB .* \(([\d.]+) MB/s\), "
    r"commit longest pause ([\d.]+)s, paused ([\d.]+)s"
)
for label, copy, mbs, longest, paused in measure.findall(console):
    if (label, copy) not in rows:
        order.append((label, copy))
    row = rows.setdefault((label, copy), {"mbs": [], "longest": [], "paused": [], "inner": [], "inner_paused": [], "limit": []})
    row["mbs"].append(float(mbs))
    row["longest"].append(float(longest))
    row["paused"].append(float(paused))
for label, copy, longest, paused in re.findall(
    r"MEASURE worker (\S+)-(fresh|again)-\d inner: inner longest pause ([\d.]+)s, paused ([\d.]+)s",
    console,
):
    rows[(label, copy)]["inner"].append(float(longest))
    rows[(label, copy)]["inner_paused"].append(float(paused))
for label, limit, copy in re.findall(
    r"laps (\S+) \d: IOWriteBandwidthMax=\S+ ([\d.]+)MB/s .* on svc-\S+?-(fresh|again)-\d", console
):
    key = (label, copy) if (label, copy) in rows else next(
        (k for k in rows if k[1] == copy and k[0].endswith(label)), None)
    if key:
        rows[key]["limit"].append(limit)


def runs(values):
    return ", ".join("%.3f" % v for v in values)


print("| variant | copy | write limit set MB/s | other service longest s: median (runs) "
      "| its paused s | copy MB/s | own worker longest s: median (runs) | own worker paused s |")
print("|---|---|---|---|---|---|---|---|")
for key in sorted(order, key=lambda k: (k[1] != "fresh", order.index(k))):
    row = rows[key]
    print(
        f"| {key[0]} | {key[1]} | {', '.join(row['limit']) or '-'} "
        f"| {statistics.median(row['longest']):.3f} ({runs(row['longest'])}) "
        f"| {min(row['paused'])}-{max(row['paused'])} | {min(row['mbs'])}-{max(row['mbs'])} "
        f"| {statistics.median(row['inner']):.3f} ({runs(row['inner'])}) "
        f"| {min(row['inner_paused'])}-{max(row['inner_paused'])} |"
    )
