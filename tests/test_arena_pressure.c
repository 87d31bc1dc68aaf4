/* The arena's default cache and its pressure path: freed granules stay
 * committed up to the watermark, cache_bytes = 0 decommits at once, reclaim
 * gives back the least recently emptied granules first and exactly, and an
 * authority's refusal reclaims an arena's cache through its holder's pressure
 * callback, also when the decommit fails. Granules are 64 KiB; every
 * assertion is on counters and bytes. */
#include <pthread.h>
#include <stdio.h>

#include "support.h"

#define G ((uint64_t)TEST_GRANULE)

/* ---- helpers ---- */

static ortmem_arena *arena_with(ortmem_backend *b, size_t capacity, size_t cache_bytes,
                                const ortmem_account *account)
{
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    /* These tests count backend calls per granule: the per-granule baseline.
     * The extent policies have their own tests (arena_extents). */
    opt.extents.growth = ORTMEM_EXTENT_GRANULE;
    opt.capacity = capacity;
    opt.cache_bytes = cache_bytes;
    opt.account = account;
    ortmem_arena *a = NULL;
    OK(ortmem_arena_create(b, &opt, &a));
    return a;
}

static ortmem_granule_state state_at(ortmem_arena *a, size_t offset)
{
    return granule_info(ortmem_arena_region(a), offset).state;
}

static uint64_t calls(ortmem_backend *b, ortmem_backend_op op)
{
    return stats_of(b).calls[op];
}

static void assert_backend_empty(ortmem_backend *b)
{
    ortmem_vmm_stats v = stats_of(b);
    cr_assert_eq(v.owned_bytes, 0, "owned %llu", (unsigned long long)v.owned_bytes);
    cr_assert_eq(v.mapped_bytes, 0);
    cr_assert_eq(v.reserved_va_bytes, 0);
}

/* ---- the default cache ---- */

TestSuite(arena_default);

Test(arena_default, the_default_arena_keeps_freed_granules_committed)
{
    ortmem_backend *b = test_backend();
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    cr_assert_eq(opt.cache_bytes, ORTMEM_ARENA_CACHE_DEFAULT);
    opt.capacity = 16 * G;
    ortmem_arena *a = NULL;
    OK(ortmem_arena_create(b, &opt, &a));
    cr_assert_eq(arena_stats(a).cache_limit_bytes, 16 * G, "min(capacity, 256 MiB)");
    void *p = alloc_ok(a, 4 * G, 0);
    OK(ortmem_arena_free(a, p));
    ortmem_vmm_stats before = stats_of(b);
    cr_assert_eq(before.calls[ORTMEM_OP_UNMAP], 0, "the free decommitted nothing");
    cr_assert_eq(before.calls[ORTMEM_OP_RELEASE], 0);
    cr_assert_eq(before.mapped_bytes, 4 * G);
    /* Free/alloc cycles reuse the cached granules: no backend call at all. */
    for (int i = 0; i < 8; i++) {
        p = alloc_ok(a, 4 * G, 0);
        OK(ortmem_arena_free(a, p));
    }
    ortmem_vmm_stats after = stats_of(b);
    for (int op = 0; op < ORTMEM_OP_COUNT; op++)
        cr_assert_eq(after.calls[op], before.calls[op], "op %d called during the cycles", op);
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.cached_bytes, 4 * G);
    cr_assert_eq(s.committed_bytes, 4 * G);
    cr_assert_eq(s.reclaimed_bytes, 0);
    OK(ortmem_arena_destroy(a, 0));
    assert_backend_empty(b);
    OK(ortmem_backend_destroy(b));
}

Test(arena_default, the_default_watermark_is_256_mib_and_the_oldest_granules_go_beyond_it)
{
    ortmem_backend *b = test_backend();
    ortmem_arena *a =
        arena_with(b, 2 * ORTMEM_ARENA_CACHE_DEFAULT_MAX, ORTMEM_ARENA_CACHE_DEFAULT, NULL);
    uint64_t limit = ORTMEM_ARENA_CACHE_DEFAULT_MAX;
    cr_assert_eq(arena_stats(a).cache_limit_bytes, limit);
    /* Three separate blocks past the watermark together; freed oldest first. */
    uint8_t *first = alloc_ok(a, 2 * G, G);
    uint8_t *big = alloc_ok(a, limit - 2 * G, G);
    uint8_t *last = alloc_ok(a, 2 * G, G);
    cr_assert_eq(big, first + 2 * G);
    OK(ortmem_arena_free(a, first));
    OK(ortmem_arena_free(a, big));
    cr_assert_eq(arena_stats(a).cached_bytes, limit, "exactly at the watermark");
    cr_assert_eq(calls(b, ORTMEM_OP_UNMAP), 0);
    OK(ortmem_arena_free(a, last));
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.cached_bytes, limit, "bounded by the watermark");
    cr_assert_eq(s.committed_bytes, limit);
    cr_assert_eq(calls(b, ORTMEM_OP_UNMAP), 1, "the two oldest granules, one run");
    cr_assert_eq(state_at(a, 0), ORTMEM_GRANULE_UNMAPPED);
    cr_assert_eq(state_at(a, G), ORTMEM_GRANULE_UNMAPPED);
    cr_assert_eq(state_at(a, 2 * G), ORTMEM_GRANULE_MAPPED);
    cr_assert_eq(state_at(a, limit + G), ORTMEM_GRANULE_MAPPED, "the newest stays");
    OK(ortmem_arena_destroy(a, 0));
    assert_backend_empty(b);
    OK(ortmem_backend_destroy(b));
}

Test(arena_default, an_explicit_watermark_is_kept_and_bounded_by_the_capacity)
{
    ortmem_backend *b = test_backend();
    ortmem_arena *a = arena_with(b, 8 * G, 100 * G, NULL);
    cr_assert_eq(arena_stats(a).cache_limit_bytes, 8 * G);
    OK(ortmem_arena_destroy(a, 0));
    a = arena_with(b, 8 * G, 3 * G + 5, NULL);
    cr_assert_eq(arena_stats(a).cache_limit_bytes, 3 * G, "rounded down to the granule");
    OK(ortmem_arena_destroy(a, 0));
    /* An older caller's options end before cache_bytes: the default applies. */
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    opt.capacity = 8 * G;
    opt.cache_bytes = 0;
    opt.struct_size = offsetof(ortmem_arena_options, cache_bytes);
    OK(ortmem_arena_create(b, &opt, &a));
    cr_assert_eq(arena_stats(a).cache_limit_bytes, 8 * G);
    OK(ortmem_arena_destroy(a, 0));
    OK(ortmem_backend_destroy(b));
}

Test(arena_default, cache_bytes_0_decommits_at_once)
{
    ortmem_backend *b = test_backend();
    ortmem_arena *a = arena_with(b, 16 * G, 0, NULL);
    cr_assert_eq(arena_stats(a).cache_limit_bytes, 0);
    void *p = alloc_ok(a, 4 * G, 0);
    OK(ortmem_arena_free(a, p));
    ortmem_vmm_stats v = stats_of(b);
    cr_assert_eq(v.calls[ORTMEM_OP_UNMAP], 1, "one run");
    cr_assert_eq(v.calls[ORTMEM_OP_RELEASE], 4);
    cr_assert_eq(v.owned_bytes, 0);
    cr_assert_eq(arena_stats(a).cached_bytes, 0);
    p = alloc_ok(a, 4 * G, 0);
    OK(ortmem_arena_free(a, p));
    cr_assert_eq(calls(b, ORTMEM_OP_CREATE), 8, "every cycle creates again");
    OK(ortmem_arena_destroy(a, 0));
    OK(ortmem_backend_destroy(b));
}

/* ---- reclaim ---- */

Test(arena_default, reclaim_gives_back_the_least_recently_emptied_granules_first_and_exactly)
{
    ortmem_backend *b = test_backend();
    ortmem_arena *a = arena_with(b, 16 * G, ORTMEM_ARENA_CACHE_DEFAULT, NULL);
    void *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = alloc_ok(a, G, G); /* granule i */
    /* Emptied in the order 1, 0, 2; granule 3 stays live. */
    OK(ortmem_arena_free(a, p[1]));
    OK(ortmem_arena_free(a, p[0]));
    OK(ortmem_arena_free(a, p[2]));
    uint64_t got = 99;
    OK(ortmem_arena_reclaim(a, 0, &got));
    cr_assert_eq(got, 0);
    OK(ortmem_arena_reclaim(a, G + 1, &got)); /* rounds up to two granules */
    cr_assert_eq(got, 2 * G);
    cr_assert_eq(state_at(a, G), ORTMEM_GRANULE_UNMAPPED, "emptied first");
    cr_assert_eq(state_at(a, 0), ORTMEM_GRANULE_UNMAPPED, "emptied second");
    cr_assert_eq(state_at(a, 2 * G), ORTMEM_GRANULE_MAPPED, "emptied last: still cached");
    cr_assert_eq(calls(b, ORTMEM_OP_UNMAP), 1, "granules 0 and 1: one run");
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.cached_bytes, G);
    cr_assert_eq(s.committed_bytes, 2 * G);
    cr_assert_eq(s.reclaimed_bytes, 2 * G);
    cr_assert_eq(stats_of(b).owned_bytes, 2 * G, "the pool cap is 0: the bytes went back");
    /* More than is cached: what there is, and never a live granule. */
    OK(ortmem_arena_reclaim(a, 100 * G, NULL));
    s = arena_stats(a);
    cr_assert_eq(s.cached_bytes, 0);
    cr_assert_eq(s.committed_bytes, G);
    cr_assert_eq(s.reclaimed_bytes, 3 * G);
    cr_assert_eq(state_at(a, 3 * G), ORTMEM_GRANULE_MAPPED);
    OK(ortmem_arena_reclaim(a, G, &got));
    cr_assert_eq(got, 0);
    OK(ortmem_arena_free(a, p[3]));
    cr_assert_eq(ortmem_arena_pressure(a, UINT64_MAX), G);
    cr_assert_eq(arena_stats(a).reclaimed_bytes, 4 * G);
    cr_assert_eq(stats_of(b).owned_bytes, 0);
    OK(ortmem_arena_destroy(a, 0));
    /* A gone arena: the handle check answers, and pressure reclaims nothing. */
    EXPECT_STATUS(ortmem_arena_reclaim(a, G, &got), ORTMEM_E_HANDLE);
    cr_assert_eq(got, 0);
    cr_assert_eq(ortmem_arena_pressure(a, G), 0);
    EXPECT_STATUS(ortmem_arena_reclaim(NULL, G, NULL), ORTMEM_E_INVALID);
    cr_assert_eq(ortmem_arena_pressure(NULL, G), 0);
    OK(ortmem_backend_destroy(b));
}

/* ---- pressure through an authority ---- */

typedef struct gov {
    ortmem_backend *backend;
    ortmem_authority *authority;
    ortmem_holder *scratch; /* the arena's holder, reclaimable through it */
    ortmem_holder *weights; /* asks for more than is available */
    ortmem_arena *arena;
    ortmem_region *region;
} gov;

/* The arena lays extents by growth (cap 4 granules). */
static gov gov_new_ext(ortmem_backend *backend, uint64_t limit, ortmem_extent_growth growth)
{
    gov g = {.backend = backend};
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = limit;
    OK(ortmem_authority_create(backend, &ao, &g.authority));
    ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
    ho.name = "scratch";
    ho.role = ORTMEM_ROLE_WORKSPACE;
    OK(ortmem_holder_register(g.authority, &ho, &g.scratch));
    ho.name = "weights";
    ho.role = ORTMEM_ROLE_WEIGHTS;
    ho.priority = 10;
    OK(ortmem_holder_register(g.authority, &ho, &g.weights));
    /* The arena charges the holder, so it exists only after it: the
     * callback is set afterwards. */
    ortmem_account acct;
    OK(ortmem_holder_account(g.scratch, &acct));
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    opt.capacity = 16 * G;
    opt.account = &acct;
    opt.extents.growth = growth;
    opt.extents.cap_bytes = 4 * G;
    OK(ortmem_arena_create(backend, &opt, &g.arena));
    OK(ortmem_holder_set_pressure(g.scratch, ortmem_arena_pressure, g.arena));
    OK(ortmem_holder_account(g.weights, &acct));
    ortmem_region_options ro = ORTMEM_REGION_OPTIONS_INIT;
    ro.size = 16 * G;
    ro.account = &acct;
    OK(ortmem_region_create(backend, &ro, &g.region));
    return g;
}

/* The per-granule baseline: these tests count granules. */
static gov gov_new(ortmem_backend *backend, uint64_t limit)
{
    return gov_new_ext(backend, limit, ORTMEM_EXTENT_GRANULE);
}

static void gov_destroy(gov *g)
{
    OK(ortmem_arena_destroy(g->arena, 1));
    ortmem_status st = ortmem_region_destroy(g->region);
    cr_assert(st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED, "%s", ortmem_last_error());
    OK(ortmem_holder_unregister(g->scratch));
    OK(ortmem_holder_unregister(g->weights));
    OK(ortmem_authority_destroy(g->authority));
}

static ortmem_authority_report report_of(ortmem_authority *a)
{
    ortmem_authority_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    OK(ortmem_authority_report_get(a, &r, NULL, 0));
    return r;
}

static ortmem_holder_report holder_report_of(ortmem_holder *h)
{
    ortmem_holder_report r;
    memset(&r, 0, sizeof r);
    OK(ortmem_holder_report_get(h, &r));
    return r;
}

static uint64_t refuse_nothing(void *user, uint64_t want)
{
    (void)user;
    (void)want;
    return 0;
}

TestSuite(arena_pressure);

Test(arena_pressure, set_pressure_is_taken_once)
{
    ortmem_backend *b = test_backend();
    gov g = gov_new(b, 16 * G);
    EXPECT_STATUS(ortmem_holder_set_pressure(g.scratch, ortmem_arena_pressure, g.arena),
                  ORTMEM_E_STATE);
    EXPECT_STATUS(ortmem_holder_set_pressure(g.weights, NULL, NULL), ORTMEM_E_INVALID);
    ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
    ho.name = "given";
    ho.on_pressure = refuse_nothing;
    ortmem_holder *given = NULL;
    OK(ortmem_holder_register(g.authority, &ho, &given));
    EXPECT_STATUS(ortmem_holder_set_pressure(given, ortmem_arena_pressure, g.arena),
                  ORTMEM_E_STATE);
    cr_assert(strstr(ortmem_last_error(), "'given'"), "%s", ortmem_last_error());
    OK(ortmem_holder_unregister(given));
    EXPECT_STATUS(ortmem_holder_set_pressure(given, refuse_nothing, NULL), ORTMEM_E_HANDLE);
    gov_destroy(&g);
    assert_backend_empty(b);
    OK(ortmem_backend_destroy(b));
}

Test(arena_pressure, a_refused_commit_reclaims_the_arena_cache_and_then_succeeds)
{
    ortmem_backend *b = test_backend();
    gov g = gov_new(b, 8 * G);
    void *keep = alloc_ok(g.arena, G, G); /* granule 0 stays live */
    void *p = alloc_ok(g.arena, 4 * G, G);
    OK(ortmem_arena_free(g.arena, p));
    cr_assert_eq(arena_stats(g.arena).cached_bytes, 4 * G);
    ortmem_authority_report r = report_of(g.authority);
    cr_assert_eq(r.owned_bytes, 5 * G, "cached granules stay charged");
    cr_assert_eq(r.available_bytes, 3 * G);
    /* 5 granules for the weights: 2 short, reclaimed from the arena's cache. */
    OK(ortmem_region_commit(g.region, 0, 5 * G));
    r = report_of(g.authority);
    cr_assert_eq(r.owned_bytes, 8 * G);
    cr_assert_eq(r.available_bytes, 0);
    cr_assert_eq(r.pressure_calls, 1);
    cr_assert_eq(r.pressure_reclaimed_bytes, 2 * G);
    cr_assert_eq(r.refusals, 0, "the relieved refusal was not final");
    ortmem_holder_report hs = holder_report_of(g.scratch);
    cr_assert_eq(hs.owned_bytes, 3 * G);
    cr_assert_eq(holder_report_of(g.weights).owned_bytes, 5 * G);
    ortmem_arena_stats s = arena_stats(g.arena);
    cr_assert_eq(s.cached_bytes, 2 * G);
    cr_assert_eq(s.committed_bytes, 3 * G);
    cr_assert_eq(s.reclaimed_bytes, 2 * G);
    cr_assert_eq(s.live_allocations, 1);
    /* Granules 1 and 2 were emptied first (one free, lowest first). */
    cr_assert_eq(state_at(g.arena, G), ORTMEM_GRANULE_UNMAPPED);
    cr_assert_eq(state_at(g.arena, 2 * G), ORTMEM_GRANULE_UNMAPPED);
    cr_assert_eq(state_at(g.arena, 3 * G), ORTMEM_GRANULE_MAPPED);
    ortmem_vmm_stats v = stats_of(b);
    cr_assert_eq(v.owned_bytes, r.owned_bytes, "the backend and the authority agree");
    cr_assert_eq(v.mapped_bytes, r.mapped_bytes);
    /* Nothing cached is left to give for a third request past the limit. */
    OK(ortmem_region_commit(g.region, 5 * G, 2 * G));
    EXPECT_STATUS(ortmem_region_commit(g.region, 7 * G, G), ORTMEM_E_BUDGET);
    cr_assert_eq(arena_stats(g.arena).cached_bytes, 0);
    cr_assert_eq(arena_stats(g.arena).reclaimed_bytes, 4 * G);
    OK(ortmem_arena_free(g.arena, keep));
    gov_destroy(&g);
    assert_backend_empty(b);
    OK(ortmem_backend_destroy(b));
}

typedef struct fault_rig {
    ortmem_backend *cpu;
    ortmem_backend *fault;
} fault_rig;

static fault_rig rig_create(ortmem_backend_op op)
{
    fault_rig rig = {test_backend(), NULL};
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = op;
    OK(ortmem_fault_backend_create(rig.cpu, &fo, &rig.fault));
    return rig;
}

static void rig_arm(fault_rig *rig, ortmem_backend_op op, uint64_t fail_at)
{
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = op;
    fo.fail_at = fail_at;
    OK(ortmem_fault_backend_arm(rig->fault, &fo));
}

static void rig_destroy(fault_rig *rig)
{
    ortmem_status st = ortmem_backend_destroy(rig->fault);
    cr_assert(st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED, "%s", ortmem_last_error());
    OK(ortmem_backend_destroy(rig->cpu));
}

static char warned[512];

static void keep_warning(void *user, ortmem_log_level level, const char *message)
{
    (void)user;
    if (level == ORTMEM_LOG_WARN && strstr(message, "arena pressure"))
        snprintf(warned, sizeof warned, "%s", message);
}

/* The authority, the backend and the arena tell the same story. */
static void assert_ledger_agrees(gov *g)
{
    ortmem_authority_report r = report_of(g->authority);
    ortmem_vmm_stats v = stats_of(g->backend);
    cr_assert_eq(r.owned_bytes, v.owned_bytes, "authority %llu, backend %llu",
                 (unsigned long long)r.owned_bytes, (unsigned long long)v.owned_bytes);
    cr_assert_eq(r.mapped_bytes, v.mapped_bytes);
    ortmem_arena_stats s = arena_stats(g->arena);
    ortmem_holder_report hs = holder_report_of(g->scratch);
    cr_assert_eq(hs.owned_bytes, s.committed_bytes, "the arena's holder owns what it maps");
}

/* Pressure never asks the requester's own holder: an alloc refused for
 * budget drops its own arena's cache first, so it fails only where an
 * uncached arena's alloc would. */
Test(arena_pressure, an_alloc_refused_for_budget_drops_its_own_cache_first)
{
    ortmem_backend *b = test_backend();
    gov g = gov_new(b, 6 * G);
    void *a3 = alloc_ok(g.arena, 3 * G, G); /* granules 0..2 */
    void *keep = alloc_ok(g.arena, G, G);   /* granule 3 */
    OK(ortmem_arena_free(g.arena, a3));
    cr_assert_eq(arena_stats(g.arena).cached_bytes, 3 * G);
    /* 4 granules fit only past granule 3: 4 new + 4 owned > 6. */
    void *p = alloc_ok(g.arena, 4 * G, G);
    cr_assert_eq((uint8_t *)p - (uint8_t *)keep, (ptrdiff_t)G);
    ortmem_arena_stats s = arena_stats(g.arena);
    cr_assert_eq(s.cached_bytes, 0);
    cr_assert_eq(s.committed_bytes, 5 * G);
    cr_assert_eq(s.reclaimed_bytes, 3 * G);
    cr_assert_eq(s.failed_allocs, 0);
    ortmem_authority_report r = report_of(g.authority);
    cr_assert_eq(r.owned_bytes, 5 * G);
    cr_assert_eq(r.refusals, 1, "the commit refused before the cache went");
    cr_assert_eq(r.pressure_calls, 0, "no other holder was asked");
    /* With nothing cached the refusal stands, its detail intact. */
    void *q = NULL;
    EXPECT_STATUS(ortmem_arena_alloc(g.arena, 2 * G, G, &q), ORTMEM_E_BUDGET);
    cr_assert(strstr(ortmem_last_error(), "arena alloc of"), "%s", ortmem_last_error());
    cr_assert_eq(arena_stats(g.arena).failed_allocs, 1);
    OK(ortmem_arena_free(g.arena, p));
    OK(ortmem_arena_free(g.arena, keep));
    assert_ledger_agrees(&g);
    gov_destroy(&g);
    assert_backend_empty(b);
    OK(ortmem_backend_destroy(b));
}

Test(arena_pressure, a_failed_decommit_under_pressure_keeps_the_granules_cached_and_is_reported)
{
    fault_rig rig = rig_create(ORTMEM_OP_UNMAP);
    gov g = gov_new(rig.fault, 8 * G);
    void *p = alloc_ok(g.arena, 4 * G, G);
    OK(ortmem_arena_free(g.arena, p));
    rig_arm(&rig, ORTMEM_OP_UNMAP, 1);
    warned[0] = '\0';
    ortmem_set_log(keep_warning, NULL, ORTMEM_LOG_DEBUG);
    EXPECT_STATUS(ortmem_region_commit(g.region, 0, 6 * G), ORTMEM_E_BUDGET);
    ortmem_set_log(NULL, NULL, ORTMEM_LOG_INFO);
    cr_assert(strstr(warned, "arena reclaim of"), "warned: '%s'", warned);
    ortmem_arena_stats s = arena_stats(g.arena);
    cr_assert_eq(s.cached_bytes, 4 * G, "the failed run went back to the cache");
    cr_assert_eq(s.committed_bytes, 4 * G);
    cr_assert_eq(s.reclaimed_bytes, 0);
    ortmem_authority_report r = report_of(g.authority);
    cr_assert_eq(r.owned_bytes, 4 * G);
    cr_assert_eq(r.refusals, 1);
    cr_assert_eq(r.pressure_reclaimed_bytes, 0);
    cr_assert_eq(holder_report_of(g.weights).owned_bytes, 0, "the refused commit mapped nothing");
    assert_ledger_agrees(&g);
    /* The fault is spent: the same request now reclaims and succeeds. */
    OK(ortmem_region_commit(g.region, 0, 6 * G));
    r = report_of(g.authority);
    cr_assert_eq(r.owned_bytes, 8 * G);
    cr_assert_eq(r.pressure_reclaimed_bytes, 2 * G);
    cr_assert_eq(arena_stats(g.arena).reclaimed_bytes, 2 * G);
    assert_ledger_agrees(&g);
    gov_destroy(&g);
    cr_assert_eq(stats_of(rig.fault).owned_bytes, 0);
    rig_destroy(&rig);
}

Test(arena_pressure, a_failed_release_under_reclaim_quarantines_and_counts_nothing_of_its_run)
{
    fault_rig rig = rig_create(ORTMEM_OP_RELEASE);
    gov g = gov_new(rig.fault, 8 * G);
    void *p = alloc_ok(g.arena, 4 * G, G);
    OK(ortmem_arena_free(g.arena, p));
    rig_arm(&rig, ORTMEM_OP_RELEASE, 1);
    uint64_t got = 0;
    EXPECT_STATUS(ortmem_arena_reclaim(g.arena, 2 * G, &got), ORTMEM_E_QUARANTINED);
    cr_assert(strstr(ortmem_last_error(), "arena reclaim of"), "%s", ortmem_last_error());
    /* Granules 0 and 1 left the arena, one of them quarantined by the
     * backend (charged to the quarantine holder): the run counts nothing. */
    cr_assert_eq(got, 0, "a failed run is never counted as reclaimed");
    ortmem_arena_stats s = arena_stats(g.arena);
    cr_assert_eq(s.reclaimed_bytes, 0);
    cr_assert_eq(s.cached_bytes, 2 * G);
    cr_assert_eq(s.committed_bytes, 2 * G);
    cr_assert_eq(s.quarantined_bytes, 0, "unmapped: the arena's VA stays usable");
    ortmem_vmm_stats v = stats_of(rig.fault);
    cr_assert_eq(v.quarantined_bytes, G);
    cr_assert_eq(v.owned_bytes, 3 * G);
    assert_ledger_agrees(&g);
    /* Pressure goes on with the rest: 1 granule short, 1 reclaimed. */
    OK(ortmem_region_commit(g.region, 0, 6 * G));
    s = arena_stats(g.arena);
    cr_assert_eq(s.cached_bytes, G);
    cr_assert_eq(s.reclaimed_bytes, G);
    ortmem_authority_report r = report_of(g.authority);
    cr_assert_eq(r.owned_bytes, 8 * G, "6 weights, 1 cached, 1 quarantined");
    cr_assert_eq(r.pressure_reclaimed_bytes, G);
    assert_ledger_agrees(&g);
    /* The VA of the quarantined granule is used again. */
    OK(ortmem_region_decommit(g.region, 0, G));
    void *q = alloc_ok(g.arena, G, G);
    cr_assert_eq(q, ortmem_region_base(ortmem_arena_region(g.arena)));
    OK(ortmem_arena_free(g.arena, q));
    gov_destroy(&g);
    v = stats_of(rig.fault);
    cr_assert_eq(v.owned_bytes, v.quarantined_bytes);
    rig_destroy(&rig);
}

/* ---- pressure while the arena is in use ---- */

typedef struct churn {
    ortmem_arena *arena;
    ortmem_region *region;
    int rounds;
    int unexpected; /* statuses other than OK and BUDGET */
    int refused;
} churn;

static void *arena_churn(void *arg)
{
    churn *c = arg;
    for (int i = 0; i < c->rounds; i++) {
        void *p = NULL;
        size_t size = (size_t)(1 + i % 3) * G;
        ortmem_status st = ortmem_arena_alloc(c->arena, size, G, &p);
        if (st == ORTMEM_OK)
            st = ortmem_arena_free(c->arena, p);
        c->refused += st == ORTMEM_E_BUDGET;
        c->unexpected += st != ORTMEM_OK && st != ORTMEM_E_BUDGET;
    }
    return NULL;
}

static void *region_churn(void *arg)
{
    churn *c = arg;
    for (int i = 0; i < c->rounds; i++) {
        ortmem_status st = ortmem_region_commit(c->region, 0, 6 * G);
        if (st == ORTMEM_OK)
            st = ortmem_region_decommit(c->region, 0, 6 * G);
        c->refused += st == ORTMEM_E_BUDGET;
        c->unexpected += st != ORTMEM_OK && st != ORTMEM_E_BUDGET;
    }
    return NULL;
}

Test(arena_pressure, reclaim_under_concurrent_allocs_keeps_the_ledger, .timeout = 60)
{
    ortmem_backend *b = test_backend();
    gov g = gov_new(b, 8 * G);
    OK(ortmem_arena_free(g.arena, alloc_ok(g.arena, 3 * G, G))); /* 3 granules cached */
    churn ca = {.arena = g.arena, .rounds = 400};
    churn cr = {.region = g.region, .rounds = 400};
    pthread_t ta, tr;
    cr_assert_eq(pthread_create(&ta, NULL, arena_churn, &ca), 0);
    cr_assert_eq(pthread_create(&tr, NULL, region_churn, &cr), 0);
    pthread_join(ta, NULL);
    pthread_join(tr, NULL);
    cr_assert_eq(ca.unexpected + cr.unexpected, 0);
    ortmem_arena_stats s = arena_stats(g.arena);
    cr_assert_eq(s.live_allocations, 0);
    cr_assert_eq(s.committed_bytes, s.cached_bytes, "nothing live: all committed is cached");
    cr_assert_leq(s.cached_bytes, 3 * G);
    assert_ledger_agrees(&g);
    ortmem_authority_report r = report_of(g.authority);
    cr_assert_eq(r.owned_bytes, s.committed_bytes, "the weights decommitted everything");
    /* reclaimed_bytes counts pressure and the arena's own drops on a budget
     * refusal (when the weights hold 6 granules, an alloc needing a new one is
     * refused and drops its cache); which happen depends on the scheduling. */
    cr_assert_geq(s.reclaimed_bytes, r.pressure_reclaimed_bytes, "arena %llu, pressure %llu",
                  (unsigned long long)s.reclaimed_bytes,
                  (unsigned long long)r.pressure_reclaimed_bytes);
    cr_assert_eq(s.reclaimed_bytes % G, 0, "whole granules only");
    gov_destroy(&g);
    assert_backend_empty(b);
    OK(ortmem_backend_destroy(b));
}

/* ---- extents under pressure ---- */

/* Pressure takes whole cached extents, oldest first, and their bytes leave
 * the process: the pool does not keep them though its cap would. */
Test(arena_pressure, pressure_reclaims_whole_extents_and_they_skip_the_pool)
{
    ortmem_backend *b = test_backend();
    OK(ortmem_pool_set_cap(b, 16 * G));
    gov g = gov_new_ext(b, 8 * G, ORTMEM_EXTENT_GEOMETRIC);
    void *keep = alloc_ok(g.arena, G, G);  /* extent [0, 1) */
    void *p = alloc_ok(g.arena, 2 * G, G); /* extent [1, 3) */
    void *q = alloc_ok(g.arena, 4 * G, G); /* extent [3, 7) */
    OK(ortmem_arena_free(g.arena, p));
    OK(ortmem_arena_free(g.arena, q));
    ortmem_arena_stats s = arena_stats(g.arena);
    cr_assert_eq(s.cached_bytes, 6 * G);
    cr_assert_eq(s.extents_committed, 3);
    /* 5 granules for the weights, 1 available: 4 wanted, whole extents give 6. */
    OK(ortmem_region_commit(g.region, 0, 5 * G));
    ortmem_authority_report r = report_of(g.authority);
    cr_assert_eq(r.pressure_reclaimed_bytes, 6 * G);
    cr_assert_eq(r.owned_bytes, 6 * G);
    s = arena_stats(g.arena);
    cr_assert_eq(s.cached_bytes, 0);
    cr_assert_eq(s.reclaimed_bytes, 6 * G);
    cr_assert_eq(s.extents_committed, 1);
    ortmem_vmm_stats v = stats_of(b);
    cr_assert_eq(v.pool_bytes, 0, "reclaimed extents went back to the backend");
    cr_assert_eq(v.owned_bytes, 6 * G);
    cr_assert_eq(state_at(g.arena, G), ORTMEM_GRANULE_UNMAPPED);
    cr_assert_eq(state_at(g.arena, 3 * G), ORTMEM_GRANULE_UNMAPPED);
    OK(ortmem_arena_free(g.arena, keep));
    assert_ledger_agrees(&g);
    gov_destroy(&g);
    OK(ortmem_pool_set_cap(b, 0));
    assert_backend_empty(b);
    OK(ortmem_backend_destroy(b));
}

/* An alloc refused for budget drops its own cached extents with NO_POOL: a
 * pooled extent would still count against the limit. */
Test(arena_pressure, a_budget_refusal_drops_the_cached_extents_past_the_pool)
{
    ortmem_backend *b = test_backend();
    OK(ortmem_pool_set_cap(b, 16 * G));
    gov g = gov_new_ext(b, 6 * G, ORTMEM_EXTENT_GEOMETRIC);
    void *keep = alloc_ok(g.arena, G, G);  /* extent [0, 1) */
    void *p = alloc_ok(g.arena, 4 * G, G); /* extent [1, 5) */
    OK(ortmem_arena_free(g.arena, p));
    cr_assert_eq(arena_stats(g.arena).cached_bytes, 4 * G);
    /* Granules 8..10 (2 + 1 new) with 5 owned: refused; the cached extent
     * goes, and the retry fits. Pooled, it would still count against the
     * limit (the pool holder would be pressed) and sit in the pool. */
    void *big = alloc_ok(g.arena, 3 * G, 8 * G);
    cr_assert_eq((uint8_t *)big - (uint8_t *)keep, (ptrdiff_t)(8 * G));
    ortmem_arena_stats s = arena_stats(g.arena);
    cr_assert_eq(s.reclaimed_bytes, 4 * G);
    cr_assert_eq(s.failed_allocs, 0);
    cr_assert_eq(s.committed_bytes, 4 * G);
    cr_assert_eq(s.extents_committed, 3);
    ortmem_vmm_stats v = stats_of(b);
    cr_assert_eq(v.pool_bytes, 0, "the dropped cache did not go to the pool");
    cr_assert_eq(v.owned_bytes, 4 * G);
    ortmem_authority_report r = report_of(g.authority);
    cr_assert_eq(r.refusals, 1, "the commit refused before the cache went");
    cr_assert_eq(r.pressure_calls, 0, "no other holder (nor the pool) was asked");
    OK(ortmem_arena_free(g.arena, big));
    OK(ortmem_arena_free(g.arena, keep));
    assert_ledger_agrees(&g);
    gov_destroy(&g);
    OK(ortmem_pool_set_cap(b, 0));
    assert_backend_empty(b);
    OK(ortmem_backend_destroy(b));
}
