/* eng_tokenizer_create: the tokenizer's arrays and ids read from the GGUF
 * metadata (tokenizer.ggml.*, tokenizer.chat_template), then built by
 * eng_tokenizer_create_from_spec. */
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer_internal.h"

static ortmem_status read_id(const eng_gguf *gguf, const char *key, int32_t *id, eng_error *err)
{
    if (!eng_gguf_has(gguf, key))
        return ORTMEM_OK;
    int64_t v;
    ortmem_status st = eng_gguf_get_i64(gguf, key, &v, err);
    if (st != ORTMEM_OK)
        return st;
    if (v == UINT32_MAX)
        v = -1; /* -1 stored as an unsigned 32-bit value */
    if (v < -1 || v > INT32_MAX)
        return eng_fail(err, ORTMEM_E_RANGE, "%s is %lld", key, (long long)v);
    *id = (int32_t)v;
    return ORTMEM_OK;
}

/* A GGUF string as a NUL-terminated copy. */
static char *dup_str(eng_gguf_str s)
{
    char *c = malloc(s.len + 1);
    if (c) {
        memcpy(c, s.ptr, s.len);
        c[s.len] = '\0';
    }
    return c;
}

static ortmem_status read_strings(const eng_gguf *gguf, const char *key, eng_bytes **out,
                                  size_t *count, eng_error *err)
{
    eng_gguf_kind kind;
    uint64_t n;
    ortmem_status st = eng_gguf_get_array(gguf, key, &kind, &n, err);
    if (st != ORTMEM_OK)
        return st;
    if (kind != ENG_GGUF_STRING)
        return eng_fail(err, ORTMEM_E_INVALID, "%s holds kind %d, not strings", key, (int)kind);
    eng_bytes *arr = malloc((n ? n : 1) * sizeof *arr);
    if (!arr)
        return eng_fail(err, ORTMEM_E_NOMEM, "%s: %llu strings", key, (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
        eng_gguf_str s;
        st = eng_gguf_array_str(gguf, key, i, &s, err);
        if (st != ORTMEM_OK) {
            free(arr);
            return st;
        }
        arr[i] = (eng_bytes){s.ptr, (size_t)s.len};
    }
    *out = arr;
    *count = (size_t)n;
    return ORTMEM_OK;
}

ortmem_status eng_tokenizer_create(const eng_gguf *gguf, eng_tokenizer **out, eng_error *err)
{
    return eng_tokenizer_create_as(gguf, NULL, out, err);
}

ortmem_status eng_tokenizer_create_as(const eng_gguf *gguf, const char *pre_override,
                                      eng_tokenizer **out, eng_error *err)
{
    if (!gguf || !out)
        return eng_fail(err, ORTMEM_E_INVALID, "tokenizer: NULL argument");
    eng_tokenizer_spec spec = {
        .bos = -1, .eos = -1, .unk = -1, .pad = -1, .eot = -1, .eom = -1, .add_bos = -1};
    char *model = NULL, *pre = NULL;
    eng_bytes *tokens = NULL, *merges = NULL;
    int32_t *types = NULL;
    size_t n_types = 0;
    eng_gguf_str s;
    ortmem_status st = eng_gguf_get_str(gguf, "tokenizer.ggml.model", &s, err);
    if (st == ORTMEM_OK && !(model = dup_str(s)))
        st = eng_fail(err, ORTMEM_E_NOMEM, "tokenizer.ggml.model");
    if (st == ORTMEM_OK && strcmp(model, "gpt2") != 0)
        st = eng_fail(err, ORTMEM_E_UNSUPPORTED,
                      "tokenizer model \"%s\" is not supported (only \"gpt2\", byte-level BPE)",
                      model);
    if (st == ORTMEM_OK && pre_override && !(pre = strdup(pre_override)))
        st = eng_fail(err, ORTMEM_E_NOMEM, "tokenizer.ggml.pre");
    if (st == ORTMEM_OK && !pre && eng_gguf_has(gguf, "tokenizer.ggml.pre")) {
        st = eng_gguf_get_str(gguf, "tokenizer.ggml.pre", &s, err);
        if (st == ORTMEM_OK && !(pre = dup_str(s)))
            st = eng_fail(err, ORTMEM_E_NOMEM, "tokenizer.ggml.pre");
    }
    if (st == ORTMEM_OK)
        st = read_strings(gguf, "tokenizer.ggml.tokens", &tokens, &spec.n_tokens, err);
    if (st == ORTMEM_OK)
        st = read_strings(gguf, "tokenizer.ggml.merges", &merges, &spec.n_merges, err);
    if (st == ORTMEM_OK && eng_gguf_has(gguf, "tokenizer.ggml.token_type")) {
        eng_gguf_kind kind;
        uint64_t n;
        st = eng_gguf_get_array(gguf, "tokenizer.ggml.token_type", &kind, &n, err);
        if (st == ORTMEM_OK && n != spec.n_tokens)
            st = eng_fail(err, ORTMEM_E_INVALID, "tokenizer.ggml.token_type has %llu, tokens %zu",
                          (unsigned long long)n, spec.n_tokens);
        if (st == ORTMEM_OK && !(types = malloc((n ? n : 1) * sizeof *types)))
            st = eng_fail(err, ORTMEM_E_NOMEM, "%llu token types", (unsigned long long)n);
        for (uint64_t i = 0; st == ORTMEM_OK && i < n; i++) {
            int64_t v;
            st = eng_gguf_array_i64(gguf, "tokenizer.ggml.token_type", i, &v, err);
            if (st == ORTMEM_OK && (v < 0 || v > 6))
                st = eng_fail(err, ORTMEM_E_INVALID, "token %llu has type %lld",
                              (unsigned long long)i, (long long)v);
            if (st == ORTMEM_OK)
                types[n_types++] = (int32_t)v;
        }
    }
    if (st == ORTMEM_OK && !eng_gguf_has(gguf, "tokenizer.ggml.bos_token_id"))
        spec.bos = 11; /* llama.cpp's GPT-2 defaults, for files without the keys */
    if (st == ORTMEM_OK && !eng_gguf_has(gguf, "tokenizer.ggml.eos_token_id"))
        spec.eos = 11;
    if (st == ORTMEM_OK)
        st = read_id(gguf, "tokenizer.ggml.bos_token_id", &spec.bos, err);
    if (st == ORTMEM_OK)
        st = read_id(gguf, "tokenizer.ggml.eos_token_id", &spec.eos, err);
    if (st == ORTMEM_OK)
        st = read_id(gguf, "tokenizer.ggml.unknown_token_id", &spec.unk, err);
    if (st == ORTMEM_OK)
        st = read_id(gguf, "tokenizer.ggml.padding_token_id", &spec.pad, err);
    if (st == ORTMEM_OK)
        st = read_id(gguf, "tokenizer.ggml.eot_token_id", &spec.eot, err);
    if (st == ORTMEM_OK)
        st = read_id(gguf, "tokenizer.ggml.eom_token_id", &spec.eom, err);
    if (st == ORTMEM_OK && eng_gguf_has(gguf, "tokenizer.ggml.add_bos_token")) {
        bool add_bos = false;
        st = eng_gguf_get_bool(gguf, "tokenizer.ggml.add_bos_token", &add_bos, err);
        if (st == ORTMEM_OK) /* a key of another kind is refused, never read */
            spec.add_bos = add_bos;
    }
    if (st == ORTMEM_OK && eng_gguf_has(gguf, "tokenizer.chat_template")) {
        st = eng_gguf_get_str(gguf, "tokenizer.chat_template", &s, err);
        spec.chat_template = s.ptr;
        spec.chat_template_len = (size_t)s.len;
    }
    if (st == ORTMEM_OK) {
        /* An id past the vocabulary (some files carry one) means none. */
        int32_t *ids[6] = {&spec.bos, &spec.eos, &spec.unk, &spec.pad, &spec.eot, &spec.eom};
        for (int k = 0; k < 6; k++)
            if (*ids[k] >= 0 && (size_t)*ids[k] >= spec.n_tokens)
                *ids[k] = -1;
        spec.model = model;
        spec.pre = pre;
        spec.tokens = tokens;
        spec.types = types;
        spec.merges = merges;
        st = eng_tokenizer_create_from_spec(&spec, out, err);
    }
    free(model);
    free(pre);
    free(tokens);
    free(merges);
    free(types);
    if (st != ORTMEM_OK)
        eng_wrap(err, "tokenizer from %s", eng_gguf_path(gguf));
    return st;
}
