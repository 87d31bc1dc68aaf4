#!/usr/bin/env bash
# Runs one libFuzzer target of fuzz/ (docs/memory/FUZZING.md).
#   scripts/fuzz.sh TARGET SECONDS   fuzz TARGET for SECONDS over a copy of
#                                    fuzz/corpus/TARGET (build-fuzz/corpus/TARGET)
#   scripts/fuzz.sh --smoke [SECONDS] every target SECONDS (default 10) each, then
#                                    5 s of the soak (both workloads), for CI
#   scripts/fuzz.sh --list           the targets
# Configures build-fuzz (clang, ASan + UBSan over the whole project, coverage
# for libFuzzer) when it is missing, and builds the targets first. Ends with
# the executions per second and the corpus size; exits non-zero on a crash,
# leaving the input as build-fuzz/crash-TARGET-*.
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(gguf tokenizer trace geom_config api_ops)
build=build-fuzz

usage() {
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

configure() {
  if [ ! -f "$build/build.ninja" ]; then
    CC=clang CXX=clang++ meson setup "$build" -Dfuzz=true -Db_lundef=false -Dtests=false \
      -Dbench=false -Db_sanitize=address,undefined -Dc_args=-fsanitize=fuzzer-no-link \
      --buildtype=debugoptimized >/dev/null
  fi
  ninja -C "$build" "${targets[@]/#/fuzz/fuzz_}" fuzz/ortmem-soak >/dev/null
}

# The soak, short (about 15 s with the model's load and the references under
# ASan): both workloads, 4 threads each, the kvdemo requests and the engine
# decoding against its fault-free reference, 1 in 100 backend calls failing.
# The engine part is one line when the model file is missing.
soak_smoke() {
  local log=$build/soak-smoke.log status=0
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$build"/fuzz/ortmem-soak --workload both --seconds 5 --threads 4 --one-in 100 \
      --engine-steps 8 >"$log" 2>&1 || status=$?
  sed -n 's/^\(engine\|kvdemo\): /soak (\1) /p; s/^  \(operations\|survived faults\|bytes leaked\|corruptions\|budget violations\) */  \1: /p' "$log"
  if [ "$status" != 0 ]; then
    echo "fuzz.sh: the soak failed (exit $status); $log:" >&2
    tail -40 "$log" >&2
    return 1
  fi
}

# run TARGET SECONDS: fuzz, then print the summary line.
run() {
  local name=$1 seconds=$2
  local corpus=$build/corpus/$name log=$build/fuzz-$name.log
  mkdir -p "$corpus"
  cp -n fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true
  local status=0
  # handle_segv stays on: a wild read in a parser is what we look for.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$build"/fuzz/fuzz_"$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$build/crash-$name-" -print_final_stats=1 "$corpus" >"$log" 2>&1 ||
    status=$?
  local execs rate files
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  files=$(find "$corpus" -type f | wc -l)
  printf '%-12s %4ss  %10s execs  %7s execs/s  corpus %5s files, %s\n' "$name" "$seconds" \
    "${execs:-?}" "${rate:-?}" "$files" "$(du -sh "$corpus" | cut -f1)"
  if [ "$status" != 0 ]; then
    echo "fuzz.sh: $name failed (exit $status); last lines of $log:" >&2
    tail -40 "$log" >&2
    return 1
  fi
}

case "${1:-}" in
  --list) printf '%s\n' "${targets[@]}" ;;
  --smoke)
    configure
    failed=0
    for t in "${targets[@]}"; do run "$t" "${2:-10}" || failed=1; done
    soak_smoke || failed=1
    exit "$failed"
    ;;
  "" | -*) usage ;;
  *)
    [ $# = 2 ] || usage
    [[ " ${targets[*]} " == *" $1 "* ]] || { echo "fuzz.sh: no target $1 (--list)" >&2; exit 2; }
    configure
    run "$1" "$2"
    ;;
esac
