#!/usr/bin/env python3
"""What the disk did under the speed probe's first quarter step (stop 73, docs/bench/speed-probe.md).

Usage: quarter_periods.py BENCH...
BENCH is a `cargo xtask bench --out` directory whose runs hold a writer past the probe's 30 s
(e.g. `--offender load --duration 60`; the bench logs the daemon's disk periods at debug
level). Per `ioshield*` run: seconds from the restriction to the first "a quarter more" step
and to "the disk now measures", then each of the data disk's periods from a second before that
step until a second after the measurement: MB/s completed, writes in flight on average, and the
rate the rate control was held at, at least (MB/s).
"""
import collections
import datetime
import glob
import re
import sys

PERIOD = re.compile(r"disk period disk=(\S+) bytes=(\d+) seconds=([0-9.]+) writes_queued=([0-9.]+) "
                    r"hold=(\S+)")
AT_LEAST = re.compile(r"AtLeast\(([0-9.e+]+)\)")


def stamp(line):
    t = datetime.datetime.strptime(line[:26], "%Y-%m-%dT%H:%M:%S.%f")
    return t.replace(tzinfo=datetime.timezone.utc).timestamp()


def first(lines, text):
    return next((stamp(l) for l in lines if text in l), None)


def main():
    for bench in sys.argv[1:]:
        for log in sorted(glob.glob(f"{bench}/runs/ioshield*/*/r*/results/daemon.log")):
            lines = open(log).read().splitlines()
            run = "/".join(log.split("/")[-5:-2])
            restrict = first(lines, "INFO restrict")
            quarter = next((stamp(l) for l in lines
                            if "INFO retune" in l and "a quarter more" in l), None)
            measured = first(lines, "the disk now measures")
            if restrict is None or quarter is None:
                print(f"{bench}/{run}: no quarter step")
                continue
            rel = lambda t: "never" if t is None else f"{t - restrict:.1f} s"
            print(f"{bench}/{run}: first quarter {rel(quarter)}, measured {rel(measured)}")
            periods = []
            for line in lines:
                m = PERIOD.search(line)
                if not m:
                    continue
                t = stamp(line)
                if t < quarter - 1 or (measured is not None and t > measured + 1):
                    continue
                disk, b, s, q, hold = m.groups()
                allowed = AT_LEAST.search(hold)
                periods.append((t, disk, int(b) / float(s) / 1e6, float(q),
                                float(allowed.group(1)) / 1e6 if allowed else None))
            # The data disk: the one that completed most over them.
            by_disk = collections.Counter()
            for _, disk, rate, _, _ in periods:
                by_disk[disk] += rate
            if not by_disk:
                continue
            data = by_disk.most_common(1)[0][0]
            for t, disk, rate, queued, allowed in periods:
                if disk == data:
                    held = "-" if allowed is None else f"{allowed:.1f}"
                    print(f"  {t - restrict:6.1f} s  {rate:5.1f} MB/s  {queued:5.2f} in flight  "
                          f"held at least {held}")


if __name__ == "__main__":
    main()
