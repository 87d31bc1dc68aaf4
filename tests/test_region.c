/* Regions: commit, decommit, protect, granule state, run-granular backend calls. */
#include <signal.h>

#include "support.h"

static ortmem_backend *b;

static void setup(void)
{
    b = test_backend();
}

static void teardown(void)
{
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.owned_bytes, 0, "owned %llu after the test", (unsigned long long)s.owned_bytes);
    cr_assert_eq(s.mapped_bytes, 0);
    OK(ortmem_backend_destroy(b));
}

TestSuite(region, .init = setup, .fini = teardown);

#define G TEST_GRANULE

Test(region, create_rounds_to_the_granule_and_aligns_the_base)
{
    ortmem_region *r = region_on(b, 3 * G + 1, 0);
    cr_assert_eq(ortmem_region_size(r), 4 * G);
    cr_assert_eq(ortmem_region_granule(r), G);
    cr_assert_eq((uintptr_t)ortmem_region_base(r) % G, 0);
    cr_assert_eq(stats_of(b).reserved_va_bytes, 4 * G);
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_RESERVE], 1);
    OK(ortmem_region_destroy(r));
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_UNRESERVE], 1);
}

Test(region, create_refuses_bad_options)
{
    ortmem_region *r = NULL;
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    EXPECT_STATUS(ortmem_region_create(b, &opt, &r), ORTMEM_E_INVALID); /* size 0 */
    opt.size = G;
    opt.flags = 0x80;
    EXPECT_STATUS(ortmem_region_create(b, &opt, &r), ORTMEM_E_INVALID);
    opt.flags = 0;
    opt.size = SIZE_MAX - 5;
    EXPECT_STATUS(ortmem_region_create(b, &opt, &r), ORTMEM_E_OVERFLOW);
    opt.size = G;
    EXPECT_STATUS(ortmem_region_create(b, NULL, &r), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_region_create(b, &opt, NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_region_create(NULL, &opt, &r), ORTMEM_E_INVALID);
    opt.struct_size = sizeof opt + 8;
    EXPECT_STATUS(ortmem_region_create(b, &opt, &r), ORTMEM_E_INVALID);
    cr_assert_null(r);
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_RESERVE], 0);
}

Test(region, commit_maps_every_touched_granule_with_one_set_access_per_run)
{
    ortmem_region *r = region_on(b, 8 * G, 0);
    /* [G/2, G/2 + G) touches granules 0 and 1. */
    OK(ortmem_region_commit(r, G / 2, G));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.mapped_bytes, 2 * G);
    cr_assert_eq(s.owned_bytes, 2 * G);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE], 2);
    cr_assert_eq(s.calls[ORTMEM_OP_MAP], 2);
    cr_assert_eq(s.calls[ORTMEM_OP_SET_ACCESS], 1);
    uint8_t *base = ortmem_region_base(r);
    memset(base, 0x11, 2 * G);
    cr_assert_eq(base[2 * G - 1], 0x11);
    OK(ortmem_region_destroy(r));
}

Test(region, commit_is_idempotent_and_fills_only_the_holes)
{
    ortmem_region *r = region_on(b, 8 * G, 0);
    OK(ortmem_region_commit(r, 0, G));
    OK(ortmem_region_commit(r, 2 * G, G));
    fill_pattern(ortmem_region_base(r), G, 1);
    ortmem_vmm_stats before = stats_of(b);
    OK(ortmem_region_commit(r, 0, 3 * G)); /* only granule 1 is new */
    ortmem_vmm_stats after = stats_of(b);
    cr_assert_eq(after.calls[ORTMEM_OP_MAP] - before.calls[ORTMEM_OP_MAP], 1);
    cr_assert_eq(after.calls[ORTMEM_OP_SET_ACCESS] - before.calls[ORTMEM_OP_SET_ACCESS], 1);
    cr_assert_eq(after.mapped_bytes, 3 * G);
    cr_assert(check_pattern(ortmem_region_base(r), G, 1), "existing bytes survive a re-commit");
    before = after;
    OK(ortmem_region_commit(r, 0, 3 * G));
    after = stats_of(b);
    cr_assert_eq(after.calls[ORTMEM_OP_MAP], before.calls[ORTMEM_OP_MAP]);
    OK(ortmem_region_destroy(r));
}

Test(region, commit_and_decommit_refuse_bad_ranges_and_change_nothing)
{
    ortmem_region *r = region_on(b, 4 * G, 0);
    EXPECT_STATUS(ortmem_region_commit(r, 0, 0), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_region_commit(r, 4 * G, 1), ORTMEM_E_RANGE);
    EXPECT_STATUS(ortmem_region_commit(r, 3 * G, G + 1), ORTMEM_E_RANGE);
    EXPECT_STATUS(ortmem_region_commit(r, SIZE_MAX, 2), ORTMEM_E_OVERFLOW);
    EXPECT_STATUS(ortmem_region_decommit(r, 0, 0), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_region_decommit(r, 2 * G, 3 * G), ORTMEM_E_RANGE);
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_MAP] + s.calls[ORTMEM_OP_UNMAP] + s.calls[ORTMEM_OP_CREATE], 0);
    OK(ortmem_region_destroy(r));
}

Test(region, decommit_unmaps_only_whole_granules_one_call_per_run)
{
    ortmem_region *r = region_on(b, 8 * G, 0);
    OK(ortmem_region_commit(r, 0, 2 * G));
    OK(ortmem_region_commit(r, 3 * G, G));
    /* Half granules on both ends: nothing lies wholly inside [G/2, G + G/2). */
    OK(ortmem_region_decommit(r, G / 2, G));
    cr_assert_eq(stats_of(b).mapped_bytes, 3 * G);
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_UNMAP], 0);
    /* Granules 0, 1 and 3 mapped: two runs, two unmaps. */
    OK(ortmem_region_decommit(r, 0, 4 * G));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_UNMAP], 2);
    cr_assert_eq(s.calls[ORTMEM_OP_RELEASE], 3);
    cr_assert_eq(s.mapped_bytes, 0);
    cr_assert_eq(s.owned_bytes, 0);
    cr_assert_eq(granule_info(r, 3 * G).state, ORTMEM_GRANULE_UNMAPPED);
    OK(ortmem_region_destroy(r));
}

Test(region, recommitted_granule_starts_zeroed_without_a_pool)
{
    ortmem_region *r = region_on(b, G, 0);
    OK(ortmem_region_commit(r, 0, G));
    memset(ortmem_region_base(r), 0xEE, G);
    OK(ortmem_region_decommit(r, 0, G));
    OK(ortmem_region_commit(r, 0, G));
    const uint8_t *p = ortmem_region_base(r);
    for (size_t i = 0; i < G; i += 512)
        cr_assert_eq(p[i], 0, "byte %zu", i);
    OK(ortmem_region_destroy(r));
}

Test(region, peaks_and_granule_counts_follow_the_ledger)
{
    ortmem_region *r = region_on(b, 8 * G, 0);
    OK(ortmem_region_commit(r, 0, 5 * G));
    OK(ortmem_region_decommit(r, 0, 3 * G));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.owned_peak_bytes, 5 * G);
    cr_assert_eq(s.mapped_peak_bytes, 5 * G);
    cr_assert_eq(s.owned_granules, 2);
    cr_assert_eq(s.mapped_granules, 2);
    cr_assert_eq(s.saturations, 0);
    OK(ortmem_region_destroy(r));
}

Test(region, touching_a_decommitted_granule_faults, .signal = SIGSEGV)
{
    ortmem_region *r = region_on(b, 2 * G, 0);
    OK(ortmem_region_commit(r, 0, 2 * G));
    OK(ortmem_region_decommit(r, G, G));
    volatile uint8_t *p = ortmem_region_base(r);
    p[0] = 1; /* still committed */
    p[G] = 1; /* decommitted: must fault */
}

Test(region, protect_read_only_refuses_writes, .signal = SIGSEGV)
{
    ortmem_region *r = region_on(b, G, 0);
    OK(ortmem_region_commit(r, 0, G));
    OK(ortmem_region_protect(r, 0, G, ORTMEM_ACCESS_READ));
    cr_assert_eq(granule_info(r, 0).access, ORTMEM_ACCESS_READ);
    volatile uint8_t *p = ortmem_region_base(r);
    cr_assert_eq(p[5], 0); /* reads work */
    p[5] = 1;
}

Test(region, protect_checks_alignment_state_and_access)
{
    ortmem_region *r = region_on(b, 2 * G, 0);
    OK(ortmem_region_commit(r, 0, G));
    EXPECT_STATUS(ortmem_region_protect(r, 1, G, ORTMEM_ACCESS_READ), ORTMEM_E_ALIGN);
    EXPECT_STATUS(ortmem_region_protect(r, 0, 2 * G, ORTMEM_ACCESS_READ), ORTMEM_E_STATE);
    EXPECT_STATUS(ortmem_region_protect(r, 0, G, (ortmem_access)7), ORTMEM_E_INVALID);
    cr_assert_eq(granule_info(r, 0).access, ORTMEM_ACCESS_READ_WRITE);
    OK(ortmem_region_protect(r, 0, G, ORTMEM_ACCESS_NONE));
    OK(ortmem_region_protect(r, 0, G, ORTMEM_ACCESS_READ_WRITE));
    ((uint8_t *)ortmem_region_base(r))[0] = 3;
    OK(ortmem_region_destroy(r));
}

Test(region, granule_info_reports_state_access_and_mappers)
{
    ortmem_region *r = region_on(b, 2 * G, 0);
    ortmem_granule_info info = granule_info(r, G);
    cr_assert_eq(info.state, ORTMEM_GRANULE_UNMAPPED);
    cr_assert_eq(info.mappers, 0);
    OK(ortmem_region_commit(r, G, 1));
    info = granule_info(r, 2 * G - 1);
    cr_assert_eq(info.state, ORTMEM_GRANULE_MAPPED);
    cr_assert_eq(info.access, ORTMEM_ACCESS_READ_WRITE);
    cr_assert_eq(info.mappers, 1);
    EXPECT_STATUS(ortmem_region_granule_info(r, 2 * G, &info), ORTMEM_E_RANGE);
    EXPECT_STATUS(ortmem_region_granule_info(r, 0, NULL), ORTMEM_E_INVALID);
    OK(ortmem_region_destroy(r));
}

Test(region, destroy_returns_every_byte)
{
    ortmem_region *r = region_on(b, 16 * G, 0);
    OK(ortmem_region_commit(r, 0, 5 * G));
    OK(ortmem_region_commit(r, 9 * G, 3 * G));
    OK(ortmem_region_destroy(r));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_UNMAP], 2, "one unmap per run");
    cr_assert_eq(s.calls[ORTMEM_OP_RELEASE], 8);
    cr_assert_eq(s.reserved_va_bytes, 0);
    cr_assert_eq(s.leaked_va_bytes, 0);
}

Test(region, base_alignment_can_be_asked_for)
{
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    opt.size = G;
    opt.alignment = 64 * G;
    ortmem_region *r = NULL;
    for (int i = 0; i < 4; i++) {
        OK(ortmem_region_create(b, &opt, &r));
        cr_assert_eq((uintptr_t)ortmem_region_base(r) % (64 * G), 0);
        OK(ortmem_region_destroy(r));
    }
    opt.alignment = G / 2;
    EXPECT_STATUS(ortmem_region_create(b, &opt, &r), ORTMEM_E_ALIGN);
    opt.alignment = 3 * G;
    EXPECT_STATUS(ortmem_region_create(b, &opt, &r), ORTMEM_E_ALIGN);
}
