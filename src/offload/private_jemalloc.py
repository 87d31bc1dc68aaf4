#!/usr/bin/env python3
"""Makes ortmem's private copy of jemalloc (docs/memory/OFFLOAD.md, Pinned staging).

Debian's libjemalloc exports malloc, free, mallocx ... unprefixed, so linking
it would replace the malloc of every process that links ortmem. This copies
the position-independent archive, drops its C++ operators and renames every
unprefixed entry point NAME to om_jemalloc_NAME, so ortmem reaches its own
arena and the process keeps its own malloc.

Usage: private_jemalloc.py IN.a OUTDIR      writes OUTDIR/ortmem_je_MEMBER
       private_jemalloc.py --members IN.a   prints the objects it will write
(needs ar, objcopy and nm)
"""
import os
import shutil
import subprocess
import sys
import tempfile

PREFIX = "om_jemalloc_"
CXX_OBJECT = "jemalloc_cpp.pic.o"


def defined_globals(archive):
    out = subprocess.run(["nm", "-g", "--defined-only", archive], check=True,
                         capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBRVWi":
            names.add(parts[2])
    return names


def members(archive):
    return [m for m in subprocess.run(["ar", "t", archive], check=True, capture_output=True,
                                      text=True).stdout.split() if m != CXX_OBJECT]


def main():
    if sys.argv[1] == "--members":
        print("\n".join("ortmem_je_" + m for m in members(sys.argv[2])))
        return
    src, outdir = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        work = os.path.join(tmp, "jemalloc.a")
        shutil.copyfile(src, work)
        if CXX_OBJECT in subprocess.run(["ar", "t", work], check=True, capture_output=True,
                                        text=True).stdout.split():
            subprocess.run(["ar", "d", work, CXX_OBJECT], check=True)
        # Internal symbols carry jemalloc's own je_/_rjem_ prefix already.
        public = sorted(n for n in defined_globals(work)
                        if not n.startswith(("je_", "_rjem_", "DW.", ".")))
        mapping = os.path.join(tmp, "rename.txt")
        with open(mapping, "w") as f:
            for name in public:
                f.write(f"{name} {PREFIX}{name}\n")
        subprocess.run(["objcopy", f"--redefine-syms={mapping}", work], check=True)
        left = [n for n in defined_globals(work)
                if n in ("malloc", "free", "calloc", "realloc", "mallocx", "posix_memalign")]
        if left:
            sys.exit(f"private_jemalloc.py: still unprefixed after renaming: {left}")
        extract = os.path.join(tmp, "objects")
        os.mkdir(extract)
        subprocess.run(["ar", "x", os.path.abspath(work)], check=True, cwd=extract)
        for m in members(work):
            shutil.copyfile(os.path.join(extract, m), os.path.join(outdir, "ortmem_je_" + m))


if __name__ == "__main__":
    main()
