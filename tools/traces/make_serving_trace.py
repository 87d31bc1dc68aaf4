#!/usr/bin/env python3
"""Generates serving.trace: the allocation trace of a small inference server.

Usage: python3 tools/traces/make_serving_trace.py [OUTPUT]
       (OUTPUT defaults to serving.trace next to this script; '-' is stdout)

The output is deterministic (fixed seed, standard library only), so the
committed serving.trace changes only when this script does. Regenerate it with
the command above after editing, and commit both.

What it simulates, in trace terms (format: tools/replay/README.md):
- four holders, the accounts the engine's memory is charged to: `weights`
  (role weights), `kv` (role kv: the sequences), `prefix-cache` (role kv,
  reclaimable at the lowest priority: the shared system prompts, which a
  replay under --budget may decommit when a commit needs room and no sequence
  maps them) and `workspace` (role workspace); allocations name theirs with
  `@HOLDER`, regions with a last field;
- startup: the weights of an 8-layer model (hidden 512, vocab 16000, fp16),
  68 MiB in 50 tensors, plus GEMM and RoPE workspaces, allocated from the arena;
- two system prompts (chat, code) prefilled once into their own KV regions;
- requests arriving over time, served by continuous batching (at most 8
  sequences, chunked prefill of at most 512 tokens per step); each sequence
  gets a KV region of 64 MiB of VA (4096 tokens x 16 KiB) and commits it a
  16-token block at a time as its tokens are appended;
- most sequences start with a system prompt: its granules are mapped into the
  sequence's region read-only with `share`, and the private tokens follow;
- when private KV exceeds a budget the newest sequence is preempted (its
  private blocks decommitted) and later recomputed; a finished sequence is
  decommitted and destroyed;
- every step allocates and frees activation workspaces (hidden states, QKV,
  MLP, logits, sampled tokens) of mixed sizes and alignments, reusing IDs.

The KV offsets are multiples of 2 MiB where a share needs them, so the trace
replays on any granule up to 2 MiB.
"""
import os
import random
import sys

SEED = 7
KiB = 1024
MiB = 1024 * KiB

# Model (fp16).
LAYERS = 8
HIDDEN = 512
HEADS = 8
HEAD_DIM = 64
INTERMEDIATE = 1536
VOCAB = 16000
FP16 = 2
KV_PER_TOKEN = LAYERS * 2 * HEADS * HEAD_DIM * FP16  # K and V: 16 KiB
BLOCK_TOKENS = 16  # KV is committed one block at a time
BLOCK_BYTES = BLOCK_TOKENS * KV_PER_TOKEN
MAX_CONTEXT = 4096
KV_REGION_BYTES = MAX_CONTEXT * KV_PER_TOKEN  # 64 MiB of VA per sequence

# Serving.
MAX_BATCH = 8
PREFILL_CHUNK = 512
PRIVATE_KV_BUDGET = 60 * MiB  # above this the newest sequence is preempted
REQUESTS = 36
SYSTEM_PROMPTS = {"chat": 256, "code": 384}  # tokens; both end on a 2 MiB boundary

# Holders: name, role, priority (higher is more important), reclaimable.
HOLDERS = [
    ("weights", "weights", 100, False),
    ("workspace", "workspace", 90, False),
    ("kv", "kv", 50, False),
    ("prefix-cache", "kv", 10, True),
]
WEIGHTS, WORKSPACE, KV, PREFIX_CACHE = "@weights", "@workspace", "kv", "prefix-cache"


def size(n):
    """Bytes as a trace writes them: with a suffix when it is exact."""
    if n >= MiB and n % MiB == 0:
        return f"{n // MiB}MiB"
    if n >= 64 * KiB and n % KiB == 0:
        return f"{n // KiB}KiB"
    return str(n)


def round_up(n, to):
    return (n + to - 1) // to * to


class Sequence:
    def __init__(self, number, arrival, system, user_tokens, gen_tokens):
        self.id = f"kv.seq{number}"
        self.number = number
        self.arrival = arrival
        self.system = system  # system prompt name or None
        self.prefix_tokens = SYSTEM_PROMPTS[system] if system else 0
        self.user_tokens = user_tokens
        self.gen_tokens = gen_tokens
        self.started = False
        self.computed = 0  # private tokens whose KV is written
        self.generated = 0
        self.committed_blocks = 0  # private blocks committed

    def private_target(self):
        """Private tokens that must be computed before the next decode."""
        return self.user_tokens + self.generated

    def private_offset(self):
        return self.prefix_tokens * KV_PER_TOKEN

    def private_kv_bytes(self):
        return self.committed_blocks * BLOCK_BYTES

    def done(self):
        return self.generated >= self.gen_tokens


class Trace:
    def __init__(self):
        self.lines = []

    def op(self, *fields):
        self.lines.append(" ".join(str(f) for f in fields))

    def comment(self, text):
        self.lines.append(f"# {text}")

    def commit_private(self, seq, tokens):
        """Commits blocks so that `tokens` private tokens fit; one commit line."""
        need = -(-tokens // BLOCK_TOKENS)
        if need <= seq.committed_blocks:
            return
        offset = seq.private_offset() + seq.committed_blocks * BLOCK_BYTES
        length = (need - seq.committed_blocks) * BLOCK_BYTES
        self.op("commit", seq.id, size(offset), size(length))
        seq.committed_blocks = need


def holders(trace):
    trace.comment("holders: NAME ROLE PRIORITY [reclaimable]; pressure asks the lowest first")
    for name, role, priority, reclaimable in HOLDERS:
        trace.op("holder", name, role, priority, *(["reclaimable"] if reclaimable else []))


def weights(trace):
    trace.comment("startup: weights (8 layers, hidden 512, vocab 16000, fp16) and workspaces")
    trace.op("alloc", "w.embed", size(VOCAB * HIDDEN * FP16), 4096, WEIGHTS)
    for layer in range(LAYERS):
        p = f"w.l{layer}"
        trace.op("alloc", f"{p}.attn_norm", HIDDEN * FP16, WEIGHTS)
        trace.op("alloc", f"{p}.qkv", size(HIDDEN * 3 * HEADS * HEAD_DIM * FP16), 4096, WEIGHTS)
        trace.op("alloc", f"{p}.o", size(HEADS * HEAD_DIM * HIDDEN * FP16), 4096, WEIGHTS)
        trace.op("alloc", f"{p}.mlp_norm", HIDDEN * FP16, WEIGHTS)
        trace.op("alloc", f"{p}.gate_up", size(HIDDEN * 2 * INTERMEDIATE * FP16), 65536, WEIGHTS)
        trace.op("alloc", f"{p}.down", size(INTERMEDIATE * HIDDEN * FP16), 65536, WEIGHTS)
    trace.op("alloc", "w.final_norm", HIDDEN * FP16, WEIGHTS)
    trace.op("alloc", "ws.gemm", size(4 * MiB), 4096, WORKSPACE)
    trace.op("alloc", "ws.rope_cache", size(MAX_CONTEXT * HEAD_DIM * 4), 512, WORKSPACE)


def system_prompts(trace):
    trace.comment("startup: system prompts prefilled once, shared read-only by sequences")
    for name, tokens in SYSTEM_PROMPTS.items():
        rid = f"kv.sys.{name}"
        trace.op("region", rid, size(round_up(tokens * KV_PER_TOKEN, 2 * MiB)), PREFIX_CACHE)
        trace.op("commit", rid, 0, size(tokens * KV_PER_TOKEN))


def activations(trace, rng, tokens, logits_rows):
    """One forward pass over `tokens` tokens, sampling `logits_rows` of them."""
    trace.op("alloc", "act.hidden", size(tokens * HIDDEN * FP16), 256, WORKSPACE)
    trace.op("alloc", "act.qkv", size(tokens * 3 * HEADS * HEAD_DIM * FP16), 256, WORKSPACE)
    trace.op("free", "act.qkv")
    trace.op("alloc", "act.mlp", size(tokens * 2 * INTERMEDIATE * FP16),
             rng.choice([256, 4096, 65536]), WORKSPACE)
    trace.op("free", "act.mlp")
    if logits_rows:
        trace.op("alloc", "act.logits", size(logits_rows * VOCAB * 4), 512, WORKSPACE)
        trace.op("alloc", "act.tokens", logits_rows * 4, 64, WORKSPACE)
        trace.op("free", "act.logits")
    trace.op("free", "act.hidden")
    if logits_rows:
        trace.op("free", "act.tokens")


def serve(trace, rng):
    pending = []
    for number in range(REQUESTS):
        arrival = number * 9 + rng.randint(0, 8)  # roughly one request per 9 steps
        system = rng.choices(["chat", "code", None], weights=[5, 3, 2])[0]
        user = rng.randint(24, 640)
        gen = rng.randint(12, 160)
        pending.append(Sequence(number, arrival, system, user, gen))
    waiting, running, step = [], [], 0
    preemptions = 0
    while pending or waiting or running:
        while pending and pending[0].arrival <= step:
            seq = pending.pop(0)
            waiting.append(seq)
            trace.comment(
                f"step {step}: request {seq.number} arrives ({seq.system or 'no'} system prompt, "
                f"{seq.user_tokens} prompt tokens, {seq.gen_tokens} to generate)")
        while waiting and len(running) < MAX_BATCH:
            # Admit only what fits the KV budget with its whole prompt.
            seq = waiting[0]
            need = (seq.user_tokens + seq.generated) * KV_PER_TOKEN
            if running and sum(s.private_kv_bytes() for s in running) + need > PRIVATE_KV_BUDGET:
                break
            waiting.pop(0)
            if not seq.started:
                seq.started = True
                trace.op("region", seq.id, size(KV_REGION_BYTES), KV)
                if seq.system:
                    tokens = SYSTEM_PROMPTS[seq.system]
                    trace.op("share", seq.id, 0, f"kv.sys.{seq.system}", 0,
                             size(tokens * KV_PER_TOKEN))
            running.append(seq)
        if not running:
            step += 1
            continue

        # One step: a prefill chunk for at most one sequence, a token for the rest.
        budget = PREFILL_CHUNK
        step_tokens, logits_rows = 0, 0
        for seq in running:
            target = seq.private_target()
            if seq.computed < target:
                if budget == 0:
                    continue
                chunk = min(target - seq.computed, budget)
                budget -= chunk
                trace.commit_private(seq, seq.computed + chunk)
                seq.computed += chunk
                step_tokens += chunk
                if seq.computed == target:
                    logits_rows += 1
                    seq.generated += 1
            else:
                trace.commit_private(seq, seq.computed + 1)
                seq.computed += 1
                step_tokens += 1
                logits_rows += 1
                seq.generated += 1
        activations(trace, rng, step_tokens, logits_rows)

        for seq in [s for s in running if s.done()]:
            running.remove(seq)
            trace.comment(f"step {step}: request {seq.number} finished after "
                          f"{seq.generated} tokens")
            trace.op("decommit", seq.id, 0, size(KV_REGION_BYTES))
            trace.op("destroy", seq.id)

        # Preempt the newest sequence while private KV is over budget; its
        # tokens are recomputed when it is scheduled again.
        while sum(s.private_kv_bytes() for s in running) > PRIVATE_KV_BUDGET and len(running) > 1:
            seq = running.pop()
            preemptions += 1
            trace.comment(f"step {step}: request {seq.number} preempted ({seq.computed} private "
                          f"tokens dropped, recomputed later)")
            trace.op("decommit", seq.id, size(seq.private_offset()),
                     size(KV_REGION_BYTES - seq.private_offset()))
            seq.computed = 0
            seq.committed_blocks = 0
            waiting.insert(0, seq)
        step += 1
    return step, preemptions


def shutdown(trace):
    trace.comment("shutdown")
    for name in SYSTEM_PROMPTS:
        trace.op("destroy", f"kv.sys.{name}")
    trace.op("free", "ws.rope_cache")
    trace.op("free", "ws.gemm")
    trace.op("free", "w.final_norm")
    for layer in reversed(range(LAYERS)):
        for part in ("down", "gate_up", "mlp_norm", "o", "qkv", "attn_norm"):
            trace.op("free", f"w.l{layer}.{part}")
    trace.op("free", "w.embed")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    output = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "serving.trace")
    rng = random.Random(SEED)
    trace = Trace()
    holders(trace)
    weights(trace)
    system_prompts(trace)
    steps, preemptions = serve(trace, rng)
    shutdown(trace)
    header = [
        "# ortmem trace v1: a small inference server (serving.trace)",
        "# GENERATED by tools/traces/make_serving_trace.py (seed %d); do not edit by hand." % SEED,
        "# Regenerate: python3 tools/traces/make_serving_trace.py",
        "# Replay:     ortmem-replay tools/traces/serving.trace [--budget 128MiB]",
        "# %d requests over %d steps, at most %d in a batch, %d preemptions; KV %d KiB per token,"
        % (REQUESTS, steps, MAX_BATCH, preemptions, KV_PER_TOKEN // KiB),
        "# committed %d tokens (%d KiB) at a time. Share offsets assume a granule of at most 2 MiB."
        % (BLOCK_TOKENS, BLOCK_BYTES // KiB),
    ]
    text = "\n".join(header + trace.lines) + "\n"
    if output == "-":
        sys.stdout.write(text)
    else:
        with open(output, "w", encoding="ascii") as f:
            f.write(text)


if __name__ == "__main__":
    main()
