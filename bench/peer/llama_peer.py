#!/usr/bin/env python3
"""llama.cpp's speed and memory on the default model, and the engine's
(ortmem-decode) beside it when it is built.

Run through bench/peer/run.sh, which finds the python of scripts/llama-env.sh
and the model. Each repetition is a fresh process for each side, the sides
taking turns: llama.cpp (llama-cpp-python, greedy, the model loaded as
scripts/llama-reference.py loads it) evaluates a 128-token prompt in one batch
(prefill tok/s), then decodes 128 tokens one at a time (decode tok/s); model
loading is not timed. Peak RSS is each process's maximum resident set
(getrusage of the finished child through wait4), the Python interpreter and
the mapped model file included. The medians over the repetitions are reported.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# 128 tokens with SmolLM2's tokenizer (no BOS); the child reports the count.
PROMPT = ("Memory for a language model's inference is spent in three places: the weights, which "
          "are read once per token and never change; the activations, which live only as long as "
          "one layer's computation; and the key-value cache, which grows by one row per token for "
          "every layer and every attention head. A server that keeps many conversations open at "
          "once must decide, again and again, which caches stay resident, which move to slower "
          "memory, and which are dropped and recomputed later. The decision is cheap when the "
          "cache is laid out in pages of equal size, and each page can then move on its own.")


def child(args):
    """One llama.cpp measurement, in its own process; a JSON line on stdout."""
    import resource

    rss_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    import llama_cpp
    import numpy as np

    rss_imported_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=512, n_threads=args.threads,
                          n_threads_batch=args.threads, n_batch=512, seed=0, logits_all=False,
                          verbose=False, flash_attn=False)
    n_vocab = llm.n_vocab()
    ids = llm.tokenize(PROMPT.encode("utf-8"), add_bos=False, special=False)
    if len(ids) + args.decode > 512:
        raise SystemExit("llama_peer: %d prompt + %d decoded tokens exceed n_ctx 512"
                         % (len(ids), args.decode))

    def next_token():
        ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(ptr, shape=(n_vocab,))))

    start = time.perf_counter()
    llm.eval(ids)
    prefill_s = time.perf_counter() - start
    token = next_token()
    start = time.perf_counter()
    for _ in range(args.decode):
        llm.eval([token])
        token = next_token()
    decode_s = time.perf_counter() - start
    json.dump({"prompt_tokens": len(ids), "decoded_tokens": args.decode,
               "prefill_tok_s": len(ids) / prefill_s, "decode_tok_s": args.decode / decode_s,
               "rss_interpreter_kib": rss_before_kib, "rss_imported_kib": rss_imported_kib},
              sys.stdout)
    print()


def run_measured(cmd, env=None):
    """Runs cmd; returns (stdout, its peak RSS in KiB) or raises with its stderr."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = proc.stdout.read(), proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError("%s exited with %d: %s" % (cmd[0], proc.returncode,
                                                        err.decode("utf-8", "replace")[-2000:]))
    return out.decode("utf-8"), usage.ru_maxrss


def last_json_object(text):
    """The report: all of stdout, else the last object that starts a line
    and runs to the end (ortmem-decode may print text before it)."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    lines = text.splitlines()
    for i in reversed(range(len(lines))):
        if lines[i].lstrip().startswith("{"):
            try:
                return json.loads("\n".join(lines[i:]))
            except ValueError:
                continue
    raise ValueError("no JSON report in: %s" % text[-500:])


def summary(runs):
    keys = ("prefill_tok_s", "decode_tok_s", "peak_rss_kib")
    return {k: {"median": statistics.median(r[k] for r in runs), "min": min(r[k] for r in runs),
                "max": max(r[k] for r in runs)} for k in keys}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--decoder", default=None,
                    help="ortmem-decode binary (default build/tools/decode/ortmem-decode)")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    decoder = args.decoder or os.path.join(root, "build", "tools", "decode", "ortmem-decode")
    have_decoder = os.access(decoder, os.X_OK)
    llama_cmd = [sys.executable, os.path.abspath(__file__), "--child", "--model", args.model,
                 "--threads", str(args.threads), "--decode", str(args.decode)]
    decoder_cmd = [decoder, "-p", PROMPT, "-n", str(args.decode), "--threads",
                   str(args.threads), "--json"]
    decoder_env = dict(os.environ, ORTMEM_MODEL=args.model)

    load_before = os.getloadavg()
    llama_runs, decoder_runs = [], []
    for rep in range(args.reps):
        # Alternate which side goes first, so neither always follows the other.
        order = ["llama", "decoder"] if rep % 2 == 0 else ["decoder", "llama"]
        for side in order:
            if side == "llama":
                out, rss = run_measured(llama_cmd)
                run = last_json_object(out)
                run["peak_rss_kib"] = rss
                llama_runs.append(run)
            elif have_decoder:
                out, rss = run_measured(decoder_cmd, env=decoder_env)
                report = last_json_object(out)
                run = {"prefill_tok_s": float(report["prefill_tok_s"]),
                       "decode_tok_s": float(report["decode_tok_s"]), "peak_rss_kib": rss}
                prompt = report.get("prompt_tokens")
                if prompt is not None:
                    run["prompt_tokens"] = len(prompt) if isinstance(prompt, list) else int(prompt)
                decoder_runs.append(run)
        print("llama_peer: repetition %d of %d done" % (rep + 1, args.reps), file=sys.stderr)
    load_after = os.getloadavg()

    result = {
        "model": os.path.basename(args.model),
        "model_bytes": os.path.getsize(args.model),
        "threads": args.threads,
        "prompt_tokens": llama_runs[0]["prompt_tokens"],
        "decoded_tokens": args.decode,
        "repetitions": args.reps,
        "load_average_before_after": [load_before[0], load_after[0]],
        "llama_cpp": {"runs": llama_runs, **summary(llama_runs)},
        "ortmem_decode": None,
        "ratio_ortmem_over_llama_cpp": None,
    }
    if have_decoder:
        result["ortmem_decode"] = {"binary": decoder, "runs": decoder_runs,
                                   **summary(decoder_runs)}
        result["ratio_ortmem_over_llama_cpp"] = {
            k: result["ortmem_decode"][k]["median"] / result["llama_cpp"][k]["median"]
            for k in ("prefill_tok_s", "decode_tok_s", "peak_rss_kib")}
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
        return

    print("%s, %d threads, %d-token prompt, %d decoded tokens, median of %d interleaved "
          "repetitions (min-max); load average %.2f before, %.2f after"
          % (result["model"], args.threads, result["prompt_tokens"], args.decode, args.reps,
             load_before[0], load_after[0]))
    print("%-16s %24s %24s %24s" % ("", "prefill tok/s", "decode tok/s", "peak RSS MiB"))
    rows = [("llama.cpp", result["llama_cpp"])]
    if have_decoder:
        rows.append(("ortmem-decode", result["ortmem_decode"]))
    for name, s in rows:
        cells = []
        for k, scale in (("prefill_tok_s", 1), ("decode_tok_s", 1), ("peak_rss_kib", 1024)):
            cells.append("%.1f (%.1f-%.1f)" % (s[k]["median"] / scale, s[k]["min"] / scale,
                                               s[k]["max"] / scale))
        print("%-16s %24s %24s %24s" % (name, *cells))
    if have_decoder:
        r = result["ratio_ortmem_over_llama_cpp"]
        print("%-16s %24.2f %24.2f %24.2f" % ("ortmem/llama.cpp", r["prefill_tok_s"],
                                              r["decode_tok_s"], r["peak_rss_kib"]))
        counts = {r.get("prompt_tokens") for r in decoder_runs} - {None}
        if counts and counts != {result["prompt_tokens"]}:
            print("note: ortmem-decode tokenized the prompt into %s tokens, llama.cpp into %d"
                  % (", ".join(str(c) for c in sorted(counts)), result["prompt_tokens"]))
    else:
        print("ortmem-decode: not built (%s is missing), so llama.cpp alone" % decoder)
    print("llama.cpp's RSS includes the Python interpreter and llama-cpp-python's imports: "
          "%.1f MiB before the model was loaded" % (
              statistics.median(r["rss_imported_kib"] for r in llama_runs) / 1024))


if __name__ == "__main__":
    main()
