#!/usr/bin/env bash
# A file too large for one call of the GPU machine (64 MiB carried per call,
# the working tree's few MiB included), in parts of 52 MiB under .carry/NAME/ (ignored by git) with its sha256. The
# machine keeps ignored files between calls while it stays warm (30 s), so
# carry one part per call, in quick succession:
#
#   bash scripts/file-carry.sh FILE             here: .carry/NAME/part-0 ... and sha256
#   run, carry [".carry/NAME/part-K", ".carry/NAME/sha256"]:
#       bash scripts/file-carry.sh --receive NAME   there, once per part
#   there: path=$(bash scripts/file-carry.sh --assemble NAME)
#
# --receive copies whichever parts of NAME were carried into build-carry/NAME/;
# --assemble joins them when all are there, checks the sha256 and prints the
# file's path (exit 1 naming what is missing otherwise). scripts/model-carry.sh
# carries the default model with it.
set -euo pipefail
cd "$(dirname "$0")/.."
part_bytes=$((52 << 20))
usage() { echo "usage: scripts/file-carry.sh FILE | --receive NAME | --assemble NAME" >&2; exit 2; }
case "${1:-}" in
--receive)
  [ -n "${2:-}" ] || usage
  mkdir -p "build-carry/$2"
  cp .carry/"$2"/part-* .carry/"$2"/sha256 "build-carry/$2"/ 2>/dev/null || true
  ls -l "build-carry/$2" >&2
  ;;
--assemble)
  [ -n "${2:-}" ] || usage
  dir=build-carry/$2
  [ -f "$dir/sha256" ] || { echo "file-carry: $dir/sha256 is missing" >&2; exit 1; }
  read -r sum parts <"$dir/sha256"
  for ((i = 0; i < parts; i++)); do
    [ -f "$dir/part-$i" ] || { echo "file-carry: part $i of $parts of $2 was not carried" >&2; exit 1; }
  done
  if [ ! -f "$dir/$2" ]; then
    for ((i = 0; i < parts; i++)); do cat "$dir/part-$i"; done >"$dir/$2.tmp"
    mv "$dir/$2.tmp" "$dir/$2"
  fi
  echo "$sum  $dir/$2" | sha256sum -c --quiet >&2 ||
    { echo "file-carry: $dir/$2 does not match its sha256" >&2; exit 1; }
  echo "$PWD/$dir/$2"
  ;;
""|-*) usage ;;
*)
  [ -f "$1" ] || { echo "file-carry: no file $1" >&2; exit 2; }
  name=$(basename "$1")
  rm -rf ".carry/$name"
  mkdir -p ".carry/$name"
  split -b "$part_bytes" -d -a 1 "$1" ".carry/$name/part-"
  parts=$(find ".carry/$name" -name 'part-*' | wc -l)
  echo "$(sha256sum "$1" | cut -d' ' -f1) $parts" >".carry/$name/sha256"
  ls -l ".carry/$name" >&2
  ;;
esac
