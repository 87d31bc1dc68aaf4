/* Loading a Llama-family GGUF: hyper-parameters, tensors by name with their
 * shapes checked, and the weights pinned resident in ortmem's residency
 * cache over a CPU backend, read by the engine at the slots' pointers. */
#include "model/model_impl.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ENG_ARCH "llama"

static uint64_t round_up(uint64_t v, uint64_t to)
{
    return (v + to - 1) / to * to;
}

/* ---- metadata ---- */

static ortmem_status key_u32(const eng_gguf *g, const char *key, bool required, uint32_t fallback,
                             uint32_t *out, eng_error *err)
{
    char full[128];
    snprintf(full, sizeof full, ENG_ARCH ".%s", key);
    if (!eng_gguf_has(g, full)) {
        if (required)
            return eng_fail(err, ORTMEM_E_INVALID, "the model has no %s (a Llama model needs it)",
                            full);
        *out = fallback;
        return ORTMEM_OK;
    }
    return eng_gguf_get_u32(g, full, out, err);
}

static ortmem_status key_f32(const eng_gguf *g, const char *key, bool required, float fallback,
                             float *out, eng_error *err)
{
    char full[128];
    snprintf(full, sizeof full, ENG_ARCH ".%s", key);
    if (!eng_gguf_has(g, full)) {
        if (required)
            return eng_fail(err, ORTMEM_E_INVALID, "the model has no %s (a Llama model needs it)",
                            full);
        *out = fallback;
        return ORTMEM_OK;
    }
    return eng_gguf_get_f32(g, full, out, err);
}

/* Llama-family variants the forward pass does not compute are refused by
 * name rather than decoded wrongly: scaled RoPE, experts, head sizes other
 * than embedding / heads. */
static ortmem_status check_variant(const eng_gguf *g, const eng_hparams *hp, eng_error *err)
{
    eng_gguf_str scaling;
    if (eng_gguf_has(g, ENG_ARCH ".rope.scaling.type") &&
        eng_gguf_get_str(g, ENG_ARCH ".rope.scaling.type", &scaling, NULL) == ORTMEM_OK &&
        !eng_gguf_str_eq(scaling, "none"))
        return eng_fail(err, ORTMEM_E_UNSUPPORTED,
                        ENG_ARCH
                        ".rope.scaling.type is \"%.*s\"; the engine computes unscaled RoPE",
                        (int)(scaling.len > 32 ? 32 : scaling.len), scaling.ptr);
    const eng_gguf_tensor *t = NULL;
    if (eng_gguf_find_tensor(g, "rope_freqs.weight", &t, NULL) == ORTMEM_OK)
        return eng_fail(err, ORTMEM_E_UNSUPPORTED,
                        "the model has rope_freqs.weight (RoPE frequency factors), which the "
                        "engine does not apply");
    uint32_t experts = 0;
    if (eng_gguf_has(g, ENG_ARCH ".expert_count") &&
        eng_gguf_get_u32(g, ENG_ARCH ".expert_count", &experts, NULL) == ORTMEM_OK && experts > 0)
        return eng_fail(err, ORTMEM_E_UNSUPPORTED,
                        "the model has %u experts; the engine computes dense feed-forward blocks",
                        experts);
    static const char *const head_keys[] = {ENG_ARCH ".attention.key_length",
                                            ENG_ARCH ".attention.value_length"};
    for (size_t i = 0; i < 2; i++) {
        uint32_t len = 0;
        if (eng_gguf_has(g, head_keys[i]) &&
            eng_gguf_get_u32(g, head_keys[i], &len, NULL) == ORTMEM_OK && len != hp->head_dim)
            return eng_fail(err, ORTMEM_E_UNSUPPORTED,
                            "%s is %u; the engine needs the embedding over the heads, %u",
                            head_keys[i], len, hp->head_dim);
    }
    return ORTMEM_OK;
}

static ortmem_status read_hparams(const eng_gguf *g, eng_hparams *hp, eng_error *err)
{
    eng_gguf_str arch;
    ortmem_status st = eng_gguf_get_str(g, "general.architecture", &arch, err);
    if (st != ORTMEM_OK)
        return st;
    if (!eng_gguf_str_eq(arch, ENG_ARCH))
        return eng_fail(err, ORTMEM_E_UNSUPPORTED,
                        "the model's architecture is \"%.*s\"; this engine decodes \"" ENG_ARCH
                        "\" (Llama-family) models only",
                        (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
    memset(hp, 0, sizeof *hp);
    if ((st = key_u32(g, "block_count", true, 0, &hp->n_layer, err)) ||
        (st = key_u32(g, "embedding_length", true, 0, &hp->n_embd, err)) ||
        (st = key_u32(g, "feed_forward_length", true, 0, &hp->n_ff, err)) ||
        (st = key_u32(g, "attention.head_count", true, 0, &hp->n_head, err)) ||
        (st = key_u32(g, "attention.head_count_kv", false, hp->n_head, &hp->n_head_kv, err)) ||
        (st = key_u32(g, "context_length", true, 0, &hp->n_ctx_train, err)) ||
        (st = key_f32(g, "rope.freq_base", false, 10000.0f, &hp->rope_freq_base, err)) ||
        (st = key_f32(g, "attention.layer_norm_rms_epsilon", true, 0, &hp->rms_eps, err)))
        return st;
    if (hp->n_layer == 0 || hp->n_embd == 0 || hp->n_ff == 0 || hp->n_head == 0 ||
        hp->n_head_kv == 0 || hp->n_ctx_train == 0)
        return eng_fail(err, ORTMEM_E_INVALID,
                        "hyper-parameters must be non-zero: blocks %u, embedding %u, feed-forward "
                        "%u, heads %u, KV heads %u, context %u",
                        hp->n_layer, hp->n_embd, hp->n_ff, hp->n_head, hp->n_head_kv,
                        hp->n_ctx_train);
    if (hp->n_embd % hp->n_head != 0 || hp->n_head % hp->n_head_kv != 0)
        return eng_fail(err, ORTMEM_E_INVALID,
                        "%u heads must divide the embedding of %u and be a multiple of the %u KV "
                        "heads",
                        hp->n_head, hp->n_embd, hp->n_head_kv);
    hp->head_dim = hp->n_embd / hp->n_head;
    if ((st = key_u32(g, "rope.dimension_count", false, hp->head_dim, &hp->n_rot, err)))
        return st;
    if (hp->n_rot == 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0)
        return eng_fail(err, ORTMEM_E_INVALID,
                        "rope.dimension_count %u must be even and in [2, head dimension %u]",
                        hp->n_rot, hp->head_dim);
    if (hp->head_dim % 8 != 0 || hp->head_dim > ENG_MAX_HEAD_DIM)
        return eng_fail(err, ORTMEM_E_UNSUPPORTED,
                        "head dimension %u: the engine handles multiples of 8 up to %u",
                        hp->head_dim, ENG_MAX_HEAD_DIM);
    if (hp->n_ff % 8 != 0)
        return eng_fail(err, ORTMEM_E_UNSUPPORTED,
                        "feed-forward length %u: the engine handles multiples of 8", hp->n_ff);
    if (!(hp->rms_eps >= 0.0f) || !(hp->rope_freq_base > 0.0f))
        return eng_fail(err, ORTMEM_E_INVALID, "rms epsilon %g and rope base %g are out of range",
                        (double)hp->rms_eps, (double)hp->rope_freq_base);
    if (eng_gguf_has(g, ENG_ARCH ".vocab_size")) {
        if ((st = eng_gguf_get_u32(g, ENG_ARCH ".vocab_size", &hp->n_vocab, err)))
            return st;
    } else {
        eng_gguf_kind elem;
        uint64_t count = 0;
        if ((st = eng_gguf_get_array(g, "tokenizer.ggml.tokens", &elem, &count, err)))
            return eng_wrap(err, "the vocabulary size (no " ENG_ARCH ".vocab_size)");
        if (count > UINT32_MAX)
            return eng_fail(err, ORTMEM_E_RANGE, "%" PRIu64 " tokens in the vocabulary", count);
        hp->n_vocab = (uint32_t)count;
    }
    if (hp->n_vocab == 0)
        return eng_fail(err, ORTMEM_E_INVALID, "the vocabulary is empty");
    return check_variant(g, hp, err);
}

/* ---- tensors ---- */

typedef struct tensor_spec {
    char name[64];
    uint32_t layer;
    ortmem_weight_role role;
    uint32_t n_dims;
    uint64_t ne0, ne1;
    bool norm; /* F32 vector */
    bool optional;
    const eng_gguf_tensor *found;
    uint32_t catalog_id;
    uint64_t entry_offset; /* where the tensor starts in its catalog entry */
} tensor_spec;

static void spec_add(tensor_spec *specs, size_t *n, const char *name, uint32_t layer,
                     ortmem_weight_role role, uint32_t n_dims, uint64_t ne0, uint64_t ne1)
{
    tensor_spec *s = &specs[(*n)++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->layer = layer;
    s->role = role;
    s->n_dims = n_dims;
    s->ne0 = ne0;
    s->ne1 = ne1;
    s->norm = n_dims == 1;
}

static void layer_name(char *buf, size_t size, uint32_t layer, const char *what)
{
    snprintf(buf, size, "blk.%u.%s.weight", layer, what);
}

static int shape_text(char *buf, size_t size, uint32_t n_dims, const uint64_t *ne)
{
    int used = snprintf(buf, size, "[");
    for (uint32_t d = 0; d < n_dims && used > 0 && (size_t)used < size; d++)
        used += snprintf(buf + used, size - (size_t)used, "%s%" PRIu64, d ? ", " : "", ne[d]);
    if (used > 0 && (size_t)used < size)
        used += snprintf(buf + used, size - (size_t)used, "]");
    return used;
}

static ortmem_status check_tensor(const eng_gguf *g, tensor_spec *s, eng_error *err)
{
    if (!eng_gguf_find_tensor(g, s->name, &s->found, err)) {
        /* found */
    } else if (s->optional) {
        s->found = NULL;
        return ORTMEM_OK;
    } else {
        return eng_fail(err, ORTMEM_E_NOT_FOUND, "the model has no tensor %s", s->name);
    }
    const eng_gguf_tensor *t = s->found;
    uint64_t want[4] = {s->ne0, s->ne1, 1, 1};
    uint32_t dims = t->n_dims;
    bool same = true;
    for (int d = 0; d < 4; d++)
        same = same && t->ne[d] == want[d];
    if (!same) {
        char have_s[96], want_s[96];
        shape_text(have_s, sizeof have_s, dims, t->ne);
        shape_text(want_s, sizeof want_s, s->n_dims, want);
        return eng_fail(err, ORTMEM_E_INVALID, "tensor %s has shape %s, expected %s", s->name,
                        have_s, want_s);
    }
    eng_type_traits tr = eng_type_traits_of(t->type);
    if (s->norm && t->type != ENG_TYPE_F32)
        return eng_fail(err, ORTMEM_E_UNSUPPORTED, "tensor %s is %s; the engine reads norms as F32",
                        s->name, tr.name ? tr.name : "an unknown type");
    if (!tr.name || t->type == ENG_TYPE_Q8_K || t->type == ENG_TYPE_Q8_1)
        return eng_fail(err, ORTMEM_E_UNSUPPORTED,
                        "tensor %s has type %u (%s), which the engine "
                        "does not multiply",
                        s->name, t->type, tr.name ? tr.name : "unknown");
    return ORTMEM_OK;
}

static size_t build_specs(const eng_hparams *hp, tensor_spec *specs)
{
    size_t n = 0;
    const uint64_t q_dim = (uint64_t)hp->n_head * hp->head_dim;
    const uint64_t kv_dim = (uint64_t)hp->n_head_kv * hp->head_dim;
    char name[64];
    spec_add(specs, &n, "token_embd.weight", 0, ORTMEM_WEIGHT_EMBEDDING, 2, hp->n_embd,
             hp->n_vocab);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        layer_name(name, sizeof name, l, "attn_norm");
        spec_add(specs, &n, name, l, ORTMEM_WEIGHT_NORM, 1, hp->n_embd, 1);
        layer_name(name, sizeof name, l, "attn_q");
        spec_add(specs, &n, name, l, ORTMEM_WEIGHT_ATTENTION, 2, hp->n_embd, q_dim);
        layer_name(name, sizeof name, l, "attn_k");
        spec_add(specs, &n, name, l, ORTMEM_WEIGHT_ATTENTION, 2, hp->n_embd, kv_dim);
        layer_name(name, sizeof name, l, "attn_v");
        spec_add(specs, &n, name, l, ORTMEM_WEIGHT_ATTENTION, 2, hp->n_embd, kv_dim);
        layer_name(name, sizeof name, l, "attn_output");
        spec_add(specs, &n, name, l, ORTMEM_WEIGHT_ATTENTION, 2, q_dim, hp->n_embd);
        layer_name(name, sizeof name, l, "ffn_norm");
        spec_add(specs, &n, name, l, ORTMEM_WEIGHT_NORM, 1, hp->n_embd, 1);
        layer_name(name, sizeof name, l, "ffn_gate");
        spec_add(specs, &n, name, l, ORTMEM_WEIGHT_MLP, 2, hp->n_embd, hp->n_ff);
        layer_name(name, sizeof name, l, "ffn_up");
        spec_add(specs, &n, name, l, ORTMEM_WEIGHT_MLP, 2, hp->n_embd, hp->n_ff);
        layer_name(name, sizeof name, l, "ffn_down");
        spec_add(specs, &n, name, l, ORTMEM_WEIGHT_MLP, 2, hp->n_ff, hp->n_embd);
    }
    spec_add(specs, &n, "output_norm.weight", hp->n_layer, ORTMEM_WEIGHT_NORM, 1, hp->n_embd, 1);
    spec_add(specs, &n, "output.weight", hp->n_layer, ORTMEM_WEIGHT_OUTPUT, 2, hp->n_embd,
             hp->n_vocab);
    specs[n - 1].optional = true;
    return n;
}

/* ---- load ---- */

/* A pinned tensor is read from its slot only: the pages of the catalog's
 * mapping that its page-in touched are dropped from the process (the file
 * stays in the page cache; a later page-in faults them back), so the
 * weights are resident once, not twice. Advice only: a refusal is ignored. */
static void drop_file_pages(ortmem_weight_catalog *catalog, uint32_t id, uint64_t bytes,
                            uint64_t page)
{
    void *host = NULL;
    if (ortmem_weight_catalog_host(catalog, id, &host) != ORTMEM_OK || !host)
        return;
    uintptr_t start = ((uintptr_t)host + page - 1) / page * page;
    uintptr_t end = ((uintptr_t)host + bytes) / page * page;
    if (end > start)
        madvise((void *)start, end - start, MADV_DONTNEED);
}

static ortmem_status ortmem_fail(eng_error *err, ortmem_status st, const char *what)
{
    return eng_from_ortmem(err, st, what);
}

/* The file catalog's bytes copied into a host catalog in the caller's
 * pinned staging, which replaces it (the file's mapping is closed). */
static ortmem_status copy_to_staging(eng_model *m, ortmem_staging *staging,
                                     const ortmem_weight_tensor *table, eng_error *err)
{
    ortmem_weight_catalog *host = NULL;
    ortmem_status st = ortmem_weight_catalog_create_host(staging, table, m->tensor_count, &host);
    if (st != ORTMEM_OK)
        return ortmem_fail(err, st, "the pinned weight catalog");
    for (uint32_t i = 0; i < m->tensor_count && st == ORTMEM_OK; i++) {
        void *from = NULL, *to = NULL;
        if ((st = ortmem_weight_catalog_host(m->catalog, i, &from)) == ORTMEM_OK &&
            (st = ortmem_weight_catalog_host(host, i, &to)) == ORTMEM_OK)
            memcpy(to, from, table[i].bytes);
    }
    if (st != ORTMEM_OK) {
        ortmem_weight_catalog_destroy(host);
        return ortmem_fail(err, st, "copying the weights into pinned memory");
    }
    ortmem_weight_catalog_destroy(m->catalog);
    m->catalog = host;
    m->staging = staging;
    return ORTMEM_OK;
}

static void model_free(eng_model *m)
{
    if (!m)
        return;
    if (m->residency) {
        for (uint32_t i = 0; i < m->tensor_count; i++)
            if (m->pinned && m->pinned[i])
                ortmem_residency_unpin(m->residency, i);
        ortmem_residency_cache_destroy(m->residency);
    }
    if (m->catalog)
        ortmem_weight_catalog_destroy(m->catalog);
    if (m->authority)
        ortmem_authority_destroy(m->authority);
    if (m->backend && m->own_backend)
        ortmem_backend_destroy(m->backend);
    eng_gguf_close(m->gguf);
    free(m->pinned);
    free(m->slots);
    free(m->layers);
    free(m->entry_names);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* A tensor's bytes in its entry's slot; NULL while the entry is streamed
 * (the forward pass acquires it). */
static void *tensor_at(const eng_model *m, const tensor_spec *spec)
{
    char *slot = m->slots[spec->catalog_id];
    return slot ? slot + spec->entry_offset : NULL;
}

static eng_matrix matrix_at(const eng_model *m, size_t spec_index, const tensor_spec *specs)
{
    const eng_gguf_tensor *t = specs[spec_index].found;
    eng_matrix w = {t->type, tensor_at(m, &specs[spec_index]), (size_t)t->ne[1], (size_t)t->ne[0]};
    return w;
}

/* Layer l's nine tensors (specs[1 + 9l ... 9 + 9l], build_specs) in the
 * file: the lowest offset, the highest end and their bytes. */
static void layer_span(const tensor_spec *specs, uint32_t l, uint64_t *lo, uint64_t *hi,
                       uint64_t *sum)
{
    *lo = UINT64_MAX;
    *hi = *sum = 0;
    for (size_t k = 0; k < 9; k++) {
        const eng_gguf_tensor *t = specs[1 + 9 * (size_t)l + k].found;
        *lo = t->offset < *lo ? t->offset : *lo;
        *hi = t->offset + t->bytes > *hi ? t->offset + t->bytes : *hi;
        *sum += t->bytes;
    }
}

/* Whether every layer's nine tensors lie together in the file: their span
 * exceeds their bytes by the alignment's padding alone. Then each layer is
 * one catalog entry ("blk.N"), one slot instead of nine (which on a backend
 * of 2 MiB granules is most of the weights' device memory: SmolLM2-135M's
 * 272 per-tensor slots take 600 MB for its 97 MB), and it is streamed or
 * kept resident whole. */
static bool layers_contiguous(const tensor_spec *specs, uint32_t n_layer, uint64_t alignment)
{
    for (uint32_t l = 0; l < n_layer; l++) {
        uint64_t lo, hi, sum;
        layer_span(specs, l, &lo, &hi, &sum);
        if (hi - lo - sum > 9 * alignment)
            return false;
    }
    return true;
}

/* Slots of the streaming ring under a weights budget by default: one per
 * layer in flight (one per context decoding at once), spares. */
#define ENG_RING_SLOTS 4

/* Which catalog entries are pinned resident (keep) and the residency
 * cache's ring. Without a budget: every entry, and the cache's default ring.
 * Under one (the layers must be one entry each): the embedding, the output
 * and the output norm always (the embedding is read a row at a time), then
 * the layers in the order the forward pass reads them while they fit beside
 * a ring of ring_slots slots of the largest; the rest are streamed
 * through the ring. ORTMEM_E_BUDGET naming the numbers when the budget
 * cannot hold what must stay resident and the ring. */
static ortmem_status plan_residency(const ortmem_weight_tensor *table, uint32_t entries,
                                    uint32_t n_layer, bool layered, uint64_t granule,
                                    uint64_t budget, uint32_t ring_slots, bool *keep,
                                    ortmem_residency_options *ro, eng_error *err)
{
    if (budget && !layered)
        return eng_fail(err, ORTMEM_E_UNSUPPORTED,
                        "a weights budget streams whole layers, and this file's layers do not lie "
                        "together (each layer's tensors side by side)");
    uint64_t ring_slot = 0, must = 0;
    for (uint32_t id = 0; id < entries; id++) {
        const uint64_t slot = round_up(table[id].bytes, granule);
        const ortmem_weight_role role = table[id].role;
        const bool streamable = role == ORTMEM_WEIGHT_OTHER && table[id].layer < n_layer;
        if (!budget || !streamable) {
            keep[id] = true;
            must += streamable ? 0 : slot;
        } else if (slot > ring_slot) {
            ring_slot = slot;
        }
    }
    if (!budget)
        return ORTMEM_OK;
    const uint64_t ring = (uint64_t)ring_slots * ring_slot;
    if (budget < must + ring)
        return eng_fail(err, ORTMEM_E_BUDGET,
                        "a weights budget of %" PRIu64 " bytes is below the %" PRIu64
                        " the engine keeps resident (embedding, output, norms) plus a ring of %u "
                        "slots of %" PRIu64 " bytes",
                        budget, must, ring_slots, ring_slot);
    uint64_t room = budget - must - ring;
    for (uint32_t id = 0; id < entries; id++) {
        if (keep[id])
            continue;
        const uint64_t slot = round_up(table[id].bytes, granule);
        if (slot <= room) {
            keep[id] = true;
            room -= slot;
        }
    }
    ro->ring_slots = ring_slots;
    ro->ring_slot_bytes = ring_slot;
    return ORTMEM_OK;
}

ortmem_status eng_model_load(const char *path, const eng_model_options *options, eng_model **out,
                             eng_error *err)
{
    if (!path || !out)
        return eng_fail(err, ORTMEM_E_INVALID, "model load: no path or no result pointer");
    eng_model_options opts = {0};
    if (options)
        opts = *options;
    /* The page by default: the weights' 272 slots and the KV's fragments
     * then round up by at most a page each (64 KiB granules cost SmolLM2
     * 14 MB of weight slots; the load takes as long). */
    long page = sysconf(_SC_PAGESIZE);
    uint64_t granule = opts.granule ? opts.granule : (uint64_t)(page > 0 ? page : 4096);
    if (opts.backend) {
        size_t backend_granule = 0;
        ortmem_status gs = ortmem_backend_granule(opts.backend, &backend_granule);
        if (gs != ORTMEM_OK)
            return eng_from_ortmem(err, gs, "model load: the given backend's granule");
        granule = backend_granule;
    }

    eng_model *m = calloc(1, sizeof *m);
    if (!m)
        return eng_fail(err, ORTMEM_E_NOMEM, "model load: no memory");
    pthread_mutex_init(&m->lock, NULL);
    tensor_spec *specs = NULL;
    ortmem_weight_tensor *table = NULL;
    bool *keep = NULL; /* per catalogued tensor: pinned resident */
    ortmem_status st = eng_gguf_open(path, &m->gguf, err);
    if (st != ORTMEM_OK)
        goto fail;
    if ((st = read_hparams(m->gguf, &m->hp, err)) != ORTMEM_OK)
        goto fail;
    const eng_hparams *hp = &m->hp;
    size_t max_specs = 3 + 9 * (size_t)hp->n_layer;
    specs = calloc(max_specs, sizeof *specs);
    table = calloc(max_specs, sizeof *table);
    m->layers = calloc(hp->n_layer, sizeof *m->layers);
    if (!specs || !table || !m->layers) {
        st = eng_fail(err, ORTMEM_E_NOMEM, "model load: no memory for %zu tensors", max_specs);
        goto fail;
    }
    size_t nspec = build_specs(hp, specs);
    for (size_t i = 0; i < nspec; i++)
        if ((st = check_tensor(m->gguf, &specs[i], err)) != ORTMEM_OK)
            goto fail;
    m->hp.tied_output = specs[nspec - 1].found == NULL;

    const uint64_t data_start = eng_gguf_data_offset(m->gguf);

    /* The catalog, in the forward pass's access order: the embedding, each
     * layer as one entry when the layers lie together in the file (else each
     * of its tensors), the output norm and the output. */
    const bool layered = layers_contiguous(specs, hp->n_layer, eng_gguf_alignment(m->gguf));
    m->entry_names = calloc(hp->n_layer ? hp->n_layer : 1, sizeof *m->entry_names);
    if (!m->entry_names) {
        st = eng_fail(err, ORTMEM_E_NOMEM, "model load: no memory");
        goto fail;
    }
    uint64_t slots_bytes = 0, largest_slot = 0;
    for (size_t i = 0; i < nspec; i++) {
        if (!specs[i].found)
            continue;
        m->file_bytes += specs[i].found->bytes;
        const bool in_layer = layered && i >= 1 && i < 1 + 9 * (size_t)hp->n_layer;
        if (in_layer && (i - 1) % 9 != 0) {
            /* A later tensor of the layer: inside the entry its first opened. */
            const size_t first = i - (i - 1) % 9;
            specs[i].catalog_id = specs[first].catalog_id;
            specs[i].entry_offset =
                specs[i].found->offset - (table[specs[i].catalog_id].offset - data_start);
            continue;
        }
        ortmem_weight_tensor *w = &table[m->tensor_count];
        w->name = specs[i].name;
        w->offset = data_start + specs[i].found->offset;
        w->bytes = specs[i].found->bytes;
        w->layer = specs[i].layer;
        w->role = specs[i].role;
        w->order = m->tensor_count;
        if (in_layer) {
            /* The layer's entry: from its lowest offset to its highest end. */
            uint64_t lo, hi, sum;
            layer_span(specs, specs[i].layer, &lo, &hi, &sum);
            snprintf(m->entry_names[specs[i].layer], sizeof m->entry_names[0], "blk.%u",
                     specs[i].layer);
            w->name = m->entry_names[specs[i].layer];
            w->offset = data_start + lo;
            w->bytes = hi - lo;
            w->role = ORTMEM_WEIGHT_OTHER;
            specs[i].entry_offset = specs[i].found->offset - lo;
        }
        specs[i].catalog_id = m->tensor_count++;
        uint64_t slot = round_up(w->bytes, granule);
        slots_bytes += slot;
        if (slot > largest_slot)
            largest_slot = slot;
    }
    m->pinned = calloc(m->tensor_count, sizeof *m->pinned);
    m->slots = calloc(m->tensor_count, sizeof *m->slots);
    keep = calloc(m->tensor_count ? m->tensor_count : 1, sizeof *keep);
    if (!m->pinned || !m->slots || !keep) {
        st = eng_fail(err, ORTMEM_E_NOMEM, "model load: no memory");
        goto fail;
    }
    ortmem_residency_options ro = ORTMEM_RESIDENCY_OPTIONS_INIT;
    if ((st = plan_residency(
             table, m->tensor_count, hp->n_layer, layered, granule, opts.weights_budget,
             opts.ring_slots ? opts.ring_slots : ENG_RING_SLOTS, keep, &ro, err)) != ORTMEM_OK)
        goto fail;
    ro.copy_stream = opts.copy_stream;
    ro.compute_stream = opts.compute_stream;
    m->compute_stream = opts.compute_stream;

    if (opts.backend) {
        m->backend = opts.backend;
    } else {
        ortmem_cpu_options cpu = ORTMEM_CPU_OPTIONS_INIT;
        cpu.granule = (size_t)granule;
        if ((st = ortmem_cpu_backend_create(&cpu, &m->backend)) != ORTMEM_OK) {
            ortmem_fail(err, st, "the CPU backend");
            goto fail;
        }
        m->own_backend = true;
    }
    /* Resident slots plus the ring the cache reserves for streaming (or the
     * caller's budget). */
    m->weights_budget = opts.weights_budget ? opts.weights_budget : slots_bytes + 2 * largest_slot;
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = m->weights_budget;
    if ((st = ortmem_authority_create(m->backend, &ao, &m->authority)) != ORTMEM_OK) {
        ortmem_fail(err, st, "the authority");
        goto fail;
    }
    ortmem_weight_file_options fo = ORTMEM_WEIGHT_FILE_OPTIONS_INIT;
    fo.expected_file_bytes = eng_gguf_file_bytes(m->gguf);
    if ((st = ortmem_weight_catalog_open_file(path, table, m->tensor_count, &fo, &m->catalog)) !=
        ORTMEM_OK) {
        ortmem_fail(err, st, "the weight catalog");
        goto fail;
    }
    if (opts.staging && (st = copy_to_staging(m, opts.staging, table, err)) != ORTMEM_OK)
        goto fail;
    ro.budget_bytes = m->weights_budget;
    if ((st = ortmem_residency_cache_create(m->authority, m->catalog, &ro, &m->residency)) !=
        ORTMEM_OK) {
        ortmem_fail(err, st, "the residency cache");
        goto fail;
    }
    uint64_t done_bytes = 0;
    for (uint32_t i = 0; i < m->tensor_count; i++) {
        if (!keep[i])
            continue; /* streamed: acquired around each product */
        if ((st = ortmem_residency_pin(m->residency, i)) != ORTMEM_OK) {
            char what[128];
            snprintf(what, sizeof what, "pinning %s resident", table[i].name);
            ortmem_fail(err, st, what);
            goto fail;
        }
        m->pinned[i] = true;
        if (!m->staging)
            drop_file_pages(m->catalog, i, table[i].bytes, (uint64_t)(page > 0 ? page : 4096));
        if ((st = ortmem_residency_slot(m->residency, i, &m->slots[i])) != ORTMEM_OK) {
            ortmem_fail(err, st, "the slot pointer");
            goto fail;
        }
        done_bytes += table[i].bytes;
        if (opts.progress)
            opts.progress(opts.progress_user, i + 1, m->tensor_count, done_bytes, m->file_bytes);
    }

    /* The forward pass's view of the weights: the slots (NULL for what is
     * streamed: the forward pass acquires it). */
    size_t s = 0;
    m->token_embd = matrix_at(m, s++, specs);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        eng_layer *L = &m->layers[l];
        const size_t base = s;
        L->attn_norm = tensor_at(m, &specs[s++]);
        L->wq = matrix_at(m, s++, specs);
        L->wk = matrix_at(m, s++, specs);
        L->wv = matrix_at(m, s++, specs);
        L->wo = matrix_at(m, s++, specs);
        L->ffn_norm = tensor_at(m, &specs[s++]);
        L->w_gate = matrix_at(m, s++, specs);
        L->w_up = matrix_at(m, s++, specs);
        L->w_down = matrix_at(m, s++, specs);
        /* The layer's specs (build_specs): attn_norm, q, k, v, o, ffn_norm, gate, up, down. */
        static const size_t at[ENG_LAYER_MATRICES] = {1, 2, 3, 4, 6, 7, 8};
        for (uint32_t w = 0; w < ENG_LAYER_MATRICES; w++)
            L->offset[w] = specs[base + at[w]].entry_offset;
        L->attn_norm_offset = specs[base].entry_offset;
        L->ffn_norm_offset = specs[base + 5].entry_offset;
        L->entry = specs[base].catalog_id;
        L->streamed = !keep[L->entry];
        m->streamed_count += L->streamed;
    }
    m->output_norm = tensor_at(m, &specs[s++]);
    m->output = m->hp.tied_output ? m->token_embd : matrix_at(m, s, specs);

    free(specs);
    free(table);
    free(keep);
    *out = m;
    return ORTMEM_OK;
fail:
    /* Every message names the file once (the reader's already do). */
    if (err && strncmp(err->message, path, strlen(path)) != 0)
        eng_wrap(err, "%s", path);
    free(specs);
    free(table);
    free(keep);
    model_free(m);
    return st;
}

ortmem_status eng_model_destroy(eng_model *m, eng_error *err)
{
    if (!m)
        return ORTMEM_OK;
    pthread_mutex_lock(&m->lock);
    unsigned contexts = m->contexts;
    pthread_mutex_unlock(&m->lock);
    if (contexts > 0)
        return eng_fail(err, ORTMEM_E_BUSY, "the model still has %u context(s)", contexts);
    ortmem_status result = ORTMEM_OK;
    for (uint32_t i = 0; i < m->tensor_count; i++)
        if (m->pinned[i]) {
            ortmem_status st = ortmem_residency_unpin(m->residency, i);
            if (st != ORTMEM_OK && result == ORTMEM_OK)
                result = eng_from_ortmem(err, st, "unpinning a weight");
            m->pinned[i] = false;
        }
    ortmem_status st = ortmem_residency_cache_destroy(m->residency);
    if (st != ORTMEM_OK && result == ORTMEM_OK)
        result = eng_from_ortmem(err, st, "destroying the residency cache");
    if (st == ORTMEM_OK)
        m->residency = NULL;
    ortmem_authority_report report = {.struct_size = sizeof report};
    if (ortmem_authority_report_get(m->authority, &report, NULL, 0) == ORTMEM_OK &&
        (report.owned_bytes != 0 || report.claimed_bytes != 0) && result == ORTMEM_OK)
        result = eng_fail(err, ORTMEM_E_STATE,
                          "the authority still has %" PRIu64 " bytes owned and %" PRIu64
                          " claimed after the weights were released",
                          report.owned_bytes, report.claimed_bytes);
    model_free(m);
    return result;
}

const eng_hparams *eng_model_hparams(const eng_model *m)
{
    return &m->hp;
}

const eng_gguf *eng_model_gguf(const eng_model *m)
{
    return m->gguf;
}

ortmem_authority *eng_model_authority(eng_model *m)
{
    return m->authority;
}

ortmem_residency_cache *eng_model_residency(eng_model *m)
{
    return m->residency;
}

uint64_t eng_model_weights_resident_bytes(eng_model *m)
{
    ortmem_residency_stats rs = {.struct_size = sizeof rs};
    if (ortmem_residency_stats_get(m->residency, &rs) != ORTMEM_OK)
        return 0;
    return rs.resident_bytes;
}

uint64_t eng_model_weights_file_bytes(const eng_model *m)
{
    return m->file_bytes;
}

/* ---- contexts' share of the model ---- */

ortmem_status eng_model_limit_raise(eng_model *m, uint64_t bytes, eng_error *err)
{
    ortmem_authority_report r = {.struct_size = sizeof r};
    pthread_mutex_lock(&m->lock);
    ortmem_status st = ortmem_authority_report_get(m->authority, &r, NULL, 0);
    if (st == ORTMEM_OK)
        st = ortmem_authority_set_limit(m->authority, r.limit_bytes + bytes, NULL);
    pthread_mutex_unlock(&m->lock);
    return st == ORTMEM_OK
               ? ORTMEM_OK
               : eng_from_ortmem(err, st, "raising the authority's limit for a context");
}

void eng_model_limit_lower(eng_model *m, uint64_t bytes)
{
    ortmem_authority_report r = {.struct_size = sizeof r};
    pthread_mutex_lock(&m->lock);
    if (ortmem_authority_report_get(m->authority, &r, NULL, 0) == ORTMEM_OK)
        ortmem_authority_set_limit(m->authority, r.limit_bytes - bytes, NULL);
    pthread_mutex_unlock(&m->lock);
}

void eng_model_context_count(eng_model *m, int delta)
{
    pthread_mutex_lock(&m->lock);
    m->contexts = (unsigned)((int)m->contexts + delta);
    pthread_mutex_unlock(&m->lock);
}
