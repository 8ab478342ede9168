#!/usr/bin/env python3
"""The README's "Where it stands" table from the status benches' `bench.md` files.

Usage: status_table.py BENCH_DIR...
Each BENCH_DIR is the `--out` of `cargo xtask bench --offender OFFENDER --repeat 3 --duration 30
--kernel 6.12,6.1 --scenario 'ioshield,ioshield:earlier.serial:data = 25100000'` (or of any
bench: other scenarios go by their own names). Prints one row per offender, kernel and
scenario: each innocent's longest pause, median (worst run), the committing load's p99 ms
(median), the offender's MB/s (x none), detection s median (worst), the daemon's CPU % and RSS
MiB (medians). Then how many daemon runs kept every innocent within 0.25 s, by scenario (from
the bench's table of where each run's longest pauses began).
"""
import re
import sys

DISK = {
    "none": "none (no daemon)",
    "ioshield": "never measured",
    "ioshield:earlier.serial:data = 25100000": "speed known",
}
LOADS = ("write", "multiwrite", "commit")
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


def runs_within(tables, kernel):
    """{scenario: (runs whose every innocent stayed within TARGET, runs)} from the phase table."""
    rows = tables.get((kernel, "where the longest pauses began"), [])
    out = {}
    for r in rows[1:]:
        worst = max((float(c) for c in r[2:] if c not in ("-", "")), default=0.0)
        ok, n = out.get(r[0], (0, 0))
        out[r[0]] = (ok + (worst <= TARGET), n + 1)
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
            for scenario, (ok, n) in runs_within(tables, kernel).items():
                a, b = within.get(scenario, (0, 0))
                within[scenario] = (a + ok, b + n)
    print()
    for scenario, (ok, n) in within.items():
        print(f"{DISK.get(scenario, scenario)}: {ok} of {n} runs kept every innocent within "
              f"{TARGET} s")


if __name__ == "__main__":
    main()
