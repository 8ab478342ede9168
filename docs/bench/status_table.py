#!/usr/bin/env python3
"""The README's "Where it stands" table from the status benches' `bench.md` files.

Usage: status_table.py BENCH_DIR...
Each BENCH_DIR is the `--out` of `cargo xtask bench --offender OFFENDER --repeat 3 --duration 30
--kernel 6.12,6.1 --scenario 'ioshield,ioshield:earlier.serial:data = 25100000'` (or of any
bench: other scenarios go by their own names). Prints one row per offender, kernel and
scenario: each innocent's longest pause, median (worst run), the committing load's p99 ms
(median), the offender's MB/s (x none), detection s median (worst), the daemon's CPU % and RSS
MiB (medians). Then how many daemon runs kept every innocent within 0.25 s, by scenario, from
each run's own figures (`runs/SCENARIO/KERNEL/rN/results/LOAD.json`, unrounded: the tables' two
decimals would count a pause of 0.254 s as 0.25), or from the bench's table of where each run's
longest pauses began where the runs' files are gone; and the runs over, with their longest.
"""
import glob
import json
import os
import re
import sys

DISK = {
    "none": "none (no daemon)",
    "ioshield": "never measured",
    "ioshield:earlier.serial:data = 25100000": "speed known",
}
LOADS = ("write", "multiwrite", "commit")
# Every innocent load a bench may run (the phase table's), for the count against TARGET.
INNOCENTS = LOADS + ("appender", "bulk")
TARGET = 0.25


def sections(text):
    """{(kernel, title): [row cells...]} for every table in a bench.md."""
    out = {}
    for block in re.split(r"^## ", text, flags=re.M)[1:]:
        head, _, body = block.partition("\n")
        kernel, _, title = head.partition(", ")
        rows = [
            [c.strip() for c in line.strip().strip("|").split("|")]
            for line in body.splitlines()
            if line.startswith("|") and not line.startswith("|---")
        ]
        out[(kernel, title)] = rows
    return out


def by_scenario(rows, name):
    i = rows[0].index(name)
    return {r[0]: r[i] for r in rows[1:]}


def median_worst(cell):
    """'0.22 (0.22-0.30)' -> '0.22 (0.30)'."""
    m = re.match(r"(\S+) \((\S+)-(\S+)\)", cell)
    return f"{m.group(1)} ({m.group(3)})" if m else cell


def first(cell):
    return cell.split()[0]


def slug(scenario):
    """The scenario's directory under runs/, as xtask's bench names it (`matrix::slug`; the
    status benches' names are short enough to need no hash)."""
    return re.sub(r"[^A-Za-z0-9.-]", "_", scenario)


def raw_longest(bench, scenario, kernel):
    """{run: the longest pause of any innocent, s} from the runs' own files; {} if gone."""
    out = {}
    for d in sorted(glob.glob(f"{bench}/runs/{slug(scenario)}/{kernel}/r*/results")):
        longest = [
            json.load(open(f))["metrics"]["longest_pause_s"]
            for f in glob.glob(f"{d}/*.json")
            if os.path.basename(f)[:-5] in INNOCENTS
        ]
        if longest:
            out[d.split("/")[-2]] = max(longest)
    return out


def runs_within(bench, tables, kernel):
    """{scenario: (runs whose every innocent stayed within TARGET, runs, [(run, longest s) of
    those over])}, unrounded where the runs' files are kept."""
    rows = tables.get((kernel, "where the longest pauses began"), [])
    raw = {scenario: raw_longest(bench, scenario, kernel) for scenario in {r[0] for r in rows[1:]}}
    out = {}
    for r in rows[1:]:
        ok, n, over = out.get(r[0], (0, 0, []))
        worst = raw[r[0]].get(r[1])
        if worst is None:
            worst = max((float(c) for c in r[2:] if c not in ("-", "")), default=0.0)
        if worst > TARGET:
            over = over + [(f"{kernel} {r[1]}", worst)]
        out[r[0]] = (ok + (worst <= TARGET), n + 1, over)
    return out


def main():
    print("| offender | kernel | disk | write | multiwrite | commit (p99 ms) | offender MB/s "
          "(x none) | detection s | CPU % | RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    within = {}
    for bench in sys.argv[1:]:
        text = open(f"{bench}/bench.md").read()
        offender = re.search(r"offender `(\w+)`", text).group(1)
        tables = sections(text)
        kernels = []
        for kernel, _ in tables:
            if kernel not in kernels:
                kernels.append(kernel)
        for kernel in kernels:
            pauses = {
                load: tables[(kernel, load)] for load in LOADS if (kernel, load) in tables
            }
            if not pauses:
                continue
            job = next(rows for (k, t), rows in tables.items()
                       if k == kernel and t.startswith("the offender"))
            daemon = tables.get((kernel, "the daemon"), [["scenario"]])
            present = by_scenario(pauses["commit"], "longest pause s")
            for scenario in present:
                disk = DISK.get(scenario, scenario)
                cells = []
                for load in LOADS:
                    cells.append(median_worst(by_scenario(pauses[load], "longest pause s")
                                              [scenario]))
                p99 = first(by_scenario(pauses["commit"], "p99 ms")[scenario])
                cells[-1] += f" ({p99})"
                mbps = first(by_scenario(job, "offender MB/s")[scenario])
                x = by_scenario(job, "x none")[scenario]
                rest = ["-", "-", "-"]
                if scenario != "none":
                    d = {r[0]: r for r in daemon[1:]}[scenario]
                    header = daemon[0]
                    rest = [
                        median_worst(d[header.index("detection latency s")]),
                        first(d[header.index("daemon CPU %")]),
                        first(d[header.index("daemon RSS MiB")]),
                    ]
                print(f"| {offender} | {kernel} | {disk} | " + " | ".join(cells)
                      + f" | {mbps} ({x}) | " + " | ".join(rest) + " |")
            for scenario, (ok, n, over) in runs_within(bench, tables, kernel).items():
                a, b, c = within.get(scenario, (0, 0, []))
                over = [(f"{offender} {run}", s) for run, s in over]
                within[scenario] = (a + ok, b + n, c + over)
    print()
    for scenario, (ok, n, over) in within.items():
        listed = "; over: " + ", ".join(f"{run} {s:.3f} s" for run, s in over) if over else ""
        print(f"{DISK.get(scenario, scenario)}: {ok} of {n} runs kept every innocent within "
              f"{TARGET} s{listed}")


if __name__ == "__main__":
    main()
