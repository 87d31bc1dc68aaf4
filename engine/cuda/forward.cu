// The GPU context's forward pass: the kernels of a step on the context's
// stream, captured once as graphs and replayed; the KV tables followed as the
// cache commits; layers streamed under a weights budget acquired from the
// residency cache around their segments.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <new>

#include "cuda/context_impl.h"

namespace
{

// ---- the kernels: T rows, every kernel on the context's stream ----

struct pass {
    eng_gpu_context *c;
    int32_t T;
    eng_gpu_dot_kind kind;
    uint32_t kernels; // launched so far
};

eng_gpu_rows rows_of(const pass &p)
{
    const eng_gpu_device_buffers &d = p.c->d;
    return {d.rows, d.rows + ENG_GPU_MAX_ROWS, d.rows + 2 * ENG_GPU_MAX_ROWS, p.T};
}

cudaError_t launch_embedding(pass &p)
{
    p.kernels++;
    return eng_gpu_embed(p.c->stream, eng_gpu_device_matrix(p.c->model->token_embd), rows_of(p),
                         p.c->d.x);
}

cudaError_t launch_layer(pass &p, uint32_t l)
{
    eng_gpu_context *c = p.c;
    const eng_hparams &hp = c->hp;
    const uint32_t E = hp.n_embd, D = hp.head_dim, QD = hp.n_head * D, KD = hp.n_head_kv * D,
                   F = hp.n_ff;
    const int32_t T = p.T;
    eng_gpu_device_buffers &d = c->d;
    const eng_gpu_rows rows = rows_of(p);
    const eng_gpu_kv kv = {d.k_base, d.v_base, c->batch, c->token_stride, c->head_stride};
    cudaStream_t s = c->stream;
    const bool fused_quant = eng_gpu_attention_quantizes(D);
    // One row: the norms computed inside the products. A decode pass (each
    // row its own sequence): RoPE and the KV store inside attention.
    const bool prologues = T == 1 && eng_gpu_matvec_prologue_fits(E);
    const bool fresh_kv = p.kind == ENG_GPU_DOT_DECODE;
    const eng_gpu_matrix *m = d.mats + (size_t)l * kMatsPerLayer;
    float *const *y = d.ys + (size_t)l * kMatsPerLayer;
    const float *const *attn_w = d.norms + 2 * (size_t)l, *const *ffn_w = attn_w + 1;
    const eng_gpu_prologue attn_norm = {ENG_GPU_PROLOGUE_RMS, d.x, attn_w, E, hp.rms_eps};
    const eng_gpu_prologue ffn_norm = {ENG_GPU_PROLOGUE_RMS, d.x, ffn_w, E, hp.rms_eps};
    const eng_gpu_new_kv fresh = {fresh_kv ? d.k : nullptr, d.v, d.rope, hp.n_rot};
    cudaError_t e;
    if (prologues) {
        e = eng_gpu_matvec_prologue(s, m, QD + 2 * KD, E, y, 3, attn_norm, false);
    } else if (!(e = eng_gpu_rms_norm_quant(s, d.x, attn_w, E, hp.rms_eps, T, d.act))) {
        e = eng_gpu_matvec(s, m, QD + 2 * KD, E, y, 3, d.act, T, false);
        p.kernels++;
    }
    p.kernels++;
    if (e ||
        (!fresh_kv && (e = eng_gpu_rope_store(s, d.q, d.k, d.v, d.rope, rows, hp.n_head,
                                              hp.n_head_kv, D, hp.n_rot, kv, l))) ||
        (e = eng_gpu_attention(s, d.q, kv, l, rows, hp.n_head, hp.n_head_kv, D, c->n_ctx, p.kind,
                               d.scores, d.weights, d.attn, d.act, fresh)) ||
        (!fused_quant && (e = eng_gpu_quant(s, d.attn, QD, T, d.act))) ||
        (e = eng_gpu_matvec(s, m + 3, E, QD, y + 3, 1, d.act, T, true)))
        return e;
    p.kernels += (fresh_kv ? 0 : 1) + 1 + (fused_quant ? 0 : 1) + 1;
    if (prologues) {
        e = eng_gpu_matvec_prologue(s, m + 4, 2 * F, E, y + 4, 2, ffn_norm, false);
    } else if (!(e = eng_gpu_rms_norm_quant(s, d.x, ffn_w, E, hp.rms_eps, T, d.act))) {
        e = eng_gpu_matvec(s, m + 4, 2 * F, E, y + 4, 2, d.act, T, false);
        p.kernels++;
    }
    p.kernels += 3;
    if (e || (e = eng_gpu_swiglu_quant(s, d.gate, d.up, F, T, d.act)))
        return e;
    return eng_gpu_matvec(s, m + 6, E, F, y + 6, 1, d.act, T, true);
}

cudaError_t launch_output(pass &p)
{
    eng_gpu_context *c = p.c;
    const eng_hparams &hp = c->hp;
    eng_gpu_device_buffers &d = c->d;
    const size_t last = (size_t)hp.n_layer * kMatsPerLayer;
    p.kernels += 4;
    cudaError_t e = eng_gpu_rms_norm_quant(c->stream, d.x, d.norms + 2 * (size_t)hp.n_layer,
                                           hp.n_embd, hp.rms_eps, p.T, d.act);
    if (!e)
        e = eng_gpu_matvec(c->stream, d.mats + last, hp.n_vocab, hp.n_embd, d.ys + last, 1, d.act,
                           p.T, false);
    if (!e)
        e = eng_gpu_argmax(c->stream, d.logits, hp.n_vocab, p.T, d.part_v, d.part_i, d.next);
    return e;
}

// Segment seg of the step: all of it when the step is one segment, else
// the embedding (0), layer seg - 1, or the output (the last).
cudaError_t launch_segment(pass &p, uint32_t seg)
{
    const uint32_t layers = p.c->hp.n_layer;
    if (p.c->segments == 1) {
        cudaError_t e = launch_embedding(p);
        for (uint32_t l = 0; l < layers && e == cudaSuccess; l++)
            e = launch_layer(p, l);
        return e ? e : launch_output(p);
    }
    if (seg == 0)
        return launch_embedding(p);
    return seg <= layers ? launch_layer(p, seg - 1) : launch_output(p);
}

// The streamed layer a segment runs, or nullptr.
const eng_layer *streamed_layer(const eng_gpu_context *c, uint32_t seg)
{
    if (c->segments == 1 || seg == 0 || seg > c->hp.n_layer)
        return nullptr;
    const eng_layer *L = &c->model->layers[seg - 1];
    return L->streamed ? L : nullptr;
}

// ---- the graphs ----

void destroy_graphs(eng_gpu_context *c)
{
    for (uint32_t i = 0; i < c->segments; i++)
        if (c->graph[i]) {
            cudaGraphExecDestroy(c->graph[i]);
            c->graph[i] = nullptr;
        }
}

// Captures every segment through the capture gate (exec[i], kernels in
// all into *kernels).
ortmem_status capture_segments(eng_gpu_context *c, int32_t T, eng_gpu_dot_kind kind,
                               cudaGraphExec_t *exec, uint32_t *kernels, eng_error *err)
{
    ortmem_status st = ortmem_capture_begin();
    if (st != ORTMEM_OK)
        return eng_from_ortmem(err, st, "the capture gate");
    pass p = {c, T, kind, 0};
    cudaError_t e = cudaSuccess;
    for (uint32_t seg = 0; seg < c->segments && e == cudaSuccess; seg++) {
        cudaGraph_t graph = nullptr;
        e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeGlobal);
        if (e != cudaSuccess)
            break;
        cudaError_t launched = launch_segment(p, seg);
        e = cudaStreamEndCapture(c->stream, &graph);
        if (launched != cudaSuccess)
            e = launched;
        if (e == cudaSuccess)
            e = cudaGraphInstantiate(&exec[seg], graph, 0);
        if (graph)
            cudaGraphDestroy(graph);
    }
    ortmem_capture_end();
    if (e != cudaSuccess) {
        for (uint32_t seg = 0; seg < c->segments; seg++)
            if (exec[seg])
                cudaGraphExecDestroy(exec[seg]);
        return eng_gpu_cuda_fail(err, e, "capturing the decode step");
    }
    *kernels = p.kernels;
    return ORTMEM_OK;
}

ortmem_status capture(eng_gpu_context *c, int32_t T, eng_gpu_dot_kind kind, eng_error *err)
{
    cudaGraphExec_t *exec = new (std::nothrow) cudaGraphExec_t[c->segments]();
    if (!exec)
        return eng_fail(err, ORTMEM_E_NOMEM, "the decode step's graphs");
    uint32_t kernels = 0;
    ortmem_status st = capture_segments(c, T, kind, exec, &kernels, err);
    if (st != ORTMEM_OK) {
        delete[] exec;
        return st;
    }
    // What the graphs hold: every sequence's K and V binding (the weights
    // they read through the device tables).
    ortmem_graph_signature *sig = nullptr;
    st = ortmem_graph_signature_create(&sig);
    for (uint32_t s = 0; s < c->batch && st == ORTMEM_OK; s++)
        for (uint32_t l = 0; l < c->hp.n_layer && st == ORTMEM_OK; l++)
            for (int v = 0; v < 2 && st == ORTMEM_OK; v++)
                st = ortmem_graph_signature_add_binding(sig, c->seqs[s], l, v, nullptr);
    if (st != ORTMEM_OK) {
        if (sig)
            ortmem_graph_signature_destroy(sig);
        for (uint32_t seg = 0; seg < c->segments; seg++)
            cudaGraphExecDestroy(exec[seg]);
        delete[] exec;
        return eng_from_ortmem(err, st, "recording the graph's KV bindings");
    }
    const bool had = c->graph[0] != nullptr;
    if (had) {
        destroy_graphs(c);
        ortmem_graph_signature_destroy(c->signature);
        c->stats.recaptures++;
    }
    std::memcpy(c->graph, exec, c->segments * sizeof *exec);
    delete[] exec;
    c->signature = sig;
    c->stats.captures++;
    c->graph_kernels = kernels;
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
    if (c->graph[0]) {
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
        if ((st = eng_gpu_read_bindings(c, s, &changed, err)) != ORTMEM_OK)
            return st;
    return changed ? eng_gpu_upload_tables(c, err) : ORTMEM_OK;
}

// ---- streamed layers ----

// Acquires a streamed layer from the residency cache (its bytes have landed
// in a ring slot when this returns) and points the layer's entries of the
// device tables at it, on the stream before its segment.
ortmem_status acquire_layer(eng_gpu_context *c, const eng_layer &L, uint32_t l, eng_error *err)
{
    void *slot = nullptr;
    ortmem_status st = ortmem_residency_acquire(c->model->residency, L.entry, &slot);
    if (st != ORTMEM_OK) {
        char what[64];
        std::snprintf(what, sizeof what, "acquiring layer %u's weights", l);
        return eng_from_ortmem(err, st, what);
    }
    const char *base = (const char *)slot;
    eng_gpu_matrix *m = c->h_mats + (size_t)l * kMatsPerLayer;
    for (uint32_t i = 0; i < kMatsPerLayer; i++)
        m[i].data = base + L.offset[i];
    const float **norms = c->h_norms + 2 * (size_t)l;
    norms[0] = (const float *)(base + L.attn_norm_offset);
    norms[1] = (const float *)(base + L.ffn_norm_offset);
    cudaError_t e = cudaMemcpyAsync(c->d.mats + (size_t)l * kMatsPerLayer, m,
                                    kMatsPerLayer * sizeof *m, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(c->d.norms + 2 * (size_t)l, norms, 2 * sizeof *norms,
                            cudaMemcpyHostToDevice, c->stream);
    if (e != cudaSuccess) {
        ortmem_residency_release(c->model->residency, L.entry);
        return eng_gpu_cuda_fail(err, e, "pointing the tables at a streamed layer");
    }
    return ORTMEM_OK;
}

} // namespace

// ---- shared with context.cu ----

uint32_t eng_gpu_segments(const eng_model *m)
{
    return m->streamed_count ? m->hp.n_layer + 2 : 1;
}

ortmem_status eng_gpu_read_bindings(eng_gpu_context *c, uint32_t s, bool *changed, eng_error *err)
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

ortmem_status eng_gpu_upload_tables(eng_gpu_context *c, eng_error *err)
{
    const size_t bytes = (size_t)c->hp.n_layer * c->batch * sizeof(void *);
    cudaError_t e =
        cudaMemcpyAsync(c->d.k_base, c->k_host, bytes, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(c->d.v_base, c->v_host, bytes, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    return e == cudaSuccess ? ORTMEM_OK : eng_gpu_cuda_fail(err, e, "uploading the KV tables");
}

ortmem_status eng_gpu_run_rows(eng_gpu_context *c, int32_t T, eng_gpu_dot_kind kind, bool graph,
                               eng_error *err)
{
    bool recapture = false;
    ortmem_status st = follow_kv(c, &recapture, err);
    if (st != ORTMEM_OK)
        return st;
    cudaError_t e = cudaMemcpyAsync(c->d.rows, c->h_rows, 3 * ENG_GPU_MAX_ROWS * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, c->stream);
    if (e != cudaSuccess)
        return eng_gpu_cuda_fail(err, e, "uploading the step's rows");
    if (graph && (!c->graph[0] || recapture))
        if ((st = capture(c, T, kind, err)) != ORTMEM_OK)
            return st;
    pass p = {c, T, kind, 0};
    for (uint32_t seg = 0; seg < c->segments; seg++) {
        const eng_layer *L = streamed_layer(c, seg);
        if (L && (st = acquire_layer(c, *L, seg - 1, err)) != ORTMEM_OK)
            break;
        e = graph ? cudaGraphLaunch(c->graph[seg], c->stream) : launch_segment(p, seg);
        // The release records an event on the stream after the segment:
        // the ring slot is refilled once the segment has read it.
        if (L) {
            ortmem_status rs = ortmem_residency_release(c->model->residency, L->entry);
            if (rs != ORTMEM_OK && e == cudaSuccess) {
                st = eng_from_ortmem(err, rs, "releasing a streamed layer");
                break;
            }
        }
        if (e != cudaSuccess) {
            st =
                eng_gpu_cuda_fail(err, e, graph ? "replaying the decode step" : "the forward pass");
            break;
        }
    }
    if (graph)
        c->stats.replays++;
    c->kernels = graph ? c->graph_kernels : p.kernels;
    if (st == ORTMEM_OK) {
        e = cudaMemcpyAsync(c->h_next, c->d.next, (size_t)T * sizeof(int32_t),
                            cudaMemcpyDeviceToHost, c->stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess)
            st = eng_gpu_cuda_fail(err, e, "the forward pass");
    } else {
        cudaStreamSynchronize(c->stream); // nothing of the failed pass left running
    }
    if (st == ORTMEM_OK)
        c->last_rows = T;
    return st;
}
