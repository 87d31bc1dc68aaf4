/* The pre-tokenizer: regexes (PCRE2, UTF and UCP) that cut text into words
 * before BPE. As llama.cpp applies them, each regex of a list cuts every
 * piece left by the one before, on its own (its lookaheads end at the piece's
 * end); both what it matches and the text between matches become pieces. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

#define MAX_REGEXES 4

struct eng_pretokenizer {
    size_t count;
    pcre2_code *code[MAX_REGEXES];
};

/* GPT-2's split: contractions, letters, numbers, other runs, whitespace. */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
/* Llama 3's, with (?i:...) spelled out as llama.cpp does; Qwen2 differs in
 * taking digits one at a time. */
#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3                                                                                  \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"   \
                    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                   \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"        \
                    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct pre_kind {
    const char *names[6]; /* tokenizer.ggml.pre values, NULL-ended */
    const char *regexes[MAX_REGEXES + 1];
    bool ignore_merges;
} pre_kind;

static const pre_kind PRE_KINDS[] = {
    {{"default", NULL},
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL},
     false},
    {{"smollm", "starcoder", "refact", NULL}, {"\\p{N}", RE_GPT2, NULL}, false},
    {{"gpt-2", "gpt2", "phi-2", "mpt", "olmo", NULL}, {RE_GPT2, NULL}, false},
    {{"llama3", "llama-v3", "llama-bpe", NULL}, {RE_LLAMA3, NULL}, true},
    {{"qwen2", "stablelm2", NULL}, {RE_QWEN2, NULL}, false},
};

ortmem_status eng_pretokenizer_create(const char *pre, eng_pretokenizer **out, bool *ignore_merges,
                                      eng_error *err)
{
    if (pre == NULL || pre[0] == '\0')
        pre = "default";
    const pre_kind *kind = NULL;
    for (size_t k = 0; k < sizeof PRE_KINDS / sizeof PRE_KINDS[0] && !kind; k++)
        for (size_t n = 0; PRE_KINDS[k].names[n]; n++)
            if (strcmp(PRE_KINDS[k].names[n], pre) == 0)
                kind = &PRE_KINDS[k];
    if (!kind)
        return eng_fail(err, ORTMEM_E_UNSUPPORTED,
                        "pre-tokenizer \"%s\" is not supported (known: default, smollm, "
                        "starcoder, refact, gpt-2, gpt2, phi-2, mpt, olmo, llama3, llama-v3, "
                        "llama-bpe, qwen2, stablelm2)",
                        pre);
    eng_pretokenizer *pt = calloc(1, sizeof *pt);
    if (!pt)
        return eng_fail(err, ORTMEM_E_NOMEM, "pre-tokenizer: %zu bytes", sizeof *pt);
    for (size_t r = 0; kind->regexes[r]; r++) {
        int code;
        PCRE2_SIZE at;
        pt->code[r] = pcre2_compile((PCRE2_SPTR)kind->regexes[r], PCRE2_ZERO_TERMINATED,
                                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &code, &at, NULL);
        if (!pt->code[r]) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(code, msg, sizeof msg);
            eng_pretokenizer_destroy(pt);
            return eng_fail(err, ORTMEM_E_INVALID, "pre-tokenizer \"%s\": regex %zu at %zu: %s",
                            pre, r, (size_t)at, (const char *)msg);
        }
        pcre2_jit_compile(pt->code[r], PCRE2_JIT_COMPLETE); /* slower without, same result */
        pt->count = r + 1;
    }
    *ignore_merges = kind->ignore_merges;
    *out = pt;
    return ORTMEM_OK;
}

void eng_pretokenizer_destroy(eng_pretokenizer *pt)
{
    if (!pt)
        return;
    for (size_t r = 0; r < pt->count; r++)
        pcre2_code_free(pt->code[r]);
    free(pt);
}

typedef struct span_list {
    eng_span *spans;
    size_t count;
    size_t cap;
} span_list;

static bool span_push(span_list *l, size_t start, size_t len)
{
    if (len == 0)
        return true;
    if (l->count == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        eng_span *grown = realloc(l->spans, cap * sizeof *grown);
        if (!grown)
            return false;
        l->spans = grown;
        l->cap = cap;
    }
    l->spans[l->count++] = (eng_span){start, len};
    return true;
}

/* Cuts one piece with one regex, appending to next. */
static ortmem_status split_piece(const pcre2_code *code, pcre2_match_data *md, const char *text,
                                 eng_span piece, span_list *next, eng_error *err)
{
    const PCRE2_SPTR subject = (PCRE2_SPTR)(text + piece.start);
    size_t done = 0; /* end of the last piece written, from piece.start */
    size_t from = 0;
    while (from < piece.len) {
        int rc = pcre2_match(code, subject, piece.len, from, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return eng_fail(err, ORTMEM_E_INVALID, "pre-tokenizer: match at byte %zu: %s",
                            piece.start + from, (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t m0 = ov[0], m1 = ov[1];
        if (m1 == m0) { /* an empty match cuts nothing: step over one character */
            size_t n;
            eng_utf8_decode(text + piece.start + m0, &n);
            from = m0 + n;
            continue;
        }
        if (!span_push(next, piece.start + done, m0 - done) ||
            !span_push(next, piece.start + m0, m1 - m0))
            return eng_fail(err, ORTMEM_E_NOMEM, "pre-tokenizer: %zu pieces", next->count);
        done = from = m1;
    }
    if (!span_push(next, piece.start + done, piece.len - done))
        return eng_fail(err, ORTMEM_E_NOMEM, "pre-tokenizer: %zu pieces", next->count);
    return ORTMEM_OK;
}

ortmem_status eng_pretokenize(const eng_pretokenizer *pt, const char *text, size_t len,
                              eng_span **spans, size_t *count, eng_error *err)
{
    span_list cur = {0};
    if (!span_push(&cur, 0, len))
        return eng_fail(err, ORTMEM_E_NOMEM, "pre-tokenizer: one piece");
    ortmem_status st = ORTMEM_OK;
    for (size_t r = 0; r < pt->count && st == ORTMEM_OK; r++) {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(pt->code[r], NULL);
        if (!md) {
            st = eng_fail(err, ORTMEM_E_NOMEM, "pre-tokenizer: match data of regex %zu", r);
            break;
        }
        span_list next = {0};
        for (size_t i = 0; i < cur.count && st == ORTMEM_OK; i++)
            st = split_piece(pt->code[r], md, text, cur.spans[i], &next, err);
        pcre2_match_data_free(md);
        free(cur.spans);
        cur = next;
    }
    if (st != ORTMEM_OK) {
        free(cur.spans);
        return st;
    }
    *spans = cur.spans;
    *count = cur.count;
    return ORTMEM_OK;
}
