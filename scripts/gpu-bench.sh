#!/usr/bin/env bash
# The GPU benchmarks in one command, run from the repository root on the GPU
# machine (NVIDIA H200, driver 580, CUDA 13; nvcc, meson, ninja and python3
# with torch there, no package registry), with .deps/root carried:
#
#   bash scripts/gpu-bench.sh [extra ortmem-gpu-bench flags, e.g. --benchmark_filter=kv]
#
# 1. points pkg-config, the compiler, the linker and the loader at .deps/root
#    (Google Benchmark among the rest; prepared here by scripts/gpu-deps.sh),
#    as scripts/gpu-suite.sh does (scripts/gpu-env.sh);
# 2. builds bench/ortmem-gpu-bench and tools/kvdemo/ortmem-kvdemo into
#    build-gpu-bench/ (release, -Dcuda=enabled -Dbench=true -Dtests=false);
# 3. writes the allocation trace ($OUT/trace.txt), runs the main job's KV
#    workload on the GPU (ortmem-kvdemo --backend cuda --json, at most 120 s)
#    into $OUT/kvdemo_cuda.json, and again with --prewarm on into
#    $OUT/kvdemo_cuda_prewarm.json, with the backend calls per request after
#    the warm-up printed, runs ortmem-gpu-bench (5
#    repetitions, shuffled together) into $OUT/gpu_bench.json, then
#    bench/torch_trace.py over the same trace (PyTorch's caching allocator,
#    with and without expandable segments, one process each) into
#    $OUT/torch_trace.jsonl;
# 4. merges both with bench/gpu_ratios.py into $OUT/gpu_bench.md (the tables
#    for docs/memory/MEASUREMENTS.md) and prints it.
#
# $OUT is ./gpu-out when unset. The whole run, build included, is kept under
# about 8 minutes (ORTMEM_BENCH_BUDGET seconds, default 450). Exit status: 0
# when everything ran (a scenario skipped with its reason, no GPU for
# instance, is not a failure), 1 when the build or a run failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
repo=$PWD
# shellcheck source=scripts/gpu-env.sh
. scripts/gpu-env.sh
OUT=${OUT:-$repo/gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
build="build-gpu-bench"
bench=$build/bench/ortmem-gpu-bench
budget=${ORTMEM_BENCH_BUDGET:-450}
start=$(date +%s)

left() { echo $((budget - ($(date +%s) - start))); }
step() { echo; echo "== $* (at $(($(date +%s) - start)) s)"; }
# Runs "$@" with at most $1 seconds (and never past the budget).
bounded() {
  local cap=$1; shift
  local t; t=$(left)
  ((t > cap)) && t=$cap
  ((t < 10)) && t=10
  timeout --kill-after=10 "$t" "$@"
}

failed=0
summary=()
note() { summary+=("$*"); }

main() {
# ---- tools and carried dependencies ----
step "environment"
tooldir=$repo/$build-tools
gpu_env_tools "$tooldir"
{
  gpu_env_report
  echo "python3: $(python3 --version 2>&1)"
} | tee "$OUT/env.txt"
gpu_env_check_tools gpu-bench || return 1
command -v c++ >/dev/null || command -v g++ >/dev/null || { echo "gpu-bench: no C++ compiler"; return 1; }

step "dependencies (.deps/root)"
gpu_env_deps "$repo" "$tooldir" "Google Benchmark (Debian: libbenchmark-dev)"

# ---- build ----
step "configure $build"
args=(-Dcuda=enabled -Dbench=true -Dtests=false -Dgpu_tests=false -Dbuildtype=release)
if [ -f "$build/build.ninja" ]; then
  # --wipe: dependencies are looked up again in this environment.
  bounded 120 meson setup --wipe "$build" "${args[@]}" >"$tooldir/configure.log" 2>&1
else
  bounded 120 meson setup "$build" "${args[@]}" >"$tooldir/configure.log" 2>&1
fi
rc=$?
grep -E "cuda.h|[Bb]enchmark|ortmem-gpu-bench" "$tooldir/configure.log" | sort -u
if [ "$rc" -ne 0 ]; then
  tail -40 "$tooldir/configure.log"
  cp "$build/meson-logs/meson-log.txt" "$OUT/meson-log.txt" 2>/dev/null
  echo "gpu-bench: configure failed (rc $rc); see $OUT/meson-log.txt"
  return 1
fi
if ! grep -q "ortmem-gpu-bench" "$build/build.ninja"; then
  grep -E "^Message: bench" "$tooldir/configure.log"
  echo "gpu-bench: ortmem-gpu-bench is not configured (Google Benchmark or cuda.h missing; above)"
  return 1
fi

step "build"
bounded 240 ninja -C "$build" -j "$(nproc)" bench/ortmem-gpu-bench tools/kvdemo/ortmem-kvdemo \
  >"$OUT/build.log" 2>&1
rc=$?
tail -2 "$OUT/build.log"
if [ "$rc" -ne 0 ]; then
  grep -E "error|FAILED" "$OUT/build.log" | head -40
  echo "gpu-bench: build failed (rc $rc); see $OUT/build.log"
  return 1
fi
if ldd "$bench" 2>/dev/null | grep -q "not found"; then
  ldd "$bench" | grep "not found"
  echo "gpu-bench: $bench cannot be loaded here (carry .deps/root: bash scripts/gpu-deps.sh)"
  return 1
fi

# ---- run ----
step "trace"
"$bench" --ortmem_write_trace="$OUT/trace.txt" || { echo "gpu-bench: the trace was not written"; return 1; }

kvdemo=$build/tools/kvdemo/ortmem-kvdemo
# Runs the main job's KV workload on the GPU with the extra flags given, into
# $OUT/$1, and prints each configuration's backend calls per request after
# the warm-up.
run_kvdemo() {
  local out=$1; shift
  step "ortmem-kvdemo --backend cuda --json $* (the main job's KV workload on the GPU)"
  local kv_err rc
  kv_err=$( { bounded 120 "$kvdemo" --backend cuda --json "$@" >"$OUT/$out"; } 2>&1)
  rc=$?
  [ -n "$kv_err" ] && echo "$kv_err"
  if [ "$rc" -eq 0 ]; then
    # Per configuration: backend calls per request after the warm-up (all five summed).
    python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
for c in d["configurations"]:
    a = c["backend_calls"]["all"]
    print("%-12s %-7s calls: total %d, warm-up %d, per request after it: mean %.1f, max %d; %.1f s" % (c["layout"], c["strategy"], a["total"], a["warmup"], a["per_request_mean"], a["per_request_max"], c["seconds"]))' "$OUT/$out"
    note "ortmem-kvdemo --backend cuda $*: ran, no corruption ($OUT/$out)"
  elif [ "$rc" -eq 2 ]; then
    note "ortmem-kvdemo --backend cuda $*: skipped: $kv_err"
  else
    failed=1
    note "ortmem-kvdemo --backend cuda $*: exit status $rc$( ((rc == 124 || rc == 137)) && echo " (stopped at the time limit)") (1: a corruption or a failure, in $OUT/$out)"
  fi
}
run_kvdemo kvdemo_cuda.json
# Ranges prewarmed to the workload's prompt lengths: no driver call per
# request once warm (docs/memory/KV.md, Prewarming).
run_kvdemo kvdemo_cuda_prewarm.json --prewarm on

step "ortmem-gpu-bench (5 repetitions, shuffled together)"
# Leave time for the torch replays and the tables.
cap=$(($(left) - 100))
((cap > 360)) && cap=360
bounded "$cap" "$bench" --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true \
  --benchmark_out="$OUT/gpu_bench.json" --benchmark_out_format=json "$@" 2>&1 |
  tee "$OUT/gpu_bench.txt"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  failed=1
  note "ortmem-gpu-bench: exit status $rc$( ((rc == 124 || rc == 137)) && echo " (stopped at the time limit: the runs finished before it are kept)")"
else
  note "ortmem-gpu-bench: ran (exit status 0; skipped scenarios are listed in the tables)"
fi

step "PyTorch's caching allocator on the same trace (bench/torch_trace.py)"
bounded 170 python3 bench/torch_trace.py "$OUT/trace.txt" --timeout 80 \
  >"$OUT/torch_trace.jsonl" 2>"$OUT/torch_trace.err"
rc=$?
cut -c1-400 "$OUT/torch_trace.jsonl"
if [ "$rc" -ne 0 ]; then
  failed=1
  tail -5 "$OUT/torch_trace.err"
  note "torch_trace.py: exit status $rc (see $OUT/torch_trace.err)"
else
  note "torch_trace.py: $(grep -c '"skipped"' "$OUT/torch_trace.jsonl") of $(grep -c '^{' "$OUT/torch_trace.jsonl") variants skipped"
fi

step "the engine on the GPU (tests/engine/cuda/gpu_decode --bench) beside HF transformers"
# Runs where the model was carried (scripts/model-carry.sh, ORTMEM_MODEL):
# the engine's tok/s at batch 1 (graphs on and off), 8 and 32, then HF
# transformers' eager decode of the same geometry (bench/peer/hf_decode.py),
# in the same run. Built in its own release tree with the tests (the
# benchmark is the check program's --bench mode).
if [ -n "${ORTMEM_MODEL:-}" ] && [ -r "${ORTMEM_MODEL:-}" ]; then
  ebuild=build-gpu-engine
  eargs=(-Dcuda=enabled -Dtests=true -Dbench=false -Dgpu_tests=true -Dbuildtype=release)
  if [ -f "$ebuild/build.ninja" ]; then
    bounded 120 meson setup --wipe "$ebuild" "${eargs[@]}" >"$tooldir/engine-configure.log" 2>&1
  else
    bounded 120 meson setup "$ebuild" "${eargs[@]}" >"$tooldir/engine-configure.log" 2>&1
  fi
  if bounded 240 ninja -C "$ebuild" -j "$(nproc)" tests/engine/cuda/gpu_decode >"$OUT/engine-build.log" 2>&1; then
    ORTMEM_ENGINE_TEST_DATA=$repo/tests/data/engine bounded 150 "$ebuild/tests/engine/cuda/gpu_decode" --bench \
      | tee "$OUT/engine_gpu.jsonl"
    bounded 150 python3 bench/peer/hf_decode.py --steps 128 2>"$OUT/hf_peer.err" | tee "$OUT/hf_peer.jsonl"
    note "engine on the GPU: $OUT/engine_gpu.jsonl, HF transformers: $OUT/hf_peer.jsonl"
  else
    failed=1
    tail -20 "$OUT/engine-build.log"
    note "engine on the GPU: build failed ($OUT/engine-build.log)"
  fi
else
  note "engine on the GPU: skipped (no model here: scripts/model-carry.sh, ORTMEM_MODEL)"
fi

# ---- tables ----
step "tables ($OUT/gpu_bench.md)"
if [ -s "$OUT/gpu_bench.json" ]; then
  local extra=${*:+ $*}
  {
    echo "Command: \`bash scripts/gpu-bench.sh$extra\` (= $bench --benchmark_repetitions=5" \
         "--benchmark_enable_random_interleaving=true --benchmark_out=gpu_bench.json" \
         "--benchmark_out_format=json$extra; python3 bench/torch_trace.py trace.txt;" \
         "python3 bench/gpu_ratios.py gpu_bench.json --torch torch_trace.jsonl)." \
         "GPU: $(sed -n 's/^gpu: //p' "$OUT/env.txt"); commit: $(sed -n 's/^commit: //p' "$OUT/env.txt")."
    echo
    python3 bench/gpu_ratios.py "$OUT/gpu_bench.json" --torch "$OUT/torch_trace.jsonl"
  } >"$OUT/gpu_bench.md" 2>"$OUT/gpu_ratios.err"
  rc=$?
  cat "$OUT/gpu_bench.md"
  if [ $rc -ne 0 ]; then
    failed=1
    cat "$OUT/gpu_ratios.err"
    note "gpu_ratios.py: exit status $rc"
  fi
else
  failed=1
  note "no $OUT/gpu_bench.json: nothing to tabulate"
fi

# ---- summary ----
step "summary"
{
  echo "ortmem GPU benchmarks, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(($(date +%s) - start)) s"
  sed 's/^/  /' "$OUT/env.txt"
  printf '%s\n' "${summary[@]}"
  if [ $failed -eq 0 ]; then echo "RESULT: DONE (skips are listed in the tables with their reasons)"; else echo "RESULT: FAIL"; fi
  echo "output: $OUT (gpu_bench.md, gpu_bench.json, gpu_bench.txt, kvdemo_cuda.json, torch_trace.jsonl, trace.txt, env.txt, build.log, bench.log)"
} | tee "$OUT/summary.txt"
return $failed
}

main "$@" 2>&1 | tee "$OUT/bench.log"
exit "${PIPESTATUS[0]}"
