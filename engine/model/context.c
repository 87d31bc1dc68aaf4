/* A decoding context: one sequence's keys and values in an ortmem KV cache
 * and the forward pass over them, batch by batch. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_impl.h"
#include "model/numerics.h"

#define ENG_DEFAULT_CTX 4096
#define ENG_DEFAULT_BATCH 512

struct eng_context {
    eng_model *model;
    uint32_t n_ctx, n_batch;
    eng_pool *pool;
    eng_isa isa;
    eng_scratch scratch;
    ortmem_kv_cache *kv;
    ortmem_kv_seq *seq;
    ortmem_kv_layout layout;
    uint64_t limit_raise; /* added to the authority's limit for the cache */
    uint64_t length;
    bool have_logits;
    ortmem_kv_binding *k_bind, *v_bind; /* per layer, read after each append */
    /* activations, n_batch rows each */
    float *x, *xn, *q, *k, *v, *attn, *tmp, *gate, *up, *rope;
    float *logits;
    /* attention, per head */
    float *scores;    /* n_head x n_ctx */
    eng_f16 *weights; /* n_head x n_ctx */
    eng_f16 *q16;     /* n_head x head_dim */
};

/* ---- the KV cache ---- */

ortmem_kv_geometry eng_kv_geometry(const eng_hparams *hp, ortmem_kv_layout layout)
{
    ortmem_kv_geometry g = ORTMEM_KV_GEOMETRY_INIT;
    g.layers = hp->n_layer;
    g.kv_heads = hp->n_head_kv;
    g.head_dim = hp->head_dim;
    g.dtype = ORTMEM_KV_F16; /* llama.cpp's default KV type */
    g.layout = layout;
    return g;
}

/* The layout whose stable range commits the least for the typical
 * sequence (a quarter of the context, as the strategy's auto assumes); on a
 * tie the one with the smaller floor (fewer fragments: less committed while
 * a sequence is short). */
ortmem_status eng_kv_choose_layout(eng_model *m, uint32_t n_ctx, ortmem_kv_layout *out,
                                   uint64_t *full_commit, eng_error *err)
{
    size_t granule = 0;
    ortmem_status st = ortmem_backend_granule(m->backend, &granule);
    if (st != ORTMEM_OK)
        return eng_from_ortmem(err, st, "the backend's granule");
    uint64_t typical = n_ctx / 4 ? n_ctx / 4 : 1;
    uint64_t best = UINT64_MAX, best_floor = UINT64_MAX;
    for (int l = 0; l < ORTMEM_KV_LAYOUT_COUNT; l++) {
        ortmem_kv_geometry g = eng_kv_geometry(&m->hp, (ortmem_kv_layout)l);
        g.granule = granule;
        ortmem_kv_eval ev = {.struct_size = sizeof ev};
        if ((st = ortmem_kv_evaluate(&g, typical, n_ctx, 1, 0, 0, &ev)) != ORTMEM_OK)
            return eng_from_ortmem(err, st, "the KV geometry");
        if (ev.committed_bytes < best ||
            (ev.committed_bytes == best && ev.floor_bytes < best_floor)) {
            best = ev.committed_bytes;
            best_floor = ev.floor_bytes;
            *out = (ortmem_kv_layout)l;
        }
    }
    ortmem_kv_geometry g = eng_kv_geometry(&m->hp, *out);
    g.granule = granule;
    ortmem_kv_eval full = {.struct_size = sizeof full};
    if ((st = ortmem_kv_evaluate(&g, n_ctx, n_ctx, 1, 0, 0, &full)) != ORTMEM_OK)
        return eng_from_ortmem(err, st, "the KV geometry");
    /* Whichever strategy auto picks, it commits at most the larger of a full
     * stable range and a full bucket, plus one granule (a zero tail). */
    uint64_t most = full.committed_bytes > full.bucket_committed_bytes
                        ? full.committed_bytes
                        : full.bucket_committed_bytes;
    *full_commit = most + granule;
    return ORTMEM_OK;
}

static void context_free(eng_context *c)
{
    if (!c)
        return;
    if (c->seq)
        ortmem_kv_seq_destroy(c->seq);
    if (c->kv)
        ortmem_kv_cache_destroy(c->kv);
    if (c->limit_raise)
        eng_model_limit_lower(c->model, c->limit_raise);
    if (c->pool)
        eng_pool_destroy(c->pool);
    eng_scratch_free(&c->scratch);
    free(c->k_bind);
    free(c->v_bind);
    free(c->x);
    free(c->xn);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->attn);
    free(c->tmp);
    free(c->gate);
    free(c->up);
    free(c->rope);
    free(c->logits);
    free(c->scores);
    free(c->weights);
    free(c->q16);
    free(c);
}

ortmem_status eng_context_create(eng_model *m, const eng_context_options *options,
                                 eng_context **out, eng_error *err)
{
    if (!m || !out)
        return eng_fail(err, ORTMEM_E_INVALID, "context: no model or no result pointer");
    const eng_hparams *hp = &m->hp;
    eng_context_options o = {0};
    if (options)
        o = *options;
    uint32_t n_ctx =
        o.n_ctx ? o.n_ctx : (hp->n_ctx_train < ENG_DEFAULT_CTX ? hp->n_ctx_train : ENG_DEFAULT_CTX);
    if (n_ctx > hp->n_ctx_train)
        return eng_fail(err, ORTMEM_E_RANGE,
                        "a context of %u tokens exceeds the model's trained context of %u", n_ctx,
                        hp->n_ctx_train);
    uint32_t n_batch = o.n_batch ? o.n_batch : ENG_DEFAULT_BATCH;
    if (n_batch > n_ctx)
        n_batch = n_ctx;
    unsigned threads = o.threads ? o.threads : 2;

    eng_context *c = calloc(1, sizeof *c);
    if (!c)
        return eng_fail(err, ORTMEM_E_NOMEM, "context: no memory");
    c->model = m;
    c->n_ctx = n_ctx;
    c->n_batch = n_batch;
    c->isa = eng_isa_detect();
    eng_numerics_init();
    ortmem_status st = eng_pool_create(threads, &c->pool, err);
    if (st != ORTMEM_OK)
        goto fail;

    const size_t E = hp->n_embd, QD = (size_t)hp->n_head * hp->head_dim,
                 KD = (size_t)hp->n_head_kv * hp->head_dim, F = hp->n_ff, B = n_batch;
    c->k_bind = calloc(hp->n_layer, sizeof *c->k_bind);
    c->v_bind = calloc(hp->n_layer, sizeof *c->v_bind);
    c->x = malloc(B * E * sizeof(float));
    c->xn = malloc(B * E * sizeof(float));
    c->q = malloc(B * QD * sizeof(float));
    c->k = malloc(B * KD * sizeof(float));
    c->v = malloc(B * KD * sizeof(float));
    c->attn = malloc(B * QD * sizeof(float));
    c->tmp = malloc(B * (E > F ? E : F) * sizeof(float));
    c->gate = malloc(B * F * sizeof(float));
    c->up = malloc(B * F * sizeof(float));
    c->rope = malloc(B * hp->head_dim * sizeof(float));
    c->logits = malloc((size_t)hp->n_vocab * sizeof(float));
    c->scores = malloc((size_t)hp->n_head * n_ctx * sizeof(float));
    c->weights = malloc((size_t)hp->n_head * n_ctx * sizeof(eng_f16));
    c->q16 = malloc((size_t)hp->n_head * hp->head_dim * sizeof(eng_f16));
    if (!c->k_bind || !c->v_bind || !c->x || !c->xn || !c->q || !c->k || !c->v || !c->attn ||
        !c->tmp || !c->gate || !c->up || !c->rope || !c->logits || !c->scores || !c->weights ||
        !c->q16) {
        st = eng_fail(err, ORTMEM_E_NOMEM, "context: no memory for the scratch of %u tokens",
                      n_batch);
        goto fail;
    }

    uint64_t full_commit = 0;
    if ((st = eng_kv_choose_layout(m, n_ctx, &c->layout, &full_commit, err)) != ORTMEM_OK)
        goto fail;
    if ((st = eng_model_limit_raise(m, full_commit, err)) != ORTMEM_OK)
        goto fail;
    c->limit_raise = full_commit;

    ortmem_kv_cache_options ko = ORTMEM_KV_CACHE_OPTIONS_INIT;
    ko.geometry = eng_kv_geometry(hp, c->layout);
    ko.strategy = ORTMEM_KV_AUTO;
    ko.max_context = n_ctx;
    ko.max_sequences = 1;
    ko.warm_max_bytes = 0; /* one sequence: nothing to keep warm for */
    if ((st = ortmem_kv_cache_create(m->authority, &ko, &c->kv)) != ORTMEM_OK) {
        eng_from_ortmem(err, st, "the KV cache");
        goto fail;
    }
    if ((st = ortmem_kv_seq_create(c->kv, &c->seq)) != ORTMEM_OK) {
        eng_from_ortmem(err, st, "the KV sequence");
        goto fail;
    }
    eng_model_context_count(m, +1);
    *out = c;
    return ORTMEM_OK;
fail:
    context_free(c);
    return st;
}

ortmem_status eng_context_destroy(eng_context *c, eng_error *err)
{
    if (!c)
        return ORTMEM_OK;
    ortmem_status result = ORTMEM_OK;
    ortmem_status st = ortmem_kv_seq_destroy(c->seq);
    if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED)
        result = eng_from_ortmem(err, st, "destroying the KV sequence");
    c->seq = NULL;
    st = ortmem_kv_cache_destroy(c->kv);
    if (st != ORTMEM_OK && result == ORTMEM_OK)
        result = eng_from_ortmem(err, st, "destroying the KV cache");
    c->kv = NULL;
    eng_model_context_count(c->model, -1);
    context_free(c);
    return result;
}

/* ---- the forward pass ---- */

typedef struct attn_job {
    eng_context *c;
    const eng_hparams *hp;
    uint32_t layer;
    uint64_t p0;    /* position of the batch's first token */
    size_t row0, n; /* rows [row0, n) of the batch are computed */
    eng_dot_kind kind;
    float scale;
} attn_job;

static const eng_f16 *kv_head(const ortmem_kv_binding *b, uint32_t head)
{
    return (const eng_f16 *)((const char *)b->base + (size_t)head * b->head_stride);
}

/* One query head over the batch's rows: scores against the keys of
 * positions [0, pos], softmax, the weighted sum of the values. */
static void attend_head(void *arg, size_t head)
{
    const attn_job *j = arg;
    eng_context *c = j->c;
    const eng_hparams *hp = j->hp;
    const uint32_t D = hp->head_dim;
    const uint32_t kv_head_index = (uint32_t)head / (hp->n_head / hp->n_head_kv);
    const ortmem_kv_binding *kb = &c->k_bind[j->layer], *vb = &c->v_bind[j->layer];
    const eng_f16 *keys = kv_head(kb, kv_head_index);
    const eng_f16 *values = kv_head(vb, kv_head_index);
    const size_t k_stride = kb->token_stride / sizeof(eng_f16);
    const size_t v_stride = vb->token_stride / sizeof(eng_f16);
    float *scores = c->scores + head * c->n_ctx;
    eng_f16 *weights = c->weights + head * c->n_ctx;
    eng_f16 *q16 = c->q16 + head * D;
    const size_t QD = (size_t)hp->n_head * D;
    for (size_t t = j->row0; t < j->n; t++) {
        const float *q = c->q + t * QD + head * D;
        eng_halves_from_floats(q, q16, D);
        const size_t visible = (size_t)(j->p0 + t + 1);
        for (size_t p = 0; p < visible; p++) {
            float s = eng_dot_f16(j->kind, keys + p * k_stride, 1, q16, D);
            scores[p] = s * j->scale;
        }
        eng_softmax(scores, visible);
        eng_halves_from_floats(scores, weights, visible);
        eng_dot_f16_rows(j->kind, values, v_stride, weights, visible, D,
                         c->attn + t * QD + head * D);
    }
}

static ortmem_status matmul(eng_context *c, const eng_matrix *w, const float *x, size_t n, float *y,
                            eng_error *err)
{
    return eng_matmul(c->pool, c->isa, w, x, n, y, &c->scratch, err);
}

/* The layer as the forward pass reads it: a layer streamed whole is
 * acquired from the residency cache (copied into a ring slot) and its
 * matrices and norms pointed into that slot; *held names the entry until
 * layer_done releases it. */
static ortmem_status layer_view(eng_context *c, const eng_layer *L, eng_layer *view, uint32_t *held,
                                eng_error *err)
{
    *view = *L;
    if (!L->streamed)
        return ORTMEM_OK;
    void *ptr = NULL;
    ortmem_status st = ortmem_residency_acquire(c->model->residency, L->entry, &ptr);
    if (st != ORTMEM_OK)
        return eng_from_ortmem(err, st, "a streamed layer");
    *held = L->entry;
    char *base = ptr;
    eng_matrix *m[ENG_LAYER_MATRICES] = {&view->wq,     &view->wk,   &view->wv,    &view->wo,
                                         &view->w_gate, &view->w_up, &view->w_down};
    for (int w = 0; w < ENG_LAYER_MATRICES; w++)
        m[w]->data = base + L->offset[w];
    view->attn_norm = (const float *)(base + L->attn_norm_offset);
    view->ffn_norm = (const float *)(base + L->ffn_norm_offset);
    return ORTMEM_OK;
}

/* Releases the layer layer_view acquired, if any. */
static ortmem_status layer_done(eng_context *c, uint32_t *held, eng_error *err)
{
    if (*held == UINT32_MAX)
        return ORTMEM_OK;
    ortmem_status st = ortmem_residency_release(c->model->residency, *held);
    *held = UINT32_MAX;
    return st == ORTMEM_OK ? ORTMEM_OK : eng_from_ortmem(err, st, "releasing a streamed layer");
}

static ortmem_status forward(eng_context *c, const int32_t *tokens, size_t n, eng_error *err)
{
    eng_model *m = c->model;
    const eng_hparams *hp = &m->hp;
    const size_t E = hp->n_embd, D = hp->head_dim, QD = (size_t)hp->n_head * D,
                 KD = (size_t)hp->n_head_kv * D, F = hp->n_ff;
    const uint64_t p0 = c->length;
    uint32_t held = UINT32_MAX; /* a streamed layer's entry acquired for its pass */
    ortmem_status st = ortmem_kv_seq_append(c->seq, n);
    if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED)
        return eng_from_ortmem(err, st, "appending to the KV sequence");
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        c->k_bind[l].struct_size = sizeof c->k_bind[l];
        c->v_bind[l].struct_size = sizeof c->v_bind[l];
        if ((st = ortmem_kv_seq_binding(c->seq, l, 0, &c->k_bind[l])) != ORTMEM_OK ||
            (st = ortmem_kv_seq_binding(c->seq, l, 1, &c->v_bind[l])) != ORTMEM_OK) {
            eng_from_ortmem(err, st, "the KV binding");
            goto undo;
        }
    }
    for (size_t t = 0; t < n; t++) {
        if ((st = eng_matrix_row(&m->token_embd, (size_t)tokens[t], c->x + t * E, err)))
            goto undo;
        eng_rope_table((int64_t)(p0 + t), hp->rope_freq_base, hp->n_rot, hp->head_dim,
                       c->rope + t * D);
    }
    const eng_dot_kind kind = n > 1 ? ENG_DOT_BATCH : ENG_DOT_DECODE;
    const float scale = 1.0f / sqrtf((float)D);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        eng_layer view;
        if ((st = layer_view(c, &m->layers[l], &view, &held, err)) != ORTMEM_OK)
            goto undo;
        const eng_layer *L = &view;
        for (size_t t = 0; t < n; t++)
            eng_rms_norm(c->x + t * E, L->attn_norm, E, hp->rms_eps, c->xn + t * E);
        if ((st = matmul(c, &L->wq, c->xn, n, c->q, err)) ||
            (st = matmul(c, &L->wk, c->xn, n, c->k, err)) ||
            (st = matmul(c, &L->wv, c->xn, n, c->v, err)))
            goto undo;
        for (size_t t = 0; t < n; t++) {
            const float *cs = c->rope + t * D;
            for (uint32_t h = 0; h < hp->n_head; h++)
                eng_rope_apply(c->q + t * QD + h * D, cs, hp->n_rot);
            for (uint32_t h = 0; h < hp->n_head_kv; h++) {
                float *kr = c->k + t * KD + h * D;
                const float *vr = c->v + t * KD + h * D;
                eng_rope_apply(kr, cs, hp->n_rot);
                const uint64_t pos = p0 + t;
                eng_f16 *kd = (eng_f16 *)((char *)c->k_bind[l].base + h * c->k_bind[l].head_stride +
                                          pos * c->k_bind[l].token_stride);
                eng_f16 *vd = (eng_f16 *)((char *)c->v_bind[l].base + h * c->v_bind[l].head_stride +
                                          pos * c->v_bind[l].token_stride);
                eng_halves_from_floats(kr, kd, D);
                eng_halves_from_floats(vr, vd, D);
            }
        }
        /* The last layer feeds only the logits: its rows past the attention
         * are needed for the last token alone (llama.cpp selects it there). */
        const size_t row0 = l + 1 == hp->n_layer ? n - 1 : 0, rows = n - row0;
        attn_job job = {c, hp, l, p0, row0, n, kind, scale};
        eng_pool_run(c->pool, attend_head, &job, hp->n_head);
        if ((st = matmul(c, &L->wo, c->attn + row0 * QD, rows, c->tmp, err)))
            goto undo;
        for (size_t r = 0; r < rows; r++) {
            float *x = c->x + (row0 + r) * E;
            const float *o = c->tmp + r * E;
            for (size_t i = 0; i < E; i++)
                x[i] = o[i] + x[i];
        }
        for (size_t r = 0; r < rows; r++)
            eng_rms_norm(c->x + (row0 + r) * E, L->ffn_norm, E, hp->rms_eps, c->xn + r * E);
        if ((st = matmul(c, &L->w_gate, c->xn, rows, c->gate, err)) ||
            (st = matmul(c, &L->w_up, c->xn, rows, c->up, err)))
            goto undo;
        for (size_t r = 0; r < rows; r++)
            eng_swiglu(c->gate + r * F, c->up + r * F, F, c->gate + r * F);
        if ((st = matmul(c, &L->w_down, c->gate, rows, c->tmp, err)))
            goto undo;
        for (size_t r = 0; r < rows; r++) {
            float *x = c->x + (row0 + r) * E;
            const float *o = c->tmp + r * E;
            for (size_t i = 0; i < E; i++)
                x[i] = o[i] + x[i];
        }
        if ((st = layer_done(c, &held, err)) != ORTMEM_OK)
            goto undo;
    }
    eng_rms_norm(c->x + (n - 1) * E, m->output_norm, E, hp->rms_eps, c->xn);
    if ((st = matmul(c, &m->output, c->xn, 1, c->logits, err)))
        goto undo;
    c->length = p0 + n;
    c->have_logits = true;
    return ORTMEM_OK;
undo:
    layer_done(c, &held, NULL);
    ortmem_kv_seq_truncate(c->seq, p0);
    return st;
}

ortmem_status eng_context_decode(eng_context *c, const int32_t *tokens, size_t count,
                                 eng_error *err)
{
    if (!c || (!tokens && count))
        return eng_fail(err, ORTMEM_E_INVALID, "decode: no context or no tokens");
    if (count == 0)
        return ORTMEM_OK;
    if (count > c->n_ctx - c->length)
        return eng_fail(err, ORTMEM_E_RANGE,
                        "%zu tokens after the %" PRIu64 " in the sequence exceed the context of %u",
                        count, c->length, c->n_ctx);
    const uint32_t vocab = c->model->hp.n_vocab;
    for (size_t i = 0; i < count; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= vocab)
            return eng_fail(err, ORTMEM_E_RANGE,
                            "token %d (at %zu) is outside the vocabulary of %u", tokens[i], i,
                            vocab);
    const uint64_t start = c->length;
    for (size_t done = 0; done < count;) {
        size_t n = count - done < c->n_batch ? count - done : c->n_batch;
        ortmem_status st = forward(c, tokens + done, n, err);
        if (st != ORTMEM_OK) {
            if (c->length != start) {
                ortmem_kv_seq_truncate(c->seq, start);
                c->length = start;
            }
            return st;
        }
        done += n;
    }
    return ORTMEM_OK;
}

const float *eng_context_logits(const eng_context *c)
{
    return c && c->have_logits ? c->logits : NULL;
}

uint64_t eng_context_length(const eng_context *c)
{
    return c->length;
}

uint32_t eng_context_n_ctx(const eng_context *c)
{
    return c->n_ctx;
}

ortmem_status eng_context_truncate(eng_context *c, uint64_t length, eng_error *err)
{
    if (length > c->length)
        return eng_fail(err, ORTMEM_E_RANGE,
                        "truncate to %" PRIu64 " beyond the %" PRIu64 " tokens", length, c->length);
    ortmem_status st = ortmem_kv_seq_truncate(c->seq, length);
    if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED)
        return eng_from_ortmem(err, st, "truncating the KV sequence");
    c->length = length;
    c->have_logits = false;
    return ORTMEM_OK;
}

ortmem_status eng_context_kv_explain(eng_context *c, ortmem_kv_strategy *strategy,
                                     ortmem_kv_layout *layout, char *buffer, size_t capacity,
                                     eng_error *err)
{
    ortmem_kv_strategy s = ORTMEM_KV_AUTO;
    ortmem_status st = ortmem_kv_cache_explain(c->kv, &s, buffer, capacity);
    if (st != ORTMEM_OK)
        return eng_from_ortmem(err, st, "explaining the KV cache");
    if (strategy)
        *strategy = s;
    if (layout)
        *layout = c->layout;
    return ORTMEM_OK;
}

ortmem_status eng_context_kv_stats(eng_context *c, ortmem_kv_stats *stats, eng_error *err)
{
    stats->struct_size = sizeof *stats;
    ortmem_status st = ortmem_kv_cache_stats(c->kv, stats);
    if (st != ORTMEM_OK)
        return eng_from_ortmem(err, st, "the KV cache's stats");
    return ORTMEM_OK;
}
