/* The tokenizer's parts, seen from each other and from the tests: the core
 * is built from plain arrays (what eng_tokenizer_create reads from the GGUF),
 * so it can be tested with a vocabulary made up in the test. */
#ifndef ENGINE_TOKENIZER_TOKENIZER_INTERNAL_H
#define ENGINE_TOKENIZER_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

/* Token types as tokenizer.ggml.token_type numbers them. */
enum {
    ENG_TOKEN_NORMAL = 1,
    ENG_TOKEN_UNKNOWN = 2,
    ENG_TOKEN_CONTROL = 3,
    ENG_TOKEN_USER_DEFINED = 4,
    ENG_TOKEN_UNUSED = 5,
    ENG_TOKEN_BYTE = 6,
};

/* A byte string that is not NUL-terminated. */
typedef struct eng_bytes {
    const char *ptr;
    size_t len;
} eng_bytes;

/* Everything the tokenizer is made of; the arrays are copied. */
typedef struct eng_tokenizer_spec {
    const char *model; /* tokenizer.ggml.model: only "gpt2" */
    const char *pre;   /* tokenizer.ggml.pre; NULL or "" means "default" */
    size_t n_tokens;
    const eng_bytes *tokens; /* n_tokens texts (byte-level mapped) */
    const int32_t *types;    /* n_tokens types, or NULL: all NORMAL */
    size_t n_merges;
    const eng_bytes *merges;    /* "left right", lowest rank first */
    int32_t bos, eos, unk, pad; /* -1 when none */
    int32_t eot, eom;           /* -1 when none */
    int add_bos; /* 0 or 1; -1 when the file does not say (the pre-tokenizer decides) */
    const char *chat_template; /* NULL when none */
    size_t chat_template_len;
} eng_tokenizer_spec;

ortmem_status eng_tokenizer_create_from_spec(const eng_tokenizer_spec *spec, eng_tokenizer **out,
                                             eng_error *err);
/* eng_tokenizer_create with tokenizer.ggml.pre replaced by pre (when not
 * NULL): the tests check each pre-tokenizer with the model's vocabulary. */
ortmem_status eng_tokenizer_create_as(const eng_gguf *gguf, const char *pre, eng_tokenizer **out,
                                      eng_error *err);

/* ---- unicode.c ---- */
/* Offset of the first byte that does not start a well-formed UTF-8 sequence
 * (overlong forms, surrogates and code points past U+10FFFF included), or
 * len when all of it is well-formed. */
size_t eng_utf8_invalid_offset(const char *text, size_t len);
/* The code point at text (well-formed), and its length in *n. */
uint32_t eng_utf8_decode(const char *text, size_t *n);
/* Writes cp's UTF-8 (1..4 bytes) to out; returns the count. */
size_t eng_utf8_encode(uint32_t cp, char *out);
/* GPT-2's byte-level alphabet: the code point byte b stands for, and back
 * (-1 for code points that stand for no byte). */
uint32_t eng_byte_to_cp(uint8_t b);
int eng_cp_to_byte(uint32_t cp);

/* ---- pretokenize.c ---- */
typedef struct eng_pretokenizer eng_pretokenizer;
/* A piece of text: [start, start + len). */
typedef struct eng_span {
    size_t start;
    size_t len;
} eng_span;
/* ORTMEM_E_UNSUPPORTED naming pre when it is not known. *ignore_merges is
 * set for the pre-tokenizers whose whole-word vocabulary hits skip BPE. */
ortmem_status eng_pretokenizer_create(const char *pre, eng_pretokenizer **out, bool *ignore_merges,
                                      eng_error *err);
void eng_pretokenizer_destroy(eng_pretokenizer *pt);
/* Splits text[0..len) (valid UTF-8) into words; *spans is malloc'ed (the
 * caller frees it), *count its length. */
ortmem_status eng_pretokenize(const eng_pretokenizer *pt, const char *text, size_t len,
                              eng_span **spans, size_t *count, eng_error *err);

/* ---- bpe.c ---- */
typedef struct eng_bpe eng_bpe;
ortmem_status eng_bpe_create(size_t n_tokens, const eng_bytes *tokens, size_t n_merges,
                             const eng_bytes *merges, eng_bpe **out, eng_error *err);
void eng_bpe_destroy(eng_bpe *bpe);
/* The id of the token whose text is exactly s, or -1. */
int32_t eng_bpe_lookup(const eng_bpe *bpe, const char *s, size_t len);
/* Appends the ids of one word (raw bytes, not yet byte-mapped) to a growing
 * array; ignore_merges: a word that is a token as a whole is that token. */
typedef struct eng_ids {
    int32_t *ids;
    size_t count;
    size_t cap;
} eng_ids;
/* Scratch space one caller reuses across words (zeroed to start, released
 * with eng_bpe_work_free). */
typedef struct eng_bpe_work {
    void *symbols;
    size_t symbols_cap;
    void *heap;
    size_t heap_cap;
    char *text;
    size_t text_cap;
} eng_bpe_work;
void eng_bpe_work_free(eng_bpe_work *work);
ortmem_status eng_bpe_encode_word(const eng_bpe *bpe, eng_bpe_work *work, const char *word,
                                  size_t len, bool ignore_merges, eng_ids *out, eng_error *err);
ortmem_status eng_ids_push(eng_ids *ids, int32_t id, eng_error *err);

/* ---- chat.c ---- */
/* Renders with a template's text (len bytes) as eng_chat_render says;
 * bos_text is what {{ bos_token }} stands for (NULL: empty). */
ortmem_status eng_chat_render_template(const char *tmpl, size_t len, const char *bos_text,
                                       const eng_chat_message *messages, size_t count,
                                       bool add_assistant, char **out, eng_error *err);

#endif
