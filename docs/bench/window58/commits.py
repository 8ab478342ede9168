#!/usr/bin/env python3
"""Summarises stall.sh's jbd2-commits.txt (JBD2_TRACE=1): commits of 100 ms or more and the share of
their time spent locked (waiting for open handles), and the handles held 40 ms or more by holder,
type and line (ext4 handle type 2 is EXT4_HT_WRITE_PAGE, a writeback pass). Usage:
commits.py RESULTS/jbd2-commits.txt ... (interval jiffies at HZ=250, as Debian builds)."""
import sys, re, collections
for path in sys.argv[1:]:
    commits=[]; handles=collections.Counter(); hmax={}; hcount=0
    for line in open(path):
        m=re.search(r'(\S+)-\d+\s+\[\d+\].*?\s(\d+\.\d+): jbd2_(run|handle)_stats: (.*)', line)
        if not m: continue
        comm,t,kind,rest=m.group(1),float(m.group(2)),m.group(3),m.group(4)
        f=dict(re.findall(r'(\w+) (\d+)', rest))
        if kind=='run':
            l,fl,lg=int(f['locked']),int(f['flushing']),int(f['logging'])
            commits.append((t,l+fl+lg,l,fl,lg))
        else:
            key=(re.sub(r'\d+$','',comm.split('/')[0]) if comm.startswith('kworker') else comm, f['type'], f['line_no'])
            ms=int(f['interval'])*4
            handles[key]+=1; hmax[key]=max(hmax.get(key,0),ms); hcount+=1
    long=[c for c in commits if c[1]>=100]
    print(path)
    print('  commits', len(commits), '>=100ms', len(long), 'their locked share %.0f%%' % (100*sum(c[2] for c in long)/max(1,sum(c[1] for c in long))), 'longest', max([c[1] for c in commits] or [0]))
    for k,v in handles.most_common(6): print('  handles held >=40ms', k, v, 'max', hmax[k], 'ms')
