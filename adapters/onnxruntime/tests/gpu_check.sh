#!/usr/bin/env bash
# The ONNX Runtime adapter on the CUDA execution provider (docs/adapters/ONNXRUNTIME.md),
# in two halves, since the GPU machine reaches no package registry:
#
#   bash adapters/onnxruntime/tests/gpu_check.sh --prepare
#       here, where apt and PyPI work: the C header (scripts/ort-env.sh) into
#       build/ort-include and the test model into build/ort-gpu/; prints what
#       to carry: build/ort-include build/ort-gpu (and .deps, as for
#       scripts/gpu-suite.sh, when the machine lacks pcre2 or jansson).
#
#   bash adapters/onnxruntime/tests/gpu_check.sh
#       on the GPU machine: finds libonnxruntime (ORTMEM_ORT_LIB, else
#       python3's onnxruntime package, which must offer CUDAExecutionProvider),
#       builds ortmem with the CUDA backend and ortmem-ort-decode into
#       build-ortgpu/, then decodes the test model greedily on the CUDA EP
#       plainly and on ortmem (KV in ortmem CUDA memory bound through an
#       IoBinding, ORT's allocations through the registered ortmem
#       allocators), and prints "outputs: equal" or "outputs: DIFFERENT" with
#       the KV bytes at each point; the same on the CPU EP after it.
#       Logs go to $OUT (./gpu-out when unset).
#
# Exit status: 0 when both runs printed "outputs: equal", 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/../../.."
repo=$PWD
model=$repo/build/ort-gpu/tiny_decoder.onnx

if [ "${1:-}" = --prepare ]; then
  set -e
  bash scripts/ort-env.sh >/dev/null
  mkdir -p build/ort-gpu
  build/venv-ort/bin/python adapters/onnxruntime/tests/make_model.py "$model"
  echo "gpu_check: prepared; carry these to the GPU machine:"
  echo "  build/ort-include build/ort-gpu"
  exit 0
fi

OUT=${OUT:-$repo/gpu-out}
mkdir -p "$OUT"
build=build-ortgpu
tooldir=$repo/$build-tools
# shellcheck source=scripts/gpu-env.sh
. scripts/gpu-env.sh

echo "== environment"
gpu_env_tools "$tooldir"
gpu_env_report | tee "$OUT/ort-env.txt"
gpu_env_check_tools gpu_check || exit 1
for need in build/ort-include/onnxruntime_c_api.h "$model"; do
  if [ ! -f "$need" ]; then
    echo "gpu_check: $need is missing: run 'bash $0 --prepare' where apt and PyPI work and carry build/ort-include build/ort-gpu"
    exit 1
  fi
done

echo "== ONNX Runtime"
lib=${ORTMEM_ORT_LIB:-}
if [ -z "$lib" ]; then
  # The package's libonnxruntime, its providers, and where pip's NVIDIA
  # libraries (cuBLAS, cuDNN, the CUDA runtime) are, for the CUDA EP to load.
  info=$(python3 - <<'PY' 2>&1
import glob, os
import onnxruntime as ort
capi = os.path.join(os.path.dirname(ort.__file__), "capi")
libs = sorted(glob.glob(os.path.join(capi, "libonnxruntime.so*")))
print("version", ort.__version__)
print("providers", ",".join(ort.get_available_providers()))
print("lib", libs[0] if libs else "")
try:
    import nvidia
    for root in nvidia.__path__:
        for d in sorted(glob.glob(os.path.join(root, "*", "lib"))):
            print("nvidia", d)
except ImportError:
    pass
PY
  )
  echo "$info" | tee "$OUT/ort-python.txt"
  lib=$(echo "$info" | awk '$1 == "lib" { print $2 }')
  if ! echo "$info" | grep -q "^providers.*CUDAExecutionProvider"; then
    echo "gpu_check: python3's onnxruntime offers no CUDAExecutionProvider (onnxruntime-gpu is needed; or set ORTMEM_ORT_LIB)"
    exit 1
  fi
  for d in $(echo "$info" | awk '$1 == "nvidia" { print $2 }'); do
    LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  done
  export LD_LIBRARY_PATH
fi
if [ -z "$lib" ] || [ ! -f "$lib" ]; then
  echo "gpu_check: no libonnxruntime found (set ORTMEM_ORT_LIB)"
  exit 1
fi
echo "library: $lib"

echo "== build ($build: CUDA backend, ortmem-ort-decode)"
gpu_env_deps "$repo" "$tooldir" "pcre2 and jansson"
args=(-Dcuda=enabled -Dtests=false -Dbench=false -Dbuildtype=debugoptimized)
if [ -f "$build/build.ninja" ]; then
  meson setup --wipe "$build" "${args[@]}" >"$OUT/ort-configure.log" 2>&1
else
  meson setup "$build" "${args[@]}" >"$OUT/ort-configure.log" 2>&1
fi || { tail -30 "$OUT/ort-configure.log"; echo "gpu_check: configure failed"; exit 1; }
grep -E "cuda.h|onnxruntime_c_api.h|ONNX Runtime adapter" "$OUT/ort-configure.log" | sort -u
target=adapters/onnxruntime/tests/ortmem-ort-decode
ninja -C "$build" "$target" >"$OUT/ort-build.log" 2>&1 ||
  { tail -30 "$OUT/ort-build.log"; echo "gpu_check: build failed"; exit 1; }

failed=0
for device in cuda cpu; do
  echo "== decode on $device"
  timeout 300 "$build/$target" --lib "$lib" --model "$model" --device "$device" \
    --steps 512 --every 64 --max-context 32768 2>&1 | tee "$OUT/ort-$device.txt"
  grep -q "^outputs: equal" "$OUT/ort-$device.txt" || failed=1
done

echo
echo "== summary"
for device in cuda cpu; do
  echo "$device: $(grep -E '^outputs:' "$OUT/ort-$device.txt" || echo 'no result (see the log above)')"
  tail -n +2 "$OUT/ort-$device.txt" | grep -E '^ *[0-9]+ ' | tail -1 |
    awk '{ printf "  at %s tokens: KV live %s bytes, committed %s bytes; a concatenating present would have had ORT allocate %s bytes over the run\n", $1, $2, $3, $6 }'
  grep -E '^allocator|^device allocator' "$OUT/ort-$device.txt" | sed 's/^/  /'
done
exit $failed
