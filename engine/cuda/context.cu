// A decoding context on the device: the sequences' keys and values in an
// ortmem KV cache (stable strategy), every device buffer in an ortmem arena,
// and the step's kernels captured once as a CUDA graph.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

extern "C" {
#include "model/numerics.h"
}
#include "cuda/context_impl.h"

namespace
{

constexpr uint32_t kDefaultCtx = 4096;

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
bool for_each_buffer(const eng_hparams &hp, uint32_t n_ctx, uint32_t batch,
                     eng_gpu_device_buffers &d, Take take)
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
           take(d.norms, 2 * (size_t)hp.n_layer + 1) && take(d.ys, mats);
}

// Bytes of every device buffer, each rounded as the arena rounds (256).
size_t buffer_bytes(const eng_hparams &hp, uint32_t n_ctx, uint32_t batch)
{
    eng_gpu_device_buffers unused = {};
    size_t total = 0;
    for_each_buffer(hp, n_ctx, batch, unused, [&](auto *&p, size_t count) {
        total += round_up(count * sizeof(*p), 256);
        return true;
    });
    return total;
}

void context_free(eng_gpu_context *c)
{
    if (!c)
        return;
    if (c->graph)
        for (uint32_t i = 0; i < c->segments; i++)
            if (c->graph[i])
                cudaGraphExecDestroy(c->graph[i]);
    delete[] c->graph;
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
    if (c->streaming)
        c->streaming->in_use = false; // its stream stays its own
    else if (c->stream)
        cudaStreamDestroy(c->stream);
    cudaFreeHost(c->h_rows);
    cudaFreeHost(c->h_next);
    cudaFreeHost(c->h_mats);
    cudaFreeHost(c->h_norms);
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
    eng_gpu_device_buffers &d = c->d;
    const size_t mats = (size_t)hp.n_layer * kMatsPerLayer + 1;
    ortmem_status st = ORTMEM_OK;
    if (!for_each_buffer(hp, c->n_ctx, c->batch, d, [&](auto *&p, size_t count) {
            return (st = arena_take(c, count, &p, err)) == ORTMEM_OK;
        }))
        return st;

    // The weight matrices and outputs of each fused product launch, the
    // norms' weights (a streamed layer's entries are written before each
    // of its passes: acquire_layer in forward.cu).
    const size_t norms = 2 * (size_t)hp.n_layer + 1;
    cudaError_t e = cudaMallocHost((void **)&c->h_mats, mats * sizeof *c->h_mats);
    if (e == cudaSuccess)
        e = cudaMallocHost((void **)&c->h_norms, norms * sizeof *c->h_norms);
    if (e != cudaSuccess)
        return eng_gpu_cuda_fail(err, e, "the GPU context's pinned weight tables");
    eng_gpu_matrix *hm = c->h_mats;
    float **hy = new float *[mats];
    for (uint32_t l = 0; l < hp.n_layer; l++) {
        const eng_layer &L = c->model->layers[l];
        eng_gpu_matrix *m = hm + (size_t)l * kMatsPerLayer;
        float **y = hy + (size_t)l * kMatsPerLayer;
        const eng_matrix *w[kMatsPerLayer] = {&L.wq,     &L.wk,   &L.wv,    &L.wo,
                                              &L.w_gate, &L.w_up, &L.w_down};
        float *out[kMatsPerLayer] = {d.q, d.k, d.v, d.x, d.gate, d.up, d.x};
        for (uint32_t i = 0; i < kMatsPerLayer; i++) {
            m[i] = eng_gpu_device_matrix(*w[i]);
            y[i] = out[i];
        }
        c->h_norms[2 * l] = L.attn_norm;
        c->h_norms[2 * l + 1] = L.ffn_norm;
    }
    hm[mats - 1] = eng_gpu_device_matrix(c->model->output);
    hy[mats - 1] = d.logits;
    c->h_norms[norms - 1] = c->model->output_norm;
    // The CPU's own cos/sin table for every position.
    float *rope = (float *)std::malloc((size_t)c->n_ctx * D * sizeof(float));
    e = cudaErrorMemoryAllocation;
    if (rope) {
        for (uint32_t p = 0; p < c->n_ctx; p++)
            eng_rope_table((int64_t)p, hp.rope_freq_base, hp.n_rot, hp.head_dim,
                           rope + (size_t)p * D);
        e = cudaMemcpy(d.rope, rope, (size_t)c->n_ctx * D * sizeof(float), cudaMemcpyHostToDevice);
    }
    if (e == cudaSuccess)
        e = cudaMemcpy(d.mats, hm, mats * sizeof *hm, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(d.norms, c->h_norms, norms * sizeof *c->h_norms, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(d.ys, hy, mats * sizeof *hy, cudaMemcpyHostToDevice);
    std::free(rope);
    delete[] hy;
    if (e != cudaSuccess)
        return eng_gpu_cuda_fail(err, e, "filling the GPU context's tables");
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

ortmem_status eng_gpu_cuda_fail(eng_error *err, cudaError_t e, const char *what)
{
    return eng_fail(err, ORTMEM_E_BACKEND, "%s: CUDA %s (%s)", what, cudaGetErrorName(e),
                    cudaGetErrorString(e));
}

eng_gpu_matrix eng_gpu_device_matrix(const eng_matrix &m)
{
    eng_gpu_matrix g;
    g.type = m.type;
    g.data = m.data;
    g.rows = (uint32_t)m.rows;
    g.cols = (uint32_t)m.cols;
    return g;
}

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
        return eng_gpu_cuda_fail(err, e, "selecting the device");
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
    if (m->streamed_count) {
        // Streamed layers: the residency cache's ring refills wait for the
        // stream the context computes on, the streaming's.
        eng_gpu_streaming *sm = o.streaming;
        if (!sm || m->compute_stream != (uint64_t)(uintptr_t)sm->compute)
            return eng_fail(err, ORTMEM_E_INVALID,
                            "GPU context: the model streams %u layers under its weights budget; "
                            "load it with eng_gpu_streaming_model_options and pass the same "
                            "streaming in the context's options",
                            m->streamed_count);
        if (sm->in_use)
            return eng_fail(err, ORTMEM_E_BUSY,
                            "GPU context: the streaming's stream is another context's (one "
                            "context at a time streams a model's layers)");
    }

    eng_gpu_context *c = new (std::nothrow) eng_gpu_context();
    if (!c)
        return eng_fail(err, ORTMEM_E_NOMEM, "GPU context: no memory");
    c->model = m;
    c->hp = hp;
    c->n_ctx = n_ctx;
    c->batch = batch;
    c->graphs = !o.no_graphs;
    c->segments = eng_gpu_segments(m);
    ortmem_status st = ORTMEM_OK;
    cudaError_t e = cudaSuccess;
    if (!(c->graph = new (std::nothrow) cudaGraphExec_t[c->segments]())) {
        st = eng_fail(err, ORTMEM_E_NOMEM, "GPU context: no memory");
        goto fail;
    }
    if (m->streamed_count) {
        c->streaming = o.streaming;
        c->streaming->in_use = true;
        c->stream = c->streaming->compute;
    } else if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        c->stream = nullptr;
        st = eng_gpu_cuda_fail(err, e, "the GPU context's stream");
        goto fail;
    }
    if ((e = cudaMallocHost((void **)&c->h_rows, 3 * ENG_GPU_MAX_ROWS * sizeof(int32_t))) ||
        (e = cudaMallocHost((void **)&c->h_next, ENG_GPU_MAX_ROWS * sizeof(int32_t)))) {
        st = eng_gpu_cuda_fail(err, e, "the GPU context's pinned rows");
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
            if ((st = eng_gpu_read_bindings(c, s, &changed, err)) != ORTMEM_OK)
                goto fail;
        }
        if ((st = eng_gpu_upload_tables(c, err)) != ORTMEM_OK)
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
        result = eng_gpu_cuda_fail(err, e, "finishing the GPU context's work");
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
        if ((st = eng_gpu_run_rows(c, T, kind, false, err)) != ORTMEM_OK) {
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
        st = eng_gpu_run_rows(c, T, ENG_GPU_DOT_DECODE, c->graphs, err);
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
    return e == cudaSuccess ? ORTMEM_OK : eng_gpu_cuda_fail(err, e, "copying the logits");
}

ortmem_status eng_gpu_reset(eng_gpu_context *c, uint32_t seq, eng_error *err)
{
    if (!c || seq >= c->batch)
        return eng_fail(err, ORTMEM_E_INVALID, "reset: no context or no sequence %u", seq);
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        return eng_gpu_cuda_fail(err, e, "finishing the step before the reset");
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
