#!/usr/bin/env bash
# Figures of the host-allocation failure sweep (tests/test_alloc_faults.c) for
# docs/memory/MEASUREMENTS.md: allocation sites reached by the sweep, failures
# injected and survived, and how many ORTMEM_E_NOMEM sites in src/ run in the
# whole unit suite, with and without the sweep. Needs lcov.
#   scripts/alloc-sweep-coverage.sh [build-dir]   (default build-cov)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-cov}
[ -d "$dir" ] || meson setup "$dir" -Db_coverage=true -Dbench=false >/dev/null
ninja -C "$dir" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Allocation call sites and NOMEM sites: file:line in src/ (the allocator itself
# and the status-name table left out; comments are not sites).
grep -rnE 'om_(malloc|calloc|realloc)\(' src --include='*.c' | grep -v '^src/core/alloc.c' |
    cut -d: -f1,2 | sort -u >"$tmp/alloc_sites"
# A NOMEM site makes the status: comparisons with it and comments are not sites.
grep -rn 'ORTMEM_E_NOMEM' src --include='*.c' | grep -v '^src/core/error.c' |
    grep -vE '^[^:]+:[0-9]+:\s*(/?\*|//)' | grep -vE '[=!]= ORTMEM_E_NOMEM' |
    cut -d: -f1,2 | sort -u >"$tmp/nomem_sites"

# Runs the given suites from zeroed counters, writes the hit lines to $2.
capture() {
    lcov --zerocounters --directory "$dir" >/dev/null 2>&1
    shift_out=$1
    shift
    for suite in "$@"; do
        meson test -C "$dir" --no-rebuild "$suite" >/dev/null || {
            echo "suite $suite failed" >&2
            exit 1
        }
    done
    lcov --capture --directory "$dir" --output-file "$tmp/cov.info" >/dev/null 2>&1
    # file:line with a nonzero count, paths relative to the source root.
    awk -v root="$PWD/" '/^SF:/ { f = substr($0, 4); sub(root, "", f) }
        /^DA:/ { split(substr($0, 4), a, ","); if (a[2] > 0) print f ":" a[1] }' \
        "$tmp/cov.info" | sort -u >"$shift_out"
}
hits() { comm -12 "$1" "$2" | wc -l; }

unit=$(meson test -C "$dir" --list 2>/dev/null | grep ':unit' | awk '{ print $NF }' | grep -v '^doclint$')
without=$(echo "$unit" | grep -v '^alloc_faults$')

capture "$tmp/sweep" alloc_faults
capture "$tmp/without" $without
capture "$tmp/with" $unit

echo "commit:                 $(git rev-parse --short HEAD)"
echo "allocation sites:       $(wc -l <"$tmp/alloc_sites") in src/ (om_malloc/om_calloc/om_realloc calls)"
echo "  reached by the sweep: $(hits "$tmp/alloc_sites" "$tmp/sweep")"
echo "NOMEM sites:            $(wc -l <"$tmp/nomem_sites") lines naming ORTMEM_E_NOMEM in src/"
echo "  run by the sweep:     $(hits "$tmp/nomem_sites" "$tmp/sweep")"
echo "  unit suite without:   $(hits "$tmp/nomem_sites" "$tmp/without")"
echo "  unit suite with:      $(hits "$tmp/nomem_sites" "$tmp/with")"
echo "allocation sites the sweep does not reach:"
comm -23 "$tmp/alloc_sites" "$tmp/sweep" | sed 's/^/  /'
echo "NOMEM sites the unit suite does not run:"
comm -23 "$tmp/nomem_sites" "$tmp/with" | sed 's/^/  /'
# The sweep's own count lines (one per workload) from its run above.
"$dir"/tests/test_alloc_faults 2>&1 | awk '/^alloc_faults: workload/ {
        n++; alloc += $4; runs += $8; inj += $10; calls += $13; out += $18 }
    END { printf "workloads:              %d, %d allocations counted unarmed\n", n, alloc
          printf "runs:                   %d (each allocation failed once and from there on)\n", runs
          printf "failures injected:      %d, survived: %d (%d failed calls checked)\n", inj, inj, calls
          printf "runs left out:          %d (known rollback bugs; see the skipped test)\n", out }'
