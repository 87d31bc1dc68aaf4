/* The physical pool: reuse across regions, the byte cap, trim and fill. */
#include "support.h"

#define G TEST_GRANULE

Test(pool, without_a_cap_every_decommit_releases)
{
    ortmem_backend *b = test_backend();
    ortmem_region *r = region_on(b, 4 * G, 0);
    OK(ortmem_region_commit(r, 0, 4 * G));
    OK(ortmem_region_decommit(r, 0, 4 * G));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_RELEASE], 4);
    cr_assert_eq(s.pool_bytes, 0);
    cr_assert_eq(s.pool_misses, 4);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(b));
}

Test(pool, pooled_granules_are_reused_across_regions_without_create)
{
    ortmem_backend *b = test_backend();
    OK(ortmem_pool_set_cap(b, 4 * G));
    ortmem_region *r1 = region_on(b, 4 * G, 0);
    OK(ortmem_region_commit(r1, 0, 4 * G));
    OK(ortmem_region_destroy(r1));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.pool_bytes, 4 * G);
    cr_assert_eq(s.owned_bytes, 4 * G, "a pooled granule stays owned");
    cr_assert_eq(s.mapped_bytes, 0);
    cr_assert_eq(s.calls[ORTMEM_OP_RELEASE], 0);
    ortmem_region *r2 = region_on(b, 6 * G, 0);
    OK(ortmem_region_commit(r2, 0, 6 * G));
    s = stats_of(b);
    cr_assert_eq(s.pool_hits, 4);
    cr_assert_eq(s.pool_misses, 4 + 2);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE], 6);
    cr_assert_eq(s.pool_bytes, 0);
    OK(ortmem_region_destroy(r2));
    s = stats_of(b);
    cr_assert_eq(s.pool_bytes, 4 * G, "the cap bounds what is kept");
    cr_assert_eq(s.calls[ORTMEM_OP_RELEASE], 2);
    OK(ortmem_backend_destroy(b));
}

Test(pool, trim_and_lowering_the_cap_release_granules)
{
    ortmem_backend *b = test_backend();
    OK(ortmem_pool_set_cap(b, 8 * G));
    OK(ortmem_pool_fill(b, 5 * G));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.pool_bytes, 5 * G);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE], 5);
    size_t released = 0;
    OK(ortmem_pool_trim(b, G, &released));
    cr_assert_eq(released, 4 * G);
    cr_assert_eq(stats_of(b).owned_bytes, G);
    OK(ortmem_pool_set_cap(b, 0));
    s = stats_of(b);
    cr_assert_eq(s.pool_bytes, 0);
    cr_assert_eq(s.owned_bytes, 0);
    cr_assert_eq(s.pool_cap_bytes, 0);
    EXPECT_STATUS(ortmem_pool_fill(b, G), ORTMEM_E_RANGE);
    OK(ortmem_backend_destroy(b));
}

Test(pool, exportable_granules_bypass_the_pool)
{
    ortmem_backend *b = test_backend();
    OK(ortmem_pool_set_cap(b, 4 * G));
    OK(ortmem_pool_fill(b, 2 * G));
    ortmem_region *r = region_on(b, 2 * G, ORTMEM_REGION_EXPORTABLE);
    OK(ortmem_region_commit(r, 0, 2 * G));
    cr_assert_eq(stats_of(b).pool_hits, 0);
    OK(ortmem_region_destroy(r));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.pool_bytes, 2 * G);
    cr_assert_eq(s.calls[ORTMEM_OP_RELEASE], 2);
    OK(ortmem_backend_destroy(b));
}

Test(pool, destroying_the_backend_releases_pooled_granules)
{
    ortmem_backend *cpu = test_backend();
    ortmem_backend *wrapped;
    OK(ortmem_fault_backend_create(cpu, NULL, &wrapped));
    OK(ortmem_pool_set_cap(wrapped, 4 * G));
    OK(ortmem_pool_fill(wrapped, 3 * G));
    EXPECT_STATUS(ortmem_backend_destroy(cpu), ORTMEM_E_BUSY);
    OK(ortmem_backend_destroy(wrapped));
    cr_assert_eq(stats_of(cpu).calls[ORTMEM_OP_RELEASE], 3);
    OK(ortmem_backend_destroy(cpu));
}

/* ---- size classes: class c keeps extents of exactly 2^c granules ---- */

static ortmem_pool_stats pool_stats_of(ortmem_backend *b)
{
    ortmem_pool_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    OK(ortmem_pool_stats_get(b, &s));
    return s;
}

static void commit_extent_at(ortmem_region *r, size_t offset, size_t len)
{
    ortmem_range range = {offset, len};
    OK(ortmem_region_commit_extents(r, &range, 1));
}

Test(pool, classes_serve_only_their_size)
{
    ortmem_backend *b = test_backend();
    OK(ortmem_pool_set_cap(b, 64 * G));
    ortmem_pool_stats p = pool_stats_of(b);
    cr_assert_eq(p.classes, 14, "64 KiB granules up to 512 MiB: 2^0 .. 2^13");
    OK(ortmem_pool_fill_extents(b, 4 * G, 2));
    OK(ortmem_pool_fill_extents(b, 2 * G, 1));
    p = pool_stats_of(b);
    cr_assert_eq(p.extents[2], 2);
    cr_assert_eq(p.extents[1], 1);
    cr_assert_eq(stats_of(b).pool_bytes, 10 * G);

    ortmem_region *r = region_on(b, 16 * G, 0);
    ortmem_vmm_stats s0 = stats_of(b);
    commit_extent_at(r, 0, 8 * G); /* no class-3 extent: created */
    commit_extent_at(r, 8 * G, 4 * G);
    commit_extent_at(r, 12 * G, 2 * G);
    ortmem_vmm_stats s = stats_of(b);
    p = pool_stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE] - s0.calls[ORTMEM_OP_CREATE], 1);
    cr_assert_eq(p.misses[3], 1);
    cr_assert_eq(p.hits[2], 1);
    cr_assert_eq(p.hits[1], 1);
    cr_assert_eq(p.extents[2], 1, "one 4-granule extent left");
    cr_assert_eq(p.extents[1], 0);
    cr_assert_eq(s.pool_bytes, 4 * G);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(b));
}

Test(pool, trim_is_oldest_first_across_classes)
{
    ortmem_backend *b = test_backend();
    OK(ortmem_pool_set_cap(b, 64 * G));
    ortmem_region *r = region_on(b, 16 * G, 0);
    commit_extent_at(r, 0, G);
    commit_extent_at(r, 4 * G, 4 * G);
    commit_extent_at(r, 8 * G, 2 * G);
    OK(ortmem_region_decommit(r, 0, G));         /* oldest: class 0 */
    OK(ortmem_region_decommit(r, 4 * G, 4 * G)); /* class 2 */
    OK(ortmem_region_decommit(r, 8 * G, 2 * G)); /* newest: class 1 */
    size_t released = 0;
    OK(ortmem_pool_trim(b, 6 * G, &released));
    cr_assert_eq(released, G);
    ortmem_pool_stats p = pool_stats_of(b);
    cr_assert_eq(p.extents[0], 0);
    cr_assert_eq(p.extents[2], 1);
    cr_assert_eq(p.extents[1], 1);
    OK(ortmem_pool_trim(b, 2 * G, &released));
    cr_assert_eq(released, 4 * G, "the 4-granule extent went before the newer 2-granule one");
    p = pool_stats_of(b);
    cr_assert_eq(p.extents[2], 0);
    cr_assert_eq(p.extents[1], 1);
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.owned_bytes, 2 * G);
    cr_assert_eq(s.owned_extents, 1);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(b));
}

Test(pool, fill_extents_is_all_or_nothing)
{
    ortmem_backend *inner = test_backend();
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = ORTMEM_OP_CREATE;
    fo.fail_at = 3;
    ortmem_backend *f = NULL;
    OK(ortmem_fault_backend_create(inner, &fo, &f));
    OK(ortmem_pool_set_cap(f, 32 * G));
    OK(ortmem_pool_fill_extents(f, 2 * G, 1)); /* create 1 */
    ortmem_vmm_stats s0 = stats_of(f);
    EXPECT_STATUS(ortmem_pool_fill_extents(f, 4 * G, 4), ORTMEM_E_BACKEND); /* creates 2, 3 */
    ortmem_vmm_stats s = stats_of(f);
    cr_assert_eq(s.pool_bytes, s0.pool_bytes, "the one extent this call added went again");
    cr_assert_eq(s.owned_bytes, s0.owned_bytes);
    cr_assert_eq(s.owned_extents, 1);
    cr_assert_eq(pool_stats_of(f).extents[2], 0);
    cr_assert_eq(pool_stats_of(f).extents[1], 1);
    EXPECT_STATUS(ortmem_pool_fill_extents(f, 4 * G, 8), ORTMEM_E_RANGE); /* over the cap */
    EXPECT_STATUS(ortmem_pool_fill_extents(f, 3 * G, 1), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_pool_fill_extents(f, G / 2, 1), ORTMEM_E_INVALID);
    cr_assert_eq(stats_of(f).calls[ORTMEM_OP_CREATE], s.calls[ORTMEM_OP_CREATE]);
    OK(ortmem_pool_fill_extents(f, 4 * G, 7));
    cr_assert_eq(stats_of(f).pool_bytes, 30 * G);
    OK(ortmem_backend_destroy(f));
    OK(ortmem_backend_destroy(inner));
}

/* Every backend call of a refill failed once: the pool and the ledger end as
 * they began, or equal to what they report quarantined. */
Test(pool, fault_sweep_over_fill_take_and_trim)
{
    int clean = 0;
    for (uint64_t n = 1; n < 100 && !clean; n++) {
        ortmem_backend *inner = test_backend();
        ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
        ortmem_backend *f = NULL;
        OK(ortmem_fault_backend_create(inner, &fo, &f));
        OK(ortmem_pool_set_cap(f, 32 * G));
        ortmem_region *r = region_on(f, 16 * G, 0);
        fo.fail_at = n;
        OK(ortmem_fault_backend_arm(f, &fo));
        ortmem_status st = ortmem_pool_fill_extents(f, 4 * G, 2);
        ortmem_pool_stats p = pool_stats_of(f);
        cr_assert(st == ORTMEM_OK ? p.extents[2] == 2 : p.extents[2] == 0, "step %llu",
                  (unsigned long long)n);
        ortmem_range ext[2] = {{0, 4 * G}, {8 * G, 2 * G}};
        if (st == ORTMEM_OK)
            st = ortmem_region_commit_extents(r, ext, 2);
        if (st == ORTMEM_OK)
            st = ortmem_region_decommit(r, 0, 16 * G);
        size_t released = 0;
        if (st == ORTMEM_OK)
            st = ortmem_pool_trim(f, 0, &released);
        uint64_t counted = 0, injected = 0;
        OK(ortmem_fault_backend_counts(f, &counted, &injected));
        clean = injected == 0;
        fo.fail_at = 0;
        OK(ortmem_fault_backend_arm(f, &fo));
        ortmem_status dr = ortmem_region_destroy(r);
        OK(ortmem_pool_trim(f, 0, NULL));
        ortmem_vmm_stats s = stats_of(f);
        cr_assert_eq(s.pool_bytes, 0);
        cr_assert_eq(s.owned_bytes, s.quarantined_bytes, "step %llu: owned %llu, quarantined %llu",
                     (unsigned long long)n, (unsigned long long)s.owned_bytes,
                     (unsigned long long)s.quarantined_bytes);
        cr_assert_eq(s.mapped_bytes, s.quarantined_mapped_bytes);
        if (s.quarantined_bytes == 0) {
            cr_assert_eq(dr, ORTMEM_OK);
            OK(ortmem_backend_destroy(f));
        } else {
            EXPECT_STATUS(ortmem_backend_destroy(f), ORTMEM_E_QUARANTINED);
        }
        OK(ortmem_backend_destroy(inner));
    }
    cr_assert(clean, "the sweep reached a run with no fault");
}

/* Trimming the oldest leaves room at the front of the list; later puts reuse
 * it and every pooled extent stays reachable. */
Test(pool, trimmed_room_is_reused_and_nothing_is_lost)
{
    ortmem_backend *b = test_backend();
    OK(ortmem_pool_set_cap(b, 64 * G));
    ortmem_region *r = region_on(b, 64 * G, 0);
    OK(ortmem_region_commit(r, 0, 20 * G));
    OK(ortmem_region_decommit(r, 0, 20 * G)); /* 20 granules pooled: the list grows past 16 */
    size_t released = 0;
    OK(ortmem_pool_trim(b, 10 * G, &released)); /* the 10 oldest go: room at the front */
    cr_assert_eq(released, 10 * G);
    /* 13 extents of 2 granules (no class-1 extent pooled: all created), then
     * pooled: the list fills and moves its live part into the front room. */
    ortmem_range ext[13];
    for (size_t i = 0; i < 13; i++)
        ext[i] = (ortmem_range){2 * i * G, 2 * G};
    OK(ortmem_region_commit_extents(r, ext, 13));
    OK(ortmem_region_decommit(r, 0, 26 * G));
    ortmem_pool_stats p = pool_stats_of(b);
    cr_assert_eq(p.extents[0], 10);
    cr_assert_eq(p.extents[1], 13);
    ortmem_vmm_stats s0 = stats_of(b);
    cr_assert_eq(s0.pool_bytes, 36 * G);
    OK(ortmem_region_commit_extents(r, ext, 13));
    OK(ortmem_region_commit(r, 26 * G, 10 * G));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE], s0.calls[ORTMEM_OP_CREATE], "all from the pool");
    cr_assert_eq(s.pool_bytes, 0);
    p = pool_stats_of(b);
    cr_assert_eq(p.extents[0] + p.extents[1], 0);
    OK(ortmem_region_destroy(r));
    OK(ortmem_pool_trim(b, 0, &released));
    cr_assert_eq(released, 36 * G);
    cr_assert_eq(stats_of(b).owned_bytes, 0);
    OK(ortmem_backend_destroy(b));
}
