/* The KV cache on the CPU backend (64 KiB granules, small geometries): the
 * live ledger against the geometry's prediction for every layout and strategy,
 * stable growth that moves nothing against bucket growth that copies the live
 * prefix, data written through the bindings surviving growth, fork,
 * copy-on-write, truncate and swap, fork sharing, budget refusals, the prefix
 * cache and its eviction under pressure, the zero tail, the auto strategy, bad
 * input, and a fault-injection sweep over a KV workload. Every assertion is on
 * bytes and counters. */
#include <stdio.h>
#include <stdlib.h>

#include "support.h"

#define G ((uint64_t)TEST_GRANULE)
#define MAX_CTX 4096 /* the longest context a test uses */

static const ortmem_kv_layout layouts[] = {ORTMEM_KV_HEAD_MAJOR, ORTMEM_KV_SEQ_MAJOR,
                                           ORTMEM_KV_TOKEN_MAJOR};
#define LAYOUT_COUNT (sizeof layouts / sizeof layouts[0])

/* ---- environment: a backend, its authority, a cache ---- */

typedef struct kvt {
    ortmem_backend *backend, *host;
    ortmem_authority *authority;
    ortmem_kv_cache *cache;
    ortmem_kv_geometry geometry;
    uint64_t max_context, min_bucket;
    uint64_t head_bytes;
    uint64_t check_step; /* bytes of a row checked: every one (0, 1) or a sample */
    uint32_t next_seed;
} kvt;

static ortmem_kv_geometry small_geometry(uint32_t layers, ortmem_kv_layout layout)
{
    ortmem_kv_geometry g = ORTMEM_KV_GEOMETRY_INIT;
    g.layers = layers;
    g.kv_heads = 2;
    g.head_dim = 64;
    g.dtype = ORTMEM_KV_F16;
    g.layout = layout;
    g.granule = G;
    return g;
}

static ortmem_kv_cache_options cache_options(ortmem_kv_geometry g, ortmem_kv_strategy strategy,
                                             uint64_t max_context)
{
    ortmem_kv_cache_options o = ORTMEM_KV_CACHE_OPTIONS_INIT;
    o.geometry = g;
    o.strategy = strategy;
    o.max_context = max_context;
    return o;
}

/* The per-granule baseline (ORTMEM_EXTENT_GRANULE): the tests that compare
 * the ledger with ortmem_kv_evaluate, whose committed bytes are the granule
 * windows the live tokens touch, or count creates per granule use it. Growth
 * over extents (the default) is checked against ortmem_kv_growth_evaluate in
 * test_kv_extents.c. */
static ortmem_kv_cache_options granule_options(ortmem_kv_geometry g, ortmem_kv_strategy strategy,
                                               uint64_t max_context)
{
    ortmem_kv_cache_options o = cache_options(g, strategy, max_context);
    o.extents.growth = ORTMEM_EXTENT_GRANULE;
    o.extents.cap_bytes = 0;
    return o;
}

/* A backend with an authority of limit bytes (and a host tier when asked). */
static void env_open(kvt *t, uint64_t limit, int with_host)
{
    memset(t, 0, sizeof *t);
    t->backend = test_backend();
    if (with_host)
        t->host = test_backend();
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = limit;
    OK(ortmem_authority_create(t->backend, &ao, &t->authority));
    t->next_seed = 1;
}

static void cache_open(kvt *t, ortmem_kv_cache_options o)
{
    if (t->host)
        o.host_backend = t->host;
    OK(ortmem_kv_cache_create(t->authority, &o, &t->cache));
    t->geometry = o.geometry;
    t->max_context = o.max_context;
    t->min_bucket = o.min_bucket ? o.min_bucket : 256;
    t->head_bytes = (uint64_t)o.geometry.head_dim * ortmem_kv_dtype_bits(o.geometry.dtype) / 8;
}

static void cache_close(kvt *t)
{
    if (t->cache)
        OK(ortmem_kv_cache_destroy(t->cache));
    t->cache = NULL;
}

static void env_close(kvt *t)
{
    cache_close(t);
    OK(ortmem_authority_destroy(t->authority));
    ortmem_vmm_stats s = stats_of(t->backend);
    cr_assert_eq(s.owned_bytes, 0, "owned %llu after teardown", (unsigned long long)s.owned_bytes);
    cr_assert_eq(s.mapped_bytes, 0);
    cr_assert_eq(s.reserved_va_bytes, 0);
    OK(ortmem_backend_destroy(t->backend));
    if (t->host) {
        cr_assert_eq(stats_of(t->host).owned_bytes, 0);
        OK(ortmem_backend_destroy(t->host));
    }
}

static ortmem_kv_stats kv_stats(ortmem_kv_cache *c)
{
    ortmem_kv_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    OK(ortmem_kv_cache_stats(c, &s));
    return s;
}

static ortmem_kv_eval evaluate(const ortmem_kv_geometry *g, uint64_t tokens, uint64_t capacity,
                               uint64_t prefix, uint64_t min_bucket)
{
    ortmem_kv_eval e;
    memset(&e, 0, sizeof e);
    e.struct_size = sizeof e;
    OK(ortmem_kv_evaluate(g, tokens, capacity, 1, prefix, min_bucket, &e));
    return e;
}

/* Live bytes of `tokens` tokens that lie in granules only partly live: what a
 * fork copies (whole live granules are mapped instead). Counted here from the
 * fragment layout, independently of the cache. */
static uint64_t partial_live_bytes(const ortmem_kv_geometry *g, uint64_t cap, uint64_t tokens,
                                   bool packed)
{
    ortmem_kv_eval e = evaluate(g, 0, cap, 0, 0);
    uint64_t end_of_all = 0, last_off, last_len;
    if (packed)
        OK(ortmem_kv_fragment_packed(g, cap, e.fragments - 1, &last_off, &last_len));
    else
        OK(ortmem_kv_fragment(g, cap, e.fragments - 1, &last_off, &last_len));
    end_of_all = last_off + last_len;
    size_t granules = (size_t)((end_of_all + g->granule - 1) / g->granule);
    uint64_t *live = calloc(granules, sizeof *live);
    cr_assert_not_null(live);
    for (uint64_t f = 0; f < e.fragments; f++) {
        uint64_t off, len;
        if (packed)
            OK(ortmem_kv_fragment_packed(g, cap, f, &off, &len));
        else
            OK(ortmem_kv_fragment(g, cap, f, &off, &len));
        for (uint64_t b = off; b < off + tokens * e.contiguous_bytes_per_token; b++)
            live[b / g->granule]++;
    }
    uint64_t total = 0;
    for (size_t k = 0; k < granules; k++)
        total += live[k] < g->granule ? live[k] : 0;
    free(live);
    return total;
}

/* What one sequence of n tokens commits under the cache's strategy. */
static uint64_t predicted(const kvt *t, ortmem_kv_strategy strategy, uint64_t n)
{
    if (n == 0)
        return 0;
    ortmem_kv_eval e = evaluate(&t->geometry, n, t->max_context, 0, t->min_bucket);
    return strategy == ORTMEM_KV_BUCKET ? e.bucket_committed_bytes : e.committed_bytes;
}

#define MAX_HOLDERS 16

static ortmem_holder_report holder_report(ortmem_authority *a, const char *name)
{
    ortmem_authority_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    ortmem_holder_report hs[MAX_HOLDERS];
    memset(hs, 0, sizeof hs);
    OK(ortmem_authority_report_get(a, &r, hs, MAX_HOLDERS));
    size_t n = r.holder_count < MAX_HOLDERS ? r.holder_count : MAX_HOLDERS;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(hs[i].name, name) == 0)
            return hs[i];
    }
    cr_assert_fail("holder '%s' is not in the report", name);
    ortmem_holder_report none;
    memset(&none, 0, sizeof none);
    return none;
}

static uint64_t owned_of(ortmem_authority *a, const char *name)
{
    return holder_report(a, name).owned_bytes;
}

/* ---- sequences with a byte model ----
 * Every token gets a seed when it is written; its bytes in every (layer, K|V,
 * head) row are a function of (seed, binding, head, token, byte), never 0. */

typedef struct tseq {
    ortmem_kv_seq *s;
    uint64_t len;
    uint32_t seeds[MAX_CTX];
} tseq;

static tseq *tseq_new(void)
{
    tseq *q = calloc(1, sizeof *q);
    cr_assert_not_null(q);
    return q;
}

static tseq *tseq_create(kvt *t)
{
    tseq *q = tseq_new();
    OK(ortmem_kv_seq_create(t->cache, &q->s));
    return q;
}

static void tseq_free(tseq *q)
{
    if (q && q->s)
        OK(ortmem_kv_seq_destroy(q->s));
    free(q);
}

static uint64_t row_mix(uint32_t seed, uint64_t binding, uint32_t head, uint64_t token)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL ^ (binding << 48) ^ ((uint64_t)head << 40) ^ token;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 29;
    return x;
}

static uint8_t row_byte(uint64_t mix, uint64_t i)
{
    return (uint8_t)((uint8_t)(mix >> ((i & 7) * 8)) + (uint8_t)(i >> 3)) | 1;
}

static ortmem_kv_binding binding_of(ortmem_kv_seq *s, uint32_t layer, int value)
{
    ortmem_kv_binding b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    OK(ortmem_kv_seq_binding(s, layer, value, &b));
    return b;
}

static volatile uint8_t *row_at(const ortmem_kv_binding *b, uint32_t head, uint64_t token)
{
    return (volatile uint8_t *)b->base + token * b->token_stride + head * b->head_stride;
}

/* Writes tokens [from, to) of every layer, K and V, every head. */
static void write_tokens(const kvt *t, tseq *q, uint64_t from, uint64_t to, uint32_t seed)
{
    for (uint32_t l = 0; l < t->geometry.layers; l++) {
        for (int v = 0; v < 2; v++) {
            ortmem_kv_binding b = binding_of(q->s, l, v);
            cr_assert_not_null(b.base);
            cr_assert_geq(b.capacity, to);
            for (uint32_t h = 0; h < t->geometry.kv_heads; h++) {
                for (uint64_t tok = from; tok < to; tok++) {
                    uint64_t mix = row_mix(seed, 2ULL * l + (uint64_t)v, h, tok);
                    volatile uint8_t *row = row_at(&b, h, tok);
                    for (uint64_t i = 0; i < t->head_bytes; i++)
                        row[i] = row_byte(mix, i);
                }
            }
        }
    }
    for (uint64_t tok = from; tok < to; tok++)
        q->seeds[tok] = seed;
}

/* Rows of tokens [0, len) whose bytes differ from the model. */
static uint64_t bad_rows(const kvt *t, const tseq *q)
{
    uint64_t bad = 0;
    for (uint32_t l = 0; l < t->geometry.layers; l++) {
        for (int v = 0; v < 2; v++) {
            ortmem_kv_binding b = binding_of(q->s, l, v);
            if (!b.base)
                return q->len * 2 * t->geometry.layers * t->geometry.kv_heads;
            for (uint32_t h = 0; h < t->geometry.kv_heads; h++) {
                for (uint64_t tok = 0; tok < q->len; tok++) {
                    uint64_t mix = row_mix(q->seeds[tok], 2ULL * l + (uint64_t)v, h, tok);
                    volatile uint8_t *row = row_at(&b, h, tok);
                    uint64_t step = t->check_step ? t->check_step : 1;
                    for (uint64_t i = 0; i < t->head_bytes; i += step) {
                        if (row[i] != row_byte(mix, i)) {
                            bad++;
                            break;
                        }
                    }
                    uint64_t last = t->head_bytes - 1;
                    if (step > 1 && row[last] != row_byte(mix, last))
                        bad++;
                }
            }
        }
    }
    return bad;
}

static void assert_intact(const kvt *t, const tseq *q, const char *when)
{
    uint64_t len = 0;
    OK(ortmem_kv_seq_length(q->s, &len));
    cr_assert_eq(len, q->len, "%s: length %llu, model %llu", when, (unsigned long long)len,
                 (unsigned long long)q->len);
    uint64_t bad = bad_rows(t, q);
    cr_assert_eq(bad, 0, "%s: %llu rows of %llu tokens corrupted", when, (unsigned long long)bad,
                 (unsigned long long)q->len);
}

/* Appends n tokens and writes them with a fresh seed. */
static void grow(kvt *t, tseq *q, uint64_t n)
{
    OK(ortmem_kv_seq_append(q->s, n));
    write_tokens(t, q, q->len, q->len + n, t->next_seed++);
    q->len += n;
}

static void truncate_to(tseq *q, uint64_t len)
{
    OK(ortmem_kv_seq_truncate(q->s, len));
    for (uint64_t tok = len; tok < q->len; tok++)
        q->seeds[tok] = 0;
    q->len = len;
}

static tseq *fork_of(tseq *parent)
{
    tseq *k = tseq_new();
    OK(ortmem_kv_seq_fork(parent->s, &k->s));
    k->len = parent->len;
    memcpy(k->seeds, parent->seeds, sizeof k->seeds);
    return k;
}

static int same_binding(const ortmem_kv_binding *x, const ortmem_kv_binding *y)
{
    return x->base == y->base && x->token_stride == y->token_stride &&
           x->head_stride == y->head_stride && x->capacity == y->capacity &&
           x->generation == y->generation;
}

/* ---- committed bytes against the geometry ---- */

/* Token counts a sweep visits: small steps, granule and bucket edges. */
static const uint64_t sweep_tokens[] = {1,    2,    3,    16,   17,   63,   64,   65,   100,  128,
                                        255,  256,  257,  300,  511,  512,  513,  700,  999,  1000,
                                        1023, 1024, 1025, 1500, 1999, 2000, 2047, 2048, 3000, 4096};
#define SWEEP_COUNT (sizeof sweep_tokens / sizeof sweep_tokens[0])

static void sweep_committed(ortmem_kv_geometry g, ortmem_kv_strategy strategy, uint64_t max_context,
                            uint64_t min_bucket)
{
    kvt t;
    env_open(&t, 1024 * MiB, 0);
    ortmem_kv_cache_options o = granule_options(g, strategy, max_context);
    o.min_bucket = min_bucket;
    o.warm_max_bytes = 0; /* about commits per length: a finished range is decommitted
                             (warm ranges: tests/test_kv_warm.c) */
    cache_open(&t, o);
    ortmem_kv_seq *s = NULL;
    OK(ortmem_kv_seq_create(t.cache, &s));
    ortmem_kv_eval full = evaluate(&t.geometry, 0, max_context, 0, 0);
    uint64_t len = 0, steps = 0;
    for (size_t i = 0; i < SWEEP_COUNT && sweep_tokens[i] <= max_context; i++) {
        uint64_t n = sweep_tokens[i];
        OK(ortmem_kv_seq_append(s, n - len));
        len = n;
        steps++;
        uint64_t want = predicted(&t, strategy, n);
        ortmem_kv_stats st = kv_stats(t.cache);
        const char *what = ortmem_kv_layout_name(g.layout);
        cr_assert_eq(st.committed_bytes, want, "%s %s cap %llu n %llu: ledger %llu, geometry %llu",
                     ortmem_kv_strategy_name(strategy), what, (unsigned long long)max_context,
                     (unsigned long long)n, (unsigned long long)st.committed_bytes,
                     (unsigned long long)want);
        cr_assert_eq(owned_of(t.authority, "kv"), want, "%s n %llu: holder report", what,
                     (unsigned long long)n);
        cr_assert_eq(holder_report(t.authority, "kv").mapped_bytes, want);
        cr_assert_eq(st.mapped_bytes, want);
        cr_assert_eq(st.committed_granules * G, want);
        cr_assert_eq(st.live_tokens, n);
        cr_assert_eq(st.live_bytes, n * full.bytes_per_token);
        cr_assert_eq(stats_of(t.backend).owned_bytes, want, "nothing else is owned");
        if (strategy == ORTMEM_KV_STABLE)
            cr_assert_eq(st.reserved_va_bytes, full.sequence_reserved_bytes);
        else
            cr_assert_eq(st.reserved_va_bytes, want, "a bucket is committed whole");
    }
    cr_assert_gt(steps, 10);
    OK(ortmem_kv_seq_destroy(s));
    cr_assert_eq(kv_stats(t.cache).committed_bytes, 0);
    env_close(&t);
}

Test(kv_cache, committed_bytes_from_the_ledger_equal_the_geometry_for_every_layout_and_strategy)
{
    /* 2048 tokens: every fragment starts on a granule; 1000 and 1500: head
     * rows straddle granules, so neighbouring fragments share them. */
    const uint64_t contexts[] = {2048, 1000, 1500};
    for (size_t l = 0; l < LAYOUT_COUNT; l++) {
        for (size_t c = 0; c < sizeof contexts / sizeof contexts[0]; c++) {
            sweep_committed(small_geometry(2, layouts[l]), ORTMEM_KV_STABLE, contexts[c], 0);
            sweep_committed(small_geometry(3, layouts[l]), ORTMEM_KV_STABLE, contexts[c], 0);
            sweep_committed(small_geometry(2, layouts[l]), ORTMEM_KV_BUCKET, contexts[c], 0);
            sweep_committed(small_geometry(3, layouts[l]), ORTMEM_KV_BUCKET, contexts[c], 16);
        }
    }
}

Test(kv_cache, committed_bytes_of_a_preset_model_equal_the_geometry)
{
    ortmem_kv_geometry g;
    OK(ortmem_kv_preset("qwen2.5-0.5b", &g));
    g.granule = G;
    for (size_t l = 0; l < LAYOUT_COUNT; l++) {
        g.layout = layouts[l];
        sweep_committed(g, ORTMEM_KV_STABLE, 4096, 0);
        sweep_committed(g, ORTMEM_KV_BUCKET, 4096, 0);
    }
}

Test(kv_cache, truncate_decommits_to_what_the_geometry_predicts_and_keeps_the_live_tokens)
{
    const uint64_t contexts[] = {2048, 1000};
    const uint64_t cuts[] = {1900, 1024, 700, 513, 512, 300, 1, 0};
    for (size_t l = 0; l < LAYOUT_COUNT; l++) {
        for (size_t c = 0; c < 2; c++) {
            for (int strat = 0; strat < 2; strat++) {
                ortmem_kv_strategy strategy = strat ? ORTMEM_KV_BUCKET : ORTMEM_KV_STABLE;
                kvt t;
                env_open(&t, 1024 * MiB, 0);
                cache_open(&t,
                           granule_options(small_geometry(2, layouts[l]), strategy, contexts[c]));
                tseq *q = tseq_create(&t);
                grow(&t, q, contexts[c]);
                uint64_t bucket_bytes = kv_stats(t.cache).committed_bytes;
                for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
                    if (cuts[i] > q->len)
                        continue;
                    truncate_to(q, cuts[i]);
                    uint64_t want = strategy == ORTMEM_KV_STABLE
                                        ? predicted(&t, strategy, cuts[i])
                                        : bucket_bytes; /* a bucket keeps its granules */
                    cr_assert_eq(kv_stats(t.cache).committed_bytes, want,
                                 "%s %s cap %llu truncated to %llu: %llu, geometry %llu",
                                 ortmem_kv_strategy_name(strategy),
                                 ortmem_kv_layout_name(layouts[l]), (unsigned long long)contexts[c],
                                 (unsigned long long)cuts[i],
                                 (unsigned long long)kv_stats(t.cache).committed_bytes,
                                 (unsigned long long)want);
                    assert_intact(&t, q, "after truncate");
                }
                /* Rewound to 0 and grown again: fresh bytes, same ledger. */
                grow(&t, q, 777);
                assert_intact(&t, q, "regrown");
                cr_assert_eq(kv_stats(t.cache).committed_bytes, strategy == ORTMEM_KV_STABLE
                                                                    ? predicted(&t, strategy, 777)
                                                                    : bucket_bytes);
                EXPECT_STATUS(ortmem_kv_seq_truncate(q->s, 778), ORTMEM_E_RANGE);
                assert_intact(&t, q, "refused truncate");
                tseq_free(q);
                env_close(&t);
            }
        }
    }
}

/* ---- growth: stable moves nothing, bucket copies ---- */

static const uint64_t growth_steps[] = {1, 5, 58, 64, 128, 1, 255, 300, 212, 1, 1000, 23, 500};
#define GROWTH_STEPS (sizeof growth_steps / sizeof growth_steps[0])

Test(kv_cache, stable_growth_moves_nothing_and_keeps_pointers_and_generations)
{
    for (size_t l = 0; l < LAYOUT_COUNT; l++) {
        kvt t;
        env_open(&t, 1024 * MiB, 0);
        cache_open(&t, granule_options(small_geometry(3, layouts[l]), ORTMEM_KV_STABLE, 3000));
        tseq *q = tseq_create(&t);
        ortmem_kv_binding before[3][2];
        for (uint32_t layer = 0; layer < 3; layer++) {
            for (int v = 0; v < 2; v++) {
                before[layer][v] = binding_of(q->s, layer, v);
                cr_assert_not_null(before[layer][v].base, "stable: VA from the start");
                cr_assert_eq(before[layer][v].capacity, 3000);
            }
        }
        uint64_t creates = 0;
        for (size_t i = 0; i < GROWTH_STEPS; i++) {
            uint64_t creates_before = stats_of(t.backend).calls[ORTMEM_OP_CREATE];
            grow(&t, q, growth_steps[i]);
            creates += stats_of(t.backend).calls[ORTMEM_OP_CREATE] - creates_before;
            for (uint32_t layer = 0; layer < 3; layer++) {
                for (int v = 0; v < 2; v++) {
                    ortmem_kv_binding now = binding_of(q->s, layer, v);
                    cr_assert(same_binding(&now, &before[layer][v]),
                              "%s layer %u: binding moved at %llu tokens",
                              ortmem_kv_layout_name(layouts[l]), layer, (unsigned long long)q->len);
                }
            }
            ortmem_kv_stats st = kv_stats(t.cache);
            cr_assert_eq(st.growth_copied_bytes, 0);
            cr_assert_eq(st.generations_bumped, 0);
            cr_assert_eq(st.cow_copied_bytes, 0);
            cr_assert_eq(stats_of(t.backend).calls[ORTMEM_OP_COPY], 0, "0 bytes moved");
            assert_intact(&t, q, "stable growth");
        }
        /* Every granule was created once, where a token landed. */
        cr_assert_eq(creates * G, predicted(&t, ORTMEM_KV_STABLE, q->len));
        tseq_free(q);
        env_close(&t);
    }
}

Test(kv_cache, bucket_growth_copies_the_live_prefix_and_bumps_the_generation_exactly_on_a_move)
{
    for (size_t l = 0; l < LAYOUT_COUNT; l++) {
        for (int mb = 0; mb < 2; mb++) {
            kvt t;
            env_open(&t, 1024 * MiB, 0);
            ortmem_kv_cache_options o =
                cache_options(small_geometry(2, layouts[l]), ORTMEM_KV_BUCKET, 3000);
            o.min_bucket = mb ? 16 : 0;
            cache_open(&t, o);
            tseq *q = tseq_create(&t);
            ortmem_kv_binding b0 = binding_of(q->s, 0, 0);
            cr_assert_null(b0.base, "no bucket before the first append");
            cr_assert_eq(b0.generation, 0);
            uint64_t bpt = evaluate(&t.geometry, 0, 3000, 0, 0).bytes_per_token;
            uint64_t moves = 0, copied = 0;
            for (size_t i = 0; i < GROWTH_STEPS; i++) {
                ortmem_kv_binding old[2][2];
                for (uint32_t layer = 0; layer < 2; layer++)
                    for (int v = 0; v < 2; v++)
                        old[layer][v] = binding_of(q->s, layer, v);
                ortmem_kv_stats s0 = kv_stats(t.cache);
                ortmem_vmm_stats b0 = stats_of(t.backend);
                uint64_t copies0 = b0.calls[ORTMEM_OP_COPY_ASYNC];
                uint64_t from = q->len;
                grow(&t, q, growth_steps[i]);
                uint64_t cap = ortmem_kv_bucket(q->len, t.min_bucket, 3000);
                int moved = cap != old[0][0].capacity;
                ortmem_kv_stats s1 = kv_stats(t.cache);
                for (uint32_t layer = 0; layer < 2; layer++) {
                    for (int v = 0; v < 2; v++) {
                        ortmem_kv_binding now = binding_of(q->s, layer, v);
                        cr_assert_eq(now.capacity, cap);
                        int changed = now.base != old[layer][v].base ||
                                      now.token_stride != old[layer][v].token_stride ||
                                      now.head_stride != old[layer][v].head_stride;
                        cr_assert_eq(changed, moved, "%s: %llu -> %llu tokens",
                                     ortmem_kv_layout_name(layouts[l]), (unsigned long long)from,
                                     (unsigned long long)q->len);
                        cr_assert_eq(now.generation, old[layer][v].generation + (uint64_t)moved,
                                     "generation changes exactly when the pointer moves");
                    }
                }
                if (moved) {
                    moves++;
                    copied += from * bpt;
                    cr_assert_eq(s1.growth_copied_bytes - s0.growth_copied_bytes, from * bpt,
                                 "%s: move at %llu tokens copies the live prefix",
                                 ortmem_kv_layout_name(layouts[l]), (unsigned long long)from);
                    cr_assert_eq(s1.generations_bumped, s0.generations_bumped + 1);
                    ortmem_vmm_stats b1 = stats_of(t.backend);
                    if (from) {
                        cr_assert_gt(b1.calls[ORTMEM_OP_COPY_ASYNC], copies0,
                                     "a real copy on the cache's stream");
                        cr_assert_eq(b1.calls[ORTMEM_OP_EVENT_RECORD],
                                     b0.calls[ORTMEM_OP_EVENT_RECORD] + 1,
                                     "one event orders the old bucket's release after the copies");
                        cr_assert_eq(b1.calls[ORTMEM_OP_EVENT_DESTROY],
                                     b0.calls[ORTMEM_OP_EVENT_DESTROY] + 1);
                    }
                } else {
                    cr_assert_eq(s1.growth_copied_bytes, s0.growth_copied_bytes);
                    cr_assert_eq(s1.generations_bumped, s0.generations_bumped);
                    cr_assert_eq(stats_of(t.backend).calls[ORTMEM_OP_COPY_ASYNC], copies0);
                }
                cr_assert_eq(s1.committed_bytes, predicted(&t, ORTMEM_KV_BUCKET, q->len));
                assert_intact(&t, q, "bucket growth");
            }
            ortmem_kv_stats st = kv_stats(t.cache);
            cr_assert_eq(st.generations_bumped, moves);
            cr_assert_eq(st.growth_copied_bytes, copied);
            cr_assert_eq(binding_of(q->s, 1, 1).generation, moves);
            cr_assert_geq(moves, mb ? 7 : 5, "the sweep crosses buckets (%llu moves)",
                          (unsigned long long)moves);
            tseq_free(q);
            env_close(&t);
        }
    }
}

/* ---- fork and copy-on-write ---- */

Test(kv_cache, eight_forks_own_the_prefix_once_plus_their_private_tails)
{
    for (size_t l = 0; l < LAYOUT_COUNT; l++) {
        kvt t;
        env_open(&t, 1024 * MiB, 0);
        ortmem_kv_cache_options o =
            granule_options(small_geometry(2, layouts[l]), ORTMEM_KV_STABLE, 2048);
        o.warm_max_bytes = 0; /* about shared ownership: finished forks are decommitted
                                 (warm ranges: tests/test_kv_warm.c) */
        cache_open(&t, o);
        tseq *parent = tseq_create(&t);
        const uint64_t n = 700;
        grow(&t, parent, n);
        ortmem_kv_eval e = evaluate(&t.geometry, n, 2048, n, 0);
        uint64_t pc = e.committed_bytes;
        uint64_t shared = e.share_granules * G;
        uint64_t priv = pc - shared; /* the boundary granules: copied into every fork */
        cr_assert_gt(shared, 0);
        cr_assert_gt(priv, 0);
        cr_assert_eq(owned_of(t.authority, "kv"), pc);

        tseq *forks[8];
        for (int i = 0; i < 8; i++)
            forks[i] = fork_of(parent);
        ortmem_kv_stats st = kv_stats(t.cache);
        cr_assert_eq(st.committed_bytes, pc + 8 * priv, "%s: %llu, want %llu + 8 * %llu",
                     ortmem_kv_layout_name(layouts[l]), (unsigned long long)st.committed_bytes,
                     (unsigned long long)pc, (unsigned long long)priv);
        cr_assert_eq(owned_of(t.authority, "kv"), pc + 8 * priv);
        cr_assert_eq(st.shared_granules, 9 * e.share_granules, "parent and 8 forks map them");
        cr_assert_eq(st.cow_copied_bytes, 8 * partial_live_bytes(&t.geometry, 2048, n, false),
                     "only the live bytes of the boundary granules are copied");
        cr_assert_eq(st.live_tokens, 9 * n);
        cr_assert_eq(st.mapped_bytes, 9 * pc, "every sequence maps its whole prefix");
        for (int i = 0; i < 8; i++)
            assert_intact(&t, forks[i], "fork");

        /* Private tails: each fork and the parent append their own tokens. */
        uint64_t want = shared;
        for (int i = 0; i < 8; i++) {
            grow(&t, forks[i], 37 * (uint64_t)(i + 1));
            want += evaluate(&t.geometry, forks[i]->len, 2048, 0, 0).committed_bytes - shared;
        }
        grow(&t, parent, 100);
        want += evaluate(&t.geometry, parent->len, 2048, 0, 0).committed_bytes - shared;
        st = kv_stats(t.cache);
        cr_assert_eq(st.committed_bytes, want, "%s after tails: %llu, want %llu",
                     ortmem_kv_layout_name(layouts[l]), (unsigned long long)st.committed_bytes,
                     (unsigned long long)want);
        cr_assert_eq(st.shared_granules, 9 * e.share_granules);
        /* Writes after the fork never leak. */
        assert_intact(&t, parent, "parent after tails");
        for (int i = 0; i < 8; i++)
            assert_intact(&t, forks[i], "fork after tails");

        /* The shared granules live until their last mapper goes. */
        tseq_free(parent);
        for (int i = 0; i < 7; i++)
            assert_intact(&t, forks[i + 1], "fork after the parent went");
        for (int i = 0; i < 8; i++)
            tseq_free(forks[i]);
        cr_assert_eq(kv_stats(t.cache).committed_bytes, 0);
        env_close(&t);
    }
}

/* Per granule the parent's rewind lands in granules the child shares, so a
 * copy is asserted; over extents the 900-token prefill is one extent per
 * fragment that 900 tokens do not fill, so the fork copies it instead of
 * sharing and the rewind finds nothing shared: the bytes are checked alone. */
static void cow_roundtrip(ortmem_kv_layout layout, ortmem_kv_strategy strategy,
                          ortmem_extent_growth growth)
{
    kvt t;
    env_open(&t, 1024 * MiB, 0);
    ortmem_kv_cache_options o = cache_options(small_geometry(2, layout), strategy, 2048);
    o.extents.growth = growth;
    cache_open(&t, o);
    tseq *parent = tseq_create(&t);
    grow(&t, parent, 900);
    tseq *child = fork_of(parent);
    const char *what = ortmem_kv_layout_name(layout);

    /* The parent rewinds into the shared granules and writes again. */
    uint64_t cow0 = kv_stats(t.cache).cow_copied_bytes;
    truncate_to(parent, 300);
    grow(&t, parent, 400);
    assert_intact(&t, child, what);
    assert_intact(&t, parent, what);
    if (growth == ORTMEM_EXTENT_GRANULE && strategy == ORTMEM_KV_STABLE)
        cr_assert_gt(kv_stats(t.cache).cow_copied_bytes, cow0, "%s: the shared granule was copied",
                     what);

    /* And the child does the same: the parent's bytes stay. */
    truncate_to(child, 100);
    grow(&t, child, 1000);
    assert_intact(&t, parent, what);
    assert_intact(&t, child, what);

    /* A fork of a fork, then both rewind to 0. */
    tseq *grandchild = fork_of(child);
    truncate_to(child, 0);
    grow(&t, child, 50);
    assert_intact(&t, grandchild, what);
    truncate_to(grandchild, 10);
    grow(&t, grandchild, 700);
    assert_intact(&t, child, what);
    assert_intact(&t, parent, what);
    assert_intact(&t, grandchild, what);

    tseq_free(child);
    assert_intact(&t, grandchild, what);
    assert_intact(&t, parent, what);
    tseq_free(grandchild);
    tseq_free(parent);
    env_close(&t);
}

Test(kv_cache, copy_on_write_keeps_parent_and_child_apart_in_both_directions)
{
    for (size_t l = 0; l < LAYOUT_COUNT; l++) {
        cow_roundtrip(layouts[l], ORTMEM_KV_STABLE, ORTMEM_EXTENT_GRANULE);
        cow_roundtrip(layouts[l], ORTMEM_KV_STABLE, ORTMEM_EXTENT_GEOMETRIC);
        cow_roundtrip(layouts[l], ORTMEM_KV_BUCKET, ORTMEM_EXTENT_GEOMETRIC);
    }
}

Test(kv_cache, bucket_fork_copies_the_partial_granules_and_commits_the_whole_bucket)
{
    kvt t;
    env_open(&t, 1024 * MiB, 0);
    cache_open(&t, cache_options(small_geometry(2, ORTMEM_KV_SEQ_MAJOR), ORTMEM_KV_BUCKET, 2048));
    tseq *parent = tseq_create(&t);
    grow(&t, parent, 600); /* bucket 1024: four granules per fragment, 2.3 live */
    uint64_t pc = kv_stats(t.cache).committed_bytes;
    ortmem_kv_eval e = evaluate(&t.geometry, 600, 1024, 600, 0);
    tseq *child = fork_of(parent);
    ortmem_kv_binding pb = binding_of(parent->s, 0, 0), cb = binding_of(child->s, 0, 0);
    cr_assert_eq(cb.capacity, pb.capacity);
    cr_assert_neq(cb.base, pb.base);
    ortmem_kv_stats st = kv_stats(t.cache);
    /* A bucket is one extent (16 granules here) and a share maps whole
     * extents only: 600 of 1024 tokens leave it cut, so the child shares
     * nothing and copies every live byte (per granule it shared the
     * e.share_granules whole ones and copied the partial ones). */
    cr_assert_gt(e.share_granules, 0);
    cr_assert_eq(st.committed_bytes, 2 * pc);
    cr_assert_eq(st.shared_granules, 0);
    cr_assert_eq(st.cow_copied_bytes, 600 * e.bytes_per_token, "every live byte");
    assert_intact(&t, child, "bucket fork");
    /* The child outgrows the bucket: a private copy, nothing shared. */
    grow(&t, child, 500);
    assert_intact(&t, child, "bucket fork grown");
    assert_intact(&t, parent, "parent of a grown bucket fork");
    cr_assert_eq(kv_stats(t.cache).shared_granules, 0);
    tseq_free(child);
    tseq_free(parent);
    env_close(&t);
}

/* ---- swap ---- */

static void swap_roundtrip(ortmem_kv_layout layout, ortmem_kv_strategy strategy)
{
    kvt t;
    env_open(&t, 1024 * MiB, 1);
    cache_open(&t, cache_options(small_geometry(2, layout), strategy, 2048));
    tseq *q = tseq_create(&t);
    tseq *other = tseq_create(&t);
    grow(&t, q, 777);
    grow(&t, other, 300);
    const char *what = ortmem_kv_layout_name(layout);
    uint64_t mine = predicted(&t, strategy, 777), theirs = predicted(&t, strategy, 300);
    cr_assert_eq(stats_of(t.backend).owned_bytes, mine + theirs);
    ortmem_kv_binding before[2][2];
    for (uint32_t l = 0; l < 2; l++)
        for (int v = 0; v < 2; v++)
            before[l][v] = binding_of(q->s, l, v);

    OK(ortmem_kv_seq_swap_out(q->s));
    ortmem_kv_stats st = kv_stats(t.cache);
    cr_assert_eq(st.swaps_out, 1);
    cr_assert_eq(st.committed_bytes, theirs, "%s: the device granules are decommitted", what);
    cr_assert_eq(owned_of(t.authority, "kv"), theirs);
    cr_assert_eq(stats_of(t.backend).owned_bytes, theirs);
    cr_assert_eq(stats_of(t.backend).mapped_bytes, theirs);
    cr_assert_gt(stats_of(t.host).owned_bytes, 0, "the host tier holds the bytes");
    cr_assert_null(binding_of(q->s, 0, 0).base, "no device pointer while swapped out");
    /* A swapped-out sequence refuses everything but swap-in and destroy. */
    tseq *none = tseq_new();
    EXPECT_STATUS(ortmem_kv_seq_append(q->s, 1), ORTMEM_E_STATE);
    EXPECT_STATUS(ortmem_kv_seq_truncate(q->s, 1), ORTMEM_E_STATE);
    EXPECT_STATUS(ortmem_kv_seq_fork(q->s, &none->s), ORTMEM_E_STATE);
    EXPECT_STATUS(ortmem_kv_seq_swap_out(q->s), ORTMEM_E_STATE);
    free(none);
    assert_intact(&t, other, what);

    OK(ortmem_kv_seq_swap_in(q->s));
    st = kv_stats(t.cache);
    cr_assert_eq(st.swaps_in, 1);
    cr_assert_eq(st.committed_bytes, mine + theirs);
    cr_assert_eq(stats_of(t.host).owned_bytes, 0, "the host copy is gone");
    for (uint32_t l = 0; l < 2; l++) {
        for (int v = 0; v < 2; v++) {
            ortmem_kv_binding now = binding_of(q->s, l, v);
            cr_assert(same_binding(&now, &before[l][v]), "%s: pointers unchanged by swap", what);
        }
    }
    assert_intact(&t, q, "after swap-in");
    EXPECT_STATUS(ortmem_kv_seq_swap_in(q->s), ORTMEM_E_STATE);
    grow(&t, q, 100);
    assert_intact(&t, q, "grown after swap-in");

    /* A fork swapped out and in keeps its bytes, and so does its parent. */
    tseq *k = fork_of(q);
    OK(ortmem_kv_seq_swap_out(k->s));
    grow(&t, q, 10);
    OK(ortmem_kv_seq_swap_in(k->s));
    assert_intact(&t, k, "swapped fork");
    assert_intact(&t, q, "parent of a swapped fork");
    /* Destroying a swapped-out sequence returns the host copy. */
    OK(ortmem_kv_seq_swap_out(k->s));
    tseq_free(k);
    cr_assert_eq(stats_of(t.host).owned_bytes, 0);
    tseq_free(q);
    tseq_free(other);
    env_close(&t);
}

Test(kv_cache, swap_out_and_in_is_byte_identical_and_decommits_the_device_meanwhile)
{
    for (size_t l = 0; l < LAYOUT_COUNT; l++) {
        swap_roundtrip(layouts[l], ORTMEM_KV_STABLE);
        swap_roundtrip(layouts[l], ORTMEM_KV_BUCKET);
    }
}

/* A swap-in that took effect reports a host-tier region whose destroy
 * quarantined a granule (it returned OK before). */
Test(kv_cache, swap_in_reports_a_host_region_destroy_that_quarantined)
{
    kvt t;
    env_open(&t, 1024 * MiB, 0);
    ortmem_backend *host_cpu = test_backend();
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    OK(ortmem_fault_backend_create(host_cpu, &fo, &t.host));
    cache_open(&t, cache_options(small_geometry(2, ORTMEM_KV_SEQ_MAJOR), ORTMEM_KV_STABLE, 2048));
    tseq *q = tseq_create(&t);
    grow(&t, q, 300);
    OK(ortmem_kv_seq_swap_out(q->s));
    fo.op = ORTMEM_OP_UNMAP;
    fo.fail_at = 1;
    OK(ortmem_fault_backend_arm(t.host, &fo));
    ortmem_status st = ortmem_kv_seq_swap_in(q->s);
    cr_assert_eq(st, ORTMEM_E_QUARANTINED, "%s: %s", ortmem_status_str(st), ortmem_last_error());
    cr_assert(strstr(ortmem_last_error(), "kv swap in took effect"), "%s", ortmem_last_error());
    cr_assert_eq(kv_stats(t.cache).swaps_in, 1);
    assert_intact(&t, q, "after a swap-in whose host region quarantined");
    cr_assert_gt(stats_of(t.host).quarantined_granules, 0);
    tseq_free(q);
    cache_close(&t);
    OK(ortmem_authority_destroy(t.authority));
    cr_assert_eq(stats_of(t.backend).owned_bytes, 0);
    OK(ortmem_backend_destroy(t.backend));
    EXPECT_STATUS(ortmem_backend_destroy(t.host), ORTMEM_E_QUARANTINED);
    OK(ortmem_backend_destroy(host_cpu));
}

/* ---- budget ---- */

Test(kv_cache, budget_refusal_mid_append_leaves_the_sequence_unchanged)
{
    for (int strat = 0; strat < 2; strat++) {
        ortmem_kv_strategy strategy = strat ? ORTMEM_KV_BUCKET : ORTMEM_KV_STABLE;
        /* Seq-major, two layers: four fragments of 256 tokens per granule. */
        kvt t;
        env_open(&t, 10 * G, 0);
        cache_open(&t, granule_options(small_geometry(2, ORTMEM_KV_SEQ_MAJOR), strategy, 2048));
        tseq *q = tseq_create(&t);
        grow(&t, q, 200);
        grow(&t, q, 56); /* 256: 4 granules, either way */
        cr_assert_eq(owned_of(t.authority, "kv"), 4 * G);
        if (strategy == ORTMEM_KV_STABLE)
            grow(&t, q, 256); /* 512: 8 granules */
        uint64_t owned = owned_of(t.authority, "kv");
        ortmem_kv_binding before = binding_of(q->s, 1, 1);
        ortmem_vmm_stats v0 = stats_of(t.backend);

        /* Stable: 4 more granules, 2 available. Bucket: the 512-token bucket
         * (8 granules) next to the old one (4): 12 of 10. */
        ortmem_status st = ortmem_kv_seq_append(q->s, 1);
        cr_assert_eq(st, ORTMEM_E_BUDGET, "%s: %s", ortmem_status_str(st), ortmem_last_error());
        const char *msg = ortmem_last_error();
        char want[128];
        uint64_t requested = strategy == ORTMEM_KV_STABLE ? 4 * G : 8 * G;
        uint64_t available = 10 * G - owned;
        snprintf(want, sizeof want, "requested %llu bytes", (unsigned long long)requested);
        cr_assert(strstr(msg, want), "%s | %s", want, msg);
        snprintf(want, sizeof want, "available %llu of limit %llu", (unsigned long long)available,
                 (unsigned long long)(10 * G));
        cr_assert(strstr(msg, want), "%s | %s", want, msg);
        cr_assert(strstr(msg, "sequence is unchanged"), "%s", msg);
        cr_assert(strstr(msg, "'kv'"), "names the holder: %s", msg);

        ortmem_kv_binding after = binding_of(q->s, 1, 1);
        cr_assert(same_binding(&after, &before));
        cr_assert_eq(owned_of(t.authority, "kv"), owned);
        cr_assert_eq(kv_stats(t.cache).committed_bytes, owned);
        cr_assert_eq(kv_stats(t.cache).generations_bumped, strategy == ORTMEM_KV_BUCKET);
        ortmem_vmm_stats v1 = stats_of(t.backend);
        cr_assert_eq(v1.owned_bytes, v0.owned_bytes);
        cr_assert_eq(v1.mapped_bytes, v0.mapped_bytes);
        cr_assert_eq(v1.reserved_va_bytes, v0.reserved_va_bytes);
        assert_intact(&t, q, "refused append");

        /* Past the maximum context: a range error, nothing changes. */
        EXPECT_STATUS(ortmem_kv_seq_append(q->s, 2048 - q->len + 1), ORTMEM_E_RANGE);
        cr_assert(strstr(ortmem_last_error(), "maximum context of 2048"), "%s",
                  ortmem_last_error());
        EXPECT_STATUS(ortmem_kv_seq_append(q->s, UINT64_MAX), ORTMEM_E_RANGE);
        assert_intact(&t, q, "range error");

        /* With room, the same append goes through. */
        OK(ortmem_authority_set_limit(t.authority, 64 * G, NULL));
        grow(&t, q, 1);
        assert_intact(&t, q, "after the limit was raised");
        grow(&t, q, 2048 - q->len);
        EXPECT_STATUS(ortmem_kv_seq_append(q->s, 1), ORTMEM_E_RANGE);
        OK(ortmem_kv_seq_append(q->s, 0));
        assert_intact(&t, q, "at max context");
        tseq_free(q);
        env_close(&t);
    }
}

Test(kv_cache, budget_refusal_of_a_fork_changes_nothing)
{
    kvt t;
    env_open(&t, 64 * G, 0);
    cache_open(&t, cache_options(small_geometry(2, ORTMEM_KV_SEQ_MAJOR), ORTMEM_KV_STABLE, 2048));
    tseq *q = tseq_create(&t);
    grow(&t, q, 1100); /* 5 granules per fragment, 4 full: 20 granules */
    OK(ortmem_authority_set_limit(t.authority, 22 * G, NULL));
    /* A fork copies four boundary granules: 24 of 22. */
    ortmem_vmm_stats v0 = stats_of(t.backend);
    tseq *k = tseq_new();
    EXPECT_STATUS(ortmem_kv_seq_fork(q->s, &k->s), ORTMEM_E_BUDGET);
    cr_assert_eq(kv_stats(t.cache).sequences, 1);
    cr_assert_eq(stats_of(t.backend).owned_bytes, v0.owned_bytes);
    cr_assert_eq(stats_of(t.backend).mapped_bytes, v0.mapped_bytes);
    cr_assert_eq(stats_of(t.backend).reserved_va_bytes, v0.reserved_va_bytes);
    free(k);
    grow(&t, q, 10); /* the parent is not left marked shared in a harmful way */
    assert_intact(&t, q, "after a refused fork");
    tseq_free(q);
    env_close(&t);
}

/* ---- prefix cache ---- */

static void prompt_tokens(int32_t *tokens, size_t count, int32_t salt)
{
    for (size_t i = 0; i < count; i++)
        tokens[i] = (int32_t)(i * 7 + 3) ^ salt;
}

Test(kv_cache, prefix_cache_maps_a_published_prefix_for_a_matching_prompt)
{
    kvt t;
    env_open(&t, 1024 * MiB, 0);
    ortmem_kv_cache_options o =
        cache_options(small_geometry(2, ORTMEM_KV_SEQ_MAJOR), ORTMEM_KV_STABLE, 2048);
    o.prefix_cache = 1;
    cache_open(&t, o);
    int32_t prompt[1200];
    prompt_tokens(prompt, 1200, 0);

    tseq *a = tseq_new();
    uint64_t reused = 99;
    OK(ortmem_kv_seq_create_with_prompt(t.cache, prompt, 600, &a->s, &reused));
    cr_assert_eq(reused, 0, "nothing published yet");
    grow(&t, a, 600);
    EXPECT_STATUS(ortmem_kv_seq_publish(a->s, prompt, 200), ORTMEM_E_RANGE);
    cr_assert(strstr(ortmem_last_error(), "block of 256 tokens"), "%s", ortmem_last_error());
    /* 600 tokens: 512 of them fill whole granules (256 tokens of 256 bytes). */
    uint64_t owned0 = stats_of(t.backend).owned_bytes;
    OK(ortmem_kv_seq_publish(a->s, prompt, 600));
    ortmem_kv_stats st = kv_stats(t.cache);
    cr_assert_eq(st.prefix_entries, 1);
    cr_assert_eq(stats_of(t.backend).owned_bytes, owned0, "publishing maps, never copies");
    OK(ortmem_kv_seq_publish(a->s, prompt, 600)); /* again: the same entry */
    cr_assert_eq(kv_stats(t.cache).prefix_entries, 1);
    /* The publisher writes on: its published granules are not disturbed. */
    grow(&t, a, 100);

    ortmem_kv_eval e = evaluate(&t.geometry, 512, 2048, 512, 0);
    tseq *b = tseq_new();
    OK(ortmem_kv_seq_create_with_prompt(t.cache, prompt, 700, &b->s, &reused));
    cr_assert_eq(reused, 512);
    b->len = 512;
    memcpy(b->seeds, a->seeds, 512 * sizeof b->seeds[0]);
    assert_intact(&t, b, "reused prefix reads the publisher's bytes");
    st = kv_stats(t.cache);
    cr_assert_eq(st.prefix_hits, 1);
    cr_assert_eq(st.prefix_tokens_reused, 512);
    cr_assert_eq(st.prefix_bytes_saved, e.share_granules * G);
    cr_assert_eq(st.prefix_bytes_saved, e.committed_bytes);
    cr_assert_eq(stats_of(t.backend).owned_bytes,
                 owned0 + evaluate(&t.geometry, 700, 2048, 0, 0).committed_bytes -
                     evaluate(&t.geometry, 600, 2048, 0, 0).committed_bytes,
                 "the new sequence owns nothing yet");
    /* The rest of its prompt is computed as usual. */
    grow(&t, b, 188);
    assert_intact(&t, b, "prompt rest");
    assert_intact(&t, a, "publisher after a reuse");

    /* A different prompt, and one shorter than the prefix, reuse nothing. */
    int32_t other[700];
    memcpy(other, prompt, sizeof other);
    other[3] ^= 1;
    tseq *c = tseq_new();
    OK(ortmem_kv_seq_create_with_prompt(t.cache, other, 700, &c->s, &reused));
    cr_assert_eq(reused, 0);
    tseq *d = tseq_new();
    OK(ortmem_kv_seq_create_with_prompt(t.cache, prompt, 511, &d->s, &reused));
    cr_assert_eq(reused, 0);
    cr_assert_eq(kv_stats(t.cache).prefix_hits, 1);
    tseq_free(c);
    tseq_free(d);

    /* The entry outlives its publisher. */
    tseq_free(a);
    tseq *f = tseq_new();
    OK(ortmem_kv_seq_create_with_prompt(t.cache, prompt, 1200, &f->s, &reused));
    cr_assert_eq(reused, 512);
    f->len = 512;
    memcpy(f->seeds, b->seeds, 512 * sizeof f->seeds[0]);
    assert_intact(&t, f, "after the publisher went");
    /* A reuser that rewinds into the prefix gets private copies. */
    truncate_to(f, 100);
    grow(&t, f, 900);
    assert_intact(&t, b, "sibling reuser");
    tseq *g = tseq_new();
    OK(ortmem_kv_seq_create_with_prompt(t.cache, prompt, 512, &g->s, &reused));
    cr_assert_eq(reused, 512);
    g->len = 512;
    memcpy(g->seeds, b->seeds, 512 * sizeof g->seeds[0]);
    assert_intact(&t, g, "the entry is untouched by a rewinding reuser");
    cr_assert_eq(kv_stats(t.cache).prefix_hits, 3);
    tseq_free(b);
    tseq_free(f);
    tseq_free(g);
    cache_close(&t);
    env_close(&t);
}

Test(kv_cache, prefix_cache_reuses_whole_granule_blocks_in_every_layout)
{
    for (size_t l = 0; l < LAYOUT_COUNT; l++) {
        kvt t;
        env_open(&t, 1024 * MiB, 0);
        ortmem_kv_cache_options o =
            cache_options(small_geometry(2, layouts[l]), ORTMEM_KV_STABLE, 2048);
        o.prefix_cache = 1;
        cache_open(&t, o);
        ortmem_kv_eval e0 = evaluate(&t.geometry, 0, 2048, 0, 0);
        uint64_t block = G / e0.contiguous_bytes_per_token; /* tokens per granule */
        uint64_t n = 2 * block + 10;
        int32_t prompt[2048];
        prompt_tokens(prompt, 2048, (int32_t)l);
        tseq *a = tseq_create(&t);
        grow(&t, a, n);
        OK(ortmem_kv_seq_publish(a->s, prompt, n));
        ortmem_kv_eval e = evaluate(&t.geometry, 2 * block, 2048, 2 * block, 0);
        tseq *b = tseq_new();
        uint64_t reused = 0;
        OK(ortmem_kv_seq_create_with_prompt(t.cache, prompt, n + 100, &b->s, &reused));
        cr_assert_eq(reused, 2 * block, "%s: %llu", ortmem_kv_layout_name(layouts[l]),
                     (unsigned long long)reused);
        b->len = reused;
        memcpy(b->seeds, a->seeds, sizeof b->seeds);
        assert_intact(&t, b, ortmem_kv_layout_name(layouts[l]));
        ortmem_kv_stats st = kv_stats(t.cache);
        cr_assert_eq(st.prefix_bytes_saved, e.share_granules * G);
        cr_assert_eq(st.prefix_bytes_saved, e.committed_bytes, "whole granules only");
        cr_assert_eq(st.committed_bytes, predicted(&t, ORTMEM_KV_STABLE, n), "nothing new owned");
        grow(&t, b, 110);
        grow(&t, a, 5);
        assert_intact(&t, a, "publisher");
        assert_intact(&t, b, "reuser");
        tseq_free(a);
        tseq_free(b);
        env_close(&t);
    }
}

/* Publishes prompt salt's first 256 tokens (one granule per fragment) from a
 * sequence that is then destroyed: the entry alone keeps its granules. */
static void publish_alone(kvt *t, int32_t salt)
{
    int32_t prompt[256];
    prompt_tokens(prompt, 256, salt);
    tseq *q = tseq_create(t);
    grow(t, q, 256);
    OK(ortmem_kv_seq_publish(q->s, prompt, 256));
    tseq_free(q);
}

static uint64_t reuse_of(kvt *t, int32_t salt, ortmem_kv_seq **keep)
{
    int32_t prompt[300];
    prompt_tokens(prompt, 300, salt);
    ortmem_kv_seq *s = NULL;
    uint64_t reused = 0;
    OK(ortmem_kv_seq_create_with_prompt(t->cache, prompt, 300, &s, &reused));
    if (keep)
        *keep = s;
    else
        OK(ortmem_kv_seq_destroy(s));
    return reused;
}

Test(kv_cache, prefix_cache_evicts_unreferenced_prefixes_lru_first_under_pressure)
{
    kvt t;
    env_open(&t, 64 * G, 0);
    ortmem_kv_cache_options o =
        cache_options(small_geometry(2, ORTMEM_KV_SEQ_MAJOR), ORTMEM_KV_STABLE, 1024);
    o.prefix_cache = 1;
    cache_open(&t, o);
    const uint64_t entry = 4 * G; /* 256 tokens: one granule in each of 4 fragments */
    publish_alone(&t, 0xa);
    publish_alone(&t, 0xb);
    publish_alone(&t, 0xc);
    ortmem_kv_stats st = kv_stats(t.cache);
    cr_assert_eq(st.prefix_entries, 3);
    cr_assert_eq(st.committed_bytes, 3 * entry);
    cr_assert_eq(stats_of(t.backend).owned_bytes, 3 * entry);
    /* Use A (unreferenced again afterwards), keep C referenced: the LRU
     * order is B, A, C. */
    cr_assert_eq(reuse_of(&t, 0xa, NULL), 256);
    ortmem_kv_seq *keep = NULL;
    cr_assert_eq(reuse_of(&t, 0xc, &keep), 256);

    ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
    ho.name = "engine";
    ho.priority = 10;
    ortmem_holder *other = NULL;
    OK(ortmem_holder_register(t.authority, &ho, &other));
    uint64_t avail = 64 * G - 3 * entry;
    ortmem_grant *grant = NULL;
    /* One entry's worth more than is free: only B goes. */
    OK(ortmem_grant_prepare(other, avail + entry, &grant));
    st = kv_stats(t.cache);
    cr_assert_eq(st.prefix_evicted, 1);
    cr_assert_eq(st.prefix_entries, 2);
    cr_assert_eq(stats_of(t.backend).owned_bytes, 2 * entry);
    OK(ortmem_grant_charge(grant, avail + entry));
    cr_assert_eq(reuse_of(&t, 0xb, NULL), 0, "B was the least recently used");
    cr_assert_eq(reuse_of(&t, 0xa, NULL), 256, "A stays");

    /* More: A goes; C is referenced and stays, so the grant is refused. */
    EXPECT_STATUS(ortmem_grant_prepare(other, 2 * entry, &grant), ORTMEM_E_BUDGET);
    st = kv_stats(t.cache);
    cr_assert_eq(st.prefix_evicted, 2);
    cr_assert_eq(st.prefix_entries, 1);
    cr_assert_eq(stats_of(t.backend).owned_bytes, entry);
    cr_assert_eq(reuse_of(&t, 0xa, NULL), 0);
    ortmem_kv_seq *again = NULL;
    cr_assert_eq(reuse_of(&t, 0xc, &again), 256, "the referenced prefix is kept");
    OK(ortmem_kv_seq_destroy(again));

    OK(ortmem_holder_refund(other, avail + entry));
    OK(ortmem_holder_unregister(other));
    OK(ortmem_kv_seq_destroy(keep));
    cache_close(&t);
    env_close(&t);
}

/* ---- zero tail ---- */

/* Tokens of the padded shape [0, capacity) that do not read as zeros, over
 * tokens whose granule holds no live byte (fragments start on granules). */
static uint64_t nonzero_tail_rows(const kvt *t, ortmem_kv_seq *s, uint64_t len, uint64_t contig)
{
    uint64_t bad = 0;
    uint64_t first = (len * contig + G - 1) / G * G / contig; /* first token of a tail granule */
    for (uint32_t l = 0; l < t->geometry.layers; l++) {
        for (int v = 0; v < 2; v++) {
            ortmem_kv_binding b = binding_of(s, l, v);
            for (uint32_t h = 0; h < t->geometry.kv_heads; h++) {
                for (uint64_t tok = first; tok < b.capacity; tok++) {
                    volatile uint8_t *row = row_at(&b, h, tok);
                    for (uint64_t i = 0; i < t->head_bytes; i++) {
                        if (row[i]) {
                            bad++;
                            break;
                        }
                    }
                }
            }
        }
    }
    return bad;
}

Test(kv_cache, zero_tail_reads_zeros_over_the_capacity_and_appends_replace_it)
{
    for (size_t l = 0; l < LAYOUT_COUNT; l++) {
        kvt t;
        env_open(&t, 1024 * MiB, 0);
        ortmem_kv_cache_options o =
            granule_options(small_geometry(2, layouts[l]), ORTMEM_KV_STABLE, 2048);
        o.zero_tail = 1;
        cache_open(&t, o);
        ortmem_kv_eval e = evaluate(&t.geometry, 0, 2048, 0, 0);
        uint64_t seq_granules = e.sequence_reserved_bytes / G;
        cr_assert_eq(owned_of(t.authority, "kv"), G, "the zero granule, owned once");
        tseq *q = tseq_create(&t);
        ortmem_kv_stats st = kv_stats(t.cache);
        cr_assert_eq(st.zero_tail_mapped_bytes, seq_granules * G);
        cr_assert_eq(st.committed_bytes, G);
        cr_assert_eq(nonzero_tail_rows(&t, q->s, 0, e.contiguous_bytes_per_token), 0);
        const char *what = ortmem_kv_layout_name(layouts[l]);
        const uint64_t steps[] = {1, 100, 300, 500, 1, 900};
        for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
            uint64_t zero0 = kv_stats(t.cache).zero_tail_mapped_bytes;
            uint64_t owned0 = owned_of(t.authority, "kv");
            grow(&t, q, steps[i]); /* writes would fault on the read-only zero granule */
            uint64_t committed = predicted(&t, ORTMEM_KV_STABLE, q->len);
            st = kv_stats(t.cache);
            cr_assert_eq(st.committed_bytes, committed + G, "%s n %llu", what,
                         (unsigned long long)q->len);
            cr_assert_eq(st.zero_tail_mapped_bytes, seq_granules * G - committed);
            cr_assert_eq(zero0 - st.zero_tail_mapped_bytes, st.committed_bytes - owned0,
                         "each new granule replaces a zero one");
            cr_assert_eq(st.mapped_bytes, G + seq_granules * G, "zero aliases + real + zero");
            assert_intact(&t, q, what);
            cr_assert_eq(nonzero_tail_rows(&t, q->s, q->len, e.contiguous_bytes_per_token), 0,
                         "%s: the padded read beyond %llu tokens", what,
                         (unsigned long long)q->len);
        }
        /* A truncate puts the zero granule back. */
        truncate_to(q, 200);
        cr_assert_eq(kv_stats(t.cache).zero_tail_mapped_bytes,
                     seq_granules * G - predicted(&t, ORTMEM_KV_STABLE, 200));
        cr_assert_eq(nonzero_tail_rows(&t, q->s, 200, e.contiguous_bytes_per_token), 0);
        assert_intact(&t, q, "truncated with a zero tail");
        /* A fork gets its own zero tail. */
        tseq *k = fork_of(q);
        grow(&t, k, 300);
        assert_intact(&t, q, "parent");
        assert_intact(&t, k, "fork with a zero tail");
        cr_assert_eq(nonzero_tail_rows(&t, k->s, k->len, e.contiguous_bytes_per_token), 0);
        cr_assert_eq(nonzero_tail_rows(&t, q->s, q->len, e.contiguous_bytes_per_token), 0);
        /* Rewound into the shared granules and grown over the zero tail:
         * only the shared granules are copied, never the zero one. */
        ortmem_kv_stats c0 = kv_stats(t.cache);
        truncate_to(k, 100);
        grow(&t, k, 1100);
        /* The fork (at 200 tokens) shares the granules wholly live then; of
         * those, the one holding token 100 is written into again. */
        uint64_t contig = e.contiguous_bytes_per_token, j = 100 * contig / G;
        uint64_t shared = (100 * contig) % G && (j + 1) * G <= 200 * contig ? e.fragments * G : 0;
        ortmem_kv_stats c1 = kv_stats(t.cache);
        cr_assert_eq(c1.cow_copied_bytes - c0.cow_copied_bytes, shared,
                     "%s: copied %llu bytes, the shared granules are %llu", what,
                     (unsigned long long)(c1.cow_copied_bytes - c0.cow_copied_bytes),
                     (unsigned long long)shared);
        /* Owned: the zero granule, both sequences, the granules still shared once. */
        uint64_t still_shared = e.fragments * (100 * contig / G) * G;
        uint64_t want = G + predicted(&t, ORTMEM_KV_STABLE, 200) +
                        predicted(&t, ORTMEM_KV_STABLE, 1200) - still_shared;
        cr_assert_eq(c1.committed_bytes, want, "%s: %llu, want %llu", what,
                     (unsigned long long)c1.committed_bytes, (unsigned long long)want);
        assert_intact(&t, q, "parent");
        assert_intact(&t, k, "regrown fork with a zero tail");
        cr_assert_eq(nonzero_tail_rows(&t, k->s, k->len, e.contiguous_bytes_per_token), 0);
        tseq_free(k);
        tseq_free(q);
        cr_assert_eq(kv_stats(t.cache).zero_tail_mapped_bytes, 0);
        env_close(&t);
    }
}

Test(kv_cache, zero_tail_comes_back_after_a_refused_append)
{
    kvt t;
    env_open(&t, 8 * G, 0);
    ortmem_kv_cache_options o =
        cache_options(small_geometry(2, ORTMEM_KV_SEQ_MAJOR), ORTMEM_KV_STABLE, 1024);
    o.zero_tail = 1;
    cache_open(&t, o);
    tseq *q = tseq_create(&t);
    grow(&t, q, 256); /* 4 granules + the zero one */
    ortmem_kv_stats s0 = kv_stats(t.cache);
    EXPECT_STATUS(ortmem_kv_seq_append(q->s, 1), ORTMEM_E_BUDGET); /* 9 of 8 */
    ortmem_kv_stats s1 = kv_stats(t.cache);
    cr_assert_eq(s1.zero_tail_mapped_bytes, s0.zero_tail_mapped_bytes);
    cr_assert_eq(s1.committed_bytes, s0.committed_bytes);
    cr_assert_eq(s1.mapped_bytes, s0.mapped_bytes);
    cr_assert_eq(nonzero_tail_rows(&t, q->s, 256, 256), 0);
    assert_intact(&t, q, "refused append with a zero tail");
    tseq_free(q);
    env_close(&t);
}

/* ---- strategy choice ---- */

static ortmem_kv_strategy chosen(kvt *t, ortmem_kv_cache_options o, char *reason, size_t cap)
{
    ortmem_kv_cache *c = NULL;
    OK(ortmem_kv_cache_create(t->authority, &o, &c));
    ortmem_kv_strategy s = ORTMEM_KV_STRATEGY_COUNT;
    OK(ortmem_kv_cache_explain(c, &s, reason, cap));
    OK(ortmem_kv_cache_destroy(c));
    return s;
}

static void assert_mentions(const char *text, unsigned long long number, const char *unit)
{
    char want[64];
    snprintf(want, sizeof want, "%llu %s", number, unit);
    cr_assert(strstr(text, want), "'%s' not in: %s", want, text);
}

Test(kv_cache, auto_strategy_chooses_by_capture_and_crossover_and_explains_why)
{
    kvt t;
    env_open(&t, 1024 * MiB, 0);
    ortmem_kv_geometry g;
    OK(ortmem_kv_preset("qwen2.5-0.5b", &g));
    g.granule = G;
    /* Head-major, 128 contiguous bytes per token: crossover 512 tokens. */
    ortmem_kv_eval e = evaluate(&g, 100, 4096, 0, 0);
    cr_assert_eq(e.crossover_tokens, 512);
    char why[512];

    ortmem_kv_cache_options o = cache_options(g, ORTMEM_KV_AUTO, 4096);
    o.graph_capture = 1;
    o.expected_tokens = 100;
    cr_assert_eq(chosen(&t, o, why, sizeof why), ORTMEM_KV_STABLE);
    cr_assert(strstr(why, "graph capture"), "%s", why);
    assert_mentions(why, 4096, "tokens");
    assert_mentions(why, e.committed_bytes, "bytes");

    o.graph_capture = 0;
    cr_assert_eq(chosen(&t, o, why, sizeof why), ORTMEM_KV_BUCKET);
    assert_mentions(why, 100, "tokens");
    assert_mentions(why, 512, "tokens");
    assert_mentions(why, e.committed_bytes, "bytes");
    assert_mentions(why, e.bucket_committed_bytes, "for a 256-token bucket");
    cr_assert_gt(e.committed_bytes, e.bucket_committed_bytes, "why bucket pays below it");

    o.expected_tokens = 511;
    cr_assert_eq(chosen(&t, o, why, sizeof why), ORTMEM_KV_BUCKET);
    o.expected_tokens = 512;
    cr_assert_eq(chosen(&t, o, why, sizeof why), ORTMEM_KV_STABLE);
    o.expected_tokens = 3000;
    ortmem_kv_eval e3 = evaluate(&g, 3000, 4096, 0, 0);
    cr_assert_eq(chosen(&t, o, why, sizeof why), ORTMEM_KV_STABLE);
    assert_mentions(why, 3000, "tokens");
    assert_mentions(why, 512, "tokens");
    assert_mentions(why, e3.committed_bytes, "bytes");
    o.expected_tokens = 0; /* max_context / 4 = 1024 */
    cr_assert_eq(chosen(&t, o, why, sizeof why), ORTMEM_KV_STABLE);
    assert_mentions(why, 1024, "tokens");

    /* Token-major: 12 KiB per token, crossover ceil(64 / 12) = 6 tokens. */
    g.layout = ORTMEM_KV_TOKEN_MAJOR;
    cr_assert_eq(evaluate(&g, 0, 4096, 0, 0).crossover_tokens, 6);
    o = cache_options(g, ORTMEM_KV_AUTO, 4096);
    o.expected_tokens = 5;
    cr_assert_eq(chosen(&t, o, why, sizeof why), ORTMEM_KV_BUCKET);
    assert_mentions(why, 6, "tokens");
    o.expected_tokens = 6;
    cr_assert_eq(chosen(&t, o, why, sizeof why), ORTMEM_KV_STABLE);

    /* An explicit strategy is kept and said so. */
    o.strategy = ORTMEM_KV_BUCKET;
    o.graph_capture = 1;
    cr_assert_eq(chosen(&t, o, why, sizeof why), ORTMEM_KV_BUCKET);
    cr_assert(strstr(why, "bucket was asked for"), "%s", why);
    cr_assert(strstr(why, "invalidates"), "%s", why);
    /* A short buffer is cut, not overrun. */
    o.strategy = ORTMEM_KV_AUTO;
    char tiny[8];
    cr_assert_eq(chosen(&t, o, tiny, sizeof tiny), ORTMEM_KV_STABLE);
    cr_assert_eq(strlen(tiny), 7);
    env_close(&t);
}

/* ---- bad input ---- */

Test(kv_cache, bad_input_is_a_status)
{
    kvt t;
    env_open(&t, 1024 * MiB, 0);
    ortmem_kv_geometry g = small_geometry(2, ORTMEM_KV_SEQ_MAJOR);
    ortmem_kv_cache_options o = cache_options(g, ORTMEM_KV_STABLE, 1024);
    ortmem_kv_cache *c = NULL;
    EXPECT_STATUS(ortmem_kv_cache_create(t.authority, NULL, &c), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_kv_cache_create(t.authority, &o, NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_kv_cache_create(NULL, &o, &c), ORTMEM_E_HANDLE);
    ortmem_kv_cache_options bad = o;
    bad.struct_size = 0;
    EXPECT_STATUS(ortmem_kv_cache_create(t.authority, &bad, &c), ORTMEM_E_INVALID);
    bad = o;
    bad.max_context = 0;
    EXPECT_STATUS(ortmem_kv_cache_create(t.authority, &bad, &c), ORTMEM_E_INVALID);
    bad = o;
    bad.strategy = (ortmem_kv_strategy)7;
    EXPECT_STATUS(ortmem_kv_cache_create(t.authority, &bad, &c), ORTMEM_E_INVALID);
    bad = o;
    bad.geometry.granule = 2 * G;
    EXPECT_STATUS(ortmem_kv_cache_create(t.authority, &bad, &c), ORTMEM_E_INVALID);
    bad.geometry.granule = 0; /* 0 takes the backend's */
    OK(ortmem_kv_cache_create(t.authority, &bad, &c));
    OK(ortmem_kv_cache_destroy(c));
    bad = o;
    bad.geometry.head_dim = 0;
    EXPECT_STATUS(ortmem_kv_cache_create(t.authority, &bad, &c), ORTMEM_E_INVALID);
    /* Prefix cache and zero tail need the stable strategy and aligned fragments. */
    bad = o;
    bad.strategy = ORTMEM_KV_BUCKET;
    bad.prefix_cache = 1;
    EXPECT_STATUS(ortmem_kv_cache_create(t.authority, &bad, &c), ORTMEM_E_UNSUPPORTED);
    cr_assert(strstr(ortmem_last_error(), "stable"), "%s", ortmem_last_error());
    bad.prefix_cache = 0;
    bad.zero_tail = 1;
    EXPECT_STATUS(ortmem_kv_cache_create(t.authority, &bad, &c), ORTMEM_E_UNSUPPORTED);
    bad = o;
    bad.max_context = 1000; /* head-major: head 1 starts at byte 128000, mid-granule */
    bad.geometry.layout = ORTMEM_KV_HEAD_MAJOR;
    bad.prefix_cache = 1;
    EXPECT_STATUS(ortmem_kv_cache_create(t.authority, &bad, &c), ORTMEM_E_UNSUPPORTED);
    cr_assert(strstr(ortmem_last_error(), "granule-aligned"), "%s", ortmem_last_error());
    cr_assert_eq(holder_report(t.authority, "pool").owned_bytes, 0);

    o.max_sequences = 2;
    cache_open(&t, o);
    /* NULL handles are bad arguments (INVALID), foreign ones stale (HANDLE). */
    ortmem_kv_seq *s = NULL, *s2 = NULL, *s3 = NULL;
    EXPECT_STATUS(ortmem_kv_seq_create(NULL, &s), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_kv_seq_create(t.cache, NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_kv_seq_create((ortmem_kv_cache *)t.authority, &s), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_kv_seq_create_with_prompt(t.cache, NULL, 5, &s, NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_kv_seq_append(NULL, 1), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_kv_seq_truncate(NULL, 0), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_kv_seq_fork(NULL, &s), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_kv_seq_destroy(NULL), ORTMEM_E_INVALID);
    uint64_t len = 0;
    EXPECT_STATUS(ortmem_kv_seq_length(NULL, &len), ORTMEM_E_INVALID);
    ortmem_kv_binding b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    EXPECT_STATUS(ortmem_kv_seq_binding(NULL, 0, 0, &b), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_kv_seq_swap_out(NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_kv_seq_swap_in(NULL), ORTMEM_E_INVALID);
    int32_t tok[4] = {1, 2, 3, 4};
    EXPECT_STATUS(ortmem_kv_seq_publish(NULL, tok, 4), ORTMEM_E_INVALID);
    ortmem_kv_stats ks;
    memset(&ks, 0, sizeof ks);
    ks.struct_size = sizeof ks;
    EXPECT_STATUS(ortmem_kv_cache_stats(NULL, &ks), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_kv_cache_stats(t.cache, NULL), ORTMEM_E_INVALID);
    ks.struct_size = 0;
    EXPECT_STATUS(ortmem_kv_cache_stats(t.cache, &ks), ORTMEM_E_INVALID);
    ks.struct_size = sizeof ks;
    EXPECT_STATUS(ortmem_kv_cache_explain(NULL, NULL, NULL, 0), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_kv_cache_destroy(NULL), ORTMEM_E_INVALID);

    OK(ortmem_kv_seq_create(t.cache, &s));
    OK(ortmem_kv_seq_create(t.cache, &s2));
    EXPECT_STATUS(ortmem_kv_seq_create(t.cache, &s3), ORTMEM_E_BUSY);
    cr_assert_null(s3);
    EXPECT_STATUS(ortmem_kv_seq_fork(s, &s3), ORTMEM_E_BUSY);
    cr_assert_eq(kv_stats(t.cache).sequences, 2);
    EXPECT_STATUS(ortmem_kv_seq_fork(s, NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_kv_seq_length(s, NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_kv_seq_binding(s, 0, 0, NULL), ORTMEM_E_INVALID);
    OK(ortmem_kv_seq_append(s, 10));
    /* Truncate above the length, bindings out of range. */
    EXPECT_STATUS(ortmem_kv_seq_truncate(s, 11), ORTMEM_E_RANGE);
    OK(ortmem_kv_seq_length(s, &len));
    cr_assert_eq(len, 10);
    EXPECT_STATUS(ortmem_kv_seq_binding(s, 2, 0, &b), ORTMEM_E_RANGE);
    EXPECT_STATUS(ortmem_kv_seq_binding(s, UINT32_MAX, 0, &b), ORTMEM_E_RANGE);
    EXPECT_STATUS(ortmem_kv_seq_binding(s, 0, 2, &b), ORTMEM_E_RANGE);
    EXPECT_STATUS(ortmem_kv_seq_binding(s, 0, -1, &b), ORTMEM_E_RANGE);
    b.struct_size = 0;
    EXPECT_STATUS(ortmem_kv_seq_binding(s, 0, 0, &b), ORTMEM_E_INVALID);
    b.struct_size = sizeof b;
    /* No host tier, no prefix cache. */
    EXPECT_STATUS(ortmem_kv_seq_swap_out(s), ORTMEM_E_UNSUPPORTED);
    EXPECT_STATUS(ortmem_kv_seq_swap_in(s), ORTMEM_E_STATE);
    EXPECT_STATUS(ortmem_kv_seq_publish(s, tok, 4), ORTMEM_E_STATE);
    EXPECT_STATUS(ortmem_kv_seq_publish(s, NULL, 4), ORTMEM_E_INVALID);
    /* The cache cannot go while sequences live; nothing changes. */
    EXPECT_STATUS(ortmem_kv_cache_destroy(t.cache), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "2 sequences"), "%s", ortmem_last_error());
    OK(ortmem_kv_seq_append(s, 1));

    /* A destroyed sequence is a stale handle for every call. */
    OK(ortmem_kv_seq_destroy(s2));
    EXPECT_STATUS(ortmem_kv_seq_destroy(s2), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_kv_seq_append(s2, 1), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_kv_seq_truncate(s2, 0), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_kv_seq_fork(s2, &s3), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_kv_seq_length(s2, &len), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_kv_seq_binding(s2, 0, 0, &b), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_kv_seq_swap_out(s2), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_kv_seq_swap_in(s2), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_kv_seq_publish(s2, tok, 4), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_kv_cache_destroy(t.cache), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "1 sequences"), "%s", ortmem_last_error());
    OK(ortmem_kv_seq_destroy(s));

    /* A destroyed cache is stale too. */
    ortmem_kv_cache *gone = t.cache;
    cache_close(&t);
    EXPECT_STATUS(ortmem_kv_cache_destroy(gone), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_kv_seq_create(gone, &s), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_kv_cache_stats(gone, &ks), ORTMEM_E_HANDLE);
    env_close(&t);
}

/* ---- fault injection ---- */

enum { FAULT_SEQS = 3 };

typedef struct kv_fault_run {
    kvt t;
    tseq *seqs[FAULT_SEQS];
    int swapped[FAULT_SEQS];
    unsigned failures;
    unsigned corruptions;
    ortmem_status last_fail;
} kv_fault_run;

static void fault_note(kv_fault_run *m, ortmem_status st)
{
    if (st != ORTMEM_OK) {
        m->failures++;
        m->last_fail = st;
    }
}

/* Every live, swapped-in sequence holds the bytes of the model. */
static void fault_verify(kv_fault_run *m)
{
    for (int i = 0; i < FAULT_SEQS; i++) {
        tseq *q = m->seqs[i];
        if (!q || m->swapped[i])
            continue;
        uint64_t len = UINT64_MAX;
        if (ortmem_kv_seq_length(q->s, &len) != ORTMEM_OK || len != q->len || bad_rows(&m->t, q))
            m->corruptions++;
    }
}

static void fault_append(kv_fault_run *m, int i, uint64_t n)
{
    tseq *q = m->seqs[i];
    if (!q || m->swapped[i])
        return;
    ortmem_status st = ortmem_kv_seq_append(q->s, n);
    fault_note(m, st);
    if (st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED) { /* took effect */
        write_tokens(&m->t, q, q->len, q->len + n, m->t.next_seed++);
        q->len += n;
    }
    fault_verify(m);
}

static void fault_truncate(kv_fault_run *m, int i, uint64_t len)
{
    tseq *q = m->seqs[i];
    if (!q || m->swapped[i] || len > q->len)
        return;
    ortmem_status st = ortmem_kv_seq_truncate(q->s, len);
    fault_note(m, st);
    /* A truncate that freed granules took effect even when the zero tail or
     * a release (quarantined) failed after it: the length says which. */
    uint64_t now = UINT64_MAX;
    if (ortmem_kv_seq_length(q->s, &now) != ORTMEM_OK || (now != len && now != q->len) ||
        ((st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED) && now != len))
        m->corruptions++;
    if (now == len)
        q->len = len;
    fault_verify(m);
}

static void fault_fork(kv_fault_run *m, int from, int to)
{
    tseq *q = m->seqs[from];
    if (!q || m->swapped[from])
        return;
    tseq *k = tseq_new();
    ortmem_status st = ortmem_kv_seq_fork(q->s, &k->s);
    fault_note(m, st);
    if (st == ORTMEM_OK) {
        k->len = q->len;
        memcpy(k->seeds, q->seeds, sizeof k->seeds);
        m->seqs[to] = k;
    } else {
        free(k);
    }
    fault_verify(m);
}

static void fault_swap(kv_fault_run *m, int i, int out)
{
    tseq *q = m->seqs[i];
    if (!q || m->swapped[i] == out)
        return;
    ortmem_status st = out ? ortmem_kv_seq_swap_out(q->s) : ortmem_kv_seq_swap_in(q->s);
    fault_note(m, st);
    if (st == ORTMEM_OK || (out && st == ORTMEM_E_QUARANTINED))
        m->swapped[i] = out;
    fault_verify(m);
}

static void fault_workload(ortmem_backend *b, ortmem_kv_strategy strategy, kv_fault_run *m)
{
    memset(m, 0, sizeof *m);
    kvt *t = &m->t;
    t->backend = b;
    t->host = test_backend();
    t->next_seed = 1;
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = 1024 * MiB;
    OK(ortmem_authority_create(b, &ao, &t->authority));
    ortmem_kv_cache_options o =
        cache_options(small_geometry(2, ORTMEM_KV_SEQ_MAJOR), strategy, 1024);
    o.min_bucket = 64;
    o.host_backend = t->host;
    /* Every injected failure must be reported: a failed clear at finish is
     * not (the range is decommitted instead of kept warm). Warm reuse under
     * faults: tests/test_kv_warm.c. */
    o.warm_max_bytes = 0;
    o.zero_tail = strategy == ORTMEM_KV_STABLE;
    o.prefix_cache = strategy == ORTMEM_KV_STABLE;
    t->geometry = o.geometry;
    t->max_context = o.max_context;
    t->min_bucket = o.min_bucket;
    t->head_bytes = 128;
    t->check_step = 31; /* the sweep runs the workload hundreds of times */
    ortmem_status st = ortmem_kv_cache_create(t->authority, &o, &t->cache);
    fault_note(m, st);
    if (st != ORTMEM_OK) {
        t->cache = NULL;
        goto teardown;
    }
    m->seqs[0] = tseq_new();
    st = ortmem_kv_seq_create(t->cache, &m->seqs[0]->s);
    fault_note(m, st);
    if (st != ORTMEM_OK) {
        free(m->seqs[0]);
        m->seqs[0] = NULL;
        goto teardown;
    }
    /* Appends across several granules (256 tokens fill one per fragment). */
    fault_append(m, 0, 100);
    fault_append(m, 0, 200);
    fault_append(m, 0, 300);
    if (strategy == ORTMEM_KV_STABLE && m->seqs[0]->len >= 256) {
        int32_t prompt[256];
        prompt_tokens(prompt, 256, 1);
        fault_note(m, ortmem_kv_seq_publish(m->seqs[0]->s, prompt, 256));
        tseq *r = tseq_new();
        uint64_t reused = 0;
        st = ortmem_kv_seq_create_with_prompt(t->cache, prompt, 256, &r->s, &reused);
        fault_note(m, st);
        if (st == ORTMEM_OK) {
            r->len = reused;
            memcpy(r->seeds, m->seqs[0]->seeds, sizeof r->seeds);
            m->seqs[2] = r;
            fault_verify(m);
            fault_append(m, 2, 70);
        } else {
            free(r);
        }
    }
    fault_fork(m, 0, 1);
    fault_append(m, 0, 50);
    fault_append(m, 1, 80);
    fault_truncate(m, 0, 150); /* into the shared granules */
    fault_append(m, 0, 120);
    fault_truncate(m, 1, 500);
    fault_swap(m, 1, 1);
    fault_append(m, 0, 300);
    fault_swap(m, 1, 0);
    fault_append(m, 1, 10);
    fault_swap(m, 0, 1);
    fault_verify(m);
    fault_swap(m, 0, 0);
teardown:
    for (int i = 0; i < FAULT_SEQS; i++) {
        if (m->seqs[i])
            fault_note(m, ortmem_kv_seq_destroy(m->seqs[i]->s));
        free(m->seqs[i]);
        m->seqs[i] = NULL;
    }
    if (t->cache)
        fault_note(m, ortmem_kv_cache_destroy(t->cache));
    fault_note(m, ortmem_authority_destroy(t->authority));
    cr_assert_eq(stats_of(t->host).owned_bytes, 0, "the host tier is empty again");
    OK(ortmem_backend_destroy(t->host));
}

static ortmem_backend *fault_on(ortmem_backend *inner, uint64_t n)
{
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = ORTMEM_OP_ANY;
    fo.fail_at = n;
    ortmem_backend *f = NULL;
    OK(ortmem_fault_backend_create(inner, &fo, &f));
    return f;
}

static void fault_sweep(ortmem_kv_strategy strategy)
{
    const char *name = ortmem_kv_strategy_name(strategy);
    ortmem_backend *cpu = test_backend();
    ortmem_backend *clean = fault_on(cpu, 0);
    kv_fault_run *m = calloc(1, sizeof *m);
    cr_assert_not_null(m);
    fault_workload(clean, strategy, m);
    cr_assert_eq(m->failures, 0, "%s: clean run failed: %s", name, ortmem_last_error());
    cr_assert_eq(m->corruptions, 0);
    uint64_t total = 0;
    OK(ortmem_fault_backend_counts(clean, &total, NULL));
    cr_assert_gt(total, 60, "%s: the workload makes %llu backend calls", name,
                 (unsigned long long)total);
    ortmem_vmm_stats s = stats_of(clean);
    cr_assert_gt(s.calls[ORTMEM_OP_COPY_ASYNC], 0, "copies are in the workload");
    cr_assert_gt(s.calls[ORTMEM_OP_EVENT_RECORD], 0, "and the events they are waited on");
    OK(ortmem_backend_destroy(clean));
    OK(ortmem_backend_destroy(cpu));

    uint64_t quarantining = 0;
    for (uint64_t n = 1; n <= total; n++) {
        cpu = test_backend();
        ortmem_backend *f = fault_on(cpu, n);
        fault_workload(f, strategy, m);
        uint64_t injected = 0;
        OK(ortmem_fault_backend_counts(f, NULL, &injected));
        cr_assert_eq(injected, 1, "%s: call %llu was reached and failed", name,
                     (unsigned long long)n);
        cr_assert_gt(m->failures, 0, "%s: call %llu: the failure was reported", name,
                     (unsigned long long)n);
        cr_assert_eq(m->corruptions, 0, "%s: call %llu: data corrupted", name,
                     (unsigned long long)n);
        s = stats_of(f);
        cr_assert_eq(s.owned_bytes, s.quarantined_bytes,
                     "%s: call %llu: owned %llu quarantined %llu", name, (unsigned long long)n,
                     (unsigned long long)s.owned_bytes, (unsigned long long)s.quarantined_bytes);
        cr_assert_eq(s.mapped_bytes, s.quarantined_mapped_bytes,
                     "%s: call %llu: mapped %llu quarantined %llu", name, (unsigned long long)n,
                     (unsigned long long)s.mapped_bytes,
                     (unsigned long long)s.quarantined_mapped_bytes);
        quarantining += s.quarantined_bytes > 0;
        (void)ortmem_backend_destroy(f);
        OK(ortmem_backend_destroy(cpu));
    }
    cr_assert_gt(quarantining, 0, "%s: some faults (release, unmap) must quarantine", name);
    free(m);
}

Test(kv_cache, fault_sweep_over_a_stable_kv_workload, .timeout = 240)
{
    fault_sweep(ORTMEM_KV_STABLE);
}

Test(kv_cache, fault_sweep_over_a_bucket_kv_workload, .timeout = 240)
{
    fault_sweep(ORTMEM_KV_BUCKET);
}

/* ---- extent policy, over-commit and its bound ---- */

static ortmem_kv_growth_cost growth_cost(const ortmem_kv_geometry *g, const ortmem_extent_policy *p,
                                         uint64_t capacity, uint64_t step, uint64_t tokens)
{
    ortmem_kv_growth_cost c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    OK(ortmem_kv_growth_evaluate(g, p, capacity, step, step, tokens, &c));
    return c;
}

/* Stats against the bound after each operation; bound_each is one sequence's. */
static void assert_within_bound(kvt *t, uint64_t resident, uint64_t bound_each, bool zero,
                                const char *when)
{
    ortmem_kv_stats s = kv_stats(t->cache);
    uint64_t want = resident * bound_each + (zero ? G : 0);
    cr_assert_eq(s.overcommit_bound_bytes, want, "%s: bound %llu, want %llu", when,
                 (unsigned long long)s.overcommit_bound_bytes, (unsigned long long)want);
    cr_assert_leq(s.overcommit_bytes, s.overcommit_bound_bytes, "%s: over-commit %llu > %llu", when,
                  (unsigned long long)s.overcommit_bytes,
                  (unsigned long long)s.overcommit_bound_bytes);
}

/* The existing workloads' operations (growth, publish and prompt reuse, fork,
 * truncate, swap) on every layout, with the zero tail and prefix cache on an
 * aligned capacity and without them on one whose head fragments start off the
 * granule. Per granule the bound is one granule per fragment (two when its
 * base is off the granule) per resident sequence, plus the zero granule. */
Test(kv_cache, overcommit_stays_within_its_bound_through_every_operation)
{
    ortmem_extent_policy granule = {sizeof granule, ORTMEM_EXTENT_GRANULE, 0};
    for (size_t li = 0; li < LAYOUT_COUNT; li++) {
        for (int aligned = 0; aligned < 2; aligned++) {
            kvt t;
            env_open(&t, 1024 * MiB, 1);
            uint64_t capacity = aligned ? 1024 : 1000;
            ortmem_kv_cache_options o =
                granule_options(small_geometry(2, layouts[li]), ORTMEM_KV_STABLE, capacity);
            o.zero_tail = aligned;
            o.prefix_cache = aligned;
            cache_open(&t, o);
            ortmem_kv_growth_cost none = growth_cost(&t.geometry, &granule, capacity, 1, 0);
            uint64_t fragments = evaluate(&t.geometry, 1, capacity, 0, 0).fragments;
            cr_assert_eq(none.overcommit_bound_bytes, (fragments + none.unaligned_fragments) * G);
            if (!aligned && layouts[li] == ORTMEM_KV_HEAD_MAJOR)
                cr_assert_gt(none.unaligned_fragments, 0, "capacity 1000 puts heads off granule");
            uint64_t each = none.overcommit_bound_bytes;
            assert_within_bound(&t, 0, each, aligned, "no sequence");
            tseq *a = tseq_create(&t);
            for (size_t i = 0; i < sizeof growth_steps / sizeof growth_steps[0]; i++) {
                if (a->len + growth_steps[i] > 900)
                    break;
                grow(&t, a, growth_steps[i]);
                assert_within_bound(&t, 1, each, aligned, "growth");
                /* One sequence alone: exactly the granule-window union minus live. */
                ortmem_kv_eval e = evaluate(&t.geometry, a->len, capacity, 0, 0);
                ortmem_kv_stats s = kv_stats(t.cache);
                cr_assert_eq(s.overcommit_bytes,
                             e.committed_bytes - e.live_bytes + (aligned ? G : 0));
            }
            tseq *r = NULL;
            if (aligned) {
                int32_t prompt[512]; /* whole granule blocks in every layout */
                prompt_tokens(prompt, 512, 3);
                cr_assert_geq(a->len, 512);
                OK(ortmem_kv_seq_publish(a->s, prompt, 512));
                r = tseq_new();
                uint64_t reused = 0;
                OK(ortmem_kv_seq_create_with_prompt(t.cache, prompt, 512, &r->s, &reused));
                cr_assert_eq(reused, 512);
                r->len = reused;
                assert_within_bound(&t, 2, each, aligned, "prompt reuse");
                grow(&t, r, 70);
                assert_within_bound(&t, 2, each, aligned, "append after reuse");
            }
            uint64_t others = r ? 1 : 0;
            tseq *k = fork_of(a);
            assert_within_bound(&t, 2 + others, each, aligned, "fork");
            grow(&t, k, 33);
            grow(&t, a, 17);
            assert_within_bound(&t, 2 + others, each, aligned, "appends after the fork");
            truncate_to(a, 150);
            truncate_to(k, 5);
            assert_within_bound(&t, 2 + others, each, aligned, "truncate");
            OK(ortmem_kv_seq_swap_out(k->s));
            assert_within_bound(&t, 1 + others, each, aligned, "swapped out");
            OK(ortmem_kv_seq_swap_in(k->s));
            assert_within_bound(&t, 2 + others, each, aligned, "swapped in");
            tseq_free(k);
            tseq_free(r);
            tseq_free(a);
            assert_within_bound(&t, 0, each, aligned, "all gone");
            env_close(&t);
        }
    }
}

/* The policy is stored and validated at create; explain states it, the
 * bound with its numbers and the modelled growth cost under it and per
 * granule. */
Test(kv_cache, explain_states_the_extent_policy_its_bound_and_the_growth_cost)
{
    kvt t;
    env_open(&t, 1024 * MiB, 0);
    ortmem_kv_cache_options o =
        cache_options(small_geometry(2, ORTMEM_KV_HEAD_MAJOR), ORTMEM_KV_STABLE, 4096);
    cr_assert_eq(o.extents.struct_size, sizeof o.extents);
    cr_assert_eq(o.extents.growth, ORTMEM_EXTENT_GEOMETRIC, "growth over extents by default");
    cr_assert_eq(o.extents.cap_bytes, ORTMEM_EXTENT_CAP_DEFAULT);
    o.extents.growth = ORTMEM_EXTENT_GEOMETRIC;
    o.extents.cap_bytes = 256 * KiB; /* 4 granules */
    cache_open(&t, o);
    char text[2048];
    ortmem_kv_strategy s;
    OK(ortmem_kv_cache_explain(t.cache, &s, text, sizeof text));
    ortmem_extent_policy granule = {sizeof granule, ORTMEM_EXTENT_GRANULE, 0};
    ortmem_kv_growth_cost mine = growth_cost(&t.geometry, &o.extents, 4096, 1024, 4096);
    ortmem_kv_growth_cost base = growth_cost(&t.geometry, &granule, 4096, 1024, 4096);
    cr_assert_lt(mine.extents, base.extents);
    cr_assert(strstr(text, "extent policy geometric, largest extent 4 granules of 65536 bytes"),
              "%s", text);
    uint64_t fragments = evaluate(&t.geometry, 1, 4096, 0, 0).fragments;
    cr_assert_eq(mine.overcommit_bound_bytes, fragments * 4 * G);
    assert_mentions(text, mine.overcommit_bound_bytes, "bytes per stable sequence");
    assert_mentions(text, fragments, "fragments");
    assert_mentions(text, 4096, "tokens in appends of 1024");
    char want[256];
    snprintf(want, sizeof want,
             "geometric %llu extents: %llu create + %llu map + %llu set-access, teardown %llu "
             "unmap + %llu release",
             (unsigned long long)mine.extents, (unsigned long long)mine.calls_create,
             (unsigned long long)mine.calls_map, (unsigned long long)mine.calls_set_access,
             (unsigned long long)mine.calls_unmap, (unsigned long long)mine.calls_release);
    cr_assert(strstr(text, want), "'%s' not in: %s", want, text);
    snprintf(want, sizeof want, "per granule %llu extents: %llu create + %llu map",
             (unsigned long long)base.extents, (unsigned long long)base.calls_create,
             (unsigned long long)base.calls_map);
    cr_assert(strstr(text, want), "'%s' not in: %s", want, text);
    ortmem_kv_stats st = kv_stats(t.cache);
    cr_assert_eq(st.overcommit_bytes, 0);
    cr_assert_eq(st.overcommit_bound_bytes, 0, "no sequence, no zero tail");
    cache_close(&t);

    /* A bad policy is refused at create, naming it; nothing is left behind. */
    o.extents.growth = (ortmem_extent_growth)9;
    ortmem_kv_cache *c = NULL;
    EXPECT_STATUS(ortmem_kv_cache_create(t.authority, &o, &c), ORTMEM_E_INVALID);
    cr_assert(strstr(ortmem_last_error(), "unknown growth 9"), "%s", ortmem_last_error());
    o.extents.growth = ORTMEM_EXTENT_GEOMETRIC;
    o.extents.cap_bytes = 4 * KiB;
    EXPECT_STATUS(ortmem_kv_cache_create(t.authority, &o, &c), ORTMEM_E_INVALID);
    cr_assert(strstr(ortmem_last_error(), "below the granule"), "%s", ortmem_last_error());
    o.extents.struct_size = 0;
    o.extents.cap_bytes = 0;
    EXPECT_STATUS(ortmem_kv_cache_create(t.authority, &o, &c), ORTMEM_E_INVALID);
    cr_assert_null(c);
    env_close(&t);
}

/* A bucket cache says the policy is for stable growth and models nothing. */
Test(kv_cache, explain_of_a_bucket_cache_names_the_policy_only)
{
    kvt t;
    env_open(&t, 1024 * MiB, 0);
    ortmem_kv_cache_options o =
        cache_options(small_geometry(2, ORTMEM_KV_SEQ_MAJOR), ORTMEM_KV_BUCKET, 4096);
    cache_open(&t, o);
    char text[2048];
    OK(ortmem_kv_cache_explain(t.cache, NULL, text, sizeof text));
    cr_assert(strstr(text, "bucket was asked for. Extent policy geometric: it applies to stable "
                           "growth; bucket sequences commit whole buckets"),
              "%s", text);
    cr_assert_null(strstr(text, "extents:"), "%s", text);
    tseq *q = tseq_create(&t);
    grow(&t, q, 300);
    ortmem_kv_stats s = kv_stats(t.cache);
    cr_assert_eq(s.overcommit_bytes, 0, "bucket sequences are not counted");
    cr_assert_eq(s.overcommit_bound_bytes, 0);
    tseq_free(q);
    env_close(&t);
}
