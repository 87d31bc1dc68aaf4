#!/usr/bin/env bash
# The second thing to try (the main job before the engine existed): KV paging
# on the CPU backend. ortmem-kvdemo runs a serving-like
# workload (the qwen2.5-0.5b geometry, 48 requests, continuous batching, a
# system prompt shared by forking its sequence and through the prefix cache)
# once per layout (head-major, seq-major, token-major) and strategy (stable,
# bucket), prints committed against live bytes as it runs, then a report per
# configuration and the ledger, and draws build/kv-paging.svg. Every appended
# token's K and V are written through the binding descriptors (a byte per head
# row) and a sample is read back: a corruption is exit status 1.
# Extra arguments go to ortmem-kvdemo (e.g. --json, --budget 150MiB,
# --granule 64KiB, --model llama-3-8b; --help lists them). The allocation-trace
# replay stays available: build/tools/replay/ortmem-replay (README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec build/tools/kvdemo/ortmem-kvdemo --plot build/kv-paging.svg "$@"
