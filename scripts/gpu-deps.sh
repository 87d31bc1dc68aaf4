#!/usr/bin/env bash
# Prepares .deps/root on THIS machine (Debian, with apt) for the GPU machine,
# which has no package registry: Debian's Criterion (libcriterion3 and
# libcriterion-dev) with every runtime library it needs, jansson (tools/geom
# links it), Google Benchmark (libbenchmark1debian and libbenchmark-dev, for
# ortmem-gpu-bench), jemalloc (pinned staging's private copy), PCRE2 (the
# engine's tokenizer) and pkgconf, downloaded with apt-get download into
# .deps/debs and unpacked with dpkg -x into .deps/root. scripts/gpu-suite.sh
# and scripts/gpu-bench.sh point pkg-config, the compiler, the linker and the
# loader at it there (scripts/gpu-env.sh).
#
#   bash scripts/gpu-deps.sh          # then carry ".deps/root" with the device tool
#
# Only the libraries' runtime closure is carried, not libcriterion-dev's own
# -dev dependencies (boxfort, libffi-dev, libgit2-dev, nanomsg-dev): those are
# for static linking, so criterion.pc's Requires.private and Libs.private are
# dropped and its prefix is made relative (${pcfiledir}). glibc, libgcc and
# libstdc++ are left out: the GPU machine has its own (the MANIFEST records the
# newest GLIBC_ and GLIBCXX_ versions the carried libraries ask for; Google
# Benchmark's CMake files are left out too). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

deps=.deps
root=$deps/root
debs=$deps/debs
arch=$(dpkg --print-architecture)
[ "$arch" = amd64 ] || { echo "gpu-deps: this machine is $arch; the GPU machine is amd64" >&2; exit 1; }

# The runtime closure of what the GPU build links or runs, plus the -dev
# packages themselves (headers, .pc files, the unversioned .so links).
runtime=(libcriterion3 libjansson4 libbenchmark1debian pkgconf-bin libpkgconf3 libjemalloc2 libpcre2-8-0)
dev=(libcriterion-dev libjansson-dev libbenchmark-dev libjemalloc-dev libpcre2-dev)
base='^(libc6|libgcc-s1|gcc-[0-9]+-base|libstdc\+\+6|libcrypt1|debconf)$'
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
            --no-breaks --no-replaces --no-enhances "${runtime[@]}" 2>/dev/null |
          grep -v '^ ' | grep -v '<' | sort -u | grep -Ev "$base" || true)
[ -n "$closure" ] || { echo "gpu-deps: apt-cache knows none of ${runtime[*]}" >&2; exit 1; }
packages=($closure "${dev[@]}")

mkdir -p "$debs"
missing=()
for p in "${packages[@]}"; do
  compgen -G "$debs/${p}_*_*.deb" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "gpu-deps: downloading ${missing[*]}"
  if ! (cd "$debs" && apt-get download -q "${missing[@]}" >/dev/null); then
    echo "gpu-deps: apt-get download failed; refreshing the package lists once" >&2
    apt-get update -qq
    (cd "$debs" && apt-get download -q "${missing[@]}" >/dev/null)
  fi
fi

rm -rf "$root"
mkdir -p "$root"
: >"$root/MANIFEST"
for p in "${packages[@]}"; do
  deb=$(ls "$debs/${p}"_*_*.deb | sort -V | tail -1)
  dpkg -x "$deb" "$root"
  echo "$(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)" >>"$root/MANIFEST"
done
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/lintian" \
  "$root/usr/share/bug" "$root/usr/share/aclocal" "$root/usr/share/locale" \
  "$root"/usr/lib/*/cmake

# pkg-config files: a prefix relative to the file, nothing for static links,
# and the headers as system headers (as they are in /usr/include here, so
# -Werror does not reach warnings inside Criterion's macros).
for pc in "$root"/usr/lib/*/pkgconfig/*.pc; do
  [ -e "$pc" ] || continue
  sed -i -e 's|^prefix=/usr$|prefix=${pcfiledir}/../../..|' \
    -e 's|=/usr/|=${pcfiledir}/../../../|' \
    -e '/^Requires.private:/d' -e '/^Libs.private:/d' \
    -e 's|^Cflags: *-I|Cflags: -isystem |' "$pc"
done

for need in usr/include/criterion/criterion.h usr/include/jansson.h usr/bin/pkgconf \
            usr/include/benchmark/benchmark.h \
            usr/lib/x86_64-linux-gnu/pkgconfig/criterion.pc \
            usr/lib/x86_64-linux-gnu/pkgconfig/jansson.pc \
            usr/lib/x86_64-linux-gnu/pkgconfig/benchmark.pc; do
  [ -e "$root/$need" ] || { echo "gpu-deps: $need is missing from $root" >&2; exit 1; }
done

# The newest glibc and libstdc++ symbol versions the carried libraries ask for.
symbols=$(find "$root" -name '*.so*' -type f -print0 2>/dev/null |
          xargs -0 -r objdump -T 2>/dev/null || true)
glibc=$(grep -o 'GLIBC_[0-9.]*' <<<"$symbols" | sort -Vu | tail -1 || true)
glibcxx=$(grep -o 'GLIBCXX_[0-9.]*' <<<"$symbols" | sort -Vu | tail -1 || true)
echo "needs ${glibc:-GLIBC_?} or newer" >>"$root/MANIFEST"
echo "needs ${glibcxx:-GLIBCXX_?} or newer (libstdc++)" >>"$root/MANIFEST"

echo "gpu-deps: $root holds ${#packages[@]} packages, $(du -sh "$root" | cut -f1)," \
     "and needs ${glibc:-an unknown} glibc and ${glibcxx:-an unknown} libstdc++ or newer"
echo "gpu-deps: carry \".deps/root\" with the device tool; scripts/gpu-suite.sh and" \
     "scripts/gpu-bench.sh use it"
