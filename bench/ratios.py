#!/usr/bin/env python3
"""Turns ortmem-bench's Google Benchmark JSON into markdown tables of ratios.

Benchmarks are named <scenario>/<variant>[/...]. In each scenario every
ortmem variant is compared with every variant named baseline_*, all measured
in the same run. Times are medians over the repetitions; the ratio is
ortmem / baseline, so below 1 means ortmem is faster. The counters are the
ortmem variant's user counters, which are deterministic: a counter that
differs between repetitions is marked with '~'.

Usage: python3 bench/ratios.py bench.json [--time real|cpu]
"""

import argparse
import json
import statistics
import sys

NS_PER_UNIT = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}

# Fields Google Benchmark writes for every run; everything else is a counter.
RUN_FIELDS = {
    "name", "family_index", "per_family_instance_index", "run_name", "run_type",
    "repetitions", "repetition_index", "threads", "iterations", "real_time",
    "cpu_time", "time_unit", "aggregate_name", "aggregate_unit", "error_occurred",
    "error_message", "label",
}
# Rates depend on the time, so they are not deterministic counters.
RATE_COUNTERS = {"items_per_second", "bytes_per_second"}
# Backend calls first, in the ledger's order; the other counters follow by name.
# Shown for the baseline too ("ortmem / baseline"): they explain the ratio.
BOTH_SIDES = ["page_faults"]
COUNTER_ORDER = ["page_faults", "map_calls", "unmap_calls", "set_access_calls", "create_calls",
                 "release_calls", "pool_hits", "pool_misses"]


class Measured:
    """Every repetition of one benchmark, times in nanoseconds."""

    def __init__(self, run_name):
        self.run_name = run_name
        self.family_index = 0  # registration order; the run order is shuffled
        self.real_ns = []
        self.cpu_ns = []
        self.counters = {}  # name -> list of values, one per repetition
        self.error = None
        self.median_aggregate = None  # used when only aggregates were reported

    def add_repetition(self, run):
        scale = NS_PER_UNIT[run.get("time_unit", "ns")]
        self.real_ns.append(run["real_time"] * scale)
        self.cpu_ns.append(run["cpu_time"] * scale)
        for key, value in run.items():
            if key in RUN_FIELDS or key in RATE_COUNTERS:
                continue
            if isinstance(value, (int, float)):
                self.counters.setdefault(key, []).append(value)

    def median_ns(self, which):
        samples = self.real_ns if which == "real" else self.cpu_ns
        if samples:
            return statistics.median(samples)
        if self.median_aggregate is not None:
            scale = NS_PER_UNIT[self.median_aggregate.get("time_unit", "ns")]
            return self.median_aggregate[which + "_time"] * scale
        return None

    def spread(self, which):
        """Median absolute deviation / median over the repetitions (one
        preempted repetition barely moves it), or None with fewer than two."""
        samples = self.real_ns if which == "real" else self.cpu_ns
        if len(samples) < 2:
            return None
        middle = statistics.median(samples)
        return statistics.median(abs(sample - middle) for sample in samples) / middle


def load(path):
    with open(path, encoding="utf-8") as handle:
        document = json.load(handle)
    measured = {}
    order = []
    for run in document.get("benchmarks", []):
        run_name = run.get("run_name", run["name"])
        if run_name not in measured:
            measured[run_name] = Measured(run_name)
            order.append(run_name)
        entry = measured[run_name]
        entry.family_index = run.get("family_index", len(order))
        if run.get("error_occurred"):
            entry.error = run.get("error_message", "error")
        elif run.get("run_type", "iteration") == "iteration":
            entry.add_repetition(run)
        elif run.get("aggregate_name") == "median":
            entry.median_aggregate = run
    entries = sorted((measured[name] for name in order), key=lambda e: e.family_index)
    return document.get("context", {}), entries


def split_name(run_name):
    parts = run_name.split("/")
    return parts[0], parts[1] if len(parts) > 1 else ""


def format_time(ns):
    if ns is None:
        return "n/a"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def format_counter(name, values):
    value = statistics.median(values)
    varies = min(values) != max(values)
    if "bytes" in name and value >= 1024 * 1024:
        text = f"{value / (1024 * 1024):.2f} MiB"
    elif value == int(value):
        text = str(int(value))
    else:
        text = f"{value:.3g}"
    return ("~" if varies else "") + text


def format_spread(*entries, which):
    spreads = [entry.spread(which) for entry in entries]
    spreads = [s for s in spreads if s is not None]
    return f"±{max(spreads) * 100:.1f}%" if spreads else "n/a"


def scenario_table(scenario, entries, which):
    ortmem = [e for e in entries if not split_name(e.run_name)[1].startswith("baseline_")]
    baselines = [e for e in entries if split_name(e.run_name)[1].startswith("baseline_")]
    counter_names = sorted({name for entry in ortmem for name in entry.counters},
                           key=lambda name: (COUNTER_ORDER.index(name)
                                             if name in COUNTER_ORDER else len(COUNTER_ORDER),
                                             name))

    header = ["ortmem", "baseline", f"ortmem ({which})", f"baseline ({which})",
              "ratio", "spread"] + [name + " (ortmem / baseline)" if name in BOTH_SIDES
                                    else name for name in counter_names]
    lines = [f"### {scenario}", "",
             "| " + " | ".join(header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    for entry in ortmem:
        variant = split_name(entry.run_name)[1]
        counters = [format_counter(name, entry.counters[name]) if name in entry.counters
                    else "" for name in counter_names]

        def with_baseline_side(baseline):
            cells = list(counters)
            for i, name in enumerate(counter_names):
                if name in BOTH_SIDES and baseline and name in baseline.counters:
                    cells[i] += " / " + format_counter(name, baseline.counters[name])
            return cells
        if entry.error:
            cells = [variant, "", "skipped: " + entry.error, "", "", ""] + counters
            lines.append("| " + " | ".join(cells) + " |")
            continue
        for baseline in baselines or [None]:
            if baseline is None:
                cells = [variant, "(none)", format_time(entry.median_ns(which)), "", "", ""]
            elif baseline.error:
                cells = [variant, split_name(baseline.run_name)[1],
                         format_time(entry.median_ns(which)),
                         "skipped: " + baseline.error, "", ""]
            else:
                mine, theirs = entry.median_ns(which), baseline.median_ns(which)
                ratio = f"{mine / theirs:.2f}" if mine and theirs else "n/a"
                cells = [variant, split_name(baseline.run_name)[1], format_time(mine),
                         format_time(theirs), ratio,
                         format_spread(entry, baseline, which=which)]
            lines.append("| " + " | ".join(cells + with_baseline_side(baseline)) + " |")
    return "\n".join(lines)


def context_line(context):
    keys = ["date", "host_name", "num_cpus", "mhz_per_cpu", "library_build_type",
            "jemalloc", "thp_enabled", "thp_shmem_enabled"]
    facts = [f"{key}={context[key]}" for key in keys if key in context]
    return "Run: " + ", ".join(facts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json_path", help="output of --benchmark_out=... --benchmark_out_format=json")
    parser.add_argument("--time", choices=("real", "cpu"), default="real",
                        help="which median to compare (default: real, wall-clock)")
    args = parser.parse_args()

    context, measured = load(args.json_path)
    if not measured:
        sys.exit(f"{args.json_path}: no benchmarks in the file")
    scenarios = {}
    for entry in measured:
        scenarios.setdefault(split_name(entry.run_name)[0], []).append(entry)

    print(context_line(context))
    print()
    print(f"Medians over repetitions; ratio = ortmem / baseline ({args.time} time, "
          "below 1 = ortmem faster); spread = the larger median absolute deviation / "
          "median of the two; calls and page faults are per iteration; '~' = the "
          "counter differed between repetitions.")
    for scenario, entries in scenarios.items():
        print()
        print(scenario_table(scenario, entries, args.time))
    skipped = [entry for entry in measured if entry.error]
    if skipped:
        print()
        print("Skipped:")
        for entry in skipped:
            print(f"- {entry.run_name}: {entry.error}")


if __name__ == "__main__":
    main()
