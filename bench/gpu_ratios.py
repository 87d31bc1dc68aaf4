#!/usr/bin/env python3
"""Merges ortmem-gpu-bench's Google Benchmark JSON and bench/torch_trace.py's
JSON lines into the markdown tables of docs/memory/MEASUREMENTS.md.

Benchmarks are named <scenario>/<variant>[/...]; variants named baseline_*
are the baselines, measured in the same run (the torch lines join the
gpu_arena_trace scenario as two more baselines). Per scenario: one table of
every variant (median time, spread, the scenario's counters) and one of
ratios, one row per (ortmem variant, baseline) pair: ratio = ortmem /
baseline, below 1 means ortmem is faster or smaller. Then the issue's
targets, met or missed, with the numbers they were judged on.

Usage: python3 bench/gpu_ratios.py gpu_bench.json [--torch torch_trace.jsonl]
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ratios import Measured, format_time, split_name  # noqa: E402 (the CPU harness's reader)

MiB = 1024 * 1024
GiB = 1024 * MiB

# name prefix -> (title, what one iteration is)
SCENARIOS = [
    ("gpu_granule_commit", "One granule: commit + decommit through ortmem vs the raw driver",
     "time per commit+decommit cycle"),
    ("gpu_run64_commit", "64 granules in one commit (one set-access for the run) vs raw "
     "per-granule and batched set-access", "time per cycle of 64 granules"),
    ("gpu_extent_1gib", "1 GiB committed as one extent (one handle) vs one handle per granule "
     "and the raw driver's one handle, unpooled", "time per commit+decommit cycle of 1 GiB"),
    ("gpu_kv_growth_batch1", "KV growth 1K → 128K tokens, one sequence: stable (commit on "
     "demand) vs bucket (copy)", "time for the whole growth"),
    ("gpu_kv_growth_batch8", "KV growth 1K → 128K tokens, 8 sequences in lockstep",
     "time for the whole growth"),
    ("gpu_kv_growth_batch1_pooled", "KV growth, one sequence, pool warmed by one untimed "
     "growth (no cuMemCreate/cuMemRelease in the timed growth)", "time for the whole growth"),
    ("gpu_kv_growth_batch1_head", "KV growth 1K → 128K tokens, one sequence, head-major "
     "(224 fragments of 32 MiB): stable over geometric extents vs one handle per granule",
     "time for the whole growth"),
    ("gpu_kv_growth_batch1_seq", "KV growth 1K → 128K tokens, one sequence, seq-major "
     "(56 fragments of 128 MiB): stable over geometric extents vs one handle per granule",
     "time for the whole growth"),
    ("gpu_kv_growth_batch1_token", "KV growth 1K → 128K tokens, one sequence, token-major "
     "(one fragment of 7 GiB): stable over geometric extents vs one handle per granule",
     "time for the whole growth"),
    ("gpu_arena_trace", "The arena_mixed_trace allocation trace on the device: ortmem arena vs "
     "cuMemAlloc/cuMemFree and PyTorch's caching allocator", "time per replay of the trace"),
    ("gpu_offload_stream", "1 GiB of weights (32 tensors of 32 MiB, pinned staging) host to "
     "device: the residency cache's ring and page-in vs raw cuMemcpyHtoDAsync of the same bytes",
     "time per GiB moved"),
    ("gpu_offload_decode", "A decode-shaped loop over 1 GiB of weights (64 x 16 MiB), budget "
     "512 MiB, scan-resistant: stall time vs the streamed bytes at the raw bandwidth",
     "time per decode step (ortmem) / per GiB copied (raw)"),
]

CALLS = ("calls", "calls map / set-access / unmap / create / release")
COMMIT_COLUMNS = [
    ("commit_us_per_granule", "commit µs/granule"),
    ("decommit_us_per_granule", "decommit µs/granule"),
    ("create_us_per_granule", "create µs"),
    ("map_us_per_granule", "map µs"),
    ("set_access_us_per_granule", "set-access µs"),
    ("unmap_us_per_granule", "unmap µs"),
    ("release_us_per_granule", "release µs"),
    CALLS,
    ("pool_hits", "pool hits"),
]
KV_COLUMNS = [
    ("worst_step_ms", "worst step ms"),
    ("teardown_ms", "teardown ms"),
    ("owned_peak_bytes", "owned peak"),
    ("committed_bytes_final", "committed at the end"),
    ("live_bytes_final", "live at the end"),
    ("growth_copied_bytes", "copied"),
    ("generations_bumped", "generations"),
    ("overcommit_bytes_final", "over-commit at the end"),
    ("overcommit_max_bytes_model", "over-commit max (model)"),
    ("overcommit_bound_bytes", "over-commit bound"),
    CALLS,
    ("copy_calls", "copies"),
    ("pool_hits", "pool hits"),
]
TRACE_COLUMNS = [
    ("ops_per_second", "ops/s"),
    ("owned_peak_bytes", "peak owned"),
    ("device_used_peak_bytes", "device used peak"),
    ("committed_peak_bytes", "arena committed peak"),
    ("allocated_peak_bytes", "torch allocated peak"),
    CALLS,
    ("pool_hits", "pool hits"),
    ("first_replay_us", "cold replay µs"),
    ("python_loop_us", "python loop µs"),
]
OFFLOAD_COLUMNS = [
    ("GBps", "GB/s"),
    ("streamed_bytes_per_step", "streamed/step"),
    ("hit_bytes_per_step", "hit/step"),
    ("stall_ms_per_step", "stall ms/step"),
    ("stall_GBps", "streamed / stall GB/s"),
    ("step_ms", "step ms"),
    ("evictions_per_step", "evictions/step"),
    ("page_ins_per_iteration", "page-ins"),
    CALLS,
]
COLUMNS = {"gpu_granule_commit": COMMIT_COLUMNS, "gpu_run64_commit": COMMIT_COLUMNS,
           "gpu_extent_1gib": COMMIT_COLUMNS + [("commit_us_per_2mib", "commit µs/2 MiB"),
                                                ("driver_commit_us_per_granule",
                                                 "in the driver µs/granule"),
                                                ("own_commit_us_per_granule",
                                                 "ortmem's own µs/granule"),
                                                ("create_us", "1 handle: create µs"),
                                                ("map_us", "map µs"),
                                                ("set_access_us", "set-access µs"),
                                                ("unmap_us", "unmap µs"),
                                                ("release_us", "release µs")],
           "gpu_offload_stream": OFFLOAD_COLUMNS, "gpu_offload_decode": OFFLOAD_COLUMNS,
           "gpu_arena_trace": TRACE_COLUMNS}
# Counters compared as ratios too (ortmem / baseline).
RATIO_COUNTERS = {
    "gpu_granule_commit": [("commit_us_per_granule", "commit ratio")],
    "gpu_run64_commit": [("commit_us_per_granule", "commit ratio")],
    "gpu_extent_1gib": [("commit_us_per_granule", "commit ratio")],
    "gpu_arena_trace": [("owned_peak_bytes", "owned ratio"),
                        ("device_used_peak_bytes", "device used ratio")],
}
KV_RATIO_COUNTERS = [("owned_peak_bytes", "owned peak ratio"),
                     ("worst_step_ms", "worst step ratio")]

RUN_FIELDS = {
    "name", "family_index", "per_family_instance_index", "run_name", "run_type",
    "repetitions", "repetition_index", "threads", "iterations", "real_time",
    "cpu_time", "time_unit", "aggregate_name", "aggregate_unit", "error_occurred",
    "error_message", "label",
}


def load_benchmark_json(path):
    """The document, repaired when the run was cut short: Google Benchmark
    writes each run as it finishes and closes the array at the end."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    try:
        return json.loads(text), None
    except json.JSONDecodeError as error:
        cut = text.rfind("\n    }")
        if cut < 0:
            raise
        try:
            return json.loads(text[:cut + len("\n    }")] + "\n  ]\n}\n"), (
                f"{path} was cut short ({error}); the runs written before the cut are used")
        except json.JSONDecodeError:
            raise error from None


def entries_from_benchmarks(document):
    measured = {}
    for run in document.get("benchmarks", []):
        run_name = run.get("run_name", run["name"])
        entry = measured.get(run_name)
        if entry is None:
            entry = measured[run_name] = Measured(run_name)
            entry.family_index = run.get("family_index", len(measured))
        if run.get("error_occurred"):
            entry.error = run.get("error_message", "error")
        elif run.get("run_type", "iteration") == "iteration":
            entry.add_repetition(run)  # ops_per_second included: only items/bytes rates are left out
        elif run.get("aggregate_name") == "median":
            entry.median_aggregate = run
    return sorted(measured.values(), key=lambda e: e.family_index)


def entries_from_torch(path):
    entries, notes = [], []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                notes.append(f"{path}:{number}: not JSON ({error})")
                continue
            name = f"{record.get('scenario', 'gpu_arena_trace')}/{record.get('variant', 'torch')}"
            entry = Measured(name)
            entry.family_index = 10 ** 6 + number
            entry.torch = record
            if "skipped" in record:
                entry.error = record["skipped"]
                entries.append(entry)
                continue
            per_replay = record.get("seconds_per_replay") or []
            entry.real_ns = [seconds * 1e9 for seconds in per_replay]
            entry.cpu_ns = list(entry.real_ns)
            ops = record.get("ops_per_trace", 0)
            entry.counters = {
                "ops_per_trace": [ops],
                "ops_per_second": [ops / s for s in per_replay if s > 0],
                "owned_peak_bytes": [record.get("max_memory_reserved_bytes", 0)],
                "allocated_peak_bytes": [record.get("max_memory_allocated_bytes", 0)],
                "device_used_peak_bytes": [record.get("device_used_peak_bytes", 0)],
                "first_replay_us": [record.get("first_replay_seconds", 0) * 1e6],
                "python_loop_us": [record.get("python_loop_seconds_per_replay", 0) * 1e6],
            }
            entries.append(entry)
    return entries, notes


def median_counter(entry, name):
    values = entry.counters.get(name) if entry else None
    return statistics.median(values) if values else None


def format_bytes(value):
    if value >= GiB:
        return f"{value / GiB:.2f} GiB"
    if value >= MiB:
        return f"{value / MiB:.1f} MiB"
    return f"{value:.0f} B"


def format_value(name, value):
    if value is None:
        return ""
    if "bytes" in name:
        return format_bytes(value)
    if name == "ops_per_second":
        return f"{value / 1e6:.3g} M" if value >= 1e6 else f"{value / 1e3:.3g} k"
    if value == int(value) and abs(value) < 1e7:
        return str(int(value))
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def cell(entry, name):
    if name == "calls":
        parts = [median_counter(entry, key) for key in
                 ("map_calls", "set_access_calls", "unmap_calls", "create_calls", "release_calls")]
        if all(part is None for part in parts):
            return ""
        return " / ".join(format_value("calls", part) if part is not None else "-"
                          for part in parts)
    values = entry.counters.get(name)
    if not values:
        return ""
    text = format_value(name, statistics.median(values))
    exact = name.endswith(("_calls", "_bytes", "_bumped", "pool_hits")) or name in {
        "ops_per_trace"}
    return ("~" if exact and min(values) != max(values) else "") + text


def spread_of(*entries):
    spreads = [entry.spread("real") for entry in entries]
    spreads = [s for s in spreads if s is not None]
    return f"±{max(spreads) * 100:.1f}%" if spreads else "n/a"


def is_baseline(entry):
    return split_name(entry.run_name)[1].startswith("baseline_")


def variant_of(entry):
    return split_name(entry.run_name)[1]


def scenario_tables(prefix, title, unit, entries, common_reason=None):
    columns = COLUMNS.get(prefix, KV_COLUMNS)
    present = [(key, header) for key, header in columns
               if any(cell(entry, key) for entry in entries if not entry.error)]
    lines = [f"### {prefix}: {title}", "",
             f"Median {unit} over the repetitions; counters per iteration.", ""]
    header = ["variant", "median", "spread"] + [h for _, h in present]
    lines += ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for entry in entries:
        if entry.error:
            reason = "(the reason above)" if entry.error == common_reason else entry.error
            row = [variant_of(entry), "skipped", reason] + ["" for _ in present]
        else:
            row = [variant_of(entry), format_time(entry.median_ns("real")), spread_of(entry)]
            row += [cell(entry, key) for key, _ in present]
        lines.append("| " + " | ".join(row) + " |")

    ortmem = [e for e in entries if not is_baseline(e) and not e.error]
    baselines = [e for e in entries if is_baseline(e) and not e.error]
    if ortmem and baselines:
        extra = RATIO_COUNTERS.get(prefix, KV_RATIO_COUNTERS)
        header = ["ortmem", "baseline", "ortmem", "baseline", "ratio"] + [h for _, h in extra] + [
            "spread"]
        lines += ["", "| " + " | ".join(header) + " |",
                  "|" + "|".join("---" for _ in header) + "|"]
        for mine in ortmem:
            for theirs in baselines:
                a, b = mine.median_ns("real"), theirs.median_ns("real")
                row = [variant_of(mine), variant_of(theirs), format_time(a), format_time(b),
                       f"{a / b:.3g}" if a and b else "n/a"]
                for key, _ in extra:
                    x, y = median_counter(mine, key), median_counter(theirs, key)
                    row.append(f"{x / y:.3g}" if x is not None and y else "")
                row.append(spread_of(mine, theirs))
                lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def find(entries, prefix, variant):
    for entry in entries:
        scenario, name = split_name(entry.run_name)
        if scenario == prefix and name == variant and not entry.error:
            return entry
    return None


def targets(entries):
    """The issue's targets, judged on the commit phase per granule."""
    lines = ["### Targets (issue 5)", "",
             "| scenario | target | measured | verdict |", "|---|---|---|---|"]
    for prefix in ("gpu_granule_commit", "gpu_run64_commit"):
        pooled_entry = find(entries, prefix, "ortmem_pooled")
        floor_entry = find(entries, prefix, "baseline_raw_access_batched")
        unpooled_entry = find(entries, prefix, "baseline_raw_create_map_access")
        pooled = median_counter(pooled_entry, "commit_us_per_granule")
        floor = median_counter(floor_entry, "commit_us_per_granule")
        unpooled = median_counter(unpooled_entry, "commit_us_per_granule")

        def cycle(theirs, speedup=False):
            """The whole commit+decommit cycle's ratio (or speedup), for context."""
            a = pooled_entry.median_ns("real") if pooled_entry else None
            b = theirs.median_ns("real") if theirs else None
            if not (a and b):
                return ""
            return f" (whole cycle: {b / a:.1f}×)" if speedup else f" (whole cycle: {a / b:.2f}×)"
        if pooled and floor:
            ratio = pooled / floor
            lines.append(f"| {prefix} | pooled commit ≤ 1.5× the raw map + batched set-access "
                         f"floor | {pooled:.3g} / {floor:.3g} µs per granule = {ratio:.2f}×"
                         f"{cycle(floor_entry)} | {'met' if ratio <= 1.5 else 'missed'} |")
        else:
            lines.append(f"| {prefix} | pooled commit ≤ 1.5× the raw floor | not measured | n/a |")
        if pooled and unpooled:
            speedup = unpooled / pooled
            lines.append(f"| {prefix} | pooled commit ≥ 10× faster than raw create + map + "
                         f"set-access | {unpooled:.3g} / {pooled:.3g} µs per granule = "
                         f"{speedup:.1f}×{cycle(unpooled_entry, speedup=True)} | "
                         f"{'met' if speedup >= 10 else 'missed'} |")
        else:
            lines.append(f"| {prefix} | pooled commit ≥ 10× faster than the unpooled raw "
                         f"sequence | not measured | n/a |")
    one = median_counter(find(entries, "gpu_extent_1gib", "ortmem_one_extent"),
                         "commit_us_per_granule")
    per_granule = median_counter(find(entries, "gpu_extent_1gib", "baseline_ortmem_per_granule"),
                                 "commit_us_per_granule")
    if one and per_granule:
        speedup = per_granule / one
        lines.append(f"| gpu_extent_1gib | 1 GiB as one extent commits ≥ 50× faster than as 512 "
                     f"granules | {per_granule:.3g} / {one:.3g} µs per granule = {speedup:.0f}× | "
                     f"{'met' if speedup >= 50 else 'missed'} |")
    else:
        lines.append("| gpu_extent_1gib | one extent ≥ 50× faster than per granule | not measured "
                     "| n/a |")
    for layout in ("head", "seq", "token"):
        prefix = f"gpu_kv_growth_batch1_{layout}"
        geometric = find(entries, prefix, "ortmem_stable_geometric")
        granule = find(entries, prefix, "baseline_stable_per_granule")
        a = geometric.median_ns("real") if geometric else None
        b = granule.median_ns("real") if granule else None
        if a and b:
            creates = (median_counter(granule, "create_calls"),
                       median_counter(geometric, "create_calls"))
            handles = (f"; creates {creates[0]:.0f} vs {creates[1]:.0f}"
                       if None not in creates else "")
            lines.append(f"| {prefix} | stable growth over extents ≥ 5× faster than one handle "
                         f"per granule | {format_time(b)} / {format_time(a)} = {b / a:.1f}×"
                         f"{handles} | {'met' if b >= 5 * a else 'missed'} |")
        else:
            lines.append(f"| {prefix} | stable per granule / stable geometric ≥ 5× | not "
                         f"measured | n/a |")
    per = median_counter(find(entries, "gpu_run64_commit", "baseline_raw_access_per_granule"),
                         "set_access_us_per_granule")
    batched = median_counter(find(entries, "gpu_run64_commit", "baseline_raw_access_batched"),
                             "set_access_us_per_granule")
    if per and batched:
        lines.append(f"| gpu_run64_commit | DESIGN section 3 (observation): set-access 34 µs per "
                     f"granule one by one, 0.27 µs per granule batched (126×) | {per:.3g} vs "
                     f"{batched:.3g} µs per granule ({per / batched:.0f}×) | "
                     f"{'reproduced' if per >= 10 * batched else 'not reproduced'} |")
    return "\n".join(lines)


def context_lines(context, torch_entries):
    keys = ["date", "host_name", "num_cpus", "library_build_type", "gpu", "cuda_driver_version",
            "cuda_header_version", "granule_bytes", "device_total_bytes", "kv_preset",
            "trace_fingerprint"]
    lines = ["Run: " + ", ".join(f"{key}={context[key]}" for key in keys if key in context)]
    for entry in torch_entries:
        record = getattr(entry, "torch", {})
        if "torch_version" in record:
            lines.append(
                f"Torch ({variant_of(entry)}): torch {record['torch_version']}, CUDA "
                f"{record.get('torch_cuda')}, {record.get('device')}, "
                f"PYTORCH_CUDA_ALLOC_CONF='{record.get('alloc_conf', '')}', expandable segments "
                f"in use: {record.get('expandable_segments_in_use')}, "
                f"{record.get('repetitions')} × {record.get('replays_per_repetition')} replays")
            wanted = "expandable" in record.get("alloc_conf", "")
            if record.get("expandable_segments_in_use") not in (None, wanted):
                lines.append(f"WARNING: {variant_of(entry)} asked for expandable segments "
                             f"{'on' if wanted else 'off'}, the allocator's snapshot says "
                             f"{record.get('expandable_segments_in_use')}")
            declared = context.get("trace_fingerprint")
            if declared and record.get("trace_fingerprint") != declared:
                lines.append(f"WARNING: torch replayed trace {record.get('trace_fingerprint')}, "
                             f"ortmem-gpu-bench {declared}: not the same trace")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json_path", help="ortmem-gpu-bench --benchmark_out=... (JSON)")
    parser.add_argument("--torch", action="append", default=[],
                        help="bench/torch_trace.py output (JSON lines); may repeat")
    args = parser.parse_args()

    document, repaired = load_benchmark_json(args.json_path)
    entries = entries_from_benchmarks(document)
    torch_entries, notes = [], []
    for path in args.torch:
        try:
            more, more_notes = entries_from_torch(path)
        except OSError as error:
            notes.append(f"{path}: {error}")
            continue
        torch_entries += more
        notes += more_notes
    entries += torch_entries
    if not entries:
        sys.exit(f"{args.json_path}: no benchmarks in the file")

    context = document.get("context", {})
    print("\n".join(context_lines(context, torch_entries)))
    for note in ([repaired] if repaired else []) + notes:
        print(f"NOTE: {note}")
    print()
    repetitions = max((len(entry.real_ns) for entry in entries if not hasattr(entry, "torch")),
                      default=0)
    print(f"Medians over {repetitions} repetitions (shuffled together); ratio = ortmem / baseline, below 1 "
          "= ortmem faster or smaller; spread = the larger median absolute deviation / median "
          "of the variants compared; '~' = an exact counter differed between repetitions.")

    # No GPU: every benchmark skipped for one reason, said once.
    bench_entries = [entry for entry in entries if not hasattr(entry, "torch")]
    reasons = {entry.error for entry in bench_entries}
    common_reason = next(iter(reasons)) if len(reasons) == 1 and None not in reasons else None
    if common_reason:
        print()
        print(f"Every ortmem-gpu-bench benchmark was skipped: {common_reason}")

    by_scenario = {}
    for entry in entries:
        by_scenario.setdefault(split_name(entry.run_name)[0], []).append(entry)
    known = [prefix for prefix, _, _ in SCENARIOS]
    for prefix, title, unit in SCENARIOS + [(p, p, "time per iteration")
                                            for p in by_scenario if p not in known]:
        if prefix in by_scenario:
            print()
            print(scenario_tables(prefix, title, unit, by_scenario[prefix], common_reason))
    print()
    print(targets(entries))
    skipped = [entry for entry in entries if entry.error and entry.error != common_reason]
    if skipped:
        print()
        print("Skipped:")
        for entry in skipped:
            print(f"- {entry.run_name}: {entry.error}")


if __name__ == "__main__":
    main()
