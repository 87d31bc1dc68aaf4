#!/usr/bin/env python3
"""Writes the decode-order tensor access trace of a GGUF model for
ortmem-residency-sim (format: docs/memory/OFFLOAD.md, "ortmem-residency-sim").

Reads only the GGUF tensor table, with the PyPI `gguf` package (scripts/model-env.sh
makes a virtual environment that has it). Per decode step, in the order a
llama-architecture decode step reads them: each layer's tensors (attention
norm, q, k, v, output; FFN norm, gate, up, down; any other tensor of the layer
after those, in file order), then the output norm and the output head, which
is token_embd itself when the model ties them (no output.weight).

The token embedding row: a decode step reads one row of token_embd. By default
(--embedding host) that lookup is taken to happen on the host, where the
tensor's mmap lives, so it is no device access; --embedding device records a
read of the whole token_embd at the start of each step (the slot is the unit
of residency).

    gguf_trace.py MODEL.gguf [-o OUT.trace] [--steps N] [--embedding host|device]
"""
import argparse
import re
import sys

LAYER_ORDER = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output",
               "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]


def decode_order(names):
    """The tensor names of one decode step, and the name of the embedding."""
    layers = {}
    rest = []
    for name in names:
        m = re.match(r"blk\.(\d+)\.(.+)$", name)
        if m:
            layers.setdefault(int(m.group(1)), []).append(name)
        else:
            rest.append(name)

    def rank(name):
        role = name.split(".")[2]
        return LAYER_ORDER.index(role) if role in LAYER_ORDER else len(LAYER_ORDER)

    step = []
    for layer in sorted(layers):
        # sorted() is stable: roles outside LAYER_ORDER keep the file's order.
        step += sorted(layers[layer], key=rank)
    embedding = "token_embd.weight" if "token_embd.weight" in rest else None
    if "output_norm.weight" in rest:
        step.append("output_norm.weight")
    if "output.weight" in rest:
        step.append("output.weight")
    elif embedding:
        step.append(embedding)  # tied: the head reads the embedding
    return step, embedding


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a GGUF file")
    ap.add_argument("-o", "--output", help="the trace file (default: stdout)")
    ap.add_argument("--steps", type=int, default=16, help="decode steps (default 16)")
    ap.add_argument("--embedding", choices=["host", "device"], default="host",
                    help="where a step's embedding row lookup reads (default host)")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    try:
        import gguf
    except ImportError:
        sys.exit("gguf_trace.py: the PyPI package gguf is missing "
                 "(scripts/model-env.sh makes a virtual environment with it)")
    try:
        reader = gguf.GGUFReader(args.model)
    except (OSError, ValueError) as e:
        sys.exit("gguf_trace.py: %s: not a readable GGUF file (%s)" % (args.model, e))
    tensors = [(t.name, int(t.n_bytes)) for t in reader.tensors]
    names = [n for n, _ in tensors]
    bad = [n for n in names if not n or any(c.isspace() or c == "#" for c in n)]
    if bad:
        sys.exit("gguf_trace.py: tensor name %r cannot be written in a trace" % bad[0])
    step, embedding = decode_order(names)
    if args.embedding == "device" and embedding:
        step.insert(0, embedding)
    out = open(args.output, "w") if args.output else sys.stdout
    with out:
        out.write("ortmem-residency-trace 1\n")
        out.write("# %s: %d tensors, %d bytes; %d decode steps, embedding row on the %s\n"
                  % (args.model.split("/")[-1], len(tensors), sum(b for _, b in tensors),
                     args.steps, args.embedding))
        used = set(step)
        for name, size in tensors:
            if name in used:
                out.write("tensor %s %d\n" % (name, size))
        for _ in range(args.steps):
            out.write("access " + " ".join(step) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
