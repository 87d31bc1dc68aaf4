#!/usr/bin/env python3
"""Replays ortmem-gpu-bench's allocation trace with PyTorch's CUDA caching allocator.

The trace file is written by `ortmem-gpu-bench --ortmem_write_trace=PATH` (the
arena_mixed_trace of bench/arena_bench.cpp: 2,048 allocations of 256 B to
4 MiB with interleaved frees). Each allocation is
torch.empty(size, dtype=torch.uint8, device="cuda"), each free drops the
tensor (del), so the caching allocator serves and caches the blocks; nothing
touches the memory, as in the C++ variants.

Two variants, each in its own process (the allocator reads
PYTORCH_CUDA_ALLOC_CONF once, at its first use):
  baseline_torch_caching     the default settings (PYTORCH_CUDA_ALLOC_CONF unset)
  baseline_torch_expandable  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

Whether expandable segments were really in use is read back from
torch.cuda.memory_snapshot() and reported (expandable_segments_in_use).
The ortmem row to read against baseline_torch_expandable is
gpu_arena_trace/ortmem_arena_default (the arena as ORTMEM_ARENA_OPTIONS_INIT
makes it: freed granules cached up to min(capacity, 256 MiB)).

Per variant: one cold replay (where the allocator grows; device use is read
with torch.cuda.mem_get_info before and after it), then --repetitions
repetitions of --replays timed replays, with torch.cuda.synchronize() before
and after each repetition. Prints one JSON line per variant: the median
seconds per replay, ops/s (allocations + frees per second),
torch.cuda.max_memory_reserved() and max_memory_allocated(), and the time the
same loop takes with a Python object instead of a tensor (the interpreter's
share of every number). When torch is missing or has no CUDA device, the
line says so in "skipped" instead, and the exit status is still 0.

Usage: python3 bench/torch_trace.py TRACE [--repetitions 5] [--replays 20]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

SCENARIO = "gpu_arena_trace"
VARIANTS = {
    "baseline_torch_caching": None,  # PYTORCH_CUDA_ALLOC_CONF unset
    "baseline_torch_expandable": "expandable_segments:True",
}


def read_trace(path):
    """Steps as (slot, size) with size 0 for a free, the slot count and the
    fingerprint the header declares (None when it declares none)."""
    steps = []
    declared = None
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            line = line.strip()
            if not line:
                continue
            if line.startswith("#"):
                match = re.search(r"fingerprint (0x[0-9a-f]+)", line)
                if match:
                    declared = match.group(1)
                continue
            fields = line.split()
            if fields[0] == "a" and len(fields) == 3:
                steps.append((int(fields[1]), int(fields[2])))
            elif fields[0] == "f" and len(fields) == 2:
                steps.append((int(fields[1]), 0))
            else:
                raise ValueError(f"{path}:{number}: not a trace step: {line!r}")
    slots = 1 + max((slot for slot, _ in steps), default=-1)
    return steps, slots, declared


def fingerprint(steps):
    """FNV-1a 64 over each step's slot and size as little-endian 32-bit words,
    as ortmem-gpu-bench computes it."""
    value = 0xCBF29CE484222325
    for slot, size in steps:
        for word in (slot, size):
            for byte in range(4):
                value ^= (word >> (8 * byte)) & 0xFF
                value = (value * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"0x{value:016x}"


def emit(record):
    print(json.dumps(record, sort_keys=True), flush=True)


def skipped(variant, reason, **extra):
    record = {"scenario": SCENARIO, "variant": variant, "skipped": reason}
    record.update(extra)
    return record


def child(variant, trace_path, repetitions, replays):
    """Runs in the variant's own process; prints its one JSON line."""
    alloc_conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    try:
        import torch  # noqa: PLC0415 (imported here: its absence is a result)
    except Exception as error:  # ImportError, or a broken install
        emit(skipped(variant, f"torch is not importable: {type(error).__name__}: {error}",
                     alloc_conf=alloc_conf))
        return
    if not torch.cuda.is_available():
        emit(skipped(variant, f"torch {torch.__version__} reports no CUDA device "
                              f"(torch.cuda.is_available() is False; built for CUDA "
                              f"{torch.version.cuda})", alloc_conf=alloc_conf))
        return

    steps, slot_count, declared = read_trace(trace_path)
    computed = fingerprint(steps)
    ops = len(steps)
    device = torch.device("cuda")
    # CUDA context and allocator start-up are not part of any replay.
    torch.empty(1, dtype=torch.uint8, device=device)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()

    def replay(make):
        slots = [None] * slot_count
        for slot, size in steps:
            if size:
                slots[slot] = make(size)
            else:
                slots[slot] = None  # the tensor's last reference: back to the cache
        return slots

    def make_tensor(size):
        return torch.empty(size, dtype=torch.uint8, device=device)

    free_before, _ = torch.cuda.mem_get_info()
    start = time.perf_counter()
    replay(make_tensor)
    torch.cuda.synchronize()
    first_replay_seconds = time.perf_counter() - start
    free_after, total = torch.cuda.mem_get_info()
    # Whether the setting took: expandable segments say so in the snapshot.
    try:
        segments = torch.cuda.memory_snapshot()
        segment_count = len(segments)
        expandable = any(segment.get("is_expandable") for segment in segments)
    except Exception:  # the snapshot's shape is not a stable interface
        segment_count, expandable = None, None

    per_replay = []
    for _ in range(repetitions):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(replays):
            replay(make_tensor)
        torch.cuda.synchronize()
        per_replay.append((time.perf_counter() - start) / replays)

    # The same loop with a plain Python object: the interpreter's share.
    loop = []
    for _ in range(repetitions):
        start = time.perf_counter()
        for _ in range(replays):
            replay(lambda size: object())
        loop.append((time.perf_counter() - start) / replays)

    median = statistics.median(per_replay)
    emit({
        "scenario": SCENARIO,
        "variant": variant,
        "alloc_conf": alloc_conf,
        "torch_version": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(device),
        "device_total_bytes": total,
        "trace": trace_path,
        "trace_fingerprint": computed,
        "trace_fingerprint_declared": declared,
        "ops_per_trace": ops,
        "repetitions": repetitions,
        "replays_per_repetition": replays,
        "seconds_per_replay": per_replay,
        "median_seconds_per_replay": median,
        "ops_per_second": ops / median if median > 0 else None,
        "first_replay_seconds": first_replay_seconds,
        "python_loop_seconds_per_replay": statistics.median(loop),
        "max_memory_reserved_bytes": torch.cuda.max_memory_reserved(),
        "max_memory_allocated_bytes": torch.cuda.max_memory_allocated(),
        "device_used_peak_bytes": max(0, free_before - free_after),
        "segments_after_first_replay": segment_count,
        "expandable_segments_in_use": expandable,
    })


def parent(args):
    """Starts one child process per variant; relays or replaces their lines."""
    try:
        steps, _, declared = read_trace(args.trace)
    except (OSError, ValueError) as error:
        for variant in VARIANTS:
            emit(skipped(variant, f"cannot read the trace: {error}"))
        return
    computed = fingerprint(steps)
    if declared and declared != computed:
        for variant in VARIANTS:
            emit(skipped(variant, f"{args.trace}: fingerprint {computed} differs from the "
                                  f"declared {declared} (the file is damaged)"))
        return
    for variant, alloc_conf in VARIANTS.items():
        env = dict(os.environ)
        # Newer torch also reads PYTORCH_ALLOC_CONF: neither may leak in.
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        env.pop("PYTORCH_ALLOC_CONF", None)
        if alloc_conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
        command = [sys.executable, os.path.abspath(__file__), args.trace,
                   "--child", variant, "--repetitions", str(args.repetitions),
                   "--replays", str(args.replays)]
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True,
                                  timeout=args.timeout, check=False)
        except subprocess.TimeoutExpired:
            emit(skipped(variant, f"timed out after {args.timeout} s", alloc_conf=alloc_conf or ""))
            continue
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode == 0 and lines:
            for line in lines:
                print(line, flush=True)
            continue
        tail = " | ".join(done.stderr.strip().splitlines()[-3:]) or "no output"
        emit(skipped(variant, f"the replay process exited with status {done.returncode}: {tail}",
                     alloc_conf=alloc_conf or ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="written by ortmem-gpu-bench --ortmem_write_trace=PATH")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--replays", type=int, default=20, help="timed replays per repetition")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per variant process")
    parser.add_argument("--child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repetitions < 1 or args.replays < 1:
        parser.error("--repetitions and --replays must be at least 1")
    if args.child:
        child(args.child, args.trace, args.repetitions, args.replays)
    else:
        parent(args)


if __name__ == "__main__":
    main()
