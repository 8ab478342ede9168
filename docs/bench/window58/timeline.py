#!/usr/bin/env python3
"""One stall.sh run's speed-probe steps, the committing load's long cycles and the ext4 journal's
average commit time on one timeline (stop 58, docs/bench/history.md).

Usage: timeline.py RESULTS [MIN_COMMIT_MS]
RESULTS is a run's results directory of `tests/vm/stall.sh` run with `-e JBD2_TRACE=1`
(clock.txt, daemon.log, commit.json, jbd2.txt). Prints `uptime_s what`, where what is a step of
the daemon, a commit cycle over its nominal 100 ms by more than 0.15 s, or the journal's average
commit time when it is at least MIN_COMMIT_MS (default 25).
"""
import datetime
import json
import os
import re
import sys

# The daemon's log lines, most specific first (a take-back also says "no room to spare").
STEPS = (
    ("for the room the disk seemed to show: back to", "take-back"),
    ("restrict pid", "restrict"),
    ("the kernel's latency control setting the rate", "window"),
    ("room to spare)", "forced for room"),
    ("a quarter more", "a quarter more"),
    ("now measures", "measured"),
    ("release pid", "release"),
)

RAISE = re.compile(r"^retune .*memory\.high [1-9][0-9]*% of the way")
FORCED = re.compile(r"the rate held at ([0-9.]+) MB/s at least")


def main():
    results = sys.argv[1]
    least_ms = float(sys.argv[2]) if len(sys.argv) > 2 else 25.0
    clock = open(f"{results}/clock.txt").read().split()
    realtime, monotonic = float(clock[1]), float(clock[3])

    def uptime(stamp):
        t = datetime.datetime.strptime(stamp[:26], "%Y-%m-%dT%H:%M:%S.%f")
        return t.replace(tzinfo=datetime.timezone.utc).timestamp() - realtime + monotonic

    items = []
    last_forced = None
    for line in open(f"{results}/daemon.log"):
        m = re.match(r"(\S+Z)\s+INFO (.*)", line)
        if not m:
            continue
        # A raise of memory.high on its way up under a step (stop 72's room ramp, stop 74's
        # quarter steps) repeats the step's reasons at the same forced rate.
        forced = FORCED.search(m.group(2))
        forced = forced and forced.group(1)
        raised = RAISE.search(m.group(2)) and forced == last_forced
        last_forced = forced or last_forced
        if raised and "now measures" not in m.group(2):
            items.append((uptime(m.group(1)), "memory.high raised"))
            continue
        for key, what in STEPS:
            if key in m.group(2):
                items.append((uptime(m.group(1)), what))
                break
    commit = json.load(open(f"{results}/commit.json"))
    start = commit["start_s"]
    for end in commit["cycle_ends_s"]:
        over = end - start - commit["nominal_s"]
        if over > 0.15:
            items.append((start, f"commit paused {over:.2f} s"))
        start = end
    # Only runs with JBD2_TRACE=1 have it.
    jbd2 = f"{results}/jbd2.txt"
    for line in open(jbd2) if os.path.exists(jbd2) else []:
        fields = line.split()
        # uptime, then NAME transactions avg_commit_us per journal: the first is the data disk's
        # when its name sorts first (vda-8 before vdc-8 in the bed).
        if len(fields) >= 4 and fields[3].isdigit() and int(fields[3]) >= least_ms * 1000:
            items.append((float(fields[0]), f"{fields[1]} average commit {int(fields[3]) // 1000} ms"))
    for t, what in sorted(items):
        print(f"{t:8.2f} {what}")


if __name__ == "__main__":
    main()
