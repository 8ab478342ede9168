#!/usr/bin/env python3
"""The paced writer's runs of tests/vm/stall.sh (`vm ci`'s slow writer), one line each and a
summary per kernel and label: when the backlog trigger restricted it (from its first write)
and how long making the restriction took (its line's "in N ms"), the backlog the decision
quotes, the innocents' longest pause over the run and the longest that began in the
restriction's first 2 s (the onset's, `act::method::ONSET`), with the daemon's action before
each pause over 0.15 s. Any offender's runs are read alike (a burst decision quotes no
backlog: nan).

    python3 docs/bench/slow-writer-runs.py DIR PREFIX

reads DIR/PREFIX-LABEL-ROUND/KERNEL/results (the `--out` of each `cargo xtask vm run`), e.g.
`target/s88 slow2` for target/s88/slow2-base-1/6.12/results.
"""
import datetime
import glob
import json
import re
import statistics
import sys

INNOCENTS = ('write', 'multiwrite', 'commit')
# The restriction's first seconds, and how early a pause may begin and still be one of them:
# the loads' cycle that the restriction's line lands in began up to a cycle before it.
ONSET_S = 2.0
ONSET_SLACK = 0.05


def wall(line):
    stamp = line.split()[0].replace('Z', '+00:00')
    return datetime.datetime.fromisoformat(stamp).timestamp()


def pauses_over(record, t0, over=0.15):
    """(start from the writer's first write, length) of each cycle late by more than `over`."""
    prev, out = record['start_s'], []
    for end in record['cycle_ends_s']:
        gap = end - prev - record['nominal_s']
        if gap > over:
            out.append((prev - t0, gap))
        prev = end
    return out


def main(top, prefix):
    rows = {}
    for d in sorted(glob.glob(f'{top}/{prefix}-*-*/*/results')):
        run, kernel = d.split('/')[-3], d.split('/')[-2]
        label = run.split('-')[1]
        clock = open(f'{d}/clock.txt').read().split()
        offset = float(clock[1]) - float(clock[3])
        writer = json.load(open(f'{d}/offender.json'))
        t0 = writer['start_s']
        log = open(f'{d}/daemon.log').read().splitlines()
        first = next((l for l in log if 'INFO restrict pid' in l), None)
        if first is None:
            print(f'{run:20} {kernel:5} never restricted')
            continue
        after = wall(first) - offset - t0
        took = re.search(r'would take ([0-9.]+)s to flush > ([0-9.]+)s', first)
        backlog = float(took.group(1)) if took else float('nan')
        acting = re.search(r'processes, in ([0-9]+) ms', first)
        action_ms = int(acting.group(1)) if acting else -1
        longest = {}
        for line in open(f'{d}/summary.txt').read().splitlines()[1:]:
            f = line.split()
            if f[0] in INNOCENTS:
                longest[f[0]] = float(f[2].rstrip('s'))
        worst = max(longest.values())
        onset = max((gap for name in INNOCENTS
                     for start, gap in pauses_over(json.load(open(f'{d}/{name}.json')), t0, 0.0)
                     if after - ONSET_SLACK <= start <= after + ONSET_S), default=0.0)
        rows.setdefault((kernel, label), []).append((after, backlog, worst, action_ms, onset))
        print(f'{run:20} {kernel:5} restricted {after:5.2f} s (in {action_ms} ms), backlog '
              f'{backlog} s, writer {writer["bytes_per_sec"] / 1e6:.1f} MB/s, innocents longest '
              f'{worst:.3f} s, in its first 2 s {onset:.3f} s')
        actions = []
        for line in log:
            for kind in ('restrict', 'retune', 'release'):
                if f'INFO {kind} pid' in line:
                    actions.append((wall(line) - offset - t0, kind))
        for name in INNOCENTS:
            for start, gap in pauses_over(json.load(open(f'{d}/{name}.json')), t0):
                before = [a for a in actions if a[0] <= start]
                said = f'{before[-1][1]} at {before[-1][0]:+.2f} s' if before else 'before any action'
                print(f'    {name} paused {gap:.3f} s at {start:+.2f} s; last action: {said}')
    for (kernel, label), v in sorted(rows.items()):
        after, backlog, worst, action_ms, onset = zip(*v)
        print(f'{kernel} {label}: {len(v)} runs; restricted {statistics.median(after):.2f} '
              f'({max(after):.2f}) s, its action {statistics.median(action_ms):.0f} '
              f'({max(action_ms)}) ms; backlog {min(backlog)}-{max(backlog)} s; innocents longest '
              f'{statistics.median(worst):.3f} ({max(worst):.3f}) s, over 0.25 s in '
              f'{sum(w > 0.25 for w in worst)}; in the first 2 s {statistics.median(onset):.3f} '
              f'({max(onset):.3f}) s')


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
