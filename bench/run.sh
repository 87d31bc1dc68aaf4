#!/bin/sh
# Builds ortmem-bench in build-bench/, runs every scenario (5 interleaved
# repetitions) and prints the ratio tables. Extra arguments go to ortmem-bench,
# e.g. bench/run.sh --benchmark_filter=granule. Writes bench.json at the
# repository root (BENCH_JSON=path overrides; relative to the root).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
json=${BENCH_JSON:-bench.json}
cd "$root"
[ -d build-bench ] || meson setup build-bench --buildtype=release
ninja -C build-bench bench/ortmem-bench
build-bench/bench/ortmem-bench --benchmark_repetitions=5 \
    --benchmark_enable_random_interleaving=true \
    --benchmark_out="$json" --benchmark_out_format=json "$@"
python3 bench/ratios.py "$json"
