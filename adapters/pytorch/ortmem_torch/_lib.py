"""Finding (or building) libortmem_torch.so and calling it through ctypes.

No torch here: this layer runs, and is tested, where torch is not installed
(adapters/pytorch/tests/test_ctypes.py). The declarations mirror
adapters/pytorch/ortmem_torch.h.
"""

import ctypes
import os
import pathlib
import subprocess
import threading

LIBRARY_NAME = "libortmem_torch.so"
ALLOC_SYMBOL = "ortmem_torch_alloc"
FREE_SYMBOL = "ortmem_torch_free"

# ortmem_status values (include/ortmem/core.h) the package names.
STATUS_NAMES = [
    "ORTMEM_OK", "ORTMEM_E_INVALID", "ORTMEM_E_OVERFLOW", "ORTMEM_E_RANGE", "ORTMEM_E_ALIGN",
    "ORTMEM_E_HANDLE", "ORTMEM_E_STATE", "ORTMEM_E_BUSY", "ORTMEM_E_NOT_FOUND",
    "ORTMEM_E_DOUBLE_FREE", "ORTMEM_E_NOMEM", "ORTMEM_E_BACKEND", "ORTMEM_E_UNSUPPORTED",
    "ORTMEM_E_UNAVAILABLE", "ORTMEM_E_QUARANTINED", "ORTMEM_E_IO", "ORTMEM_E_BUDGET",
    "ORTMEM_E_TIMEOUT", "ORTMEM_E_CANCELLED",
]
E_BUDGET = STATUS_NAMES.index("ORTMEM_E_BUDGET")
E_NOMEM = STATUS_NAMES.index("ORTMEM_E_NOMEM")

TAGS = ("weights", "kv", "workspace", "other")
BACKENDS = {"cuda": 0, "cpu": 1}
CACHE_DEFAULT = (1 << 64) - 1


class OrtmemTorchError(RuntimeError):
    """A control call failed; status is the ortmem_status name."""

    def __init__(self, status, message):
        self.status = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else str(status)
        super().__init__(message)


class Options(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("backend", ctypes.c_int),
        ("budget_bytes", ctypes.c_uint64),
        ("arena_bytes", ctypes.c_uint64),
        ("cache_bytes", ctypes.c_uint64),
        ("granule_bytes", ctypes.c_uint64),
        ("ordered_frees", ctypes.c_int),
    ]


STAT_FIELDS = [
    "allocated_bytes", "allocated_peak_bytes", "live_allocations", "reserved_bytes",
    "reserved_peak_bytes", "cached_bytes", "allocs", "frees", "failed_allocs", "pending_frees",
    "asleep", "backup_bytes", "owned_bytes", "limit_bytes", "available_bytes",
    "device_owned_bytes",
]


class Stats(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t)] + [(f, ctypes.c_uint64) for f in STAT_FIELDS]


def repo_root():
    # <root>/adapters/pytorch/ortmem_torch/_lib.py
    return pathlib.Path(__file__).resolve().parents[3]


def find_library():
    """ORTMEM_TORCH_LIB, else a build folder of this checkout (the CUDA
    build first, as scripts/gpu-suite.sh names it); None when none has it."""
    env = os.environ.get("ORTMEM_TORCH_LIB")
    if env:
        return env
    root = repo_root()
    for build in ("build-gpu", "build", "build-torch"):
        candidate = root / build / "adapters" / "pytorch" / LIBRARY_NAME
        if candidate.is_file():
            return str(candidate)
    return None


def build_library(build_dir=None, cuda="auto"):
    """Builds the library with meson and ninja in build_dir (default
    <root>/build-torch, -Dcuda=<cuda>) and returns its path."""
    root = repo_root()
    build = pathlib.Path(build_dir) if build_dir else root / "build-torch"
    if not (build / "build.ninja").is_file():
        subprocess.run(["meson", "setup", str(build), str(root), "--buildtype=release",
                        "-Dtests=false", "-Dbench=false", "-Dcuda=" + cuda], check=True)
    target = "adapters/pytorch/" + LIBRARY_NAME
    subprocess.run(["ninja", "-C", str(build), target], check=True)
    return str(build / target)


class Library:
    """The loaded library with its functions declared."""

    def __init__(self, path):
        self.path = path
        lib = ctypes.CDLL(path)
        self.lib = lib
        sig = {
            "ortmem_torch_alloc": (ctypes.c_void_p, [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]),
            "ortmem_torch_free": (None, [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                         ctypes.c_void_p]),
            "ortmem_torch_init": (ctypes.c_int, [ctypes.POINTER(Options)]),
            "ortmem_torch_shutdown": (ctypes.c_int, []),
            "ortmem_torch_set_tag": (ctypes.c_int, [ctypes.c_char_p]),
            "ortmem_torch_get_tag": (ctypes.c_char_p, []),
            "ortmem_torch_set_budget": (ctypes.c_int, [ctypes.c_int, ctypes.c_uint64]),
            "ortmem_torch_stats_get": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p,
                                                      ctypes.POINTER(Stats)]),
            "ortmem_torch_sleep": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]),
            "ortmem_torch_wake": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p]),
            "ortmem_torch_flush": (ctypes.c_int, [ctypes.c_int]),
            "ortmem_torch_last_error": (ctypes.c_char_p, []),
            "ortmem_torch_failures": (ctypes.c_uint64, []),
        }
        for name, (restype, argtypes) in sig.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes

    def last_error(self):
        return self.lib.ortmem_torch_last_error().decode("utf-8", "replace")

    def failures(self):
        return int(self.lib.ortmem_torch_failures())

    def check(self, status, what):
        if status != 0:
            raise OrtmemTorchError(status, "%s: %s" % (what, self.last_error()))

    def init(self, backend="cuda", budget=None, arena_bytes=0, cache_bytes=None, granule_bytes=0,
             ordered_frees=-1):
        if backend not in BACKENDS:
            raise ValueError("backend %r is none of %s" % (backend, ", ".join(BACKENDS)))
        o = Options(ctypes.sizeof(Options), BACKENDS[backend], int(budget or 0), int(arena_bytes),
                    CACHE_DEFAULT if cache_bytes is None else int(cache_bytes), int(granule_bytes),
                    int(ordered_frees))
        self.check(self.lib.ortmem_torch_init(ctypes.byref(o)), "ortmem_torch init")

    def set_tag(self, tag):
        self.check(self.lib.ortmem_torch_set_tag(tag.encode() if tag else None), "set tag")

    def get_tag(self):
        return self.lib.ortmem_torch_get_tag().decode()

    def stats(self, device=0, tag=None):
        s = Stats()
        s.struct_size = ctypes.sizeof(Stats)
        self.check(self.lib.ortmem_torch_stats_get(device, tag.encode() if tag else None,
                                                   ctypes.byref(s)), "stats")
        return {f: int(getattr(s, f)) for f in STAT_FIELDS}


_loaded = None
_load_lock = threading.Lock()


def load(path=None, build=True):
    """The process's Library (loaded once): path, else find_library(), else
    build_library() when build is true."""
    global _loaded
    with _load_lock:
        if _loaded is not None:
            if path and os.path.realpath(path) != os.path.realpath(_loaded.path):
                raise RuntimeError("ortmem_torch: %s is loaded already, not %s"
                                   % (_loaded.path, path))
            return _loaded
        path = path or find_library()
        if path is None:
            if not build:
                raise FileNotFoundError("ortmem_torch: %s not found: set ORTMEM_TORCH_LIB or "
                                        "build it (meson, adapters/pytorch)" % LIBRARY_NAME)
            path = build_library()
        _loaded = Library(path)
        return _loaded
