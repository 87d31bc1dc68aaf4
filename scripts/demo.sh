#!/usr/bin/env bash
# The main job: replays the bundled serving trace on the CPU backend and prints
# the memory report. Extra arguments go to ortmem-replay (e.g. --json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec build/tools/replay/ortmem-replay tools/traces/serving.trace "$@"
