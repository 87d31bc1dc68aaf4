#!/usr/bin/env bash
# Sets everything up and runs the test suite (Criterion, through meson test).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
meson test -C build --suite unit --print-errorlogs "$@"
