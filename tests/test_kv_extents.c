/* Stable KV growth over physical extents on the CPU backend (64 KiB granules):
 * the backend calls each append makes against ortmem_kv_growth_evaluate's
 * model, an append inside committed extents making no call, the over-commit
 * bound over random operations, prefix sharing and fork over extents keeping
 * every byte, and a failed commit changing nothing. Assertions are on backend
 * call counters, ledgers and bytes. */
#include <stdio.h>
#include <stdlib.h>

#include "support.h"

#define G ((uint64_t)TEST_GRANULE)

static const ortmem_kv_layout layouts[] = {ORTMEM_KV_HEAD_MAJOR, ORTMEM_KV_SEQ_MAJOR,
                                           ORTMEM_KV_TOKEN_MAJOR};
#define LAYOUT_COUNT (sizeof layouts / sizeof layouts[0])

typedef struct env {
    ortmem_backend *cpu, *backend, *host; /* backend: cpu, or a fault wrapper over it */
    ortmem_authority *authority;
    ortmem_kv_cache *cache;
    ortmem_kv_geometry geometry;
    uint64_t capacity, fragments, contig, bpt;
} env;

static ortmem_kv_geometry small_geometry(ortmem_kv_layout layout)
{
    ortmem_kv_geometry g = ORTMEM_KV_GEOMETRY_INIT;
    g.layers = 2;
    g.kv_heads = 2;
    g.head_dim = 64;
    g.dtype = ORTMEM_KV_F16;
    g.layout = layout;
    g.granule = G;
    return g;
}

static ortmem_kv_cache_options options(ortmem_kv_layout layout, uint64_t capacity,
                                       ortmem_extent_growth growth, size_t cap_bytes)
{
    ortmem_kv_cache_options o = ORTMEM_KV_CACHE_OPTIONS_INIT;
    o.geometry = small_geometry(layout);
    o.strategy = ORTMEM_KV_STABLE;
    o.max_context = capacity;
    o.extents.growth = growth;
    o.extents.cap_bytes = cap_bytes;
    /* Growth from cold: a warm take keeps the previous user's extents, so the
     * bound is stated for sequences that start cold (tests/test_kv_warm.c). */
    o.warm_max_bytes = 0;
    return o;
}

/* fault: wrap the CPU backend in a fault injector (disarmed). */
static void env_open(env *e, ortmem_kv_cache_options o, int fault, int host)
{
    memset(e, 0, sizeof *e);
    e->cpu = test_backend();
    e->backend = e->cpu;
    if (fault) {
        ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
        OK(ortmem_fault_backend_create(e->cpu, &fo, &e->backend));
    }
    if (host) {
        e->host = test_backend();
        o.host_backend = e->host;
    }
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = 1024 * MiB;
    OK(ortmem_authority_create(e->backend, &ao, &e->authority));
    OK(ortmem_kv_cache_create(e->authority, &o, &e->cache));
    e->geometry = o.geometry;
    e->capacity = o.max_context;
    ortmem_kv_eval ev;
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    OK(ortmem_kv_evaluate(&e->geometry, 0, e->capacity, 1, 0, 0, &ev));
    e->fragments = ev.fragments;
    e->contig = ev.contiguous_bytes_per_token;
    e->bpt = ev.bytes_per_token;
}

static void env_close(env *e)
{
    OK(ortmem_kv_cache_destroy(e->cache));
    OK(ortmem_authority_destroy(e->authority));
    ortmem_vmm_stats s = stats_of(e->backend);
    cr_assert_eq(s.owned_bytes, 0, "owned %llu after teardown", (unsigned long long)s.owned_bytes);
    cr_assert_eq(s.mapped_bytes, 0);
    if (e->backend != e->cpu)
        OK(ortmem_backend_destroy(e->backend));
    OK(ortmem_backend_destroy(e->cpu));
    if (e->host) {
        cr_assert_eq(stats_of(e->host).owned_bytes, 0);
        OK(ortmem_backend_destroy(e->host));
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

static ortmem_kv_growth_cost model(const env *e, const ortmem_extent_policy *p, uint64_t first,
                                   uint64_t step, uint64_t tokens)
{
    ortmem_kv_growth_cost c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    OK(ortmem_kv_growth_evaluate(&e->geometry, p, e->capacity, first, step, tokens, &c));
    return c;
}

/* The sequence's first byte: layer 0's K binding is at offset 0 in every layout. */
static uint8_t *seq_base(ortmem_kv_seq *s)
{
    ortmem_kv_binding b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    OK(ortmem_kv_seq_binding(s, 0, 0, &b));
    return b.base;
}

static uint8_t token_byte(uint64_t seed, uint64_t f, uint64_t i)
{
    return pattern_byte(seed * 1000003u + f, (size_t)i);
}

/* Writes tokens [from, to) of every fragment with seed's pattern. */
static void write_tokens(const env *e, ortmem_kv_seq *s, uint64_t from, uint64_t to, uint64_t seed)
{
    volatile uint8_t *base = seq_base(s);
    for (uint64_t f = 0; f < e->fragments; f++) {
        uint64_t off, len;
        OK(ortmem_kv_fragment(&e->geometry, e->capacity, f, &off, &len));
        for (uint64_t i = from * e->contig; i < to * e->contig; i++)
            base[off + i] = token_byte(seed, f, i);
    }
}

/* Bytes of tokens [from, to) that differ from seed's pattern. */
static uint64_t bad_bytes(const env *e, ortmem_kv_seq *s, uint64_t from, uint64_t to, uint64_t seed)
{
    volatile uint8_t *base = seq_base(s);
    uint64_t bad = 0;
    for (uint64_t f = 0; f < e->fragments; f++) {
        uint64_t off, len;
        OK(ortmem_kv_fragment(&e->geometry, e->capacity, f, &off, &len));
        for (uint64_t i = from * e->contig; i < to * e->contig; i++)
            bad += base[off + i] != token_byte(seed, f, i);
    }
    return bad;
}

/* ---- backend calls against the model ---- */

typedef struct calls {
    uint64_t create, map, set_access;
} calls;

static calls calls_of(ortmem_backend *b)
{
    ortmem_vmm_stats s = stats_of(b);
    return (calls){s.calls[ORTMEM_OP_CREATE], s.calls[ORTMEM_OP_MAP],
                   s.calls[ORTMEM_OP_SET_ACCESS]};
}

/* One sequence grown by a first append then steps: after every append the
 * creates, maps and set-access calls so far equal the model's for the same
 * appends, and so do the extents and the committed bytes. */
static void growth_matches_model(ortmem_kv_layout layout, uint64_t capacity,
                                 ortmem_extent_growth growth, size_t cap_bytes, uint64_t first,
                                 uint64_t step, int zero_tail)
{
    env e;
    ortmem_kv_cache_options o = options(layout, capacity, growth, cap_bytes);
    o.zero_tail = zero_tail; /* clearing the alias unmaps: no create, map or set-access */
    env_open(&e, o, 0, 0);
    uint64_t zero = zero_tail ? G : 0; /* the zero granule, owned and counted once */
    ortmem_extent_policy policy = {sizeof policy, growth, cap_bytes};
    ortmem_kv_seq *s = NULL;
    OK(ortmem_kv_seq_create(e.cache, &s));
    calls before = calls_of(e.backend);
    uint64_t extents0 = stats_of(e.backend).owned_extents;
    const char *what = ortmem_kv_layout_name(layout);
    for (uint64_t len = 0; len < capacity;) {
        uint64_t to = len == 0 ? first : len + step;
        to = to > capacity ? capacity : to;
        OK(ortmem_kv_seq_append(s, to - len));
        len = to;
        ortmem_kv_growth_cost m = model(&e, &policy, first, step, len);
        calls now = calls_of(e.backend);
        cr_assert_eq(now.create - before.create, m.calls_create,
                     "%s growth %d cap %zu at %llu tokens: %llu creates, model %llu", what,
                     (int)growth, cap_bytes, (unsigned long long)len,
                     (unsigned long long)(now.create - before.create),
                     (unsigned long long)m.calls_create);
        cr_assert_eq(now.map - before.map, m.calls_map, "%s at %llu: maps", what,
                     (unsigned long long)len);
        cr_assert_eq(now.set_access - before.set_access, m.calls_set_access,
                     "%s growth %d at %llu: %llu set-access, model %llu", what, (int)growth,
                     (unsigned long long)len,
                     (unsigned long long)(now.set_access - before.set_access),
                     (unsigned long long)m.calls_set_access);
        cr_assert_eq(stats_of(e.backend).owned_extents - extents0, m.extents);
        ortmem_kv_stats st = kv_stats(e.cache);
        cr_assert_eq(st.committed_bytes - zero, m.committed_bytes,
                     "%s at %llu: committed %llu, model %llu", what, (unsigned long long)len,
                     (unsigned long long)st.committed_bytes, (unsigned long long)m.committed_bytes);
        cr_assert_leq(st.overcommit_bytes, st.overcommit_bound_bytes);
        cr_assert_eq(st.overcommit_bound_bytes - zero, m.overcommit_bound_bytes);
    }
    OK(ortmem_kv_seq_destroy(s));
    env_close(&e);
}

Test(kv_extents, handles_per_append_match_growth_evaluate_for_every_layout_and_policy)
{
    for (size_t l = 0; l < LAYOUT_COUNT; l++) {
        /* 4096 tokens: 8, 16 and 64 granules per fragment. */
        growth_matches_model(layouts[l], 4096, ORTMEM_EXTENT_GEOMETRIC, 0, 300, 137, 0);
        growth_matches_model(layouts[l], 4096, ORTMEM_EXTENT_GEOMETRIC, 0, 300, 137, 1);
        growth_matches_model(layouts[l], 4096, ORTMEM_EXTENT_GEOMETRIC, 4 * G, 300, 137, 0);
        growth_matches_model(layouts[l], 4096, ORTMEM_EXTENT_GEOMETRIC, 4 * G, 1, 1, 1);
        growth_matches_model(layouts[l], 4096, ORTMEM_EXTENT_GRANULE, 0, 300, 137, 1);
        growth_matches_model(layouts[l], 4096, ORTMEM_EXTENT_EXACT, 8 * G, 1000, 700, 0);
        /* 1000 tokens: head-major heads start off the granule, so two
         * fragments share a granule. */
        growth_matches_model(layouts[l], 1000, ORTMEM_EXTENT_GEOMETRIC, 0, 100, 61, 0);
        growth_matches_model(layouts[l], 1000, ORTMEM_EXTENT_GRANULE, 0, 100, 61, 0);
    }
}

/* The geometric tail laid past the live end: appends into it make no call of
 * any kind, zero tail on or off. */
Test(kv_extents, an_append_inside_committed_extents_makes_no_backend_call)
{
    for (int zero = 0; zero < 2; zero++) {
        /* Seq-major: 4 fragments of 256 tokens per granule. */
        ortmem_kv_cache_options o = options(ORTMEM_KV_SEQ_MAJOR, 4096, ORTMEM_EXTENT_GEOMETRIC, 0);
        o.zero_tail = zero;
        env e;
        env_open(&e, o, 0, 0);
        ortmem_kv_seq *s = NULL;
        OK(ortmem_kv_seq_create(e.cache, &s));
        OK(ortmem_kv_seq_append(s, 256)); /* one granule per fragment */
        OK(ortmem_kv_seq_append(s, 1));   /* the next extent: 2 granules, tokens 256..767 */
        ortmem_vmm_stats before = stats_of(e.backend);
        cr_assert_eq(before.owned_extents, 8 + (zero ? 1 : 0), "4 fragments x (1 + 2)");
        OK(ortmem_kv_seq_append(s, 511)); /* to 768 tokens: the last one in granule 2 */
        OK(ortmem_kv_seq_append(s, 0));
        ortmem_vmm_stats after = stats_of(e.backend);
        for (int op = 0; op < ORTMEM_OP_COUNT; op++)
            cr_assert_eq(after.calls[op], before.calls[op], "zero tail %d: %s calls %llu -> %llu",
                         zero, ortmem_backend_op_name((ortmem_backend_op)op),
                         (unsigned long long)before.calls[op], (unsigned long long)after.calls[op]);
        OK(ortmem_kv_seq_append(s, 1)); /* token 768: the next extent, 4 granules */
        cr_assert_eq(stats_of(e.backend).calls[ORTMEM_OP_CREATE],
                     before.calls[ORTMEM_OP_CREATE] + 4, "zero tail %d: %llu creates", zero,
                     (unsigned long long)(stats_of(e.backend).calls[ORTMEM_OP_CREATE] -
                                          before.calls[ORTMEM_OP_CREATE]));
        cr_assert_eq(kv_stats(e.cache).committed_bytes, 4 * 7 * G + (zero ? G : 0));
        OK(ortmem_kv_seq_destroy(s));
        env_close(&e);
    }
}

/* ---- the over-commit bound over random operations ---- */

static uint64_t rnd(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

static void check_bound(ortmem_kv_cache *c, const char *op, int step)
{
    ortmem_kv_stats s = kv_stats(c);
    cr_assert_leq(s.overcommit_bytes, s.overcommit_bound_bytes,
                  "after %s (step %d): over-commit %llu > bound %llu", op, step,
                  (unsigned long long)s.overcommit_bytes,
                  (unsigned long long)s.overcommit_bound_bytes);
}

#define SEQS 6

static void random_operations(ortmem_kv_layout layout, uint64_t capacity, size_t cap_bytes,
                              int aligned_extras, uint64_t seed)
{
    ortmem_kv_cache_options o = options(layout, capacity, ORTMEM_EXTENT_GEOMETRIC, cap_bytes);
    o.zero_tail = aligned_extras;
    o.prefix_cache = aligned_extras;
    env e;
    env_open(&e, o, 0, 1);
    ortmem_kv_seq *seqs[SEQS] = {0};
    uint64_t len[SEQS] = {0};
    int out[SEQS] = {0};
    int32_t prompt[1024];
    for (int i = 0; i < 1024; i++)
        prompt[i] = i * 7 + 3;
    uint64_t state = seed;
    for (int step = 0; step < 400; step++) {
        int i = (int)(rnd(&state) % SEQS);
        unsigned op = (unsigned)(rnd(&state) % 8);
        const char *name = "none";
        if (!seqs[i]) {
            uint64_t reused = 0;
            if (aligned_extras && op % 2)
                OK(ortmem_kv_seq_create_with_prompt(e.cache, prompt, 1024, &seqs[i], &reused));
            else
                OK(ortmem_kv_seq_create(e.cache, &seqs[i]));
            len[i] = reused;
            name = "create";
        } else if (out[i]) {
            OK(ortmem_kv_seq_swap_in(seqs[i]));
            out[i] = 0;
            name = "swap in";
        } else if (op <= 2 && len[i] < capacity) {
            uint64_t n = 1 + rnd(&state) % (op == 0 ? 8 : 400);
            n = len[i] + n > capacity ? capacity - len[i] : n;
            OK(ortmem_kv_seq_append(seqs[i], n));
            len[i] += n;
            name = "append";
        } else if (op == 3) {
            uint64_t to = len[i] ? rnd(&state) % (len[i] + 1) : 0;
            OK(ortmem_kv_seq_truncate(seqs[i], to));
            len[i] = to;
            name = "truncate";
        } else if (op == 4) {
            int j = 0;
            while (j < SEQS && seqs[j])
                j++;
            if (j < SEQS) {
                OK(ortmem_kv_seq_fork(seqs[i], &seqs[j]));
                len[j] = len[i];
                name = "fork";
            }
        } else if (op == 5 && len[i]) {
            OK(ortmem_kv_seq_swap_out(seqs[i]));
            out[i] = 1;
            name = "swap out";
        } else if (op == 6 && aligned_extras && len[i] >= 512) {
            ortmem_status st = ortmem_kv_seq_publish(seqs[i], prompt, 1024);
            cr_assert(st == ORTMEM_OK || st == ORTMEM_E_RANGE, "%s", ortmem_last_error());
            name = "publish";
        } else if (op == 7) {
            OK(ortmem_kv_seq_destroy(seqs[i]));
            seqs[i] = NULL;
            out[i] = 0;
            name = "destroy";
        }
        check_bound(e.cache, name, step);
    }
    for (int i = 0; i < SEQS; i++) {
        if (seqs[i])
            OK(ortmem_kv_seq_destroy(seqs[i]));
    }
    env_close(&e);
}

Test(kv_extents, overcommit_stays_within_its_bound_over_random_operations, .timeout = 240)
{
    for (size_t l = 0; l < LAYOUT_COUNT; l++) {
        for (uint64_t seed = 1; seed <= 3; seed++) {
            random_operations(layouts[l], 2048, 4 * G, 1, seed * 0x9e3779b9ULL);
            random_operations(layouts[l], 2048, 0, 1, seed * 0x85ebca6bULL);
            random_operations(layouts[l], 1000, 2 * G, 0, seed * 0xc2b2ae35ULL);
        }
    }
}

/* ---- prefix sharing and fork over extents ---- */

/* Extents of the live tokens that are mapped whole in both: every granule
 * they map in the child is the parent's (mappers 2); the others are private
 * copies of exactly the live granules. */
Test(kv_extents, fork_shares_whole_live_extents_copies_the_cut_one_and_keeps_every_byte)
{
    for (size_t l = 0; l < LAYOUT_COUNT; l++) {
        env e;
        env_open(&e, options(layouts[l], 4096, ORTMEM_EXTENT_GEOMETRIC, 4 * G), 0, 0);
        const char *what = ortmem_kv_layout_name(layouts[l]);
        ortmem_kv_seq *parent = NULL, *child = NULL;
        OK(ortmem_kv_seq_create(e.cache, &parent));
        /* Growth 1, 2, 4 granules... then a cut extent at the live end. */
        uint64_t len = 0;
        for (uint64_t n = 1; len + n <= 1700; n = n * 2 + 13) {
            OK(ortmem_kv_seq_append(parent, n));
            len += n;
        }
        write_tokens(&e, parent, 0, len, 11);
        ortmem_kv_stats s0 = kv_stats(e.cache);
        OK(ortmem_kv_seq_fork(parent, &child));
        ortmem_kv_stats s1 = kv_stats(e.cache);
        cr_assert_gt(s1.shared_granules, 0, "%s: whole live extents are shared", what);
        cr_assert_eq(bad_bytes(&e, child, 0, len, 11), 0, "%s: the child reads the parent's bytes",
                     what);
        /* Every live byte of the child is in a shared extent (mapped by both,
         * counted twice) or in a private granule copied from the parent; the
         * private granules are exactly the live ones of the extents the live
         * end cuts. */
        uint64_t shared_bytes = s1.shared_granules / 2 * G;
        uint64_t child_private = s1.committed_bytes - s0.committed_bytes;
        uint64_t copied = s1.cow_copied_bytes - s0.cow_copied_bytes;
        ortmem_kv_eval ev;
        memset(&ev, 0, sizeof ev);
        ev.struct_size = sizeof ev;
        OK(ortmem_kv_evaluate(&e.geometry, len, e.capacity, 1, 0, 0, &ev));
        cr_assert_eq(shared_bytes + copied, len * e.bpt, "%s: %llu shared + %llu copied, %llu live",
                     what, (unsigned long long)shared_bytes, (unsigned long long)copied,
                     (unsigned long long)(len * e.bpt));
        cr_assert_eq(child_private + shared_bytes, ev.committed_bytes,
                     "%s: private %llu + shared %llu = the live granules %llu", what,
                     (unsigned long long)child_private, (unsigned long long)shared_bytes,
                     (unsigned long long)ev.committed_bytes);
        cr_assert_gt(child_private, 0, "%s: the extent the live end cuts is copied", what);
        cr_assert_eq(s1.mapped_bytes - s0.mapped_bytes, ev.committed_bytes);
        /* Writes never leak either way. */
        OK(ortmem_kv_seq_append(child, 300));
        write_tokens(&e, child, len, len + 300, 12);
        OK(ortmem_kv_seq_append(parent, 200));
        write_tokens(&e, parent, len, len + 200, 13);
        OK(ortmem_kv_seq_truncate(parent, len / 3));
        OK(ortmem_kv_seq_append(parent, 100));
        write_tokens(&e, parent, len / 3, len / 3 + 100, 14);
        cr_assert_eq(bad_bytes(&e, child, 0, len, 11), 0, "%s: child prefix intact", what);
        cr_assert_eq(bad_bytes(&e, child, len, len + 300, 12), 0, "%s: child tail", what);
        cr_assert_eq(bad_bytes(&e, parent, 0, len / 3, 11), 0, "%s: parent prefix", what);
        cr_assert_eq(bad_bytes(&e, parent, len / 3, len / 3 + 100, 14), 0, "%s: parent tail", what);
        OK(ortmem_kv_seq_destroy(parent));
        cr_assert_eq(bad_bytes(&e, child, 0, len, 11), 0, "%s: child after the parent went", what);
        /* Its shared extents are its alone now, still read-only: a rewind
         * writes there without a copy (they become writable whole). */
        uint64_t cow0 = kv_stats(e.cache).cow_copied_bytes;
        OK(ortmem_kv_seq_truncate(child, len / 4));
        OK(ortmem_kv_seq_append(child, 50));
        write_tokens(&e, child, len / 4, len / 4 + 50, 15);
        cr_assert_eq(kv_stats(e.cache).cow_copied_bytes, cow0, "%s: nothing to copy", what);
        cr_assert_eq(bad_bytes(&e, child, 0, len / 4, 11), 0, "%s", what);
        cr_assert_eq(bad_bytes(&e, child, len / 4, len / 4 + 50, 15), 0, "%s", what);
        OK(ortmem_kv_seq_destroy(child));
        cr_assert_eq(kv_stats(e.cache).committed_bytes, 0);
        env_close(&e);
    }
}

/* A published prefix maps the source's whole live extents and holds copies
 * of the live granules of the extent its end cuts; a prompt that starts with
 * it reads the publisher's bytes, and the publisher's later writes stay its
 * own. */
Test(kv_extents, a_published_prefix_over_extents_reads_back_exact_through_the_new_sequence)
{
    for (size_t l = 0; l < LAYOUT_COUNT; l++) {
        ortmem_kv_cache_options o = options(layouts[l], 4096, ORTMEM_EXTENT_GEOMETRIC, 4 * G);
        o.zero_tail = 1;
        o.prefix_cache = 1;
        env e;
        env_open(&e, o, 0, 0);
        const char *what = ortmem_kv_layout_name(layouts[l]);
        int32_t prompt[2048];
        for (int i = 0; i < 2048; i++)
            prompt[i] = i * 31 + 5;
        ortmem_kv_seq *a = NULL, *b = NULL;
        OK(ortmem_kv_seq_create(e.cache, &a));
        OK(ortmem_kv_seq_append(a, 100));
        OK(ortmem_kv_seq_append(a, 1900)); /* extents 1 then a tail the end cuts */
        write_tokens(&e, a, 0, 2000, 21);
        ortmem_kv_stats s0 = kv_stats(e.cache);
        OK(ortmem_kv_seq_publish(a, prompt, 2000));
        ortmem_kv_stats s1 = kv_stats(e.cache);
        cr_assert_eq(s1.prefix_entries, 1);
        uint64_t reused = 0;
        OK(ortmem_kv_seq_create_with_prompt(e.cache, prompt, 2048, &b, &reused));
        cr_assert_gt(reused, 0, "%s", what);
        cr_assert_leq(reused, 2000);
        ortmem_kv_stats s2 = kv_stats(e.cache);
        cr_assert_eq(s2.prefix_tokens_reused, reused);
        cr_assert_gt(s2.prefix_bytes_saved, 0, "%s: whole extents are mapped, not copied", what);
        cr_assert_eq(s2.committed_bytes, s1.committed_bytes, "%s: the new sequence owns nothing",
                     what);
        /* What the entry copied: live bytes of the granules it could not map. */
        cr_assert_leq(s1.cow_copied_bytes - s0.cow_copied_bytes, reused * e.bpt);
        cr_assert_eq(bad_bytes(&e, b, 0, reused, 21), 0, "%s: the prefix reads back exact", what);
        /* The publisher rewinds and writes over its shared extents: copies. */
        OK(ortmem_kv_seq_truncate(a, 10));
        OK(ortmem_kv_seq_append(a, 500));
        write_tokens(&e, a, 10, 510, 22);
        OK(ortmem_kv_seq_append(b, 100));
        write_tokens(&e, b, reused, reused + 100, 23);
        cr_assert_eq(bad_bytes(&e, b, 0, reused, 21), 0, "%s: the prefix stays", what);
        cr_assert_eq(bad_bytes(&e, b, reused, reused + 100, 23), 0);
        cr_assert_eq(bad_bytes(&e, a, 0, 10, 21), 0);
        cr_assert_eq(bad_bytes(&e, a, 10, 510, 22), 0);
        OK(ortmem_kv_seq_destroy(a));
        OK(ortmem_kv_seq_destroy(b));
        env_close(&e);
    }
}

/* ---- a failed commit changes nothing ---- */

typedef struct snapshot {
    ortmem_vmm_stats vmm;
    ortmem_kv_stats kv;
    uint64_t length;
} snapshot;

static snapshot snap(const env *e, ortmem_kv_seq *s)
{
    snapshot n;
    n.vmm = stats_of(e->backend);
    n.kv = kv_stats(e->cache);
    OK(ortmem_kv_seq_length(s, &n.length));
    return n;
}

static void assert_same(const snapshot *a, const snapshot *b, const char *when)
{
    cr_assert_eq(a->length, b->length, "%s: length", when);
    cr_assert_eq(a->vmm.owned_bytes, b->vmm.owned_bytes, "%s: owned %llu -> %llu", when,
                 (unsigned long long)a->vmm.owned_bytes, (unsigned long long)b->vmm.owned_bytes);
    cr_assert_eq(a->vmm.mapped_bytes, b->vmm.mapped_bytes, "%s: mapped", when);
    cr_assert_eq(a->vmm.owned_extents, b->vmm.owned_extents, "%s: extents", when);
    cr_assert_eq(a->vmm.mapped_extents, b->vmm.mapped_extents, "%s: mapped extents", when);
    cr_assert_eq(a->vmm.quarantined_bytes, b->vmm.quarantined_bytes, "%s: quarantined", when);
    cr_assert_eq(a->kv.committed_bytes, b->kv.committed_bytes, "%s: committed", when);
    cr_assert_eq(a->kv.zero_tail_mapped_bytes, b->kv.zero_tail_mapped_bytes, "%s: zero tail", when);
    cr_assert_eq(a->kv.overcommit_bytes, b->kv.overcommit_bytes, "%s: over-commit", when);
}

/* The holders' ledger besides the backend's and the cache's. */
#define HOLDERS 16
typedef struct ledger {
    snapshot at;
    ortmem_holder_report holders[HOLDERS];
} ledger;

static ledger ledger_of(const env *e, ortmem_kv_seq *s)
{
    ledger n;
    memset(&n, 0, sizeof n);
    n.at = snap(e, s);
    ortmem_authority_report ar;
    memset(&ar, 0, sizeof ar);
    ar.struct_size = sizeof ar;
    OK(ortmem_authority_report_get(e->authority, &ar, n.holders, HOLDERS));
    return n;
}

static void assert_same_ledger(const ledger *a, const ledger *b, const char *when)
{
    assert_same(&a->at, &b->at, when);
    for (size_t h = 0; h < HOLDERS; h++) {
        cr_assert_str_eq(a->holders[h].name, b->holders[h].name, "%s: holder %zu", when, h);
        cr_assert_eq(a->holders[h].owned_bytes, b->holders[h].owned_bytes,
                     "%s: holder %s owned %llu -> %llu", when, a->holders[h].name,
                     (unsigned long long)a->holders[h].owned_bytes,
                     (unsigned long long)b->holders[h].owned_bytes);
        cr_assert_eq(a->holders[h].mapped_bytes, b->holders[h].mapped_bytes,
                     "%s: holder %s mapped %llu -> %llu", when, a->holders[h].name,
                     (unsigned long long)a->holders[h].mapped_bytes,
                     (unsigned long long)b->holders[h].mapped_bytes);
    }
    cr_assert_eq(a->at.kv.cow_copied_bytes, b->at.kv.cow_copied_bytes, "%s: copied", when);
    cr_assert_eq(a->at.kv.shared_granules, b->at.kv.shared_granules, "%s: shared", when);
}

/* A parent of 1500 tokens, a fork of it truncated to 600: the fork's next
 * append writes into extents both map, so it commits its planned extents and
 * copies the shared ones. */
static void fork_truncated(env *e, ortmem_kv_seq **parent, ortmem_kv_seq **child)
{
    OK(ortmem_kv_seq_create(e->cache, parent));
    OK(ortmem_kv_seq_append(*parent, 1500));
    write_tokens(e, *parent, 0, 1500, 41);
    OK(ortmem_kv_seq_fork(*parent, child));
    OK(ortmem_kv_seq_truncate(*child, 600));
}

/* The fork's append of fork_truncated, op failing at its nth call; 0 when
 * the append made fewer than nth such calls. Otherwise the ledger, the
 * sharing, the length and every byte are as before, and the same append
 * succeeds once the backend is healthy. */
static uint64_t fork_append_fails_at(ortmem_kv_layout layout, ortmem_backend_op op, uint64_t nth)
{
    const char *what = ortmem_kv_layout_name(layout);
    ortmem_kv_cache_options o = options(layout, 4096, ORTMEM_EXTENT_GEOMETRIC, 4 * G);
    o.zero_tail = 1;
    env e;
    env_open(&e, o, 1, 0);
    ortmem_kv_seq *parent = NULL, *child = NULL;
    fork_truncated(&e, &parent, &child);
    ledger before = ledger_of(&e, child);
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = op;
    fo.fail_at = nth;
    OK(ortmem_fault_backend_arm(e.backend, &fo));
    ortmem_status st = ortmem_kv_seq_append(child, 2000);
    uint64_t counted = 0, injected = 0;
    OK(ortmem_fault_backend_counts(e.backend, &counted, &injected));
    fo.fail_at = 0;
    OK(ortmem_fault_backend_arm(e.backend, &fo));
    if (injected == 0) {
        OK(st);
    } else {
        cr_assert_neq(st, ORTMEM_OK, "%s: %s %llu", what, ortmem_backend_op_name(op),
                      (unsigned long long)nth);
        cr_assert_neq(st, ORTMEM_E_QUARANTINED, "%s", ortmem_last_error());
        char when[96];
        snprintf(when, sizeof when, "%s: %s %llu failed", what, ortmem_backend_op_name(op),
                 (unsigned long long)nth);
        ledger after = ledger_of(&e, child);
        assert_same_ledger(&before, &after, when);
        cr_assert_eq(bad_bytes(&e, child, 0, 600, 41), 0, "%s: the fork's bytes", what);
        cr_assert_eq(bad_bytes(&e, parent, 0, 1500, 41), 0, "%s: the parent's bytes", what);
        OK(ortmem_kv_seq_append(child, 2000));
    }
    write_tokens(&e, child, 600, 2600, 42);
    cr_assert_eq(bad_bytes(&e, child, 0, 600, 41), 0, "%s", what);
    cr_assert_eq(bad_bytes(&e, child, 600, 2600, 42), 0, "%s", what);
    cr_assert_eq(bad_bytes(&e, parent, 0, 1500, 41), 0, "%s: the parent keeps its bytes", what);
    OK(ortmem_kv_seq_destroy(child));
    OK(ortmem_kv_seq_destroy(parent));
    env_close(&e);
    return injected ? counted : 0;
}

/* The Nth create, map or set-access of an append that lays several extents
 * fails, or the unmap that clears the zero alias from the planned granules,
 * or a fork's append fails in its copy-on-write of a shared extent:
 * the ledger, the zero tail and every live byte are as before, and the same
 * append succeeds once the backend is healthy. */
Test(kv_extents, a_failed_commit_changes_nothing)
{
    static const ortmem_backend_op ops[] = {ORTMEM_OP_CREATE, ORTMEM_OP_MAP, ORTMEM_OP_SET_ACCESS,
                                            ORTMEM_OP_UNMAP};
    for (size_t l = 0; l < LAYOUT_COUNT; l++) {
        for (size_t oi = 0; oi < sizeof ops / sizeof ops[0]; oi++) {
            /* One set-access per contiguous run (one fragment lays one run);
             * one unmap per run of zero aliases cleared. */
            uint64_t most = ops[oi] == ORTMEM_OP_CREATE || ops[oi] == ORTMEM_OP_MAP ? 3 : 1;
            for (uint64_t nth = 1; nth <= most; nth++) {
                ortmem_kv_cache_options o =
                    options(layouts[l], 4096, ORTMEM_EXTENT_GEOMETRIC, 4 * G);
                o.zero_tail = 1;
                env e;
                env_open(&e, o, 1, 0);
                ortmem_kv_seq *s = NULL;
                OK(ortmem_kv_seq_create(e.cache, &s));
                OK(ortmem_kv_seq_append(s, 300));
                OK(ortmem_kv_seq_append(s, 1)); /* a geometric tail past the live end */
                write_tokens(&e, s, 0, 301, 31);
                snapshot before = snap(&e, s);
                ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
                fo.op = ops[oi];
                fo.fail_at = nth;
                OK(ortmem_fault_backend_arm(e.backend, &fo));
                ortmem_status st = ortmem_kv_seq_append(s, 1500);
                uint64_t counted = 0, injected = 0;
                OK(ortmem_fault_backend_counts(e.backend, &counted, &injected));
                cr_assert_eq(injected, 1, "%s: the %lluth %s is reached",
                             ortmem_kv_layout_name(layouts[l]), (unsigned long long)nth,
                             ortmem_backend_op_name(ops[oi]));
                cr_assert_neq(st, ORTMEM_OK);
                cr_assert_neq(st, ORTMEM_E_QUARANTINED, "%s", ortmem_last_error());
                fo.fail_at = 0;
                OK(ortmem_fault_backend_arm(e.backend, &fo));
                snapshot after = snap(&e, s);
                assert_same(&before, &after, ortmem_backend_op_name(ops[oi]));
                cr_assert_eq(bad_bytes(&e, s, 0, 301, 31), 0, "the live bytes are intact");
                OK(ortmem_kv_seq_append(s, 1500));
                write_tokens(&e, s, 301, 1801, 32);
                cr_assert_eq(bad_bytes(&e, s, 0, 301, 31), 0);
                cr_assert_eq(bad_bytes(&e, s, 301, 1801, 32), 0);
                OK(ortmem_kv_seq_destroy(s));
                env_close(&e);
            }
        }
        /* A fork's append also copies shared extents (a create and a copy
         * per copied extent, after the planned extents' creates), in one
         * all-or-nothing copy-on-write over every fragment: every create and
         * copy of the append fails once in turn, in every layout. */
        static const ortmem_backend_op cow_ops[] = {ORTMEM_OP_CREATE, ORTMEM_OP_COPY};
        for (size_t oi = 0; oi < sizeof cow_ops / sizeof cow_ops[0]; oi++) {
            cr_assert_gt(fork_append_fails_at(layouts[l], cow_ops[oi], 1), 0,
                         "%s: the append makes a %s", ortmem_kv_layout_name(layouts[l]),
                         ortmem_backend_op_name(cow_ops[oi]));
            for (uint64_t nth = 2; fork_append_fails_at(layouts[l], cow_ops[oi], nth); nth++)
                ;
        }
    }
}

/* The fork's append that needs its planned extents and the copies of the
 * shared ones is refused for the budget: every holder's ledger, the backend's,
 * the sharing, the length and every byte are as before, and the same append
 * succeeds once the limit allows it, each sequence keeping its bytes. */
Test(kv_extents, an_append_refused_for_the_budget_changes_nothing_even_over_shared_extents)
{
    for (size_t l = 0; l < LAYOUT_COUNT; l++) {
        const char *what = ortmem_kv_layout_name(layouts[l]);
        ortmem_kv_cache_options o = options(layouts[l], 4096, ORTMEM_EXTENT_GEOMETRIC, 4 * G);
        o.zero_tail = 1;
        env e;
        env_open(&e, o, 0, 0);
        ortmem_kv_seq *parent = NULL, *child = NULL;
        fork_truncated(&e, &parent, &child);
        /* Room for five more granules: less than the append needs. */
        OK(ortmem_authority_set_limit(e.authority, stats_of(e.backend).owned_bytes + 5 * G, NULL));
        ledger before = ledger_of(&e, child);
        cr_assert_gt(before.at.kv.shared_granules, 0, "%s: the fork shares extents", what);
        ortmem_status st = ortmem_kv_seq_append(child, 2000);
        cr_assert_eq(st, ORTMEM_E_BUDGET, "%s: %s (%s)", what, ortmem_status_str(st),
                     ortmem_last_error());
        ledger after = ledger_of(&e, child);
        assert_same_ledger(&before, &after, what);
        cr_assert_eq(after.at.length, 600, "%s", what);
        cr_assert_eq(bad_bytes(&e, child, 0, 600, 41), 0, "%s: the fork's bytes", what);
        cr_assert_eq(bad_bytes(&e, parent, 0, 1500, 41), 0, "%s: the parent's bytes", what);
        OK(ortmem_authority_set_limit(e.authority, 1024 * MiB, NULL));
        OK(ortmem_kv_seq_append(child, 2000));
        write_tokens(&e, child, 600, 2600, 42);
        cr_assert_gt(kv_stats(e.cache).cow_copied_bytes, before.at.kv.cow_copied_bytes, "%s", what);
        cr_assert_eq(bad_bytes(&e, child, 0, 600, 41), 0, "%s", what);
        cr_assert_eq(bad_bytes(&e, child, 600, 2600, 42), 0, "%s", what);
        cr_assert_eq(bad_bytes(&e, parent, 0, 1500, 41), 0, "%s: the parent keeps its bytes", what);
        OK(ortmem_kv_seq_destroy(child));
        OK(ortmem_kv_seq_destroy(parent));
        env_close(&e);
    }
}

/* Swap-in lays the live granules exactly (extents of at most the cap), so a
 * sequence that had a geometric tail past its end comes back with exactly the
 * granules its tokens touch, byte for byte. */
Test(kv_extents, swap_in_commits_exactly_the_live_granules)
{
    for (size_t l = 0; l < LAYOUT_COUNT; l++) {
        env e;
        env_open(&e, options(layouts[l], 4096, ORTMEM_EXTENT_GEOMETRIC, 4 * G), 0, 1);
        const char *what = ortmem_kv_layout_name(layouts[l]);
        ortmem_kv_seq *s = NULL;
        OK(ortmem_kv_seq_create(e.cache, &s));
        OK(ortmem_kv_seq_append(s, 1000));
        OK(ortmem_kv_seq_append(s, 100)); /* a tail of 4 granules laid past 1100 */
        write_tokens(&e, s, 0, 1100, 41);
        ortmem_kv_eval ev;
        memset(&ev, 0, sizeof ev);
        ev.struct_size = sizeof ev;
        OK(ortmem_kv_evaluate(&e.geometry, 1100, e.capacity, 1, 0, 0, &ev));
        cr_assert_gt(kv_stats(e.cache).committed_bytes, ev.committed_bytes,
                     "%s: the geometric tail reaches past the live granules", what);
        OK(ortmem_kv_seq_swap_out(s));
        cr_assert_eq(kv_stats(e.cache).committed_bytes, 0);
        OK(ortmem_kv_seq_swap_in(s));
        ortmem_kv_stats st = kv_stats(e.cache);
        cr_assert_eq(st.committed_bytes, ev.committed_bytes, "%s: %llu, the live granules %llu",
                     what, (unsigned long long)st.committed_bytes,
                     (unsigned long long)ev.committed_bytes);
        cr_assert_lt(st.overcommit_bytes, e.fragments * G, "under a granule per fragment");
        cr_assert_eq(bad_bytes(&e, s, 0, 1100, 41), 0, "%s: byte for byte", what);
        OK(ortmem_kv_seq_append(s, 100));
        write_tokens(&e, s, 1100, 1200, 42);
        cr_assert_eq(bad_bytes(&e, s, 0, 1100, 41), 0);
        cr_assert_eq(bad_bytes(&e, s, 1100, 1200, 42), 0);
        OK(ortmem_kv_seq_destroy(s));
        env_close(&e);
    }
}
