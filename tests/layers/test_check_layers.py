#!/usr/bin/env python3
"""Tests of scripts/check-layers.py (the rule: docs/memory/ARCHITECTURE.md#layers).

Each case writes a small tree (src/, include/ortmem/, tools/) into a temporary
folder, runs the checker on it as a child process and checks the exit status
and the `path:line: rule` lines. A clean tree must pass; each planted include
that goes up or sideways must fail, naming the file, the line and the rule.

Run: python3 tests/layers/test_check_layers.py [-v]   (meson: the test 'layers_checker')
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.normpath(os.path.join(HERE, "..", "..", "scripts", "check-layers.py"))

# A tree that keeps every rule: each layer includes its own and lower headers.
CLEAN = {
    "include/ortmem/core.h": "#include <stddef.h>\n",
    "include/ortmem/gate.h": "#include <ortmem/core.h>\n",
    "include/ortmem/vmm.h": "#include <ortmem/core.h>\n",
    "include/ortmem/governance.h": "#include <ortmem/core.h>\n#include <ortmem/vmm.h>\n",
    "include/ortmem/kv.h": "#include <ortmem/governance.h>\n#include <ortmem/vmm.h>\n",
    "include/ortmem/capture.h": "#include <ortmem/gate.h>\n#include <ortmem/kv.h>\n",
    "include/ortmem/ortmem.h": "#include <ortmem/core.h>\n#include <ortmem/capture.h>\n",
    "src/core/error.h": "#include <ortmem/core.h>\n",
    "src/core/gate.h": "/* the gate */\n",
    "src/core/gate.c": '#include "core/gate.h"\n#include "core/error.h"\n#include <ortmem/gate.h>\n',
    "src/vmm/backend.h": '#include <ortmem/vmm.h>\n#include "core/error.h"\n',
    "src/vmm/region.h": "#include <ortmem/vmm.h>\n",
    "src/vmm/region.c": '#include "region.h"\n#include "vmm/backend.h"\n#include <pthread.h>\n',
    "src/vmm/backends/cuda.c": (
        "#include <stdlib.h>\n"
        "#include <ortmem/vmm.h>\n"
        '#include "core/error.h"\n'
        '#include "core/gate.h"\n'
        "#ifdef ORTMEM_HAVE_CUDA_H\n#include <cuda.h>\n#endif\n"
    ),
    "src/governance/authority.c": '#include "vmm/backend.h"\n#include <ortmem/governance.h>\n',
    "src/kv/kv.h": "#include <ortmem/kv.h>\n",
    "src/kv/cache.c": '#include "kv/kv.h"\n#include "governance/authority.h"\n',
    "src/governance/authority.h": "#include <ortmem/governance.h>\n",
    "src/capture/signature.c": '#include "kv/kv.h"\n#include <ortmem/capture.h>\n',
    "tools/common/cli.h": "#include <stdio.h>\n",
    "tools/demo/main.c": '#include <ortmem/ortmem.h>\n#include "common/cli.h"\n',
}


def run_checker(tree):
    with tempfile.TemporaryDirectory() as root:
        for rel, text in tree.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        done = subprocess.run([sys.executable, CHECKER, root], capture_output=True, text=True)
        return done.returncode, done.stdout


class CleanTree(unittest.TestCase):
    def test_a_tree_whose_includes_point_down_passes(self):
        status, out = run_checker(CLEAN)
        self.assertEqual(status, 0, out)
        self.assertIn("point down", out)

    def test_an_include_in_a_comment_is_not_an_include(self):
        tree = dict(CLEAN)
        tree["src/core/gate.c"] += (
            '/* once it read\n#include "capture/gate.h"\n */\n// #include <ortmem/kv.h>\n'
        )
        status, out = run_checker(tree)
        self.assertEqual(status, 0, out)


class PlantedIncludes(unittest.TestCase):
    def assertFails(self, tree, where, rule):
        status, out = run_checker(tree)
        self.assertEqual(status, 1, out)
        lines = out.splitlines()
        hits = [line for line in lines if line.startswith(where + ":") and rule in line]
        self.assertEqual(len(hits), 1, out)
        self.assertEqual(len(lines), 1, out)  # the planted include, nothing else

    def test_a_backend_reaching_up_to_capture_fails(self):
        tree = dict(CLEAN)
        tree["src/capture/gate.h"] = "/* the old place */\n"
        tree["src/vmm/backends/cuda.c"] = '#include <stdlib.h>\n#include "capture/gate.h"\n'
        self.assertFails(tree, "src/vmm/backends/cuda.c:2", "rule 'down'")

    def test_a_backend_including_a_vmm_private_header_fails(self):
        tree = dict(CLEAN)
        tree["src/vmm/backends/cpu.c"] = '#include "core/error.h"\n#include "vmm/backend.h"\n'
        self.assertFails(tree, "src/vmm/backends/cpu.c:2", "rule 'backends'")

    def test_vmm_including_a_backend_file_fails(self):
        tree = dict(CLEAN)
        tree["src/vmm/backends/cpu_private.h"] = "/* cpu only */\n"
        tree["src/vmm/backends/cpu.c"] = '#include "cpu_private.h"\n'  # a sibling: allowed
        tree["src/vmm/pool.c"] = '#include "vmm/backends/cpu_private.h"\n'
        self.assertFails(tree, "src/vmm/pool.c:1", "rule 'backends'")

    def test_core_including_a_higher_public_header_fails(self):
        tree = dict(CLEAN)
        tree["src/core/trace.c"] = "#include <ortmem/core.h>\n#include <ortmem/vmm.h>\n"
        self.assertFails(tree, "src/core/trace.c:2", "rule 'down'")

    def test_a_relative_path_is_resolved_before_it_is_judged(self):
        tree = dict(CLEAN)
        tree["src/core/log.c"] = '#include "../vmm/backend.h"\n'
        self.assertFails(tree, "src/core/log.c:1", "rule 'down'")

    def test_governance_reaching_up_to_kv_fails(self):
        tree = dict(CLEAN)
        tree["src/governance/holder.c"] = '#include "governance/authority.h"\n#include "kv/kv.h"\n'
        self.assertFails(tree, "src/governance/holder.c:2", "rule 'down'")

    def test_a_public_header_including_a_higher_one_fails(self):
        tree = dict(CLEAN)
        tree["include/ortmem/vmm.h"] = "#include <ortmem/core.h>\n#include <ortmem/kv.h>\n"
        self.assertFails(tree, "include/ortmem/vmm.h:2", "rule 'public'")

    def test_the_gate_header_including_capture_fails(self):
        tree = dict(CLEAN)
        tree["include/ortmem/gate.h"] = "#include <ortmem/capture.h>\n"
        self.assertFails(tree, "include/ortmem/gate.h:1", "rule 'public'")

    def test_core_h_including_the_gate_just_above_it_fails(self):
        tree = dict(CLEAN)
        tree["include/ortmem/core.h"] += "#include <ortmem/gate.h>\n"
        self.assertFails(tree, "include/ortmem/core.h:2", "rule 'public'")

    def test_a_public_header_including_an_internal_one_fails(self):
        tree = dict(CLEAN)
        tree["include/ortmem/kv.h"] += '#include "core/error.h"\n'
        self.assertFails(tree, "include/ortmem/kv.h:3", "rule 'public'")

    def test_a_tool_including_a_library_source_header_fails(self):
        tree = dict(CLEAN)
        tree["tools/demo/main.c"] += '#include "core/error.h"\n'
        self.assertFails(tree, "tools/demo/main.c:3", "rule 'tools'")

    def test_a_library_file_including_a_tool_header_fails(self):
        tree = dict(CLEAN)
        tree["src/kv/cache.c"] += '#include "common/cli.h"\n'
        self.assertFails(tree, "src/kv/cache.c:3", "rule 'down'")

    def test_a_src_folder_outside_the_order_fails(self):
        tree = dict(CLEAN)
        tree["src/unplaced/unplaced.c"] = '#include "core/error.h"\n'
        self.assertFails(tree, "src/unplaced/unplaced.c:1", "rule 'known'")

    def test_a_public_header_outside_the_order_fails(self):
        tree = dict(CLEAN)
        tree["include/ortmem/unplaced.h"] = "#include <ortmem/core.h>\n"
        self.assertFails(tree, "include/ortmem/unplaced.h:1", "rule 'known'")

    def test_every_broken_include_is_reported(self):
        tree = dict(CLEAN)
        tree["src/vmm/backends/cuda.c"] = '#include "capture/gate.h"\n#include "vmm/backend.h"\n'
        tree["src/capture/gate.h"] = "/* the old place */\n"
        status, out = run_checker(tree)
        self.assertEqual(status, 1, out)
        self.assertEqual(
            out.splitlines(),
            [
                "src/vmm/backends/cuda.c:1: rule 'down': src/vmm/backends/cuda.c (vmm) includes "
                '"capture/gate.h" (capture), which is above it '
                "(core < vmm < governance < kv < offload < capture < tools)",
                'src/vmm/backends/cuda.c:2: rule \'backends\': a backend includes "vmm/backend.h", '
                "a vmm private header; backends see public headers and core internals only",
            ],
        )


if __name__ == "__main__":
    unittest.main()
