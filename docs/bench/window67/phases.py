#!/usr/bin/env python3
"""Where each bench run's committing-load pauses fell: in the speed probe's window, under a rate
forced for room, or elsewhere in the restriction (stop 67, docs/bench/speed-probe.md).

Usage: phases.py BENCH_DIR...
For every `runs/ioshield/KERNEL/rN/results` under each BENCH_DIR (a `cargo xtask bench` output),
prints one line: the run, the longest commit pause that began in each phase (s, "-" if none
over 0.15 s), and whether a window showed room. A window phase is from its retune line to the next step of
the probe (3 s); a forced phase from the rate forced for room to its take-back, or to the next
step or the release.
"""
import datetime
import glob
import json
import re
import sys

WINDOW = "the kernel's latency control setting the rate"
FORCED = "room to spare)"
ENDS = ("for the room the disk seemed to show: back to", "now measures", "a quarter more",
        "release pid", "the rate held at")


def events(results):
    clock = open(f"{results}/clock.txt").read().split()
    realtime, monotonic = float(clock[1]), float(clock[3])

    def uptime(stamp):
        t = datetime.datetime.strptime(stamp[:26].rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f")
        return t.replace(tzinfo=datetime.timezone.utc).timestamp() - realtime + monotonic

    out = []
    for line in open(f"{results}/daemon.log"):
        m = re.match(r"(\S+Z)\s+INFO (.*)", line)
        if m:
            out.append((uptime(m.group(1)), m.group(2)))
    return out


def phases(results):
    spans = []  # (start, end, kind)
    open_at, kind = None, None
    for t, what in events(results):
        if WINDOW in what:
            if open_at is not None:
                spans.append((open_at, t, kind))
            open_at, kind = t, "window"
        elif FORCED in what:
            if open_at is not None:
                spans.append((open_at, t, kind))
            open_at, kind = t, "forced"
        elif open_at is not None and any(e in what for e in ENDS):
            spans.append((open_at, t, kind))
            open_at, kind = None, None
    if open_at is not None:
        spans.append((open_at, float("inf"), kind))
    return spans


def main():
    for bench in sys.argv[1:]:
        for results in sorted(glob.glob(f"{bench}/runs/ioshield/*/r*/results")):
            spans = phases(results)
            commit = json.load(open(f"{results}/commit.json"))
            worst = {"window": 0.0, "forced": 0.0, "elsewhere": 0.0}
            start = commit["start_s"]
            for end in commit["cycle_ends_s"]:
                over = end - start - commit["nominal_s"]
                # A pause counts in the phase it began in, as the bench's own table has it.
                kind = next((k for a, b, k in spans if a <= start < b), "elsewhere")
                worst[kind] = max(worst[kind], over)
                start = end
            show = " ".join(
                f"{k} {v:.2f}" if v > 0.15 else f"{k} -" for k, v in worst.items())
            room = "room" if any(k == "forced" for _, _, k in spans) else "no room"
            run = results.split("/runs/ioshield/")[1].removesuffix("/results")
            print(f"{bench} {run}: {show} ({room})")


if __name__ == "__main__":
    main()
