#!/usr/bin/env python3
"""The newcomer runs of docs/bench/newcomer/runs.sh: longest pauses, the committing load's
paused time from the newcomer's start, the newcomer's rate. `summary.py OUT table` adds the table."""
import json, os, re, sys, glob, statistics
root = sys.argv[1] if len(sys.argv) > 1 else 'target/linger56long'
rows = {}
for d in sorted(glob.glob(f'{root}/*-*-*')):
    if not os.path.isdir(d): continue
    case, v, rep = os.path.basename(d).split('-')
    for k in ('6.12', '6.1'):
        r = f'{d}/{k}/results'
        if not os.path.exists(f'{r}/commit.json'): continue
        nxt = json.load(open(f'{r}/offender-next.json'))
        off = json.load(open(f'{r}/offender.json'))
        t0 = nxt['start_s']
        def longest(name, lo=None, hi=None, total=False):
            j = json.load(open(f'{r}/{name}.json'))
            ends = j['cycle_ends_s']; nom = j['nominal_s']
            best = 0; tot = 0
            prev = j['start_s']
            for e in ends:
                if lo is None or (lo <= e <= hi):
                    best = max(best, e - prev - nom)
                    if e - prev - nom > 0.05: tot += e - prev - nom
                prev = e
            return tot if total else best
        log = open(f'{r}/daemon.log').read()
        m = re.search(rf'restrict pid {nxt["pid"]} .*?judged (\d+) ms after', log)
        held = 'held' if m else 'unheld'
        apart = 'apart' if 'judged meanwhile' in log else ''
        row = dict(w=longest('write'), mw=longest('multiwrite'), c=longest('commit'),
                   cn=longest('commit', t0, 1e9), wn=longest('write', t0, 1e9),
                   ct=longest('commit', t0, 1e9, True),
                   next_mbs=nxt['bytes_per_sec'] / 1e6, held=held, apart=apart)
        rows.setdefault((case, k, v), []).append(row)
for (case, k, v), rs in sorted(rows.items()):
    f = lambda key: '/'.join(f'{r[key]:.3f}' for r in rs)
    print(f'{case:6} {k:5} {v:7} write {f("w")}  multi {f("mw")}  commit {f("c")}  '
          f'| from newcomer on: write {f("wn")} commit {f("cn")} commit paused>50ms {f("ct")} | next {f("next_mbs")} MB/s '
          f'{",".join(r["held"] for r in rs)} {rs[0]["apart"]}')

if len(sys.argv) > 2:
    print()
    print('| case | kernel | newcomer | write | multiwrite | commit | commit paused from its start | newcomer MB/s |')
    print('|---|---|---|---|---|---|---|---|')
    for (case, k, v), rs in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        f = lambda key, p=3: ' / '.join(f'{r[key]:.{p}f}' for r in rs)
        who = {'base': 'as before', 'linger': 'held apart'}[v]
        held = ', '.join(r['held'] for r in rs)
        print(f'| {case} | {k} | {who} ({held}) | {f("w")} | {f("mw")} | {f("c")} | {f("ct", 1)} s | {f("next_mbs", 0)} |')
