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
