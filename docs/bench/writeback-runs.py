#!/usr/bin/env python3
"""What ext4's flusher did around a restriction, from a tests/vm/stall.sh run with
`-e JBD2_TRACE=1`: each writeback pass and run (extent) it mapped, each journal handle held 40 ms
or more, the innocents' pauses over 0.1 s and the daemon's actions, in time order, seconds from
the offender's first write; then the longest run of the offender's file the flusher mapped in
the 0.5 s after the first restriction (what `vm ci`'s slow-writer check bounds at 256 blocks).

    python3 docs/bench/writeback-runs.py RESULTS [FROM TO]

RESULTS is a run's results directory, e.g. target/s89/jt-1/6.12/results; FROM and TO (seconds
from the first write) bound the listing. Passes of other files are left out of it. Without
offender-inode (runs before stop 89 recorded it) the file the flusher mapped most of is taken.
"""
import datetime
import json
import re
import sys

INNOCENTS = ('write', 'multiwrite', 'commit')
EVENT = re.compile(r'\s*(\S+)-(\d+)\s+\[\d+\]\s+\S+\s+([\d.]+): (\w+): (.*)')


def wall(line):
    return datetime.datetime.fromisoformat(line.split()[0].replace('Z', '+00:00')).timestamp()


def field(rest, name):
    return re.search(rf'\b{name} (\S+)', rest).group(1)


def main(d, lo=0.0, hi=1e9):
    clock = open(f'{d}/clock.txt').read().split()
    offset = float(clock[1]) - float(clock[3])
    try:
        inode = open(f'{d}/offender-inode').read().strip()
    except FileNotFoundError:
        # Runs from before stall.sh recorded it: the file the flusher mapped most blocks of.
        mapped = {}
        for line in open(f'{d}/jbd2-commits.txt'):
            m = EVENT.match(line)
            if m and m.group(1).startswith('kworker') and m.group(4).endswith('_extent'):
                ino = field(m.group(5), 'ino')
                mapped[ino] = mapped.get(ino, 0) + int(field(m.group(5), 'len'))
        inode = max(mapped, key=mapped.get)
    t0 = json.load(open(f'{d}/offender.json'))['start_s']
    events, restricted = [], None
    for line in open(f'{d}/daemon.log'):
        for kind in ('restrict', 'retune', 'release'):
            if f'INFO {kind} pid' in line:
                events.append((wall(line) - offset, kind))
                if kind == 'restrict' and restricted is None:
                    restricted = wall(line) - offset
    cut = []
    for line in open(f'{d}/jbd2-commits.txt'):
        m = EVENT.match(line)
        if not m:
            continue
        comm, _, t, name, rest = m.groups()
        t = float(t)
        flusher = comm.startswith('kworker')
        if name == 'jbd2_handle_stats':
            held = int(field(rest, 'interval')) * 4  # jiffies at Debian's HZ=250
            events.append((t - held / 1000, f'handle {comm} type {field(rest, "type")} held {held} ms'))
        elif name == 'ext4_da_write_pages' and flusher and field(rest, 'ino') == inode:
            events.append((t, f'  pass {comm} nr_to_write {field(rest, "nr_to_write")} pages'))
        elif name == 'ext4_da_write_pages_extent' and field(rest, 'ino') == inode:
            blocks = int(field(rest, 'len'))
            events.append((t, f'  run {comm} {blocks} blocks ({blocks * 4 / 1024:.1f} MiB)'))
            if flusher and restricted is not None and restricted <= t <= restricted + 0.5:
                cut.append(blocks)
    for name in INNOCENTS:
        r = json.load(open(f'{d}/{name}.json'))
        prev = r['start_s']
        for end in r['cycle_ends_s']:
            gap = end - prev - r['nominal_s']
            if gap > 0.1:
                events.append((prev, f'*** {name} paused {gap:.3f} s'))
            prev = end
    for t, what in sorted(events):
        if lo <= t - t0 <= hi:
            print(f'{t - t0:+7.3f} {what}')
    print(f'offender inode {inode}: {len(cut)} flusher runs in the 0.5 s after the first '
          f'restriction, the longest {max(cut, default=None)} blocks')


if __name__ == '__main__':
    main(sys.argv[1], *map(float, sys.argv[2:4]))
