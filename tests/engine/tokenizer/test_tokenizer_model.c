/* The model's own vocabulary (SmolLM2-135M-Instruct) against llama.cpp:
 * the ids, end-of-generation set, token bytes and chat renderings recorded
 * by scripts/tokenizer-reference.py in tests/data/engine/tokenizer/smollm2.json. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model_path.h"
#include "gguf/gguf.h"
#include "mini_json.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"

typedef struct model_fixture {
    eng_gguf *gguf;
    eng_tokenizer *tok;
    jnode *ref;
} model_fixture;

static model_fixture load_model(void)
{
    model_fixture f = {0};
    char path[4096];
    eng_error err = {0};
    cr_assert_eq(eng_default_model_path(path, sizeof path, &err), ORTMEM_OK, "%s", err.message);
    cr_assert_eq(eng_gguf_open(path, &f.gguf, &err), ORTMEM_OK, "%s", err.message);
    cr_assert_eq(eng_tokenizer_create(f.gguf, &f.tok, &err), ORTMEM_OK, "%s", err.message);
    const char *data = getenv("ORTMEM_ENGINE_TEST_DATA");
    cr_assert(data, "ORTMEM_ENGINE_TEST_DATA is not set");
    char ref[4096];
    snprintf(ref, sizeof ref, "%s/tokenizer/smollm2.json", data);
    f.ref = j_load(ref);
    cr_assert(f.ref, "cannot read %s", ref);
    return f;
}

static void unload_model(model_fixture *f)
{
    eng_tokenizer_destroy(f->tok);
    eng_gguf_close(f->gguf);
    j_free(f->ref);
}

/* Encodes text, compares with want (a JSON array), decodes the ids back. */
static void check_case(const eng_tokenizer *tok, const char *name, const char *text, size_t len,
                       bool special, const jnode *want)
{
    size_t cap = len + 8;
    int32_t *ids = malloc(cap * sizeof *ids);
    size_t n = 0;
    eng_error err = {0};
    cr_assert_eq(eng_tokenize(tok, text, len, special, ids, cap, &n, &err), ORTMEM_OK, "%s: %s",
                 name, err.message);
    cr_assert_eq(n, want->count, "%s (special %d): %zu ids, llama.cpp %zu", name, special, n,
                 want->count);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(ids[i], (int32_t)want->items[i]->num,
                     "%s (special %d): id %zu is %d, "
                     "llama.cpp %d",
                     name, special, i, ids[i], (int32_t)want->items[i]->num);
    char *back = malloc(len + 1);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t piece = 0;
        cr_assert_eq(eng_token_bytes(tok, ids[i], back + at, len - at, &piece, &err), ORTMEM_OK,
                     "%s: token %zu: %s", name, i, err.message);
        at += piece;
    }
    cr_assert_eq(at, len, "%s: decoded %zu bytes of %zu", name, at, len);
    cr_assert_eq(memcmp(back, text, len), 0, "%s: decoded bytes differ", name);
    free(back);
    free(ids);
}

Test(tokenizer_model, ids_equal_llama_cpp_and_decode_back)
{
    model_fixture f = load_model();
    const jnode *cases = j_get(f.ref, "cases");
    cr_assert(cases && cases->count >= 40, "cases");
    for (size_t c = 0; c < cases->count; c++) {
        const jnode *k = cases->items[c];
        size_t len;
        char *text = j_unhex(j_get(k, "text_hex"), &len);
        const char *name = j_get(k, "name")->str;
        check_case(f.tok, name, text, len, true, j_get(k, "ids_special"));
        check_case(f.tok, name, text, len, false, j_get(k, "ids_plain"));
        free(text);
    }
    unload_model(&f);
}

Test(tokenizer_model, vocabulary_facts_equal_llama_cpp)
{
    model_fixture f = load_model();
    cr_assert_eq(eng_tokenizer_vocab_size(f.tok), (size_t)j_get(f.ref, "vocab_size")->num);
    cr_assert_eq(eng_tokenizer_bos(f.tok), (int32_t)j_get(f.ref, "bos")->num);
    cr_assert_eq(eng_tokenizer_eos(f.tok), (int32_t)j_get(f.ref, "eos")->num);
    cr_assert_not(eng_tokenizer_add_bos(f.tok));
    const jnode *eog = j_get(f.ref, "eog");
    size_t next = 0;
    for (int32_t id = 0; id < (int32_t)eng_tokenizer_vocab_size(f.tok); id++) {
        bool want = next < eog->count && eog->items[next]->num == id;
        next += want;
        cr_assert_eq(eng_tokenizer_is_eog(f.tok, id), want, "token %d: eog %d", id, want);
    }
    cr_assert_eq(next, eog->count);
    cr_assert_not(eng_tokenizer_is_eog(f.tok, -1));
    cr_assert_not(eng_tokenizer_is_eog(f.tok, (int32_t)eng_tokenizer_vocab_size(f.tok)));
    const jnode *pieces = j_get(f.ref, "pieces");
    for (size_t i = 0; i < pieces->count; i++) {
        int32_t id = (int32_t)pieces->items[i]->items[0]->num;
        size_t want_len, len = 0;
        char *want = j_unhex(pieces->items[i]->items[1], &want_len);
        char buf[256];
        eng_error err = {0};
        cr_assert_eq(eng_token_bytes(f.tok, id, buf, sizeof buf, &len, &err), ORTMEM_OK);
        cr_assert_eq(len, want_len, "token %d: %zu bytes, llama.cpp %zu", id, len, want_len);
        cr_assert_eq(memcmp(buf, want, len), 0, "token %d", id);
        free(want);
    }
    unload_model(&f);
}

static eng_chat_message *messages_of(const jnode *arr)
{
    eng_chat_message *m = calloc(arr->count + 1, sizeof *m);
    for (size_t i = 0; i < arr->count; i++) {
        m[i].role = j_get(arr->items[i], "role")->str;
        m[i].content = j_get(arr->items[i], "content")->str;
    }
    return m;
}

Test(tokenizer_model, chat_renders_as_jinja2_does)
{
    model_fixture f = load_model();
    const jnode *chats = j_get(f.ref, "chats");
    cr_assert(chats && chats->count >= 2);
    for (size_t c = 0; c < chats->count; c++) {
        const jnode *k = chats->items[c];
        eng_chat_message *m = messages_of(j_get(k, "messages"));
        char *out = NULL;
        eng_error err = {0};
        cr_assert_eq(eng_chat_render(f.tok, m, j_get(k, "messages")->count,
                                     j_get(k, "add_generation_prompt")->num != 0, &out, &err),
                     ORTMEM_OK, "chat %zu: %s", c, err.message);
        size_t len;
        char *want = j_unhex(j_get(k, "rendered_hex"), &len);
        cr_assert_str_eq(out, want, "chat %zu", c);
        check_case(f.tok, "chat", out, len, true, j_get(k, "ids"));
        free(want);
        free(out);
        free(m);
    }
    /* The second family, with a Llama 3 style template written by the
     * reference script. */
    const jnode *tmpl = j_get(f.ref, "llama3_template");
    const jnode *l3 = j_get(f.ref, "llama3_chats");
    cr_assert(tmpl && l3 && l3->count >= 1);
    for (size_t c = 0; c < l3->count; c++) {
        const jnode *k = l3->items[c];
        eng_chat_message *m = messages_of(j_get(k, "messages"));
        char *out = NULL;
        eng_error err = {0};
        cr_assert_eq(eng_chat_render_template(
                         tmpl->str, tmpl->len, "<|begin_of_text|>", m, j_get(k, "messages")->count,
                         j_get(k, "add_generation_prompt")->num != 0, &out, &err),
                     ORTMEM_OK, "llama3 chat %zu: %s", c, err.message);
        size_t len;
        char *want = j_unhex(j_get(k, "rendered_hex"), &len);
        cr_assert_str_eq(out, want, "llama3 chat %zu", c);
        free(want);
        free(out);
        free(m);
    }
    unload_model(&f);
}

/* The other pre-tokenizers, each with the model's vocabulary, against
 * llama.cpp given the same file with only tokenizer.ggml.pre changed. */
Test(tokenizer_model, each_pre_tokenizer_equals_llama_cpp)
{
    model_fixture f = load_model();
    const jnode *cases = j_get(f.ref, "cases");
    const jnode *variants = j_get(f.ref, "variants");
    cr_assert(variants && variants->count >= 4, "variants");
    for (size_t v = 0; v < variants->count; v++) {
        const jnode *var = variants->items[v];
        const char *pre = j_get(var, "pre")->str;
        eng_tokenizer *tok = NULL;
        eng_error err = {0};
        cr_assert_eq(eng_tokenizer_create_as(f.gguf, pre, &tok, &err), ORTMEM_OK, "%s: %s", pre,
                     err.message);
        cr_assert_eq(eng_tokenizer_add_bos(tok), j_get(var, "add_bos")->num != 0, "%s", pre);
        const jnode *ids = j_get(var, "ids_special");
        cr_assert_eq(ids->count, cases->count);
        for (size_t c = 0; c < cases->count; c++) {
            size_t len;
            char *text = j_unhex(j_get(cases->items[c], "text_hex"), &len);
            char name[128];
            snprintf(name, sizeof name, "%s/%s", pre, j_get(cases->items[c], "name")->str);
            check_case(tok, name, text, len, true, ids->items[c]);
            free(text);
        }
        eng_tokenizer_destroy(tok);
    }
    unload_model(&f);
}
