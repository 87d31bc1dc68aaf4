#!/usr/bin/env python3
"""The table behind bench/compare.sh: base against head, with the noise the
base measured against itself.

Input: the JSON files of interleaved runs (A B A B ...): --base FILES (round
order) and --head FILES. Every repetition of every benchmark is kept
(aggregates are dropped); runs that reported an error are listed apart.

Statistics are Google Benchmark's own: compare.py from Debian's
libbenchmark-tools (/usr/share/benchmark/compare.py, which needs python3-scipy)
runs on merged JSON files written here:

  A/B  every base repetition against every head repetition;
  A/A  the base against itself: its runs split into two halves, each way
       (for 4 runs {1,3}|{2,4}, {1,2}|{3,4}, {1,4}|{2,3}; at most 10 splits).
       The same binary on both sides, so any difference is the noise of this
       machine and this job, between processes and across the job's duration.

For each benchmark the table shows the medians of real time (the harness times
real time), change = head / base - 1, the A/A threshold and the A/B U-test
p-value (two-sided Mann-Whitney, compare.py's `time_pvalue`). A time is flagged
slower or faster only when both hold: p < --alpha, and |change| is above the
threshold = --noise-factor x the largest |A/A change of medians| over the
splits, for that benchmark (never one number for all). A benchmark whose A/A
U-test rejected in some split (p < alpha on identical code) is marked "A/A
unstable": its noise is not random repetition noise, and its p-value
overstates the evidence.

Deterministic counters (the user counters in the JSON: backend calls, bytes
committed, mapped, copied, pool hits ...) are compared exactly: the set of
values over all base repetitions against the set over all head repetitions;
any difference is flagged regardless of noise. Not compared: rate counters,
page_faults (the kernel's and allocators' business, not exact for jemalloc),
counters named with a time unit segment (_ns, _us, _ms, _s), and counters that
already differ between the base's own repetitions (listed as not deterministic).

Exit status: 0; 3 with --fail-on-counters when a counter changed; 1 when
compare.py could not run.
"""

import argparse
import itertools
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ratios  # noqa: E402  (RUN_FIELDS, RATE_COUNTERS, NS_PER_UNIT: the same reading as ratios.py)

COMPARE_PY = os.environ.get("ORTMEM_COMPARE_PY", "/usr/share/benchmark/compare.py")
# compare.py imports scipy; Debian's python3-scipy is installed for /usr/bin/python3.
COMPARE_PYTHON = os.environ.get("ORTMEM_COMPARE_PYTHON",
                                "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable)
NOT_COUNTERS = {"page_faults"}
TIME_SEGMENT = re.compile(r"(^|_)(ns|us|ms|s)(_|$)")


def is_compared_counter(name):
    return not (name in NOT_COUNTERS or name in ratios.RATE_COUNTERS or TIME_SEGMENT.search(name))


class Side:
    """All repetitions of one side (base or head), merged from several runs."""

    def __init__(self, paths):
        self.paths = paths
        self.context = None
        self.runs = []  # one list of iteration entries per file
        self.errors = {}  # name -> message
        for path in paths:
            with open(path, encoding="utf-8") as handle:
                document = json.load(handle)
            if self.context is None:
                self.context = document.get("context", {})
            entries = []
            for entry in document.get("benchmarks", []):
                if entry.get("run_type", "iteration") != "iteration":
                    continue
                if entry.get("error_occurred"):
                    self.errors[entry["name"]] = entry.get("error_message", "error")
                    continue
                entries.append(entry)
            self.runs.append(entries)

    def entries(self, which=None):
        """Entries of every run, or of the runs whose indices are in `which`."""
        out = []
        for index, run in enumerate(self.runs):
            if which is None or index in which:
                out.extend(run)
        return out

    def write(self, path, which=None):
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"context": self.context, "benchmarks": self.entries(which)}, handle, indent=1)


def aa_splits(runs, limit=10):
    """Ways to split the base's runs into two halves for the A/A comparison:
    for an even count the halves holding the first run (each split once), for
    an odd count every subset of the smaller size; at most `limit`."""
    indices = range(runs)
    size = runs // 2
    if size == 0:
        return []
    subsets = [c for c in itertools.combinations(indices, size) if runs % 2 or 0 in c]
    return [(set(c), set(indices) - set(c)) for c in subsets[:limit]]


def names_in_order(entries):
    """Benchmark names in registration order (the runs are shuffled)."""
    order = {}
    for entry in entries:
        key = (entry.get("family_index", 0), entry.get("per_family_instance_index", 0))
        order.setdefault(entry["name"], key)
    return sorted(order, key=lambda name: order[name])


def real_ns(entries, name):
    return [e["real_time"] * ratios.NS_PER_UNIT[e.get("time_unit", "ns")] for e in entries if e["name"] == name]


def counter_values(entries, name):
    values = {}
    for entry in entries:
        if entry["name"] != name:
            continue
        for key, value in entry.items():
            if key in ratios.RUN_FIELDS or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            values.setdefault(key, set()).add(value)
    return values


def run_compare(base_json, head_json, dump, text_out):
    command = [COMPARE_PYTHON, COMPARE_PY, "--no-color", "-d", dump, "benchmarks", base_json, head_json]
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    with open(text_out, "w", encoding="utf-8") as handle:
        handle.write(result.stdout)
    if result.returncode != 0:
        sys.stderr.write("benchcmp: %s failed (exit %d):\n%s\n" % (" ".join(command), result.returncode,
                                                                   result.stdout[-3000:]))
        sys.stderr.write("benchcmp: compare.py comes with Debian's libbenchmark-tools and needs "
                         "python3-scipy (bash scripts/setup.sh installs both)\n")
        return None
    with open(dump, encoding="utf-8") as handle:
        return {entry["name"]: entry for entry in json.load(handle)}


def pvalue(report, name):
    entry = report.get(name) if report else None
    utest = (entry or {}).get("utest") or {}
    return utest.get("time_pvalue")


def fmt_time(ns):
    if ns is None:
        return "–"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return "%.3g %s" % (ns / scale, unit)
    return "%.3g ns" % ns


def fmt_value(value):
    if float(value).is_integer():
        return "%d" % value
    return "%.6g" % value


def fmt_values(values):
    return ", ".join(fmt_value(v) for v in sorted(values))


def change(base, head):
    if base is None or head is None or base == 0:
        return None
    return head / base - 1.0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", nargs="+", required=True, help="base runs' JSON, in round order")
    parser.add_argument("--head", nargs="+", required=True, help="head runs' JSON, in round order")
    parser.add_argument("--base-label", default="base")
    parser.add_argument("--head-label", default="head")
    parser.add_argument("--alpha", type=float, default=0.05, help="U-test significance level (default 0.05)")
    parser.add_argument("--noise-factor", type=float, default=2.0,
                        help="time threshold = this x |A/A change| (default 2)")
    parser.add_argument("--work", required=True, help="folder for the merged JSON and compare.py's output")
    parser.add_argument("--fail-on-counters", action="store_true", help="exit 3 when a counter changed")
    parser.add_argument("--times-informational", action="store_true",
                        help="never flag a time (runs too short or too few for the statistics)")
    args = parser.parse_args(argv)

    base, head = Side(args.base), Side(args.head)
    os.makedirs(args.work, exist_ok=True)
    w = lambda name: os.path.join(args.work, name)
    base.write(w("base.json"))
    head.write(w("head.json"))
    ab = run_compare(w("base.json"), w("head.json"), w("compare-ab.json"), w("compare-ab.txt"))
    if ab is None:
        return 1
    splits = aa_splits(len(base.runs))
    aa_reports = []
    for number, (first, second) in enumerate(splits, 1):
        base.write(w("aa-%d-a.json" % number), first)
        base.write(w("aa-%d-b.json" % number), second)
        report = run_compare(w("aa-%d-a.json" % number), w("aa-%d-b.json" % number),
                             w("compare-aa-%d.json" % number), w("compare-aa-%d.txt" % number))
        if report is None:
            return 1
        aa_reports.append(report)

    base_entries, head_entries = base.entries(), head.entries()
    names = names_in_order(base_entries)
    names += [n for n in names_in_order(head_entries) if n not in names]

    rows, counter_rows, unstable_counters = [], [], []
    compared_counters = set()
    counters_changed = 0
    flagged_times = 0
    reps = {"base": None, "head": None}
    for name in names:
        b, h = real_ns(base_entries, name), real_ns(head_entries, name)
        reps["base"] = reps["base"] or len(b)
        reps["head"] = reps["head"] or len(h)
        bm = statistics.median(b) if b else None
        hm = statistics.median(h) if h else None
        delta = change(bm, hm)
        flags = []
        threshold = None
        p_aa = None
        for (first, second), report in zip(splits, aa_reports):
            one, two = real_ns(base.entries(first), name), real_ns(base.entries(second), name)
            if not one or not two:
                continue
            aa_change = abs(change(statistics.median(one), statistics.median(two)))
            threshold = max(threshold or 0.0, args.noise_factor * aa_change)
            p_split = pvalue(report, name)
            if p_split is not None:
                p_aa = p_split if p_aa is None else min(p_aa, p_split)
        p = pvalue(ab, name)
        if not b:
            flags.append("only in head" if name not in base.errors else "base: " + base.errors[name])
        if not h:
            flags.append("only in base" if name not in head.errors else "head: " + head.errors[name])
        if b and h:
            if args.times_informational:
                pass
            elif p is None or threshold is None:
                flags.append("time: no U-test (too few repetitions)")
            elif p < args.alpha and abs(delta) > threshold:
                flags.append("**SLOWER**" if delta > 0 else "**faster**")
                flagged_times += 1
            if p_aa is not None and p_aa < args.alpha and not args.times_informational:
                flags.append("A/A unstable (p %.3f)" % p_aa)
            # counters, exactly
            bc, hc = counter_values(base_entries, name), counter_values(head_entries, name)
            changed = []
            for key in sorted(set(bc) | set(hc)):
                if not is_compared_counter(key):
                    continue
                if key in bc and len(bc[key]) > 1:
                    unstable_counters.append((name, key, bc[key]))
                    continue
                compared_counters.add(key)
                if bc.get(key) != hc.get(key):
                    changed.append(key)
                    counter_rows.append((name, key, bc.get(key), hc.get(key)))
            if changed:
                counters_changed += 1
                flags.append("**COUNTERS** " + ", ".join(changed))
        rows.append((name, bm, hm, delta, threshold, p, flags))

    label = "%s vs %s" % (args.base_label, args.head_label)
    print("## Benchmark comparison: %s" % label)
    print()
    print("%d interleaved rounds (base, head, base, head, ...); per benchmark %s base and %s head "
          "repetitions; real time, medians. threshold = %g x the largest |A/A change| over %d "
          "split%s of the base's runs into two halves (the base against itself); p = compare.py's "
          "U-test, base against head; a time is flagged when p < %g and |change| > threshold."
          % (len(base.runs), reps["base"], reps["head"], args.noise_factor, len(splits),
             "" if len(splits) == 1 else "s", args.alpha)
          + (" Times are informational here (--times-informational): only the counters are judged."
             if args.times_informational else ""))
    print()
    print("| scenario | base | head | change | threshold (A/A) | p | flag |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, bm, hm, delta, threshold, p, flags in rows:
        print("| `%s` | %s | %s | %s | %s | %s | %s |" % (
            re.sub(r"/real_time$", "", name), fmt_time(bm), fmt_time(hm),
            "–" if delta is None else "%+.1f%%" % (100 * delta),
            "–" if threshold is None else "±%.1f%%" % (100 * threshold),
            "–" if p is None else "%.3f" % p,
            "; ".join(flags) if flags else ("–" if args.times_informational else "within noise")))
    print()
    if counter_rows:
        print("Deterministic counters that changed (per iteration, every repetition's value):")
        print()
        print("| scenario | counter | base | head |")
        print("|---|---|---:|---:|")
        for name, key, bv, hv in counter_rows:
            print("| `%s` | `%s` | %s | %s |" % (re.sub(r"/real_time$", "", name), key,
                                              "absent" if bv is None else fmt_values(bv),
                                              "absent" if hv is None else fmt_values(hv)))
        print()
    print("Counters compared exactly: %s — %s." % (
        ", ".join("`%s`" % c for c in sorted(compared_counters)) or "none",
        "%d scenario%s changed" % (counters_changed, "" if counters_changed == 1 else "s")
        if counters_changed else "all equal"))
    if unstable_counters:
        print("Not deterministic on the base (differ between its own repetitions), not compared: %s."
              % ", ".join("`%s` %s (%s)" % (re.sub(r"/real_time$", "", n), k, fmt_values(v))
                          for n, k, v in unstable_counters))
    print("Times flagged: %d of %d. compare.py's own output: %s (A/B)%s."
          % (flagged_times, len(rows), w("compare-ab.txt"),
             ", %s (A/A)" % w("compare-aa-*.txt") if splits else "; no A/A (one round)"))
    if args.fail_on_counters and counters_changed:
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
