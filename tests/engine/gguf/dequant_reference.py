#!/usr/bin/env python3
"""Reference values for tests/engine/gguf/test_dequant.c, from the gguf package.

  dequant_reference.py model MODEL.gguf
      For a few rows of a few tensors of each type in the model, one line:
      "row NAME ROW N HEX" where HEX is the N dequantized values as the
      8-hex-digit bit patterns of their float32s, concatenated.

  dequant_reference.py synthetic OUT SEED
      For every type the model lacks, data made here (quantized by the
      package where it can quantize, raw blocks from numpy otherwise) and the
      package's dequantization, one line per case written to OUT:
      "block TYPE_ID N RAWHEX HEX" (RAWHEX the blocks' bytes in hex).
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf import quants

# Rows checked in the model: the first, second and last of each tensor, and one inside.
MODEL_TENSORS = [
    "token_embd.weight",  # Q8_0
    "blk.0.attn_q.weight",  # Q4_1
    "blk.0.ffn_down.weight",  # Q4_1
    "blk.29.ffn_up.weight",  # Q4_1
    "blk.0.attn_norm.weight",  # F32
    "output_norm.weight",  # F32
]


def bits(values):
    return np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)


def hexwords(values):
    return "".join(f"{w:08x}" for w in bits(values).ravel())


def model(path):
    reader = GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    for name in MODEL_TENSORS:
        t = tensors[name]
        data = t.data if t.data.ndim > 1 else t.data.reshape(1, -1)
        rows = data.shape[0]
        for row in sorted({0, 1 % rows, rows // 3, rows - 1}):
            values = quants.dequantize(np.ascontiguousarray(data[row]), t.tensor_type)
            print(f"row {name} {row} {values.size} {hexwords(values)}")


def random_halves(rng, n):
    """Finite halves of assorted magnitudes (scales of a block)."""
    return (rng.standard_normal(n) * 10.0 ** rng.uniform(-4, 1, n)).astype(np.float16)


def raw_k_blocks(rng, qtype, n_blocks):
    """Random K-format super-blocks with finite d (and dmin) halves."""
    size = {T.Q2_K: 84, T.Q3_K: 110, T.Q4_K: 144, T.Q5_K: 176, T.Q6_K: 210}[qtype]
    # Offsets of the halves inside each block (d, then dmin where present).
    halves = {T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}[qtype]
    blocks = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
    for off in halves:
        blocks[:, off:off + 2] = random_halves(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return blocks


def synthetic(out_path, seed):
    rng = np.random.default_rng(seed)
    lines = []

    def emit(qtype, raw, values):
        lines.append(f"block {int(qtype)} {values.size} {raw.tobytes().hex()} {hexwords(values)}")

    # Formats the package quantizes: random data with outliers and a zero block.
    for qtype in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.BF16, T.F16):
        data = rng.standard_normal((4, 64)).astype(np.float32) * np.float32(3.0)
        data[1, :32] = 0.0
        data[2, 5] = np.float32(-1e3)
        raw = np.ascontiguousarray(quants.quantize(data, qtype)).view(np.uint8)
        emit(qtype, raw, quants.dequantize(raw, qtype).ravel())
    # F16 and BF16 over special values too (subnormals, infinities, signed zero).
    specials = np.array([0.0, -0.0, 1.0, -2.5, 6e-8, -6e-5, 65504.0, np.inf, -np.inf, 1e-40],
                        dtype=np.float32)
    for qtype in (T.F16, T.BF16):
        raw = np.ascontiguousarray(quants.quantize(specials, qtype)).view(np.uint8)
        emit(qtype, raw, quants.dequantize(raw, qtype).ravel())
    # Raw random blocks for every 32-element format too (all bit patterns of the quants).
    for qtype, size, halves in ((T.Q4_0, 18, [0]), (T.Q4_1, 20, [0, 2]), (T.Q5_0, 22, [0]),
                                (T.Q5_1, 24, [0, 2]), (T.Q8_0, 34, [0])):
        blocks = rng.integers(0, 256, (6, size), dtype=np.uint8)
        for off in halves:
            blocks[:, off:off + 2] = random_halves(rng, 6).view(np.uint8).reshape(6, 2)
        emit(qtype, blocks, quants.dequantize(blocks, qtype).ravel())
    # The K formats: the package only dequantizes them.
    for qtype in (T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K):
        blocks = raw_k_blocks(rng, qtype, 3)
        emit(qtype, blocks, quants.dequantize(blocks, qtype).ravel())
    with open(out_path, "w") as out:
        out.write("\n".join(lines) + "\n")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "model":
        model(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "synthetic":
        synthetic(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
