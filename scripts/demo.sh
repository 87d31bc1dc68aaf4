#!/usr/bin/env bash
# The main job: replays the bundled serving trace on the CPU backend, prints
# the memory report with the ledger by holder and role (the authority's table,
# ortmem-stat style) and draws memory over time to build/serving-memory.svg.
# Extra arguments go to ortmem-replay (e.g. --json, or --budget 128MiB to
# replay under a limit on owned bytes: refusals, pressure, budget_held).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec build/tools/replay/ortmem-replay tools/traces/serving.trace --plot build/serving-memory.svg "$@"
