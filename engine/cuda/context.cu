// A decoding context on the device: the sequences' keys and values in an
// ortmem KV cache (stable strategy), every device buffer in an ortmem arena,
// and the step's kernels captured once as a CUDA graph.
#include <cuda_runtime.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

extern "C" {
#include "model/model_impl.h"
#include "model/numerics.h"
}
#include "cuda/gpu.h"
#include "cuda/kernels.cuh"

namespace
{

constexpr uint32_t kMatsPerLayer = 7; // q k v | o | gate up | down
constexpr uint32_t kDefaultCtx = 4096;

struct device_buffers {
    float *x, *q, *k, *v, *attn, *gate, *up, *logits, *scores, *rope;
    uint16_t *weights;
    eng_gpu_act_block *act;
    int32_t *rows; // tokens, seq, pos: ENG_GPU_MAX_ROWS each
    int32_t *next;
    float *part_v; // the argmax's partial results
    int32_t *part_i;
    void **k_base, **v_base;
    eng_gpu_matrix *mats;
    float **ys;
};

} // namespace

struct eng_gpu_context {
    eng_model *model;
    eng_hparams hp;
    uint32_t n_ctx, batch;
    bool graphs;
    cudaStream_t stream;
    ortmem_kv_cache *kv;
    ortmem_kv_seq **seqs;
    uint64_t *lengths;
    ortmem_kv_layout layout;
    uint64_t limit_raise;
    ortmem_holder *holder;
    ortmem_arena *arena;
    device_buffers d;
    int32_t *h_rows, *h_next; // pinned
    void **k_host, **v_host;  // the device tables' contents
    uint64_t token_stride, head_stride;
    cudaGraphExec_t graph;
    ortmem_graph_signature *signature;
    uint64_t seen_committed, seen_generations;
    int32_t last_rows;        // rows of the last run
    int32_t *last_row_of_seq; // row of each sequence's last next token in the last run
    uint32_t kernels;         // launched by the last forward
    eng_gpu_stats stats;
};

namespace
{

ortmem_status cuda_fail(eng_error *err, cudaError_t e, const char *what)
{
    return eng_fail(err, ORTMEM_E_BACKEND, "%s: CUDA %s (%s)", what, cudaGetErrorName(e),
                    cudaGetErrorString(e));
}

uint64_t driver_calls(ortmem_backend *b)
{
    ortmem_vmm_stats s;
    std::memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    if (ortmem_backend_stats(b, &s) != ORTMEM_OK)
        return 0;
    return s.calls[ORTMEM_OP_CREATE] + s.calls[ORTMEM_OP_MAP] + s.calls[ORTMEM_OP_SET_ACCESS] +
           s.calls[ORTMEM_OP_UNMAP] + s.calls[ORTMEM_OP_RELEASE];
}

eng_gpu_matrix device_matrix(const eng_matrix &m)
{
    eng_gpu_matrix g;
    g.type = m.type;
    g.data = m.data;
    g.rows = (uint32_t)m.rows;
    g.cols = (uint32_t)m.cols;
    return g;
}

// ---- device memory: one arena on the authority, charged to "activations" ----

template <typename T>
ortmem_status arena_take(eng_gpu_context *c, size_t count, T **out, eng_error *err)
{
    void *p = nullptr;
    ortmem_status st = ortmem_arena_alloc(c->arena, count * sizeof(T), 256, &p);
    if (st != ORTMEM_OK)
        return eng_from_ortmem(err, st, "a device buffer of the GPU context");
    *out = (T *)p;
    return ORTMEM_OK;
}

size_t round_up(size_t v, size_t to)
{
    return (v + to - 1) / to * to;
}

// Every device buffer of a context with its element count, each passed to
// take(pointer, count): sizing the arena and allocating from it read the
// same list.
template <typename Take>
bool for_each_buffer(const eng_hparams &hp, uint32_t n_ctx, uint32_t batch, device_buffers &d,
                     Take take)
{
    const size_t R = ENG_GPU_MAX_ROWS, E = hp.n_embd, D = hp.head_dim, QD = (size_t)hp.n_head * D,
                 KD = (size_t)hp.n_head_kv * D, F = hp.n_ff, H = hp.n_head;
    const size_t widest = E > F ? (E > QD ? E : QD) : (F > QD ? F : QD);
    const size_t tables = (size_t)hp.n_layer * batch, mats = (size_t)hp.n_layer * kMatsPerLayer + 1;
    return take(d.x, R * E) && take(d.q, R * QD) && take(d.k, R * KD) && take(d.v, R * KD) &&
           take(d.attn, R * QD) && take(d.gate, R * F) && take(d.up, R * F) &&
           take(d.logits, R * hp.n_vocab) && take(d.scores, R * H * n_ctx) &&
           take(d.rope, (size_t)n_ctx * D) && take(d.weights, R * H * n_ctx) &&
           take(d.act, R * (widest / ENG_GPU_QK)) && take(d.rows, 3 * R) && take(d.next, R) &&
           take(d.part_v, R * ENG_GPU_ARGMAX_PARTS) && take(d.part_i, R * ENG_GPU_ARGMAX_PARTS) &&
           take(d.k_base, tables) && take(d.v_base, tables) && take(d.mats, mats) &&
           take(d.ys, mats);
}

// Bytes of every device buffer, each rounded as the arena rounds (256).
size_t buffer_bytes(const eng_hparams &hp, uint32_t n_ctx, uint32_t batch)
{
    device_buffers unused = {};
    size_t total = 0;
    for_each_buffer(hp, n_ctx, batch, unused, [&](auto *&p, size_t count) {
        total += round_up(count * sizeof(*p), 256);
        return true;
    });
    return total;
}

// Reads every layer's K and V binding of sequence s into the host tables;
// ORTMEM_E_STATE when the strides differ from the other sequences'.
ortmem_status read_bindings(eng_gpu_context *c, uint32_t s, bool *changed, eng_error *err)
{
    for (uint32_t l = 0; l < c->hp.n_layer; l++) {
        for (int value = 0; value < 2; value++) {
            ortmem_kv_binding b;
            std::memset(&b, 0, sizeof b);
            b.struct_size = sizeof b;
            ortmem_status st = ortmem_kv_seq_binding(c->seqs[s], l, value, &b);
            if (st != ORTMEM_OK)
                return eng_from_ortmem(err, st, "a KV binding");
            if (c->token_stride == 0) {
                c->token_stride = b.token_stride;
                c->head_stride = b.head_stride;
            } else if (b.token_stride != c->token_stride || b.head_stride != c->head_stride) {
                return eng_fail(err, ORTMEM_E_STATE,
                                "sequence %u layer %u: strides %" PRIu64 "/%" PRIu64
                                " differ from %" PRIu64 "/%" PRIu64,
                                s, l, b.token_stride, b.head_stride, c->token_stride,
                                c->head_stride);
            }
            void **slot = (value ? c->v_host : c->k_host) + (size_t)l * c->batch + s;
            if (*slot != b.base) {
                *slot = b.base;
                *changed = true;
            }
        }
    }
    return ORTMEM_OK;
}

ortmem_status upload_tables(eng_gpu_context *c, eng_error *err)
{
    const size_t bytes = (size_t)c->hp.n_layer * c->batch * sizeof(void *);
    cudaError_t e =
        cudaMemcpyAsync(c->d.k_base, c->k_host, bytes, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(c->d.v_base, c->v_host, bytes, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    return e == cudaSuccess ? ORTMEM_OK : cuda_fail(err, e, "uploading the KV tables");
}

// ---- the forward pass: T rows, every kernel on the context's stream ----

cudaError_t launch_forward(eng_gpu_context *c, int32_t T, eng_gpu_dot_kind kind, uint32_t *kernels)
{
    const eng_hparams &hp = c->hp;
    const uint32_t E = hp.n_embd, D = hp.head_dim, QD = hp.n_head * D, KD = hp.n_head_kv * D,
                   F = hp.n_ff;
    device_buffers &d = c->d;
    eng_gpu_rows rows = {d.rows, d.rows + ENG_GPU_MAX_ROWS, d.rows + 2 * ENG_GPU_MAX_ROWS, T};
    eng_gpu_kv kv = {d.k_base, d.v_base, c->batch, c->token_stride, c->head_stride};
    cudaStream_t s = c->stream;
    const bool fused_quant = eng_gpu_attention_quantizes(D);
    uint32_t n = 0;
    cudaError_t e = eng_gpu_embed(s, device_matrix(c->model->token_embd), rows, d.x);
    n++;
    for (uint32_t l = 0; l < hp.n_layer && e == cudaSuccess; l++) {
        const eng_layer &L = c->model->layers[l];
        const eng_gpu_matrix *m = d.mats + (size_t)l * kMatsPerLayer;
        float *const *y = d.ys + (size_t)l * kMatsPerLayer;
        if ((e = eng_gpu_rms_norm_quant(s, d.x, L.attn_norm, E, hp.rms_eps, T, d.act)) ||
            (e = eng_gpu_matvec(s, m, QD + 2 * KD, E, y, 3, d.act, T, false)) ||
            (e = eng_gpu_rope_store(s, d.q, d.k, d.v, d.rope, rows, hp.n_head, hp.n_head_kv, D,
                                    hp.n_rot, kv, l)) ||
            (e = eng_gpu_attention(s, d.q, kv, l, rows, hp.n_head, hp.n_head_kv, D, c->n_ctx, kind,
                                   d.scores, d.weights, d.attn, d.act)) ||
            (!fused_quant && (e = eng_gpu_quant(s, d.attn, QD, T, d.act))) ||
            (e = eng_gpu_matvec(s, m + 3, E, QD, y + 3, 1, d.act, T, true)) ||
            (e = eng_gpu_rms_norm_quant(s, d.x, L.ffn_norm, E, hp.rms_eps, T, d.act)) ||
            (e = eng_gpu_matvec(s, m + 4, 2 * F, E, y + 4, 2, d.act, T, false)) ||
            (e = eng_gpu_swiglu_quant(s, d.gate, d.up, F, T, d.act)) ||
            (e = eng_gpu_matvec(s, m + 6, E, F, y + 6, 1, d.act, T, true)))
            break;
        n += fused_quant ? 9 : 10;
    }
    if (e == cudaSuccess) {
        const eng_gpu_matrix *out = d.mats + (size_t)hp.n_layer * kMatsPerLayer;
        float *const *y = d.ys + (size_t)hp.n_layer * kMatsPerLayer;
        if (!(e = eng_gpu_rms_norm_quant(s, d.x, c->model->output_norm, E, hp.rms_eps, T, d.act)) &&
            !(e = eng_gpu_matvec(s, out, hp.n_vocab, E, y, 1, d.act, T, false)))
            e = eng_gpu_argmax(s, d.logits, hp.n_vocab, T, d.part_v, d.part_i, d.next);
        n += 4;
    }
    *kernels = n;
    return e;
}

ortmem_status capture(eng_gpu_context *c, int32_t T, eng_gpu_dot_kind kind, eng_error *err)
{
    ortmem_status st = ortmem_capture_begin();
    if (st != ORTMEM_OK)
        return eng_from_ortmem(err, st, "the capture gate");
    cudaGraph_t graph = nullptr;
    uint32_t kernels = 0;
    cudaError_t e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeGlobal);
    if (e == cudaSuccess) {
        cudaError_t launched = launch_forward(c, T, kind, &kernels);
        e = cudaStreamEndCapture(c->stream, &graph);
        if (launched != cudaSuccess)
            e = launched;
    }
    ortmem_capture_end();
    if (e != cudaSuccess) {
        if (graph)
            cudaGraphDestroy(graph);
        return cuda_fail(err, e, "capturing the decode step");
    }
    cudaGraphExec_t exec = nullptr;
    e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "instantiating the decode step's graph");
    // What the graph holds: every sequence's K and V binding.
    ortmem_graph_signature *sig = nullptr;
    if ((st = ortmem_graph_signature_create(&sig)) != ORTMEM_OK) {
        cudaGraphExecDestroy(exec);
        return eng_from_ortmem(err, st, "the graph signature");
    }
    for (uint32_t s = 0; s < c->batch && st == ORTMEM_OK; s++)
        for (uint32_t l = 0; l < c->hp.n_layer && st == ORTMEM_OK; l++)
            for (int v = 0; v < 2 && st == ORTMEM_OK; v++)
                st = ortmem_graph_signature_add_binding(sig, c->seqs[s], l, v, nullptr);
    if (st != ORTMEM_OK) {
        ortmem_graph_signature_destroy(sig);
        cudaGraphExecDestroy(exec);
        return eng_from_ortmem(err, st, "recording the graph's KV bindings");
    }
    if (c->graph) {
        cudaGraphExecDestroy(c->graph);
        ortmem_graph_signature_destroy(c->signature);
        c->stats.recaptures++;
    }
    c->graph = exec;
    c->signature = sig;
    c->stats.captures++;
    c->kernels = kernels;
    return ORTMEM_OK;
}

// After appends: when the cache committed or moved anything, the tables are
// read again and a captured graph's signature checked (a graph whose bindings
// moved is captured again before its next replay).
ortmem_status follow_kv(eng_gpu_context *c, bool *recapture, eng_error *err)
{
    ortmem_kv_stats ks;
    std::memset(&ks, 0, sizeof ks);
    ks.struct_size = sizeof ks;
    ortmem_status st = ortmem_kv_cache_stats(c->kv, &ks);
    if (st != ORTMEM_OK)
        return eng_from_ortmem(err, st, "the KV cache's stats");
    if (ks.committed_bytes == c->seen_committed && ks.generations_bumped == c->seen_generations)
        return ORTMEM_OK;
    c->seen_committed = ks.committed_bytes;
    c->seen_generations = ks.generations_bumped;
    c->stats.kv_checks++;
    if (c->graph) {
        char reason[256];
        ortmem_graph_verdict verdict = ORTMEM_GRAPH_KEEP;
        if ((st = ortmem_graph_signature_check(c->signature, reason, sizeof reason, &verdict)) !=
            ORTMEM_OK)
            return eng_from_ortmem(err, st, "checking the decode graph");
        if (verdict == ORTMEM_GRAPH_KEEP)
            return ORTMEM_OK;
        *recapture = true;
    }
    bool changed = false;
    for (uint32_t s = 0; s < c->batch; s++)
        if ((st = read_bindings(c, s, &changed, err)) != ORTMEM_OK)
            return st;
    return changed ? upload_tables(c, err) : ORTMEM_OK;
}

// Runs T rows (h_rows filled) through the model; graph: replay (or capture)
// the decode step's graph.
ortmem_status run_rows(eng_gpu_context *c, int32_t T, eng_gpu_dot_kind kind, bool graph,
                       eng_error *err)
{
    bool recapture = false;
    ortmem_status st = follow_kv(c, &recapture, err);
    if (st != ORTMEM_OK)
        return st;
    cudaError_t e = cudaMemcpyAsync(c->d.rows, c->h_rows, 3 * ENG_GPU_MAX_ROWS * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, c->stream);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "uploading the step's rows");
    if (graph) {
        if (!c->graph || recapture)
            if ((st = capture(c, T, kind, err)) != ORTMEM_OK)
                return st;
        e = cudaGraphLaunch(c->graph, c->stream);
        c->stats.replays++;
    } else {
        e = launch_forward(c, T, kind, &c->kernels);
    }
    if (e != cudaSuccess)
        return cuda_fail(err, e, graph ? "replaying the decode step" : "the forward pass");
    e = cudaMemcpyAsync(c->h_next, c->d.next, (size_t)T * sizeof(int32_t), cudaMemcpyDeviceToHost,
                        c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "the forward pass");
    c->last_rows = T;
    return ORTMEM_OK;
}

void context_free(eng_gpu_context *c)
{
    if (!c)
        return;
    if (c->graph)
        cudaGraphExecDestroy(c->graph);
    if (c->signature)
        ortmem_graph_signature_destroy(c->signature);
    if (c->seqs)
        for (uint32_t s = 0; s < c->batch; s++)
            if (c->seqs[s])
                ortmem_kv_seq_destroy(c->seqs[s]);
    if (c->kv)
        ortmem_kv_cache_destroy(c->kv);
    if (c->arena)
        ortmem_arena_destroy(c->arena, 1);
    if (c->holder)
        ortmem_holder_unregister(c->holder);
    if (c->limit_raise)
        eng_model_limit_lower(c->model, c->limit_raise);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    cudaFreeHost(c->h_rows);
    cudaFreeHost(c->h_next);
    std::free(c->k_host);
    std::free(c->v_host);
    std::free(c->seqs);
    std::free(c->lengths);
    std::free(c->last_row_of_seq);
    delete c;
}

ortmem_status create_buffers(eng_gpu_context *c, eng_error *err)
{
    const eng_hparams &hp = c->hp;
    const size_t D = hp.head_dim;
    device_buffers &d = c->d;
    const size_t mats = (size_t)hp.n_layer * kMatsPerLayer + 1;
    ortmem_status st = ORTMEM_OK;
    if (!for_each_buffer(hp, c->n_ctx, c->batch, d, [&](auto *&p, size_t count) {
            return (st = arena_take(c, count, &p, err)) == ORTMEM_OK;
        }))
        return st;

    // The weight matrices and outputs of each fused product launch.
    eng_gpu_matrix *hm = new eng_gpu_matrix[mats];
    float **hy = new float *[mats];
    for (uint32_t l = 0; l < hp.n_layer; l++) {
        const eng_layer &L = c->model->layers[l];
        eng_gpu_matrix *m = hm + (size_t)l * kMatsPerLayer;
        float **y = hy + (size_t)l * kMatsPerLayer;
        const eng_matrix *w[kMatsPerLayer] = {&L.wq,     &L.wk,   &L.wv,    &L.wo,
                                              &L.w_gate, &L.w_up, &L.w_down};
        float *out[kMatsPerLayer] = {d.q, d.k, d.v, d.x, d.gate, d.up, d.x};
        for (uint32_t i = 0; i < kMatsPerLayer; i++) {
            m[i] = device_matrix(*w[i]);
            y[i] = out[i];
        }
    }
    hm[mats - 1] = device_matrix(c->model->output);
    hy[mats - 1] = d.logits;
    // The CPU's own cos/sin table for every position.
    float *rope = (float *)std::malloc((size_t)c->n_ctx * D * sizeof(float));
    cudaError_t e = cudaErrorMemoryAllocation;
    if (rope) {
        for (uint32_t p = 0; p < c->n_ctx; p++)
            eng_rope_table((int64_t)p, hp.rope_freq_base, hp.n_rot, hp.head_dim,
                           rope + (size_t)p * D);
        e = cudaMemcpy(d.rope, rope, (size_t)c->n_ctx * D * sizeof(float), cudaMemcpyHostToDevice);
    }
    if (e == cudaSuccess)
        e = cudaMemcpy(d.mats, hm, mats * sizeof *hm, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(d.ys, hy, mats * sizeof *hy, cudaMemcpyHostToDevice);
    std::free(rope);
    delete[] hm;
    delete[] hy;
    if (e != cudaSuccess)
        return cuda_fail(err, e, "filling the GPU context's tables");
    return ORTMEM_OK;
}

bool weights_supported(const eng_model *m, eng_error *err)
{
    const eng_hparams &hp = m->hp;
    auto ok = [&](const eng_matrix &w, const char *what, uint32_t layer) {
        if (w.type == ENG_TYPE_Q4_1 || (w.type == ENG_TYPE_Q8_0))
            return true;
        eng_type_traits tr = eng_type_traits_of(w.type);
        eng_fail(err, ORTMEM_E_UNSUPPORTED,
                 "%s of layer %u is %s; the GPU kernels multiply Q4_1 and Q8_0 weights", what,
                 layer, tr.name ? tr.name : "an unknown type");
        return false;
    };
    if (m->token_embd.type != ENG_TYPE_Q8_0) {
        eng_type_traits tr = eng_type_traits_of(m->token_embd.type);
        eng_fail(err, ORTMEM_E_UNSUPPORTED, "token_embd.weight is %s; the GPU embedding reads Q8_0",
                 tr.name ? tr.name : "an unknown type");
        return false;
    }
    for (uint32_t l = 0; l < hp.n_layer; l++) {
        const eng_layer &L = m->layers[l];
        if (!ok(L.wq, "attn_q", l) || !ok(L.wk, "attn_k", l) || !ok(L.wv, "attn_v", l) ||
            !ok(L.wo, "attn_output", l) || !ok(L.w_gate, "ffn_gate", l) ||
            !ok(L.w_up, "ffn_up", l) || !ok(L.w_down, "ffn_down", l))
            return false;
    }
    return ok(m->output, "output", hp.n_layer);
}

} // namespace

extern "C" {

ortmem_status eng_gpu_backend_create(int device, ortmem_backend **out, eng_error *err)
{
    ortmem_cuda_options o = ORTMEM_CUDA_OPTIONS_INIT;
    o.ordinal = device;
    ortmem_status st = ortmem_cuda_backend_create(&o, out);
    if (st != ORTMEM_OK)
        return eng_fail(err, st, "the CUDA backend on device %d: %s", device, ortmem_last_error());
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        ortmem_backend_destroy(*out);
        *out = nullptr;
        return cuda_fail(err, e, "selecting the device");
    }
    return ORTMEM_OK;
}

ortmem_status eng_gpu_context_create(eng_model *m, const eng_gpu_options *options,
                                     eng_gpu_context **out, eng_error *err)
{
    if (!m || !out)
        return eng_fail(err, ORTMEM_E_INVALID, "GPU context: no model or no result pointer");
    eng_gpu_options o = {};
    if (options)
        o = *options;
    const eng_hparams &hp = m->hp;
    const uint32_t n_ctx =
        o.n_ctx ? o.n_ctx : (hp.n_ctx_train < kDefaultCtx ? hp.n_ctx_train : kDefaultCtx);
    const uint32_t batch = o.batch ? o.batch : 1;
    if (n_ctx > hp.n_ctx_train)
        return eng_fail(err, ORTMEM_E_RANGE,
                        "a context of %u tokens exceeds the model's trained context of %u", n_ctx,
                        hp.n_ctx_train);
    if (batch > ENG_GPU_MAX_BATCH)
        return eng_fail(err, ORTMEM_E_RANGE,
                        "a batch of %u sequences exceeds the %d the GPU "
                        "step runs",
                        batch, ENG_GPU_MAX_BATCH);
    {
        // The weights must be device memory: the model loaded over a CUDA backend.
        cudaPointerAttributes attr;
        std::memset(&attr, 0, sizeof attr);
        if (cudaPointerGetAttributes(&attr, m->token_embd.data) != cudaSuccess ||
            attr.type != cudaMemoryTypeDevice) {
            cudaGetLastError(); // the query's error is the answer, not a sticky state
            return eng_fail(err, ORTMEM_E_INVALID,
                            "GPU context: the model's weights are not device memory (load it "
                            "over the CUDA backend of eng_gpu_backend_create)");
        }
    }
    if (hp.n_embd % ENG_GPU_QK || hp.n_ff % ENG_GPU_QK || (hp.n_head * hp.head_dim) % ENG_GPU_QK)
        return eng_fail(err, ORTMEM_E_UNSUPPORTED,
                        "embedding %u, feed-forward %u and heads x dimension %u must be "
                        "multiples of %d for the GPU kernels",
                        hp.n_embd, hp.n_ff, hp.n_head * hp.head_dim, ENG_GPU_QK);
    if (!weights_supported(m, err))
        return ORTMEM_E_UNSUPPORTED;
    if (m->streamed_count)
        return eng_fail(err, ORTMEM_E_UNSUPPORTED,
                        "GPU context: %u matrices are streamed under the model's weights budget; "
                        "the GPU kernels read every weight resident (streaming on the device is "
                        "proposed)",
                        m->streamed_count);

    eng_gpu_context *c = new (std::nothrow) eng_gpu_context();
    if (!c)
        return eng_fail(err, ORTMEM_E_NOMEM, "GPU context: no memory");
    c->model = m;
    c->hp = hp;
    c->n_ctx = n_ctx;
    c->batch = batch;
    c->graphs = !o.no_graphs;
    ortmem_status st = ORTMEM_OK;
    cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        c->stream = nullptr;
        st = cuda_fail(err, e, "the GPU context's stream");
        goto fail;
    }
    if ((e = cudaMallocHost((void **)&c->h_rows, 3 * ENG_GPU_MAX_ROWS * sizeof(int32_t))) ||
        (e = cudaMallocHost((void **)&c->h_next, ENG_GPU_MAX_ROWS * sizeof(int32_t)))) {
        st = cuda_fail(err, e, "the GPU context's pinned rows");
        goto fail;
    }
    c->seqs = (ortmem_kv_seq **)std::calloc(batch, sizeof *c->seqs);
    c->lengths = (uint64_t *)std::calloc(batch, sizeof *c->lengths);
    c->last_row_of_seq = (int32_t *)std::calloc(batch, sizeof *c->last_row_of_seq);
    c->k_host = (void **)std::calloc((size_t)hp.n_layer * batch, sizeof(void *));
    c->v_host = (void **)std::calloc((size_t)hp.n_layer * batch, sizeof(void *));
    if (!c->seqs || !c->lengths || !c->last_row_of_seq || !c->k_host || !c->v_host) {
        st = eng_fail(err, ORTMEM_E_NOMEM, "GPU context: no memory");
        goto fail;
    }
    {
        uint64_t full_commit = 0;
        if ((st = eng_kv_choose_layout(m, n_ctx, &c->layout, &full_commit, err)) != ORTMEM_OK)
            goto fail;
        size_t granule = 0;
        if ((st = ortmem_backend_granule(m->backend, &granule)) != ORTMEM_OK) {
            eng_from_ortmem(err, st, "the backend's granule");
            goto fail;
        }
        const size_t arena_bytes = round_up(buffer_bytes(hp, n_ctx, batch), granule);
        const uint64_t raise = full_commit * batch + arena_bytes;
        if ((st = eng_model_limit_raise(m, raise, err)) != ORTMEM_OK)
            goto fail;
        c->limit_raise = raise;

        ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
        ho.name = "activations";
        ho.role = ORTMEM_ROLE_WORKSPACE;
        ortmem_account account;
        if ((st = ortmem_holder_register(m->authority, &ho, &c->holder)) != ORTMEM_OK ||
            (st = ortmem_holder_account(c->holder, &account)) != ORTMEM_OK) {
            eng_from_ortmem(err, st, "the activations holder");
            goto fail;
        }
        ortmem_arena_options ao = ORTMEM_ARENA_OPTIONS_INIT;
        ao.capacity = arena_bytes;
        ao.account = &account;
        if ((st = ortmem_arena_create(m->backend, &ao, &c->arena)) != ORTMEM_OK) {
            eng_from_ortmem(err, st, "the activations arena");
            goto fail;
        }
    }
    if ((st = create_buffers(c, err)) != ORTMEM_OK)
        goto fail;
    {
        ortmem_kv_cache_options ko = ORTMEM_KV_CACHE_OPTIONS_INIT;
        ko.geometry = eng_kv_geometry(&hp, c->layout);
        ko.strategy = ORTMEM_KV_STABLE;
        ko.graph_capture = 1;
        ko.max_context = n_ctx;
        ko.max_sequences = batch;
        ko.warm_max_bytes = 0;
        ko.stream = (uint64_t)(uintptr_t)c->stream;
        if ((st = ortmem_kv_cache_create(m->authority, &ko, &c->kv)) != ORTMEM_OK) {
            eng_from_ortmem(err, st, "the KV cache");
            goto fail;
        }
        bool changed = false;
        for (uint32_t s = 0; s < batch; s++) {
            if ((st = ortmem_kv_seq_create(c->kv, &c->seqs[s])) != ORTMEM_OK) {
                eng_from_ortmem(err, st, "a KV sequence");
                goto fail;
            }
            if ((st = read_bindings(c, s, &changed, err)) != ORTMEM_OK)
                goto fail;
        }
        if ((st = upload_tables(c, err)) != ORTMEM_OK)
            goto fail;
    }
    eng_model_context_count(m, +1);
    *out = c;
    return ORTMEM_OK;
fail:
    context_free(c);
    return st;
}

ortmem_status eng_gpu_context_destroy(eng_gpu_context *c, eng_error *err)
{
    if (!c)
        return ORTMEM_OK;
    ortmem_status result = ORTMEM_OK;
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        result = cuda_fail(err, e, "finishing the GPU context's work");
    for (uint32_t s = 0; s < c->batch; s++) {
        ortmem_status st = ortmem_kv_seq_destroy(c->seqs[s]);
        c->seqs[s] = nullptr;
        if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED && result == ORTMEM_OK)
            result = eng_from_ortmem(err, st, "destroying a KV sequence");
    }
    ortmem_status st = ortmem_kv_cache_destroy(c->kv);
    c->kv = nullptr;
    if (st != ORTMEM_OK && result == ORTMEM_OK)
        result = eng_from_ortmem(err, st, "destroying the KV cache");
    eng_model_context_count(c->model, -1);
    context_free(c);
    return result;
}

ortmem_status eng_gpu_prefill(eng_gpu_context *c, uint32_t seq, const int32_t *tokens, size_t count,
                              int32_t *next, eng_error *err)
{
    if (!c || (!tokens && count) || !next)
        return eng_fail(err, ORTMEM_E_INVALID, "prefill: no context, tokens or result pointer");
    if (seq >= c->batch)
        return eng_fail(err, ORTMEM_E_RANGE, "prefill: sequence %u of %u", seq, c->batch);
    if (count == 0)
        return eng_fail(err, ORTMEM_E_INVALID, "prefill: no tokens");
    if (count > c->n_ctx - c->lengths[seq])
        return eng_fail(err, ORTMEM_E_RANGE,
                        "%zu tokens after the %" PRIu64 " in sequence %u exceed the context of %u",
                        count, c->lengths[seq], seq, c->n_ctx);
    for (size_t i = 0; i < count; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= c->hp.n_vocab)
            return eng_fail(err, ORTMEM_E_RANGE,
                            "token %d (at %zu) is outside the vocabulary of %u", tokens[i], i,
                            c->hp.n_vocab);
    const uint64_t start = c->lengths[seq];
    const uint64_t calls0 = driver_calls(c->model->backend);
    ortmem_status st = ortmem_kv_seq_append(c->seqs[seq], count);
    if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED)
        return eng_from_ortmem(err, st, "appending the prompt to the KV sequence");
    const eng_gpu_dot_kind kind = count > 1 ? ENG_GPU_DOT_BATCH : ENG_GPU_DOT_DECODE;
    for (size_t done = 0; done < count;) {
        const int32_t T =
            (int32_t)(count - done < ENG_GPU_MAX_ROWS ? count - done : ENG_GPU_MAX_ROWS);
        for (int32_t t = 0; t < T; t++) {
            c->h_rows[t] = tokens[done + t];
            c->h_rows[ENG_GPU_MAX_ROWS + t] = (int32_t)seq;
            c->h_rows[2 * ENG_GPU_MAX_ROWS + t] = (int32_t)(start + done + t);
        }
        if ((st = run_rows(c, T, kind, false, err)) != ORTMEM_OK) {
            ortmem_kv_seq_truncate(c->seqs[seq], start);
            return st;
        }
        done += (size_t)T;
    }
    c->lengths[seq] = start + count;
    c->last_row_of_seq[seq] = c->last_rows - 1;
    for (uint32_t s = 0; s < c->batch; s++)
        if (s != seq)
            c->last_row_of_seq[s] = -1;
    *next = c->h_next[c->last_rows - 1];
    c->stats.prefill_rows += count;
    c->stats.kv_driver_calls += driver_calls(c->model->backend) - calls0;
    return ORTMEM_OK;
}

ortmem_status eng_gpu_step(eng_gpu_context *c, const int32_t *tokens, int32_t *next, eng_error *err)
{
    if (!c || !tokens || !next)
        return eng_fail(err, ORTMEM_E_INVALID, "step: no context, tokens or result pointer");
    for (uint32_t s = 0; s < c->batch; s++) {
        if (c->lengths[s] >= c->n_ctx)
            return eng_fail(err, ORTMEM_E_RANGE,
                            "sequence %u holds %" PRIu64 " tokens, the whole context", s,
                            c->lengths[s]);
        if (tokens[s] < 0 || (uint32_t)tokens[s] >= c->hp.n_vocab)
            return eng_fail(err, ORTMEM_E_RANGE,
                            "token %d (sequence %u) is outside the vocabulary of %u", tokens[s], s,
                            c->hp.n_vocab);
    }
    const uint64_t calls0 = driver_calls(c->model->backend);
    ortmem_status st = ORTMEM_OK;
    uint32_t appended = 0;
    for (; appended < c->batch; appended++) {
        st = ortmem_kv_seq_append(c->seqs[appended], 1);
        if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED)
            break;
        st = ORTMEM_OK;
    }
    if (st == ORTMEM_OK) {
        const int32_t T = (int32_t)c->batch;
        for (int32_t t = 0; t < T; t++) {
            c->h_rows[t] = tokens[t];
            c->h_rows[ENG_GPU_MAX_ROWS + t] = t;
            c->h_rows[2 * ENG_GPU_MAX_ROWS + t] = (int32_t)c->lengths[t];
        }
        st = run_rows(c, T, ENG_GPU_DOT_DECODE, c->graphs, err);
    } else {
        eng_from_ortmem(err, st, "appending to a KV sequence");
    }
    if (st != ORTMEM_OK) {
        for (uint32_t s = 0; s < appended; s++)
            ortmem_kv_seq_truncate(c->seqs[s], c->lengths[s]);
        return st;
    }
    for (uint32_t s = 0; s < c->batch; s++) {
        c->lengths[s]++;
        c->last_row_of_seq[s] = (int32_t)s;
        next[s] = c->h_next[s];
    }
    c->stats.steps++;
    c->stats.kernels_per_step = c->kernels;
    c->stats.kv_driver_calls += driver_calls(c->model->backend) - calls0;
    return ORTMEM_OK;
}

ortmem_status eng_gpu_logits(eng_gpu_context *c, uint32_t seq, float *out, eng_error *err)
{
    if (!c || !out || seq >= c->batch)
        return eng_fail(err, ORTMEM_E_INVALID, "logits: no context, no output or no sequence %u",
                        seq);
    const int32_t row = c->last_row_of_seq[seq];
    if (row < 0 || c->last_rows == 0)
        return eng_fail(err, ORTMEM_E_STATE, "sequence %u has no logits from the last run", seq);
    cudaError_t e = cudaMemcpy(out, c->d.logits + (size_t)row * c->hp.n_vocab,
                               (size_t)c->hp.n_vocab * sizeof(float), cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? ORTMEM_OK : cuda_fail(err, e, "copying the logits");
}

ortmem_status eng_gpu_reset(eng_gpu_context *c, uint32_t seq, eng_error *err)
{
    if (!c || seq >= c->batch)
        return eng_fail(err, ORTMEM_E_INVALID, "reset: no context or no sequence %u", seq);
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "finishing the step before the reset");
    ortmem_status st = ortmem_kv_seq_truncate(c->seqs[seq], 0);
    if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED)
        return eng_from_ortmem(err, st, "rewinding the KV sequence");
    c->lengths[seq] = 0;
    c->last_row_of_seq[seq] = -1;
    return ORTMEM_OK;
}

uint64_t eng_gpu_length(const eng_gpu_context *c, uint32_t seq)
{
    return c && seq < c->batch ? c->lengths[seq] : 0;
}

uint32_t eng_gpu_batch(const eng_gpu_context *c)
{
    return c ? c->batch : 0;
}

uint32_t eng_gpu_n_ctx(const eng_gpu_context *c)
{
    return c ? c->n_ctx : 0;
}

void eng_gpu_stats_get(const eng_gpu_context *c, eng_gpu_stats *stats)
{
    *stats = c->stats;
}

ortmem_status eng_gpu_kv_stats(eng_gpu_context *c, ortmem_kv_stats *stats, eng_error *err)
{
    stats->struct_size = sizeof *stats;
    ortmem_status st = ortmem_kv_cache_stats(c->kv, stats);
    return st == ORTMEM_OK ? ORTMEM_OK : eng_from_ortmem(err, st, "the KV cache's stats");
}

ortmem_status eng_gpu_kv_explain(eng_gpu_context *c, ortmem_kv_layout *layout, char *buffer,
                                 size_t capacity, eng_error *err)
{
    ortmem_kv_strategy s = ORTMEM_KV_STABLE;
    ortmem_status st = ortmem_kv_cache_explain(c->kv, &s, buffer, capacity);
    if (st != ORTMEM_OK)
        return eng_from_ortmem(err, st, "explaining the KV cache");
    if (layout)
        *layout = c->layout;
    return ORTMEM_OK;
}

} // extern "C"
