#!/usr/bin/env bash
# bench/compare.sh [options] BASE HEAD
#
# Builds ortmem-bench at two git revisions (each in a temporary git worktree,
# release build), runs them interleaved on this machine in this job (base,
# head, base, head, ...: --rounds rounds, --repetitions repetitions per run,
# JSON out) and prints a markdown table: scenario, base, head, change, the
# A/A threshold, the U-test p-value and a flag (bench/benchcmp.py; statistics
# by Google Benchmark's compare.py from Debian's libbenchmark-tools).
# BASE or HEAD may be WORKTREE: the working tree as it is, uncommitted changes
# included. Documented in bench/README.md ("Comparing two revisions").
#
# Options:
#   --filter REGEX        only these benchmarks (--benchmark_filter)
#   --rounds N            interleaved rounds (default 4; at least 2 for the A/A)
#   --repetitions N       repetitions per run (default 3)
#   --min-time SECONDS    --benchmark_min_time per repetition (default: the harness's)
#   --alpha A             U-test significance level (default 0.05)
#   --noise-factor K      time threshold = K x |A/A change| (default 2)
#   --counters-only       quick: 2 rounds of 1 repetition, min time 0.01; only the
#                         counter comparison is meaningful (times informational)
#   --fail-on-counters    exit 3 when a deterministic counter changed
#   --out DIR             keep the runs' JSON, the merged JSON, compare.py's output
#                         and the table (report.md) there (default build-compare/)
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-2}"; }

root=$(cd "$(dirname "$0")/.." && pwd)
filter=""; rounds=4; repetitions=3; min_time=""; alpha=0.05; noise_factor=2
fail_on_counters=""; informational=""; out="$root/build-compare"; revs=()
while (($#)); do
  case "$1" in
    --filter) filter=$2; shift 2 ;;
    --filter=*) filter=${1#*=}; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    --repetitions) repetitions=$2; shift 2 ;;
    --min-time) min_time=$2; shift 2 ;;
    --alpha) alpha=$2; shift 2 ;;
    --noise-factor) noise_factor=$2; shift 2 ;;
    --counters-only) rounds=2; repetitions=1; min_time=0.01; informational=--times-informational; shift ;;
    --fail-on-counters) fail_on_counters=--fail-on-counters; shift ;;
    --out) out=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "compare.sh: unknown option $1" >&2; usage ;;
    *) revs+=("$1"); shift ;;
  esac
done
((${#revs[@]} == 2)) || usage
((rounds >= 1 && repetitions >= 1)) || { echo "compare.sh: --rounds and --repetitions must be >= 1" >&2; exit 2; }
[ -f /usr/share/benchmark/compare.py ] || {
  echo "compare.sh: /usr/share/benchmark/compare.py missing: install libbenchmark-tools and python3-scipy (bash scripts/setup.sh)" >&2
  exit 1; }

cd "$root"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ortmem-compare.XXXXXX")
worktrees=()
cleanup() {
  for w in "${worktrees[@]}"; do git -C "$root" worktree remove --force "$w" 2>/dev/null || true; done
  git -C "$root" worktree prune 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# checkout <rev> <side>: sets src to the source folder of a revision (a
# temporary worktree, removed on exit; the working tree itself for WORKTREE)
checkout() {
  if [ "$1" = WORKTREE ]; then src=$root; return; fi
  git worktree add --detach --quiet "$tmp/src-$2" "$1" >&2
  worktrees+=("$tmp/src-$2")
  src=$tmp/src-$2
}

# build <source> <build dir>
build() {
  local opts=(--buildtype=release)
  grep -q "option('tests'" "$1/meson_options.txt" 2>/dev/null && opts+=(-Dtests=false)
  grep -q "option('cuda'" "$1/meson_options.txt" 2>/dev/null && opts+=(-Dcuda=disabled)
  meson setup "$2" "$1" "${opts[@]}" >"$2.setup.log" 2>&1 || { cat "$2.setup.log" >&2; exit 1; }
  ninja -C "$2" bench/ortmem-bench >"$2.build.log" 2>&1 || { tail -40 "$2.build.log" >&2; exit 1; }
}

# Revisions are resolved once, so a commit landing meanwhile changes nothing.
declare -A sha label exe
sides=(base head)
for i in 0 1; do
  side=${sides[$i]}; rev=${revs[$i]}
  if [ "$rev" = WORKTREE ]; then
    sha[$side]=WORKTREE; label[$side]="the working tree"
  else
    sha[$side]=$(git rev-parse --verify --quiet "$rev^{commit}") ||
      { echo "compare.sh: no such revision: $rev" >&2; exit 2; }
    label[$side]="$rev (${sha[$side]:0:7})"
  fi
done
echo "compare: building ${label[base]} and ${label[head]} (release) in $tmp" >&2
t0=$SECONDS
checkout "${sha[base]}" base
build "$src" "$tmp/build-base"
exe[base]=$tmp/build-base/bench/ortmem-bench
if [ "${sha[head]}" = "${sha[base]}" ] && [ "${sha[head]}" != WORKTREE ]; then
  exe[head]=${exe[base]}   # the same commit: an A/A comparison
else
  checkout "${sha[head]}" head
  build "$src" "$tmp/build-head"
  exe[head]=$tmp/build-head/bench/ortmem-bench
fi
echo "compare: built in $((SECONDS - t0)) s" >&2

rm -rf "$out"; mkdir -p "$out/runs"
bench_args=(--benchmark_repetitions="$repetitions" --benchmark_enable_random_interleaving=true
            --benchmark_out_format=json)
[ -n "$filter" ] && bench_args+=(--benchmark_filter="$filter")
[ -n "$min_time" ] && bench_args+=(--benchmark_min_time="$min_time")
base_runs=(); head_runs=()
t0=$SECONDS
# One short run of each binary first, discarded: the job's first process pays
# for cold caches, and that would land on the base side only.
for side in base head; do
  "${exe[$side]}" --benchmark_repetitions=1 --benchmark_min_time=0.01 \
    ${filter:+--benchmark_filter="$filter"} >"$out/runs/warmup-$side.log" 2>&1 || true
done
for ((r = 1; r <= rounds; r++)); do
  for side in base head; do
    json="$out/runs/$side-$r.json"
    echo "compare: round $r/$rounds: $side" >&2
    "${exe[$side]}" "${bench_args[@]}" --benchmark_out="$json" >"$out/runs/$side-$r.log" 2>&1 ||
      { tail -20 "$out/runs/$side-$r.log" >&2; exit 1; }
    if [ "$side" = base ]; then base_runs+=("$json"); else head_runs+=("$json"); fi
  done
done
echo "compare: ran in $((SECONDS - t0)) s" >&2

status=0
python3 "$root/bench/benchcmp.py" --base "${base_runs[@]}" --head "${head_runs[@]}" \
  --base-label "${label[base]}" --head-label "${label[head]}" --alpha "$alpha" \
  --noise-factor "$noise_factor" --work "$out" $fail_on_counters $informational >"$out/report.md" || status=$?
cat "$out/report.md"
exit "$status"
