#!/usr/bin/env python3
"""How often the committing load's wait for the journal had the flusher asleep in iocost's
throttle, in one traced run (stop 67, docs/bench/speed-probe.md).

Usage: handle_waits.py RESULTS FROM_S TO_S
RESULTS is a run's results directory of `tests/vm/stall.sh` run with `-e COMMIT_TRACE=1`; FROM_S
and TO_S bound the samples by uptime (e.g. the window's 3 s from `timeline.py`). Prints how many
samples had the commit load in `jbd2_log_wait_commit`, how many of those had a flusher
(`kworker/...flush-`) in `ioc_rqos_throttle`, and the disk's writes in flight in each of those.
"""
import sys


def main():
    results, lo, hi = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    waiting, throttled, in_flight = 0, 0, []
    for line in open(f"{results}/commit-trace.txt"):
        fields = line.split()
        if len(fields) < 3 or not lo <= float(fields[0]) <= hi:
            continue
        tasks = line.split(" || ")
        # The commit load's stack is the first after the in-flight counts.
        if "jbd2_log_wait_commit" not in tasks[0].split("|")[1]:
            continue
        waiting += 1
        if any("flush-" in t.split(")")[0] and "ioc_rqos_throttle" in t for t in tasks[1:]):
            throttled += 1
            in_flight.append(int(fields[2]))
    print(f"{waiting} samples with the commit load waiting for the journal; {throttled} with a "
          f"flusher in ioc_rqos_throttle, writes in flight then: {in_flight}")


if __name__ == "__main__":
    main()
