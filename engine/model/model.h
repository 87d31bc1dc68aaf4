/* A Llama-family model decoded on the CPU through ortmem: the weights are
 * catalogued from the GGUF file and pinned resident in a residency cache's
 * slots (the engine reads them there), the keys and values of a sequence
 * live in an ortmem KV cache, and every byte of both is charged to one
 * authority over a CPU backend. The forward pass computes what llama.cpp's
 * CPU backend computes (RMSNorm, RoPE mode 0, F16 keys and values, softmax
 * attention with grouped KV heads, SwiGLU), so greedy tokens agree. */
#ifndef ENGINE_MODEL_MODEL_H
#define ENGINE_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ortmem/ortmem.h>

#include "common/status.h"
#include "gguf/gguf.h"

/* The hyper-parameters read from the file's metadata ("llama." keys). */
typedef struct eng_hparams {
    uint32_t n_layer;     /* block_count */
    uint32_t n_embd;      /* embedding_length */
    uint32_t n_ff;        /* feed_forward_length */
    uint32_t n_head;      /* attention.head_count */
    uint32_t n_head_kv;   /* attention.head_count_kv (n_head when absent) */
    uint32_t head_dim;    /* n_embd / n_head */
    uint32_t n_rot;       /* rope.dimension_count (head_dim when absent) */
    uint32_t n_ctx_train; /* context_length */
    uint32_t n_vocab;     /* vocab_size, else the tokenizer's token count */
    float rope_freq_base; /* rope.freq_base (10000 when absent) */
    float rms_eps;        /* attention.layer_norm_rms_epsilon */
    bool tied_output;     /* no output.weight: the logits use token_embd.weight */
} eng_hparams;

/* Called while the weights are paged into their slots: tensors and bytes
 * done so far out of the totals. */
typedef void (*eng_load_progress_fn)(void *user, size_t tensors_done, size_t tensors,
                                     uint64_t bytes_done, uint64_t bytes);

typedef struct eng_model_options {
    uint64_t granule; /* the CPU backend's granule in bytes; 0 = the page size */
    /* The backend the weights and the KV live on (a CPU backend, or one
     * wrapping it: the fault backend, a tracer); granule is then the
     * backend's. NULL: the model creates a CPU backend of granule. The caller
     * keeps it alive until eng_model_destroy has returned. */
    ortmem_backend *backend;
    /* Bytes the residency cache may map for the weights; 0 = every weight
     * pinned resident. Under a budget the embedding, the output and the
     * output norm stay resident, then the layers in reading order while they
     * fit beside a ring of ring_slots layer slots; the others are streamed through the
     * ring, a layer for its forward pass (the same tokens, the bytes copied
     * again every token). ORTMEM_E_BUDGET naming the numbers when the budget
     * holds less than what stays resident and the ring; ORTMEM_E_UNSUPPORTED
     * when the file's layers do not lie together (layers stream whole). */
    uint64_t weights_budget;
    /* Under a budget: the ring's slots, layers in flight at once (a CPU
     * context streams one, several contexts one each); 0 = 4. A GPU context
     * copies the next layer while it computes one: 2. */
    uint32_t ring_slots;
    /* Under a budget: pinned host memory the catalog's bytes are copied into
     * from the file at load (a device copies from pinned memory directly,
     * from the mapped file through the driver's bounce buffer); the caller
     * keeps it alive until eng_model_destroy has returned. NULL: the tensors
     * are read from the mapped file. */
    ortmem_staging *staging;
    /* The residency cache's streams (ortmem_residency_options): copies go on
     * copy_stream; a ring slot is refilled once the work enqueued on
     * compute_stream before its release has run. 0: the default stream. */
    uint64_t copy_stream, compute_stream;
    eng_load_progress_fn progress;
    void *progress_user;
} eng_model_options;

typedef struct eng_model eng_model;

/* Opens path, checks it is a Llama-family model (ORTMEM_E_UNSUPPORTED naming
 * any other general.architecture), reads the hyper-parameters, finds every
 * tensor by name and checks its shape (ORTMEM_E_INVALID naming the tensor and
 * both shapes) and type (ORTMEM_E_UNSUPPORTED naming both), then creates the
 * CPU backend, the authority, the file catalog and the residency cache and
 * pins every tensor resident. options may be NULL. */
ortmem_status eng_model_load(const char *path, const eng_model_options *options, eng_model **out,
                             eng_error *err);
/* Unpins and destroys the residency cache, the catalog, the authority and the
 * backend. ORTMEM_E_BUSY (nothing changes) while a context lives;
 * ORTMEM_E_STATE when the authority's ledger did not come back to zero (the
 * bytes named; everything is torn down regardless). NULL is a no-op. */
ortmem_status eng_model_destroy(eng_model *model, eng_error *err);

const eng_hparams *eng_model_hparams(const eng_model *model);
/* The open GGUF file (the tokenizer reads its vocabulary from it). */
const eng_gguf *eng_model_gguf(const eng_model *model);
ortmem_authority *eng_model_authority(eng_model *model);
ortmem_residency_cache *eng_model_residency(eng_model *model);
/* Bytes the residency cache maps for resident weights (granule-rounded). */
uint64_t eng_model_weights_resident_bytes(eng_model *model);
/* The weights' own bytes in the file. */
uint64_t eng_model_weights_file_bytes(const eng_model *model);

/* ---- A decoding context: one sequence ---- */
typedef struct eng_context_options {
    uint32_t n_ctx;   /* tokens the sequence may hold; 0 = min(4096, the trained context) */
    uint32_t n_batch; /* prompt tokens per forward pass; 0 = 512 */
    unsigned threads; /* kernel threads; 0 = 2 */
} eng_context_options;

typedef struct eng_context eng_context;

/* Creates the KV cache (the model's geometry: layers, KV heads, head
 * dimension, F16 elements; strategy chosen by auto), its one sequence, the
 * thread pool and every scratch buffer. The authority's limit is raised by
 * what the cache may commit at n_ctx tokens (and lowered again at destroy).
 * ORTMEM_E_RANGE when n_ctx exceeds the trained context. */
ortmem_status eng_context_create(eng_model *model, const eng_context_options *options,
                                 eng_context **out, eng_error *err);
/* Destroys the sequence, the KV cache (its holders' bytes go back to the
 * authority), the pool and the scratch. NULL is a no-op. */
ortmem_status eng_context_destroy(eng_context *ctx, eng_error *err);

/* Appends count tokens to the sequence and runs them through the model
 * (batches of n_batch), leaving the last token's logits in
 * eng_context_logits. ORTMEM_E_RANGE (nothing changes) when the sequence
 * would exceed n_ctx; ORTMEM_E_RANGE naming the id for one outside the
 * vocabulary. A failure leaves the sequence as it was. */
ortmem_status eng_context_decode(eng_context *ctx, const int32_t *tokens, size_t count,
                                 eng_error *err);
/* n_vocab floats: the logits after the last decode (NULL before the first). */
const float *eng_context_logits(const eng_context *ctx);
/* Tokens in the sequence. */
uint64_t eng_context_length(const eng_context *ctx);
uint32_t eng_context_n_ctx(const eng_context *ctx);
/* Rewinds the sequence to length tokens (<= its length). */
ortmem_status eng_context_truncate(eng_context *ctx, uint64_t length, eng_error *err);

/* The KV cache's strategy in force, its layout, and ortmem's explanation of
 * the choice (ortmem_kv_cache_explain) into buffer. */
ortmem_status eng_context_kv_explain(eng_context *ctx, ortmem_kv_strategy *strategy,
                                     ortmem_kv_layout *layout, char *buffer, size_t capacity,
                                     eng_error *err);
ortmem_status eng_context_kv_stats(eng_context *ctx, ortmem_kv_stats *stats, eng_error *err);

#endif
