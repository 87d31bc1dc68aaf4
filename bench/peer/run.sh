#!/usr/bin/env bash
# llama.cpp beside the engine on the default model: prefill and decode tok/s
# with 2 threads, and peak RSS (bench/peer/llama_peer.py says how). Installs
# llama-cpp-python through scripts/llama-env.sh when it is missing (that
# compiles llama.cpp: about nine minutes once) and the model through
# scripts/model-env.sh; ORTMEM_MODEL names another model file. The engine's
# side runs when build/tools/decode/ortmem-decode exists. Arguments go to
# llama_peer.py: --reps N, --threads N, --decoder PATH, --json.
#
#   bench/peer/run.sh [--json] [--reps N]
set -euo pipefail
cd "$(dirname "$0")/../.."
python=$(scripts/llama-env.sh)
model=${ORTMEM_MODEL:-$(scripts/model-env.sh)}
exec "$python" bench/peer/llama_peer.py --model "$model" "$@"
