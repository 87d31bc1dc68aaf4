/* The model's and the context's insides, shared by model.c and context.c. */
#ifndef ENGINE_MODEL_MODEL_IMPL_H
#define ENGINE_MODEL_MODEL_IMPL_H

#include <pthread.h>

#include "kernels/kernels.h"
#include "model/model.h"
#include "model/numerics.h"

#define ENG_MAX_HEAD_DIM ENG_ATTN_MAX_DIM

/* A layer's matrices in the order the forward pass reads them. */
enum { ENG_W_Q, ENG_W_K, ENG_W_V, ENG_W_O, ENG_W_GATE, ENG_W_UP, ENG_W_DOWN, ENG_LAYER_MATRICES };

typedef struct eng_layer {
    const float *attn_norm, *ffn_norm;
    eng_matrix wq, wk, wv, wo, w_gate, w_up, w_down;
    /* Where the layer lives in the catalog when its tensors lie together in
     * the file: its entry and each tensor's offset there. Under a weights
     * budget a layer not pinned resident (streamed; its pointers NULL) is
     * acquired from the residency cache for its forward pass. */
    bool streamed;
    uint32_t entry;
    uint64_t offset[ENG_LAYER_MATRICES];
    uint64_t attn_norm_offset, ffn_norm_offset;
} eng_layer;

struct eng_model {
    eng_gguf *gguf;
    eng_hparams hp;
    eng_matrix token_embd, output;
    const float *output_norm;
    eng_layer *layers;
    ortmem_backend *backend;
    bool own_backend; /* created by the model (else the caller's) */
    ortmem_authority *authority;
    ortmem_weight_catalog *catalog;
    ortmem_residency_cache *residency;
    uint32_t tensor_count; /* catalogued */
    bool *pinned;
    void **slots;            /* per catalogued tensor: its slot */
    uint64_t file_bytes;     /* the tensors' bytes */
    uint64_t weights_budget; /* the residency cache's budget (the authority's base limit) */
    uint32_t streamed_count; /* layers streamed under eng_model_options.weights_budget */
    ortmem_staging *staging; /* the caller's, holding the catalog's bytes (or NULL) */
    uint64_t compute_stream; /* the residency cache's */
    char (*entry_names)[24]; /* the layers' catalog entries ("blk.N") */
    /* Contexts of one model are created, used and destroyed on any threads:
     * lock guards contexts and the authority's limit, which each context
     * raises and lowers by reading it and writing it back. */
    pthread_mutex_t lock;
    unsigned contexts;
};

/* The KV geometry of the model's layers, KV heads, head dimension and F16
 * elements in layout (granule 0: the backend's). */
ortmem_kv_geometry eng_kv_geometry(const eng_hparams *hp, ortmem_kv_layout layout);
/* A context's share of the authority's limit, raised at its create and
 * lowered at its destroy under the model's lock (contexts on other threads
 * read and write the same limit). */
ortmem_status eng_model_limit_raise(eng_model *m, uint64_t bytes, eng_error *err);
void eng_model_limit_lower(eng_model *m, uint64_t bytes);
/* Counts a context in (+1) or out (-1): eng_model_destroy refuses while one
 * lives. */
void eng_model_context_count(eng_model *m, int delta);

/* The layout whose stable range commits the least for a typical sequence
 * (a quarter of n_ctx), and the most one sequence's cache may commit at
 * n_ctx tokens whichever strategy auto picks (what the authority's limit is
 * raised by). */
ortmem_status eng_kv_choose_layout(eng_model *m, uint32_t n_ctx, ortmem_kv_layout *out,
                                   uint64_t *full_commit, eng_error *err);

#endif
