#!/usr/bin/env bash
# The main job: replays the bundled serving trace on the CPU backend, prints
# the memory report and draws memory over time to build/serving-memory.svg.
# Extra arguments go to ortmem-replay (e.g. --json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec build/tools/replay/ortmem-replay tools/traces/serving.trace --plot build/serving-memory.svg "$@"
