#!/usr/bin/env bash
# The default model for the GPU machine, which has no package registry and
# takes at most 64 MiB per call: splits the GGUF (scripts/model-env.sh finds
# it) into two parts under .model-carry/ (ignored by git) with its sha256.
# Carry one part per call; the machine keeps ignored files between calls
# while it stays warm, so each call copies its part into build-model/ there:
#
#   bash scripts/model-carry.sh
#   run, carry [".model-carry/part-0"]:  bash scripts/model-carry.sh --receive
#   run, carry [".model-carry/part-1"]:  bash scripts/model-carry.sh --receive
#   then, on the machine: ORTMEM_MODEL=$(bash scripts/model-carry.sh --assemble)
#
# --receive copies whichever parts were carried into build-model/;
# --assemble joins them when all are there, checks the sha256 and prints the
# model's path (exit 1 naming what is missing otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
carry=.model-carry
received=build-model
case "${1:-}" in
--receive)
  mkdir -p "$received"
  cp "$carry"/part-* "$carry"/model.sha256 "$received"/ 2>/dev/null || true
  ls -l "$received" >&2
  ;;
--assemble)
  [ -f "$received/model.sha256" ] || { echo "model-carry: $received/model.sha256 is missing" >&2; exit 1; }
  name=$(awk '{print $2}' "$received/model.sha256")
  parts=$(awk '{print $3}' "$received/model.sha256")
  for ((i = 0; i < parts; i++)); do
    [ -f "$received/part-$i" ] || { echo "model-carry: part $i of $parts was not carried" >&2; exit 1; }
  done
  if [ ! -f "$received/$name" ]; then
    for ((i = 0; i < parts; i++)); do cat "$received/part-$i"; done >"$received/$name.tmp"
    mv "$received/$name.tmp" "$received/$name"
  fi
  (cd "$received" && awk '{print $1"  "$2}' model.sha256 | sha256sum -c --quiet) >&2 ||
    { echo "model-carry: $received/$name does not match its sha256" >&2; exit 1; }
  echo "$PWD/$received/$name"
  ;;
"")
  model=$(bash scripts/model-env.sh)
  rm -rf "$carry"
  mkdir -p "$carry"
  bytes=$(stat -c %s "$model")
  half=$(((bytes + 1) / 2))
  split -b "$half" -d -a 1 "$model" "$carry/part-"
  echo "$(sha256sum "$model" | cut -d' ' -f1) $(basename "$model") 2" >"$carry/model.sha256"
  # The checksum travels with both parts.
  ls -l "$carry" >&2
  ;;
*)
  echo "usage: scripts/model-carry.sh [--receive | --assemble]" >&2
  exit 2
  ;;
esac
