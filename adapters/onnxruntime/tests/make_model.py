#!/usr/bin/env python3
"""Writes the tiny decoder-with-past model the ONNX Runtime adapter's tests run.

Random weights (a fixed seed, so every build writes the same file), 2 layers,
4 heads of 16, vocabulary 64, 1024 positions; float32. One token per step
(no causal mask: a step's query sees the past and itself).

Inputs:  input_ids, position_ids  int64 [1, n]
         past_key_L, past_value_L float [1, past, 4, 16]   (L = 0, 1)
Outputs: logits                   float [1, n, 64]
         present_key_L, present_value_L float [1, n, 4, 16]

The KV layout is [batch, tokens, heads, head_dim]: a sequence-major ortmem KV
binding ([capacity][heads][head_dim]) holds the first `past` tokens as one
contiguous tensor, and a present of n tokens written right after them is what
the next step reads as its past. So present holds the step's new tokens only
(the "append" convention), not past and new concatenated: the model attends
over Concat(past, new) inside the graph.

    python make_model.py OUT.onnx
"""

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LAYERS, HEADS, HEAD_DIM, VOCAB, POSITIONS = 2, 4, 16, 64, 1024
EMBED = HEADS * HEAD_DIM


def build():
    rng = np.random.default_rng(20261203)
    inits, nodes = [], []

    def weight(name, *shape, scale=0.2):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name, values, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    heads_shape = const("heads_shape", [1, -1, HEADS, HEAD_DIM])
    embed_shape = const("embed_shape", [1, -1, EMBED])
    scale = const("scale", 1.0 / np.sqrt(HEAD_DIM), np.float32)

    tok = node("Gather", [weight("tok_emb", VOCAB, EMBED, scale=1.0), "input_ids"], "tok")
    pos = node("Gather", [weight("pos_emb", POSITIONS, EMBED, scale=0.1), "position_ids"], "pos")
    h = node("Add", [tok, pos], "h0")
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "n"]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, "n"])]
    outputs = []
    for layer in range(LAYERS):
        p = "l%d_" % layer
        kv_in = [1, "past", HEADS, HEAD_DIM]
        kv_out = [1, "n", HEADS, HEAD_DIM]
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(
                "past_%s_%d" % (kind, layer), TensorProto.FLOAT, kv_in))
            outputs.append(helper.make_tensor_value_info(
                "present_%s_%d" % (kind, layer), TensorProto.FLOAT, kv_out))
        q = node("MatMul", [h, weight(p + "wq", EMBED, EMBED)], p + "q")
        q = node("Reshape", [q, heads_shape], p + "q4")
        q = node("Transpose", [q], p + "qt", perm=[0, 2, 1, 3])
        k = node("MatMul", [h, weight(p + "wk", EMBED, EMBED)], p + "k")
        k = node("Reshape", [k, heads_shape], "present_key_%d" % layer)
        v = node("MatMul", [h, weight(p + "wv", EMBED, EMBED)], p + "v")
        v = node("Reshape", [v, heads_shape], "present_value_%d" % layer)
        k_all = node("Concat", ["past_key_%d" % layer, k], p + "k_all", axis=1)
        v_all = node("Concat", ["past_value_%d" % layer, v], p + "v_all", axis=1)
        kt = node("Transpose", [k_all], p + "kt", perm=[0, 2, 3, 1])
        vt = node("Transpose", [v_all], p + "vt", perm=[0, 2, 1, 3])
        s = node("MatMul", [q, kt], p + "s")
        s = node("Mul", [s, scale], p + "s_scaled")
        a = node("Softmax", [s], p + "a", axis=-1)
        o = node("MatMul", [a, vt], p + "o")
        o = node("Transpose", [o], p + "o_t", perm=[0, 2, 1, 3])
        o = node("Reshape", [o, embed_shape], p + "o_e")
        o = node("MatMul", [o, weight(p + "wo", EMBED, EMBED)], p + "o_proj")
        h = node("Add", [h, o], p + "h_attn")
        m = node("MatMul", [h, weight(p + "w1", EMBED, 2 * EMBED)], p + "m1")
        m = node("Tanh", [m], p + "m_act")
        m = node("MatMul", [m, weight(p + "w2", 2 * EMBED, EMBED)], p + "m2")
        h = node("Add", [h, m], p + "h_out")
    node("MatMul", [h, weight("lm_head", EMBED, VOCAB)], "logits")
    outputs.insert(0, helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "n", VOCAB]))
    graph = helper.make_graph(nodes, "ortmem_tiny_decoder", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="ortmem adapters/onnxruntime/tests/make_model.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: make_model.py OUT.onnx")
    onnx.save(build(), sys.argv[1])


if __name__ == "__main__":
    main()
