// The GPU context's insides, shared by context.cu (create, destroy, the
// public calls) and forward.cu (the forward pass, its graphs, streamed
// layers).
#ifndef ENGINE_CUDA_CONTEXT_IMPL_H
#define ENGINE_CUDA_CONTEXT_IMPL_H

#include <cuda_runtime.h>

extern "C" {
#include "model/model_impl.h"
}
#include "cuda/gpu.h"
#include "cuda/kernels.cuh"

constexpr uint32_t kMatsPerLayer = 7; // q k v | o | gate up | down

struct eng_gpu_device_buffers {
    float *x, *q, *k, *v, *attn, *gate, *up, *logits, *scores, *rope;
    uint16_t *weights;
    eng_gpu_act_block *act;
    int32_t *rows; // tokens, seq, pos: ENG_GPU_MAX_ROWS each
    int32_t *next;
    float *part_v; // the argmax's partial results
    int32_t *part_i;
    void **k_base, **v_base;
    // What the kernels read the weights through, so a graph stays valid
    // when a streamed layer lands in another ring slot: each product's
    // matrices (kMatsPerLayer per layer, then the output) and each norm's
    // weights (two per layer, then the output norm).
    eng_gpu_matrix *mats;
    const float **norms;
    float **ys;
};

struct eng_gpu_streaming {
    ortmem_staging *staging;
    cudaStream_t copy, compute;
    bool in_use; // by a context
};

struct eng_gpu_context {
    eng_model *model;
    eng_hparams hp;
    uint32_t n_ctx, batch;
    bool graphs;
    cudaStream_t stream;
    eng_gpu_streaming *streaming; // the stream's owner when the model streams layers
    ortmem_kv_cache *kv;
    ortmem_kv_seq **seqs;
    uint64_t *lengths;
    ortmem_kv_layout layout;
    uint64_t limit_raise;
    ortmem_holder *holder;
    ortmem_arena *arena;
    eng_gpu_device_buffers d;
    int32_t *h_rows, *h_next; // pinned
    eng_gpu_matrix *h_mats;   // pinned: the tables' host side
    const float **h_norms;
    void **k_host, **v_host; // the KV tables' contents
    uint64_t token_stride, head_stride;
    // The step's graphs: one, or with streamed layers one per segment (the
    // embedding, each layer, the output), launched between the layers'
    // acquires and releases.
    uint32_t segments;
    cudaGraphExec_t *graph;
    ortmem_graph_signature *signature;
    uint64_t seen_committed, seen_generations;
    int32_t last_rows;        // rows of the last run
    int32_t *last_row_of_seq; // row of each sequence's last next token in the last run
    uint32_t kernels;         // launched by the last forward
    uint32_t graph_kernels;   // in the captured graphs
    eng_gpu_stats stats;
};

ortmem_status eng_gpu_cuda_fail(eng_error *err, cudaError_t e, const char *what);
eng_gpu_matrix eng_gpu_device_matrix(const eng_matrix &m);

// Reads every layer's K and V binding of sequence s into the host tables
// (*changed when one moved); ORTMEM_E_STATE when the strides differ from the
// other sequences'.
ortmem_status eng_gpu_read_bindings(eng_gpu_context *c, uint32_t s, bool *changed, eng_error *err);
ortmem_status eng_gpu_upload_tables(eng_gpu_context *c, eng_error *err);
// Runs T rows (h_rows filled) through the model: graph, replay (or capture)
// the step's graphs; streamed layers acquired around their segments.
ortmem_status eng_gpu_run_rows(eng_gpu_context *c, int32_t T, eng_gpu_dot_kind kind, bool graph,
                               eng_error *err);
// The graphs' segments for the model: 1, or n_layer + 2 when it streams.
uint32_t eng_gpu_segments(const eng_model *m);

#endif
