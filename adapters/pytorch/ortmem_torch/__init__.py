"""ortmem as PyTorch's CUDA allocator (docs/adapters/PYTORCH.md).

Two ways in, one per program:

    import ortmem_torch
    ortmem_torch.install(budget=40 << 30)      # before the first CUDA tensor
    with ortmem_torch.tag("weights"):
        model = build_model().cuda()

or, keeping PyTorch's caching allocator for the rest of the program:

    with ortmem_torch.pool("kv"):
        cache = torch.empty(..., device="cuda")

then memory_stats(), set_budget(), sleep("weights") / wake("weights").
torch is imported when a function needs it, so the ctypes layer
(ortmem_torch._lib) also runs where torch is not installed.
"""

import contextlib
import threading

from ._lib import (ALLOC_SYMBOL, E_BUDGET, E_NOMEM, FREE_SYMBOL, TAGS, OrtmemTorchError,
                   build_library, find_library, load)

__all__ = [
    "install", "init", "pool", "tag", "checked", "memory_stats", "set_budget", "sleep", "wake",
    "flush", "last_error", "library_path", "OrtmemTorchError", "TAGS", "find_library",
    "build_library",
]

_state = threading.local()
_lock = threading.Lock()
_allocator = None  # the torch.cuda.memory.CUDAPluggableAllocator, one per process
_pools = {}  # (device, tag) -> torch.cuda.MemPool


def library_path():
    return load().path


def init(backend="cuda", budget=None, arena_bytes=0, cache_bytes=None, granule_bytes=0,
         ordered_frees=-1):
    """Fixes the library's options (ortmem_torch_init); install() and pool()
    call it. budget: bytes per device (None = no budget)."""
    load().init(backend, budget, arena_bytes, cache_bytes, granule_bytes, ordered_frees)


def _torch():
    import torch
    return torch


def _pluggable():
    global _allocator
    with _lock:
        if _allocator is None:
            torch = _torch()
            _allocator = torch.cuda.memory.CUDAPluggableAllocator(library_path(), ALLOC_SYMBOL,
                                                                  FREE_SYMBOL)
        return _allocator


def install(budget=None, **options):
    """Makes ortmem the allocator of every CUDA tensor of this process
    (torch.cuda.memory.change_current_allocator). Call it before the first
    CUDA allocation; PyTorch refuses to swap an allocator in use. An
    allocation that fails returns no memory to PyTorch, which does not check
    (see checked())."""
    init(budget=budget, **options)
    allocator = _pluggable()
    _torch().cuda.memory.change_current_allocator(allocator)
    return allocator


@contextlib.contextmanager
def tag(name):
    """Allocations of this thread inside the block go to the arena of tag
    name ("weights", "kv", "workspace", "other")."""
    lib = load()
    previous = lib.get_tag()
    lib.set_tag(name)
    try:
        yield
    finally:
        lib.set_tag(previous)


def _out_of_memory(message):
    return _torch().cuda.OutOfMemoryError(message)


@contextlib.contextmanager
def checked():
    """Raises torch.cuda.OutOfMemoryError with the ledger's message when an
    ortmem allocation failed inside the block. With install(), PyTorch takes
    a failed allocation's NULL without a check, so wrap the work whose
    allocations may be refused (generation, a batch) in it; pool() does this
    itself."""
    lib = load()
    before = lib.failures()
    try:
        yield
    except BaseException as error:
        if lib.failures() != before:
            raise _out_of_memory(lib.last_error()) from error
        raise
    if lib.failures() != before:
        raise _out_of_memory(lib.last_error())


@contextlib.contextmanager
def pool(name, device=None):
    """Tensors created in the block come from a torch.cuda.MemPool whose
    segments ortmem allocates in tag name; PyTorch's caching allocator serves
    the rest of the program. A refusal surfaces as
    torch.cuda.OutOfMemoryError carrying the ledger's message."""
    torch = _torch()
    if name not in TAGS:
        raise ValueError("tag %r is none of %s" % (name, ", ".join(TAGS)))
    device = torch.cuda.current_device() if device is None else device
    with _lock:
        mem_pool = _pools.get((device, name))
    if mem_pool is None:
        mem_pool = torch.cuda.MemPool(_pluggable().allocator())
        with _lock:
            mem_pool = _pools.setdefault((device, name), mem_pool)
    # torch.cuda.use_mem_pool since 2.6; torch.cuda.memory's in 2.5.
    use_mem_pool = getattr(torch.cuda, "use_mem_pool", None) or torch.cuda.memory.use_mem_pool
    with checked(), tag(name), use_mem_pool(mem_pool, device=device):
        yield mem_pool


def memory_stats(device=0):
    """ortmem's counters in torch.cuda.memory_stats' shape ("allocated_bytes.all.current",
    "reserved_bytes.all.peak", ...), per tag under the tag's name
    ("allocated_bytes.weights.current"), and the ledger's under "ortmem."."""
    lib = load()
    out = {}
    all_tags = lib.stats(device, None)
    per_tag = {t: lib.stats(device, t) for t in TAGS}
    for scope, s in [("all", all_tags)] + list(per_tag.items()):
        out["allocated_bytes.%s.current" % scope] = s["allocated_bytes"]
        out["allocated_bytes.%s.peak" % scope] = s["allocated_peak_bytes"]
        out["reserved_bytes.%s.current" % scope] = s["reserved_bytes"]
        out["reserved_bytes.%s.peak" % scope] = s["reserved_peak_bytes"]
        out["active.%s.current" % scope] = s["live_allocations"]
        out["num_alloc.%s" % scope] = s["allocs"]
        out["num_free.%s" % scope] = s["frees"]
        out["owned_bytes.%s.current" % scope] = s["owned_bytes"]
        out["asleep.%s" % scope] = s["asleep"]
        out["backup_bytes.%s" % scope] = s["backup_bytes"]
    out["num_ooms"] = all_tags["failed_allocs"]
    for field in ("limit_bytes", "available_bytes", "device_owned_bytes", "pending_frees",
                  "cached_bytes"):
        out["ortmem." + field] = all_tags[field]
    return out


def set_budget(nbytes, device=0):
    """Changes the device's budget at run time."""
    lib = load()
    lib.check(lib.lib.ortmem_torch_set_budget(device, int(nbytes)), "set budget")


def flush(device=-1):
    """Waits for the frees still behind their streams and carries them out."""
    lib = load()
    lib.check(lib.lib.ortmem_torch_flush(device), "flush")


def sleep(name="weights", backup=True, device=0):
    """Gives the device memory of tag name back, keeping every address: the
    device is synchronized, every granule decommitted, the bytes copied to
    host first when backup is true. Allocating in the tag fails until wake."""
    torch = _torch()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize(device)
    lib = load()
    lib.check(lib.lib.ortmem_torch_sleep(device, name.encode(), 1 if backup else 0), "sleep")


def wake(name="weights", device=0):
    """Commits tag name's memory again at the same addresses, charged to the
    budget, and restores the backup. A budget refusal is
    torch.cuda.OutOfMemoryError and changes nothing."""
    lib = load()
    status = lib.lib.ortmem_torch_wake(device, name.encode())
    if status in (E_BUDGET, E_NOMEM):
        raise _out_of_memory(lib.last_error())
    lib.check(status, "wake")


def last_error():
    """The library's last failure, with the ledger's numbers."""
    return load().last_error()

