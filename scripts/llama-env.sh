#!/usr/bin/env bash
# A Python virtual environment holding llama.cpp (PyPI llama-cpp-python
# 0.3.36), the reference the engine's greedy tokens and speed are checked
# against (scripts/llama-reference.py, bench/peer/run.sh). Kept under build/
# and out of the test command: installing it compiles llama.cpp (about nine
# minutes on two cores). Also installs jinja2 (the model's chat template),
# numpy and gguf. Prints the venv's python on stdout; progress goes to stderr.
#
#   scripts/llama-env.sh [VENV]        default VENV: build/venv-llama
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-build/venv-llama}
version=0.3.36
if [ ! -x "$venv/bin/python" ]; then
  echo "llama-env: creating $venv" >&2
  python3 -m venv "$venv" >&2
fi
found="import importlib.metadata as m, importlib.util as u
ok = all(u.find_spec(n) for n in ('llama_cpp', 'jinja2', 'numpy', 'gguf'))
raise SystemExit(not (ok and m.version('llama-cpp-python') == '$version'))"
if ! "$venv/bin/python" -c "$found" 2>/dev/null; then
  echo "llama-env: installing llama-cpp-python==$version into $venv" \
    "(compiles llama.cpp: about nine minutes)" >&2
  # A portable build with AVX2/FMA/F16C only. The native build (-march=native)
  # enables AVX-512 and AMX on these CPUs and crashes at the first evaluation,
  # so those are switched off by name.
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF" \
    "$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off \
    --verbose "llama-cpp-python==$version" jinja2 numpy gguf >&2
fi
echo "$(cd "$venv/bin" && pwd)/python"
