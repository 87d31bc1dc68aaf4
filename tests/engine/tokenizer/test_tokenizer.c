/* The engine's tokenizer on a vocabulary made up here: the byte alphabet,
 * BPE merge order, special tokens, the pre-tokenizer's splits, invalid
 * UTF-8, short buffers, chat templates. (test_tokenizer_model.c checks the
 * model's vocabulary against llama.cpp.) */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"

/* ---- a vocabulary made up here ---- */

#define B(s)                                                                                       \
    {                                                                                              \
        s, sizeof(s) - 1                                                                           \
    }

/* Byte-level texts: "\xc4\xa0" is U+0120, the character of the byte ' '. */
static const eng_bytes TINY_TOKENS[] = {
    B("a"),
    B("b"),
    B("c"),
    B("\xc4\xa0"),
    B("ab"),
    B("abc"),
    B("\xc4\xa0"
      "a"),
    B("<|x|>"),
    B("<u>"),
    B("<|x|>y"),
    B("\xc3\xa9"),
    B("<"),
    B("|"),
    B(">"),
    B("x"),
};
enum {
    T_A,
    T_B,
    T_C,
    T_SP,
    T_AB,
    T_ABC,
    T_SPA,
    T_CTRL,
    T_USER,
    T_CTRL_LONG,
    T_E_ACUTE,
    T_LT,
    T_BAR,
    T_GT,
    T_X
};
static const int32_t TINY_TYPES[] = {1, 1, 1, 1, 1, 1, 1, 3, 4, 3, 1, 1, 1, 1, 1};
/* "a b" ranks before "\xc4\xa0 a": " ab" becomes " " + "ab", not " a" + "b". */
static const eng_bytes TINY_MERGES[] = {B("a b"), B("ab c"), B("\xc4\xa0 a")};

static eng_tokenizer *tiny(const char *pre)
{
    eng_tokenizer_spec spec = {
        .model = "gpt2",
        .pre = pre,
        .n_tokens = sizeof TINY_TOKENS / sizeof TINY_TOKENS[0],
        .tokens = TINY_TOKENS,
        .types = TINY_TYPES,
        .n_merges = sizeof TINY_MERGES / sizeof TINY_MERGES[0],
        .merges = TINY_MERGES,
        .bos = -1,
        .eos = T_CTRL,
        .unk = -1,
        .pad = -1,
        .eot = -1,
        .eom = -1,
    };
    eng_tokenizer *tok = NULL;
    eng_error err = {0};
    cr_assert_eq(eng_tokenizer_create_from_spec(&spec, &tok, &err), ORTMEM_OK, "%s", err.message);
    return tok;
}

static size_t encode(const eng_tokenizer *tok, const char *s, bool special, int32_t *ids,
                     size_t cap)
{
    size_t n = 0;
    eng_error err = {0};
    cr_assert_eq(eng_tokenize(tok, s, strlen(s), special, ids, cap, &n, &err), ORTMEM_OK, "%s",
                 err.message);
    return n;
}

#define ASSERT_IDS(got, n, ...)                                                                    \
    do {                                                                                           \
        const int32_t want_[] = {__VA_ARGS__};                                                     \
        cr_assert_eq((n), sizeof want_ / sizeof want_[0], "count %zu", (size_t)(n));               \
        for (size_t i_ = 0; i_ < (n); i_++)                                                        \
            cr_assert_eq((got)[i_], want_[i_], "id %zu: %d, want %d", i_, (got)[i_], want_[i_]);   \
    } while (0)

Test(tokenizer_core, byte_alphabet_round_trips)
{
    for (unsigned b = 0; b < 256; b++)
        cr_assert_eq(eng_cp_to_byte(eng_byte_to_cp((uint8_t)b)), (int)b, "byte %u", b);
    cr_assert_eq(eng_byte_to_cp(' '), 0x120u);
    cr_assert_eq(eng_byte_to_cp('\n'), 0x10Au);
    cr_assert_eq(eng_byte_to_cp(0xAD), 0x143u); /* the soft hyphen is the last remapped */
    cr_assert_eq(eng_byte_to_cp('A'), (uint32_t)'A');
    cr_assert_eq(eng_cp_to_byte(0x144), -1);
}

Test(tokenizer_core, lowest_rank_merges_first)
{
    eng_tokenizer *tok = tiny("gpt2");
    int32_t ids[16];
    size_t n = encode(tok, "abc ab", false, ids, 16);
    ASSERT_IDS(ids, n, T_ABC, T_SP, T_AB);
    n = encode(tok, " a", false, ids, 16);
    ASSERT_IDS(ids, n, T_SPA);
    /* No token for "ca": the symbols stay as they are. */
    n = encode(tok, "cab", false, ids, 16);
    ASSERT_IDS(ids, n, T_C, T_AB);
    eng_tokenizer_destroy(tok);
}

Test(tokenizer_core, special_tokens_longest_first_and_only_when_asked)
{
    eng_tokenizer *tok = tiny("gpt2");
    int32_t ids[16];
    size_t n = encode(tok, "a<|x|>yb<|x|>", true, ids, 16);
    ASSERT_IDS(ids, n, T_A, T_CTRL_LONG, T_B, T_CTRL);
    /* User-defined tokens are matched either way; control ones only with
     * parse_special: without it "<|x|>" is text ('<', '|', 'x', ...). */
    n = encode(tok, "<u>", false, ids, 16);
    ASSERT_IDS(ids, n, T_USER);
    n = encode(tok, "<|x|>", false, ids, 16);
    ASSERT_IDS(ids, n, T_LT, T_BAR, T_X, T_BAR, T_GT);
    eng_tokenizer_destroy(tok);
}

Test(tokenizer_core, bytes_of_tokens)
{
    eng_tokenizer *tok = tiny("gpt2");
    char buf[8];
    size_t len = 0;
    eng_error err = {0};
    cr_assert_eq(eng_token_bytes(tok, T_SPA, buf, sizeof buf, &len, &err), ORTMEM_OK);
    cr_assert_eq(len, 2u);
    cr_assert_eq(memcmp(buf, " a", 2), 0);
    /* U+00E9 stands for the byte 0xE9 (half of nothing: a byte). */
    cr_assert_eq(eng_token_bytes(tok, T_E_ACUTE, buf, sizeof buf, &len, &err), ORTMEM_OK);
    cr_assert_eq(len, 1u);
    cr_assert_eq((unsigned char)buf[0], 0xE9u);
    cr_assert_eq(eng_token_bytes(tok, T_CTRL, buf, sizeof buf, &len, &err), ORTMEM_OK);
    cr_assert_eq(len, 5u);
    cr_assert_eq(memcmp(buf, "<|x|>", 5), 0);
    memset(buf, 'z', sizeof buf);
    cr_assert_eq(eng_token_bytes(tok, T_CTRL, buf, 4, &len, &err), ORTMEM_E_RANGE);
    cr_assert_eq(len, 5u);
    cr_assert_eq(buf[0], 'z');
    cr_assert_eq(eng_token_bytes(tok, 15, buf, sizeof buf, &len, &err), ORTMEM_E_RANGE);
    cr_assert(strstr(err.message, "id 15"), "%s", err.message);
    cr_assert_eq(eng_token_bytes(tok, -1, buf, sizeof buf, &len, &err), ORTMEM_E_RANGE);
    eng_tokenizer_destroy(tok);
}

Test(tokenizer_core, invalid_utf8_names_the_offset)
{
    eng_tokenizer *tok = tiny("gpt2");
    static const struct {
        const char *text;
        size_t len, offset;
    } cases[] = {
        {"ab\xc3(", 4, 2},            /* a lead byte without its continuation */
        {"abc\x80", 4, 3},            /* a lone continuation byte */
        {"a\xc0\x80", 3, 1},          /* an overlong NUL */
        {"x\xe0\x80\xaf", 4, 1},      /* an overlong '/' in three bytes */
        {"\xed\xa0\x80", 3, 0},       /* a surrogate */
        {"ab\xf4\x90\x80\x80", 6, 2}, /* past U+10FFFF */
        {"a\xe2\x82", 3, 1},          /* cut short at the end */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t ids[8] = {-7};
        size_t n = 99;
        eng_error err = {0};
        cr_assert_eq(eng_tokenize(tok, cases[i].text, cases[i].len, false, ids, 8, &n, &err),
                     ORTMEM_E_INVALID, "case %zu", i);
        char want[32];
        snprintf(want, sizeof want, "at byte %zu", cases[i].offset);
        cr_assert(strstr(err.message, want), "case %zu: %s", i, err.message);
        cr_assert_eq(n, 99u);
        cr_assert_eq(ids[0], -7);
    }
    eng_tokenizer_destroy(tok);
}

Test(tokenizer_core, too_small_buffer_changes_nothing)
{
    eng_tokenizer *tok = tiny("gpt2");
    int32_t ids[2] = {-5, -5};
    size_t n = 0;
    eng_error err = {0};
    cr_assert_eq(eng_tokenize(tok, "abc ab", 6, false, ids, 2, &n, &err), ORTMEM_E_RANGE);
    cr_assert_eq(n, 3u);
    cr_assert_eq(ids[0], -5);
    cr_assert_eq(ids[1], -5);
    cr_assert_eq(eng_tokenize(tok, "abc ab", 6, false, NULL, 0, &n, &err), ORTMEM_E_RANGE);
    cr_assert_eq(n, 3u);
    cr_assert_eq(eng_tokenize(tok, "", 0, false, NULL, 0, &n, &err), ORTMEM_OK);
    cr_assert_eq(n, 0u);
    eng_tokenizer_destroy(tok);
}

Test(tokenizer_core, unknown_pre_tokenizer_and_model_are_named)
{
    eng_tokenizer_spec spec = {.model = "gpt2",
                               .pre = "falcon",
                               .n_tokens = 3,
                               .tokens = TINY_TOKENS,
                               .bos = -1,
                               .eos = -1,
                               .unk = -1,
                               .pad = -1,
                               .eot = -1,
                               .eom = -1};
    eng_tokenizer *tok = NULL;
    eng_error err = {0};
    cr_assert_eq(eng_tokenizer_create_from_spec(&spec, &tok, &err), ORTMEM_E_UNSUPPORTED);
    cr_assert(strstr(err.message, "\"falcon\""), "%s", err.message);
    cr_assert_null(tok);
    spec.pre = "smollm";
    spec.model = "llama";
    cr_assert_eq(eng_tokenizer_create_from_spec(&spec, &tok, &err), ORTMEM_E_UNSUPPORTED);
    cr_assert(strstr(err.message, "\"llama\""), "%s", err.message);
    spec.model = "gpt2";
    spec.eos = 3; /* past the three tokens */
    cr_assert_eq(eng_tokenizer_create_from_spec(&spec, &tok, &err), ORTMEM_E_RANGE);
    cr_assert_null(tok);
}

/* Pieces as llama.cpp's gpt2 split makes them, through the words' bytes. */
static void assert_split(const char *pre, const char *text, const char *const *want)
{
    eng_pretokenizer *pt = NULL;
    bool ignore = false;
    eng_error err = {0};
    cr_assert_eq(eng_pretokenizer_create(pre, &pt, &ignore, &err), ORTMEM_OK, "%s", err.message);
    eng_span *spans = NULL;
    size_t n = 0;
    cr_assert_eq(eng_pretokenize(pt, text, strlen(text), &spans, &n, &err), ORTMEM_OK);
    size_t k = 0;
    for (; want[k]; k++) {
        cr_assert_lt(k, n, "%s: only %zu pieces", text, n);
        cr_assert_eq(spans[k].len, strlen(want[k]), "%s: piece %zu", text, k);
        cr_assert_eq(memcmp(text + spans[k].start, want[k], spans[k].len), 0, "%s: piece %zu", text,
                     k);
    }
    cr_assert_eq(n, k, "%s: %zu pieces, want %zu", text, n, k);
    free(spans);
    eng_pretokenizer_destroy(pt);
}

Test(tokenizer_core, pre_tokenizer_splits)
{
    /* Whitespace before a word keeps one space for the word; lone tabs and
     * newlines are pieces of their own; digits split one by one first. */
    assert_split("smollm", "a   b\tc 12x",
                 (const char *const[]){"a", "  ", " b", "\t", "c", " ", "1", "2", "x", NULL});
    assert_split("gpt2", "it's  ok 123",
                 (const char *const[]){"it", "'s", " ", " ok", " 123", NULL});
    /* Llama 3: contractions in any case, numbers by three, newlines apart. */
    assert_split("llama3", "I'LL 12345\n\n x",
                 (const char *const[]){"I", "'LL", " ", "123", "45", "\n\n", " x", NULL});
    assert_split("qwen2", "ab 12", (const char *const[]){"ab", " ", "1", "2", NULL});
}

/* ---- chat templates ---- */

Test(tokenizer_chat, chatml_uses_the_templates_default_system_message)
{
    static const char tmpl[] =
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\\nBe \\'kind\\'.<|im_end|>\\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
        "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
        "{% endif %}";
    const eng_chat_message user[] = {{"user", "Hi"}};
    char *out = NULL;
    eng_error err = {0};
    cr_assert_eq(eng_chat_render_template(tmpl, strlen(tmpl), NULL, user, 1, true, &out, &err),
                 ORTMEM_OK, "%s", err.message);
    cr_assert_str_eq(out, "<|im_start|>system\nBe 'kind'.<|im_end|>\n<|im_start|>user\nHi"
                          "<|im_end|>\n<|im_start|>assistant\n");
    free(out);
    const eng_chat_message sys[] = {{"system", "S"}, {"user", "U"}};
    cr_assert_eq(eng_chat_render_template(tmpl, strlen(tmpl), NULL, sys, 2, false, &out, &err),
                 ORTMEM_OK);
    cr_assert_str_eq(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n");
    free(out);
}

Test(tokenizer_chat, unknown_template_is_named)
{
    static const char tmpl[] = "{{ bos_token }}[INST] {{ messages[0]['content'] }} [/INST]";
    const eng_chat_message user[] = {{"user", "Hi"}};
    char *out = NULL;
    eng_error err = {0};
    cr_assert_eq(eng_chat_render_template(tmpl, strlen(tmpl), NULL, user, 1, true, &out, &err),
                 ORTMEM_E_UNSUPPORTED);
    cr_assert(strstr(err.message, "[INST]"), "%s", err.message);
    cr_assert_null(out);
}

/* A GGUF whose tokenizer keys are well formed except add_bos_token, stored
 * as kind; the byte-level vocabulary is the 256 one-byte tokens. */
static ortmem_status create_with_add_bos_kind(uint32_t kind, eng_tokenizer **tok, eng_error *err)
{
    wbuf w = {0};
    w_header(&w, 3, 0, 5);
    w_kv_str(&w, "tokenizer.ggml.model", "gpt2");
    w_kv_str(&w, "tokenizer.ggml.pre", "default");
    w_key(&w, "tokenizer.ggml.tokens", ENG_GGUF_ARRAY);
    w_u32(&w, ENG_GGUF_STRING);
    w_u64(&w, 2);
    w_str(&w, "a");
    w_str(&w, "b");
    w_key(&w, "tokenizer.ggml.merges", ENG_GGUF_ARRAY);
    w_u32(&w, ENG_GGUF_STRING);
    w_u64(&w, 0);
    w_key(&w, "tokenizer.ggml.add_bos_token", kind);
    if (kind == ENG_GGUF_BOOL)
        w_u8(&w, 1);
    else
        w_str(&w, "yes");
    w_pad(&w, 32);
    eng_gguf *g = NULL;
    ortmem_status st = w_open(&w, &g, err);
    free(w.p);
    if (st != ORTMEM_OK)
        return st;
    st = eng_tokenizer_create(g, tok, err);
    eng_gguf_close(g);
    return st;
}

/* add_bos_token of another kind is refused naming it (found by the gguf
 * fuzzer: the flag was read although the lookup had failed, undefined
 * behaviour the sanitizer build reports). */
Test(tokenizer_gguf, add_bos_token_of_another_kind_is_refused)
{
    eng_tokenizer *tok = NULL;
    eng_error err = {0};
    cr_assert_eq(create_with_add_bos_kind(ENG_GGUF_STRING, &tok, &err), ORTMEM_E_INVALID, "%s",
                 err.message);
    cr_assert_null(tok);
    cr_assert(strstr(err.message, "add_bos_token") != NULL, "%s", err.message);
    cr_assert_eq(create_with_add_bos_kind(ENG_GGUF_BOOL, &tok, &err), ORTMEM_OK, "%s", err.message);
    cr_assert(eng_tokenizer_add_bos(tok));
    eng_tokenizer_destroy(tok);
}
