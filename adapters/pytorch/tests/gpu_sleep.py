#!/usr/bin/env python3
"""Sleep and wake of a model's weights on one GPU, with ortmem as PyTorch's
allocator (ortmem_torch.install), then the same in a torch.cuda.MemPool
(ortmem_torch.pool) in a second process, then a budget breach in each.

Install mode (this process):
  1. A LlamaForCausalLM with SmolLM2-135M's shape, random weights (fixed
     seed), fp16, its weights in tag "weights"; greedy tokens A.
  2. A CUDA graph captured before sleep: logits = x @ W^T into a static
     output, W the tied embedding (a weight); its output is kept.
  3. sleep("weights", backup=True): the ledger's freed bytes (the weights'
     owned bytes) and torch.cuda.mem_get_info's freed bytes agree; while
     asleep the freed memory serves another tag.
  4. wake("weights"): every parameter's data_ptr() is the same, every
     parameter's bytes are the same (checksums), greedy tokens are A again,
     and the graph recorded before sleep replays to the same output.
  5. A budget breach: torch.cuda.OutOfMemoryError naming requested,
     available and limit; the ledger has not moved (nothing leaked).
Pool mode (--mode pool, run as a child): weights loaded inside
ortmem_torch.pool("weights"), sleep and wake, tokens A again, and a breach
inside the pool is torch.cuda.OutOfMemoryError with the ledger's message.

Prints one JSON object with every check; exit status 0 when all passed.
"""

import argparse
import json
import os
import subprocess
import sys

# The package beside this folder, when PYTHONPATH does not name it.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MiB = 1 << 20
SMOLLM2_135M = dict(
    vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
    rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, hidden_act="silu",
    bos_token_id=0, eos_token_id=0, pad_token_id=0)


class Checks:
    def __init__(self):
        self.items = {}

    def check(self, name, ok, **details):
        self.items[name] = dict(ok=bool(ok), **details)
        return ok

    def ok(self):
        return all(c["ok"] for c in self.items.values())


def build_model(torch, seed, to_cuda):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M)).eval()
    return to_cuda(model)


def greedy(torch, model, seed, n=48):
    gen = torch.Generator().manual_seed(seed + 1)
    prompt = torch.randint(1, SMOLLM2_135M["vocab_size"], (2, 24), generator=gen).cuda()
    with torch.inference_mode():
        out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                             do_sample=False, max_new_tokens=n, min_new_tokens=n,
                             pad_token_id=0)
    torch.cuda.synchronize()
    return out[:, prompt.shape[1]:].cpu().tolist()


def checksums(torch, model):
    with torch.inference_mode():
        return [float(p.detach().float().sum().item()) for p in model.parameters()]


def breach(torch, ortmem_torch, checks, prefix, allocate):
    """Lowers the budget to what is owned plus 64 MiB and asks for more than
    the whole new budget (no reclaim can make room for it)."""
    stats = ortmem_torch.memory_stats()
    owned = stats["owned_bytes.all.current"]
    limit = stats["ortmem.limit_bytes"]
    ortmem_torch.set_budget(owned + 64 * MiB)
    message, raised = "", None
    try:
        allocate(owned + 128 * MiB)
    except torch.cuda.OutOfMemoryError as error:
        raised, message = type(error).__name__, str(error)
    after = ortmem_torch.memory_stats()
    ortmem_torch.set_budget(limit)
    checks.check(prefix + "breach_is_out_of_memory_error", raised is not None, raised=raised)
    checks.check(prefix + "breach_message_names_the_numbers",
                 all(w in message for w in ("requested", "available", "limit")),
                 message=message[:600])
    checks.check(prefix + "breach_leaks_nothing",
                 after["owned_bytes.all.current"] <= owned
                 and after["allocated_bytes.all.current"] <= stats["allocated_bytes.all.current"],
                 owned_before=owned, owned_after=after["owned_bytes.all.current"])


def capture_graph(torch, model, checks):
    """A graph recorded before sleep that reads a weight: logits = x @ W^T.
    Inputs and output exist before capture, so the capture allocates nothing
    of ours but cuBLAS's workspace (relaxed mode lets that commit run during
    capture). Returns (graph, input, output, expected output), or Nones when
    PyTorch refused to capture under the pluggable allocator (a failed check).
    The caller keeps the input alive while the graph may replay: under a
    pluggable allocator the graph holds no reference to the memory it reads,
    so a freed input's bytes go to the next allocation."""
    try:
        weight = model.get_input_embeddings().weight
        static_x = torch.randn(4, weight.shape[1], device="cuda", dtype=torch.float16)
        static_y = torch.empty(4, weight.shape[0], device="cuda", dtype=torch.float16)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.inference_mode():
            for _ in range(3):
                torch.matmul(static_x, weight.t(), out=static_y)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph, capture_error_mode="relaxed"):
            torch.matmul(static_x, weight.t(), out=static_y)
        graph.replay()
        torch.cuda.synchronize()
        checks.check("graph_captured_before_sleep", True)
        return graph, static_x, static_y, static_y.clone()
    except Exception as error:  # reported, and the rest still runs
        checks.check("graph_captured_before_sleep", False, error=repr(error)[:600])
        return None, None, None, None


def install_mode(args):
    import ortmem_torch
    ortmem_torch.install()
    import torch
    checks = Checks()

    def to_cuda(model):
        with ortmem_torch.tag("weights"):
            return model.to(device="cuda", dtype=torch.float16)

    model = build_model(torch, args.seed, to_cuda)
    tokens_a = greedy(torch, model, args.seed)
    ptrs = [p.data_ptr() for p in model.parameters()]
    sums = checksums(torch, model)

    graph, static_x, static_y, reference = capture_graph(torch, model, checks)

    torch.cuda.synchronize()
    ortmem_torch.flush()
    before = ortmem_torch.memory_stats()
    free_before = torch.cuda.mem_get_info()[0]
    ortmem_torch.sleep("weights", backup=True)
    free_after = torch.cuda.mem_get_info()[0]
    asleep = ortmem_torch.memory_stats()
    ledger_freed = before["owned_bytes.weights.current"] - asleep["owned_bytes.weights.current"]
    device_freed = free_after - free_before
    checks.check("sleep_gives_the_weights_bytes_back",
                 asleep["asleep.weights"] == 1 and asleep["owned_bytes.weights.current"] == 0
                 and ledger_freed > 0,
                 ledger_freed=ledger_freed, backup_bytes=asleep["backup_bytes.weights"])
    # The driver rounds what it reports; allow a granule either way.
    checks.check("ledger_and_cudaMemGetInfo_agree", abs(device_freed - ledger_freed) <= 2 * MiB,
                 ledger_freed=ledger_freed, device_freed=device_freed)
    with ortmem_torch.tag("kv"):
        borrowed = torch.empty(ledger_freed // 2, dtype=torch.uint8, device="cuda")
        borrowed.fill_(7)
        torch.cuda.synchronize()
        del borrowed
    ortmem_torch.flush()

    ortmem_torch.wake("weights")
    awake = ortmem_torch.memory_stats()
    # Extents only cached before the sleep (no live tensor) are not committed again.
    checks.check("wake_recommits", awake["asleep.weights"] == 0
                 and awake["allocated_bytes.weights.current"]
                 <= awake["owned_bytes.weights.current"]
                 <= before["owned_bytes.weights.current"],
                 owned=awake["owned_bytes.weights.current"],
                 owned_before_sleep=before["owned_bytes.weights.current"])
    checks.check("wake_keeps_every_address", [p.data_ptr() for p in model.parameters()] == ptrs)
    checks.check("wake_restores_every_byte", checksums(torch, model) == sums)
    tokens_b = greedy(torch, model, args.seed)
    checks.check("tokens_identical_after_wake", tokens_b == tokens_a, head=tokens_b[0][:12])
    if graph is not None:
        static_y.zero_()
        graph.replay()
        torch.cuda.synchronize()
        checks.check("graph_recorded_before_sleep_replays_after_wake",
                     bool(torch.equal(static_y, reference)))

    def allocate(n):
        with ortmem_torch.checked():
            torch.empty(n, dtype=torch.uint8, device="cuda")

    breach(torch, ortmem_torch, checks, "install_", allocate)
    return checks, tokens_a


def pool_mode(args):
    import torch
    import ortmem_torch
    checks = Checks()
    if not hasattr(torch.cuda, "MemPool"):
        checks.check("pool_mode_skipped_no_MemPool", True, torch=torch.__version__)
        return checks, None

    def to_cuda(model):
        with ortmem_torch.pool("weights"):
            return model.to(device="cuda", dtype=torch.float16)

    model = build_model(torch, args.seed, to_cuda)
    tokens_a = greedy(torch, model, args.seed)
    ptrs = [p.data_ptr() for p in model.parameters()]
    before = ortmem_torch.memory_stats()
    ortmem_torch.sleep("weights", backup=True)
    asleep = ortmem_torch.memory_stats()
    checks.check("pool_sleep_gives_the_bytes_back", asleep["owned_bytes.weights.current"] == 0,
                 ledger_freed=before["owned_bytes.weights.current"])
    ortmem_torch.wake("weights")
    checks.check("pool_wake_keeps_every_address",
                 [p.data_ptr() for p in model.parameters()] == ptrs)
    checks.check("pool_tokens_identical_after_wake", greedy(torch, model, args.seed) == tokens_a)

    def allocate(n):
        with ortmem_torch.pool("kv"):
            torch.empty(n, dtype=torch.uint8, device="cuda")

    breach(torch, ortmem_torch, checks, "pool_", allocate)
    return checks, tokens_a


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=["install", "pool", "both"], default="both")
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args()
    if args.mode == "pool":
        checks, tokens = pool_mode(args)
        print("RESULT " + json.dumps({"checks": checks.items, "tokens": tokens}))
        return 0 if checks.ok() else 1
    checks, tokens = install_mode(args)
    result = {"install": checks.items, "ok": checks.ok()}
    if args.mode == "both":
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--mode", "pool",
                               "--seed", str(args.seed)], capture_output=True, text=True,
                              timeout=600)
        line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        if line:
            pool = json.loads(line[-1][len("RESULT "):])
            result["pool"] = pool["checks"]
            result["pool_tokens_match_install"] = pool["tokens"] in (None, tokens)
            result["ok"] = (result["ok"] and all(c["ok"] for c in pool["checks"].values())
                            and result["pool_tokens_match_install"])
        else:
            result["pool"] = {"error": "rc %d" % proc.returncode,
                              "stderr_tail": proc.stderr[-3000:]}
            result["ok"] = False
    print(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
