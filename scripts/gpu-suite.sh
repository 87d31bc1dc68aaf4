#!/usr/bin/env bash
# The GPU suite in one command, run from the repository root on the GPU
# machine (NVIDIA H200, driver 580, CUDA 13; nvcc, meson and ninja there, no
# package registry):
#
#   bash scripts/gpu-suite.sh
#
# 1. points pkg-config (PKG_CONFIG_PATH), the compiler (C_INCLUDE_PATH), the
#    linker (LIBRARY_PATH) and the loader (LD_LIBRARY_PATH) at .deps/root
#    (Criterion, jansson, pkgconf; prepared here by scripts/gpu-deps.sh and
#    carried), linking in only the libraries the machine lacks
#    (scripts/gpu-env.sh, shared with scripts/gpu-bench.sh);
# 2. builds ortmem with the CUDA backend and the GPU tests into build-gpu/
#    (-Dcuda=enabled -Dgpu_tests=true, debugoptimized, no benchmarks);
# 3. runs the GPU Criterion suite (tests/gpu/test_gpu.c), graph_tests (nvcc:
#    kernels and graph capture) and the whole CPU test suite (--suite unit);
# 4. writes logs to $OUT (./gpu-out when unset) and prints a summary.
#
# Exit status: 0 when nothing failed (skips are not failures), 1 otherwise.
# The whole run is kept under about 8 minutes (ORTMEM_SUITE_BUDGET seconds).
# For a check on a machine without a GPU: ORTMEM_DEPS_SHIM=all links every
# carried library instead of the missing ones, ORTMEM_DEPS_PKGCONF=1 uses the
# carried pkgconf even where pkg-config exists.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
# shellcheck source=scripts/gpu-env.sh
. scripts/gpu-env.sh
OUT=${OUT:-$repo/gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
build=build-gpu
budget=${ORTMEM_SUITE_BUDGET:-470}
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

summary=()
failed=0
note() { summary+=("$*"); }

main() {
# ---- tools ----
step "environment"
tooldir=$repo/$build-tools
gpu_env_tools "$tooldir"
gpu_env_report | tee "$OUT/env.txt"
gpu_env_check_tools gpu-suite || return 1

# ---- carried dependencies ----
step "dependencies (.deps/root)"
gpu_env_deps "$repo" "$tooldir" Criterion

# ---- build ----
step "configure $build"
args=(-Dcuda=enabled -Dgpu_tests=true -Dbench=false -Dbuildtype=debugoptimized)
if [ -f "$build/build.ninja" ]; then
  # --wipe: dependencies are looked up again (a reconfigure would keep the
  # cached flags of an earlier environment); unchanged objects are reused.
  bounded 120 meson setup --wipe "$build" "${args[@]}" >"$tooldir/configure.log" 2>&1
else
  bounded 120 meson setup "$build" "${args[@]}" >"$tooldir/configure.log" 2>&1
fi
rc=$?
grep -E "cuda.h|Criterion|criterion|Cuda compiler|nvcc|graph_tests|jansson" "$tooldir/configure.log" | sort -u
if [ $rc -ne 0 ]; then
  tail -40 "$tooldir/configure.log"
  cp "$build/meson-logs/meson-log.txt" "$OUT/meson-log.txt" 2>/dev/null
  echo "gpu-suite: configure failed (rc $rc); see $OUT/meson-log.txt"
  return 1
fi
grep -q "graph_tests" "$build/build.ninja" || note "graph_tests: NOT BUILT (nvcc not found by meson)"

step "build"
bounded 240 ninja -C "$build" -j "$(nproc)" >"$OUT/build.log" 2>&1
rc=$?
tail -3 "$OUT/build.log"
if [ $rc -ne 0 ]; then
  grep -E "error|FAILED" "$OUT/build.log" | head -40
  echo "gpu-suite: build failed (rc $rc); see $OUT/build.log"
  return 1
fi

# ---- run ----
# meson test prints "Ok: N / Fail: N / Skipped: N / Timeout: N"; keep them.
counts() {
  awk '/^(Ok|Fail|Skipped|Timeout|Expected Fail|Unexpected Pass):/ {
         sub(/:/, "", $0); printf "%s ", $0 } END { print "" }' "$1" | tr -s ' '
}

step "GPU suite: test_gpu (Criterion) and graph_tests"
bounded 200 meson test -C "$build" --suite gpu --no-rebuild --print-errorlogs \
  --logbase gpu >"$tooldir/gpu.out" 2>&1
rc=$?
grep -E "^ *[0-9]+/[0-9]+ " "$tooldir/gpu.out"
cp "$build/meson-logs/gpu.txt" "$OUT/testlog-gpu.txt" 2>/dev/null
[ $rc -eq 0 ] || failed=1
note "GPU suite (meson --suite gpu): $(counts "$tooldir/gpu.out")(rc $rc)"
if [ -f "$OUT/testlog-gpu.txt" ]; then
  # Criterion's per-test lines and synthesis, graph_tests' own tally.
  grep -E "^\[(PASS|FAIL|SKIP|ERR)|Synthesis|CRASH|^\[RUN |^gpu: |^graph_tests:|passed, [0-9]+ failed|^  (FAIL|PASS|kv:|graph:)|^gpu_decode" \
    "$OUT/testlog-gpu.txt" | grep -v '^\[RUN ' | sed 's/^/  /'
  synth=$(grep -m1 "Synthesis" "$OUT/testlog-gpu.txt" | sed 's/.*Synthesis: //')
  tally=$(grep -m1 -E "^[0-9]+ passed, [0-9]+ failed" "$OUT/testlog-gpu.txt")
  note "  test_gpu: ${synth:-no synthesis line}"
  note "  graph_tests: ${tally:-no tally line}"
fi

step "CPU suite (meson --suite unit)"
# The engine's suites (also --suite engine) read the default model, which
# only travels here when carried (scripts/model-carry.sh, then ORTMEM_MODEL);
# without it they are left out. The suites that need the model's Python
# environment (--suite model-env: the installed wheel, the gguf package) are
# always left out here. The summary says which.
skip_engine=(--no-suite model-env)
if [ -z "${ORTMEM_MODEL:-}" ] || [ ! -r "${ORTMEM_MODEL:-}" ]; then
  skip_engine+=(--no-suite engine)
  note "CPU suite: the engine's suites were left out (no model here: scripts/model-carry.sh, ORTMEM_MODEL)"
else
  note "CPU suite: the engine's suites ran on $ORTMEM_MODEL; those needing scripts/model-env.sh's venv were left out"
fi
bounded 240 meson test -C "$build" --suite unit "${skip_engine[@]}" --no-rebuild --print-errorlogs \
  --num-processes "$(nproc)" --logbase unit >"$tooldir/unit.out" 2>&1
rc=$?
grep -E "^ *[0-9]+/[0-9]+ " "$tooldir/unit.out"
cp "$build/meson-logs/unit.txt" "$OUT/testlog-unit.txt" 2>/dev/null
[ $rc -eq 0 ] || failed=1
note "CPU suite (meson --suite unit): $(counts "$tooldir/unit.out")(rc $rc)"

# ---- summary ----
step "summary"
{
  echo "ortmem GPU suite, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(($(date +%s) - start)) s"
  sed 's/^/  /' "$OUT/env.txt"
  printf '%s\n' "${summary[@]}"
  if [ $failed -eq 0 ]; then echo "RESULT: PASS (skips are listed above with their reasons)"; else echo "RESULT: FAIL"; fi
  echo "logs: $OUT (suite.log, env.txt, build.log, testlog-gpu.txt, testlog-unit.txt)"
} | tee "$OUT/summary.txt"
return $failed
}

main 2>&1 | tee "$OUT/suite.log"
exit "${PIPESTATUS[0]}"
