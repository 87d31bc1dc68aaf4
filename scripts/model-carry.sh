#!/usr/bin/env bash
# The default model for the GPU machine, which has no package registry and
# takes at most 64 MiB per call: scripts/file-carry.sh's parts of the GGUF
# (scripts/model-env.sh finds it) under .carry/MODEL/ with its sha256. The
# machine keeps ignored files between calls while it stays warm, so carry one
# part per call, in quick succession:
#
#   bash scripts/model-carry.sh
#   run, carry [".carry/SmolLM2-135M-Instruct.Q4_1.gguf/part-K",
#               ".carry/SmolLM2-135M-Instruct.Q4_1.gguf/sha256"]:
#       bash scripts/model-carry.sh --receive      (K = 0, 1)
#   then, on the machine: ORTMEM_MODEL=$(bash scripts/model-carry.sh --assemble)
set -euo pipefail
cd "$(dirname "$0")/.."
name=SmolLM2-135M-Instruct.Q4_1.gguf
case "${1:-}" in
--receive) exec bash scripts/file-carry.sh --receive "$name" ;;
--assemble) exec bash scripts/file-carry.sh --assemble "$name" ;;
"")
  model=$(bash scripts/model-env.sh)
  [ "$(basename "$model")" = "$name" ] ||
    { echo "model-carry: the default model is $model, not $name" >&2; exit 1; }
  exec bash scripts/file-carry.sh "$model"
  ;;
*)
  echo "usage: scripts/model-carry.sh [--receive | --assemble]" >&2
  exit 2
  ;;
esac
