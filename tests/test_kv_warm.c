/* Warm ranges of the KV cache on the CPU backend (64 KiB granules): the
 * account move under them (ortmem_region_set_account), a take that makes no
 * backend call, best fit by committed bytes, the clear at finish (no byte of
 * a finished sequence is ever readable in the next one), warm ranges of a
 * prefix and of a fork's parent, pressure from another holder releasing them
 * oldest first with exact ledgers, teardown, and a fault-injection sweep over
 * warm reuse. Every assertion is on bytes and counters. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "support.h"

#define G ((uint64_t)TEST_GRANULE)
#define MAX_CTX 1024
#define MAX_HOLDERS 16

/* ---- environment ---- */

typedef struct kvw {
    ortmem_backend *backend;
    ortmem_authority *authority;
    ortmem_kv_cache *cache;
    ortmem_kv_geometry geometry;
    uint64_t head_bytes;
} kvw;

/* 2 layers, 2 heads of 64 f16: 1 KiB per token; token-major is one fragment
 * (64 tokens per granule), head-major 8 fragments of 128 bytes per token. */
static ortmem_kv_cache_options warm_options(ortmem_kv_layout layout)
{
    ortmem_kv_cache_options o = ORTMEM_KV_CACHE_OPTIONS_INIT;
    o.geometry.layers = 2;
    o.geometry.kv_heads = 2;
    o.geometry.head_dim = 64;
    o.geometry.dtype = ORTMEM_KV_F16;
    o.geometry.layout = layout;
    o.geometry.granule = G;
    o.strategy = ORTMEM_KV_STABLE;
    o.max_context = MAX_CTX;
    o.zero_tail = 1;
    return o;
}

static void env_open_on(kvw *t, ortmem_backend *b, uint64_t limit, ortmem_kv_cache_options o)
{
    memset(t, 0, sizeof *t);
    t->backend = b;
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = limit;
    OK(ortmem_authority_create(b, &ao, &t->authority));
    OK(ortmem_kv_cache_create(t->authority, &o, &t->cache));
    t->geometry = o.geometry;
    t->head_bytes = (uint64_t)o.geometry.head_dim * ortmem_kv_dtype_bits(o.geometry.dtype) / 8;
}

static void env_open(kvw *t, uint64_t limit, ortmem_kv_cache_options o)
{
    env_open_on(t, test_backend(), limit, o);
}

static void env_close(kvw *t)
{
    if (t->cache)
        OK(ortmem_kv_cache_destroy(t->cache));
    OK(ortmem_authority_destroy(t->authority));
    ortmem_vmm_stats s = stats_of(t->backend);
    cr_assert_eq(s.owned_bytes, 0, "owned %llu after teardown", (unsigned long long)s.owned_bytes);
    cr_assert_eq(s.mapped_bytes, 0);
    cr_assert_eq(s.reserved_va_bytes, 0);
    OK(ortmem_backend_destroy(t->backend));
}

static ortmem_kv_stats kv_stats(ortmem_kv_cache *c)
{
    ortmem_kv_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    OK(ortmem_kv_cache_stats(c, &s));
    return s;
}

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
    ortmem_holder_report none;
    memset(&none, 0, sizeof none);
    return none;
}

/* Every holder's owned and mapped bytes summed equal the backend's ledger. */
static void assert_ledger_exact(kvw *t, const char *when)
{
    ortmem_authority_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    ortmem_holder_report hs[MAX_HOLDERS];
    memset(hs, 0, sizeof hs);
    OK(ortmem_authority_report_get(t->authority, &r, hs, MAX_HOLDERS));
    uint64_t owned = 0, mapped = 0;
    for (size_t i = 0; i < r.holder_count && i < MAX_HOLDERS; i++) {
        owned += hs[i].owned_bytes;
        mapped += hs[i].mapped_bytes;
    }
    ortmem_vmm_stats v = stats_of(t->backend);
    cr_assert_eq(owned, v.owned_bytes, "%s: holders own %llu, the backend %llu", when,
                 (unsigned long long)owned, (unsigned long long)v.owned_bytes);
    cr_assert_eq(mapped, v.mapped_bytes, "%s: holders map %llu, the backend %llu", when,
                 (unsigned long long)mapped, (unsigned long long)v.mapped_bytes);
}

/* ---- bytes through the bindings ----
 * A token written with seed s holds in every row a function of (s, binding,
 * head, token, byte), never 0; seed 0 means the token must read all zeros. */

typedef struct wseq {
    ortmem_kv_seq *s;
    uint64_t len;
    uint32_t seeds[MAX_CTX];
} wseq;

static uint8_t row_byte(uint32_t seed, uint64_t binding, uint32_t head, uint64_t token, uint64_t i)
{
    uint64_t x = ((uint64_t)seed * 0x9e3779b97f4a7c15ULL) ^ (binding << 48) ^
                 ((uint64_t)head << 40) ^ (token << 16) ^ i;
    x *= 0xbf58476d1ce4e5b9ULL;
    return (uint8_t)(x >> 56) | 1;
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

static void write_tokens(const kvw *t, wseq *q, uint64_t from, uint64_t to, uint32_t seed)
{
    for (uint32_t l = 0; l < t->geometry.layers; l++) {
        for (int v = 0; v < 2; v++) {
            ortmem_kv_binding b = binding_of(q->s, l, v);
            for (uint32_t h = 0; h < t->geometry.kv_heads; h++) {
                for (uint64_t tok = from; tok < to; tok++) {
                    volatile uint8_t *row = row_at(&b, h, tok);
                    for (uint64_t i = 0; i < t->head_bytes; i++)
                        row[i] = row_byte(seed, 2ULL * l + (uint64_t)v, h, tok, i);
                }
            }
        }
    }
    for (uint64_t tok = from; tok < to; tok++)
        q->seeds[tok] = seed;
}

/* Rows of tokens [0, q->len) that differ from the model. */
static uint64_t bad_rows(const kvw *t, const wseq *q)
{
    uint64_t bad = 0;
    for (uint32_t l = 0; l < t->geometry.layers; l++) {
        for (int v = 0; v < 2; v++) {
            ortmem_kv_binding b = binding_of(q->s, l, v);
            for (uint32_t h = 0; h < t->geometry.kv_heads; h++) {
                for (uint64_t tok = 0; tok < q->len; tok++) {
                    volatile uint8_t *row = row_at(&b, h, tok);
                    uint32_t seed = q->seeds[tok];
                    for (uint64_t i = 0; i < t->head_bytes; i++) {
                        uint8_t want = seed ? row_byte(seed, 2ULL * l + (uint64_t)v, h, tok, i) : 0;
                        if (row[i] != want) {
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

static wseq *wseq_create(kvw *t)
{
    wseq *q = calloc(1, sizeof *q);
    cr_assert_not_null(q);
    OK(ortmem_kv_seq_create(t->cache, &q->s));
    return q;
}

/* Appends n tokens that are not written yet (they must read zeros). */
static void grow_unwritten(wseq *q, uint64_t n)
{
    OK(ortmem_kv_seq_append(q->s, n));
    for (uint64_t tok = q->len; tok < q->len + n; tok++)
        q->seeds[tok] = 0;
    q->len += n;
}

static void grow(kvw *t, wseq *q, uint64_t n, uint32_t seed)
{
    uint64_t from = q->len;
    grow_unwritten(q, n);
    write_tokens(t, q, from, q->len, seed);
}

static void wseq_free(wseq *q)
{
    OK(ortmem_kv_seq_destroy(q->s));
    free(q);
}

static void *base_of(ortmem_kv_seq *s)
{
    return binding_of(s, 0, 0).base;
}

static void calls_now(ortmem_backend *b, uint64_t calls[ORTMEM_OP_COUNT])
{
    ortmem_vmm_stats v = stats_of(b);
    memcpy(calls, v.calls, sizeof v.calls);
}

static void assert_no_call_since(ortmem_backend *b, const uint64_t before[ORTMEM_OP_COUNT],
                                 const char *what)
{
    ortmem_vmm_stats v = stats_of(b);
    for (int op = 0; op < ORTMEM_OP_COUNT; op++)
        cr_assert_eq(v.calls[op], before[op], "%s: %llu %s calls (want 0)", what,
                     (unsigned long long)(v.calls[op] - before[op]),
                     ortmem_backend_op_name((ortmem_backend_op)op));
}

static const ortmem_backend_op grow_ops[] = {ORTMEM_OP_CREATE, ORTMEM_OP_MAP, ORTMEM_OP_UNMAP,
                                             ORTMEM_OP_RELEASE};

static void assert_no_handle_call_since(ortmem_backend *b, const uint64_t before[ORTMEM_OP_COUNT],
                                        const char *what)
{
    ortmem_vmm_stats v = stats_of(b);
    for (size_t k = 0; k < sizeof grow_ops / sizeof grow_ops[0]; k++)
        cr_assert_eq(v.calls[grow_ops[k]], before[grow_ops[k]], "%s: %llu %s calls (want 0)", what,
                     (unsigned long long)(v.calls[grow_ops[k]] - before[grow_ops[k]]),
                     ortmem_backend_op_name(grow_ops[k]));
}

/* ---- the account move ---- */

static ortmem_account holder_account_of(ortmem_authority *a, const char *name,
                                        ortmem_holder **holder)
{
    ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
    ho.name = name;
    OK(ortmem_holder_register(a, &ho, holder));
    ortmem_account acc;
    memset(&acc, 0, sizeof acc);
    OK(ortmem_holder_account(*holder, &acc));
    return acc;
}

Test(kv_warm, set_account_moves_the_mapped_charge_and_only_the_extents_the_region_alone_maps)
{
    ortmem_backend *b = test_backend();
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = 64 * G;
    ortmem_authority *auth = NULL;
    OK(ortmem_authority_create(b, &ao, &auth));
    ortmem_holder *ha = NULL, *hb = NULL, *hc = NULL;
    ortmem_account a = holder_account_of(auth, "a", &ha);
    ortmem_account bacc = holder_account_of(auth, "b", &hb);
    ortmem_account cacc = holder_account_of(auth, "c", &hc);
    ortmem_region_options ro = ORTMEM_REGION_OPTIONS_INIT;
    ro.size = 8 * G;
    ro.account = &a;
    ortmem_region *r1 = NULL, *r2 = NULL;
    OK(ortmem_region_create(b, &ro, &r1));
    ro.account = &cacc;
    OK(ortmem_region_create(b, &ro, &r2));
    OK(ortmem_region_commit(r1, 0, 4 * G));
    /* r2 maps r1's granule 1 too: that extent has two mappers. */
    OK(ortmem_region_share(r2, 0, r1, G, G, ORTMEM_ACCESS_READ));
    fill_pattern(ortmem_region_base(r1), 4 * G, 7);
    ortmem_holder_report before_a = holder_report(auth, "a");
    cr_assert_eq(before_a.owned_bytes, 4 * G);
    cr_assert_eq(before_a.mapped_bytes, 4 * G);
    cr_assert_eq(holder_report(auth, "c").mapped_bytes, G);

    uint64_t calls[ORTMEM_OP_COUNT];
    calls_now(b, calls);
    OK(ortmem_region_set_account(r1, &bacc));
    assert_no_call_since(b, calls, "set account");
    ortmem_holder_report ra = holder_report(auth, "a"), rb = holder_report(auth, "b"),
                         rc = holder_report(auth, "c");
    cr_assert_eq(ra.owned_bytes, G, "the shared extent keeps its owner");
    cr_assert_eq(ra.mapped_bytes, 0);
    cr_assert_eq(rb.owned_bytes, 3 * G);
    cr_assert_eq(rb.mapped_bytes, 4 * G);
    cr_assert_eq(rc.owned_bytes, 0);
    cr_assert_eq(rc.mapped_bytes, G);
    ortmem_vmm_stats v = stats_of(b);
    cr_assert_eq(ra.owned_bytes + rb.owned_bytes + rc.owned_bytes, v.owned_bytes);
    cr_assert_eq(ra.mapped_bytes + rb.mapped_bytes + rc.mapped_bytes, v.mapped_bytes);
    cr_assert(check_pattern(ortmem_region_base(r1), 4 * G, 7), "the bytes stay where they were");

    /* Later commits charge the new account. */
    OK(ortmem_region_commit(r1, 4 * G, G));
    cr_assert_eq(holder_report(auth, "b").owned_bytes, 4 * G);
    int same = 0;
    OK(ortmem_region_maps_same(r1, G, r2, 0, G, &same));
    cr_assert_eq(same, 1);
    OK(ortmem_region_maps_same(r1, 0, r2, 0, G, &same));
    cr_assert_eq(same, 0);
    /* A range past either region, or one that overflows, is refused, read nowhere. */
    size_t r2_size = ortmem_region_size(r2);
    EXPECT_STATUS(ortmem_region_maps_same(r1, 0, r2, 0, r2_size + G, &same), ORTMEM_E_RANGE);
    EXPECT_STATUS(ortmem_region_maps_same(r1, G, r2, r2_size, G, &same), ORTMEM_E_RANGE);
    EXPECT_STATUS(ortmem_region_maps_same(r1, SIZE_MAX - G + 1, r2, 0, 2 * G, &same),
                  ORTMEM_E_OVERFLOW);

    OK(ortmem_region_destroy(r1));
    cr_assert_eq(holder_report(auth, "b").owned_bytes, 0);
    cr_assert_eq(holder_report(auth, "b").mapped_bytes, 0);
    cr_assert_eq(holder_report(auth, "a").owned_bytes, G, "r2 still maps it");
    OK(ortmem_region_destroy(r2));
    cr_assert_eq(holder_report(auth, "a").owned_bytes, 0);
    cr_assert_eq(stats_of(b).owned_bytes, 0);
    EXPECT_STATUS(ortmem_region_set_account(r1, NULL), ORTMEM_E_INVALID);
    OK(ortmem_holder_unregister(ha));
    OK(ortmem_holder_unregister(hb));
    OK(ortmem_holder_unregister(hc));
    OK(ortmem_authority_destroy(auth));
    OK(ortmem_backend_destroy(b));
}

/* ---- take ---- */

static const ortmem_kv_layout layouts[] = {ORTMEM_KV_HEAD_MAJOR, ORTMEM_KV_SEQ_MAJOR,
                                           ORTMEM_KV_TOKEN_MAJOR};

Test(kv_warm, a_take_makes_no_backend_call_and_never_shows_the_previous_tokens)
{
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        kvw t;
        env_open(&t, 256 * G, warm_options(layouts[l]));
        const char *name = ortmem_kv_layout_name(layouts[l]);
        wseq *a = wseq_create(&t);
        grow(&t, a, 300, 11);
        void *base = base_of(a->s);
        ortmem_kv_stats st = kv_stats(t.cache);
        uint64_t committed = st.committed_bytes, live = st.live_bytes;
        wseq_free(a);
        st = kv_stats(t.cache);
        cr_assert_eq(st.warm_ranges, 1, "%s", name);
        cr_assert_eq(st.sequences, 0);
        /* The zero granule stays kv's; the range's private bytes are kv-warm's. */
        cr_assert_eq(st.warm_bytes, committed - G);
        /* The clear covers what was written (each fragment's 300 tokens), not
         * the committed bytes past them, which nothing wrote. */
        cr_assert_eq(st.warm_cleared_bytes, live, "%s", name);
        cr_assert_eq(holder_report(t.authority, "kv-warm").owned_bytes, committed - G);
        cr_assert_eq(st.committed_bytes, committed, "nothing was released");
        assert_ledger_exact(&t, "warm");

        uint64_t calls[ORTMEM_OP_COUNT];
        calls_now(t.backend, calls);
        wseq *b = wseq_create(&t);
        assert_no_call_since(t.backend, calls, name);
        cr_assert_eq(base_of(b->s), base, "%s: the warm range was taken", name);
        st = kv_stats(t.cache);
        cr_assert_eq(st.warm_hits, 1);
        cr_assert_eq(st.warm_misses, 1, "the first create found none");
        cr_assert_eq(st.warm_ranges, 0);
        cr_assert_eq(holder_report(t.authority, "kv-warm").owned_bytes, 0);
        assert_ledger_exact(&t, "taken");
        /* Growing inside what the range has committed: still no call, and the
         * old tokens read as zeros. */
        grow_unwritten(b, 300);
        assert_no_call_since(t.backend, calls, name);
        cr_assert_eq(bad_rows(&t, b), 0, "%s: a previous token is readable", name);
        write_tokens(&t, b, 0, 300, 12);
        grow(&t, b, 200, 13); /* past it: commits */
        cr_assert_eq(bad_rows(&t, b), 0);
        wseq_free(b);
        env_close(&t);
    }
}

/* A truncate keeps the extent the new end cuts, with the tokens past it: the
 * clear covers the longest length the sequence reached, not its length at
 * the end, so those tokens never reach the next user. */
Test(kv_warm, tokens_a_truncate_left_behind_are_cleared_too)
{
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        kvw t;
        env_open(&t, 256 * G, warm_options(layouts[l]));
        const char *name = ortmem_kv_layout_name(layouts[l]);
        wseq *a = wseq_create(&t);
        grow(&t, a, 500, 21);
        OK(ortmem_kv_seq_truncate(a->s, 200));
        a->len = 200;
        void *base = base_of(a->s);
        wseq_free(a);
        wseq *b = wseq_create(&t);
        cr_assert_eq(base_of(b->s), base, "%s: the warm range was taken", name);
        grow_unwritten(b, 500);
        cr_assert_eq(bad_rows(&t, b), 0, "%s: a token past the truncate is readable", name);
        wseq_free(b);
        env_close(&t);
    }
}

Test(kv_warm, best_fit_takes_the_smallest_range_that_holds_the_prompt_else_the_largest)
{
    kvw t;
    ortmem_kv_cache_options o = warm_options(ORTMEM_KV_TOKEN_MAJOR); /* 64 tokens a granule */
    env_open(&t, 256 * G, o);
    const uint64_t lengths[3] = {64, 320, 192}; /* 1, 5 and 3 granules */
    void *base[3];
    wseq *q[3];
    for (int i = 0; i < 3; i++) {
        q[i] = wseq_create(&t);
        grow(&t, q[i], lengths[i], 20 + (uint32_t)i);
        base[i] = base_of(q[i]->s);
    }
    for (int i = 0; i < 3; i++)
        wseq_free(q[i]);
    cr_assert_eq(kv_stats(t.cache).warm_bytes, 9 * G);
    int32_t prompt[400];
    for (int i = 0; i < 400; i++)
        prompt[i] = i;
    ortmem_kv_seq *s = NULL;
    /* 100 tokens need 2 granules: the 3-granule range. */
    OK(ortmem_kv_seq_create_with_prompt(t.cache, prompt, 100, &s, NULL));
    cr_assert_eq(base_of(s), base[2], "best fit for 100 tokens");
    OK(ortmem_kv_seq_destroy(s));
    /* 192 tokens: exactly the 3-granule range again (it went back warm). */
    OK(ortmem_kv_seq_create_with_prompt(t.cache, prompt, 192, &s, NULL));
    cr_assert_eq(base_of(s), base[2], "an exact fit");
    OK(ortmem_kv_seq_destroy(s));
    /* 40 tokens: the 1-granule range. */
    OK(ortmem_kv_seq_create_with_prompt(t.cache, prompt, 40, &s, NULL));
    cr_assert_eq(base_of(s), base[0]);
    OK(ortmem_kv_seq_destroy(s));
    /* 400 tokens fit none: the largest. */
    OK(ortmem_kv_seq_create_with_prompt(t.cache, prompt, 400, &s, NULL));
    cr_assert_eq(base_of(s), base[1]);
    OK(ortmem_kv_seq_destroy(s));
    /* No prompt, no length known: the largest. */
    OK(ortmem_kv_seq_create(t.cache, &s));
    cr_assert_eq(base_of(s), base[1]);
    OK(ortmem_kv_seq_destroy(s));
    ortmem_kv_stats st = kv_stats(t.cache);
    cr_assert_eq(st.warm_hits, 5);
    cr_assert_eq(st.warm_ranges, 3);
    env_close(&t);
}

Test(kv_warm, limits_keep_the_newest_ranges_and_zero_bytes_turns_warm_ranges_off)
{
    kvw t;
    ortmem_kv_cache_options o = warm_options(ORTMEM_KV_TOKEN_MAJOR);
    o.warm_max_ranges = 2;
    env_open(&t, 256 * G, o);
    void *base[3];
    wseq *q[3];
    for (int i = 0; i < 3; i++) {
        q[i] = wseq_create(&t);
        grow(&t, q[i], 64 * (uint64_t)(i + 1), 30 + (uint32_t)i);
        base[i] = base_of(q[i]->s);
    }
    for (int i = 0; i < 3; i++)
        wseq_free(q[i]);
    ortmem_kv_stats st = kv_stats(t.cache);
    cr_assert_eq(st.warm_ranges, 2);
    cr_assert_eq(st.warm_bytes, 5 * G, "the oldest (1 granule) went");
    cr_assert_eq(st.warm_reclaimed_bytes, G);
    cr_assert_eq(stats_of(t.backend).owned_bytes, 6 * G, "5 warm + the zero granule");
    ortmem_kv_seq *s = NULL, *s2 = NULL, *s3 = NULL;
    OK(ortmem_kv_seq_create(t.cache, &s));
    OK(ortmem_kv_seq_create(t.cache, &s2));
    OK(ortmem_kv_seq_create(t.cache, &s3));
    cr_assert_eq(base_of(s), base[2]);
    cr_assert_eq(base_of(s2), base[1]);
    st = kv_stats(t.cache);
    cr_assert_eq(st.warm_hits, 2);
    cr_assert_eq(st.warm_misses, 4, "three cold starts, then the third create");
    OK(ortmem_kv_seq_destroy(s));
    OK(ortmem_kv_seq_destroy(s2));
    OK(ortmem_kv_seq_destroy(s3));
    char why[2048];
    ortmem_kv_strategy strategy;
    OK(ortmem_kv_cache_explain(t.cache, &strategy, why, sizeof why));
    cr_assert_not_null(strstr(why, "Warm ranges: on, at most 2 ranges"), "%s", why);
    env_close(&t);

    o.warm_max_bytes = 0;
    env_open(&t, 256 * G, o);
    wseq *a = wseq_create(&t);
    grow(&t, a, 100, 1);
    wseq_free(a);
    st = kv_stats(t.cache);
    cr_assert_eq(st.warm_ranges, 0);
    cr_assert_eq(st.committed_bytes, G, "the zero granule only");
    cr_assert_eq(holder_report(t.authority, "kv-warm").name[0], 0, "no kv-warm holder");
    OK(ortmem_kv_cache_explain(t.cache, &strategy, why, sizeof why));
    cr_assert_not_null(strstr(why, "Warm ranges: off"), "%s", why);
    env_close(&t);
}

Test(kv_warm, a_create_refused_by_the_sequence_limit_leaves_the_warm_ranges_be)
{
    kvw t;
    ortmem_kv_cache_options o = warm_options(ORTMEM_KV_TOKEN_MAJOR);
    o.max_sequences = 2;
    env_open(&t, 256 * G, o);
    ortmem_kv_seq *parent = NULL, *child = NULL, *plain = NULL, *refused = NULL;
    OK(ortmem_kv_seq_create(t.cache, &parent));
    OK(ortmem_kv_seq_append(parent, 100));
    OK(ortmem_kv_seq_fork(parent, &child));
    OK(ortmem_kv_seq_destroy(child));          /* a fork's range goes warm */
    OK(ortmem_kv_seq_create(t.cache, &plain)); /* not of its kind: cold */
    ortmem_kv_stats before = kv_stats(t.cache);
    cr_assert_eq(before.warm_ranges, 1);
    EXPECT_STATUS(ortmem_kv_seq_fork(parent, &refused), ORTMEM_E_BUSY);
    ortmem_kv_stats after = kv_stats(t.cache);
    cr_assert_eq(after.warm_ranges, 1, "the refused fork kept the range warm");
    cr_assert_eq(after.warm_hits, before.warm_hits);
    OK(ortmem_kv_seq_destroy(plain));
    OK(ortmem_kv_seq_fork(parent, &child));
    cr_assert_eq(kv_stats(t.cache).warm_hits, before.warm_hits + 1);
    OK(ortmem_kv_seq_destroy(child));
    OK(ortmem_kv_seq_destroy(parent));
    env_close(&t);
}

/* ---- prefix and fork ---- */

Test(kv_warm, a_prefix_start_takes_a_range_that_maps_the_same_prefix_with_no_backend_call)
{
    kvw t;
    ortmem_kv_cache_options o = warm_options(ORTMEM_KV_HEAD_MAJOR);
    o.prefix_cache = 1;
    env_open(&t, 256 * G, o);
    /* head-major: 128 bytes per token per fragment, 512 tokens a granule. */
    int32_t prompt[700];
    for (int i = 0; i < 700; i++)
        prompt[i] = 1000 + i;
    wseq *src = wseq_create(&t);
    grow(&t, src, 600, 40);
    OK(ortmem_kv_seq_publish(src->s, prompt, 600));
    wseq *a = calloc(1, sizeof *a);
    uint64_t reused = 0;
    OK(ortmem_kv_seq_create_with_prompt(t.cache, prompt, 700, &a->s, &reused));
    cr_assert_eq(reused, 512);
    a->len = reused;
    for (uint64_t k = 0; k < reused; k++)
        a->seeds[k] = 40;
    grow(&t, a, 188, 41);
    cr_assert_eq(bad_rows(&t, a), 0);
    void *base = base_of(a->s);
    wseq_free(a);
    cr_assert_eq(kv_stats(t.cache).warm_ranges, 1);

    uint64_t calls[ORTMEM_OP_COUNT];
    calls_now(t.backend, calls);
    wseq *b = calloc(1, sizeof *b);
    OK(ortmem_kv_seq_create_with_prompt(t.cache, prompt, 700, &b->s, &reused));
    assert_no_call_since(t.backend, calls, "prefix take");
    cr_assert_eq(base_of(b->s), base);
    cr_assert_eq(reused, 512);
    ortmem_kv_stats st = kv_stats(t.cache);
    cr_assert_eq(st.warm_hits, 1);
    cr_assert_eq(st.prefix_hits, 2);
    b->len = reused;
    for (uint64_t k = 0; k < reused; k++)
        b->seeds[k] = 40;
    grow_unwritten(b, 188);
    assert_no_call_since(t.backend, calls, "prefix take and growth inside the range");
    cr_assert_eq(bad_rows(&t, b), 0, "the prefix reads back, a's own tokens read zeros");
    assert_ledger_exact(&t, "prefix take");
    /* A plain create does not take a prefix range. */
    wseq_free(b);
    ortmem_kv_seq *plain = NULL;
    OK(ortmem_kv_seq_create(t.cache, &plain));
    cr_assert_neq(base_of(plain), base);
    OK(ortmem_kv_seq_destroy(plain));
    wseq_free(src);
    env_close(&t);
}

Test(kv_warm, a_fork_takes_a_range_that_maps_the_same_parent_and_copies_its_partial_granules)
{
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        kvw t;
        env_open(&t, 256 * G, warm_options(layouts[l]));
        const char *name = ortmem_kv_layout_name(layouts[l]);
        wseq *parent = wseq_create(&t);
        grow(&t, parent, 530, 50); /* not on a granule in any layout */
        wseq *child = calloc(1, sizeof *child);
        OK(ortmem_kv_seq_fork(parent->s, &child->s));
        child->len = parent->len;
        memcpy(child->seeds, parent->seeds, sizeof child->seeds);
        grow(&t, child, 100, 51);
        cr_assert_eq(bad_rows(&t, child), 0);
        void *base = base_of(child->s);
        wseq_free(child);
        cr_assert_eq(kv_stats(t.cache).warm_ranges, 1, "%s", name);

        uint64_t calls[ORTMEM_OP_COUNT];
        calls_now(t.backend, calls);
        child = calloc(1, sizeof *child);
        OK(ortmem_kv_seq_fork(parent->s, &child->s));
        assert_no_handle_call_since(t.backend, calls, name);
        cr_assert_eq(base_of(child->s), base, "%s", name);
        child->len = parent->len;
        memcpy(child->seeds, parent->seeds, sizeof child->seeds);
        cr_assert_eq(bad_rows(&t, child), 0, "%s: the parent's tokens, copied back", name);
        grow_unwritten(child, 100);
        assert_no_handle_call_since(t.backend, calls, name);
        cr_assert_eq(bad_rows(&t, child), 0, "%s: the old child's tokens read zeros", name);
        grow(&t, parent, 10, 52); /* the parent writes its own granules only */
        cr_assert_eq(bad_rows(&t, child), 0);
        assert_ledger_exact(&t, name);
        wseq_free(child);

        /* A parent that grew no longer matches the range: a fork of it starts cold. */
        ortmem_kv_seq *other = NULL;
        OK(ortmem_kv_seq_fork(parent->s, &other));
        cr_assert_neq(base_of(other), base, "%s", name);
        OK(ortmem_kv_seq_destroy(other));
        wseq_free(parent);
        env_close(&t);
    }
}

/* ---- prewarm ---- */

/* The handle calls of one cold sequence grown to tokens in one append and
 * finished, on a fresh cache of this layout: what each prewarmed range must
 * cost, no more. */
static void one_cold_range_calls(ortmem_kv_layout layout, uint64_t tokens,
                                 uint64_t calls[ORTMEM_OP_COUNT])
{
    kvw t;
    env_open(&t, 256 * G, warm_options(layout));
    uint64_t before[ORTMEM_OP_COUNT];
    calls_now(t.backend, before);
    ortmem_kv_seq *s = NULL;
    OK(ortmem_kv_seq_create(t.cache, &s));
    OK(ortmem_kv_seq_append(s, tokens));
    OK(ortmem_kv_seq_destroy(s));
    calls_now(t.backend, calls);
    for (int op = 0; op < ORTMEM_OP_COUNT; op++)
        calls[op] -= before[op];
    env_close(&t);
}

Test(kv_warm, prewarm_makes_the_modelled_calls_up_front_then_takes_and_growth_make_none)
{
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        const char *name = ortmem_kv_layout_name(layouts[l]);
        uint64_t one[ORTMEM_OP_COUNT];
        one_cold_range_calls(layouts[l], 300, one);
        kvw t;
        ortmem_kv_cache_options o = warm_options(layouts[l]);
        env_open(&t, 256 * G, o);
        ortmem_kv_growth_cost cost = {.struct_size = sizeof cost};
        ortmem_extent_policy policy = ORTMEM_EXTENT_POLICY_INIT;
        OK(ortmem_kv_growth_evaluate(&o.geometry, &policy, MAX_CTX, 300, 300, 300, &cost));
        uint64_t before[ORTMEM_OP_COUNT], after[ORTMEM_OP_COUNT];
        calls_now(t.backend, before);
        OK(ortmem_kv_cache_prewarm(t.cache, 3, 300));
        calls_now(t.backend, after);
        for (size_t k = 0; k < sizeof grow_ops / sizeof grow_ops[0]; k++) {
            ortmem_backend_op op = grow_ops[k];
            cr_assert_eq(after[op] - before[op], 3 * one[op], "%s: %llu %s calls, want 3 x %llu",
                         name, (unsigned long long)(after[op] - before[op]),
                         ortmem_backend_op_name(op), (unsigned long long)one[op]);
        }
        cr_assert_eq(after[ORTMEM_OP_CREATE] - before[ORTMEM_OP_CREATE], 3 * cost.calls_create,
                     "%s: one create per modelled extent", name);
        ortmem_kv_stats st = kv_stats(t.cache);
        cr_assert_eq(st.warm_ranges, 3, "%s", name);
        cr_assert_eq(st.warm_prewarmed, 3);
        cr_assert_eq(st.sequences, 0);
        cr_assert_eq(st.warm_bytes, 3 * cost.committed_bytes, "%s: the modelled bytes", name);
        cr_assert_eq(st.warm_cleared_bytes, 3 * cost.live_bytes, "%s: the prewarmed tokens", name);
        cr_assert_eq(holder_report(t.authority, "kv-warm").owned_bytes, st.warm_bytes);
        assert_ledger_exact(&t, "prewarmed");

        /* Three sequences take them and grow to 300 tokens: no handle call,
         * and every token reads zeros until written. */
        uint64_t calls[ORTMEM_OP_COUNT];
        calls_now(t.backend, calls);
        wseq *q[3];
        for (int i = 0; i < 3; i++) {
            q[i] = wseq_create(&t);
            grow_unwritten(q[i], 300);
            cr_assert_eq(bad_rows(&t, q[i]), 0, "%s: a prewarmed range is not clear", name);
            write_tokens(&t, q[i], 0, 300, 70 + (uint32_t)i);
        }
        assert_no_handle_call_since(t.backend, calls, name);
        st = kv_stats(t.cache);
        cr_assert_eq(st.warm_hits, 3);
        cr_assert_eq(st.warm_misses, 0, "%s: nobody started cold", name);
        cr_assert_eq(st.warm_ranges, 0);
        assert_ledger_exact(&t, "taken");
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(bad_rows(&t, q[i]), 0);
            wseq_free(q[i]);
        }
        /* Finished, they are warm again: the next wave makes no call either. */
        calls_now(t.backend, calls);
        q[0] = wseq_create(&t);
        grow_unwritten(q[0], 300);
        assert_no_handle_call_since(t.backend, calls, name);
        cr_assert_eq(bad_rows(&t, q[0]), 0, "%s: a finished token is readable", name);
        wseq_free(q[0]);
        env_close(&t);
    }
}

Test(kv_warm, a_prewarm_that_does_not_fit_is_refused_with_the_numbers_and_changes_nothing)
{
    kvw t;
    ortmem_kv_cache_options o = warm_options(ORTMEM_KV_TOKEN_MAJOR);
    o.warm_max_ranges = 6;
    env_open(&t, 12 * G, o); /* 5 granules a range of 300 tokens: two fit */
    OK(ortmem_kv_cache_prewarm(t.cache, 1, 300));
    ortmem_kv_stats st0 = kv_stats(t.cache);
    ortmem_vmm_stats v0 = stats_of(t.backend);
    ortmem_holder_report w0 = holder_report(t.authority, "kv-warm");
    uint64_t calls[ORTMEM_OP_COUNT];
    calls_now(t.backend, calls);

    cr_assert_eq(ortmem_kv_cache_prewarm(t.cache, 3, 300), ORTMEM_E_BUDGET);
    cr_assert_not_null(strstr(ortmem_last_error(), "need 983040 bytes more"), "%s",
                       ortmem_last_error());
    cr_assert_not_null(strstr(ortmem_last_error(), "available"), "%s", ortmem_last_error());
    cr_assert_eq(ortmem_kv_cache_prewarm(t.cache, 6, 10), ORTMEM_E_RANGE);
    cr_assert_not_null(strstr(ortmem_last_error(), "warm_max_ranges 6"), "%s", ortmem_last_error());
    cr_assert_eq(ortmem_kv_cache_prewarm(t.cache, 1, MAX_CTX + 1), ORTMEM_E_RANGE);
    int32_t prompt[4] = {1, 2, 3, 4};
    cr_assert_eq(ortmem_kv_cache_prewarm_prompt(t.cache, prompt, 4, 1, 300), ORTMEM_E_NOT_FOUND);
    assert_no_call_since(t.backend, calls, "refused prewarms");
    ortmem_kv_stats st = kv_stats(t.cache);
    cr_assert_eq(st.warm_ranges, st0.warm_ranges);
    cr_assert_eq(st.warm_bytes, st0.warm_bytes);
    cr_assert_eq(st.warm_prewarmed, 1);
    cr_assert_eq(st.committed_bytes, st0.committed_bytes);
    cr_assert_eq(stats_of(t.backend).owned_bytes, v0.owned_bytes);
    cr_assert_eq(holder_report(t.authority, "kv-warm").owned_bytes, w0.owned_bytes);
    assert_ledger_exact(&t, "refused");
    /* What fits is built. */
    OK(ortmem_kv_cache_prewarm(t.cache, 1, 300));
    cr_assert_eq(kv_stats(t.cache).warm_ranges, 2);
    OK(ortmem_kv_cache_destroy(t.cache));
    t.cache = NULL;

    /* No warm ranges: nothing to prewarm. */
    o.warm_max_bytes = 0;
    OK(ortmem_kv_cache_create(t.authority, &o, &t.cache));
    cr_assert_eq(ortmem_kv_cache_prewarm(t.cache, 1, 300), ORTMEM_E_STATE);
    env_close(&t);
}

Test(kv_warm, prewarmed_fork_and_prompt_ranges_are_taken_with_no_handle_call)
{
    kvw t;
    ortmem_kv_cache_options o = warm_options(ORTMEM_KV_TOKEN_MAJOR);
    o.prefix_cache = 1;
    env_open(&t, 256 * G, o);
    /* token-major: 64 tokens a granule; the parent ends inside granule 8. */
    int32_t prompt[700];
    for (int i = 0; i < 700; i++)
        prompt[i] = 2000 + i;
    wseq *parent = wseq_create(&t);
    grow(&t, parent, 530, 80);
    OK(ortmem_kv_seq_publish(parent->s, prompt, 530));
    OK(ortmem_kv_seq_prewarm_forks(parent->s, 2, 900));
    OK(ortmem_kv_cache_prewarm_prompt(t.cache, prompt, 700, 2, 900));
    ortmem_kv_stats st = kv_stats(t.cache);
    cr_assert_eq(st.warm_ranges, 4);
    cr_assert_eq(st.warm_prewarmed, 4);
    assert_ledger_exact(&t, "prewarmed kinds");

    uint64_t calls[ORTMEM_OP_COUNT];
    calls_now(t.backend, calls);
    wseq *k[2], *p[2];
    for (int i = 0; i < 2; i++) {
        k[i] = calloc(1, sizeof *k[i]);
        OK(ortmem_kv_seq_fork(parent->s, &k[i]->s));
        k[i]->len = parent->len;
        memcpy(k[i]->seeds, parent->seeds, sizeof k[i]->seeds);
        cr_assert_eq(bad_rows(&t, k[i]), 0, "the parent's tokens in a prewarmed fork");
        grow_unwritten(k[i], 900 - 530);
        cr_assert_eq(bad_rows(&t, k[i]), 0, "a prewarmed fork's own tokens read zeros");
        write_tokens(&t, k[i], 530, 900, 81 + (uint32_t)i);
        p[i] = calloc(1, sizeof *p[i]);
        uint64_t reused = 0;
        OK(ortmem_kv_seq_create_with_prompt(t.cache, prompt, 700, &p[i]->s, &reused));
        cr_assert_eq(reused, 512);
        p[i]->len = reused;
        for (uint64_t tok = 0; tok < reused; tok++)
            p[i]->seeds[tok] = 80;
        grow_unwritten(p[i], 900 - reused);
        cr_assert_eq(bad_rows(&t, p[i]), 0, "the prefix reads back, the rest zeros");
    }
    assert_no_handle_call_since(t.backend, calls, "prewarmed fork and prefix takes");
    st = kv_stats(t.cache);
    cr_assert_eq(st.warm_hits, 4);
    cr_assert_eq(st.prefix_hits, 2, "the prewarm's sequences are no requests");
    cr_assert_eq(st.warm_ranges, 0);
    assert_ledger_exact(&t, "taken");
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(bad_rows(&t, k[i]), 0);
        wseq_free(k[i]);
        wseq_free(p[i]);
    }
    wseq_free(parent);
    env_close(&t);
}

Test(kv_warm, prewarmed_ranges_are_cleared_of_what_their_granules_held_before)
{
    kvw t;
    ortmem_kv_cache_options o = warm_options(ORTMEM_KV_TOKEN_MAJOR);
    env_open(&t, 64 * G, o);
    OK(ortmem_pool_set_cap(t.backend, 32 * G));
    /* A cache without warm ranges on the same backend: its finished
     * sequence's written granules go to the pool as they are. */
    ortmem_kv_cache *warm = t.cache, *cold = NULL;
    o.warm_max_bytes = 0;
    OK(ortmem_kv_cache_create(t.authority, &o, &cold));
    t.cache = cold;
    wseq *a = wseq_create(&t);
    grow(&t, a, 300, 91);
    wseq_free(a);
    t.cache = warm;
    cr_assert_gt(stats_of(t.backend).pool_bytes, 0, "the pool holds a's written granules");
    uint64_t hits = stats_of(t.backend).pool_hits;
    OK(ortmem_kv_cache_prewarm(t.cache, 1, 300));
    cr_assert_gt(stats_of(t.backend).pool_hits, hits, "the prewarm reused a's granules");
    wseq *d = wseq_create(&t);
    grow_unwritten(d, 300);
    cr_assert_eq(bad_rows(&t, d), 0, "a prewarmed range shows bytes its granules held before");
    assert_ledger_exact(&t, "after");
    wseq_free(d);
    OK(ortmem_kv_cache_destroy(cold));
    OK(ortmem_kv_cache_destroy(t.cache));
    t.cache = NULL;
    size_t released = 0;
    OK(ortmem_pool_trim(t.backend, 0, &released));
    env_close(&t);
}

Test(kv_warm, pressure_releases_prewarmed_ranges_oldest_first_with_exact_ledgers)
{
    kvw t;
    env_open(&t, 32 * G, warm_options(ORTMEM_KV_TOKEN_MAJOR));
    OK(ortmem_kv_cache_prewarm(t.cache, 4, 192)); /* 3 granules each */
    ortmem_kv_stats st = kv_stats(t.cache);
    cr_assert_eq(st.warm_bytes, 12 * G);
    cr_assert_eq(stats_of(t.backend).owned_bytes, 13 * G);
    ortmem_holder *other = NULL;
    ortmem_account acc = holder_account_of(t.authority, "engine", &other);
    ortmem_region_options ro = ORTMEM_REGION_OPTIONS_INIT;
    ro.size = 32 * G;
    ro.account = &acc;
    ortmem_region *r = NULL;
    OK(ortmem_region_create(t.backend, &ro, &r));
    OK(ortmem_region_commit(r, 0, 23 * G)); /* 19 free: two ranges go */
    st = kv_stats(t.cache);
    cr_assert_eq(st.warm_ranges, 2);
    cr_assert_eq(st.warm_reclaimed_bytes, 6 * G);
    cr_assert_eq(holder_report(t.authority, "kv-warm").owned_bytes, 6 * G);
    cr_assert_eq(stats_of(t.backend).pool_bytes, 0, "straight to the backend");
    assert_ledger_exact(&t, "after pressure");
    OK(ortmem_region_destroy(r));
    OK(ortmem_holder_unregister(other));
    env_close(&t);
}

/* ---- pressure and teardown ---- */

Test(kv_warm, pressure_from_another_holder_releases_warm_ranges_oldest_first)
{
    kvw t;
    ortmem_kv_cache_options o = warm_options(ORTMEM_KV_TOKEN_MAJOR);
    env_open(&t, 32 * G, o);
    void *base[4];
    wseq *q[4];
    for (int i = 0; i < 4; i++) {
        q[i] = wseq_create(&t);
        grow(&t, q[i], 192, 60 + (uint32_t)i); /* 3 granules each */
        base[i] = base_of(q[i]->s);
    }
    for (int i = 0; i < 4; i++)
        wseq_free(q[i]);
    ortmem_kv_stats st = kv_stats(t.cache);
    cr_assert_eq(st.warm_bytes, 12 * G);
    cr_assert_eq(stats_of(t.backend).owned_bytes, 13 * G);
    assert_ledger_exact(&t, "four warm");

    ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
    ho.name = "engine";
    ho.priority = 10;
    ortmem_holder *other = NULL;
    OK(ortmem_holder_register(t.authority, &ho, &other));
    ortmem_account acc;
    memset(&acc, 0, sizeof acc);
    OK(ortmem_holder_account(other, &acc));
    ortmem_region_options ro = ORTMEM_REGION_OPTIONS_INIT;
    ro.size = 32 * G;
    ro.account = &acc;
    ortmem_region *r = NULL;
    OK(ortmem_region_create(t.backend, &ro, &r));
    /* 19 free; 23 asked: two ranges (6 granules) must go, the oldest. */
    OK(ortmem_region_commit(r, 0, 23 * G));
    st = kv_stats(t.cache);
    cr_assert_eq(st.warm_ranges, 2);
    cr_assert_eq(st.warm_reclaimed_bytes, 6 * G);
    cr_assert_eq(holder_report(t.authority, "kv-warm").owned_bytes, 6 * G);
    cr_assert_eq(stats_of(t.backend).pool_bytes, 0, "straight to the backend");
    assert_ledger_exact(&t, "after pressure");
    ortmem_kv_seq *s = NULL, *s2 = NULL;
    OK(ortmem_kv_seq_create(t.cache, &s));
    OK(ortmem_kv_seq_create(t.cache, &s2));
    cr_assert(base_of(s) == base[3] || base_of(s) == base[2]);
    cr_assert(base_of(s2) == base[3] || base_of(s2) == base[2], "the newest two stayed");
    OK(ortmem_kv_seq_destroy(s));
    OK(ortmem_kv_seq_destroy(s2));
    OK(ortmem_region_destroy(r));
    OK(ortmem_holder_unregister(other));
    env_close(&t);
}

Test(kv_warm, teardown_releases_every_warm_range_and_leaves_nothing_owned)
{
    kvw t;
    ortmem_kv_cache_options o = warm_options(ORTMEM_KV_SEQ_MAJOR);
    o.prefix_cache = 1;
    env_open(&t, 256 * G, o);
    int32_t prompt[600];
    for (int i = 0; i < 600; i++)
        prompt[i] = i;
    wseq *src = wseq_create(&t);
    grow(&t, src, 600, 70);
    OK(ortmem_kv_seq_publish(src->s, prompt, 600));
    ortmem_kv_seq *p = NULL, *f = NULL, *plain = NULL;
    OK(ortmem_kv_seq_create_with_prompt(t.cache, prompt, 600, &p, NULL));
    OK(ortmem_kv_seq_fork(src->s, &f));
    OK(ortmem_kv_seq_create(t.cache, &plain));
    OK(ortmem_kv_seq_append(plain, 77));
    OK(ortmem_kv_seq_destroy(p));
    OK(ortmem_kv_seq_destroy(f));
    OK(ortmem_kv_seq_destroy(plain));
    cr_assert_eq(kv_stats(t.cache).warm_ranges, 3, "plain, prefix and fork ranges");
    /* The fork's range can never be taken once its parent is gone: it goes
     * with the parent (which maps a published prefix: not kept warm). */
    wseq_free(src);
    cr_assert_eq(kv_stats(t.cache).warm_ranges, 2, "plain and prefix ranges");
    assert_ledger_exact(&t, "before teardown");
    env_close(&t); /* asserts the backend owns, maps and reserves nothing */
}

/* ---- faults ---- */

static ortmem_backend *fault_on(ortmem_backend *inner, uint64_t n)
{
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = ORTMEM_OP_ANY;
    fo.fail_at = n;
    ortmem_backend *f = NULL;
    OK(ortmem_fault_backend_create(inner, &fo, &f));
    return f;
}

typedef struct fault_run {
    uint64_t failures, corruptions, warm_hits;
} fault_run;

/* One step that may fail: a failure is counted and ends the sequence's part. */
#define TRY(m, call) ((call) == ORTMEM_OK || ((m)->failures++, 0))

/* finish -> take -> append -> finish: two plain sequences, then two forks of
 * one parent (the second takes the first's range). */
static void warm_workload(ortmem_backend *b, fault_run *m, uint64_t *quarantined_reported)
{
    memset(m, 0, sizeof *m);
    kvw t;
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = 256 * G;
    memset(&t, 0, sizeof t);
    t.backend = b;
    OK(ortmem_authority_create(b, &ao, &t.authority));
    ortmem_kv_cache_options o = warm_options(ORTMEM_KV_SEQ_MAJOR);
    t.geometry = o.geometry;
    t.head_bytes = 128;
    ortmem_status st = ortmem_kv_cache_create(t.authority, &o, &t.cache);
    if (st != ORTMEM_OK) {
        m->failures++;
        OK(ortmem_authority_destroy(t.authority));
        return;
    }
    static wseq parent, q;
    memset(&parent, 0, sizeof parent);
    if (TRY(m, ortmem_kv_seq_create(t.cache, &parent.s))) {
        /* 300 tokens of 256 bytes per fragment: a whole granule and a partial one. */
        if (TRY(m, ortmem_kv_seq_append(parent.s, 300))) {
            parent.len = 300;
            write_tokens(&t, &parent, 0, 300, 80);
        }
    }
    for (int round = 0; round < 4; round++) {
        memset(&q, 0, sizeof q);
        bool fork = round >= 2 && parent.s && parent.len;
        st = fork ? ortmem_kv_seq_fork(parent.s, &q.s) : ortmem_kv_seq_create(t.cache, &q.s);
        if (!TRY(m, st))
            continue;
        if (fork) {
            q.len = parent.len;
            memcpy(q.seeds, parent.seeds, sizeof q.seeds);
        }
        uint64_t n = 90 + 40 * (uint64_t)round;
        if (TRY(m, ortmem_kv_seq_append(q.s, n))) {
            for (uint64_t k = q.len; k < q.len + n; k++)
                q.seeds[k] = 0;
            q.len += n;
            m->corruptions += bad_rows(&t, &q); /* nothing of an earlier sequence */
            write_tokens(&t, &q, q.len - n, q.len, 81 + (uint32_t)round);
        }
        m->corruptions += bad_rows(&t, &q);
        st = ortmem_kv_seq_destroy(q.s);
        if (st != ORTMEM_OK) {
            m->failures++;
            cr_assert_eq(st, ORTMEM_E_QUARANTINED, "%s", ortmem_last_error());
        }
    }
    m->warm_hits = kv_stats(t.cache).warm_hits;
    if (parent.s) {
        m->corruptions += bad_rows(&t, &parent);
        if (ortmem_kv_seq_destroy(parent.s) != ORTMEM_OK)
            m->failures++;
    }
    st = ortmem_kv_cache_destroy(t.cache);
    if (st != ORTMEM_OK) {
        m->failures++;
        cr_assert_eq(st, ORTMEM_E_QUARANTINED, "%s: %s", ortmem_status_str(st),
                     ortmem_last_error());
    }
    OK(ortmem_authority_destroy(t.authority));
    *quarantined_reported = stats_of(b).quarantined_bytes;
}

Test(kv_warm, fault_sweep_over_warm_reuse_ends_at_the_baseline_or_the_reported_quarantine,
     .timeout = 240)
{
    ortmem_backend *cpu = test_backend();
    ortmem_backend *clean = fault_on(cpu, 0);
    fault_run m;
    uint64_t quarantined = 0;
    warm_workload(clean, &m, &quarantined);
    cr_assert_eq(m.failures, 0, "clean run failed: %s", ortmem_last_error());
    cr_assert_eq(m.corruptions, 0);
    uint64_t total = 0;
    OK(ortmem_fault_backend_counts(clean, &total, NULL));
    ortmem_vmm_stats s = stats_of(clean);
    cr_assert_gt(s.calls[ORTMEM_OP_MEMSET_ASYNC], 0, "the clears are in the workload");
    cr_assert_gt(s.calls[ORTMEM_OP_COPY_ASYNC], 0, "and a fork's copies");
    cr_assert_eq(m.warm_hits, 2, "the second plain sequence and the second fork");
    cr_assert_eq(s.owned_bytes, 0);
    OK(ortmem_backend_destroy(clean));
    OK(ortmem_backend_destroy(cpu));
    for (uint64_t n = 1; n <= total; n++) {
        cpu = test_backend();
        ortmem_backend *f = fault_on(cpu, n);
        warm_workload(f, &m, &quarantined);
        uint64_t injected = 0;
        OK(ortmem_fault_backend_counts(f, NULL, &injected));
        cr_assert_eq(injected, 1, "call %llu was reached and failed", (unsigned long long)n);
        cr_assert_eq(m.corruptions, 0, "call %llu: data corrupted", (unsigned long long)n);
        s = stats_of(f);
        cr_assert_eq(s.owned_bytes, s.quarantined_bytes, "call %llu: owned %llu quarantined %llu",
                     (unsigned long long)n, (unsigned long long)s.owned_bytes,
                     (unsigned long long)s.quarantined_bytes);
        cr_assert_eq(s.owned_bytes, quarantined);
        if (s.quarantined_bytes == 0) {
            cr_assert_eq(s.mapped_bytes, 0, "call %llu", (unsigned long long)n);
            cr_assert_eq(s.reserved_va_bytes, 0, "call %llu", (unsigned long long)n);
        } else {
            cr_assert_gt(m.failures, 0, "call %llu: a quarantine is reported",
                         (unsigned long long)n);
        }
        (void)ortmem_backend_destroy(f);
        (void)ortmem_backend_destroy(cpu);
    }
}

/* ---- threads ----
 * Workers create, fork, grow, check and destroy sequences while another
 * holder's grants press on the budget: warm takes, finishes and pressure
 * releases race. No assertion runs off the main thread: workers count. */

typedef struct race {
    kvw *t;
    ortmem_kv_seq *parent; /* 100 tokens of seed 1, never changed */
    ortmem_holder *other;
    uint32_t id;
    _Atomic uint64_t *bad, *failures, *done;
} race;

/* Rows of tokens [from, to) of s that are not seed's bytes (0: zeros). */
static uint64_t race_check(const kvw *t, ortmem_kv_seq *s, uint64_t from, uint64_t to,
                           uint32_t seed, bool write)
{
    uint64_t bad = 0;
    for (uint32_t l = 0; l < t->geometry.layers; l++) {
        for (int v = 0; v < 2; v++) {
            ortmem_kv_binding b = {.struct_size = sizeof b};
            if (ortmem_kv_seq_binding(s, l, v, &b) != ORTMEM_OK)
                return 1;
            for (uint32_t h = 0; h < t->geometry.kv_heads; h++) {
                for (uint64_t tok = from; tok < to; tok++) {
                    volatile uint8_t *row = row_at(&b, h, tok);
                    for (uint64_t i = 0; i < t->head_bytes; i++) {
                        uint8_t want = seed ? row_byte(seed, 2ULL * l + (uint64_t)v, h, tok, i) : 0;
                        if (write)
                            row[i] = want;
                        else if (row[i] != want) {
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

static void *race_worker(void *arg)
{
    race *r = arg;
    uint64_t x = r->id * 0x9e3779b97f4a7c15ULL + 1;
    for (int round = 0; round < 120; round++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        bool fork = round % 2;
        uint64_t n = 10 + (x >> 33) % 300;
        uint32_t seed = r->id * 1000 + (uint32_t)round + 2;
        if (round % 10 == 5) { /* a prewarm among the takes, finishes and pressure */
            ortmem_status pw = fork ? ortmem_kv_seq_prewarm_forks(r->parent, 2, 100 + n)
                                    : ortmem_kv_cache_prewarm(r->t->cache, 2, n);
            *r->failures += pw != ORTMEM_OK && pw != ORTMEM_E_BUDGET && pw != ORTMEM_E_RANGE;
        }
        ortmem_kv_seq *s = NULL;
        ortmem_status st =
            fork ? ortmem_kv_seq_fork(r->parent, &s) : ortmem_kv_seq_create(r->t->cache, &s);
        if (st != ORTMEM_OK) {
            *r->failures += st != ORTMEM_E_BUDGET;
            continue;
        }
        uint64_t base = fork ? 100 : 0;
        if (fork)
            *r->bad += race_check(r->t, s, 0, base, 1, false);
        st = ortmem_kv_seq_append(s, n);
        if (st == ORTMEM_OK) {
            *r->bad += race_check(r->t, s, base, base + n, 0, false); /* nothing old */
            race_check(r->t, s, base, base + n, seed, true);
            *r->bad += race_check(r->t, s, base, base + n, seed, false);
        } else {
            *r->failures += st != ORTMEM_E_BUDGET;
        }
        *r->failures += ortmem_kv_seq_destroy(s) != ORTMEM_OK;
    }
    (*r->done)++;
    return NULL;
}

static void *race_pressure(void *arg)
{
    race *r = arg;
    uint64_t x = 7;
    while (*r->done < 4) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        uint64_t want = (4 + (x >> 33) % 24) * G;
        ortmem_grant *grant = NULL;
        if (ortmem_grant_prepare(r->other, want, &grant) != ORTMEM_OK)
            continue;
        if (ortmem_grant_charge(grant, want) != ORTMEM_OK)
            (*r->failures)++;
        else if (ortmem_holder_refund(r->other, want) != ORTMEM_OK)
            (*r->failures)++;
    }
    return NULL;
}

Test(kv_warm, takes_finishes_and_pressure_race_without_a_leak_or_a_stale_byte, .timeout = 120)
{
    kvw t;
    env_open(&t, 48 * G, warm_options(ORTMEM_KV_SEQ_MAJOR));
    ortmem_kv_seq *parent = NULL;
    OK(ortmem_kv_seq_create(t.cache, &parent));
    OK(ortmem_kv_seq_append(parent, 100));
    cr_assert_eq(race_check(&t, parent, 0, 100, 1, true), 0);
    ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
    ho.name = "engine";
    ho.priority = 10;
    ortmem_holder *other = NULL;
    OK(ortmem_holder_register(t.authority, &ho, &other));
    _Atomic uint64_t bad = 0, failures = 0, done = 0;
    race r[5];
    pthread_t th[5];
    for (uint32_t i = 0; i < 5; i++) {
        r[i] = (race){&t, parent, other, i + 1, &bad, &failures, &done};
        cr_assert_eq(pthread_create(&th[i], NULL, i < 4 ? race_worker : race_pressure, &r[i]), 0);
    }
    for (int i = 0; i < 5; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(bad, 0, "%llu rows not as written", (unsigned long long)bad);
    cr_assert_eq(failures, 0, "%llu unexpected failures", (unsigned long long)failures);
    cr_assert_eq(race_check(&t, parent, 0, 100, 1, false), 0);
    ortmem_kv_stats st = kv_stats(t.cache);
    cr_assert_gt(st.warm_hits, 0);
    cr_assert_gt(st.warm_prewarmed, 0);
    cr_assert_eq(st.sequences, 1);
    assert_ledger_exact(&t, "after the race");
    /* What the workers left warm goes under one more grant that needs it. */
    cr_assert_gt(st.warm_ranges, 0);
    uint64_t free_bytes = 48 * G - stats_of(t.backend).owned_bytes;
    ortmem_grant *grant = NULL;
    OK(ortmem_grant_prepare(other, free_bytes + G, &grant));
    OK(ortmem_grant_charge(grant, free_bytes + G));
    ortmem_kv_stats after = kv_stats(t.cache);
    cr_assert_gt(after.warm_reclaimed_bytes, st.warm_reclaimed_bytes);
    cr_assert_lt(after.warm_ranges, st.warm_ranges);
    OK(ortmem_holder_refund(other, free_bytes + G)); /* the grant's bytes are not vmm's */
    assert_ledger_exact(&t, "after pressure");
    OK(ortmem_kv_seq_destroy(parent));
    OK(ortmem_holder_unregister(other));
    env_close(&t);
}

/* A take that cannot be completed (a fork's refill copy fails) puts the
 * range back and the sequence starts cold: the call succeeds and loses
 * nothing. */
Test(kv_warm, a_take_whose_refill_fails_keeps_the_range_and_starts_cold)
{
    ortmem_backend *cpu = cpu_backend_with_granule(G), *b = NULL;
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    OK(ortmem_fault_backend_create(cpu, &fo, &b));
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = 256 * G;
    ortmem_authority *auth = NULL;
    OK(ortmem_authority_create(b, &ao, &auth));
    ortmem_kv_cache_options o = warm_options(ORTMEM_KV_TOKEN_MAJOR);
    ortmem_kv_cache *cache = NULL;
    OK(ortmem_kv_cache_create(auth, &o, &cache));
    ortmem_kv_seq *p = NULL, *k = NULL;
    OK(ortmem_kv_seq_create(cache, &p));
    OK(ortmem_kv_seq_append(p, 100)); /* a fork copies the cut extent's live bytes */
    OK(ortmem_kv_seq_fork(p, &k));
    OK(ortmem_kv_seq_destroy(k));
    ortmem_kv_stats before = {.struct_size = sizeof before};
    OK(ortmem_kv_cache_stats(cache, &before));
    cr_assert_eq(before.warm_ranges, 1);
    fo.op = ORTMEM_OP_COPY_ASYNC;
    fo.fail_at = 1; /* the take's refill */
    OK(ortmem_fault_backend_arm(b, &fo));
    OK(ortmem_kv_seq_fork(p, &k));
    ortmem_kv_stats after = {.struct_size = sizeof after};
    OK(ortmem_kv_cache_stats(cache, &after));
    cr_assert_eq(after.warm_ranges, 1, "the range is back on the list");
    cr_assert_eq(after.warm_hits, before.warm_hits, "not taken");
    cr_assert_eq(after.warm_misses, before.warm_misses + 1);
    cr_assert_eq(after.sequences, 2, "the fork started cold");
    OK(ortmem_kv_seq_destroy(k));
    OK(ortmem_kv_seq_destroy(p));
    OK(ortmem_kv_cache_destroy(cache));
    OK(ortmem_authority_destroy(auth));
    cr_assert_eq(stats_of(b).owned_bytes, 0);
    OK(ortmem_backend_destroy(b));
    OK(ortmem_backend_destroy(cpu));
}

/* ---- a cache destroyed while a pressure pass holds its holders ---- */

static ortmem_kv_cache *destroy_in_pass;
static ortmem_status destroy_in_pass_status = ORTMEM_OK;

static uint64_t destroys_the_cache(void *user, uint64_t want)
{
    (void)user;
    (void)want;
    if (destroy_in_pass)
        destroy_in_pass_status = ortmem_kv_cache_destroy(destroy_in_pass);
    return 0;
}

/* An earlier holder's pressure callback destroys the cache while the same
 * pass has already picked kv-warm: the destroy is refused (nothing changes)
 * instead of freeing what kv-warm's callback is about to use; it succeeds
 * once the pass is over. */
Test(kv_warm, a_destroy_inside_a_pressure_pass_that_picked_the_cache_is_refused)
{
    ortmem_backend *b = cpu_backend_with_granule(G);
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = 32 * G;
    ortmem_authority *auth = NULL;
    OK(ortmem_authority_create(b, &ao, &auth));
    ortmem_kv_cache_options o = warm_options(ORTMEM_KV_TOKEN_MAJOR);
    ortmem_kv_cache *cache = NULL;
    OK(ortmem_kv_cache_create(auth, &o, &cache));
    ortmem_kv_seq *x = NULL;
    OK(ortmem_kv_seq_create(cache, &x));
    OK(ortmem_kv_seq_append(x, 192));
    OK(ortmem_kv_seq_destroy(x)); /* one warm range: kv-warm has something to give */
    ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
    ho.name = "first";
    ho.priority = -100; /* asked before kv-warm */
    ho.on_pressure = destroys_the_cache;
    ortmem_holder *first = NULL, *engine = NULL;
    OK(ortmem_holder_register(auth, &ho, &first));
    ortmem_account first_account, engine_account;
    OK(ortmem_holder_account(first, &first_account));
    ortmem_region_options ro = ORTMEM_REGION_OPTIONS_INIT;
    ro.size = 64 * G;
    ro.account = &first_account;
    ortmem_region *rf = NULL, *re = NULL;
    OK(ortmem_region_create(b, &ro, &rf));
    OK(ortmem_region_commit(rf, 0, G));
    ho.name = "engine";
    ho.priority = 10;
    ho.on_pressure = NULL;
    OK(ortmem_holder_register(auth, &ho, &engine));
    OK(ortmem_holder_account(engine, &engine_account));
    ro.account = &engine_account;
    OK(ortmem_region_create(b, &ro, &re));
    destroy_in_pass = cache;
    OK(ortmem_region_commit(re, 0, 28 * G)); /* pressure: "first", then kv-warm */
    destroy_in_pass = NULL;
    cr_assert_eq(destroy_in_pass_status, ORTMEM_E_BUSY, "%s",
                 ortmem_status_str(destroy_in_pass_status));
    ortmem_kv_stats st = {.struct_size = sizeof st};
    OK(ortmem_kv_cache_stats(cache, &st)); /* the cache is whole */
    cr_assert_eq(st.warm_ranges, 0, "kv-warm gave its range in the same pass");
    OK(ortmem_kv_cache_destroy(cache));
    OK(ortmem_region_destroy(re));
    OK(ortmem_region_destroy(rf));
    OK(ortmem_holder_unregister(engine));
    OK(ortmem_holder_unregister(first));
    OK(ortmem_authority_destroy(auth));
    OK(ortmem_backend_destroy(b));
}

/* A parent that rewinds can never match its warm forks again (they map its
 * extents at the old length): they are released at the truncate, and what
 * they alone still mapped leaves the process, not just the list. */
Test(kv_warm, a_parent_truncate_releases_its_warm_forks)
{
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        kvw t;
        env_open(&t, 256 * G, warm_options(layouts[l]));
        const char *name = ortmem_kv_layout_name(layouts[l]);
        wseq *p = wseq_create(&t);
        grow(&t, p, 256, 31);
        ortmem_kv_seq *k = NULL;
        OK(ortmem_kv_seq_fork(p->s, &k));
        OK(ortmem_kv_seq_destroy(k));
        cr_assert_eq(kv_stats(t.cache).warm_ranges, 1, "%s", name);
        OK(ortmem_kv_seq_truncate(p->s, 0));
        p->len = 0;
        cr_assert_eq(kv_stats(t.cache).warm_ranges, 0, "%s: the fork's range went", name);
        cr_assert_eq(holder_report(t.authority, "kv-warm").owned_bytes, 0, "%s", name);
        assert_ledger_exact(&t, "after the truncate");
        wseq_free(p);
        env_close(&t);
    }
}
