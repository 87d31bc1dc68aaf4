/* The reference decode engine on a CUDA device: the same Llama-family model
 * (engine/model) loaded over ortmem's CUDA backend, so the residency cache's
 * slots and the KV cache's sequences are device memory, and a forward pass of
 * CUDA kernels (engine/cuda/kernels.cuh) that rounds where the CPU engine
 * rounds. Sequences use the KV cache's stable strategy: their keys and values
 * keep one address for the context's whole length, so the decode step is
 * captured once as a CUDA graph (through ortmem's capture gate) and replayed
 * for every token while the cache commits granules under it.
 *
 * A context decodes `batch` independent sequences in lock step: each step
 * appends one token to every sequence (prompts are prefilled one sequence at
 * a time; continuous batching, sequences joining and leaving mid-run, is not
 * built). Callable from C. */
#ifndef ENGINE_CUDA_GPU_H
#define ENGINE_CUDA_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ortmem/ortmem.h>

#include "common/status.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ENG_GPU_MAX_BATCH 32

/* ortmem's CUDA backend on device ordinal: ORTMEM_E_UNAVAILABLE with the
 * reason where there is no usable GPU or driver. The caller passes it to
 * eng_model_load (eng_model_options.backend) and destroys it after the model. */
ortmem_status eng_gpu_backend_create(int device, ortmem_backend **out, eng_error *err);

/* ---- Layers streamed under a device budget ----
 * A model loaded with a weights budget (eng_model_options.weights_budget)
 * keeps the layers that do not fit in pinned host memory and copies each
 * through the residency cache's ring for its forward pass: the streaming
 * holds that pinned memory (ortmem staging, chunks registered with
 * cudaHostRegister) and the two streams the cache copies on and computes
 * on. The step is then captured as one graph per segment (the embedding,
 * each layer, the output), the kernels reading a streamed layer's weights
 * through device tables written after its acquire, so the graphs stay valid
 * whichever ring slot the layer lands in. */
typedef struct eng_gpu_streaming eng_gpu_streaming;

/* On the current device (eng_gpu_backend_create selects it). */
ortmem_status eng_gpu_streaming_create(eng_gpu_streaming **out, eng_error *err);
/* Sets the model options a streamed model needs: the staging, the two
 * streams, a ring of 2 layer slots (one copied while one computes). */
void eng_gpu_streaming_model_options(const eng_gpu_streaming *streaming, eng_model_options *mo);
/* Host-to-device bandwidth from pinned memory on the streaming's copy
 * stream (bytes copied 8 times, the best of them, in GB/s): the bound on a
 * streamed layer's copy. */
ortmem_status eng_gpu_streaming_bandwidth(eng_gpu_streaming *streaming, size_t bytes,
                                          double *gb_per_s, eng_error *err);
/* After the model it served (ORTMEM_E_BUSY while a context uses it). */
ortmem_status eng_gpu_streaming_destroy(eng_gpu_streaming *streaming, eng_error *err);

typedef struct eng_gpu_options {
    uint32_t n_ctx; /* tokens per sequence; 0 = min(4096, the trained context) */
    uint32_t batch; /* sequences, 1..ENG_GPU_MAX_BATCH; 0 = 1 */
    bool no_graphs; /* launch the step's kernels every time instead of replaying a graph */
    /* The model's streaming when it streams layers (required then: the
     * context computes on its compute stream; one context at a time). */
    eng_gpu_streaming *streaming;
} eng_gpu_options;

typedef struct eng_gpu_stats {
    uint64_t steps;           /* decode steps (one token per sequence) */
    uint64_t prefill_rows;    /* prompt tokens run */
    uint64_t captures;        /* graphs captured (the first, then re-captures) */
    uint64_t recaptures;      /* captures after the first: a check said INVALIDATE */
    uint64_t replays;         /* graph launches */
    uint64_t kv_checks;       /* signature checks after the cache committed more */
    uint64_t kv_driver_calls; /* backend creates, maps, set-access, unmaps and releases
                                 made during steps and prefills (the KV growing) */
    uint64_t kernels_per_step;
} eng_gpu_stats;

typedef struct eng_gpu_context eng_gpu_context;

/* Creates the KV cache (stable strategy, the layout committing least for a
 * typical sequence), its batch sequences, the CUDA stream and every device
 * buffer (an ortmem arena charged to the holder "activations"); the
 * authority's limit is raised by what they may commit. The model must have
 * been loaded over a CUDA backend (ORTMEM_E_INVALID otherwise). */
ortmem_status eng_gpu_context_create(eng_model *model, const eng_gpu_options *options,
                                     eng_gpu_context **out, eng_error *err);
ortmem_status eng_gpu_context_destroy(eng_gpu_context *ctx, eng_error *err);

/* Runs count prompt tokens through sequence seq (batches of up to 32 rows;
 * attention in the CPU engine's batch order when count > 1, its decode order
 * for one token), leaving that sequence's greedy next token in *next.
 * ORTMEM_E_RANGE (nothing changes) past the context or for an id outside the
 * vocabulary; a failure leaves the sequence as it was. */
ortmem_status eng_gpu_prefill(eng_gpu_context *ctx, uint32_t seq, const int32_t *tokens,
                              size_t count, int32_t *next, eng_error *err);
/* One decode step: tokens[s] appended to every sequence s < batch, next[s]
 * its greedy token (the largest logit, the lowest id on ties). Replays the
 * captured graph (capturing it the first time). */
ortmem_status eng_gpu_step(eng_gpu_context *ctx, const int32_t *tokens, int32_t *next,
                           eng_error *err);
/* The logits (n_vocab floats) that gave sequence seq's last next token. */
ortmem_status eng_gpu_logits(eng_gpu_context *ctx, uint32_t seq, float *out, eng_error *err);
/* Rewinds sequence seq to no tokens (its granules decommitted, its address
 * kept: the graph stays valid). */
ortmem_status eng_gpu_reset(eng_gpu_context *ctx, uint32_t seq, eng_error *err);

uint64_t eng_gpu_length(const eng_gpu_context *ctx, uint32_t seq);
uint32_t eng_gpu_batch(const eng_gpu_context *ctx);
uint32_t eng_gpu_n_ctx(const eng_gpu_context *ctx);
void eng_gpu_stats_get(const eng_gpu_context *ctx, eng_gpu_stats *stats);
ortmem_status eng_gpu_kv_stats(eng_gpu_context *ctx, ortmem_kv_stats *stats, eng_error *err);
ortmem_status eng_gpu_kv_explain(eng_gpu_context *ctx, ortmem_kv_layout *layout, char *buffer,
                                 size_t capacity, eng_error *err);

#ifdef __cplusplus
}
#endif

#endif
