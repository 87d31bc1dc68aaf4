#!/usr/bin/env python3
"""HF transformers generation with ortmem as PyTorch's allocator, beside
PyTorch's caching allocator with and without expandable segments, on one GPU.

A LlamaForCausalLM with SmolLM2-135M's shape (written inline: no download),
random weights from a fixed seed, fp16, greedy decoding. Each allocator runs
in its own subprocess (the allocator is process-wide): the same weights, the
same prompt, the same tokens expected. Prints one JSON object:

  runs.<name>: tokens (a digest and the first ones), tok_per_s (median of
      --repeats timed generations), peak_allocated_bytes, peak_reserved_bytes,
      reserved_over_allocated (peak reserved / peak allocated - 1), and for
      ortmem the ledger's lines;
  checks: tokens_identical (every run against caching), ortmem_reserved_overhead
      (goal <= 0.02), ortmem_tok_per_s_vs_caching (goal >= 0.97).

Exit status 0 when every run finished and the tokens are identical (the goals
are reported, not enforced), 1 otherwise. Run by adapters/pytorch/tests/gpu_check.sh:

  PYTHONPATH=adapters/pytorch ORTMEM_TORCH_LIB=.../libortmem_torch.so \\
      python3 adapters/pytorch/tests/gpu_generate.py
"""

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

# The package beside this folder, when PYTHONPATH does not name it.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SMOLLM2_135M = dict(
    vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
    rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, hidden_act="silu",
    bos_token_id=0, eos_token_id=0, pad_token_id=0)

RUNS = {
    # name: (allocator, PYTORCH_CUDA_ALLOC_CONF, ortmem cache MiB or None)
    "caching": ("caching", None, None),
    "caching_expandable": ("caching", "expandable_segments:True", None),
    "ortmem": ("ortmem", None, None),
    "ortmem_cache16": ("ortmem", None, 16),
}


def child(args):
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    ortmem_torch = None
    if args.allocator == "ortmem":
        import ortmem_torch
        cache = None if args.cache_mib is None else args.cache_mib << 20
        ortmem_torch.install(cache_bytes=cache)  # before the first CUDA tensor
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    config = LlamaConfig(**SMOLLM2_135M)
    model = LlamaForCausalLM(config)  # random weights, on the CPU, from the seed
    model.eval()
    if ortmem_torch:
        with ortmem_torch.tag("weights"):
            model = model.to(device="cuda", dtype=torch.float16)
    else:
        model = model.to(device="cuda", dtype=torch.float16)
    gen = torch.Generator().manual_seed(args.seed + 1)
    prompt = torch.randint(1, config.vocab_size, (args.batch, args.prompt), generator=gen)
    prompt = prompt.cuda()
    attention = torch.ones_like(prompt)

    def generate(n):
        with torch.inference_mode():
            out = model.generate(input_ids=prompt, attention_mask=attention, do_sample=False,
                                 max_new_tokens=n, min_new_tokens=n, pad_token_id=0)
        torch.cuda.synchronize()
        return out

    def run_checked(fn):
        if ortmem_torch:
            with ortmem_torch.checked():
                return fn()
        return fn()

    run_checked(lambda: generate(8))  # warm-up: kernels chosen, workspaces allocated
    times = []
    tokens = None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        out = run_checked(lambda: generate(args.new_tokens))
        times.append(time.perf_counter() - t0)
        new = out[:, args.prompt:].cpu().tolist()
        if tokens is not None and new != tokens:
            raise SystemExit("greedy tokens differ between two runs of one allocator")
        tokens = new
    result = {
        "allocator": args.allocator,
        "alloc_conf": conf,
        "tok_per_s": args.batch * args.new_tokens / statistics.median(times),
        "seconds": times,
        "tokens_sha256": hashlib.sha256(json.dumps(tokens).encode()).hexdigest(),
        "tokens_head": [row[:16] for row in tokens],
        "device_free_bytes": torch.cuda.mem_get_info()[0],
    }
    if ortmem_torch:
        stats = ortmem_torch.memory_stats()
        result.update(
            peak_allocated_bytes=stats["allocated_bytes.all.peak"],
            peak_reserved_bytes=stats["reserved_bytes.all.peak"],
            reserved_bytes=stats["reserved_bytes.all.current"],
            allocated_bytes=stats["allocated_bytes.all.current"],
            ortmem_cache_mib=args.cache_mib,
            ortmem=stats)
    else:
        result.update(
            peak_allocated_bytes=torch.cuda.max_memory_allocated(),
            peak_reserved_bytes=torch.cuda.max_memory_reserved(),
            reserved_bytes=torch.cuda.memory_reserved(),
            allocated_bytes=torch.cuda.memory_allocated())
    result["reserved_over_allocated"] = (
        result["peak_reserved_bytes"] / max(1, result["peak_allocated_bytes"]) - 1)
    print("RESULT " + json.dumps(result))


def parent(args):
    runs = {}
    failures = []
    for name, (allocator, conf, cache) in RUNS.items():
        if args.only and name not in args.only.split(","):
            continue
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--allocator", allocator,
               "--seed", str(args.seed), "--batch", str(args.batch), "--prompt",
               str(args.prompt), "--new-tokens", str(args.new_tokens), "--repeats",
               str(args.repeats)]
        if cache is not None:
            cmd += ["--cache-mib", str(cache)]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                  timeout=args.timeout)
        except subprocess.TimeoutExpired as expired:
            failures.append(name)
            runs[name] = {"error": "timed out after %d s" % args.timeout,
                          "stderr_tail": (expired.stderr or b"")[-3000:].decode("utf-8", "replace")
                          if isinstance(expired.stderr, bytes) else str(expired.stderr)[-3000:]}
            continue
        line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        if proc.returncode != 0 or not line:
            failures.append(name)
            runs[name] = {"error": "rc %d" % proc.returncode,
                          "stderr_tail": proc.stderr[-3000:]}
            continue
        runs[name] = json.loads(line[-1][len("RESULT "):])
    checks = {}
    base = runs.get("caching", {})
    if "tokens_sha256" in base:
        checks["tokens_identical"] = {
            name: r.get("tokens_sha256") == base["tokens_sha256"] for name, r in runs.items()}
        for name, r in runs.items():
            if r.get("allocator") == "ortmem":
                checks[name + "_reserved_overhead"] = r["reserved_over_allocated"]
                checks[name + "_reserved_goal_met"] = r["reserved_over_allocated"] <= 0.02
                ratio = r["tok_per_s"] / base["tok_per_s"]
                checks[name + "_tok_per_s_vs_caching"] = ratio
                checks[name + "_tok_per_s_goal_met"] = ratio >= 0.97
                exp = runs.get("caching_expandable", {})
                if "tok_per_s" in exp:
                    checks[name + "_tok_per_s_vs_expandable"] = r["tok_per_s"] / exp["tok_per_s"]
    identical = all(checks.get("tokens_identical", {None: False}).values())
    summary = {"model": "LlamaForCausalLM, SmolLM2-135M shape, random weights, fp16",
               "seed": args.seed, "batch": args.batch, "prompt_tokens": args.prompt,
               "new_tokens": args.new_tokens, "repeats": args.repeats, "runs": runs,
               "checks": checks, "failed_runs": failures, "ok": identical and not failures}
    print(json.dumps(summary, indent=2))
    return 0 if summary["ok"] else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--allocator", choices=["caching", "ortmem"], default="caching")
    p.add_argument("--cache-mib", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=int, default=300, help="seconds per run")
    p.add_argument("--only", help="comma-separated run names (%s)" % ", ".join(RUNS))
    args = p.parse_args()
    if args.child:
        child(args)
        return 0
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
