#!/usr/bin/env bash
# The PyTorch adapter on the GPU machine, from the repository root:
#
#   bash adapters/pytorch/tests/gpu_check.sh
#
# 1. builds libortmem_torch.so with the CUDA backend (-Dcuda=enabled) in
#    build-gpu-torch/, a release build beside scripts/gpu-suite.sh's
#    build-gpu/ (whose debugoptimized build keeps the library's assertions,
#    which would weigh on the tok/s comparison); the environment comes from
#    scripts/gpu-env.sh as for the GPU suite;
# 2. runs gpu_generate.py (greedy tokens, peak reserved and tok/s: ortmem
#    beside the caching allocator with and without expandable segments) and
#    gpu_sleep.py (sleep and wake of the weights, a CUDA graph across them, a
#    budget breach), each writing its JSON to $OUT (./gpu-out when unset);
# 3. prints both summaries; exit status 0 when both passed.
# Needs torch 2.x and transformers importable by python3 (no network is used).
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
repo=$PWD
# shellcheck source=scripts/gpu-env.sh
. scripts/gpu-env.sh
OUT=${OUT:-$repo/gpu-out}
mkdir -p "$OUT"
build="build-gpu-torch"
tooldir=$repo/$build-tools

gpu_env_tools "$tooldir"
gpu_env_check_tools gpu_check || exit 1
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.cuda.is_available())' ||
  { echo "gpu_check: torch and transformers must be importable"; exit 1; }

if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" -Dcuda=enabled -Dtests=false -Dbench=false -Dfuzz=false \
    --buildtype=release >"$OUT/torch-configure.log" 2>&1 ||
    { tail -30 "$OUT/torch-configure.log"; echo "gpu_check: configure failed"; exit 1; }
fi
ninja -C "$build" adapters/pytorch/libortmem_torch.so >"$OUT/torch-build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/torch-build.log" | head -30; echo "gpu_check: build failed"; exit 1; }

export ORTMEM_TORCH_LIB=$repo/$build/adapters/pytorch/libortmem_torch.so
export PYTHONPATH=$repo/adapters/pytorch${PYTHONPATH:+:$PYTHONPATH}
failed=0
echo "== gpu_generate.py"
timeout 1500 python3 adapters/pytorch/tests/gpu_generate.py "$@" >"$OUT/torch-generate.json" 2>"$OUT/torch-generate.err" ||
  failed=1
python3 - "$OUT/torch-generate.json" <<'PY' || failed=1
import json, sys
s = json.load(open(sys.argv[1]))
for name, r in s["runs"].items():
    if "error" in r:
        print("%-20s ERROR %s" % (name, r["error"])); print(r["stderr_tail"]); continue
    print("%-20s %8.1f tok/s  peak allocated %6.1f MiB  peak reserved %6.1f MiB  (+%.2f%%)  tokens %s"
          % (name, r["tok_per_s"], r["peak_allocated_bytes"] / 2**20,
             r["peak_reserved_bytes"] / 2**20, 100 * r["reserved_over_allocated"],
             r["tokens_sha256"][:12]))
print(json.dumps(s["checks"], indent=1))
print("gpu_generate:", "ok" if s["ok"] else "FAILED")
PY
echo "== gpu_sleep.py"
timeout 900 python3 adapters/pytorch/tests/gpu_sleep.py >"$OUT/torch-sleep.json" 2>"$OUT/torch-sleep.err" ||
  failed=1
python3 - "$OUT/torch-sleep.json" <<'PY' || failed=1
import json, sys
s = json.load(open(sys.argv[1]))
for part in ("install", "pool"):
    for name, c in s.get(part, {}).items():
        if isinstance(c, dict) and "ok" in c:
            extra = {k: v for k, v in c.items() if k != "ok"}
            print("%-7s %-50s %s %s" % (part, name, "ok" if c["ok"] else "FAILED", extra or ""))
        else:
            print(part, name, c)
print("gpu_sleep:", "ok" if s["ok"] else "FAILED")
PY
[ $failed -eq 0 ] && echo "gpu_check: ok" || echo "gpu_check: FAILED (logs in $OUT/torch-*.err)"
exit $failed
