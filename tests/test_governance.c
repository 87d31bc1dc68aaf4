/* Governance, the authority core: budgets on owned bytes charged before
 * mapping, holders and their accounts, the built-in pool and quarantine
 * holders, leases, grants (also over two authorities), pressure, limit
 * changes, the formatted ledger and the process manager. Every assertion is
 * on exact byte counts; granules are 64 KiB and limits are given in granules. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "support.h"

#define G ((uint64_t)TEST_GRANULE)

/* ---- helpers ---- */

static ortmem_authority *authority_on(ortmem_backend *b, uint64_t limit, uint64_t allowance)
{
    ortmem_authority_options o = ORTMEM_AUTHORITY_OPTIONS_INIT;
    o.limit_bytes = limit;
    o.mapped_allowance_bytes = allowance;
    ortmem_authority *a = NULL;
    OK(ortmem_authority_create(b, &o, &a));
    return a;
}

static ortmem_holder *holder_with(ortmem_authority *a, const char *name, ortmem_role role,
                                  int priority, ortmem_pressure_fn fn, void *user)
{
    ortmem_holder_options o = ORTMEM_HOLDER_OPTIONS_INIT;
    o.name = name;
    o.role = role;
    o.priority = priority;
    o.on_pressure = fn;
    o.user = user;
    ortmem_holder *h = NULL;
    OK(ortmem_holder_register(a, &o, &h));
    return h;
}

static ortmem_holder *holder_on(ortmem_authority *a, const char *name, ortmem_role role)
{
    return holder_with(a, name, role, 0, NULL, NULL);
}

static ortmem_region *region_for(ortmem_backend *b, ortmem_holder *h, size_t size, unsigned flags)
{
    ortmem_account acct;
    OK(ortmem_holder_account(h, &acct));
    ortmem_region_options o = ORTMEM_REGION_OPTIONS_INIT;
    o.size = size;
    o.flags = flags;
    o.account = &acct;
    ortmem_region *r = NULL;
    OK(ortmem_region_create(b, &o, &r));
    return r;
}

static ortmem_authority_report report_of(ortmem_authority *a)
{
    ortmem_authority_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    OK(ortmem_authority_report_get(a, &r, NULL, 0));
    return r;
}

#define MAX_HOLDERS 16

/* The report line of the holder called name (which must exist). */
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
    cr_assert_fail("holder '%s' is not in the report of %zu holders", name, r.holder_count);
    ortmem_holder_report none;
    memset(&none, 0, sizeof none);
    return none;
}

static uint64_t owned_of(ortmem_authority *a, const char *name)
{
    return holder_report(a, name).owned_bytes;
}

/* Everything the backend ledger says, pool hit/miss counters excluded (a
 * refused commit still looks into the pool). */
static ortmem_vmm_stats ledger_of(ortmem_backend *b)
{
    ortmem_vmm_stats s = stats_of(b);
    s.pool_hits = s.pool_misses = 0;
    return s;
}

static void assert_ledger_equal(const ortmem_vmm_stats *x, const ortmem_vmm_stats *y)
{
    cr_assert_eq(x->owned_bytes, y->owned_bytes);
    cr_assert_eq(x->mapped_bytes, y->mapped_bytes);
    cr_assert_eq(x->calls[ORTMEM_OP_CREATE], y->calls[ORTMEM_OP_CREATE]);
    cr_assert_eq(x->calls[ORTMEM_OP_MAP], y->calls[ORTMEM_OP_MAP]);
    cr_assert(memcmp(x, y, sizeof *x) == 0, "backend ledger changed");
}

/* A pressure callback that decommits its region's granules from the top. */
typedef struct reclaimer {
    const char *tag;
    ortmem_region *region;
    size_t committed; /* granules committed from offset 0 */
    int give_nothing; /* answer 0 without reclaiming */
    unsigned calls;
    uint64_t last_want;
} reclaimer;

static char call_log[256];

static void log_call(const char *tag)
{
    size_t used = strlen(call_log);
    snprintf(call_log + used, sizeof call_log - used, "%s%s", used ? " " : "", tag);
}

static uint64_t reclaim(void *user, uint64_t want)
{
    reclaimer *r = user;
    r->calls++;
    r->last_want = want;
    log_call(r->tag);
    if (r->give_nothing)
        return 0;
    uint64_t reclaimed = 0;
    while (reclaimed < want && r->committed) {
        if (ortmem_region_decommit(r->region, (r->committed - 1) * G, G) != ORTMEM_OK)
            break;
        r->committed--;
        reclaimed += G;
    }
    return reclaimed;
}

/* ---- authority lifetime ---- */

Test(governance, authority_create_validates_options_and_is_one_per_backend)
{
    ortmem_backend *b = test_backend();
    ortmem_authority *a = NULL;
    ortmem_authority_options o = ORTMEM_AUTHORITY_OPTIONS_INIT;
    EXPECT_STATUS(ortmem_authority_create(b, NULL, &a), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_authority_create(b, &o, NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_authority_create(b, &o, &a), ORTMEM_E_INVALID); /* limit 0 */
    cr_assert(strstr(ortmem_last_error(), "limit_bytes is 0"), "%s", ortmem_last_error());
    o.limit_bytes = 4 * G;
    o.struct_size = 0;
    EXPECT_STATUS(ortmem_authority_create(b, &o, &a), ORTMEM_E_INVALID);
    o.struct_size = sizeof o + 8;
    EXPECT_STATUS(ortmem_authority_create(b, &o, &a), ORTMEM_E_INVALID);
    o.struct_size = sizeof o;
    o.aging_per_second = -1.0;
    EXPECT_STATUS(ortmem_authority_create(b, &o, &a), ORTMEM_E_INVALID);
    o.aging_per_second = 0.0;
    EXPECT_STATUS(ortmem_authority_create(NULL, &o, &a), ORTMEM_E_INVALID);
    ortmem_backend *gone = test_backend();
    OK(ortmem_backend_destroy(gone));
    EXPECT_STATUS(ortmem_authority_create(gone, &o, &a), ORTMEM_E_HANDLE);
    cr_assert_null(a);

    a = authority_on(b, 4 * G, 0);
    cr_assert_eq(ortmem_authority_backend(a), b);
    ortmem_authority_report r = report_of(a);
    cr_assert_eq(r.limit_bytes, 4 * G);
    cr_assert_eq(r.available_bytes, 4 * G);
    cr_assert_eq(r.owned_bytes, 0);
    cr_assert_eq(r.holder_count, 2); /* pool and quarantine */
    owned_of(a, "pool");
    owned_of(a, "quarantine");

    /* One authority per backend; the refused one changes nothing. */
    ortmem_authority *second = NULL;
    EXPECT_STATUS(ortmem_authority_create(b, &o, &second), ORTMEM_E_STATE);
    cr_assert_null(second);
    cr_assert_eq(report_of(a).holder_count, 2);

    /* The backend cannot go while its authority lives. */
    EXPECT_STATUS(ortmem_backend_destroy(b), ORTMEM_E_BUSY);
    OK(ortmem_authority_destroy(a));
    EXPECT_STATUS(ortmem_authority_destroy(a), ORTMEM_E_HANDLE);
    cr_assert_null(ortmem_authority_backend(a));

    /* The backend is free for a new authority once the old one is gone. */
    a = authority_on(b, 2 * G, 0);
    OK(ortmem_authority_destroy(a));
    OK(ortmem_backend_destroy(b));
}

Test(governance, authority_destroy_is_busy_while_a_holder_is_charged_retained_or_granted)
{
    ortmem_backend *b = test_backend();
    ortmem_authority *a = authority_on(b, 8 * G, 0);
    ortmem_holder *h = holder_on(a, "user", ORTMEM_ROLE_OTHER);
    ortmem_holder *idle = holder_on(a, "idle", ORTMEM_ROLE_OTHER);

    /* A region keeps a copy of the account: the holder is still used. */
    ortmem_region *r = region_for(b, h, 4 * G, 0);
    EXPECT_STATUS(ortmem_authority_destroy(a), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "'user'"), "%s", ortmem_last_error());

    OK(ortmem_region_commit(r, 0, 2 * G));
    EXPECT_STATUS(ortmem_authority_destroy(a), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "owned 131072"), "%s", ortmem_last_error());

    OK(ortmem_region_decommit(r, 0, 4 * G));
    EXPECT_STATUS(ortmem_authority_destroy(a), ORTMEM_E_BUSY); /* still retained */
    OK(ortmem_region_destroy(r));

    ortmem_grant *g = NULL;
    OK(ortmem_grant_prepare(h, G, &g));
    EXPECT_STATUS(ortmem_authority_destroy(a), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "a grant is open"), "%s", ortmem_last_error());
    OK(ortmem_grant_abort(g));

    /* Nothing changed by the refusals: the authority still works. */
    ortmem_authority_report rep = report_of(a);
    cr_assert_eq(rep.owned_bytes, 0);
    cr_assert_eq(rep.claimed_bytes, 0);
    cr_assert_eq(rep.holder_count, 4);

    /* Registered but idle holders do not keep it; they become stale. */
    OK(ortmem_authority_destroy(a));
    ortmem_account acct;
    EXPECT_STATUS(ortmem_holder_account(h, &acct), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_holder_unregister(idle), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_grant_prepare(h, G, &g), ORTMEM_E_HANDLE);
    OK(ortmem_backend_destroy(b));
}

/* ---- charging regions and arenas ---- */

Test(governance, regions_and_arenas_charge_their_holder_by_role_with_overhead)
{
    ortmem_backend *b = test_backend();
    ortmem_authority *a = authority_on(b, 16 * G, 0);
    ortmem_holder *w = holder_on(a, "weights", ORTMEM_ROLE_WEIGHTS);
    ortmem_holder *kv = holder_on(a, "kv", ORTMEM_ROLE_KV);
    ortmem_holder *ws = holder_on(a, "scratch", ORTMEM_ROLE_WORKSPACE);
    ortmem_region *rw = region_for(b, w, 8 * G, 0);
    ortmem_region *rk = region_for(b, kv, 8 * G, 0);

    OK(ortmem_region_commit(rw, 0, 3 * G));
    OK(ortmem_region_commit(rk, 0, 100));

    ortmem_holder_report hw = holder_report(a, "weights");
    cr_assert_eq(hw.role, ORTMEM_ROLE_WEIGHTS);
    cr_assert_eq(hw.owned_bytes, 3 * G);
    cr_assert_eq(hw.mapped_bytes, 3 * G);
    cr_assert_eq(hw.requested_bytes, 3 * G);
    cr_assert_eq(hw.overhead_bytes, 0);
    ortmem_holder_report hk = holder_report(a, "kv");
    cr_assert_eq(hk.role, ORTMEM_ROLE_KV);
    cr_assert_eq(hk.owned_bytes, G);
    cr_assert_eq(hk.mapped_bytes, G);
    cr_assert_eq(hk.requested_bytes, 100);
    cr_assert_eq(hk.overhead_bytes, G - 100);

    /* An arena tells its allocations as the requested content. */
    ortmem_account acct;
    OK(ortmem_holder_account(ws, &acct));
    ortmem_arena_options ao = ORTMEM_ARENA_OPTIONS_INIT;
    ao.capacity = 4 * G;
    ao.cache_bytes = 0; /* the refund below comes from the free itself */
    ao.account = &acct;
    ortmem_arena *arena = NULL;
    OK(ortmem_arena_create(b, &ao, &arena));
    void *p = NULL;
    OK(ortmem_arena_alloc(arena, 100, 0, &p));
    ortmem_holder_report hs = holder_report(a, "scratch");
    cr_assert_eq(hs.role, ORTMEM_ROLE_WORKSPACE);
    cr_assert_eq(hs.owned_bytes, G);
    cr_assert_eq(hs.mapped_bytes, G);
    cr_assert_eq(hs.requested_bytes, 100);
    cr_assert_eq(hs.overhead_bytes, G - 100);

    ortmem_authority_report r = report_of(a);
    cr_assert_eq(r.owned_bytes, 5 * G);
    cr_assert_eq(r.mapped_bytes, 5 * G);
    cr_assert_eq(r.available_bytes, 11 * G);
    cr_assert_eq(r.by_role_owned[ORTMEM_ROLE_WEIGHTS], 3 * G);
    cr_assert_eq(r.by_role_owned[ORTMEM_ROLE_KV], G);
    cr_assert_eq(r.by_role_owned[ORTMEM_ROLE_WORKSPACE], G);
    cr_assert_eq(r.by_role_owned[ORTMEM_ROLE_OTHER], 0);
    cr_assert_eq(r.by_role_mapped[ORTMEM_ROLE_KV], G);
    cr_assert_eq(r.by_role_requested[ORTMEM_ROLE_KV], 100);
    cr_assert_eq(r.by_role_requested[ORTMEM_ROLE_WORKSPACE], 100);
    cr_assert_eq(r.by_role_requested[ORTMEM_ROLE_WEIGHTS], 3 * G);
    /* The authority and the backend agree on what is owned and mapped. */
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.owned_bytes, r.owned_bytes);
    cr_assert_eq(s.mapped_bytes, r.mapped_bytes);

    /* Refunds after unmapping; the peaks stay. */
    OK(ortmem_arena_free(arena, p));
    OK(ortmem_region_decommit(rw, G, 2 * G));
    hw = holder_report(a, "weights");
    cr_assert_eq(hw.owned_bytes, G);
    cr_assert_eq(hw.owned_peak_bytes, 3 * G);
    cr_assert_eq(hw.requested_bytes, G);
    hs = holder_report(a, "scratch");
    cr_assert_eq(hs.owned_bytes, 0);
    cr_assert_eq(hs.requested_bytes, 0);
    r = report_of(a);
    cr_assert_eq(r.owned_bytes, 2 * G);
    cr_assert_eq(r.owned_peak_bytes, 5 * G);

    OK(ortmem_arena_destroy(arena, 0));
    OK(ortmem_region_destroy(rw));
    OK(ortmem_region_destroy(rk));
    r = report_of(a);
    cr_assert_eq(r.owned_bytes, 0);
    cr_assert_eq(r.mapped_bytes, 0);
    OK(ortmem_authority_destroy(a));
    OK(ortmem_backend_destroy(b));
}

Test(governance, a_commit_that_does_not_fit_is_refused_and_maps_nothing)
{
    ortmem_backend *b = test_backend();
    ortmem_authority *a = authority_on(b, 4 * G, 0);
    ortmem_holder *big = holder_on(a, "big", ORTMEM_ROLE_WEIGHTS);
    ortmem_holder *small = holder_on(a, "small", ORTMEM_ROLE_KV);
    ortmem_region *rb = region_for(b, big, 8 * G, 0);
    ortmem_region *rs = region_for(b, small, 8 * G, 0);
    OK(ortmem_region_commit(rb, 0, 3 * G));

    ortmem_vmm_stats before = ledger_of(b);
    ortmem_authority_report rep_before = report_of(a);
    EXPECT_STATUS(ortmem_region_commit(rs, 0, 2 * G), ORTMEM_E_BUDGET);
    const char *detail = ortmem_last_error();
    cr_assert(strstr(detail, "requested 131072 bytes"), "%s", detail);
    cr_assert(strstr(detail, "available 65536 of limit 262144"), "%s", detail);
    cr_assert(strstr(detail, "largest holders: big 196608"), "%s", detail);
    cr_assert(strstr(detail, "'small'"), "%s", detail);

    ortmem_vmm_stats after = ledger_of(b);
    assert_ledger_equal(&before, &after);
    ortmem_authority_report rep_after = report_of(a);
    cr_assert_eq(rep_after.refusals, rep_before.refusals + 1, "refusals %llu, before %llu",
                 (unsigned long long)rep_after.refusals, (unsigned long long)rep_before.refusals);
    cr_assert_eq(rep_after.owned_bytes, 3 * G);
    cr_assert_eq(rep_after.available_bytes, G);
    cr_assert_eq(owned_of(a, "small"), 0);
    cr_assert_eq(holder_report(a, "small").held_bytes, 0);
    cr_assert_eq(granule_info(rs, 0).state, ORTMEM_GRANULE_UNMAPPED);

    /* What fits still goes through, up to the limit exactly. */
    OK(ortmem_region_commit(rs, 0, G));
    cr_assert_eq(report_of(a).available_bytes, 0);
    EXPECT_STATUS(ortmem_region_commit(rs, G, 1), ORTMEM_E_BUDGET);
    cr_assert_eq(stats_of(b).owned_bytes, 4 * G);

    OK(ortmem_region_destroy(rb));
    OK(ortmem_region_destroy(rs));
    OK(ortmem_authority_destroy(a));
    OK(ortmem_backend_destroy(b));
}

Test(governance, a_share_charges_mapped_bytes_to_the_destination_within_the_allowance)
{
    ortmem_backend *b = test_backend();
    ortmem_authority *a = authority_on(b, 16 * G, 3 * G);
    ortmem_holder *src = holder_on(a, "src", ORTMEM_ROLE_WEIGHTS);
    ortmem_holder *dst = holder_on(a, "dst", ORTMEM_ROLE_KV);
    ortmem_region *rs = region_for(b, src, 4 * G, 0);
    ortmem_region *rd = region_for(b, dst, 4 * G, 0);
    OK(ortmem_region_commit(rs, 0, 2 * G));

    /* Two more mapped granules would pass the allowance of three. */
    ortmem_vmm_stats before = ledger_of(b);
    EXPECT_STATUS(ortmem_region_share(rd, 0, rs, 0, 2 * G, ORTMEM_ACCESS_READ), ORTMEM_E_BUDGET);
    cr_assert(strstr(ortmem_last_error(), "allowance 196608"), "%s", ortmem_last_error());
    ortmem_vmm_stats after = ledger_of(b);
    assert_ledger_equal(&before, &after);
    cr_assert_eq(holder_report(a, "dst").mapped_bytes, 0);

    OK(ortmem_region_share(rd, 0, rs, 0, G, ORTMEM_ACCESS_READ));
    ortmem_holder_report hs = holder_report(a, "src"), hd = holder_report(a, "dst");
    cr_assert_eq(hs.owned_bytes, 2 * G);
    cr_assert_eq(hs.mapped_bytes, 2 * G);
    cr_assert_eq(hd.owned_bytes, 0);
    cr_assert_eq(hd.mapped_bytes, G);
    ortmem_authority_report r = report_of(a);
    cr_assert_eq(r.owned_bytes, 2 * G);
    cr_assert_eq(r.mapped_bytes, 3 * G);
    cr_assert_eq(r.by_role_mapped[ORTMEM_ROLE_KV], G);
    cr_assert_eq(r.by_role_owned[ORTMEM_ROLE_KV], 0);
    cr_assert_eq(stats_of(b).mapped_bytes, 3 * G);

    /* The allowance is full: even a commit that fits the limit is refused. */
    EXPECT_STATUS(ortmem_region_commit(rs, 2 * G, G), ORTMEM_E_BUDGET);
    cr_assert_eq(report_of(a).owned_bytes, 2 * G);

    /* Unmapping the alias refunds the destination only. */
    OK(ortmem_region_decommit(rd, 0, G));
    cr_assert_eq(holder_report(a, "dst").mapped_bytes, 0);
    cr_assert_eq(holder_report(a, "src").mapped_bytes, 2 * G);
    OK(ortmem_region_commit(rs, 2 * G, G));

    OK(ortmem_region_destroy(rd));
    OK(ortmem_region_destroy(rs));
    OK(ortmem_authority_destroy(a));
    OK(ortmem_backend_destroy(b));
}

/* ---- the built-in pool and quarantine holders ---- */

Test(governance, pooled_granules_are_charged_to_the_pool_holder_and_taken_back)
{
    ortmem_backend *b = test_backend();
    ortmem_authority *a = authority_on(b, 4 * G, 0);
    OK(ortmem_pool_set_cap(b, 4 * G));
    ortmem_holder *one = holder_on(a, "one", ORTMEM_ROLE_KV);
    ortmem_holder *two = holder_on(a, "two", ORTMEM_ROLE_WORKSPACE);
    ortmem_region *r1 = region_for(b, one, 4 * G, 0);
    ortmem_region *r2 = region_for(b, two, 4 * G, 0);

    OK(ortmem_region_commit(r1, 0, 3 * G));
    OK(ortmem_region_decommit(r1, 0, 3 * G));
    cr_assert_eq(owned_of(a, "one"), 0);
    cr_assert_eq(owned_of(a, "pool"), 3 * G);
    cr_assert_eq(holder_report(a, "pool").mapped_bytes, 0);
    ortmem_authority_report r = report_of(a);
    cr_assert_eq(r.owned_bytes, 3 * G); /* unchanged by the move */
    cr_assert_eq(r.mapped_bytes, 0);
    cr_assert_eq(r.available_bytes, G);
    cr_assert_eq(r.by_role_owned[ORTMEM_ROLE_OTHER], 3 * G); /* the pool's role */
    cr_assert_eq(stats_of(b).pool_bytes, 3 * G);

    /* Another holder takes the pooled granules: the charge moves, no new
     * capacity is needed and nobody is pressed; one granule is created. */
    ortmem_vmm_stats s0 = stats_of(b);
    OK(ortmem_region_commit(r2, 0, 4 * G));
    ortmem_vmm_stats s1 = stats_of(b);
    cr_assert_eq(s1.pool_hits - s0.pool_hits, 3);
    cr_assert_eq(s1.calls[ORTMEM_OP_CREATE] - s0.calls[ORTMEM_OP_CREATE], 1);
    cr_assert_eq(owned_of(a, "pool"), 0);
    cr_assert_eq(owned_of(a, "two"), 4 * G);
    r = report_of(a);
    cr_assert_eq(r.owned_bytes, 4 * G);
    cr_assert_eq(r.available_bytes, 0);
    cr_assert_eq(r.pressure_calls, 0);
    cr_assert_eq(r.refusals, 0);

    /* Back into the pool, then the authority goes: the pool stays owned by
     * the backend and is released with it. */
    OK(ortmem_region_destroy(r2));
    cr_assert_eq(owned_of(a, "pool"), 4 * G);
    OK(ortmem_region_destroy(r1));
    OK(ortmem_authority_destroy(a));
    cr_assert_eq(stats_of(b).pool_bytes, 4 * G);
    OK(ortmem_backend_destroy(b));
}

Test(governance, pressure_trims_the_pool_before_any_holder)
{
    ortmem_backend *b = test_backend();
    ortmem_authority *a = authority_on(b, 4 * G, 0);
    OK(ortmem_pool_set_cap(b, 4 * G));
    ortmem_holder *one = holder_on(a, "one", ORTMEM_ROLE_KV);
    ortmem_region *r1 = region_for(b, one, 4 * G, 0);
    /* A reclaimable holder that must not be asked: the pool is enough. */
    reclaimer rec = {.tag = "spare"};
    ortmem_holder *spare = holder_with(a, "spare", ORTMEM_ROLE_WEIGHTS, -100, reclaim, &rec);
    rec.region = region_for(b, spare, 4 * G, 0);
    ortmem_holder *user = holder_on(a, "user", ORTMEM_ROLE_WORKSPACE);
    /* Exportable granules never come from the pool: the commit needs room. */
    ortmem_region *ru = region_for(b, user, 4 * G, ORTMEM_REGION_EXPORTABLE);

    OK(ortmem_region_commit(rec.region, 0, G));
    rec.committed = 1;
    OK(ortmem_region_commit(r1, 0, 3 * G));
    OK(ortmem_region_decommit(r1, 0, 2 * G));
    cr_assert_eq(owned_of(a, "pool"), 2 * G);
    cr_assert_eq(report_of(a).available_bytes, 0);

    /* Fits only once the pool is trimmed by two granules. */
    OK(ortmem_region_commit(ru, 0, 2 * G));
    cr_assert_eq(rec.calls, 0);
    cr_assert_eq(owned_of(a, "pool"), 0);
    cr_assert_eq(owned_of(a, "spare"), G);
    cr_assert_eq(owned_of(a, "user"), 2 * G);
    ortmem_authority_report r = report_of(a);
    cr_assert_eq(r.owned_bytes, 4 * G);
    cr_assert_eq(r.pressure_calls, 1);
    cr_assert_eq(r.pressure_reclaimed_bytes, 2 * G);
    cr_assert_eq(r.refusals, 0);
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.pool_bytes, 0);
    cr_assert_eq(s.owned_bytes, 4 * G);

    OK(ortmem_region_destroy(ru));
    OK(ortmem_region_destroy(r1));
    OK(ortmem_region_destroy(rec.region));
    OK(ortmem_authority_destroy(a));
    OK(ortmem_backend_destroy(b));
}

Test(governance, a_quarantined_granule_is_charged_to_the_quarantine_holder)
{
    ortmem_backend *cpu = test_backend();
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = ORTMEM_OP_RELEASE;
    fo.fail_at = 1;
    ortmem_backend *f = NULL;
    OK(ortmem_fault_backend_create(cpu, &fo, &f));
    ortmem_authority *a = authority_on(f, 8 * G, 0);
    ortmem_holder *u = holder_on(a, "user", ORTMEM_ROLE_KV);
    ortmem_region *r = region_for(f, u, 4 * G, 0);
    OK(ortmem_region_commit(r, 0, 2 * G));

    EXPECT_STATUS(ortmem_region_decommit(r, 0, G), ORTMEM_E_QUARANTINED);
    ortmem_holder_report hq = holder_report(a, "quarantine"), hu = holder_report(a, "user");
    cr_assert_eq(hq.owned_bytes, G);
    cr_assert_eq(hq.mapped_bytes, 0);
    cr_assert_eq(hu.owned_bytes, G);
    cr_assert_eq(hu.mapped_bytes, G);
    ortmem_authority_report rep = report_of(a);
    cr_assert_eq(rep.owned_bytes, 2 * G);
    cr_assert_eq(rep.mapped_bytes, G);
    cr_assert_eq(rep.available_bytes, 6 * G); /* quarantined memory still counts */
    cr_assert_eq(stats_of(f).quarantined_bytes, G);

    /* The user's memory is gone; it can leave, the quarantine stays. */
    OK(ortmem_region_destroy(r));
    cr_assert_eq(owned_of(a, "user"), 0);
    cr_assert_eq(owned_of(a, "quarantine"), G);
    OK(ortmem_holder_unregister(u));
    cr_assert_eq(report_of(a).holder_count, 2);
    OK(ortmem_authority_destroy(a));
    EXPECT_STATUS(ortmem_backend_destroy(f), ORTMEM_E_QUARANTINED);
    OK(ortmem_backend_destroy(cpu));
}

/* The owner-to-quarantine move is one step under the authority's lock: the
 * bytes never look free on the way, so a waiting ticket (served whenever
 * capacity is freed) cannot take them and lift owned past the limit. */
Test(governance, a_quarantined_granule_frees_no_room_for_a_waiting_ticket)
{
    ortmem_backend *cpu = test_backend();
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = ORTMEM_OP_RELEASE;
    fo.fail_at = 1;
    ortmem_backend *f = NULL;
    OK(ortmem_fault_backend_create(cpu, &fo, &f));
    ortmem_authority *a = authority_on(f, 2 * G, 0);
    ortmem_holder *u = holder_on(a, "user", ORTMEM_ROLE_KV);
    ortmem_holder *w = holder_on(a, "waiter", ORTMEM_ROLE_WORKSPACE);
    ortmem_region *r = region_for(f, u, 2 * G, 0);
    OK(ortmem_region_commit(r, 0, 2 * G));
    ortmem_ticket *t = NULL;
    OK(ortmem_ticket_submit(w, G, 0, &t));
    ortmem_grant *g = NULL;
    EXPECT_STATUS(ortmem_ticket_wait(t, 0, &g), ORTMEM_E_TIMEOUT);

    EXPECT_STATUS(ortmem_region_decommit(r, 0, G), ORTMEM_E_QUARANTINED);
    cr_assert_eq(owned_of(a, "quarantine"), G);
    cr_assert_eq(owned_of(a, "user"), G);
    /* Had the ticket been served, its grant would be charged like this. */
    ortmem_status st = ortmem_ticket_wait(t, 0, &g);
    if (st == ORTMEM_OK)
        OK(ortmem_grant_charge(g, G));
    ortmem_authority_report rep = report_of(a);
    cr_assert_leq(rep.owned_bytes, rep.limit_bytes, "owned %llu over the limit %llu",
                  (unsigned long long)rep.owned_bytes, (unsigned long long)rep.limit_bytes);
    cr_assert_eq(st, ORTMEM_E_TIMEOUT, "the ticket was served with %s", ortmem_status_str(st));
    cr_assert_eq(rep.owned_bytes, 2 * G);
    cr_assert_eq(rep.claimed_bytes, 0);
    cr_assert_eq(rep.available_bytes, 0);
    cr_assert_eq(rep.tickets_waiting, 1);

    /* Room made by the user's own decommit serves the ticket. */
    OK(ortmem_region_decommit(r, G, G));
    OK(ortmem_ticket_wait(t, 0, &g));
    OK(ortmem_grant_charge(g, G));
    rep = report_of(a);
    cr_assert_eq(rep.owned_bytes, 2 * G);
    cr_assert_eq(owned_of(a, "waiter"), G);
    OK(ortmem_holder_refund(w, G));
    OK(ortmem_region_destroy(r));
    OK(ortmem_authority_destroy(a));
    EXPECT_STATUS(ortmem_backend_destroy(f), ORTMEM_E_QUARANTINED);
    OK(ortmem_backend_destroy(cpu));
}

/* ---- holders ---- */

Test(governance, holder_unregister_names_why_it_is_busy)
{
    ortmem_backend *b = test_backend();
    ortmem_authority *a = authority_on(b, 8 * G, 0);
    ortmem_holder *h = NULL;
    ortmem_holder_options o = ORTMEM_HOLDER_OPTIONS_INIT;
    EXPECT_STATUS(ortmem_holder_register(a, NULL, &h), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_holder_register(a, &o, NULL), ORTMEM_E_INVALID);
    o.role = ORTMEM_ROLE_COUNT;
    EXPECT_STATUS(ortmem_holder_register(a, &o, &h), ORTMEM_E_INVALID);
    o.role = ORTMEM_ROLE_KV;
    o.struct_size = 0;
    EXPECT_STATUS(ortmem_holder_register(a, &o, &h), ORTMEM_E_INVALID);
    cr_assert_null(h);
    cr_assert_eq(report_of(a).holder_count, 2);
    o.struct_size = sizeof o;
    OK(ortmem_holder_register(a, &o, &h)); /* NULL name */
    cr_assert_eq(holder_report(a, "unnamed").role, ORTMEM_ROLE_KV);

    /* Account still used by a region. */
    ortmem_region *r = region_for(b, h, 4 * G, 0);
    EXPECT_STATUS(ortmem_holder_unregister(h), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "still use its account"), "%s", ortmem_last_error());
    /* Charged. */
    OK(ortmem_region_commit(r, 0, G));
    EXPECT_STATUS(ortmem_holder_unregister(h), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "it is charged"), "%s", ortmem_last_error());
    OK(ortmem_region_destroy(r));

    /* A lease. */
    ortmem_lease *l = NULL;
    OK(ortmem_lease_acquire(h, G, &l));
    EXPECT_STATUS(ortmem_holder_unregister(h), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "holds a lease"), "%s", ortmem_last_error());
    OK(ortmem_lease_drop(l));

    /* An open grant; then grant-charged bytes until refunded. */
    ortmem_grant *g = NULL;
    OK(ortmem_grant_prepare(h, 2 * G, &g));
    EXPECT_STATUS(ortmem_holder_unregister(h), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "grant or hold is open"), "%s", ortmem_last_error());
    OK(ortmem_grant_charge(g, 2 * G));
    EXPECT_STATUS(ortmem_holder_unregister(h), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "it is charged"), "%s", ortmem_last_error());
    OK(ortmem_holder_refund(h, 2 * G));

    OK(ortmem_holder_unregister(h));
    cr_assert_eq(report_of(a).holder_count, 2);
    /* A stale handle is answered, never dereferenced. */
    ortmem_account acct;
    EXPECT_STATUS(ortmem_holder_unregister(h), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_holder_account(h, &acct), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_grant_prepare(h, G, &g), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_lease_acquire(h, G, &l), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_holder_refund(h, 0), ORTMEM_E_HANDLE);
    /* The lease it dropped is still told apart after the holder went. */
    EXPECT_STATUS(ortmem_lease_drop(l), ORTMEM_E_DOUBLE_FREE);
    cr_assert(strstr(ortmem_last_error(), "for 'unnamed' was dropped already"), "%s",
              ortmem_last_error());
    EXPECT_STATUS(ortmem_holder_unregister(NULL), ORTMEM_E_INVALID);
    OK(ortmem_authority_destroy(a));
    OK(ortmem_backend_destroy(b));
}

/* ---- leases ---- */

Test(governance, a_lease_holds_capacity_that_only_its_holder_uses)
{
    ortmem_backend *b = test_backend();
    ortmem_authority *a = authority_on(b, 8 * G, 0);
    ortmem_holder *kv = holder_on(a, "kv", ORTMEM_ROLE_KV);
    ortmem_holder *other = holder_on(a, "other", ORTMEM_ROLE_WORKSPACE);
    ortmem_lease *l = NULL;
    EXPECT_STATUS(ortmem_lease_acquire(kv, 0, &l), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_lease_acquire(kv, G, NULL), ORTMEM_E_INVALID);
    OK(ortmem_lease_acquire(kv, 4 * G, &l));
    ortmem_holder_report hk = holder_report(a, "kv");
    cr_assert_eq(hk.leased_bytes, 4 * G);
    cr_assert_eq(hk.owned_bytes, 0);
    ortmem_authority_report r = report_of(a);
    cr_assert_eq(r.claimed_bytes, 4 * G);
    cr_assert_eq(r.available_bytes, 4 * G);
    cr_assert_eq(r.owned_bytes, 0);

    /* Nobody else can take the leased capacity. */
    ortmem_grant *g = NULL;
    EXPECT_STATUS(ortmem_grant_prepare(other, 5 * G, &g), ORTMEM_E_BUDGET);
    OK(ortmem_grant_prepare(other, 4 * G, &g));
    OK(ortmem_grant_charge(g, 4 * G));
    cr_assert_eq(report_of(a).available_bytes, 0);

    /* The holder's own commits up to the lease need no more capacity. */
    ortmem_region *rk = region_for(b, kv, 8 * G, 0);
    OK(ortmem_region_commit(rk, 0, 3 * G));
    r = report_of(a);
    cr_assert_eq(r.owned_bytes, 7 * G);
    cr_assert_eq(r.claimed_bytes, G); /* what is left of the lease */
    cr_assert_eq(r.available_bytes, 0);
    OK(ortmem_region_commit(rk, 3 * G, G));
    r = report_of(a);
    cr_assert_eq(r.owned_bytes, 8 * G);
    cr_assert_eq(r.claimed_bytes, 0);
    /* Beyond the lease it competes like anyone: the limit is reached. */
    EXPECT_STATUS(ortmem_region_commit(rk, 4 * G, G), ORTMEM_E_BUDGET);
    /* Leases that do not fit: a new claim, and one beyond what kv owns. */
    ortmem_holder *third = holder_on(a, "third", ORTMEM_ROLE_OTHER);
    ortmem_lease *l2 = NULL;
    EXPECT_STATUS(ortmem_lease_acquire(third, G, &l2), ORTMEM_E_BUDGET);
    cr_assert(strstr(ortmem_last_error(), "lease acquire"), "%s", ortmem_last_error());
    cr_assert_null(l2);
    EXPECT_STATUS(ortmem_lease_acquire(kv, 2 * G, &l2), ORTMEM_E_BUDGET);
    cr_assert_eq(holder_report(a, "kv").leased_bytes, 4 * G);
    /* A lease covered by what the holder already owns fits. */
    OK(ortmem_lease_acquire(other, 2 * G, &l2));
    cr_assert_eq(holder_report(a, "other").leased_bytes, 2 * G);
    r = report_of(a);
    cr_assert_eq(r.available_bytes, 0);
    cr_assert_eq(r.claimed_bytes, 0);
    OK(ortmem_lease_drop(l2));

    /* Released exactly once; the owned footprint stays. */
    OK(ortmem_region_decommit(rk, 2 * G, 2 * G));
    cr_assert_eq(report_of(a).available_bytes, 0); /* the lease still covers it */
    OK(ortmem_lease_drop(l));
    EXPECT_STATUS(ortmem_lease_drop(l), ORTMEM_E_DOUBLE_FREE);
    EXPECT_STATUS(ortmem_lease_drop(l2), ORTMEM_E_DOUBLE_FREE);
    hk = holder_report(a, "kv");
    cr_assert_eq(hk.leased_bytes, 0);
    cr_assert_eq(hk.owned_bytes, 2 * G);
    r = report_of(a);
    cr_assert_eq(r.claimed_bytes, 0);
    cr_assert_eq(r.available_bytes, 2 * G);

    OK(ortmem_region_destroy(rk));
    OK(ortmem_holder_refund(other, 4 * G));
    /* A lease outlived by its authority: dropping it is a handle error. */
    OK(ortmem_lease_acquire(kv, G, &l));
    OK(ortmem_authority_destroy(a));
    EXPECT_STATUS(ortmem_lease_drop(l), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_lease_drop(l2), ORTMEM_E_HANDLE);
    OK(ortmem_backend_destroy(b));
}

/* ---- grants ---- */

Test(governance, grants_prepare_commit_abort_and_refund)
{
    ortmem_backend *b = test_backend();
    ortmem_authority *a = authority_on(b, 8 * G, 0);
    ortmem_holder *h = holder_on(a, "engine", ORTMEM_ROLE_KV);
    ortmem_grant *g = NULL;
    EXPECT_STATUS(ortmem_grant_prepare(h, 0, &g), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_grant_prepare(h, G, NULL), ORTMEM_E_INVALID);

    OK(ortmem_grant_prepare(h, 3 * G, &g));
    ortmem_holder_report hr = holder_report(a, "engine");
    cr_assert_eq(hr.held_bytes, 3 * G);
    cr_assert_eq(hr.owned_bytes, 0);
    ortmem_authority_report r = report_of(a);
    cr_assert_eq(r.claimed_bytes, 3 * G);
    cr_assert_eq(r.available_bytes, 5 * G);

    /* Commit less than prepared: the rest is refunded. */
    OK(ortmem_grant_charge(g, 2 * G));
    hr = holder_report(a, "engine");
    cr_assert_eq(hr.held_bytes, 0);
    cr_assert_eq(hr.owned_bytes, 2 * G);
    cr_assert_eq(hr.mapped_bytes, 2 * G);
    r = report_of(a);
    cr_assert_eq(r.owned_bytes, 2 * G);
    cr_assert_eq(r.mapped_bytes, 2 * G);
    cr_assert_eq(r.claimed_bytes, 0);
    cr_assert_eq(r.available_bytes, 6 * G);
    cr_assert_eq(r.by_role_owned[ORTMEM_ROLE_KV], 2 * G);
    /* The grant is gone. */
    EXPECT_STATUS(ortmem_grant_charge(g, G), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_grant_abort(g), ORTMEM_E_HANDLE);

    /* Committing above what was prepared is refused; the grant stays open. */
    OK(ortmem_grant_prepare(h, 2 * G, &g));
    EXPECT_STATUS(ortmem_grant_charge(g, 2 * G + 1), ORTMEM_E_RANGE);
    cr_assert_eq(holder_report(a, "engine").held_bytes, 2 * G);
    cr_assert_eq(owned_of(a, "engine"), 2 * G);
    OK(ortmem_grant_abort(g));
    r = report_of(a);
    cr_assert_eq(r.claimed_bytes, 0);
    cr_assert_eq(r.available_bytes, 6 * G);

    /* A refused prepare changes nothing but the refusal count (and the pool
     * holder, asked first, counts as one pressure call reclaiming nothing). */
    ortmem_authority_report before;
    memset(&before, 0, sizeof before);
    before.struct_size = sizeof before;
    ortmem_holder_report hb[MAX_HOLDERS], ha[MAX_HOLDERS];
    memset(hb, 0, sizeof hb);
    memset(ha, 0, sizeof ha);
    OK(ortmem_authority_report_get(a, &before, hb, MAX_HOLDERS));
    g = NULL;
    EXPECT_STATUS(ortmem_grant_prepare(h, 6 * G + 1, &g), ORTMEM_E_BUDGET);
    cr_assert(strstr(ortmem_last_error(), "requested 393217 bytes; available 393216 of limit "
                                          "524288"),
              "%s", ortmem_last_error());
    cr_assert(strstr(ortmem_last_error(), "largest holders: engine 131072"), "%s",
              ortmem_last_error());
    cr_assert_null(g);
    ortmem_authority_report after;
    memset(&after, 0, sizeof after);
    after.struct_size = sizeof after;
    OK(ortmem_authority_report_get(a, &after, ha, MAX_HOLDERS));
    cr_assert_eq(after.refusals, before.refusals + 1);
    cr_assert_eq(after.pressure_calls, before.pressure_calls, "nobody had anything to give");
    cr_assert_eq(after.pressure_reclaimed_bytes, before.pressure_reclaimed_bytes);
    after.refusals = before.refusals;
    after.pressure_calls = before.pressure_calls;
    cr_assert(memcmp(&before, &after, sizeof before) == 0, "the refusal changed the report");
    cr_assert(memcmp(hb, ha, sizeof hb) == 0, "the refusal changed a holder");

    /* Refunds of grant-charged memory, never more than charged. */
    EXPECT_STATUS(ortmem_holder_refund(h, 2 * G + 1), ORTMEM_E_RANGE);
    OK(ortmem_holder_refund(h, G));
    cr_assert_eq(owned_of(a, "engine"), G);
    cr_assert_eq(report_of(a).available_bytes, 7 * G);
    OK(ortmem_holder_refund(h, G));
    r = report_of(a);
    cr_assert_eq(r.owned_bytes, 0);
    cr_assert_eq(r.mapped_bytes, 0);
    cr_assert_eq(r.owned_peak_bytes, 2 * G);
    OK(ortmem_authority_destroy(a));
    OK(ortmem_backend_destroy(b));
}

static void assert_reports_equal(const ortmem_authority_report *x, const ortmem_authority_report *y)
{
    cr_assert(memcmp(x, y, sizeof *x) == 0,
              "reports differ: owned %llu/%llu claimed %llu/%llu refusals %llu/%llu",
              (unsigned long long)x->owned_bytes, (unsigned long long)y->owned_bytes,
              (unsigned long long)x->claimed_bytes, (unsigned long long)y->claimed_bytes,
              (unsigned long long)x->refusals, (unsigned long long)y->refusals);
}

Test(governance, prepare_many_over_two_authorities_is_all_or_nothing)
{
    ortmem_backend *b1 = test_backend(), *b2 = test_backend();
    ortmem_authority *a1 = authority_on(b1, 4 * G, 0);
    ortmem_authority *a2 = authority_on(b2, 4 * G, 0);
    ortmem_holder *h1 = holder_on(a1, "one", ORTMEM_ROLE_WEIGHTS);
    ortmem_holder *h2 = holder_on(a2, "two", ORTMEM_ROLE_KV);
    ortmem_grant *grants[2] = {NULL, NULL};
    uint64_t bytes[2] = {2 * G, 3 * G};

    /* Listed against the lock order (the later authority first). */
    ortmem_holder *rev[2] = {h2, h1};
    OK(ortmem_grant_prepare_many(2, rev, bytes, grants));
    cr_assert_eq(holder_report(a2, "two").held_bytes, 2 * G);
    cr_assert_eq(holder_report(a1, "one").held_bytes, 3 * G);
    OK(ortmem_grant_charge(grants[0], G)); /* h2's */
    OK(ortmem_grant_abort(grants[1]));
    cr_assert_eq(owned_of(a2, "two"), G);
    cr_assert_eq(report_of(a1).claimed_bytes, 0);
    cr_assert_eq(report_of(a2).claimed_bytes, 0);

    /* The second claim does not fit: neither authority changes. */
    ortmem_holder *hs[2] = {h1, h2};
    ortmem_authority_report r1 = report_of(a1), r2 = report_of(a2);
    grants[0] = grants[1] = NULL;
    bytes[0] = 2 * G;
    bytes[1] = 4 * G;
    EXPECT_STATUS(ortmem_grant_prepare_many(2, hs, bytes, grants), ORTMEM_E_BUDGET);
    cr_assert(strstr(ortmem_last_error(), "'two'"), "%s", ortmem_last_error());
    cr_assert_null(grants[0]);
    cr_assert_null(grants[1]);
    ortmem_authority_report n1 = report_of(a1), n2 = report_of(a2);
    assert_reports_equal(&r1, &n1);
    cr_assert_eq(n2.refusals, r2.refusals + 1);
    n2.refusals = r2.refusals;
    n2.pressure_calls = r2.pressure_calls; /* the pool holder was asked */
    assert_reports_equal(&r2, &n2);

    /* The first claim does not fit: likewise. */
    r1 = report_of(a1);
    r2 = report_of(a2);
    bytes[0] = 5 * G;
    bytes[1] = G;
    EXPECT_STATUS(ortmem_grant_prepare_many(2, hs, bytes, grants), ORTMEM_E_BUDGET);
    n1 = report_of(a1);
    n2 = report_of(a2);
    cr_assert_eq(n1.refusals, r1.refusals + 1);
    n1.refusals = r1.refusals;
    n1.pressure_calls = r1.pressure_calls;
    assert_reports_equal(&r1, &n1);
    assert_reports_equal(&r2, &n2);

    /* Bad input changes nothing either. */
    bytes[1] = 0;
    bytes[0] = G;
    EXPECT_STATUS(ortmem_grant_prepare_many(2, hs, bytes, grants), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_grant_prepare_many(0, hs, bytes, grants), ORTMEM_E_INVALID);
    cr_assert_eq(report_of(a1).claimed_bytes, 0);

    OK(ortmem_holder_refund(h2, G));
    OK(ortmem_authority_destroy(a1));
    OK(ortmem_authority_destroy(a2));
    OK(ortmem_backend_destroy(b1));
    OK(ortmem_backend_destroy(b2));
}

/* ---- pressure ---- */

Test(governance, pressure_asks_the_lowest_priority_first_and_never_the_requester)
{
    ortmem_backend *b = test_backend();
    ortmem_authority *a = authority_on(b, 8 * G, 0);
    reclaimer p5 = {.tag = "p5"}, p1 = {.tag = "p1"}, p3 = {.tag = "p3"}, req = {.tag = "req"};
    /* Registered out of order; p1 reclaims nothing and is tolerated. */
    ortmem_holder *h5 = holder_with(a, "p5", ORTMEM_ROLE_WEIGHTS, 5, reclaim, &p5);
    ortmem_holder *h1 = holder_with(a, "p1", ORTMEM_ROLE_KV, 1, reclaim, &p1);
    ortmem_holder *h3 = holder_with(a, "p3", ORTMEM_ROLE_KV, 3, reclaim, &p3);
    /* The requester has the lowest priority of all and a callback. */
    ortmem_holder *hr = holder_with(a, "req", ORTMEM_ROLE_WORKSPACE, -5, reclaim, &req);
    reclaimer *all[] = {&p5, &p1, &p3};
    ortmem_holder *hs[] = {h5, h1, h3};
    for (int i = 0; i < 3; i++) {
        all[i]->region = region_for(b, hs[i], 4 * G, 0);
        OK(ortmem_region_commit(all[i]->region, 0, 2 * G));
        all[i]->committed = 2;
    }
    req.region = region_for(b, hr, 8 * G, 0);
    OK(ortmem_region_commit(req.region, 0, G));
    req.committed = 1;
    p1.give_nothing = 1;
    cr_assert_eq(report_of(a).available_bytes, G);

    call_log[0] = '\0';
    OK(ortmem_region_commit(req.region, G, 3 * G)); /* 2 granules short */
    cr_assert_str_eq(call_log, "p1 p3");
    cr_assert_eq(p1.last_want, 2 * G);
    cr_assert_eq(p3.last_want, 2 * G);
    cr_assert_eq(req.calls, 0);
    cr_assert_eq(p5.calls, 0);
    cr_assert_eq(owned_of(a, "p1"), 2 * G);
    cr_assert_eq(owned_of(a, "p3"), 0);
    cr_assert_eq(owned_of(a, "p5"), 2 * G);
    cr_assert_eq(owned_of(a, "req"), 4 * G);
    ortmem_authority_report r = report_of(a);
    cr_assert_eq(r.owned_bytes, 8 * G);
    cr_assert_eq(r.pressure_reclaimed_bytes, 2 * G);
    cr_assert_eq(r.pressure_calls, 2); /* p1, p3: the empty pool is not asked */
    cr_assert_eq(r.refusals, 0);

    /* A grant goes the same way: p1 (still nothing), then p5; p3 holds nothing. */
    call_log[0] = '\0';
    ortmem_grant *g = NULL;
    OK(ortmem_grant_prepare(hr, G, &g));
    cr_assert_str_eq(call_log, "p1 p5"); /* p3 has nothing left and is not asked */
    cr_assert_eq(owned_of(a, "p5"), G);
    OK(ortmem_grant_abort(g));

    /* Nobody can give enough: refused after everyone was asked once. */
    call_log[0] = '\0';
    EXPECT_STATUS(ortmem_grant_prepare(hr, 8 * G, &g), ORTMEM_E_BUDGET);
    cr_assert_str_eq(call_log, "p1 p5");
    cr_assert_eq(req.calls, 0);

    for (int i = 0; i < 3; i++)
        OK(ortmem_region_destroy(all[i]->region));
    OK(ortmem_region_destroy(req.region));
    OK(ortmem_authority_destroy(a));
    OK(ortmem_backend_destroy(b));
}

/* A callback that re-enters the authority in every way it may. */
typedef struct reentrant {
    ortmem_authority *authority;
    ortmem_holder *self;
    ortmem_region *region;
    unsigned calls, depth, max_depth;
    ortmem_status report_st, big_prepare_st, small_prepare_st, decommit_st, commit_st;
    uint64_t owned_seen;
} reentrant;

static uint64_t reenter(void *user, uint64_t want)
{
    reentrant *re = user;
    re->calls++;
    re->depth++;
    re->max_depth = re->depth > re->max_depth ? re->depth : re->max_depth;
    (void)want;
    ortmem_authority_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    re->report_st = ortmem_authority_report_get(re->authority, &r, NULL, 0);
    re->owned_seen = r.owned_bytes;
    /* A prepare from inside a callback does not ask for pressure again. */
    ortmem_grant *g = NULL;
    re->big_prepare_st = ortmem_grant_prepare(re->self, 64 * G, &g);
    /* A commit of the holder's own region does not either. */
    re->commit_st = ortmem_region_commit(re->region, 3 * G, 2 * G);
    re->decommit_st = ortmem_region_decommit(re->region, 0, 3 * G);
    /* Now there is room: a prepare that fits goes through. */
    re->small_prepare_st = ortmem_grant_prepare(re->self, G, &g);
    if (re->small_prepare_st == ORTMEM_OK)
        (void)ortmem_grant_abort(g);
    re->depth--;
    return re->decommit_st == ORTMEM_OK ? 3 * G : 0;
}

Test(governance, a_pressure_callback_may_reenter_the_authority, .timeout = 10)
{
    ortmem_backend *b = test_backend();
    ortmem_authority *a = authority_on(b, 4 * G, 0);
    reentrant re = {.authority = a};
    re.self = holder_with(a, "reentrant", ORTMEM_ROLE_KV, 0, reenter, &re);
    re.region = region_for(b, re.self, 8 * G, 0);
    OK(ortmem_region_commit(re.region, 0, 3 * G));
    ortmem_holder *user = holder_on(a, "user", ORTMEM_ROLE_WORKSPACE);
    ortmem_region *ru = region_for(b, user, 4 * G, 0);

    OK(ortmem_region_commit(ru, 0, 3 * G));
    cr_assert_eq(re.calls, 1);
    cr_assert_eq(re.max_depth, 1);
    OK(re.report_st);
    cr_assert_eq(re.owned_seen, 3 * G);
    EXPECT_STATUS(re.big_prepare_st, ORTMEM_E_BUDGET);
    EXPECT_STATUS(re.commit_st, ORTMEM_E_BUDGET);
    OK(re.decommit_st);
    OK(re.small_prepare_st);
    cr_assert_eq(owned_of(a, "reentrant"), 0);
    cr_assert_eq(owned_of(a, "user"), 3 * G);
    ortmem_authority_report r = report_of(a);
    cr_assert_eq(r.owned_bytes, 3 * G);
    cr_assert_eq(r.claimed_bytes, 0);
    cr_assert_eq(r.refusals, 2); /* the two refusals inside the callback */
    cr_assert_eq(r.pressure_reclaimed_bytes, 3 * G);
    cr_assert_eq(r.pressure_calls, 1); /* the callback: the empty pool is not asked */

    OK(ortmem_region_destroy(ru));
    OK(ortmem_region_destroy(re.region));
    OK(ortmem_authority_destroy(a));
    OK(ortmem_backend_destroy(b));
}

/* ---- limit changes ---- */

Test(governance, lowering_the_limit_asks_holders_then_holds_or_refuses_growth)
{
    ortmem_backend *b = test_backend();
    ortmem_authority *a = authority_on(b, 8 * G, 0);
    reclaimer rec = {.tag = "cache"};
    ortmem_holder *cache = holder_with(a, "cache", ORTMEM_ROLE_KV, 0, reclaim, &rec);
    ortmem_holder *fixed = holder_on(a, "fixed", ORTMEM_ROLE_WEIGHTS);
    rec.region = region_for(b, cache, 8 * G, 0);
    ortmem_region *rf = region_for(b, fixed, 8 * G, 0);
    OK(ortmem_region_commit(rec.region, 0, 3 * G));
    rec.committed = 3;
    OK(ortmem_region_commit(rf, 0, 3 * G));

    ortmem_limit_outcome out = {.struct_size = sizeof out};
    EXPECT_STATUS(ortmem_authority_set_limit(a, 0, &out), ORTMEM_E_INVALID);
    ortmem_limit_outcome unset = {.struct_size = 0};
    EXPECT_STATUS(ortmem_authority_set_limit(a, 4 * G, &unset), ORTMEM_E_INVALID);
    cr_assert_eq(report_of(a).limit_bytes, 8 * G);

    /* Two granules over the new limit: the cache gives them back. */
    OK(ortmem_authority_set_limit(a, 4 * G, &out));
    cr_assert_eq(out.old_limit_bytes, 8 * G);
    cr_assert_eq(out.new_limit_bytes, 4 * G);
    cr_assert_eq(out.reclaimed_bytes, 2 * G);
    cr_assert_eq(out.charged_bytes, 4 * G);
    cr_assert(out.within_limit);
    cr_assert_eq(rec.last_want, 2 * G);
    cr_assert_eq(owned_of(a, "cache"), G);
    ortmem_authority_report r = report_of(a);
    cr_assert_eq(r.limit_bytes, 4 * G);
    cr_assert_eq(r.owned_bytes, 4 * G);
    cr_assert_eq(r.available_bytes, 0);
    cr_assert_eq(stats_of(b).owned_bytes, 4 * G);

    /* Nobody reclaims: the limit is applied but is not met. */
    rec.give_nothing = 1;
    OK(ortmem_authority_set_limit(a, 2 * G, &out));
    cr_assert_eq(out.old_limit_bytes, 4 * G);
    cr_assert_eq(out.reclaimed_bytes, 0);
    cr_assert_eq(out.charged_bytes, 4 * G);
    cr_assert(!out.within_limit);
    r = report_of(a);
    cr_assert_eq(r.limit_bytes, 2 * G);
    cr_assert_eq(r.owned_bytes, 4 * G);
    cr_assert_eq(r.available_bytes, 0);
    /* Growth is refused until usage drops below the limit. */
    EXPECT_STATUS(ortmem_region_commit(rf, 3 * G, G), ORTMEM_E_BUDGET);
    OK(ortmem_region_decommit(rf, G, 2 * G)); /* 2 granules owned in all */
    EXPECT_STATUS(ortmem_region_commit(rf, 3 * G, G), ORTMEM_E_BUDGET);
    OK(ortmem_region_decommit(rec.region, 0, G));
    rec.committed = 0;
    OK(ortmem_region_commit(rf, 3 * G, G)); /* 2 granules again: at the limit */
    EXPECT_STATUS(ortmem_region_commit(rf, 4 * G, G), ORTMEM_E_BUDGET);
    cr_assert_eq(report_of(a).owned_bytes, 2 * G);

    /* Raising allows growth again; nobody is asked. */
    unsigned calls = rec.calls;
    OK(ortmem_authority_set_limit(a, 8 * G, NULL));
    cr_assert_eq(rec.calls, calls);
    OK(ortmem_region_commit(rf, 4 * G, 4 * G));
    r = report_of(a);
    cr_assert_eq(r.owned_bytes, 6 * G);
    cr_assert_eq(r.available_bytes, 2 * G);

    OK(ortmem_region_destroy(rf));
    OK(ortmem_region_destroy(rec.region));
    OK(ortmem_authority_destroy(a));
    OK(ortmem_backend_destroy(b));
}

/* ---- formatting ---- */

/* Brackets and braces balance outside strings and the text is one value. */
static int json_balanced(const char *s)
{
    int depth = 0, in_string = 0;
    for (; *s; s++) {
        if (in_string) {
            if (*s == '\\' && s[1])
                s++;
            else if (*s == '"')
                in_string = 0;
            continue;
        }
        if (*s == '"')
            in_string = 1;
        else if (*s == '{' || *s == '[')
            depth++;
        else if (*s == '}' || *s == ']')
            depth--;
        if (depth < 0)
            return 0;
    }
    return depth == 0 && !in_string;
}

Test(governance, the_ledger_formats_as_a_table_and_as_json)
{
    ortmem_backend *b = test_backend();
    ortmem_authority *a = authority_on(b, 8 * G, 0);
    ortmem_holder *w = holder_on(a, "llama-weights", ORTMEM_ROLE_WEIGHTS);
    ortmem_holder *kv = holder_on(a, "kv \"paged\"", ORTMEM_ROLE_KV);
    ortmem_region *rw = region_for(b, w, 4 * G, 0);
    ortmem_region *rk = region_for(b, kv, 4 * G, 0);
    OK(ortmem_region_commit(rw, 0, 2 * G));
    OK(ortmem_region_commit(rk, 0, 100));

    char table[8192];
    size_t needed = 0;
    OK(ortmem_authority_format(a, ORTMEM_REPORT_TABLE, table, sizeof table, &needed));
    cr_assert_eq(needed, strlen(table) + 1);
    const char *names[] = {"llama-weights", "kv \"paged\"", "pool", "quarantine"};
    for (size_t i = 0; i < 4; i++)
        cr_assert(strstr(table, names[i]), "'%s' missing from:\n%s", names[i], table);
    cr_assert(strstr(table, "workspace"), "%s", table);

    char json[8192];
    OK(ortmem_authority_format(a, ORTMEM_REPORT_JSON, json, sizeof json, &needed));
    cr_assert_eq(needed, strlen(json) + 1);
    cr_assert(json_balanced(json), "%s", json);
    cr_assert(strstr(json, "\"owned_bytes\": 196608"), "%s", json);
    cr_assert(strstr(json, "\"name\": \"kv \\\"paged\\\"\""), "%s", json);
    cr_assert(strstr(json, "\"overhead_bytes\": 65436"), "%s", json);

    /* A real parser agrees. */
    char path[] = "/tmp/ortmem-governance-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    size_t len = strlen(json);
    cr_assert_eq(write(fd, json, len), (ssize_t)len);
    close(fd);
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
             "assert d[\"owned_bytes\"] == 196608; assert len(d[\"holders\"]) == 4; "
             "assert d[\"roles\"][\"kv\"][\"requested_bytes\"] == 100' %s",
             path);
    int rc = system(cmd);
    unlink(path);
    cr_assert_eq(rc, 0, "python3 rejected the JSON:\n%s", json);

    /* Too small: cut, terminated, and told the full length. */
    char small[16];
    memset(small, 'x', sizeof small);
    size_t short_needed = 0;
    EXPECT_STATUS(
        ortmem_authority_format(a, ORTMEM_REPORT_JSON, small, sizeof small, &short_needed),
        ORTMEM_E_RANGE);
    cr_assert_eq(short_needed, needed);
    cr_assert_eq(strlen(small), sizeof small - 1);
    cr_assert(strncmp(small, json, sizeof small - 1) == 0);
    EXPECT_STATUS(ortmem_authority_format(a, ORTMEM_REPORT_JSON, NULL, 0, &short_needed),
                  ORTMEM_E_RANGE);
    cr_assert_eq(short_needed, needed);
    char *exact = malloc(needed);
    cr_assert_not_null(exact);
    EXPECT_STATUS(ortmem_authority_format(a, ORTMEM_REPORT_JSON, exact, needed - 1, &short_needed),
                  ORTMEM_E_RANGE);
    OK(ortmem_authority_format(a, ORTMEM_REPORT_JSON, exact, needed, &short_needed));
    cr_assert_str_eq(exact, json);
    free(exact);
    EXPECT_STATUS(ortmem_authority_format(a, (ortmem_report_format)7, json, sizeof json, NULL),
                  ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_authority_format(a, ORTMEM_REPORT_TABLE, NULL, 8, NULL), ORTMEM_E_INVALID);

    OK(ortmem_region_destroy(rw));
    OK(ortmem_region_destroy(rk));
    OK(ortmem_authority_destroy(a));
    EXPECT_STATUS(ortmem_authority_format(a, ORTMEM_REPORT_TABLE, table, sizeof table, NULL),
                  ORTMEM_E_HANDLE);
    OK(ortmem_backend_destroy(b));
}

Test(governance, role_names_round_trip)
{
    for (int i = 0; i < ORTMEM_ROLE_COUNT; i++) {
        const char *name = ortmem_role_name((ortmem_role)i);
        cr_assert_not_null(name);
        ortmem_role back = ORTMEM_ROLE_COUNT;
        OK(ortmem_role_parse(name, &back));
        cr_assert_eq(back, (ortmem_role)i);
    }
    cr_assert_str_eq(ortmem_role_name(ORTMEM_ROLE_KV), "kv");
    cr_assert_str_eq(ortmem_role_name(ORTMEM_ROLE_WORKSPACE), "workspace");
    cr_assert_null(ortmem_role_name(ORTMEM_ROLE_COUNT));
    cr_assert_null(ortmem_role_name((ortmem_role)-1));
    ortmem_role role;
    EXPECT_STATUS(ortmem_role_parse("cache", &role), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_role_parse(NULL, &role), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_role_parse("kv", NULL), ORTMEM_E_INVALID);
}

/* ---- process manager ---- */

Test(governance, devices_are_created_once_and_torn_down_with_a_new_generation)
{
    ortmem_device_options o = ORTMEM_DEVICE_OPTIONS_INIT;
    o.limit_bytes = 8 * G;
    o.granule = TEST_GRANULE;
    ortmem_device_id id = {0, 0}, again = {0, 0};
    OK(ortmem_device_get(ORTMEM_DEVICE_CPU, 0, &o, &id));
    OK(ortmem_device_get(ORTMEM_DEVICE_CPU, 0, NULL, &again)); /* options ignored now */
    cr_assert_eq(id.slot, again.slot);
    cr_assert_eq(id.generation, again.generation);

    ortmem_backend *b = NULL;
    ortmem_authority *a = NULL;
    OK(ortmem_device_backend(id, &b));
    OK(ortmem_device_authority(id, &a));
    cr_assert_eq(ortmem_authority_backend(a), b);
    size_t granule = 0;
    OK(ortmem_backend_granule(b, &granule));
    cr_assert_eq(granule, TEST_GRANULE);
    cr_assert_eq(report_of(a).limit_bytes, 8 * G);
    EXPECT_STATUS(ortmem_device_backend(id, NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_device_get(ORTMEM_DEVICE_CPU, 0, &o, NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_device_get((ortmem_device_kind)9, 0, &o, &again), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_device_get(ORTMEM_DEVICE_CPU, 1, &o, &again), ORTMEM_E_RANGE);
    /* A CUDA device needs a driver and a GPU: unavailable here says why; on a
     * GPU machine the 64 KiB granule asked for is below the driver's minimum. */
    ortmem_status cuda = ortmem_device_get(ORTMEM_DEVICE_CUDA, 0, &o, &again);
    cr_assert(cuda == ORTMEM_E_UNAVAILABLE || cuda == ORTMEM_E_INVALID, "%s: %s",
              ortmem_status_str(cuda), ortmem_last_error());
    cr_assert_neq(ortmem_last_error()[0], '\0');
    ortmem_device_id bogus = {id.slot, id.generation + 1};
    EXPECT_STATUS(ortmem_device_backend(bogus, &b), ORTMEM_E_HANDLE);
    bogus = (ortmem_device_id){1000, id.generation};
    EXPECT_STATUS(ortmem_device_authority(bogus, &a), ORTMEM_E_HANDLE);

    /* Charging through the device's authority works like any other. */
    ortmem_holder *h = holder_on(a, "engine", ORTMEM_ROLE_KV);
    ortmem_region *r = region_for(b, h, 4 * G, 0);
    OK(ortmem_region_commit(r, 0, 2 * G));
    cr_assert_eq(owned_of(a, "engine"), 2 * G);
    OK(ortmem_region_destroy(r));
    OK(ortmem_holder_unregister(h));

    OK(ortmem_process_teardown());
    EXPECT_STATUS(ortmem_device_backend(id, &b), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_device_authority(id, &a), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_authority_destroy(a), ORTMEM_E_HANDLE);
    OK(ortmem_device_get(ORTMEM_DEVICE_CPU, 0, NULL, &again));
    cr_assert_neq(again.generation, id.generation);
    OK(ortmem_device_authority(again, &a));
    cr_assert_eq(report_of(a).limit_bytes, (uint64_t)16 << 30); /* the default */
    EXPECT_STATUS(ortmem_device_backend(id, &b), ORTMEM_E_HANDLE);
    OK(ortmem_process_teardown());
    OK(ortmem_process_teardown()); /* nothing left: still fine */
}

Test(governance, teardown_keeps_a_device_still_in_use)
{
    ortmem_device_options o = ORTMEM_DEVICE_OPTIONS_INIT;
    o.limit_bytes = 8 * G;
    o.granule = TEST_GRANULE;
    ortmem_device_id id;
    OK(ortmem_device_get(ORTMEM_DEVICE_CPU, 0, &o, &id));
    ortmem_backend *b = NULL;
    ortmem_authority *a = NULL;
    OK(ortmem_device_backend(id, &b));
    OK(ortmem_device_authority(id, &a));
    ortmem_holder *h = holder_on(a, "engine", ORTMEM_ROLE_KV);

    /* A holder charged through a grant keeps the authority. */
    ortmem_grant *g = NULL;
    OK(ortmem_grant_prepare(h, G, &g));
    OK(ortmem_grant_charge(g, G));
    EXPECT_STATUS(ortmem_process_teardown(), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "'engine'"), "%s", ortmem_last_error());
    OK(ortmem_device_authority(id, &a));
    cr_assert_eq(owned_of(a, "engine"), G);
    OK(ortmem_holder_refund(h, G));

    /* A region charging it keeps the backend (and so the device). */
    ortmem_region *r = region_for(b, h, 4 * G, 0);
    OK(ortmem_region_commit(r, 0, G));
    EXPECT_STATUS(ortmem_process_teardown(), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "still has 1 users"), "%s", ortmem_last_error());
    /* Still registered under the same id, and usable. */
    ortmem_device_id again;
    OK(ortmem_device_get(ORTMEM_DEVICE_CPU, 0, NULL, &again));
    cr_assert_eq(again.slot, id.slot);
    cr_assert_eq(again.generation, id.generation);
    ortmem_backend *b2 = NULL;
    OK(ortmem_device_backend(id, &b2));
    cr_assert_eq(b2, b);
    OK(ortmem_region_commit(r, G, G));
    cr_assert_eq(owned_of(a, "engine"), 2 * G);

    OK(ortmem_region_destroy(r));
    OK(ortmem_holder_unregister(h));

    /* A region without an account keeps the backend in use: the device stays
     * whole (backend and authority), not half torn down. */
    r = region_on(b, 4 * G, 0);
    EXPECT_STATUS(ortmem_process_teardown(), ORTMEM_E_BUSY);
    OK(ortmem_device_backend(id, &b2));
    cr_assert_eq(b2, b);
    ortmem_authority *a2 = NULL;
    OK(ortmem_device_authority(id, &a2));
    cr_assert_eq(a2, a);
    cr_assert_eq(report_of(a).limit_bytes, 8 * G);
    OK(ortmem_region_destroy(r));

    OK(ortmem_process_teardown());
    EXPECT_STATUS(ortmem_device_backend(id, &b2), ORTMEM_E_HANDLE);
}
