/* The model's own tokenizer, built from its GGUF vocabulary: byte-level BPE
 * (tokenizer.ggml.model "gpt2") with the pre-tokenizer regex named by
 * tokenizer.ggml.pre, through PCRE2; special (control and user-defined)
 * tokens matched in text when asked; and the chat template the model ships. */
#ifndef ENGINE_TOKENIZER_TOKENIZER_H
#define ENGINE_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "gguf/gguf.h"

typedef struct eng_tokenizer eng_tokenizer;

/* ORTMEM_E_UNSUPPORTED naming the model or pre-tokenizer it does not know. */
ortmem_status eng_tokenizer_create(const eng_gguf *gguf, eng_tokenizer **out, eng_error *err);
void eng_tokenizer_destroy(eng_tokenizer *tok);

size_t eng_tokenizer_vocab_size(const eng_tokenizer *tok);
int32_t eng_tokenizer_bos(const eng_tokenizer *tok); /* -1 when none */
int32_t eng_tokenizer_eos(const eng_tokenizer *tok);
bool eng_tokenizer_add_bos(const eng_tokenizer *tok); /* tokenizer.ggml.add_bos_token */
/* End of generation: eos, eot (e.g. <|im_end|>) and the like. */
bool eng_tokenizer_is_eog(const eng_tokenizer *tok, int32_t id);

/* Encodes len bytes of UTF-8 text; with parse_special, the text of special
 * tokens becomes those tokens. Writes up to cap ids, sets *n to the count
 * needed (ORTMEM_E_RANGE when it exceeds cap, nothing else changes).
 * ORTMEM_E_INVALID naming the byte offset for invalid UTF-8. add_bos is not
 * applied here: the caller prepends eng_tokenizer_bos when it wants one. */
ortmem_status eng_tokenize(const eng_tokenizer *tok, const char *text, size_t len,
                           bool parse_special, int32_t *ids, size_t cap, size_t *n, eng_error *err);

/* The bytes token id stands for (byte-level decoded; a special token's
 * text). *len receives the count; ORTMEM_E_RANGE when it exceeds cap;
 * ORTMEM_E_RANGE naming the id when it is outside the vocabulary. The bytes
 * of one token may end inside a UTF-8 sequence: streaming output joins them. */
ortmem_status eng_token_bytes(const eng_tokenizer *tok, int32_t id, char *buf, size_t cap,
                              size_t *len, eng_error *err);

/* ---- Chat ---- */
typedef struct eng_chat_message {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
} eng_chat_message;

/* Renders messages as the model's tokenizer.chat_template does (recognised
 * template families: ChatML as SmolLM2 and Qwen use it, with the template's
 * default system message when the first message is not a system one; Llama 3;
 * others ORTMEM_E_UNSUPPORTED naming the template's first characters),
 * ending with the assistant's opening when add_assistant. *out is malloc'ed
 * and NUL-terminated; the caller frees it. */
ortmem_status eng_chat_render(const eng_tokenizer *tok, const eng_chat_message *messages,
                              size_t count, bool add_assistant, char **out, eng_error *err);

#endif
