/* Shared mappings: aliases, read-only aliases, refcounted lifetime, copy-on-write. */
#include <signal.h>

#include "support.h"

#define G TEST_GRANULE

static ortmem_backend *b;

static void setup(void)
{
    b = test_backend();
}

static void teardown(void)
{
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.owned_bytes, 0);
    cr_assert_eq(s.mapped_bytes, 0);
    OK(ortmem_backend_destroy(b));
}

TestSuite(share, .init = setup, .fini = teardown);

Test(share, writes_through_one_va_are_seen_through_the_other)
{
    ortmem_region *src = region_on(b, 4 * G, 0);
    ortmem_region *dst = region_on(b, 4 * G, 0);
    OK(ortmem_region_commit(src, 0, 2 * G));
    OK(ortmem_region_share(dst, G, src, 0, 2 * G, ORTMEM_ACCESS_READ_WRITE));
    volatile uint8_t *s = ortmem_region_base(src),
                     *d = (volatile uint8_t *)ortmem_region_base(dst) + G;
    fill_pattern(s, 2 * G, 42);
    cr_assert(check_pattern(d, 2 * G, 42));
    d[100] = 0x5A;
    cr_assert_eq(s[100], 0x5A);
    ortmem_vmm_stats st = stats_of(b);
    cr_assert_eq(st.owned_bytes, 2 * G, "owned once");
    cr_assert_eq(st.mapped_bytes, 4 * G, "mapped per mapping");
    cr_assert_eq(granule_info(dst, G).mappers, 2);
    cr_assert_eq(st.calls[ORTMEM_OP_SET_ACCESS], 2, "one per run: commit and share");
    OK(ortmem_region_destroy(dst));
    OK(ortmem_region_destroy(src));
}

Test(share, read_only_alias_refuses_writes, .signal = SIGSEGV)
{
    ortmem_region *src = region_on(b, G, 0);
    ortmem_region *dst = region_on(b, G, 0);
    OK(ortmem_region_commit(src, 0, G));
    ((uint8_t *)ortmem_region_base(src))[9] = 77;
    OK(ortmem_region_share(dst, 0, src, 0, G, ORTMEM_ACCESS_READ));
    volatile uint8_t *d = ortmem_region_base(dst);
    cr_assert_eq(d[9], 77);
    d[9] = 1;
}

Test(share, shared_granule_outlives_every_sharer_but_the_last)
{
    ortmem_region *src = region_on(b, G, 0);
    ortmem_region *mid = region_on(b, G, 0);
    ortmem_region *last = region_on(b, G, 0);
    OK(ortmem_region_commit(src, 0, G));
    fill_pattern(ortmem_region_base(src), G, 7);
    OK(ortmem_region_share(mid, 0, src, 0, G, ORTMEM_ACCESS_READ));
    OK(ortmem_region_share(last, 0, mid, 0, G, ORTMEM_ACCESS_READ));
    cr_assert_eq(granule_info(last, 0).mappers, 3);
    OK(ortmem_region_destroy(src));
    OK(ortmem_region_decommit(mid, 0, G));
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_RELEASE], 0);
    cr_assert_eq(stats_of(b).owned_bytes, G);
    cr_assert(check_pattern(ortmem_region_base(last), G, 7));
    cr_assert_eq(granule_info(last, 0).mappers, 1);
    OK(ortmem_region_destroy(last));
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_RELEASE], 1);
    OK(ortmem_region_destroy(mid));
}

Test(share, eight_sharers_of_one_prefix_own_it_once)
{
    ortmem_region *prefix = region_on(b, 4 * G, 0);
    OK(ortmem_region_commit(prefix, 0, 4 * G));
    ortmem_region *seq[8];
    for (int i = 0; i < 8; i++) {
        seq[i] = region_on(b, 6 * G, 0);
        OK(ortmem_region_share(seq[i], 0, prefix, 0, 4 * G, ORTMEM_ACCESS_READ));
        OK(ortmem_region_commit(seq[i], 4 * G, G)); /* private tail */
    }
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.owned_bytes, 4 * G + 8 * G);
    cr_assert_eq(s.mapped_bytes, 4 * G + 8 * (4 * G + G));
    for (int i = 0; i < 8; i++)
        OK(ortmem_region_destroy(seq[i]));
    OK(ortmem_region_destroy(prefix));
    s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE], s.calls[ORTMEM_OP_RELEASE]);
}

Test(share, refuses_bad_ranges_states_and_mixed_backends)
{
    ortmem_region *src = region_on(b, 4 * G, 0);
    ortmem_region *dst = region_on(b, 4 * G, 0);
    OK(ortmem_region_commit(src, 0, 2 * G));
    OK(ortmem_region_commit(dst, 0, G));
    EXPECT_STATUS(ortmem_region_share(dst, 0, src, 0, G, ORTMEM_ACCESS_READ), ORTMEM_E_STATE);
    EXPECT_STATUS(ortmem_region_share(dst, G, src, 2 * G, G, ORTMEM_ACCESS_READ),
                  ORTMEM_E_STATE); /* source not mapped */
    EXPECT_STATUS(ortmem_region_share(dst, G + 1, src, 0, G, ORTMEM_ACCESS_READ), ORTMEM_E_ALIGN);
    EXPECT_STATUS(ortmem_region_share(dst, G, src, 0, G - 1, ORTMEM_ACCESS_READ), ORTMEM_E_ALIGN);
    EXPECT_STATUS(ortmem_region_share(dst, 3 * G, src, 0, 2 * G, ORTMEM_ACCESS_READ),
                  ORTMEM_E_RANGE);
    EXPECT_STATUS(ortmem_region_share(src, G, src, 0, 2 * G, ORTMEM_ACCESS_READ), ORTMEM_E_RANGE);
    EXPECT_STATUS(ortmem_region_share(dst, G, src, 0, G, (ortmem_access)9), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_region_share(dst, G, NULL, 0, G, ORTMEM_ACCESS_READ), ORTMEM_E_INVALID);
    ortmem_backend *other = test_backend();
    ortmem_region *foreign = region_on(other, 4 * G, 0);
    EXPECT_STATUS(ortmem_region_share(foreign, 0, src, 0, G, ORTMEM_ACCESS_READ), ORTMEM_E_INVALID);
    cr_assert_eq(stats_of(b).mapped_bytes, 3 * G, "refused shares mapped nothing");
    OK(ortmem_region_destroy(foreign));
    OK(ortmem_backend_destroy(other));
    OK(ortmem_region_destroy(dst));
    OK(ortmem_region_destroy(src));
}

Test(share, alias_inside_one_region)
{
    ortmem_region *r = region_on(b, 4 * G, 0);
    OK(ortmem_region_commit(r, 0, G));
    OK(ortmem_region_share(r, 2 * G, r, 0, G, ORTMEM_ACCESS_READ));
    volatile uint8_t *p = ortmem_region_base(r);
    p[3] = 9;
    cr_assert_eq(p[2 * G + 3], 9);
    OK(ortmem_region_destroy(r));
}

Test(share, cow_gives_a_private_copy_at_the_same_va)
{
    ortmem_region *src = region_on(b, 2 * G, 0);
    ortmem_region *dst = region_on(b, 2 * G, 0);
    OK(ortmem_region_commit(src, 0, 2 * G));
    fill_pattern(ortmem_region_base(src), 2 * G, 5);
    OK(ortmem_region_share(dst, 0, src, 0, 2 * G, ORTMEM_ACCESS_READ));
    void *va_before = ortmem_region_base(dst);
    OK(ortmem_region_cow(dst, G, 1)); /* touches granule 1 only */
    cr_assert_eq(ortmem_region_base(dst), va_before);
    cr_assert_eq(granule_info(dst, G).mappers, 1);
    cr_assert_eq(granule_info(dst, G).access, ORTMEM_ACCESS_READ_WRITE);
    cr_assert_eq(granule_info(dst, 0).mappers, 2, "granule 0 still shared");
    volatile uint8_t *d = ortmem_region_base(dst), *s = ortmem_region_base(src);
    cr_assert(check_pattern(d, 2 * G, 5), "the copy holds the shared bytes");
    d[G + 64] ^= 0xFF;
    cr_assert_neq(s[G + 64], d[G + 64], "writes after cow stay private");
    ortmem_vmm_stats st = stats_of(b);
    cr_assert_eq(st.owned_bytes, 3 * G);
    cr_assert_eq(st.calls[ORTMEM_OP_COPY], 1);
    /* A private granule needs no copy. */
    OK(ortmem_region_cow(dst, G, G));
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_COPY], 1);
    OK(ortmem_region_destroy(dst));
    OK(ortmem_region_destroy(src));
}

Test(share, cow_on_the_source_side_leaves_the_alias_with_the_original)
{
    ortmem_region *src = region_on(b, G, 0);
    ortmem_region *dst = region_on(b, G, 0);
    OK(ortmem_region_commit(src, 0, G));
    fill_pattern(ortmem_region_base(src), G, 11);
    OK(ortmem_region_share(dst, 0, src, 0, G, ORTMEM_ACCESS_READ));
    OK(ortmem_region_cow(src, 0, G));
    ((uint8_t *)ortmem_region_base(src))[0] ^= 0xFF;
    cr_assert(check_pattern(ortmem_region_base(dst), G, 11));
    OK(ortmem_region_destroy(src));
    OK(ortmem_region_destroy(dst));
}

Test(share, cow_refuses_unreadable_shared_granules)
{
    ortmem_region *src = region_on(b, G, 0);
    ortmem_region *dst = region_on(b, G, 0);
    OK(ortmem_region_commit(src, 0, G));
    OK(ortmem_region_share(dst, 0, src, 0, G, ORTMEM_ACCESS_NONE));
    EXPECT_STATUS(ortmem_region_cow(dst, 0, G), ORTMEM_E_STATE);
    cr_assert_eq(granule_info(dst, 0).mappers, 2);
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_COPY], 0);
    OK(ortmem_region_destroy(dst));
    OK(ortmem_region_destroy(src));
}
