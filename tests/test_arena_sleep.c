/* Arena sleep and wake (ortmem_arena_sleep, docs/memory/ARENA.md#sleep-and-wake):
 * every committed extent decommitted and its bytes refunded to the
 * authority, the VA kept; wake commits again at the same addresses and
 * restores a backup byte for byte; alloc refused while asleep, free allowed;
 * a budget refusal at wake changes nothing; and every backend call of sleep
 * and of wake failing once leaves the arena consistent, its bytes intact.
 * Granules are 64 KiB; every assertion is on counters, ledgers and bytes. */
#include <stdio.h>

#include "support.h"

#define G ((size_t)TEST_GRANULE)
#define NALLOC 6

typedef struct rig {
    ortmem_backend *cpu;   /* where the bytes are read and written */
    ortmem_backend *fault; /* what the arena runs on (NULL: the cpu backend) */
    ortmem_authority *authority;
    ortmem_holder *holder;
    ortmem_arena *arena;
    void *ptr[NALLOC];
    size_t size[NALLOC];
} rig;

static ortmem_backend *rig_backend(const rig *r)
{
    return r->fault ? r->fault : r->cpu;
}

/* An arena on a holder of an authority of limit bytes; the allocations span
 * odd sizes and granule boundaries, extents growing geometrically. */
static void rig_open(rig *r, bool with_fault, uint64_t limit)
{
    memset(r, 0, sizeof *r);
    r->cpu = test_backend();
    if (with_fault) {
        ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
        OK(ortmem_fault_backend_create(r->cpu, &fo, &r->fault));
    }
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = limit;
    OK(ortmem_authority_create(rig_backend(r), &ao, &r->authority));
    ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
    ho.name = "weights";
    ho.role = ORTMEM_ROLE_WEIGHTS;
    OK(ortmem_holder_register(r->authority, &ho, &r->holder));
    ortmem_account acct;
    OK(ortmem_holder_account(r->holder, &acct));
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    opt.capacity = 64 * G;
    opt.account = &acct;
    opt.extents.cap_bytes = 4 * G;
    OK(ortmem_arena_create(rig_backend(r), &opt, &r->arena));
    const size_t sizes[NALLOC] = {1000, 3 * G + 17, 256, G / 2, 5 * G, 4096};
    for (int i = 0; i < NALLOC; i++) {
        r->size[i] = sizes[i];
        r->ptr[i] = alloc_ok(r->arena, sizes[i], 0);
        backend_put_pattern(r->cpu, r->ptr[i], sizes[i], 100 + (uint64_t)i);
    }
}

static void rig_close(rig *r)
{
    for (int i = 0; i < NALLOC; i++) {
        if (r->ptr[i])
            OK(ortmem_arena_free(r->arena, r->ptr[i]));
    }
    OK(ortmem_arena_destroy(r->arena, 0));
    OK(ortmem_holder_unregister(r->holder));
    OK(ortmem_authority_destroy(r->authority));
    ortmem_status st = r->fault ? ortmem_backend_destroy(r->fault) : ORTMEM_OK;
    cr_assert(st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED, "%s", ortmem_last_error());
    st = ortmem_backend_destroy(r->cpu);
    cr_assert(st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED, "%s", ortmem_last_error());
}

static ortmem_holder_report holder_of(const rig *r)
{
    ortmem_holder_report h;
    memset(&h, 0, sizeof h);
    OK(ortmem_holder_report_get(r->holder, &h));
    return h;
}

static void assert_bytes_intact(const rig *r, const char *ctx)
{
    for (int i = 0; i < NALLOC; i++) {
        if (!r->ptr[i])
            continue;
        size_t bad = backend_pattern_mismatch(r->cpu, r->ptr[i], r->size[i], 100 + (uint64_t)i);
        cr_assert_eq(bad, r->size[i], "%s: allocation %d (%zu bytes) differs at byte %zu", ctx, i,
                     r->size[i], bad);
    }
}

/* The arena's committed bytes are what its holder owns, and what the
 * backend owns beside its quarantine (the pool is off). */
static void assert_ledgers_agree(const rig *r, const char *ctx)
{
    ortmem_arena_stats s = arena_stats(r->arena);
    ortmem_vmm_stats v = stats_of(rig_backend(r));
    ortmem_holder_report h = holder_of(r);
    cr_assert_eq(h.owned_bytes, s.committed_bytes, "%s: holder owns %llu, arena commits %llu", ctx,
                 (unsigned long long)h.owned_bytes, (unsigned long long)s.committed_bytes);
    cr_assert_eq(v.owned_bytes - v.quarantined_bytes, s.committed_bytes,
                 "%s: backend owns %llu (%llu quarantined), arena commits %llu", ctx,
                 (unsigned long long)v.owned_bytes, (unsigned long long)v.quarantined_bytes,
                 (unsigned long long)s.committed_bytes);
    cr_assert_eq(v.mapped_bytes, s.committed_bytes, "%s", ctx);
}

static ortmem_arena_sleep_options with_backup(void)
{
    ortmem_arena_sleep_options o = ORTMEM_ARENA_SLEEP_OPTIONS_INIT;
    o.backup = 1;
    return o;
}

TestSuite(arena_sleep);

Test(arena_sleep, sleep_with_backup_gives_the_bytes_back_and_wake_restores_them_in_place)
{
    rig r;
    rig_open(&r, false, 1ull << 30);
    ortmem_arena_stats before = arena_stats(r.arena);
    cr_assert_gt(before.committed_bytes, 0);
    uint64_t va = stats_of(r.cpu).reserved_va_bytes;
    size_t need = 0;
    OK(ortmem_arena_backup_bytes(r.arena, &need));
    cr_assert_geq(need, 8 * G);

    ortmem_arena_sleep_options o = with_backup();
    OK(ortmem_arena_sleep(r.arena, &o));
    ortmem_arena_stats asleep = arena_stats(r.arena);
    cr_assert_eq(asleep.asleep, 1);
    cr_assert_eq(asleep.committed_bytes, 0);
    cr_assert_eq(asleep.extents_committed, 0);
    cr_assert_eq(asleep.dormant_bytes, before.committed_bytes);
    cr_assert_eq(asleep.backup_bytes, need);
    cr_assert_eq(asleep.live_allocations, NALLOC);
    cr_assert_eq(holder_of(&r).owned_bytes, 0, "the authority has the bytes back");
    cr_assert_eq(stats_of(r.cpu).owned_bytes, 0, "straight to the backend, not its pool");
    cr_assert_eq(stats_of(r.cpu).reserved_va_bytes, va, "the VA stays reserved");
    for (int i = 0; i < NALLOC; i++)
        cr_assert_eq(granule_info(ortmem_arena_region(r.arena),
                                  (uintptr_t)r.ptr[i] -
                                      (uintptr_t)ortmem_region_base(ortmem_arena_region(r.arena)))
                         .state,
                     ORTMEM_GRANULE_UNMAPPED);
    assert_ledgers_agree(&r, "asleep");

    OK(ortmem_arena_wake(r.arena));
    ortmem_arena_stats awake = arena_stats(r.arena);
    cr_assert_eq(awake.asleep, 0);
    cr_assert_eq(awake.committed_bytes, before.committed_bytes);
    cr_assert_eq(awake.extents_committed, before.extents_committed);
    cr_assert_eq(awake.backup_bytes, 0);
    cr_assert_eq(awake.sleeps, 1);
    cr_assert_eq(awake.wakes, 1);
    assert_bytes_intact(&r, "after wake");
    assert_ledgers_agree(&r, "awake");
    /* The arena allocates again, and frees what it handed out before. */
    void *more = alloc_ok(r.arena, 3 * G, 0);
    OK(ortmem_arena_free(r.arena, more));
    rig_close(&r);
}

Test(arena_sleep, sleep_without_backup_wakes_to_fresh_zeroed_granules_on_the_cpu_backend)
{
    rig r;
    rig_open(&r, false, 1ull << 30);
    ortmem_arena_stats before = arena_stats(r.arena);
    OK(ortmem_arena_sleep(r.arena, NULL));
    cr_assert_eq(arena_stats(r.arena).backup_bytes, 0);
    cr_assert_eq(holder_of(&r).owned_bytes, 0);
    OK(ortmem_arena_wake(r.arena));
    cr_assert_eq(arena_stats(r.arena).committed_bytes, before.committed_bytes);
    for (int i = 0; i < NALLOC; i++) {
        uint8_t *tmp = calloc(1, r.size[i]);
        OK(ortmem_backend_copy(r.cpu, tmp, r.ptr[i], r.size[i]));
        for (size_t k = 0; k < r.size[i]; k++)
            cr_assert_eq(tmp[k], 0, "allocation %d byte %zu: %u", i, k, tmp[k]);
        free(tmp);
    }
    rig_close(&r);
}

Test(arena_sleep, asleep_the_arena_refuses_allocs_and_frees_without_touching_bytes)
{
    rig r;
    rig_open(&r, false, 1ull << 30);
    ortmem_arena_sleep_options o = with_backup();
    OK(ortmem_arena_sleep(r.arena, &o));
    EXPECT_STATUS(ortmem_arena_sleep(r.arena, &o), ORTMEM_E_STATE);
    void *p = NULL;
    EXPECT_STATUS(ortmem_arena_alloc(r.arena, 100, 0, &p), ORTMEM_E_STATE);
    cr_assert_null(p);
    cr_assert(strstr(ortmem_last_error(), "asleep"), "%s", ortmem_last_error());
    cr_assert_eq(arena_stats(r.arena).failed_allocs, 1);
    /* The 5-granule allocation: the extents it alone lives on are not
     * committed again. */
    ortmem_arena_stats before = arena_stats(r.arena);
    void *big = r.ptr[4];
    OK(ortmem_arena_free(r.arena, big));
    r.ptr[4] = NULL;
    EXPECT_STATUS(ortmem_arena_free(r.arena, big), ORTMEM_E_DOUBLE_FREE);
    cr_assert_eq(arena_stats(r.arena).committed_bytes, 0);
    OK(ortmem_arena_wake(r.arena));
    EXPECT_STATUS(ortmem_arena_wake(r.arena), ORTMEM_E_STATE);
    ortmem_arena_stats s = arena_stats(r.arena);
    cr_assert_eq(s.live_allocations, NALLOC - 1);
    cr_assert_leq(s.committed_bytes + 4 * G, before.dormant_bytes, "committed %llu of %llu",
                  (unsigned long long)s.committed_bytes, (unsigned long long)before.dormant_bytes);
    assert_bytes_intact(&r, "after a free while asleep");
    assert_ledgers_agree(&r, "after a free while asleep");
    rig_close(&r);
}

Test(arena_sleep, a_wake_over_budget_is_refused_with_the_numbers_and_changes_nothing)
{
    rig r;
    rig_open(&r, false, 64 * G);
    ortmem_arena_stats before = arena_stats(r.arena);
    size_t need = 0;
    OK(ortmem_arena_backup_bytes(r.arena, &need));
    ortmem_arena_sleep_options o = with_backup();
    OK(ortmem_arena_sleep(r.arena, &o));
    OK(ortmem_authority_set_limit(r.authority, 2 * G, NULL));
    EXPECT_STATUS(ortmem_arena_wake(r.arena), ORTMEM_E_BUDGET);
    const char *detail = ortmem_last_error();
    cr_assert(strstr(detail, "requested") && strstr(detail, "available") && strstr(detail, "limit"),
              "%s", detail);
    ortmem_arena_stats s = arena_stats(r.arena);
    cr_assert_eq(s.asleep, 1);
    cr_assert_eq(s.committed_bytes, 0);
    cr_assert_eq(s.backup_bytes, need);
    cr_assert_eq(holder_of(&r).owned_bytes, 0);
    cr_assert_eq(stats_of(r.cpu).owned_bytes, 0);
    OK(ortmem_authority_set_limit(r.authority, 64 * G, NULL));
    OK(ortmem_arena_wake(r.arena));
    cr_assert_eq(arena_stats(r.arena).committed_bytes, before.committed_bytes);
    assert_bytes_intact(&r, "woken after the limit was raised");
    rig_close(&r);
}

Test(arena_sleep, a_callers_backup_buffer_must_hold_the_live_bytes)
{
    rig r;
    rig_open(&r, false, 1ull << 30);
    size_t need = 0;
    OK(ortmem_arena_backup_bytes(r.arena, &need));
    ortmem_arena_sleep_options o = with_backup();
    uint8_t *buffer = malloc(need);
    o.backup_buffer = buffer;
    o.backup_capacity = need - 1;
    EXPECT_STATUS(ortmem_arena_sleep(r.arena, &o), ORTMEM_E_RANGE);
    ortmem_arena_stats s = arena_stats(r.arena);
    cr_assert_eq(s.asleep, 0);
    cr_assert_gt(s.committed_bytes, 0);
    o.backup = 0;
    EXPECT_STATUS(ortmem_arena_sleep(r.arena, &o), ORTMEM_E_INVALID);
    o.backup = 1;
    o.backup_capacity = need;
    OK(ortmem_arena_sleep(r.arena, &o));
    /* The first allocation's bytes lie at the start of the caller's buffer. */
    cr_assert(check_pattern(buffer, 1000, 100));
    OK(ortmem_arena_wake(r.arena));
    assert_bytes_intact(&r, "restored from the caller's buffer");
    free(buffer);
    rig_close(&r);
}

Test(arena_sleep, an_empty_arena_sleeps_and_wakes)
{
    ortmem_backend *b = test_backend();
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    opt.capacity = 8 * G;
    ortmem_arena *a = NULL;
    OK(ortmem_arena_create(b, &opt, &a));
    void *p = alloc_ok(a, G, 0);
    OK(ortmem_arena_free(a, p)); /* cached */
    cr_assert_gt(arena_stats(a).cached_bytes, 0);
    ortmem_arena_sleep_options o = with_backup();
    OK(ortmem_arena_sleep(a, &o));
    cr_assert_eq(arena_stats(a).cached_bytes, 0);
    cr_assert_eq(arena_stats(a).dormant_bytes, 0);
    cr_assert_eq(stats_of(b).owned_bytes, 0);
    OK(ortmem_arena_wake(a));
    cr_assert_eq(arena_stats(a).committed_bytes, 0);
    OK(ortmem_arena_destroy(a, 0));
    OK(ortmem_backend_destroy(b));
}

Test(arena_sleep, an_arena_asleep_is_destroyed_with_force_and_leaves_nothing)
{
    rig r;
    rig_open(&r, false, 1ull << 30);
    ortmem_arena_sleep_options o = with_backup();
    OK(ortmem_arena_sleep(r.arena, &o));
    EXPECT_STATUS(ortmem_arena_destroy(r.arena, 0), ORTMEM_E_BUSY);
    OK(ortmem_arena_destroy(r.arena, 1));
    cr_assert_eq(holder_of(&r).owned_bytes, 0);
    ortmem_vmm_stats v = stats_of(r.cpu);
    cr_assert_eq(v.owned_bytes, 0);
    cr_assert_eq(v.reserved_va_bytes, 0);
    OK(ortmem_holder_unregister(r.holder));
    OK(ortmem_authority_destroy(r.authority));
    OK(ortmem_backend_destroy(r.cpu));
}

/* ---- every backend call failing once ---- */

static void arm(rig *r, uint64_t fail_at)
{
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.fail_at = fail_at;
    OK(ortmem_fault_backend_arm(r->fault, &fo));
}

static uint64_t injected(rig *r)
{
    uint64_t calls = 0, inj = 0;
    OK(ortmem_fault_backend_counts(r->fault, &calls, &inj));
    return inj;
}

Test(arena_sleep, every_backend_call_of_sleep_failing_once_leaves_the_arena_consistent)
{
    int failures = 0;
    for (uint64_t k = 1; k < 200; k++) {
        rig r;
        rig_open(&r, true, 1ull << 30);
        ortmem_arena_stats before = arena_stats(r.arena);
        char ctx[64];
        snprintf(ctx, sizeof ctx, "sleep, call %llu failing", (unsigned long long)k);
        arm(&r, k);
        ortmem_arena_sleep_options o = with_backup();
        ortmem_status st = ortmem_arena_sleep(r.arena, &o);
        char detail[512];
        snprintf(detail, sizeof detail, "%s", ortmem_last_error());
        bool hit = injected(&r) > 0;
        arm(&r, 0);
        ortmem_arena_stats s = arena_stats(r.arena);
        if (!hit) {
            OK(st);
            rig_close(&r);
            cr_assert_gt(failures, 3, "the sweep reached only %d failures", failures);
            return;
        }
        failures++;
        cr_assert_neq(st, ORTMEM_OK, "%s: an injected failure went unreported", ctx);
        cr_assert_neq(detail[0], '\0', "%s: no detail", ctx);
        /* Asleep exactly when extents went: a failure before any did is no sleep. */
        cr_assert_eq(s.asleep != 0, s.committed_bytes < before.committed_bytes,
                     "%s: asleep %llu with %llu of %llu bytes committed: %s", ctx,
                     (unsigned long long)s.asleep, (unsigned long long)s.committed_bytes,
                     (unsigned long long)before.committed_bytes, detail);
        if (st == ORTMEM_E_QUARANTINED)
            cr_assert_eq(s.asleep, 1, "%s: a quarantined release still puts it to sleep", ctx);
        if (!s.asleep) {
            cr_assert_eq(s.committed_bytes, before.committed_bytes, "%s: nothing changed", ctx);
            cr_assert_eq(s.backup_bytes, 0, "%s", ctx);
            assert_bytes_intact(&r, ctx);
            OK(ortmem_arena_sleep(r.arena, &o));
        }
        assert_ledgers_agree(&r, ctx);
        OK(ortmem_arena_wake(r.arena));
        assert_bytes_intact(&r, ctx);
        assert_ledgers_agree(&r, ctx);
        rig_close(&r);
    }
    cr_assert_fail("sleep made more than 200 backend calls");
}

Test(arena_sleep, every_backend_call_of_wake_failing_once_changes_nothing)
{
    int failures = 0;
    for (uint64_t k = 1; k < 200; k++) {
        rig r;
        rig_open(&r, true, 1ull << 30);
        ortmem_arena_stats before = arena_stats(r.arena);
        char ctx[64];
        snprintf(ctx, sizeof ctx, "wake, call %llu failing", (unsigned long long)k);
        ortmem_arena_sleep_options o = with_backup();
        OK(ortmem_arena_sleep(r.arena, &o));
        ortmem_arena_stats asleep = arena_stats(r.arena);
        arm(&r, k);
        ortmem_status st = ortmem_arena_wake(r.arena);
        char detail[512];
        snprintf(detail, sizeof detail, "%s", ortmem_last_error());
        bool hit = injected(&r) > 0;
        arm(&r, 0);
        if (!hit) {
            OK(st);
            assert_bytes_intact(&r, ctx);
            rig_close(&r);
            cr_assert_gt(failures, 3, "the sweep reached only %d failures", failures);
            return;
        }
        failures++;
        cr_assert_neq(st, ORTMEM_OK, "%s: an injected failure went unreported", ctx);
        cr_assert(strstr(detail, "asleep"), "%s: %s", ctx, detail);
        ortmem_arena_stats s = arena_stats(r.arena);
        cr_assert_eq(s.asleep, 1, "%s: a failed wake leaves it asleep", ctx);
        cr_assert_eq(s.backup_bytes, asleep.backup_bytes, "%s: the backup is kept", ctx);
        cr_assert_eq(s.committed_bytes, asleep.committed_bytes, "%s: the bytes stay given back",
                     ctx);
        assert_ledgers_agree(&r, ctx);
        OK(ortmem_arena_wake(r.arena));
        cr_assert_eq(arena_stats(r.arena).committed_bytes, before.committed_bytes, "%s", ctx);
        assert_bytes_intact(&r, ctx);
        assert_ledgers_agree(&r, ctx);
        rig_close(&r);
    }
    cr_assert_fail("wake made more than 200 backend calls");
}
