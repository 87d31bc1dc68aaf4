/* The tokenizer on arbitrary bytes, built once from the small vocabulary
 * fuzz/make_seeds.py writes (fuzz/corpus/gguf/vocab.gguf): encode with and
 * without special tokens (valid UTF-8 must decode back to the same bytes,
 * invalid UTF-8 must be a status naming it), decode ids taken from the
 * input, and render the input as chat messages. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#ifndef FUZZ_VOCAB
#error "FUZZ_VOCAB: the vocabulary's path (fuzz/meson.build sets it)"
#endif

#define MAX_IDS 4096

static eng_gguf *vocab_file;
static eng_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    eng_error err;
    const char *path = getenv("FUZZ_VOCAB_PATH") ? getenv("FUZZ_VOCAB_PATH") : FUZZ_VOCAB;
    if (eng_gguf_open(path, &vocab_file, &err) != ORTMEM_OK ||
        eng_tokenizer_create(vocab_file, &tok, &err) != ORTMEM_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s (run fuzz/make_seeds.py)\n", err.message);
        abort();
    }
    return 0;
}

/* Encodes text and decodes the ids back; the bytes must come back whole. */
static void round_trip(const char *text, size_t len, bool special)
{
    static int32_t ids[MAX_IDS];
    static char back[MAX_IDS * 8];
    eng_error err;
    size_t n = 0;
    ortmem_status st = eng_tokenize(tok, text, len, special, ids, MAX_IDS, &n, &err);
    if (st == ORTMEM_E_RANGE) {
        FUZZ_CHECK(n > MAX_IDS, "E_RANGE with %zu ids", n);
        return;
    }
    if (st == ORTMEM_E_INVALID) {
        FUZZ_CHECK(err.message[0], "no message");
        return;
    }
    FUZZ_CHECK(st == ORTMEM_OK, "tokenize: %s", err.message);
    FUZZ_CHECK(n <= len, "%zu ids for %zu bytes", n, len);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t piece;
        FUZZ_CHECK(ids[i] >= 0 && (size_t)ids[i] < eng_tokenizer_vocab_size(tok), "id %d", ids[i]);
        st = eng_token_bytes(tok, ids[i], back + at, sizeof back - at, &piece, &err);
        FUZZ_CHECK(st == ORTMEM_OK, "token_bytes(%d): %s", ids[i], err.message);
        at += piece;
    }
    FUZZ_CHECK(at == len && memcmp(back, text, len) == 0,
               "decode(encode(%zu bytes)) gave %zu bytes (special %d)", len, at, special);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_IDS)
        return 0;
    const char *text = (const char *)data;
    round_trip(text, size, false);
    round_trip(text, size, true);

    /* Any 4 bytes as an id: a status outside the vocabulary, never a read. */
    for (size_t i = 0; i + 4 <= size && i < 64; i += 4) {
        int32_t id;
        memcpy(&id, data + i, sizeof id);
        char buf[16];
        size_t len;
        eng_error err;
        ortmem_status st = eng_token_bytes(tok, id, buf, sizeof buf, &len, &err);
        bool inside = id >= 0 && (size_t)id < eng_tokenizer_vocab_size(tok);
        FUZZ_CHECK(inside || st == ORTMEM_E_RANGE, "id %d outside gave %d", id, (int)st);
        FUZZ_CHECK(st != ORTMEM_OK || len <= sizeof buf, "len %zu", len);
        (void)eng_tokenizer_is_eog(tok, id);
    }

    /* The input as "role\0content\0role\0content..." messages. */
    char *copy = malloc(size + 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    eng_chat_message msgs[8];
    size_t count = 0;
    for (char *p = copy; p < copy + size && count < 8;) {
        msgs[count].role = p;
        p += strlen(p) + 1;
        msgs[count].content = p < copy + size ? p : "";
        p += p < copy + size ? strlen(p) + 1 : 0;
        count++;
    }
    char *rendered = NULL;
    eng_error err;
    if (eng_chat_render(tok, msgs, count, size & 1, &rendered, &err) == ORTMEM_OK)
        FUZZ_CHECK(rendered != NULL, "render gave NULL");
    free(rendered);
    free(copy);
    return 0;
}
