#!/usr/bin/env python3
"""HF transformers as the GPU engine's peer: greedy decode at batch 1 (and
more) of a Llama model with SmolLM2-135M's geometry and random weights
(fixed seed), fp16, eager attention, on the GPU. Prints one JSON object per
run: tok/s over the decode steps after a warm-up.

    python3 bench/peer/hf_decode.py [--steps N] [--batch B ...]

Run on the GPU machine (torch and transformers there); scripts/gpu-bench.sh
runs it beside the engine's benchmark so both are measured in one run."""
import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

# SmolLM2-135M-Instruct's config.json geometry.
SMOLLM2_135M = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                    max_position_embeddings=8192, rope_theta=100000.0, rms_norm_eps=1e-5,
                    tie_word_embeddings=True, hidden_act="silu")


def run(model, batch, steps, prompt_len):
    torch.manual_seed(0)
    ids = torch.randint(0, SMOLLM2_135M["vocab_size"], (batch, prompt_len), device="cuda")
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        for _ in range(8):  # warm-up
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            nxt.cpu()  # the token reaches the host each step, as the engine's does
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    return {"peer": "hf-transformers-eager", "transformers": __import__("transformers").__version__,
            "torch": torch.__version__, "batch": batch, "steps": steps,
            "tok_s": round(batch * steps / dt, 1), "step_us": round(dt / steps * 1e6, 2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 8, 32])
    ap.add_argument("--prompt-len", type=int, default=5)
    a = ap.parse_args()
    torch.manual_seed(0)
    cfg = LlamaConfig(**SMOLLM2_135M)
    cfg._attn_implementation = "eager"
    model = LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.float16).eval()
    for b in a.batch:
        print(json.dumps(run(model, b, a.steps, a.prompt_len)), flush=True)


if __name__ == "__main__":
    main()
