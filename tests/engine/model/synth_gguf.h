/* A tiny Llama-shaped GGUF written by the tests (2 blocks, 32 wide, F32
 * tensors), with one thing wrong on request: the architecture, a tensor's
 * type id or first dimension, a missing tensor, an extra metadata entry, or
 * the file cut short. */
#ifndef ORTMEM_TESTS_ENGINE_MODEL_SYNTH_GGUF_H
#define ORTMEM_TESTS_ENGINE_MODEL_SYNTH_GGUF_H

#include <stdint.h>

typedef struct synth_options {
    const char *arch;          /* general.architecture; NULL = "llama" */
    const char *retype_tensor; /* this tensor gets type id new_type */
    uint32_t new_type;
    const char *reshape_tensor; /* this tensor's first dimension becomes new_ne0 */
    uint64_t new_ne0;
    const char *omit_tensor; /* this tensor is left out */
    uint64_t truncate_to;    /* the file is cut to this many bytes; 0 = whole */
    const char *extra_key;   /* one more U32 metadata entry, when not NULL */
    uint32_t extra_value;
    int by_kind; /* the blocks' tensors interleaved (every block's attn_norm, then every
                    attn_q, ...) instead of each block's side by side */
} synth_options;

/* Writes the model to path (asserts it worked); returns its size before any
 * cut. */
uint64_t synth_gguf_write(const char *path, const synth_options *options);

#endif
