#!/usr/bin/env python3
"""The speed probe's windows second by second (stop 73, docs/bench/speed-probe.md).

Usage: window_spans.py BENCH...
BENCH is a `cargo xtask bench --out` directory (its bench.md names the data disk's speed; the
bench logs the daemon's disk periods at debug level). For every window of every `ioshield*`
run (from the retune that left the rate to the kernel's latency control to the next retune or
release) prints the disk's speed, the window's verdict, its average writes in flight, its
busiest and slowest period (busy speed: MB completed per second of writes in flight) and each
period as MB/s/writes in flight; then per disk speed how many windows showed room, their
busiest periods' writes in flight and their slowest periods' busy speeds. Periods in which the
disk completed under 5 MB/s (a writer asleep) are left out of the slowest.
"""
import collections
import datetime
import glob
import re
import sys

VERDICT = re.compile(r"it wrote ([0-9.]+) MB/s with ([0-9.]+) writes in flight: ([a-z ]+)")
PERIOD = re.compile(r"disk period disk=(\S+) bytes=(\d+) seconds=([0-9.]+) writes_queued=([0-9.]+)")


def stamp(line):
    t = datetime.datetime.strptime(line[:26], "%Y-%m-%dT%H:%M:%S.%f")
    return t.replace(tzinfo=datetime.timezone.utc).timestamp()


def windows(log):
    lines = open(log).read().splitlines()
    periods = []
    for line in lines:
        m = PERIOD.search(line)
        if m:
            disk, b, s, q = m.groups()
            periods.append((stamp(line), disk, int(b) / float(s) / 1e6, float(q)))
    i = 0
    while i < len(lines):
        line = lines[i]
        if "INFO retune" not in line or "the kernel's latency control setting the rate" not in line:
            i += 1
            continue
        start = stamp(line)
        step = next((m for m in lines[i + 1:] if "INFO retune" in m or "INFO release" in m), None)
        if step is None:
            return
        end = stamp(step)
        verdict = VERDICT.search(step)
        inside = [p for p in periods if start + 0.3 < p[0] <= end + 0.05]
        if verdict and inside:
            # The data disk: the one that completed most in the window.
            bytes_by_disk = collections.Counter()
            for _, disk, rate, _ in inside:
                bytes_by_disk[disk] += rate
            data = bytes_by_disk.most_common(1)[0][0]
            yield verdict.groups(), [(r, q) for _, d, r, q in inside if d == data]
        while i < len(lines) and stamp(lines[i]) < end:
            i += 1


def main():
    summary = collections.defaultdict(lambda: {"windows": 0, "room": 0, "busiest": [], "slowest": []})
    for bench in sys.argv[1:]:
        speed = re.search(r"data disk (\d+) MB/s", open(f"{bench}/bench.md").read()).group(1)
        for log in sorted(glob.glob(f"{bench}/runs/ioshield*/*/r*/results/daemon.log")):
            run = "/".join(log.split("/")[-5:-2])
            for (rate, queue, said), periods in windows(log):
                busiest = max(q for _, q in periods)
                busy = [r / q if q > 0 else float("inf") for r, q in periods if r >= 5]
                slowest = min(busy) if busy else float("inf")
                room = said.startswith("room")
                print(f"{speed} MB/s {bench}/{run}: {said.strip()}, {rate} MB/s with {queue} in "
                      f"flight; busiest {busiest:.2f}, slowest {slowest:.0f} MB/s busy; "
                      + " ".join(f"{r:.1f}/{q:.2f}" for r, q in periods))
                s = summary[speed]
                s["windows"] += 1
                if room:
                    s["room"] += 1
                    s["busiest"].append(busiest)
                    s["slowest"].append(slowest)
    for speed, s in sorted(summary.items(), key=lambda kv: int(kv[0])):
        line = f"{speed} MB/s disk: {s['room']} of {s['windows']} windows showed room"
        if s["room"]:
            under = sum(1 for b in s["slowest"] if b < 62.5)
            line += (f"; their busiest period {min(s['busiest']):.2f}-{max(s['busiest']):.2f} "
                     f"writes in flight, slowest busy speed {min(s['slowest']):.0f}-"
                     f"{max(s['slowest']):.0f} MB/s ({under} under 62.5)")
        print(line)


if __name__ == "__main__":
    main()
