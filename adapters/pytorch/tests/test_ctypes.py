"""The Python package's ctypes layer over the built libortmem_torch.so, on
the CPU backend and without torch: what install() and pool() hand PyTorch
(the two symbols), tags, stats in memory_stats' shape, a budget breach's
message, sleep and wake. Run by meson (suite 'adapters') with ORTMEM_TORCH_LIB
set to the built library and PYTHONPATH to adapters/pytorch."""

import ctypes
import os
import sys
import types
import unittest

import ortmem_torch
from ortmem_torch import _lib

MiB = 1 << 20


class CtypesLayer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lib = _lib.load(os.environ["ORTMEM_TORCH_LIB"], build=False)
        ortmem_torch.init(backend="cpu", budget=8 * MiB, cache_bytes=0, granule_bytes=64 << 10,
                          arena_bytes=64 * MiB)
        cls.c = cls.lib.lib

    def alloc(self, n):
        p = self.c.ortmem_torch_alloc(n, 0, None)
        self.assertTrue(p, self.lib.last_error())
        return p

    def free(self, p, n):
        self.c.ortmem_torch_free(p, n, 0, None)

    def test_the_two_symbols_pytorch_loads_are_exported(self):
        self.assertTrue(hasattr(self.c, _lib.ALLOC_SYMBOL))
        self.assertTrue(hasattr(self.c, _lib.FREE_SYMBOL))
        self.assertEqual(ortmem_torch.library_path(), os.environ["ORTMEM_TORCH_LIB"])

    def test_tags_and_stats(self):
        with ortmem_torch.tag("weights"):
            self.assertEqual(self.lib.get_tag(), "weights")
            w = self.alloc(2 * MiB)
        self.assertEqual(self.lib.get_tag(), "other")
        o = self.alloc(1000)
        s = ortmem_torch.memory_stats(0)
        self.assertEqual(s["allocated_bytes.weights.current"], 2 * MiB)
        self.assertEqual(s["allocated_bytes.other.current"], 1000)
        self.assertEqual(s["allocated_bytes.all.current"], 2 * MiB + 1000)
        self.assertGreaterEqual(s["reserved_bytes.all.current"], 2 * MiB + 1000)
        self.assertEqual(s["ortmem.limit_bytes"], 8 * MiB)
        self.free(w, 2 * MiB)
        self.free(o, 1000)
        s = ortmem_torch.memory_stats(0)
        self.assertEqual(s["allocated_bytes.all.current"], 0)
        self.assertEqual(s["owned_bytes.all.current"], 0)
        with self.assertRaises(_lib.OrtmemTorchError) as raised:
            with ortmem_torch.tag("bogus"):
                pass
        self.assertEqual(raised.exception.status, "ORTMEM_E_INVALID")

    def test_a_budget_breach_names_requested_available_and_limit(self):
        failures = self.lib.failures()
        self.assertIsNone(self.c.ortmem_torch_alloc(16 * MiB, 0, None))
        self.assertEqual(self.lib.failures(), failures + 1)
        message = ortmem_torch.last_error()
        for word in ("requested", "available", "limit", "ORTMEM_E_BUDGET"):
            self.assertIn(word, message)
        self.assertEqual(ortmem_torch.memory_stats(0)["owned_bytes.all.current"], 0)

    def test_sleep_with_backup_and_wake_keep_addresses_and_bytes(self):
        with ortmem_torch.tag("kv"):
            p = self.alloc(3 * MiB)
        ctypes.memset(p, 0x5A, 3 * MiB)
        self.lib.check(self.c.ortmem_torch_sleep(0, b"kv", 1), "sleep")
        s = ortmem_torch.memory_stats(0)
        self.assertEqual(s["asleep.kv"], 1)
        self.assertEqual(s["owned_bytes.kv.current"], 0)
        self.assertGreaterEqual(s["backup_bytes.kv"], 3 * MiB)
        self.lib.check(self.c.ortmem_torch_wake(0, b"kv"), "wake")
        self.assertEqual(ctypes.string_at(p, 3 * MiB), b"\x5a" * (3 * MiB))
        self.free(p, 3 * MiB)


class StubTorch:
    """Just what the package calls of torch, recorded: no torch here."""

    class OutOfMemoryError(RuntimeError):
        pass

    def __init__(self):
        self.calls = []
        stub = self

        class Allocator:
            def __init__(self, path, alloc, free):
                stub.calls.append(("CUDAPluggableAllocator", path, alloc, free))

        def change_current_allocator(allocator):
            stub.calls.append(("change_current_allocator", type(allocator).__name__))

        memory = types.SimpleNamespace(CUDAPluggableAllocator=Allocator,
                                       change_current_allocator=change_current_allocator)
        self.cuda = types.SimpleNamespace(memory=memory, OutOfMemoryError=self.OutOfMemoryError,
                                          is_available=lambda: False,
                                          is_initialized=lambda: False)


class TorchFacing(unittest.TestCase):
    """install(), checked(), sleep() and wake() against a stub torch."""

    def setUp(self):
        self.torch = StubTorch()
        sys.modules["torch"] = self.torch
        _lib.load(os.environ["ORTMEM_TORCH_LIB"], build=False)
        ortmem_torch.init(backend="cpu", budget=8 * MiB, cache_bytes=0, granule_bytes=64 << 10,
                          arena_bytes=64 * MiB)

    def tearDown(self):
        del sys.modules["torch"]
        ortmem_torch._allocator = None

    def test_install_hands_pytorch_the_library_and_its_two_symbols(self):
        ortmem_torch.install(backend="cpu", budget=8 * MiB, cache_bytes=0,
                             granule_bytes=64 << 10, arena_bytes=64 * MiB)
        self.assertEqual(self.torch.calls, [
            ("CUDAPluggableAllocator", os.environ["ORTMEM_TORCH_LIB"], "ortmem_torch_alloc",
             "ortmem_torch_free"),
            ("change_current_allocator", "Allocator")])

    def test_a_refused_alloc_inside_checked_is_out_of_memory_with_the_ledgers_message(self):
        c = _lib.load().lib
        with self.assertRaises(self.torch.OutOfMemoryError) as raised:
            with ortmem_torch.checked():
                self.assertIsNone(c.ortmem_torch_alloc(64 * MiB, 0, None))
        for word in ("requested", "available", "limit"):
            self.assertIn(word, str(raised.exception))
        with ortmem_torch.checked():  # nothing refused: nothing raised
            p = c.ortmem_torch_alloc(4096, 0, None)
            c.ortmem_torch_free(p, 4096, 0, None)

    def test_a_wake_over_budget_is_out_of_memory_and_changes_nothing(self):
        c = _lib.load().lib
        with ortmem_torch.tag("weights"):
            p = c.ortmem_torch_alloc(4 * MiB, 0, None)
        ortmem_torch.sleep("weights", backup=True)
        ortmem_torch.set_budget(MiB)
        with self.assertRaises(self.torch.OutOfMemoryError):
            ortmem_torch.wake("weights")
        self.assertEqual(ortmem_torch.memory_stats()["asleep.weights"], 1)
        ortmem_torch.set_budget(8 * MiB)
        ortmem_torch.wake("weights")
        c.ortmem_torch_free(p, 4 * MiB, 0, None)
        with self.assertRaises(_lib.OrtmemTorchError):
            ortmem_torch.wake("weights")


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() else 1)
