/* Residency policies through ortmem_residency_simulate (pure: no memory is
 * touched) and ortmem-residency-sim run as a child on the decode fixture
 * tests/data/decode-small.trace (paths from ORTMEM_RESIDENCY_SIM and
 * ORTMEM_RESIDENCY_TRACE, set by tests/meson.build). */
#include <stdio.h>
#include <stdlib.h>

#include "child.h"
#include "support.h"
#include "tmpdir.h"

#define G2 ((uint64_t)2 << 20)
#define POLICIES ORTMEM_RESIDENCY_POLICY_COUNT

typedef struct fixture {
    const char *name;
    uint32_t count;
    uint64_t bytes[64];
    uint32_t *trace;
    uint64_t length;
    uint64_t step_len; /* accesses per decode step; 0 = not a cyclic order */
} fixture;

/* The tensors of tests/data/decode-small.trace, in its order. */
static void decode_small(fixture *f, uint64_t steps)
{
    static const uint64_t layer[5] = {4096, 3 * MiB, 2 * MiB, 6 * MiB, 5 * MiB};
    memset(f, 0, sizeof *f);
    f->name = "decode-small";
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < 5; k++)
            f->bytes[f->count++] = layer[k];
    f->bytes[f->count++] = 4096;
    f->bytes[f->count++] = 8 * MiB;
    f->step_len = f->count;
    f->length = steps * f->count;
    f->trace = malloc(f->length * sizeof *f->trace);
    for (uint64_t i = 0; i < f->length; i++)
        f->trace[i] = (uint32_t)(i % f->count);
}

/* count tensors of one granule each, read in the same order every step. */
static void equal_loop(fixture *f, uint32_t count, uint64_t steps)
{
    memset(f, 0, sizeof *f);
    f->name = "equal-loop";
    f->count = count;
    for (uint32_t t = 0; t < count; t++)
        f->bytes[t] = G2;
    f->step_len = count;
    f->length = steps * count;
    f->trace = malloc(f->length * sizeof *f->trace);
    for (uint64_t i = 0; i < f->length; i++)
        f->trace[i] = (uint32_t)(i % count);
}

static uint64_t lcg(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return *state >> 33;
}

/* A hot set read often among cold tensors read now and then, sizes of 1 to
 * 3 granules, values from a few KiB to the whole slot (seeded, repeatable). */
static void hot_and_cold(fixture *f, uint64_t seed, bool equal_sizes)
{
    memset(f, 0, sizeof *f);
    f->name = equal_sizes ? "hot-cold-equal" : "hot-cold-mixed";
    f->count = 24;
    uint64_t s = seed;
    for (uint32_t t = 0; t < f->count; t++)
        f->bytes[t] = equal_sizes ? G2 : (lcg(&s) % 3) * G2 + 4096 + lcg(&s) % G2;
    f->length = 600;
    f->trace = malloc(f->length * sizeof *f->trace);
    for (uint64_t i = 0; i < f->length; i++)
        f->trace[i] = (uint32_t)(lcg(&s) % 10 < 7 ? lcg(&s) % 5 : 5 + lcg(&s) % 19);
}

static void fixture_free(fixture *f)
{
    free(f->trace);
    f->trace = NULL;
}

static uint64_t rounded(uint64_t bytes)
{
    return (bytes + G2 - 1) / G2 * G2;
}

static uint64_t weights_of(const fixture *f)
{
    uint64_t w = 0;
    for (uint32_t t = 0; t < f->count; t++)
        w += rounded(f->bytes[t]);
    return w;
}

static uint64_t largest_of(const fixture *f)
{
    uint64_t m = 0;
    for (uint32_t t = 0; t < f->count; t++)
        if (rounded(f->bytes[t]) > m)
            m = rounded(f->bytes[t]);
    return m;
}

/* What every step reported, and the checks that hold at each one. */
typedef struct observed {
    uint64_t budget, steps, evicted, admitted, peak;
    uint64_t *hit_bytes_per_step; /* by decode step, when step_len */
    const fixture *f;
    uint64_t hit_mask_last; /* tensors hit in the last decode step (ids < 64) */
} observed;

static void on_step(void *ctx, const ortmem_residency_step *s)
{
    observed *o = ctx;
    cr_assert_eq(s->pos, o->steps, "steps out of order: %llu after %llu",
                 (unsigned long long)s->pos, (unsigned long long)o->steps);
    cr_assert_leq(s->resident_bytes, o->budget,
                  "%s: %llu resident bytes above the budget %llu at %llu", o->f->name,
                  (unsigned long long)s->resident_bytes, (unsigned long long)o->budget,
                  (unsigned long long)s->pos);
    cr_assert_eq(s->tensor, o->f->trace[s->pos]);
    cr_assert(!(s->hit && (s->admitted || s->evicted)), "a hit admitted or evicted");
    cr_assert(s->admitted || !s->evicted, "evicted for a tensor that streamed");
    if (s->hit && o->hit_bytes_per_step)
        o->hit_bytes_per_step[s->pos / o->f->step_len] += o->f->bytes[s->tensor];
    if (s->hit && o->f->step_len && s->pos >= o->f->length - o->f->step_len)
        o->hit_mask_last |= (uint64_t)1 << s->tensor;
    o->steps++;
    o->evicted += s->evicted;
    o->admitted += (uint64_t)s->admitted;
    if (s->resident_bytes > o->peak)
        o->peak = s->resident_bytes;
}

static ortmem_residency_sim_stats run(const fixture *f, uint64_t budget,
                                      ortmem_residency_policy policy, observed *o)
{
    ortmem_residency_sim_stats s = {.struct_size = sizeof s};
    observed local;
    if (!o)
        o = &local;
    uint64_t *per_step = o == &local ? NULL : o->hit_bytes_per_step;
    memset(o, 0, sizeof *o);
    o->budget = budget;
    o->f = f;
    o->hit_bytes_per_step = per_step;
    OK(ortmem_residency_simulate_steps(f->bytes, f->count, f->trace, f->length, G2, budget, policy,
                                       &s, on_step, o));
    /* The counters agree with each other and with what the steps said. */
    uint64_t trace_bytes = 0;
    for (uint64_t i = 0; i < f->length; i++)
        trace_bytes += f->bytes[f->trace[i]];
    cr_assert_eq(s.accesses, f->length);
    cr_assert_eq(s.hits + s.misses, s.accesses, "%s %s", f->name,
                 ortmem_residency_policy_name(policy));
    cr_assert_eq(s.page_ins + s.streamed, s.misses);
    cr_assert_eq(s.hit_bytes + s.miss_bytes, trace_bytes);
    cr_assert_eq(s.bytes_moved, s.miss_bytes);
    cr_assert_eq(s.evictions, o->evicted);
    cr_assert_eq(s.page_ins, o->admitted);
    cr_assert_eq(s.peak_resident_bytes, o->peak);
    cr_assert_leq(s.peak_resident_bytes, budget);
    cr_assert_eq(s.weights_bytes, weights_of(f));
    cr_assert_eq(o->steps, f->length);
    return s;
}

/* Budgets: a quarter, a half and three quarters of the weights, and a few
 * between, each a whole number of granules and at least the largest tensor. */
static size_t budgets_of(const fixture *f, uint64_t *out)
{
    size_t n = 0;
    uint64_t granules = weights_of(f) / G2;
    for (int pct = 10; pct <= 95; pct += 5) {
        uint64_t b = granules * (uint64_t)pct / 100 * G2;
        if (b >= largest_of(f) && (n == 0 || out[n - 1] != b))
            out[n++] = b;
    }
    return n;
}

Test(offload_policy, names_round_trip)
{
    for (int k = 0; k < POLICIES; k++) {
        ortmem_residency_policy p;
        OK(ortmem_residency_policy_parse(ortmem_residency_policy_name((ortmem_residency_policy)k),
                                         &p));
        cr_assert_eq(p, k);
    }
    cr_assert_str_eq(ortmem_residency_policy_name(ORTMEM_RESIDENCY_LRU), "lru");
    cr_assert_str_eq(ortmem_residency_policy_name(ORTMEM_RESIDENCY_SCAN_RESISTANT),
                     "scan-resistant");
    cr_assert_str_eq(ortmem_residency_policy_name(ORTMEM_RESIDENCY_ADAPTIVE), "adaptive");
    cr_assert_str_eq(ortmem_residency_policy_name(ORTMEM_RESIDENCY_BELADY), "belady");
    ortmem_residency_policy p = ORTMEM_RESIDENCY_LRU;
    EXPECT_STATUS(ortmem_residency_policy_parse("mru", &p), ORTMEM_E_INVALID);
    cr_assert_str_eq(ortmem_residency_policy_name(POLICIES), "unknown");
}

/* Decode reads every tensor once per step in the same order: with more
 * weights than budget LRU evicts exactly the tensor needed next. */
Test(offload_policy, lru_gets_no_hit_on_a_cyclic_order_larger_than_the_budget)
{
    fixture fx[2];
    decode_small(&fx[0], 8);
    equal_loop(&fx[1], 10, 6);
    for (int i = 0; i < 2; i++) {
        uint64_t budgets[32];
        size_t n = budgets_of(&fx[i], budgets);
        cr_assert_geq(n, 3);
        for (size_t b = 0; b < n; b++) {
            ortmem_residency_sim_stats s = run(&fx[i], budgets[b], ORTMEM_RESIDENCY_LRU, NULL);
            cr_assert_eq(s.hits, 0, "%s at %llu: %llu hits", fx[i].name,
                         (unsigned long long)budgets[b], (unsigned long long)s.hits);
            cr_assert_eq(s.page_ins, s.accesses, "LRU admits every miss");
            cr_assert_eq(s.streamed, 0);
            cr_assert_gt(s.evictions, 0);
        }
        /* With room for everything only the first step misses. */
        ortmem_residency_sim_stats all =
            run(&fx[i], weights_of(&fx[i]), ORTMEM_RESIDENCY_LRU, NULL);
        cr_assert_eq(all.misses, fx[i].count);
        cr_assert_eq(all.evictions, 0);
        fixture_free(&fx[i]);
    }
}

/* After the first step the stable set never changes: no page-in, no
 * eviction, and each step hits exactly the set's bytes. */
Test(offload_policy, scan_resistant_keeps_a_stable_subset)
{
    fixture f;
    decode_small(&f, 8);
    uint64_t total = 0;
    for (uint32_t t = 0; t < f.count; t++)
        total += f.bytes[t];
    uint64_t budgets[32];
    size_t n = budgets_of(&f, budgets);
    for (size_t b = 0; b < n; b++) {
        uint64_t per_step[8] = {0};
        observed o = {.hit_bytes_per_step = per_step};
        /* Count what happens after the first step. */
        ortmem_residency_sim_stats s = run(&f, budgets[b], ORTMEM_RESIDENCY_SCAN_RESISTANT, &o);
        /* The subset settles in the first steps (a denser tensor takes the
         * place of less dense ones, a lighter one fills the room left); from
         * the fourth step on nothing moves. */
        ortmem_residency_sim_stats first = {.struct_size = sizeof first};
        OK(ortmem_residency_simulate(f.bytes, f.count, f.trace, 3 * f.step_len, G2, budgets[b],
                                     ORTMEM_RESIDENCY_SCAN_RESISTANT, &first));
        cr_assert_eq(s.evictions, first.evictions, "evictions after the third step at %llu",
                     (unsigned long long)budgets[b]);
        cr_assert_eq(s.page_ins, first.page_ins, "page-ins after the third step");
        for (int k = 4; k < 8; k++)
            cr_assert_eq(per_step[k], per_step[3], "step %d hit %llu bytes, step 3 %llu", k,
                         (unsigned long long)per_step[k], (unsigned long long)per_step[3]);
        cr_assert_gt(per_step[3], 0);
        /* Steady state: each step hits the subset's bytes and misses the rest. */
        uint64_t early_hits = per_step[0] + per_step[1] + per_step[2];
        cr_assert_eq(s.hit_bytes, early_hits + 5 * per_step[3]);
        cr_assert_eq(s.miss_bytes, (3 * total - early_hits) + 5 * (total - per_step[3]));
        /* The subset: the tensors the last step hit; it fits the budget. */
        uint64_t subset_raw = 0, subset_slots = 0;
        for (uint32_t t = 0; t < f.count; t++)
            if (o.hit_mask_last & ((uint64_t)1 << t)) {
                subset_raw += f.bytes[t];
                subset_slots += rounded(f.bytes[t]);
            }
        cr_assert_eq(subset_raw, per_step[7]);
        cr_assert_leq(subset_slots, budgets[b]);
    }
    /* At 24 MiB the densest tensors (own bytes per slot byte 1) fill it:
     * attn_output and ffn_up of both layers and the head, 24 MiB of 40. */
    uint64_t per_step[8] = {0};
    observed o = {.hit_bytes_per_step = per_step};
    ortmem_residency_sim_stats s = run(&f, 24 * MiB, ORTMEM_RESIDENCY_SCAN_RESISTANT, &o);
    cr_assert_eq(per_step[7], 24 * MiB);
    cr_assert_eq(s.streamed, s.misses - s.page_ins);
    /* Seven steady steps stream the rest: total - 24 MiB each. */
    cr_assert_geq(s.miss_bytes, 7 * (total - 24 * MiB));
    fixture_free(&f);
}

/* Belady's oracle is at least as good as every policy, in bytes, on every
 * fixture and budget; with equal sizes and values in hits too. */
Test(offload_policy, belady_is_at_least_every_policy)
{
    fixture fx[5];
    decode_small(&fx[0], 8);
    equal_loop(&fx[1], 10, 6);
    hot_and_cold(&fx[2], 7, false);
    hot_and_cold(&fx[3], 7, true);
    hot_and_cold(&fx[4], 1234, false);
    for (int i = 0; i < 5; i++) {
        uint64_t budgets[32];
        size_t n = budgets_of(&fx[i], budgets);
        for (size_t b = 0; b < n; b++) {
            ortmem_residency_sim_stats oracle =
                run(&fx[i], budgets[b], ORTMEM_RESIDENCY_BELADY, NULL);
            for (int k = 0; k < ORTMEM_RESIDENCY_BELADY; k++) {
                ortmem_residency_sim_stats s =
                    run(&fx[i], budgets[b], (ortmem_residency_policy)k, NULL);
                cr_assert_geq(oracle.hit_bytes, s.hit_bytes,
                              "%s at %llu MiB: belady hit %llu bytes, %s %llu", fx[i].name,
                              (unsigned long long)(budgets[b] / MiB),
                              (unsigned long long)oracle.hit_bytes,
                              ortmem_residency_policy_name((ortmem_residency_policy)k),
                              (unsigned long long)s.hit_bytes);
                if (i == 1 || i == 3)
                    cr_assert_geq(oracle.hits, s.hits);
            }
        }
        fixture_free(&fx[i]);
    }
}

/* The most hits any schedule gets (equal sizes, bypass allowed): a search
 * over resident sets, 4 tensors, room for cap of them. */
static uint64_t optimum_hits(const uint32_t *trace, uint64_t len, uint32_t tensors, uint32_t cap)
{
    int64_t best[16], next[16];
    for (int m = 0; m < 16; m++)
        best[m] = m == 0 ? 0 : -1;
    for (uint64_t i = 0; i < len; i++) {
        for (int m = 0; m < 16; m++)
            next[m] = -1;
        uint32_t t = trace[i];
        for (int m = 0; m < (1 << tensors); m++) {
            if (best[m] < 0)
                continue;
            if (m & (1 << t)) {
                if (best[m] + 1 > next[m])
                    next[m] = best[m] + 1;
                continue;
            }
            /* A miss: keep any subset of the set, with or without t. */
            for (int keep = m;; keep = (keep - 1) & m) {
                int with = keep | (1 << t);
                if (best[m] > next[keep])
                    next[keep] = best[m];
                if ((uint32_t)__builtin_popcount(with) <= cap && best[m] > next[with])
                    next[with] = best[m];
                if (keep == 0)
                    break;
            }
        }
        memcpy(best, next, sizeof best);
    }
    int64_t most = 0;
    for (int m = 0; m < 16; m++)
        if (best[m] > most)
            most = best[m];
    return (uint64_t)most;
}

Test(offload_policy, belady_is_optimal_for_equal_sizes)
{
    uint64_t bytes[4] = {G2, G2, G2, G2};
    uint32_t trace[14];
    uint64_t seed = 99;
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 14; i++)
            trace[i] = (uint32_t)(lcg(&seed) % 4);
        for (uint32_t cap = 1; cap <= 3; cap++) {
            ortmem_residency_sim_stats s = {.struct_size = sizeof s};
            OK(ortmem_residency_simulate(bytes, 4, trace, 14, G2, cap * G2, ORTMEM_RESIDENCY_BELADY,
                                         &s));
            cr_assert_eq(s.hits, optimum_hits(trace, 14, 4, cap), "round %d, room for %u", round,
                         cap);
        }
    }
}

Test(offload_policy, bad_input_is_a_status_with_the_numbers)
{
    fixture f;
    decode_small(&f, 2);
    ortmem_residency_sim_stats s, before;
    memset(&s, 0xab, sizeof s);
    s.struct_size = sizeof s;
    before = s;
    /* The budget below the largest tensor (the 8 MiB head). */
    EXPECT_STATUS(ortmem_residency_simulate(f.bytes, f.count, f.trace, f.length, G2, 6 * MiB,
                                            ORTMEM_RESIDENCY_LRU, &s),
                  ORTMEM_E_RANGE);
    cr_assert_not_null(strstr(ortmem_last_error(), "6291456"), "%s", ortmem_last_error());
    cr_assert_not_null(strstr(ortmem_last_error(), "8388608"), "%s", ortmem_last_error());
    /* A trace id past the tensors. */
    f.trace[5] = f.count;
    EXPECT_STATUS(ortmem_residency_simulate(f.bytes, f.count, f.trace, f.length, G2, 64 * MiB,
                                            ORTMEM_RESIDENCY_BELADY, &s),
                  ORTMEM_E_RANGE);
    cr_assert_not_null(strstr(ortmem_last_error(), "position 5 names tensor 12"), "%s",
                       ortmem_last_error());
    f.trace[5] = 5;
    /* A tensor of zero bytes. */
    f.bytes[3] = 0;
    EXPECT_STATUS(ortmem_residency_simulate(f.bytes, f.count, f.trace, f.length, G2, 64 * MiB,
                                            ORTMEM_RESIDENCY_SCAN_RESISTANT, &s),
                  ORTMEM_E_INVALID);
    cr_assert_not_null(strstr(ortmem_last_error(), "tensor 3 has 0 bytes"), "%s",
                       ortmem_last_error());
    f.bytes[3] = 6 * MiB;
    EXPECT_STATUS(ortmem_residency_simulate(f.bytes, f.count, f.trace, f.length, 0, 64 * MiB,
                                            ORTMEM_RESIDENCY_LRU, &s),
                  ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_residency_simulate(f.bytes, f.count, f.trace, f.length, G2, 64 * MiB,
                                            (ortmem_residency_policy)POLICIES, &s),
                  ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_residency_simulate(NULL, f.count, f.trace, f.length, G2, 64 * MiB,
                                            ORTMEM_RESIDENCY_LRU, &s),
                  ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_residency_simulate(f.bytes, 0, f.trace, f.length, G2, 64 * MiB,
                                            ORTMEM_RESIDENCY_LRU, &s),
                  ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_residency_simulate(f.bytes, f.count, NULL, f.length, G2, 64 * MiB,
                                            ORTMEM_RESIDENCY_LRU, &s),
                  ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_residency_simulate(f.bytes, f.count, f.trace, f.length, G2, 64 * MiB,
                                            ORTMEM_RESIDENCY_LRU, NULL),
                  ORTMEM_E_INVALID);
    uint64_t huge[2] = {UINT64_MAX - 5, UINT64_MAX - 5};
    uint32_t both[2] = {0, 1};
    EXPECT_STATUS(
        ortmem_residency_simulate(huge, 2, both, 2, G2, UINT64_MAX, ORTMEM_RESIDENCY_LRU, &s),
        ORTMEM_E_OVERFLOW);
    cr_assert_arr_eq(&s, &before, sizeof s, "a failed simulation wrote its stats");
    /* A failed host allocation is a status too, and leaves the stats. */
    for (int k = 0; k < POLICIES; k++) {
        for (uint64_t at = 1; at <= 8; at++) {
            ortmem_alloc_fault(at, 0);
            ortmem_status st = ortmem_residency_simulate(f.bytes, f.count, f.trace, f.length, G2,
                                                         16 * MiB, (ortmem_residency_policy)k, &s);
            ortmem_alloc_fault(0, 0);
            cr_assert(st == ORTMEM_OK || st == ORTMEM_E_NOMEM, "%s", ortmem_status_str(st));
            if (st == ORTMEM_E_NOMEM)
                cr_assert_arr_eq(&s, &before, sizeof s);
            s = before;
        }
    }
    fixture_free(&f);
}

/* ---- ortmem-residency-sim ---- */

static void make_tmpdir(void)
{
    tmpdir_make("ortmem-residency-sim");
}

TestSuite(residency_sim_tool, .init = make_tmpdir, .fini = tmpdir_remove);

static child_result sim_tool(const char *const *args, const char *const *env)
{
    const char *exe = getenv("ORTMEM_RESIDENCY_SIM");
    cr_assert(exe && *exe, "ORTMEM_RESIDENCY_SIM is not set (tests/meson.build sets it)");
    return child_run(exe, args, env);
}

static const char *fixture_path(void)
{
    const char *p = getenv("ORTMEM_RESIDENCY_TRACE");
    cr_assert(p && *p, "ORTMEM_RESIDENCY_TRACE is not set (tests/meson.build sets it)");
    return p;
}

/* The run object of policy at budget_percent in the report. */
static const char *run_of(const char *json, const char *policy, int percent)
{
    char key[128];
    snprintf(key, sizeof key, "{\"policy\": \"%s\", \"budget_percent\": %d,", policy, percent);
    const char *at = strstr(json, key);
    cr_assert_not_null(at, "no %s in:\n%.3000s", key, json);
    return at;
}

static double number_in(const char *from, const char *key)
{
    char pattern[96];
    snprintf(pattern, sizeof pattern, "\"%s\": ", key);
    const char *at = strstr(from, pattern);
    const char *end = strchr(from, '}');
    cr_assert(at && at < end, "no \"%s\" in %.300s", key, from);
    return strtod(at + strlen(pattern), NULL);
}

Test(residency_sim_tool, json_matches_the_library_on_the_fixture)
{
    const char *args[] = {fixture_path(), "--json", NULL};
    child_result r = sim_tool(args, NULL);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    cr_assert_not_null(strstr(r.out, "\"tensors\": 12,"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "\"accesses\": 96,"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "\"weights_bytes\": 52428800,"), "%s", r.out);
    fixture f;
    decode_small(&f, 8);
    static const int percents[3] = {25, 50, 75};
    for (int p = 0; p < 3; p++) {
        uint64_t budget = 25 * (uint64_t)percents[p] / 100 * G2;
        for (int k = 0; k < POLICIES; k++) {
            const char *name = ortmem_residency_policy_name((ortmem_residency_policy)k);
            const char *at = run_of(r.out, name, percents[p]);
            ortmem_residency_sim_stats s = run(&f, budget, (ortmem_residency_policy)k, NULL);
            cr_assert_eq((uint64_t)number_in(at, "budget_bytes"), budget);
            cr_assert_eq((uint64_t)number_in(at, "hits"), s.hits, "%s %d%%", name, percents[p]);
            cr_assert_eq((uint64_t)number_in(at, "hit_bytes"), s.hit_bytes);
            cr_assert_eq((uint64_t)number_in(at, "page_ins"), s.page_ins);
            cr_assert_eq((uint64_t)number_in(at, "evictions"), s.evictions);
            cr_assert_eq((uint64_t)number_in(at, "bytes_moved"), s.bytes_moved);
            cr_assert_eq((uint64_t)number_in(at, "streamed"), s.streamed);
            double rate = (double)s.hit_bytes / (double)(s.hit_bytes + s.miss_bytes);
            cr_assert_float_eq(number_in(at, "byte_hit_rate"), rate, 1e-6);
            if (k == ORTMEM_RESIDENCY_LRU)
                cr_assert_eq(s.hits, 0);
            if (k == ORTMEM_RESIDENCY_BELADY)
                cr_assert_float_eq(number_in(at, "of_belady"), 1.0, 1e-9);
            else
                cr_assert_leq(number_in(at, "of_belady"), 1.0 + 1e-9);
        }
    }
    fixture_free(&f);
    child_result_free(&r);
}

Test(residency_sim_tool, table_and_budgets)
{
    const char *args[] = {fixture_path(), "--budgets", "20,100", NULL};
    child_result r = sim_tool(args, NULL);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    cr_assert_not_null(strstr(r.out, "of Belady"), "%s", r.out);
    /* 20% of 25 granules is 5: 10 MiB, above the 8 MiB head. At 100% LRU
     * misses only the first step. */
    cr_assert_not_null(strstr(r.out, "lru                 20%        10.0     0.00%"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "lru                100%        50.0"), "%s", r.out);
    child_result_free(&r);
}

Test(residency_sim_tool, bad_input_exits_2_with_one_line)
{
    const char *bad = tmp_path("bad.trace");
    write_file(bad, "ortmem-residency-trace 1\ntensor a 10\naccess a b\n");
    const char *a1[] = {bad, NULL};
    child_result r = sim_tool(a1, NULL);
    cr_assert_eq(r.status, 2);
    cr_assert_not_null(strstr(r.err, "line 3: tensor 'b' is not declared"), "%s", r.err);
    cr_assert_str_eq(r.out, "");
    child_result_free(&r);
    const char *a2[] = {fixture_path(), "--budgets", "0", NULL};
    r = sim_tool(a2, NULL);
    cr_assert_eq(r.status, 2);
    child_result_free(&r);
    const char *a3[] = {NULL};
    r = sim_tool(a3, NULL);
    cr_assert_eq(r.status, 2);
    cr_assert_not_null(strstr(r.err, "no trace given"), "%s", r.err);
    child_result_free(&r);
    /* A budget below the largest tensor is reported, not run. */
    const char *a4[] = {fixture_path(), "--budgets", "10", "--json", NULL};
    r = sim_tool(a4, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.out, "\"ran\": false"), "%s", r.out);
    child_result_free(&r);
}

Test(residency_sim_tool, plot_draws_or_is_skipped_without_gnuplot)
{
    const char *svg = tmp_path("hit-rate.svg");
    const char *args[] = {fixture_path(), "--plot", svg, "--points", "8", NULL};
    /* Without gnuplot on PATH: a message, and the table still comes. */
    const char *no_path[] = {"PATH=/nonexistent", NULL};
    child_result r = sim_tool(args, no_path);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "--plot skipped: gnuplot is not installed"), "%s", r.err);
    cr_assert_not_null(strstr(r.out, "of Belady"));
    child_result_free(&r);
    if (!gnuplot_installed()) {
        static const char reason[] = "gnuplot is not installed: the drawing is not tested";
        fprintf(stderr, "SKIP residency_sim_tool::plot: %s\n", reason);
        cr_skip_test("%s", reason);
    }
    r = sim_tool(args, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char *text = read_file(svg);
    cr_assert_not_null(strstr(text, "<svg"), "not an SVG:\n%.300s", text);
    cr_assert_not_null(strstr(text, "belady (oracle, known future)"), "no Belady line");
    cr_assert_not_null(strstr(text, "scan-resistant"));
    free(text);
    child_result_free(&r);
}
