#!/usr/bin/env python3
"""commit-pause.md's "Stop 86" summary from a run of commit-pause-systemd.sh.

usage: python3 docs/bench/commit-pause-systemd.py DIR/6.12/results

Each pause of the committing load over 0.1 s (its cycle's end less the previous one's, less its
100 ms period), split by what its traced calls waited for in that time: its own page's writeback
(folio_wait_writeback), the journal commit (jbd2_log_wait_commit), the ordered data of the
commit (ext4_journal_finish_inode_data_buffers, filemap_fdatawait_range_keep_errors).
"""
import json, re, glob, statistics as st, sys
d = sys.argv[1] if len(sys.argv) > 1 else '.'
rows = []
for f in sorted(glob.glob(f'{d}/worker-*.json')):
    lab = f.split('worker-')[1][:-5]
    ends = json.load(open(f))['cycle_ends_s']
    tr = open(f'{d}/trace-{lab}.txt', errors='replace').read().splitlines()
    calls = []
    for l in tr:
        m = re.match(r'\s*([\d.]+) \|\s*\d\)\s*(\S+)\s*\|\s*[*#!@$+]?\s*([\d.]+) us \|\s*\} /\* (\S+) \*/', l)
        if m: calls.append((float(m.group(1)), m.group(2), float(m.group(3)) / 1e6, m.group(4)))
    for i in range(1, len(ends)):
        gap = ends[i] - ends[i - 1]
        if gap - 0.1 < 0.1: continue
        a, b = ends[i - 1], ends[i]
        own = sum(dur for t, who, dur, fn in calls if fn == 'folio_wait_writeback' and not who.startswith('jbd2') and a <= t <= b + 0.01)
        commit = sum(dur for t, who, dur, fn in calls if fn == 'jbd2_log_wait_commit' and a <= t <= b + 0.01)
        ordered = sum(dur for t, who, dur, fn in calls if fn in ('ext4_journal_finish_inode_data_buffers', 'filemap_fdatawait_range_keep_errors') and a <= t <= b + 0.01)
        rows.append((lab, round(gap - 0.1, 3), round(own, 3), round(commit, 3), round(ordered, 3)))
print(len(rows), 'pauses over 0.1 s; (copy, pause, own page writeback wait, journal commit wait, ordered-data wait)')
for r in sorted(rows, key=lambda r: -r[1])[:12]: print(r)
tot = sum(r[1] for r in rows)
print('share of paused time: own page %.0f%%, commit %.0f%%, ordered data %.0f%%' % (100 * sum(r[2] for r in rows) / tot, 100 * sum(r[3] for r in rows) / tot, 100 * sum(r[4] for r in rows) / tot))
