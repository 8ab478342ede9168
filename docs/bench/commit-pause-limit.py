#!/usr/bin/env python3
"""commit-pause.md's write-limit fraction table from a run of commit-pause-limit.sh.

usage: python3 docs/bench/commit-pause-limit.py DIR/<kernel>/console.log
"""
import re, statistics as st, sys
con=open(sys.argv[1],errors='replace').read()
rows={}
for m in re.finditer(r'MEASURE worker l([\d.]+)-(fresh|again)-(\d) inner: inner longest pause ([\d.]+)s, paused ([\d.]+)s', con):
    r=rows.setdefault((m[1],m[2]),{}); r.setdefault('in',[]).append(float(m[4]))
for m in re.finditer(r'MEASURE worker l([\d.]+)-(fresh|again)-(\d): dd 400 MB .* in ([\d.]+) s \(([\d.]+) MB/s\), commit longest pause ([\d.]+)s, paused ([\d.]+)s', con):
    r=rows[(m[1],m[2])]; r.setdefault('out',[]).append(float(m[6])); r.setdefault('mb',[]).append(float(m[5])); r.setdefault('tot',[]).append(float(m[7]))
lim={}
for m in re.finditer(r'laps ([\d.]+) (\d): IOWriteBandwidthMax=/dev/vdb ([\d.]+)MB/s MemoryHigh=\S+ on svc-l[\d.]+-(fresh|again)', con):
    lim.setdefault((m[1],m[4]),[]).append(m[3])
for c in ['fresh','again']:
  for l in ['0.75','0.6','0.5']:
    r=rows[(l,c)]; f=lambda x:', '.join('%.3f'%v for v in x)
    print(f"| {l} | {c} | {', '.join(lim.get((l,c),[]))} | {st.median(r['out']):.3f} ({f(r['out'])}) | {min(r['tot'])}-{max(r['tot'])} | {min(r['mb'])}-{max(r['mb'])} | {st.median(r['in']):.3f} |")
