#!/usr/bin/env python3
"""Checks that every #include in src/, include/ortmem/ and tools/ points down.

The rule (docs/memory/ARCHITECTURE.md, section Layers):

  layers, lowest first:   core < vmm < governance < kv < offload < capture < tools
  public headers, lowest: core.h < gate.h < vmm.h < governance.h < kv.h
                          < capture.h < ortmem.h (the umbrella, tools level)

  down      a file of layer L includes internal headers ("M/...") and public
            headers (<ortmem/X.h>) of layers at or below L only;
  public    a public header includes only public headers before it in the
            public order, never an internal header;
  backends  src/vmm/backends/ is vmm, but includes public headers and core
            internals only: never vmm's private headers, and nothing
            includes a file of src/vmm/backends/;
  engine    engine/ (the reference decode engine) includes public headers and
            its own files (quoted, from engine/), never src/ nor tools/;
  tools     tools/ include public headers, their own files and engine/'s,
            never src/;
  adapters  adapters/ (PyTorch, ONNX Runtime) include public headers and
            their own files (quoted, under adapters/), never src/, engine/
            nor tools/;
  known     every src/ folder, public header and quoted include is in the
            tables below: a new one must be placed in the order first.

Usage: check-layers.py [ROOT]   (ROOT: the repository; default: this script's)
Prints file:line and the rule for each include that breaks it and exits 1;
prints one summary line and exits 0 when every include points down.
"""

import os
import re
import sys

LAYERS = ["core", "vmm", "governance", "kv", "offload", "capture", "tools"]
RANK = {name: i for i, name in enumerate(LAYERS)}

# Public headers in their order, each with the layer it belongs to.
PUBLIC_ORDER = [
    ("core.h", "core"),
    ("gate.h", "core"),
    ("vmm.h", "vmm"),
    ("governance.h", "governance"),
    ("kv.h", "kv"),
    ("offload.h", "offload"),
    ("capture.h", "capture"),
    ("ortmem.h", "tools"),
]
PUBLIC_INDEX = {name: i for i, (name, _) in enumerate(PUBLIC_ORDER)}
PUBLIC_LAYER = dict(PUBLIC_ORDER)

BACKENDS = "src/vmm/backends/"
SOURCE_SUFFIXES = (".c", ".h", ".cc", ".cpp", ".hpp", ".cu", ".cuh")
INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]')
ORDER_TEXT = "core < vmm < governance < kv < offload < capture < tools"
PUBLIC_TEXT = "core.h < gate.h < vmm.h < governance.h < kv.h < offload.h < capture.h < ortmem.h"


def blank_comments(text):
    """text with comments replaced by spaces (newlines kept, so lines keep
    their numbers); string and character literals are left alone."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def includes(path):
    """(line number, '<' or '"', target) for each #include in the file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = blank_comments(f.read())
    for number, line in enumerate(text.split("\n"), 1):
        m = INCLUDE_RE.match(line)
        if m:
            yield number, m.group(1), m.group(2).strip()


class Checker:
    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.problems = []
        self.files = 0
        self.checked = 0

    def rel(self, path):
        return os.path.relpath(path, self.root).replace(os.sep, "/")

    def report(self, rel, line, message):
        self.problems.append("%s:%d: %s" % (rel, line, message))

    def src_layer(self, rel):
        """The layer of a path under src/, or None when its folder is unknown."""
        parts = rel.split("/")
        if len(parts) < 3 or parts[0] != "src":
            return None
        return parts[1] if parts[1] in RANK and parts[1] != "tools" else None

    def resolve_quoted(self, including_rel, target):
        """Where a quoted include lands, as the compiler searches: the including
        file's folder, then src/ and include/ (the library's -I), then tools/
        and engine/."""
        here = os.path.dirname(os.path.join(self.root, including_rel))
        for base in (here, os.path.join(self.root, "src"), os.path.join(self.root, "include"),
                     os.path.join(self.root, "tools"), os.path.join(self.root, "engine")):
            candidate = os.path.normpath(os.path.join(base, target))
            if os.path.isfile(candidate):
                return self.rel(candidate)
        return None

    def describe_target(self, including_rel, kind, target):
        """(layer or None, what) for an include; layer None for a system header."""
        if kind == "<":
            if target.startswith("ortmem/"):
                name = target[len("ortmem/"):]
                if name not in PUBLIC_LAYER:
                    return "unknown", "<%s>" % target
                return PUBLIC_LAYER[name], "<%s>" % target
            return None, "<%s>" % target
        landed = self.resolve_quoted(including_rel, target)
        what = '"%s"' % target
        if landed is None:
            first = target.split("/")[0]
            if first in RANK and first != "tools":
                return first, what  # a src/ layer's header that is not there
            return "unknown", what
        if landed.startswith("src/"):
            layer = self.src_layer(landed)
            if landed.startswith(BACKENDS):
                return "backends", what
            return (layer or "unknown"), what
        if landed.startswith("include/ortmem/"):
            return "public-quoted", what
        if landed.startswith("tools/"):
            return "tools-own", what
        if landed.startswith("engine/"):
            return "engine-own", what
        if landed.startswith("adapters/"):
            return "adapters-own", what
        return "unknown", what

    def check_file(self, path):
        rel = self.rel(path)
        self.files += 1
        if rel.startswith("include/ortmem/"):
            self.check_public(rel, path)
            return
        if rel.startswith("tools/"):
            self.check_tool(rel, path)
            return
        if rel.startswith("engine/"):
            self.check_own(rel, path, "engine", "the engine")
            return
        if rel.startswith("adapters/"):
            self.check_own(rel, path, "adapters", "an adapter")
            return
        layer = self.src_layer(rel)
        if layer is None:
            folder = "/".join(rel.split("/")[:2])
            self.report(rel, 1, "rule 'known': %s is not a layer (%s); place it in the "
                        "order in scripts/check-layers.py and ARCHITECTURE.md first"
                        % (folder, ORDER_TEXT))
            return
        backend = rel.startswith(BACKENDS)
        for line, kind, target in includes(path):
            self.checked += 1
            to, what = self.describe_target(rel, kind, target)
            if to is None:
                continue
            if to == "unknown":
                self.report(rel, line, "rule 'known': %s is in no layer" % what)
            elif to == "public-quoted":
                self.report(rel, line, "rule 'public': %s names a public header with quotes; "
                            "use <ortmem/...>" % what)
            elif to == "tools-own":
                self.report(rel, line, "rule 'down': %s (%s) includes %s from tools/, which is "
                            "above it (%s)" % (rel, layer, what, ORDER_TEXT))
            elif to == "backends":
                if not backend:
                    self.report(rel, line, "rule 'backends': %s includes %s, a file of "
                                "src/vmm/backends/; backends are leaves that only other backend "
                                "files include" % (rel, what))
            elif backend and to == "vmm" and kind == '"':
                self.report(rel, line, "rule 'backends': a backend includes %s, a vmm private "
                            "header; backends see public headers and core internals only" % what)
            elif RANK[to] > RANK[layer]:
                self.report(rel, line, "rule 'down': %s (%s) includes %s (%s), which is above "
                            "it (%s)" % (rel, layer, what, to, ORDER_TEXT))

    def check_public(self, rel, path):
        name = rel[len("include/ortmem/"):]
        if name not in PUBLIC_INDEX:
            self.report(rel, 1, "rule 'known': %s is not in the public order (%s); place it "
                        "in scripts/check-layers.py and ARCHITECTURE.md first" % (name, PUBLIC_TEXT))
            return
        for line, kind, target in includes(path):
            self.checked += 1
            if kind == '"':
                self.report(rel, line, "rule 'public': a public header includes \"%s\"; public "
                            "headers include <ortmem/...> and system headers only" % target)
                continue
            if not target.startswith("ortmem/"):
                continue
            other = target[len("ortmem/"):]
            if other not in PUBLIC_INDEX:
                self.report(rel, line, "rule 'known': <%s> is not in the public order (%s)"
                            % (target, PUBLIC_TEXT))
            elif PUBLIC_INDEX[other] >= PUBLIC_INDEX[name]:
                self.report(rel, line, "rule 'public': %s includes <%s>, which is not below it "
                            "(%s)" % (name, target, PUBLIC_TEXT))

    def check_tool(self, rel, path):
        for line, kind, target in includes(path):
            self.checked += 1
            to, what = self.describe_target(rel, kind, target)
            if to is None or to in ("tools-own", "engine-own") or (kind == "<" and to != "unknown"):
                continue  # a system header, the tool's own file, the engine's, a public header
            if to == "unknown":
                self.report(rel, line, "rule 'known': %s is in no layer" % what)
            elif to == "public-quoted":
                self.report(rel, line, "rule 'public': %s names a public header with quotes; "
                            "use <ortmem/...>" % what)
            else:
                self.report(rel, line, "rule 'tools': %s includes %s from the library's "
                            "sources; tools see the public headers only" % (rel, what))

    def check_own(self, rel, path, rule, who):
        """engine/ and adapters/: public headers and their own files only."""
        for line, kind, target in includes(path):
            self.checked += 1
            to, what = self.describe_target(rel, kind, target)
            if to is None or to == rule + "-own" or (kind == "<" and to != "unknown"):
                continue  # a system header, the part's own file, a public header
            if to == "unknown":
                self.report(rel, line, "rule 'known': %s is in no layer" % what)
            elif to == "public-quoted":
                self.report(rel, line, "rule 'public': %s names a public header with quotes; "
                            "use <ortmem/...>" % what)
            else:
                self.report(rel, line, "rule '%s': %s includes %s; %s sees the public "
                            "headers and its own files only" % (rule, rel, what, who))

    def run(self):
        for top in ("src", "include/ortmem", "engine", "adapters", "tools"):
            base = os.path.join(self.root, top)
            if not os.path.isdir(base):
                continue
            for folder, dirs, files in os.walk(base):
                dirs.sort()
                for name in sorted(files):
                    if name.endswith(SOURCE_SUFFIXES):
                        self.check_file(os.path.join(folder, name))
        return self.problems


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    root = argv[1] if len(argv) > 1 else os.path.dirname(here)
    if not os.path.isdir(os.path.join(root, "src")):
        print("check-layers: %s has no src/ folder" % root, file=sys.stderr)
        return 2
    checker = Checker(root)
    problems = checker.run()
    for problem in problems:
        print(problem)
    if problems:
        print("check-layers: %d include(s) break the layer order (%s; backends: public headers "
              "and core only)" % (len(problems), ORDER_TEXT), file=sys.stderr)
        return 1
    print("check-layers: %d includes in %d files point down (%s)"
          % (checker.checked, checker.files, ORDER_TEXT))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
