/* Physical extents in regions: one backend handle of k granules, committed,
 * mapped, shared, copied on write, exported, decommitted and quarantined
 * whole (docs/memory/EXTENTS.md). Every figure is read from the ledger. */
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "support.h"

#define G TEST_GRANULE

static ortmem_region *region_with(ortmem_backend *b, size_t size, unsigned flags,
                                  ortmem_extent_growth growth, size_t cap_bytes)
{
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    opt.size = size;
    opt.flags = flags;
    opt.extents.growth = growth;
    opt.extents.cap_bytes = cap_bytes;
    ortmem_region *r = NULL;
    OK(ortmem_region_create(b, &opt, &r));
    return r;
}

static uint8_t *base(ortmem_region *r)
{
    return ortmem_region_base(r);
}

static void commit_extent(ortmem_region *r, size_t offset, size_t len)
{
    ortmem_range range = {offset, len};
    OK(ortmem_region_commit_extents(r, &range, 1));
}

static uint64_t calls(const ortmem_vmm_stats *s, ortmem_backend_op op)
{
    return s->calls[op];
}

/* Every counter the ledger keeps on physical memory is equal. */
static void same_ledger(const ortmem_vmm_stats *a, const ortmem_vmm_stats *b, const char *when)
{
    cr_assert_eq(a->owned_bytes, b->owned_bytes, "%s: owned", when);
    cr_assert_eq(a->mapped_bytes, b->mapped_bytes, "%s: mapped", when);
    cr_assert_eq(a->owned_extents, b->owned_extents, "%s: owned extents", when);
    cr_assert_eq(a->mapped_extents, b->mapped_extents, "%s: mapped extents", when);
    cr_assert_eq(a->mapped_granules, b->mapped_granules, "%s: mapped granules", when);
}

Test(extents, one_extent_costs_one_create_one_map_one_set_access)
{
    ortmem_backend *b = test_backend();
    ortmem_region *r = region_on(b, 512 * G, 0);
    ortmem_vmm_stats s0 = stats_of(b);
    commit_extent(r, 0, 512 * G);
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(calls(&s, ORTMEM_OP_CREATE) - calls(&s0, ORTMEM_OP_CREATE), 1);
    cr_assert_eq(calls(&s, ORTMEM_OP_MAP) - calls(&s0, ORTMEM_OP_MAP), 1);
    cr_assert_eq(calls(&s, ORTMEM_OP_SET_ACCESS) - calls(&s0, ORTMEM_OP_SET_ACCESS), 1);
    cr_assert_eq(s.owned_bytes, 512 * G);
    cr_assert_eq(s.owned_granules, 512);
    cr_assert_eq(s.owned_extents, 1);
    cr_assert_eq(s.mapped_granules, 512);
    cr_assert_eq(s.mapped_extents, 1);
    fill_pattern(base(r), 512 * G, 7);
    cr_assert(check_pattern(base(r), 512 * G, 7));

    OK(ortmem_region_decommit(r, 0, 512 * G));
    s = stats_of(b);
    cr_assert_eq(calls(&s, ORTMEM_OP_UNMAP) - calls(&s0, ORTMEM_OP_UNMAP), 1);
    cr_assert_eq(calls(&s, ORTMEM_OP_RELEASE) - calls(&s0, ORTMEM_OP_RELEASE), 1);
    cr_assert_eq(s.owned_bytes, 0);
    cr_assert_eq(s.owned_extents, 0);
    cr_assert_eq(s.mapped_extents, 0);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(b));
}

Test(extents, the_region_policy_lays_commits_and_granule_is_the_default)
{
    ortmem_backend *b = test_backend();
    ortmem_region *exact = region_with(b, 512 * G, 0, ORTMEM_EXTENT_EXACT, 0);
    ortmem_region *plain = region_on(b, 8 * G, 0);
    ortmem_vmm_stats s0 = stats_of(b);
    OK(ortmem_region_commit(exact, 0, 512 * G));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(calls(&s, ORTMEM_OP_CREATE) - calls(&s0, ORTMEM_OP_CREATE), 1);
    cr_assert_eq(calls(&s, ORTMEM_OP_MAP) - calls(&s0, ORTMEM_OP_MAP), 1);
    cr_assert_eq(granule_info(exact, 300 * G).extent_granules, 512);

    /* Three granules: EXACT lays 2 + 1 (powers of two); GRANULE lays 1 + 1 + 1. */
    OK(ortmem_region_decommit(exact, 0, 512 * G));
    s0 = stats_of(b);
    OK(ortmem_region_commit(exact, 0, 3 * G));
    OK(ortmem_region_commit(plain, 0, 3 * G));
    s = stats_of(b);
    cr_assert_eq(calls(&s, ORTMEM_OP_CREATE) - calls(&s0, ORTMEM_OP_CREATE), 2 + 3);
    cr_assert_eq(granule_info(exact, 0).extent_granules, 2);
    cr_assert_eq(granule_info(exact, 2 * G).extent_granules, 1);
    cr_assert_eq(granule_info(plain, G).extent_granules, 1);
    OK(ortmem_region_destroy(exact));
    OK(ortmem_region_destroy(plain));
    OK(ortmem_backend_destroy(b));
}

Test(extents, ledger_counts_owned_once_and_mapped_per_mapping)
{
    ortmem_backend *b = test_backend();
    ortmem_region *a = region_on(b, 8 * G, 0);
    ortmem_region *c = region_on(b, 8 * G, 0);
    commit_extent(a, 0, 4 * G);
    OK(ortmem_region_share(c, 4 * G, a, 0, 4 * G, ORTMEM_ACCESS_READ));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.owned_bytes, 4 * G);
    cr_assert_eq(s.owned_extents, 1);
    cr_assert_eq(s.mapped_bytes, 8 * G);
    cr_assert_eq(s.mapped_extents, 2);
    cr_assert_eq(s.calls[ORTMEM_OP_MAP], 2, "one map per mapping of the whole extent");
    cr_assert_eq(granule_info(a, 3 * G).mappers, 2);
    cr_assert_eq(granule_info(c, 5 * G).mappers, 2);
    cr_assert_eq(granule_info(c, 5 * G).extent_offset, 4 * G);

    OK(ortmem_region_destroy(a));
    s = stats_of(b);
    cr_assert_eq(s.owned_bytes, 4 * G, "the extent lives on in c");
    cr_assert_eq(s.mapped_bytes, 4 * G);
    cr_assert_eq(s.calls[ORTMEM_OP_RELEASE], 0);
    cr_assert_eq(granule_info(c, 4 * G).mappers, 1);
    OK(ortmem_region_destroy(c));
    s = stats_of(b);
    cr_assert_eq(s.owned_bytes, 0);
    cr_assert_eq(s.calls[ORTMEM_OP_RELEASE], 1);
    OK(ortmem_backend_destroy(b));
}

Test(extents, decommit_rounds_inward_and_strict_refuses_a_cut_extent)
{
    ortmem_backend *b = test_backend();
    ortmem_region *r = region_on(b, 8 * G, 0);
    commit_extent(r, 0, 4 * G);
    commit_extent(r, 4 * G, G);
    fill_pattern(base(r), 5 * G, 3);
    ortmem_vmm_stats s0 = stats_of(b);

    /* [G, 5G) holds the 1-granule extent whole and cuts the 4-granule one. */
    OK(ortmem_region_decommit(r, G, 4 * G));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.owned_extents, 1, "only the extent lying wholly inside went");
    cr_assert_eq(granule_info(r, 0).state, ORTMEM_GRANULE_MAPPED);
    cr_assert_eq(granule_info(r, 3 * G).state, ORTMEM_GRANULE_MAPPED);
    cr_assert_eq(granule_info(r, 4 * G).state, ORTMEM_GRANULE_UNMAPPED);
    cr_assert(check_pattern(base(r), 4 * G, 3));

    s0 = stats_of(b);
    ortmem_range cut = {0, 2 * G};
    EXPECT_STATUS(ortmem_region_decommit_ex(r, &cut, 1, ORTMEM_DECOMMIT_STRICT), ORTMEM_E_RANGE);
    cr_assert(strstr(ortmem_last_error(), "[0, +262144)"), "names the extent: %s",
              ortmem_last_error());
    s = stats_of(b);
    same_ledger(&s0, &s, "a refused strict decommit");
    cr_assert_eq(s.calls[ORTMEM_OP_UNMAP], s0.calls[ORTMEM_OP_UNMAP]);

    ortmem_range whole = {0, 4 * G};
    OK(ortmem_region_decommit_ex(r, &whole, 1, ORTMEM_DECOMMIT_STRICT));
    s = stats_of(b);
    cr_assert_eq(s.owned_bytes, 0);
    EXPECT_STATUS(ortmem_region_decommit_ex(r, &whole, 1, 0x80), ORTMEM_E_INVALID);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(b));
}

Test(extents, decommit_no_pool_releases_to_the_backend)
{
    ortmem_backend *b = test_backend();
    OK(ortmem_pool_set_cap(b, 16 * G));
    ortmem_region *r = region_on(b, 8 * G, 0);
    commit_extent(r, 0, 4 * G);
    commit_extent(r, 4 * G, 4 * G);
    ortmem_range first = {0, 4 * G}, second = {4 * G, 4 * G};
    OK(ortmem_region_decommit_ex(r, &first, 1, 0));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.pool_bytes, 4 * G, "a plain decommit pools the extent");
    cr_assert_eq(s.calls[ORTMEM_OP_RELEASE], 0);
    OK(ortmem_region_decommit_ex(r, &second, 1, ORTMEM_DECOMMIT_NO_POOL));
    s = stats_of(b);
    cr_assert_eq(s.pool_bytes, 4 * G, "NO_POOL keeps it out of the pool");
    cr_assert_eq(s.calls[ORTMEM_OP_RELEASE], 1);
    cr_assert_eq(s.owned_bytes, 4 * G);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(b));
}

Test(extents, share_refuses_a_cut_source_extent)
{
    ortmem_backend *b = test_backend();
    ortmem_region *a = region_on(b, 8 * G, 0);
    ortmem_region *c = region_on(b, 8 * G, 0);
    commit_extent(a, 0, 4 * G);
    ortmem_vmm_stats s0 = stats_of(b);
    EXPECT_STATUS(ortmem_region_share(c, 0, a, G, 3 * G, ORTMEM_ACCESS_READ), ORTMEM_E_RANGE);
    cr_assert(strstr(ortmem_last_error(), "cuts the extent [0, +262144)"), "%s",
              ortmem_last_error());
    EXPECT_STATUS(ortmem_region_share(c, 0, a, 0, 2 * G, ORTMEM_ACCESS_READ), ORTMEM_E_RANGE);
    ortmem_vmm_stats s = stats_of(b);
    same_ledger(&s0, &s, "refused shares");
    cr_assert_eq(s.calls[ORTMEM_OP_MAP], s0.calls[ORTMEM_OP_MAP]);
    OK(ortmem_region_share(c, 0, a, 0, 4 * G, ORTMEM_ACCESS_READ));
    cr_assert_eq(granule_info(c, 2 * G).extent_granules, 4);
    OK(ortmem_region_destroy(c));
    OK(ortmem_region_destroy(a));
    OK(ortmem_backend_destroy(b));
}

Test(extents, cow_copies_the_whole_shared_extent)
{
    ortmem_backend *b = test_backend();
    ortmem_region *a = region_on(b, 8 * G, 0);
    ortmem_region *c = region_on(b, 8 * G, 0);
    commit_extent(a, 0, 4 * G);
    fill_pattern(base(a), 4 * G, 11);
    OK(ortmem_region_share(c, 0, a, 0, 4 * G, ORTMEM_ACCESS_READ_WRITE));
    ortmem_vmm_stats s0 = stats_of(b);

    /* One byte of the third granule: the whole extent is copied. */
    OK(ortmem_region_cow(c, 2 * G + 5, 1));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE] - s0.calls[ORTMEM_OP_CREATE], 1);
    cr_assert_eq(s.owned_bytes, 8 * G);
    cr_assert_eq(s.owned_extents, 2);
    cr_assert_eq(s.mapped_bytes, 8 * G);
    ortmem_granule_info info = granule_info(c, 0);
    cr_assert_eq(info.mappers, 1);
    cr_assert_eq(info.extent_granules, 4);
    cr_assert_eq(granule_info(a, 3 * G).mappers, 1);
    cr_assert(check_pattern(base(c), 4 * G, 11), "every byte of the extent copied");
    fill_pattern(base(c), 4 * G, 12);
    cr_assert(check_pattern(base(a), 4 * G, 11), "the source keeps its bytes");
    OK(ortmem_region_destroy(c));
    OK(ortmem_region_destroy(a));
    OK(ortmem_backend_destroy(b));
}

/* Copy-on-write over several ranges is all or nothing across them: the
 * second extent's copy failing leaves the first extent shared too, and the
 * shared extent between the ranges is not looked at. */
Test(extents, cow_ranges_is_all_or_nothing_across_the_ranges)
{
    ortmem_backend *cpu = test_backend(), *b = NULL;
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    OK(ortmem_fault_backend_create(cpu, &fo, &b));
    ortmem_region *a = region_on(b, 8 * G, 0);
    ortmem_region *c = region_on(b, 8 * G, 0);
    commit_extent(a, 0, 2 * G);
    commit_extent(a, 2 * G, 2 * G);
    commit_extent(a, 4 * G, 2 * G);
    fill_pattern(base(a), 6 * G, 21);
    OK(ortmem_region_share(c, 0, a, 0, 6 * G, ORTMEM_ACCESS_READ_WRITE));
    const ortmem_range ranges[] = {{G, 1}, {5 * G, 1}}; /* the first and third extents */
    ortmem_vmm_stats s0 = stats_of(b);
    fo.op = ORTMEM_OP_COPY;
    fo.fail_at = 2; /* the second extent's copy */
    OK(ortmem_fault_backend_arm(b, &fo));
    EXPECT_STATUS(ortmem_region_cow_ranges(c, ranges, 2), ORTMEM_E_BACKEND);
    fo.fail_at = 0;
    OK(ortmem_fault_backend_arm(b, &fo));
    ortmem_vmm_stats s1 = stats_of(b);
    same_ledger(&s0, &s1, "after the failed cow");
    for (size_t g = 0; g < 6; g++)
        cr_assert_eq(granule_info(c, g * G).mappers, 2, "granule %zu is still shared", g);
    OK(ortmem_region_cow_ranges(c, ranges, 2));
    cr_assert_eq(granule_info(c, 0).mappers, 1);
    cr_assert_eq(granule_info(c, 2 * G).mappers, 2, "between the ranges: still shared");
    cr_assert_eq(granule_info(c, 4 * G).mappers, 1);
    cr_assert_eq(stats_of(b).owned_extents, s0.owned_extents + 2);
    cr_assert(check_pattern(base(c), 6 * G, 21), "every byte copied or shared");
    OK(ortmem_region_destroy(c));
    OK(ortmem_region_destroy(a));
    OK(ortmem_backend_destroy(b));
    OK(ortmem_backend_destroy(cpu));
}

Test(extents, export_needs_the_extent_start_and_exports_it_whole)
{
    ortmem_backend *b = test_backend();
    ortmem_region *r = region_on(b, 8 * G, ORTMEM_REGION_EXPORTABLE);
    commit_extent(r, 0, 4 * G);
    fill_pattern(base(r), 4 * G, 5);
    int fd = -1;
    EXPECT_STATUS(ortmem_region_export(r, 2 * G, &fd), ORTMEM_E_RANGE);
    cr_assert_eq(fd, -1);
    OK(ortmem_region_export(r, 100, &fd));
    off_t end = lseek(fd, 0, SEEK_END);
    cr_assert_eq((size_t)end, 4 * G, "the descriptor holds the whole extent");
    close(fd);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(b));
}

Test(extents, granule_info_names_the_extent)
{
    ortmem_backend *b = test_backend();
    ortmem_region *r = region_on(b, 16 * G, 0);
    commit_extent(r, 4 * G, 8 * G);
    for (size_t g = 4; g < 12; g++) {
        ortmem_granule_info info = granule_info(r, g * G + 17);
        cr_assert_eq(info.state, ORTMEM_GRANULE_MAPPED);
        cr_assert_eq(info.extent_offset, 4 * G);
        cr_assert_eq(info.extent_granules, 8);
    }
    ortmem_granule_info none = granule_info(r, 12 * G);
    cr_assert_eq(none.extent_granules, 0);
    cr_assert_eq(none.extent_offset, 0);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(b));
}

Test(extents, commit_extents_refuses_what_is_not_one_extent)
{
    ortmem_backend *b = test_backend();
    ortmem_region *r = region_on(b, 16 * G, 0);
    commit_extent(r, 8 * G, G);
    ortmem_vmm_stats s0 = stats_of(b);
    ortmem_range three = {0, 3 * G}, misaligned = {G / 2, 2 * G}, over = {8 * G, 2 * G};
    EXPECT_STATUS(ortmem_region_commit_extents(r, &three, 1), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_region_commit_extents(r, &misaligned, 1), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_region_commit_extents(r, &over, 1), ORTMEM_E_STATE);
    ortmem_range overlapping[2] = {{0, 4 * G}, {2 * G, 2 * G}};
    EXPECT_STATUS(ortmem_region_commit_extents(r, overlapping, 2), ORTMEM_E_INVALID);
    /* All or nothing: a good first range with a bad second one commits nothing. */
    ortmem_range mixed[2] = {{0, 4 * G}, {8 * G, G}};
    EXPECT_STATUS(ortmem_region_commit_extents(r, mixed, 2), ORTMEM_E_STATE);
    ortmem_vmm_stats s = stats_of(b);
    same_ledger(&s0, &s, "refused commits");
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE], s0.calls[ORTMEM_OP_CREATE]);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(b));
}

Test(extents, failed_release_quarantines_all_k_granules)
{
    ortmem_backend *inner = test_backend();
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = ORTMEM_OP_RELEASE;
    fo.fail_at = 1;
    ortmem_backend *f = NULL;
    OK(ortmem_fault_backend_create(inner, &fo, &f));
    ortmem_region *r = region_on(f, 16 * G, 0);
    commit_extent(r, 0, 8 * G);
    EXPECT_STATUS(ortmem_region_decommit(r, 0, 8 * G), ORTMEM_E_QUARANTINED);
    ortmem_vmm_stats s = stats_of(f);
    cr_assert_eq(s.quarantined_extents, 1);
    cr_assert_eq(s.quarantined_granules, 8);
    cr_assert_eq(s.quarantined_bytes, 8 * G);
    cr_assert_eq(s.owned_bytes, 8 * G, "a quarantined extent stays owned");
    cr_assert_eq(s.mapped_bytes, 0);
    OK(ortmem_region_destroy(r));
    EXPECT_STATUS(ortmem_backend_destroy(f), ORTMEM_E_QUARANTINED);
    OK(ortmem_backend_destroy(inner));
}

Test(extents, failed_unmap_of_a_run_restores_every_extent)
{
    ortmem_backend *inner = test_backend();
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    ortmem_backend *f = NULL;
    OK(ortmem_fault_backend_create(inner, &fo, &f));
    ortmem_region *r = region_on(f, 16 * G, 0);
    /* Two runs: [0, 4G) of two extents, then [6G, 10G) of one. */
    commit_extent(r, 0, 2 * G);
    commit_extent(r, 2 * G, 2 * G);
    commit_extent(r, 6 * G, 4 * G);
    fill_pattern(base(r), 4 * G, 21);
    fill_pattern(base(r) + 6 * G, 4 * G, 22);
    ortmem_vmm_stats s0 = stats_of(f);
    fo.op = ORTMEM_OP_UNMAP;
    fo.fail_at = 2; /* the first run unmaps, the second fails */
    OK(ortmem_fault_backend_arm(f, &fo));
    EXPECT_STATUS(ortmem_region_decommit(r, 0, 16 * G), ORTMEM_E_BACKEND);
    ortmem_vmm_stats s = stats_of(f);
    same_ledger(&s0, &s, "a failed decommit");
    cr_assert_eq(s.calls[ORTMEM_OP_MAP] - s0.calls[ORTMEM_OP_MAP], 2,
                 "both extents of the first run mapped back, whole");
    cr_assert_eq(s.quarantined_bytes, 0);
    cr_assert(check_pattern(base(r), 4 * G, 21));
    cr_assert(check_pattern(base(r) + 6 * G, 4 * G, 22));
    cr_assert_eq(granule_info(r, 3 * G).extent_offset, 2 * G);
    cr_assert_eq(granule_info(r, 3 * G).extent_granules, 2);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(f));
    OK(ortmem_backend_destroy(inner));
}

/* A growing range under GEOMETRIC: extents of 1, 2, 4 ... granules up to the
 * cap, and the committed bytes never run a cap or more ahead of the ask. */
Test(extents, geometric_commit_grow_stays_within_one_cap_of_the_ask)
{
    ortmem_backend *b = test_backend();
    size_t cap = 16 * G, size = 256 * G;
    ortmem_region *r = region_on(b, size, 0);
    ortmem_extent_policy policy = {sizeof policy, ORTMEM_EXTENT_GEOMETRIC, cap};
    size_t asked = 0, step = G / 3 + 1;
    uint64_t creates_before = stats_of(b).calls[ORTMEM_OP_CREATE];
    while (asked + step <= size) {
        ortmem_commit_range grow = {asked, step, size};
        OK(ortmem_region_commit_grow(r, &grow, 1, &policy));
        asked += step;
        ortmem_vmm_stats s = stats_of(b);
        cr_assert_geq(s.mapped_bytes, asked);
        cr_assert_lt(s.mapped_bytes - asked, cap, "committed %llu for %zu asked",
                     (unsigned long long)s.mapped_bytes, asked);
    }
    ortmem_vmm_stats s = stats_of(b);
    /* 1 + 2 + 4 + 8 granules, then extents of 16 up to the ask. */
    uint64_t extents = 4 + (s.mapped_bytes / G - 15 + 15) / 16;
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE] - creates_before, extents);
    cr_assert_eq(s.owned_extents, extents);
    cr_assert_eq(granule_info(r, 0).extent_granules, 1);
    cr_assert_eq(granule_info(r, G).extent_granules, 2);
    cr_assert_eq(granule_info(r, 3 * G).extent_granules, 4);
    cr_assert_eq(granule_info(r, 7 * G).extent_granules, 8);
    cr_assert_eq(granule_info(r, 15 * G).extent_granules, 16);
    cr_assert_eq(granule_info(r, 200 * G).extent_granules, 16);

    /* The window stops growth at the next mapped granule. */
    ortmem_region *w = region_on(b, 16 * G, 0);
    commit_extent(w, 4 * G, G);
    commit_extent(w, 0, G);
    ortmem_commit_range tail = {G, 1, 16 * G};
    ortmem_extent_policy big = {sizeof big, ORTMEM_EXTENT_GEOMETRIC, 0};
    OK(ortmem_region_commit_grow(w, &tail, 1, &big));
    cr_assert_eq(granule_info(w, G).extent_granules, 2, "twice the extent below, room for it");
    ortmem_commit_range clipped = {3 * G, 1, 16 * G};
    OK(ortmem_region_commit_grow(w, &clipped, 1, &big));
    cr_assert_eq(granule_info(w, 3 * G).extent_granules, 1, "clipped at the mapped granule");
    OK(ortmem_region_destroy(w));
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(b));
}

Test(extents, the_pool_serves_only_extents_of_the_size_asked)
{
    ortmem_backend *b = test_backend();
    OK(ortmem_pool_set_cap(b, 64 * G));
    ortmem_region *r = region_on(b, 16 * G, 0);
    commit_extent(r, 0, 4 * G);
    OK(ortmem_region_decommit(r, 0, 4 * G));
    ortmem_vmm_stats s0 = stats_of(b);
    cr_assert_eq(s0.pool_bytes, 4 * G);
    commit_extent(r, 0, 2 * G); /* another size: created */
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE] - s0.calls[ORTMEM_OP_CREATE], 1);
    cr_assert_eq(s.pool_bytes, 4 * G);
    commit_extent(r, 4 * G, 4 * G); /* its size: taken */
    s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE] - s0.calls[ORTMEM_OP_CREATE], 1);
    cr_assert_eq(s.pool_hits - s0.pool_hits, 1);
    cr_assert_eq(s.pool_bytes, 0);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(b));
}

/* Every backend call of an extent workload failed once (ORTMEM_OP_ANY,
 * fail_at = 1..N): the call reports it, and once the regions are gone the
 * ledger holds nothing but what it reports quarantined. */
static ortmem_status extent_workload(ortmem_backend *f, ortmem_region *a, ortmem_region *c)
{
    (void)f;
    ortmem_range ext[2] = {{0, 4 * G}, {4 * G, 2 * G}};
    ortmem_status st = ortmem_region_commit_extents(a, ext, 2);
    ortmem_commit_range grow = {6 * G, G + 1, 16 * G};
    ortmem_extent_policy geo = {sizeof geo, ORTMEM_EXTENT_GEOMETRIC, 4 * G};
    if (st == ORTMEM_OK)
        st = ortmem_region_commit_grow(a, &grow, 1, &geo);
    if (st == ORTMEM_OK)
        st = ortmem_region_share(c, 0, a, 0, 4 * G, ORTMEM_ACCESS_READ_WRITE);
    if (st == ORTMEM_OK)
        st = ortmem_region_cow(c, G, 1);
    ortmem_range cut = {0, 6 * G};
    if (st == ORTMEM_OK)
        st = ortmem_region_decommit_ex(a, &cut, 1, ORTMEM_DECOMMIT_STRICT);
    if (st == ORTMEM_OK)
        st = ortmem_region_commit(a, 0, 6 * G);
    return st;
}

Test(extents, fault_sweep_over_extent_commit_share_cow_and_decommit)
{
    int clean = 0;
    for (uint64_t n = 1; n < 200 && !clean; n++) {
        ortmem_backend *inner = test_backend();
        OK(ortmem_pool_set_cap(inner, 0));
        ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
        ortmem_backend *f = NULL;
        OK(ortmem_fault_backend_create(inner, &fo, &f));
        ortmem_region *a = region_on(f, 16 * G, 0);
        ortmem_region *c = region_on(f, 16 * G, 0);
        fo.op = ORTMEM_OP_ANY;
        fo.fail_at = n;
        OK(ortmem_fault_backend_arm(f, &fo));
        ortmem_status st = extent_workload(f, a, c);
        uint64_t counted = 0, injected = 0;
        OK(ortmem_fault_backend_counts(f, &counted, &injected));
        clean = injected == 0;
        cr_assert(st == ORTMEM_OK || injected == 1, "step %llu: %s without a fault",
                  (unsigned long long)n, ortmem_status_str(st));
        fo.fail_at = 0;
        OK(ortmem_fault_backend_arm(f, &fo));
        ortmem_status da = ortmem_region_destroy(c), dc = ortmem_region_destroy(a);
        ortmem_vmm_stats s = stats_of(f);
        cr_assert_eq(s.owned_bytes, s.quarantined_bytes, "step %llu: owned %llu, quarantined %llu",
                     (unsigned long long)n, (unsigned long long)s.owned_bytes,
                     (unsigned long long)s.quarantined_bytes);
        cr_assert_eq(s.mapped_bytes, s.quarantined_mapped_bytes, "step %llu",
                     (unsigned long long)n);
        cr_assert_eq(s.owned_granules * G, s.owned_bytes, "step %llu", (unsigned long long)n);
        if (s.quarantined_bytes == 0) {
            cr_assert_eq(da, ORTMEM_OK);
            cr_assert_eq(dc, ORTMEM_OK);
            cr_assert_eq(s.owned_extents, 0);
            OK(ortmem_backend_destroy(f));
        } else {
            cr_assert_eq(s.quarantined_granules * G, s.quarantined_bytes);
            EXPECT_STATUS(ortmem_backend_destroy(f), ORTMEM_E_QUARANTINED);
        }
        OK(ortmem_backend_destroy(inner));
    }
    cr_assert(clean, "the sweep reached a run with no fault");
}

Test(extents, older_options_and_bad_policies)
{
    ortmem_backend *b = test_backend();
    /* A caller built before the field existed gets one extent per granule. */
    ortmem_region_options old = ORTMEM_REGION_OPTIONS_INIT;
    old.extents.growth = ORTMEM_EXTENT_EXACT; /* beyond its struct_size: never read */
    old.struct_size = offsetof(ortmem_region_options, extents);
    old.size = 8 * G;
    ortmem_region *r = NULL;
    OK(ortmem_region_create(b, &old, &r));
    OK(ortmem_region_commit(r, 0, 8 * G));
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_CREATE], 8);
    cr_assert_eq(granule_info(r, 4 * G).extent_granules, 1);

    ortmem_commit_range outside = {0, G, 9 * G}, short_window = {0, 2 * G, G};
    EXPECT_STATUS(ortmem_region_commit_grow(r, &outside, 1, NULL), ORTMEM_E_RANGE);
    EXPECT_STATUS(ortmem_region_commit_grow(r, &short_window, 1, NULL), ORTMEM_E_RANGE);
    ortmem_extent_policy unknown = {sizeof unknown, (ortmem_extent_growth)7, 0};
    EXPECT_STATUS(ortmem_region_commit_grow(r, &outside, 1, &unknown), ORTMEM_E_INVALID);
    OK(ortmem_region_destroy(r));

    ortmem_region_options bad = ORTMEM_REGION_OPTIONS_INIT;
    bad.size = 8 * G;
    bad.extents.growth = (ortmem_extent_growth)7;
    EXPECT_STATUS(ortmem_region_create(b, &bad, &r), ORTMEM_E_INVALID);
    bad.extents.growth = ORTMEM_EXTENT_GEOMETRIC;
    bad.extents.cap_bytes = G / 2; /* below the granule */
    EXPECT_STATUS(ortmem_region_create(b, &bad, &r), ORTMEM_E_INVALID);
    cr_assert_eq(stats_of(b).reserved_va_bytes, 0);
    OK(ortmem_backend_destroy(b));
}
