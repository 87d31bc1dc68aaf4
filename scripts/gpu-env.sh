# shellcheck shell=bash
# The GPU machine's environment, shared by scripts/gpu-suite.sh and
# scripts/gpu-bench.sh (sourced, never run). That machine has nvcc, meson,
# ninja and python3 but no package registry; the libraries it lacks are
# carried in .deps/root, prepared where apt works by scripts/gpu-deps.sh.
#
#   gpu_env_tools TOOLDIR         nvcc's directory on PATH; meson and ninja
#                                 through their python modules where the
#                                 commands are missing (shims in TOOLDIR/bin)
#   gpu_env_report                the machine facts, one per line
#   gpu_env_check_tools NAME      meson, ninja and a C compiler are there, or
#                                 says which is not (as NAME) and returns 1
#   gpu_env_deps REPO TOOLDIR WHAT
#                                 points pkg-config (PKG_CONFIG_PATH), the
#                                 compiler (C_INCLUDE_PATH, CPLUS_INCLUDE_PATH),
#                                 the linker (LIBRARY_PATH) and the loader
#                                 (LD_LIBRARY_PATH) at REPO/.deps/root, linking
#                                 into TOOLDIR/lib only the carried libraries
#                                 the machine lacks; WHAT names what must be
#                                 installed when there is no .deps/root
#
# For a check on a machine without a GPU: ORTMEM_DEPS_SHIM=all links every
# carried library instead of the missing ones, ORTMEM_DEPS_PKGCONF=1 uses the
# carried pkgconf even where pkg-config exists.

gpu_env_tools() {
  local tooldir=$1 d
  for d in /usr/local/cuda/bin /opt/cuda/bin; do
    [ -x "$d/nvcc" ] && case ":$PATH:" in *":$d:"*) ;; *) PATH=$PATH:$d ;; esac
  done
  mkdir -p "$tooldir/bin"
  if ! command -v meson >/dev/null && python3 -c 'import mesonbuild' 2>/dev/null; then
    printf '#!/bin/sh\nexec python3 -m mesonbuild.mesonmain "$@"\n' >"$tooldir/bin/meson"
  fi
  if ! command -v ninja >/dev/null && python3 -c 'import ninja' 2>/dev/null; then
    printf '#!/bin/sh\nexec python3 -m ninja "$@"\n' >"$tooldir/bin/ninja"
  fi
  chmod +x "$tooldir"/bin/* 2>/dev/null
  export PATH=$PATH:$tooldir/bin
}

gpu_env_report() {
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown) (working tree as sent)"
  echo "kernel: $(uname -srm)"
  echo "glibc: $(ldd --version 2>/dev/null | head -1)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi unavailable')"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -2 | head -1 || echo missing)"
  echo "cc: $( (cc --version || gcc --version) 2>/dev/null | head -1)"
  echo "meson: $(meson --version 2>/dev/null || echo missing); ninja: $(ninja --version 2>/dev/null || echo missing)"
  echo "cpus: $(nproc)"
}

gpu_env_check_tools() {
  local name=$1 tool
  for tool in meson ninja; do
    command -v $tool >/dev/null || { echo "$name: $tool not found"; return 1; }
  done
  command -v cc >/dev/null || command -v gcc >/dev/null || { echo "$name: no C compiler"; return 1; }
}

gpu_env_deps() {
  local repo=$1 tooldir=$2 what=$3
  local deps=$repo/.deps/root
  if [ ! -d "$deps" ]; then
    echo "no .deps/root: $what must be installed on this machine"
    echo "(prepare it where apt works with: bash scripts/gpu-deps.sh, then carry .deps/root)"
    return 0
  fi
  local shim=$tooldir/lib dir f name
  rm -rf "$shim"
  mkdir -p "$shim"
  if command -v ldconfig >/dev/null; then
    ldconfig -p 2>/dev/null | awk 'NR > 1 { print $1 }' | sort -u >"$tooldir/system-libs"
  else
    : >"$tooldir/system-libs"
  fi
  local linked=()
  for dir in "$deps/usr/lib/x86_64-linux-gnu" "$deps/lib/x86_64-linux-gnu"; do
    for f in "$dir"/lib*.so.*; do
      [ -f "$f" ] && [ ! -L "$f" ] || continue
      # The loader looks a library up by its SONAME.
      name=$(objdump -p "$f" 2>/dev/null | awk '$1 == "SONAME" { print $2 }')
      [ -n "$name" ] && [ ! -e "$shim/$name" ] || continue
      if [ "${ORTMEM_DEPS_SHIM:-}" = all ] || ! grep -qxF "$name" "$tooldir/system-libs"; then
        ln -s "$f" "$shim/$name"
        linked+=("$name")
      fi
    done
  done
  echo "loader: ${#linked[@]} carried libraries the system lacks are linked into $shim: ${linked[*]}"
  export PKG_CONFIG_PATH=$deps/usr/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  # Not CPATH: gcc takes CPATH as -I (so -Werror reaches warnings inside
  # Criterion's macros) and pkgconf then drops the .pc's -isystem for it.
  # C_INCLUDE_PATH and CPLUS_INCLUDE_PATH are system directories, as
  # /usr/include is where Criterion is installed normally.
  export C_INCLUDE_PATH=$deps/usr/include${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}
  export CPLUS_INCLUDE_PATH=$deps/usr/include${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}
  export LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:$shim${LIBRARY_PATH:+:$LIBRARY_PATH}
  export LD_LIBRARY_PATH=$shim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if [ "${ORTMEM_DEPS_PKGCONF:-}" = 1 ] || ! pkg-config --version >/dev/null 2>&1; then
    export PKG_CONFIG=$deps/usr/bin/pkgconf
    echo "pkg-config: the carried pkgconf ($PKG_CONFIG)"
  fi
  echo "PKG_CONFIG_PATH=$PKG_CONFIG_PATH"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  head -40 "$deps/MANIFEST" 2>/dev/null | tr '\n' ';' | sed 's/;/; /g'
  echo
}
