#!/usr/bin/env python3
"""Writes the fuzzers' generated seeds: fuzz/corpus/gguf/tiny.gguf (every
metadata kind, nested and empty arrays, one small tensor of each type the
engine dequantizes) and fuzz/corpus/gguf/vocab.gguf (a byte-level BPE
vocabulary of a few hundred tokens with its merges, special tokens and a
ChatML template; the tokenizer fuzzer builds its tokenizer from it), and
fuzz/corpus/api_ops/*.bin (op sequences that reach every op of api_ops.c).
Deterministic: running it again writes the same bytes. Needs only python3."""

import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
          BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
ALIGN = 32


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(kind, v):
    if kind == STRING:
        return gstr(v)
    if kind == ARRAY:
        elem, items = v
        out = struct.pack("<IQ", elem, len(items))
        return out + b"".join(value(elem, x) for x in items)
    return struct.pack(SCALAR[kind], v)


def write_gguf(path, kvs, tensors):
    """kvs: [(key, kind, value)]; tensors: [(name, type, dims, data bytes)]."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, kind, v in kvs:
        head += gstr(key) + struct.pack("<I", kind) + value(kind, v)
    data = b""
    for name, ttype, dims, blob in tensors:
        data += b"\0" * (-len(data) % ALIGN)
        head += gstr(name) + struct.pack("<I", len(dims))
        head += b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", ttype, len(data))
        data += blob
    head += b"\0" * (-len(head) % ALIGN)
    with open(path, "wb") as f:
        f.write(head + data)


def tiny(path):
    rng = random.Random(14)
    kvs = [
        ("general.architecture", STRING, "llama"),
        ("general.alignment", U32, ALIGN),
        ("t.u8", U8, 200), ("t.i8", I8, -5), ("t.u16", U16, 60000), ("t.i16", I16, -300),
        ("t.i32", I32, -70000), ("t.f32", F32, 1.5), ("t.bool", BOOL, True),
        ("t.u64", U64, 1 << 40), ("t.i64", I64, -(1 << 40)), ("t.f64", F64, 2.25),
        ("t.str", STRING, "h\u00e9llo"),
        ("t.arr_i32", ARRAY, (I32, [1, -2, 3])),
        ("t.arr_f32", ARRAY, (F32, [0.5, -1.0])),
        ("t.arr_str", ARRAY, (STRING, ["a", "", "bc"])),
        ("t.arr_empty", ARRAY, (U8, [])),
        ("t.arr_nested", ARRAY, (ARRAY, [(U8, [1, 2]), (STRING, ["x"])])),
    ]
    # type id, elements per block, bytes per block
    types = [(0, 1, 4), (1, 1, 2), (30, 1, 2), (2, 32, 18), (3, 32, 20), (6, 32, 22),
             (7, 32, 24), (8, 32, 34), (9, 32, 36), (10, 256, 84), (11, 256, 110),
             (12, 256, 144), (13, 256, 176), (14, 256, 210)]
    tensors = []
    for ttype, elems, size in types:
        rows = 2
        blob = bytearray(rng.getrandbits(8) for _ in range(rows * size))
        if ttype == 0:  # finite floats
            blob = b"".join(struct.pack("<f", rng.uniform(-2, 2)) for _ in range(rows))
        tensors.append(("t%d" % ttype, ttype, [elems, rows], bytes(blob)))
    write_gguf(path, kvs, tensors)


def byte_alphabet():
    """GPT-2's byte-level alphabet: byte -> printable code point."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


TEXT = ("the quick brown fox jumps over the lazy dog. The memory of the machine is "
        "reserved, committed and shared; tokens 12345 and 2026 are numbers! "
        "caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001F600 it's they're we'll")


def vocab(path):
    alpha = byte_alphabet()
    tokens = [alpha[b] for b in range(256)]
    words = []
    for w in TEXT.replace(".", " .").split(" "):
        words.append(["\u0120"] + [alpha[b] for b in w.encode()] if words else
                     [alpha[b] for b in w.encode()])
    merges = []
    for _ in range(120):
        counts = {}
        for w in words:
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        best = max(sorted(counts), key=lambda p: counts[p])
        if counts[best] < 2 and len(merges) > 60:
            break
        merges.append(best[0] + " " + best[1])
        tokens.append(best[0] + best[1])
        for i, w in enumerate(words):
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and (w[j], w[j + 1]) == best:
                    out.append(w[j] + w[j + 1])
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
    types = [1] * len(tokens)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool>"]
    first_special = len(tokens)
    tokens += specials
    types += [3, 3, 3, 4]
    template = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
                "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    kvs = [
        ("general.architecture", STRING, "llama"),
        ("tokenizer.ggml.model", STRING, "gpt2"),
        ("tokenizer.ggml.pre", STRING, "smollm"),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
        ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
        ("tokenizer.ggml.merges", ARRAY, (STRING, merges)),
        ("tokenizer.ggml.bos_token_id", U32, first_special + 1),
        ("tokenizer.ggml.eos_token_id", U32, first_special + 2),
        ("tokenizer.ggml.padding_token_id", U32, first_special),
        ("tokenizer.ggml.add_bos_token", BOOL, False),
        ("tokenizer.chat_template", STRING, template),
    ]
    write_gguf(path, kvs, [])


def api_ops(out):
    """Op sequences for fuzz/api_ops.c (its op numbers and argument bytes)."""
    def u16(v):
        return [v & 0xFF, v >> 8]
    region, destroy, commit, decommit, share, protect, alloc, free_, trim, grant, kv = (
        0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11)
    seeds = {
        # two regions, commits, an alias, protect, decommit, destroy
        "regions": [40, region, 0, 7, region, 1, 7, commit, 0, 4] + u16(0) + u16(0x4000)
        + [share, 1, 0, 0, 0, 2, 0, protect, 0, 0, 2, 1, decommit, 0, 4] + u16(0)
        + u16(0x2000) + [commit, 1, 1] + u16(0x100) + [7] + u16(0x300) + [9, destroy, 0,
                                                                         destroy, 1],
        # allocations of several sizes and alignments, frees, a foreign free, trim
        "arena": [200, alloc] + u16(1000) + [0, 8, alloc] + u16(60000) + [3, 12, alloc]
        + u16(5) + [0, 17, free_, 1, free_, 0x80] + u16(77) + [trim, 0, alloc] + u16(0xFFFF)
        + [7, 16, free_, 0, free_, 0],
        # grants prepared, charged, aborted, refunded
        "grants": [63, grant, 0, 1] + u16(1000) + [grant, 0, 1] + u16(500) + [grant, 1, 1]
        + u16(0xFFFF) + [grant, 1, 0] + u16(0) + [grant, 2, 3] + u16(100),
        # sequences appended, forked, truncated, finished (stable, then bucket)
        "kv_stable": [0, kv, 0, 0] + u16(0) + [kv, 0, 0] + u16(150) + [kv, 0, 2] + u16(0)
        + [kv, 1, 0] + u16(99) + [kv, 0, 1] + u16(30) + [kv, 0, 0] + u16(199) + [kv, 1, 3]
        + u16(0) + [kv, 0, 0] + u16(600),
        "kv_bucket": [8 | 16, kv, 0, 0] + u16(0) + [kv, 0, 0] + u16(70) + [kv, 0, 2] + u16(0)
        + [kv, 0, 0] + u16(150) + [kv, 1, 0] + u16(10) + [kv, 0, 1] + u16(3) + [kv, 0, 4]
        + u16(0),
    }
    os.makedirs(out, exist_ok=True)
    for name, ops in seeds.items():
        with open(os.path.join(out, name + ".bin"), "wb") as f:
            f.write(bytes(ops))


def main():
    api_ops(os.path.join(HERE, "corpus", "api_ops"))
    out = os.path.join(HERE, "corpus", "gguf")
    os.makedirs(out, exist_ok=True)
    tiny(os.path.join(out, "tiny.gguf"))
    vocab(os.path.join(out, "vocab.gguf"))


if __name__ == "__main__":
    main()
