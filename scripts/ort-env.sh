#!/usr/bin/env bash
# What the ONNX Runtime adapter (adapters/onnxruntime, docs/adapters/ONNXRUNTIME.md)
# builds and tests against, kept under build/ so that the library's own build
# never needs it:
#   build/venv-ort     onnxruntime 1.30 from PyPI (its wheel carries
#                      libonnxruntime.so in onnxruntime/capi/) and onnx, which
#                      the test model's script uses;
#   build/ort-include  onnxruntime_c_api.h. Neither the wheel nor Debian 12
#                      ship the C headers; Debian 13's libonnxruntime-dev does
#                      (ONNX Runtime 1.21, ORT_API_VERSION 21). apt fetches it
#                      with a list of its own under build/ort-apt, so the
#                      machine's sources stay as they are. ORT's C API is
#                      versioned and only grows: a 1.30 library serves the
#                      version-21 table this header declares.
# Idempotent: a second run checks and prints in well under a second.
# Prints, one per line: the venv's python, the library, the include folder.
#
#   scripts/ort-env.sh [--headers-only]
#
# Then meson (re)configured finds build/ort-include and builds the adapter.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=build/venv-ort
include=build/ort-include
apt_dir=build/ort-apt
headers_only=0
[ "${1:-}" = --headers-only ] && headers_only=1
mkdir -p build

if [ ! -f "$include/onnxruntime_c_api.h" ]; then
  echo "ort-env: fetching libonnxruntime-dev (Debian 13) for its C headers" >&2
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/deb"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
    >"$apt_dir/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$root/$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$root/$apt_dir/lists" -o "Dir::Cache=$root/$apt_dir/cache"
            -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  apt-get "${apt_opts[@]}" -qq update >&2
  (cd "$apt_dir/deb" && apt-get "${apt_opts[@]}" -qq download libonnxruntime-dev >&2)
  rm -rf "$apt_dir/x"
  dpkg-deb -x "$apt_dir"/deb/libonnxruntime-dev_*.deb "$apt_dir/x"
  mkdir -p "$include"
  cp "$apt_dir"/x/usr/include/onnxruntime/onnxruntime_c_api.h "$include/"
  # The package's copyright file travels with the header (MIT).
  cp "$apt_dir"/x/usr/share/doc/libonnxruntime-dev/copyright "$include/COPYRIGHT" 2>/dev/null || true
  rm -rf "$apt_dir/x" "$apt_dir/lists" "$apt_dir/cache"
fi

if [ "$headers_only" = 0 ]; then
  if [ ! -x "$venv/bin/python" ]; then
    echo "ort-env: creating $venv" >&2
    python3 -m venv "$venv" >&2
  fi
  found='import importlib.util as u, importlib.metadata as m; raise SystemExit(not (u.find_spec("onnx") and m.version("onnxruntime").startswith("1.30.")))'
  if ! "$venv/bin/python" -c "$found" 2>/dev/null; then
    echo "ort-env: installing onnxruntime==1.30.* and onnx into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'onnxruntime==1.30.*' onnx >&2
  fi
  "$venv/bin/python" - "$venv" <<'PY'
import glob, os, sys
venv = sys.argv[1]
libs = sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "onnxruntime",
                                     "capi", "libonnxruntime.so*")))
if not libs:
    raise SystemExit("ort-env: no libonnxruntime.so in %s's onnxruntime package" % venv)
print(os.path.abspath(os.path.join(venv, "bin", "python")))
print(os.path.abspath(libs[0]))
PY
fi
echo "$root/$include"
