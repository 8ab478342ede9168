#!/usr/bin/env python3
"""Summarises stall.sh's jbd2-commits.txt (JBD2_TRACE=1).

For each file: the commits of 100 ms or more and the share of their time spent locked (waiting
for open handles), and the handles held 40 ms or more by holder, ext4 handle type and line
(type 2 is EXT4_HT_WRITE_PAGE, a writeback pass). Handle intervals are jiffies, taken at
Debian's HZ=250.

Usage: commits.py RESULTS/jbd2-commits.txt ...
"""
import collections
import re
import sys

LONG_MS = 100
MS_PER_JIFFY = 4
RECORD = re.compile(r"(\S+)-\d+\s+\[\d+\].*?\s(\d+\.\d+): jbd2_(run|handle)_stats: (.*)")


def holder(comm):
    # kworker/u8:4 and kworker/u8:0 are the same kind of holder: a writeback worker.
    return "kworker" if comm.startswith("kworker") else comm


def summarise(path):
    commits = []  # (total ms, locked ms)
    handles = collections.Counter()
    longest_held = {}
    for line in open(path):
        m = RECORD.search(line)
        if not m:
            continue
        comm, kind, rest = m.group(1), m.group(3), m.group(4)
        fields = {k: int(v) for k, v in re.findall(r"(\w+) (\d+)", rest)}
        if kind == "run":
            locked = fields["locked"]
            commits.append((locked + fields["flushing"] + fields["logging"], locked))
        else:
            key = (holder(comm), fields["type"], fields["line_no"])
            handles[key] += 1
            longest_held[key] = max(longest_held.get(key, 0), fields["interval"] * MS_PER_JIFFY)
    long = [c for c in commits if c[0] >= LONG_MS]
    locked_share = 100 * sum(c[1] for c in long) / max(1, sum(c[0] for c in long))
    print(path)
    print(f"  commits {len(commits)} >={LONG_MS}ms {len(long)} their locked share "
          f"{locked_share:.0f}% longest {max([c[0] for c in commits] or [0])}")
    for key, n in handles.most_common(6):
        print(f"  handles held >=40ms {key} {n} max {longest_held[key]} ms")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        summarise(p)
