#!/usr/bin/env python3
"""What the kernel's cgroup move costs on this machine's own CPU (docs/bench/apply.md, "Stop 79").

Mounts a cgroup2 hierarchy of its own (no controllers needed: a move takes the same global
lock whatever the controllers), and times writing a sleeping process's pid into a child's
cgroup.procs after some seconds without a move, then the move straight after. Needs root;
unmounts and removes what it made.
    python3 docs/bench/move-cost/host.py [TRIES] [QUIET_SECONDS]
"""
import os
import subprocess
import sys
import tempfile
import time

tries = int(sys.argv[1]) if len(sys.argv) > 1 else 4
quiet = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
root = tempfile.mkdtemp(prefix="ioshield-move-cost-")
subprocess.run(["mount", "-t", "cgroup2", "none", root], check=True)
child = os.path.join(root, "moved")
try:
    os.mkdir(child)

    def move(pid, to):
        t = time.perf_counter()
        with open(os.path.join(to, "cgroup.procs"), "w") as f:
            f.write(str(pid))
        return (time.perf_counter() - t) * 1e3

    for _ in range(tries):
        sleeper = subprocess.Popen(["sleep", "100"])
        try:
            time.sleep(quiet)
            first = move(sleeper.pid, child)
            second = move(sleeper.pid, root)
        finally:
            sleeper.kill()
            sleeper.wait()
        print(f"first move after {quiet:.0f} s without one {first:.2f} ms, the next {second:.2f} ms")
finally:
    os.rmdir(child)
    subprocess.run(["umount", root], check=True)
    os.rmdir(root)
