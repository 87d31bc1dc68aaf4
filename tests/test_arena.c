/* The arena: alloc/free, alignment, coalescing, granule refcounts, the empty
 * granule cache, bad input, data integrity, fault injection, stats, trace. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "support.h"

#define G TEST_GRANULE

/* ---- helpers ---- */

static ortmem_arena *arena_on(ortmem_backend *backend, size_t capacity, size_t cache_bytes,
                              size_t min_align)
{
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    /* These tests count backend calls per granule: the per-granule baseline.
     * The extent policies have their own tests (arena_extents). */
    opt.extents.growth = ORTMEM_EXTENT_GRANULE;
    opt.capacity = capacity;
    opt.cache_bytes = cache_bytes;
    opt.min_align = min_align;
    ortmem_arena *a = NULL;
    OK(ortmem_arena_create(backend, &opt, &a));
    return a;
}

static size_t offset_in(ortmem_arena *a, const void *p)
{
    return (size_t)((const uint8_t *)p -
                    (const uint8_t *)ortmem_region_base(ortmem_arena_region(a)));
}

static ortmem_granule_state granule_state(ortmem_arena *a, size_t offset)
{
    return granule_info(ortmem_arena_region(a), offset).state;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ULL;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dULL;
    return x ^ (x >> 33);
}

/* Every byte of [p, p+len) from seed: a stray write anywhere shows. */
static void fill_all(void *p, size_t len, uint64_t seed)
{
    uint8_t *bytes = p;
    size_t words = len / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t w = mix64(seed ^ (i * 0x9e3779b97f4a7c15ULL));
        memcpy(bytes + i * 8, &w, 8);
    }
    for (size_t i = words * 8; i < len; i++)
        bytes[i] = (uint8_t)mix64(seed + i);
}

static bool check_all(const void *p, size_t len, uint64_t seed)
{
    const uint8_t *bytes = p;
    size_t words = len / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t w = mix64(seed ^ (i * 0x9e3779b97f4a7c15ULL));
        if (memcmp(bytes + i * 8, &w, 8) != 0)
            return false;
    }
    for (size_t i = words * 8; i < len; i++) {
        if (bytes[i] != (uint8_t)mix64(seed + i))
            return false;
    }
    return true;
}

typedef struct live_alloc {
    uint8_t *ptr;
    size_t size;
    uint64_t seed;
} live_alloc;

static bool overlaps_any(const live_alloc *live, size_t n, const uint8_t *p, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        if (live[i].ptr && p < live[i].ptr + live[i].size && live[i].ptr < p + size)
            return true;
    }
    return false;
}

static uint64_t rng_next(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

static bool same_stats(const ortmem_arena_stats *x, const ortmem_arena_stats *y)
{
    return memcmp(x, y, sizeof *x) == 0;
}

/* ---- suite with one plain CPU backend ---- */

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
    cr_assert_eq(s.reserved_va_bytes, 0);
    OK(ortmem_backend_destroy(b));
}

TestSuite(arena, .init = setup, .fini = teardown);

Test(arena, create_reserves_the_capacity_rounded_to_the_granule)
{
    ortmem_arena *a = arena_on(b, 3 * G + 1, 0, 0);
    ortmem_region *r = ortmem_arena_region(a);
    cr_assert_not_null(r);
    cr_assert_eq(ortmem_region_size(r), 4 * G);
    cr_assert_eq(ortmem_region_granule(r), G);
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.reserved_va_bytes, 4 * G);
    cr_assert_eq(s.mapped_bytes, 0, "nothing is committed before the first alloc");
    ortmem_arena_stats as = arena_stats(a);
    cr_assert_eq(as.committed_bytes, 0);
    cr_assert_eq(as.live_allocations, 0);
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena, alloc_and_free_round_trip)
{
    ortmem_arena *a = arena_on(b, 8 * G, 0, 0);
    uint8_t *p = alloc_ok(a, 1000, 0);
    fill_all(p, 1000, 7);
    cr_assert(check_all(p, 1000, 7));
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.allocated_bytes, 1000, "requested size, not the rounded block");
    cr_assert_eq(s.live_allocations, 1);
    cr_assert_eq(s.committed_bytes, G);
    cr_assert_eq(stats_of(b).mapped_bytes, G);
    OK(ortmem_arena_free(a, p));
    s = arena_stats(a);
    cr_assert_eq(s.allocated_bytes, 0);
    cr_assert_eq(s.live_allocations, 0);
    cr_assert_eq(s.committed_bytes, 0);
    cr_assert_eq(s.allocs, 1);
    cr_assert_eq(s.frees, 1);
    cr_assert_eq(stats_of(b).mapped_bytes, 0);
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena, alignment_is_honoured)
{
    ortmem_arena *a = arena_on(b, 64 * G, 0, 0);
    const size_t aligns[] = {0, 1, 8, 256, 512, 4096, G / 2, G, 4 * G};
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
        /* An odd-sized neighbour first, so the next start is not aligned by luck. */
        uint8_t *pad = alloc_ok(a, 300, 0);
        uint8_t *p = alloc_ok(a, 777, aligns[i]);
        size_t want = aligns[i] > 256 ? aligns[i] : 256;
        cr_assert_eq((uintptr_t)p % want, 0, "align %zu gave %p", aligns[i], (void *)p);
        cr_assert(p >= pad + 300 || p + 777 <= pad, "no overlap with the neighbour");
        fill_all(p, 777, i);
    }
    OK(ortmem_arena_destroy(a, 1));
}

Test(arena, min_align_option_sets_the_default_alignment)
{
    ortmem_arena *a = arena_on(b, 8 * G, 0, 4096);
    uint8_t *p = alloc_ok(a, 1, 0);
    uint8_t *q = alloc_ok(a, 1, 0);
    cr_assert_eq((uintptr_t)p % 4096, 0);
    cr_assert_eq((uintptr_t)q % 4096, 0);
    cr_assert_eq(q - p, 4096, "a 1-byte block takes one 4 KiB quantum");
    /* min_align above the granule: every start is aligned to it. */
    ortmem_arena *big = arena_on(b, 16 * G, 0, 2 * G);
    uint8_t *x = alloc_ok(big, 10, 0);
    uint8_t *y = alloc_ok(big, 10, 0);
    cr_assert_eq((uintptr_t)x % (2 * G), 0);
    cr_assert_eq((uintptr_t)y % (2 * G), 0);
    OK(ortmem_arena_free(big, x));
    OK(ortmem_arena_free(big, y));
    OK(ortmem_arena_destroy(big, 0));
    OK(ortmem_arena_free(a, p));
    OK(ortmem_arena_free(a, q));
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena, whole_capacity_fits_even_when_class_rounding_would_miss_it)
{
    /* A request equal to the only free block, at an alignment the block
     * already meets: TLSF rounding alone would refuse it. */
    ortmem_arena *a = arena_on(b, 5 * G, 0, 0);
    uint8_t *p = alloc_ok(a, 5 * G, G);
    cr_assert_eq(offset_in(a, p), 0);
    OK(ortmem_arena_free(a, p));
    p = alloc_ok(a, 5 * G - 100, 0);
    OK(ortmem_arena_free(a, p));
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena, aligned_search_skips_a_block_too_small_after_its_padding)
{
    /* Free blocks X = [256, 256 + G) and Y = [4G, 4G + 5G/4). A G/2 request
     * aligned to G: X is large enough but not once padded to G; Y fits. */
    ortmem_arena *a = arena_on(b, 8 * G, 0, 0);
    uint8_t *a0 = alloc_ok(a, 256, 0);
    uint8_t *x = alloc_ok(a, G, 0);
    uint8_t *a1 = alloc_ok(a, 3 * G - 256, 0);
    uint8_t *y = alloc_ok(a, G + G / 4, 0);
    uint8_t *a2 = alloc_ok(a, 8 * G - 4 * G - G - G / 4, 0);
    cr_assert_eq(offset_in(a, x), 256);
    cr_assert_eq(offset_in(a, y), 4 * G);
    OK(ortmem_arena_free(a, x));
    OK(ortmem_arena_free(a, y));
    uint8_t *p = alloc_ok(a, G / 2, G);
    cr_assert_eq(offset_in(a, p), 4 * G, "got offset %zu", offset_in(a, p));
    void *none = NULL;
    EXPECT_STATUS(ortmem_arena_alloc(a, G + 256, G, &none), ORTMEM_E_NOMEM);
    OK(ortmem_arena_free(a, p));
    OK(ortmem_arena_free(a, a0));
    OK(ortmem_arena_free(a, a1));
    OK(ortmem_arena_free(a, a2));
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena, free_blocks_coalesce_with_both_neighbours)
{
    /* A, B and C fill the arena exactly: only a fully coalesced block can
     * hold the total afterwards. */
    ortmem_arena *a = arena_on(b, 4 * G, 0, 0);
    size_t sa = G + 256, sb = 2 * G - 512, sc = G + 256;
    uint8_t *pa = alloc_ok(a, sa, 0);
    uint8_t *pb = alloc_ok(a, sb, 0);
    uint8_t *pc = alloc_ok(a, sc, 0);
    cr_assert_eq(pb, pa + sa, "B follows A");
    cr_assert_eq(pc, pb + sb, "C follows B");
    void *none = NULL;
    EXPECT_STATUS(ortmem_arena_alloc(a, 256, 0, &none), ORTMEM_E_NOMEM);
    /* Middle first, then the ends: each end merges into the middle. */
    OK(ortmem_arena_free(a, pb));
    OK(ortmem_arena_free(a, pa));
    OK(ortmem_arena_free(a, pc));
    uint8_t *all = alloc_ok(a, sa + sb + sc, 0);
    cr_assert_eq(all, pa, "the merged block starts at A");
    OK(ortmem_arena_free(a, all));
    /* The other order: the ends first, then the middle joins both at once. */
    pa = alloc_ok(a, sa, 0);
    pb = alloc_ok(a, sb, 0);
    pc = alloc_ok(a, sc, 0);
    OK(ortmem_arena_free(a, pa));
    OK(ortmem_arena_free(a, pc));
    OK(ortmem_arena_free(a, pb));
    all = alloc_ok(a, 4 * G, 0);
    cr_assert_eq(all, pa);
    OK(ortmem_arena_free(a, all));
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena, a_granule_lives_while_any_allocation_touches_it)
{
    ortmem_arena *a = arena_on(b, 8 * G, 0, 0);
    uint8_t *p = alloc_ok(a, G / 4, 0);
    uint8_t *q = alloc_ok(a, G / 4, 0);
    cr_assert_eq(offset_in(a, p) / G, offset_in(a, q) / G, "both share granule 0");
    cr_assert_eq(stats_of(b).mapped_bytes, G);
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_CREATE], 1, "the second alloc commits nothing");
    fill_all(q, G / 4, 2);
    OK(ortmem_arena_free(a, p));
    cr_assert_eq(stats_of(b).mapped_bytes, G, "q still touches the granule");
    cr_assert_eq(granule_state(a, 0), ORTMEM_GRANULE_MAPPED);
    cr_assert(check_all(q, G / 4, 2));
    OK(ortmem_arena_free(a, q));
    cr_assert_eq(stats_of(b).mapped_bytes, 0);
    cr_assert_eq(granule_state(a, 0), ORTMEM_GRANULE_UNMAPPED);
    cr_assert_eq(arena_stats(a).committed_bytes, 0);
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena, an_allocation_across_a_boundary_holds_both_granules)
{
    ortmem_arena *a = arena_on(b, 8 * G, 0, 0);
    uint8_t *head = alloc_ok(a, G - 512, 0);
    uint8_t *span = alloc_ok(a, 1024, 0); /* [G-512, G+512): granules 0 and 1 */
    uint8_t *tail = alloc_ok(a, 1024, 0); /* granule 1 only */
    cr_assert_eq(offset_in(a, span), G - 512);
    cr_assert_eq(stats_of(b).mapped_bytes, 2 * G);
    OK(ortmem_arena_free(a, head));
    cr_assert_eq(granule_state(a, 0), ORTMEM_GRANULE_MAPPED, "span still touches granule 0");
    OK(ortmem_arena_free(a, span));
    cr_assert_eq(granule_state(a, 0), ORTMEM_GRANULE_UNMAPPED);
    cr_assert_eq(granule_state(a, G), ORTMEM_GRANULE_MAPPED, "tail still touches granule 1");
    OK(ortmem_arena_free(a, tail));
    cr_assert_eq(stats_of(b).mapped_bytes, 0);
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena, commit_and_decommit_take_one_call_per_run)
{
    ortmem_arena *a = arena_on(b, 16 * G, 0, 0);
    uint8_t *p = alloc_ok(a, 5 * G, 0);
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE], 5);
    cr_assert_eq(s.calls[ORTMEM_OP_SET_ACCESS], 1, "the run is committed in one region call");
    fill_all(p, 5 * G, 3);
    cr_assert(check_all(p, 5 * G, 3));
    OK(ortmem_arena_free(a, p));
    s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_UNMAP], 1, "the run is decommitted in one call");
    cr_assert_eq(s.calls[ORTMEM_OP_RELEASE], 5);
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena, cache_keeps_exactly_its_bound_of_empty_granules)
{
    ortmem_arena *a = arena_on(b, 8 * G, 2 * G, 0);
    uint8_t *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = alloc_ok(a, G, 0);
    cr_assert_eq(stats_of(b).mapped_bytes, 4 * G);
    for (int i = 0; i < 4; i++)
        OK(ortmem_arena_free(a, p[i]));
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.cached_bytes, 2 * G);
    cr_assert_eq(s.committed_bytes, 2 * G);
    cr_assert_eq(stats_of(b).mapped_bytes, 2 * G);
    /* LRU: the two most recently emptied granules stay. */
    cr_assert_eq(granule_state(a, offset_in(a, p[0])), ORTMEM_GRANULE_UNMAPPED);
    cr_assert_eq(granule_state(a, offset_in(a, p[1])), ORTMEM_GRANULE_UNMAPPED);
    cr_assert_eq(granule_state(a, offset_in(a, p[2])), ORTMEM_GRANULE_MAPPED);
    cr_assert_eq(granule_state(a, offset_in(a, p[3])), ORTMEM_GRANULE_MAPPED);
    /* Reusing a cached granule maps nothing new and takes it off the cache. */
    ortmem_vmm_stats before = stats_of(b);
    uint8_t *again = alloc_ok(a, 100, G); /* first aligned fit: granule 0, not cached */
    cr_assert_eq(offset_in(a, again), 0);
    OK(ortmem_arena_free(a, again));
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_MAP], before.calls[ORTMEM_OP_MAP] + 1);
    cr_assert_eq(granule_state(a, 0), ORTMEM_GRANULE_MAPPED, "granule 0 is now most recent");
    cr_assert_eq(granule_state(a, offset_in(a, p[2])), ORTMEM_GRANULE_UNMAPPED,
                 "the least recent was evicted to keep the bound");
    cr_assert_eq(arena_stats(a).cached_bytes, 2 * G);
    /* Trim lowers the cache; trim(0) empties it. */
    OK(ortmem_arena_trim(a, G + G / 2));
    cr_assert_eq(arena_stats(a).cached_bytes, G, "whole granules only");
    cr_assert_eq(stats_of(b).mapped_bytes, G);
    OK(ortmem_arena_trim(a, 0));
    s = arena_stats(a);
    cr_assert_eq(s.cached_bytes, 0);
    cr_assert_eq(s.committed_bytes, 0);
    cr_assert_eq(stats_of(b).mapped_bytes, 0);
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena, a_cached_granule_is_reused_without_backend_calls)
{
    ortmem_arena *a = arena_on(b, 8 * G, 4 * G, 0);
    uint8_t *p = alloc_ok(a, 3 * G, 0);
    OK(ortmem_arena_free(a, p));
    cr_assert_eq(arena_stats(a).cached_bytes, 3 * G);
    ortmem_vmm_stats before = stats_of(b);
    uint8_t *q = alloc_ok(a, 2 * G, 0);
    cr_assert_eq(q, p);
    ortmem_vmm_stats after = stats_of(b);
    for (int op = 0; op < ORTMEM_OP_COUNT; op++)
        cr_assert_eq(after.calls[op], before.calls[op], "op %d", op);
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.cached_bytes, G, "the two reused granules left the cache");
    cr_assert_eq(s.committed_bytes, 3 * G);
    OK(ortmem_arena_free(a, q));
    OK(ortmem_arena_trim(a, 0));
    /* Evicting granules 0..2 that were cached in two batches: still one run. */
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_UNMAP], 1);
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena, create_refuses_bad_options)
{
    ortmem_arena *a = NULL;
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    EXPECT_STATUS(ortmem_arena_create(b, &opt, &a), ORTMEM_E_INVALID); /* capacity 0 */
    opt.capacity = G;
    EXPECT_STATUS(ortmem_arena_create(b, NULL, &a), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_arena_create(b, &opt, NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_arena_create(NULL, &opt, &a), ORTMEM_E_INVALID);
    opt.min_align = 384;
    EXPECT_STATUS(ortmem_arena_create(b, &opt, &a), ORTMEM_E_ALIGN);
    opt.min_align = 0;
    opt.capacity = SIZE_MAX - 5;
    EXPECT_STATUS(ortmem_arena_create(b, &opt, &a), ORTMEM_E_OVERFLOW);
    opt.capacity = G;
    opt.struct_size = sizeof opt + 8;
    EXPECT_STATUS(ortmem_arena_create(b, &opt, &a), ORTMEM_E_INVALID);
    opt.struct_size = 0;
    EXPECT_STATUS(ortmem_arena_create(b, &opt, &a), ORTMEM_E_INVALID);
    cr_assert_null(a);
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_RESERVE], 0);
    /* A shorter struct_size (an older caller) takes defaults for the rest. */
    opt.struct_size = offsetof(ortmem_arena_options, cache_bytes);
    OK(ortmem_arena_create(b, &opt, &a));
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena, alloc_refuses_bad_input_and_changes_nothing)
{
    ortmem_arena *a = arena_on(b, 4 * G, 0, 0);
    uint8_t *keep = alloc_ok(a, G, 0);
    ortmem_arena_stats before = arena_stats(a);
    ortmem_vmm_stats vbefore = stats_of(b);
    void *p = (void *)0x1;
    EXPECT_STATUS(ortmem_arena_alloc(NULL, 64, 0, &p), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_arena_alloc(a, 64, 0, NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_arena_alloc(a, 0, 0, &p), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_arena_alloc(a, 64, 3, &p), ORTMEM_E_ALIGN);
    EXPECT_STATUS(ortmem_arena_alloc(a, 64, G + 1, &p), ORTMEM_E_ALIGN);
    EXPECT_STATUS(ortmem_arena_alloc(a, SIZE_MAX - 10, 4096, &p), ORTMEM_E_OVERFLOW);
    EXPECT_STATUS(ortmem_arena_alloc(a, SIZE_MAX, 0, &p), ORTMEM_E_OVERFLOW);
    EXPECT_STATUS(ortmem_arena_alloc(a, (size_t)1 << 62, (size_t)1 << 62, &p), ORTMEM_E_NOMEM);
    EXPECT_STATUS(ortmem_arena_alloc(a, 3 * G + 1, 0, &p), ORTMEM_E_NOMEM);
    /* The detail names the request and the largest free block. */
    char want[128];
    snprintf(want, sizeof want, "largest free block %zu bytes", 3 * G);
    cr_assert(strstr(ortmem_last_error(), want), "detail: %s", ortmem_last_error());
    snprintf(want, sizeof want, "%zu bytes", 3 * G + 1);
    cr_assert(strstr(ortmem_last_error(), want), "detail: %s", ortmem_last_error());
    cr_assert_eq(p, (void *)0x1, "a failed alloc leaves the output alone");
    ortmem_arena_stats after = arena_stats(a);
    cr_assert_eq(after.failed_allocs, before.failed_allocs + 8,
                 "every failed call on a live arena counts");
    after.failed_allocs = before.failed_allocs;
    cr_assert(same_stats(&after, &before));
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_MAP], vbefore.calls[ORTMEM_OP_MAP]);
    /* A region handle is not an arena. */
    EXPECT_STATUS(ortmem_arena_alloc((ortmem_arena *)ortmem_arena_region(a), 64, 0, &p),
                  ORTMEM_E_HANDLE);
    OK(ortmem_arena_free(a, keep));
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena, free_tells_foreign_pointers_from_double_frees)
{
    ortmem_arena *a = arena_on(b, 8 * G, 0, 0);
    uint8_t *p = alloc_ok(a, 1000, 0);
    uint8_t *q = alloc_ok(a, 1000, 0);
    int local = 0;
    EXPECT_STATUS(ortmem_arena_free(NULL, p), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_arena_free(a, NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_arena_free(a, p + 256), ORTMEM_E_NOT_FOUND);   /* inside p */
    EXPECT_STATUS(ortmem_arena_free(a, &local), ORTMEM_E_NOT_FOUND);    /* outside */
    EXPECT_STATUS(ortmem_arena_free(a, p + 4 * G), ORTMEM_E_NOT_FOUND); /* never used */
    OK(ortmem_arena_free(a, p));
    EXPECT_STATUS(ortmem_arena_free(a, p), ORTMEM_E_DOUBLE_FREE);
    /* q merges into p's free block: its start is still known as freed. */
    OK(ortmem_arena_free(a, q));
    EXPECT_STATUS(ortmem_arena_free(a, q), ORTMEM_E_DOUBLE_FREE);
    EXPECT_STATUS(ortmem_arena_free(a, p), ORTMEM_E_DOUBLE_FREE);
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.frees, 2, "refused frees are not counted");
    cr_assert_eq(s.live_allocations, 0);
    /* Handing the memory out again forgets the old starts it covers. */
    uint8_t *big = alloc_ok(a, 4096, 0);
    cr_assert_eq(big, p);
    EXPECT_STATUS(ortmem_arena_free(a, q), ORTMEM_E_NOT_FOUND);
    OK(ortmem_arena_free(a, big));
    EXPECT_STATUS(ortmem_arena_free(a, big), ORTMEM_E_DOUBLE_FREE);
    uint8_t *same = alloc_ok(a, 100, 0);
    cr_assert_eq(same, p);
    OK(ortmem_arena_free(a, same));
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena, destroy_with_live_allocations_is_busy_unless_forced)
{
    ortmem_arena *a = arena_on(b, 4 * G, 0, 0);
    uint8_t *p = alloc_ok(a, 3000, 0);
    fill_all(p, 3000, 9);
    ortmem_arena_stats before = arena_stats(a);
    ortmem_vmm_stats vbefore = stats_of(b);
    EXPECT_STATUS(ortmem_arena_destroy(a, 0), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "1 allocations (3000 bytes)"), "detail: %s",
              ortmem_last_error());
    ortmem_arena_stats after = arena_stats(a);
    cr_assert(same_stats(&after, &before), "a refused destroy changes nothing");
    cr_assert_eq(stats_of(b).mapped_bytes, vbefore.mapped_bytes);
    cr_assert(check_all(p, 3000, 9));
    uint8_t *q = alloc_ok(a, 10, 0); /* still usable */
    OK(ortmem_arena_free(a, q));
    OK(ortmem_arena_destroy(a, 1));
    cr_assert_eq(stats_of(b).mapped_bytes, 0);
    cr_assert_eq(stats_of(b).reserved_va_bytes, 0);
}

Test(arena, a_destroyed_arena_is_answered_with_handle)
{
    ortmem_arena *a = arena_on(b, 4 * G, 0, 0);
    OK(ortmem_arena_destroy(a, 0));
    void *p = NULL;
    ortmem_arena_stats s = {.struct_size = sizeof s};
    EXPECT_STATUS(ortmem_arena_alloc(a, 64, 0, &p), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_arena_free(a, (void *)0x1000), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_arena_stats_get(a, &s), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_arena_trim(a, 0), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_arena_destroy(a, 1), ORTMEM_E_HANDLE);
    cr_assert_null(ortmem_arena_region(a));
    cr_assert_null(ortmem_arena_region(NULL));
    EXPECT_STATUS(ortmem_arena_destroy(NULL, 0), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_arena_trim(NULL, 0), ORTMEM_E_INVALID);
}

Test(arena, stats_refuse_bad_output_and_honour_struct_size)
{
    ortmem_arena *a = arena_on(b, 4 * G, 0, 0);
    EXPECT_STATUS(ortmem_arena_stats_get(a, NULL), ORTMEM_E_INVALID);
    ortmem_arena_stats s;
    memset(&s, 0, sizeof s);
    EXPECT_STATUS(ortmem_arena_stats_get(a, &s), ORTMEM_E_INVALID); /* struct_size 0 */
    s.struct_size = sizeof s + 1;
    EXPECT_STATUS(ortmem_arena_stats_get(a, &s), ORTMEM_E_INVALID);
    s.struct_size = sizeof s;
    EXPECT_STATUS(ortmem_arena_stats_get(NULL, &s), ORTMEM_E_INVALID);
    uint8_t *p = alloc_ok(a, 500, 0);
    /* An older caller knowing only the first two fields: nothing past them is written. */
    memset(&s, 0xAB, sizeof s);
    s.struct_size = offsetof(ortmem_arena_stats, live_allocations);
    OK(ortmem_arena_stats_get(a, &s));
    cr_assert_eq(s.allocated_bytes, 500);
    cr_assert_eq(s.allocated_peak_bytes, 500);
    cr_assert_eq(s.live_allocations, 0xABABABABABABABABULL);
    cr_assert_eq(s.failed_allocs, 0xABABABABABABABABULL);
    OK(ortmem_arena_free(a, p));
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena, stats_follow_every_operation)
{
    ortmem_arena *a = arena_on(b, 16 * G, G, 0);
    uint8_t *p = alloc_ok(a, 3 * G + 5, 0); /* granules 0..3 */
    uint8_t *q = alloc_ok(a, 100, 0);       /* granule 3 */
    uint8_t *r = alloc_ok(a, 2 * G, G);     /* granules 4..5 */
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.allocated_bytes, 3 * G + 5 + 100 + 2 * G);
    cr_assert_eq(s.allocated_peak_bytes, s.allocated_bytes);
    cr_assert_eq(s.live_allocations, 3);
    cr_assert_eq(s.committed_bytes, 6 * G);
    cr_assert_eq(s.committed_peak_bytes, 6 * G);
    cr_assert_eq(s.cached_bytes, 0);
    cr_assert_eq(s.allocs, 3);
    cr_assert_eq(s.committed_bytes, stats_of(b).mapped_bytes);
    OK(ortmem_arena_free(a, p)); /* granules 0..2 empty: one stays cached */
    s = arena_stats(a);
    cr_assert_eq(s.allocated_bytes, 100 + 2 * G);
    cr_assert_eq(s.allocated_peak_bytes, 3 * G + 5 + 100 + 2 * G);
    cr_assert_eq(s.committed_bytes, 4 * G);
    cr_assert_eq(s.cached_bytes, G);
    cr_assert_eq(s.committed_peak_bytes, 6 * G);
    cr_assert_eq(s.committed_bytes, stats_of(b).mapped_bytes);
    void *none = NULL;
    EXPECT_STATUS(ortmem_arena_alloc(a, 64 * G, 0, &none), ORTMEM_E_NOMEM);
    OK(ortmem_arena_free(a, q));
    OK(ortmem_arena_free(a, r));
    s = arena_stats(a);
    cr_assert_eq(s.allocs, 3);
    cr_assert_eq(s.frees, 3);
    cr_assert_eq(s.failed_allocs, 1);
    cr_assert_eq(s.live_allocations, 0);
    cr_assert_eq(s.allocated_bytes, 0);
    cr_assert_eq(s.cached_bytes, G);
    cr_assert_eq(s.committed_bytes, G);
    cr_assert_eq(stats_of(b).mapped_bytes, G);
    OK(ortmem_arena_destroy(a, 0));
    cr_assert_eq(stats_of(b).mapped_bytes, 0, "destroy drops the cache too");
}

Test(arena, random_workload_keeps_data_intact_and_never_overlaps)
{
    enum { SLOTS = 48, OPS = 3000 };
    ortmem_arena *a = arena_on(b, 64 * G, 3 * G, 0);
    live_alloc live[SLOTS];
    memset(live, 0, sizeof live);
    uint64_t rng = 0x1234567;
    uint64_t nomem = 0;
    for (uint64_t op = 1; op <= OPS; op++) {
        size_t slot = rng_next(&rng) % SLOTS;
        if (live[slot].ptr) {
            cr_assert(check_all(live[slot].ptr, live[slot].size, live[slot].seed),
                      "op %llu: allocation %p of %zu bytes corrupted", (unsigned long long)op,
                      (void *)live[slot].ptr, live[slot].size);
            OK(ortmem_arena_free(a, live[slot].ptr));
            live[slot].ptr = NULL;
            continue;
        }
        uint64_t r = rng_next(&rng);
        size_t size = r % 4 == 0 ? 1 + (size_t)(r >> 8) % (3 * G) : 1 + (size_t)(r >> 8) % 8192;
        size_t align = (rng_next(&rng) % 3 == 0) ? (size_t)1 << (rng_next(&rng) % 18) : 0;
        void *p = NULL;
        ortmem_status st = ortmem_arena_alloc(a, size, align, &p);
        if (st == ORTMEM_E_NOMEM) {
            nomem++;
            continue;
        }
        OK(st);
        cr_assert_eq((uintptr_t)p % (align > 256 ? align : 256), 0);
        cr_assert(!overlaps_any(live, SLOTS, p, size), "op %llu: %p overlaps a live block",
                  (unsigned long long)op, p);
        live[slot] = (live_alloc){p, size, op};
        fill_all(p, size, op);
        /* Counters agree with the model and with the backend's ledger. */
        ortmem_arena_stats s = arena_stats(a);
        uint64_t bytes = 0, count = 0;
        for (size_t i = 0; i < SLOTS; i++) {
            bytes += live[i].ptr ? live[i].size : 0;
            count += live[i].ptr != NULL;
        }
        cr_assert_eq(s.allocated_bytes, bytes);
        cr_assert_eq(s.live_allocations, count);
        cr_assert_eq(s.committed_bytes, stats_of(b).mapped_bytes);
        cr_assert_leq(s.cached_bytes, 3 * G);
    }
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.failed_allocs, nomem);
    cr_assert_gt(s.allocs, OPS / 4);
    for (size_t i = 0; i < SLOTS; i++) {
        if (!live[i].ptr)
            continue;
        cr_assert(check_all(live[i].ptr, live[i].size, live[i].seed));
        OK(ortmem_arena_free(a, live[i].ptr));
    }
    s = arena_stats(a);
    cr_assert_eq(s.allocated_bytes, 0);
    cr_assert_eq(s.committed_bytes, s.cached_bytes);
    /* Everything coalesced back into one block. */
    void *all = alloc_ok(a, 64 * G, 0);
    OK(ortmem_arena_free(a, all));
    OK(ortmem_arena_destroy(a, 0));
}

typedef struct worker {
    ortmem_arena *arena;
    uint64_t seed;
    uint64_t failures;
} worker;

static void *worker_run(void *arg)
{
    worker *w = arg;
    live_alloc mine[8];
    memset(mine, 0, sizeof mine);
    uint64_t rng = w->seed;
    for (int op = 0; op < 600; op++) {
        size_t slot = rng_next(&rng) % 8;
        if (mine[slot].ptr) {
            w->failures += !check_all(mine[slot].ptr, mine[slot].size, mine[slot].seed);
            w->failures += ortmem_arena_free(w->arena, mine[slot].ptr) != ORTMEM_OK;
            mine[slot].ptr = NULL;
            continue;
        }
        size_t size = 1 + (size_t)(rng_next(&rng) % (2 * G));
        void *p = NULL;
        if (ortmem_arena_alloc(w->arena, size, 0, &p) != ORTMEM_OK)
            continue;
        mine[slot] = (live_alloc){p, size, w->seed * 1000 + (uint64_t)op};
        fill_all(p, size, mine[slot].seed);
    }
    for (size_t i = 0; i < 8; i++) {
        if (!mine[i].ptr)
            continue;
        w->failures += !check_all(mine[i].ptr, mine[i].size, mine[i].seed);
        w->failures += ortmem_arena_free(w->arena, mine[i].ptr) != ORTMEM_OK;
    }
    return NULL;
}

Test(arena, threads_share_one_arena_safely)
{
    ortmem_arena *a = arena_on(b, 128 * G, 2 * G, 0);
    pthread_t threads[4];
    worker workers[4];
    for (int i = 0; i < 4; i++) {
        workers[i] = (worker){a, (uint64_t)i + 11, 0};
        cr_assert_eq(pthread_create(&threads[i], NULL, worker_run, &workers[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(threads[i], NULL);
        cr_assert_eq(workers[i].failures, 0, "worker %d saw corruption or a failed free", i);
    }
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.live_allocations, 0);
    cr_assert_eq(s.allocs, s.frees);
    cr_assert_eq(s.committed_bytes, stats_of(b).mapped_bytes);
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena, trace_records_allocs_and_frees)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/ortmem-arena-trace-%ld.txt", (long)getpid());
    OK(ortmem_trace_start(path));
    ortmem_arena *a = arena_on(b, 4 * G, 0, 0);
    void *p = alloc_ok(a, 1000, 512);
    OK(ortmem_arena_free(a, p));
    void *none = NULL;
    EXPECT_STATUS(ortmem_arena_alloc(a, 0, 0, &none), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_arena_free(a, p), ORTMEM_E_DOUBLE_FREE);
    OK(ortmem_arena_destroy(a, 0));
    OK(ortmem_trace_stop());
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    unlink(path);
    char want[256];
    snprintf(want, sizeof want, "alloc p%lx 1000 512\nfree p%lx\n", (unsigned long)(uintptr_t)p,
             (unsigned long)(uintptr_t)p);
    cr_assert(strstr(text, want), "trace:\n%s", text);
    cr_assert_null(strstr(text, "commit"), "the arena's region is not traced:\n%s", text);
    const char *first = strstr(text, "free p");
    cr_assert_null(strstr(first + 1, "free p"), "a refused free is not traced:\n%s", text);
}

/* ---- extents: the default geometric policy and its cache ---- */

TestSuite(arena_extents, .init = setup, .fini = teardown);

/* An arena laying extents by growth with a cap of cap_granules. */
static ortmem_arena *arena_ext(ortmem_backend *backend, size_t capacity, size_t cache_bytes,
                               ortmem_extent_growth growth, size_t cap_granules)
{
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    opt.capacity = capacity;
    opt.cache_bytes = cache_bytes;
    opt.extents.growth = growth;
    opt.extents.cap_bytes = cap_granules * G;
    ortmem_arena *a = NULL;
    OK(ortmem_arena_create(backend, &opt, &a));
    return a;
}

static ortmem_granule_info arena_granule(ortmem_arena *a, size_t offset)
{
    return granule_info(ortmem_arena_region(a), offset);
}

Test(arena_extents, the_default_is_geometric_with_an_8_mib_cap)
{
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    cr_assert_eq(opt.extents.struct_size, sizeof(ortmem_extent_policy));
    cr_assert_eq(opt.extents.growth, ORTMEM_EXTENT_GEOMETRIC);
    cr_assert_eq(opt.extents.cap_bytes, (size_t)8 << 20);
    opt.capacity = 64 * G;
    ortmem_arena *a = NULL;
    OK(ortmem_arena_create(b, &opt, &a));
    void *p = alloc_ok(a, 100, 0);
    void *q = alloc_ok(a, G, G); /* granule 1: twice the extent below it */
    cr_assert_eq(arena_granule(a, G).extent_granules, 2);
    cr_assert_eq(arena_stats(a).extents_committed, 2);
    OK(ortmem_arena_free(a, p));
    OK(ortmem_arena_free(a, q));
    OK(ortmem_arena_destroy(a, 0));
}

/* Options zeroed but for what is set (struct_size included) hold a zeroed
 * policy: one extent per granule, as a region's; a bad policy is refused
 * before anything is reserved. */
Test(arena_extents, a_zeroed_policy_is_per_granule_and_a_bad_one_is_refused)
{
    ortmem_arena_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = sizeof opt;
    opt.capacity = 16 * G;
    ortmem_arena *a = NULL;
    OK(ortmem_arena_create(b, &opt, &a));
    void *p = alloc_ok(a, G, G);
    void *q = alloc_ok(a, G, G);
    cr_assert_eq(arena_granule(a, G).extent_granules, 1);
    cr_assert_eq(arena_stats(a).extents_committed, 2);
    OK(ortmem_arena_free(a, p));
    OK(ortmem_arena_free(a, q));
    OK(ortmem_arena_destroy(a, 0));
    ortmem_vmm_stats before = stats_of(b);
    opt.extents = (ortmem_extent_policy){sizeof opt.extents, ORTMEM_EXTENT_GEOMETRIC, G / 2};
    EXPECT_STATUS(ortmem_arena_create(b, &opt, &a), ORTMEM_E_INVALID);
    cr_assert(strstr(ortmem_last_error(), "arena create: extents"), "%s", ortmem_last_error());
    opt.extents.growth = (ortmem_extent_growth)7;
    opt.extents.cap_bytes = 0;
    EXPECT_STATUS(ortmem_arena_create(b, &opt, &a), ORTMEM_E_INVALID);
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_RESERVE], before.calls[ORTMEM_OP_RESERVE]);
}

/* One G-sized allocation per granule, in address order: the tail grows by
 * extents of 1, 2, 4 granules, then the cap (4) again and again; one create,
 * one map per extent, none while the allocation lands in one laid already. */
Test(arena_extents, growth_creates_follow_the_geometric_layout)
{
    ortmem_arena *a = arena_ext(b, 64 * G, 0, ORTMEM_EXTENT_GEOMETRIC, 4);
    static const uint64_t creates_after[16] = {1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 6};
    static const size_t committed_after[16] = {1,  3,  3,  7,  7,  7,  7,  11,
                                               11, 11, 11, 15, 15, 15, 15, 19};
    uint64_t creates0 = stats_of(b).calls[ORTMEM_OP_CREATE];
    void *p[16];
    for (size_t i = 0; i < 16; i++) {
        p[i] = alloc_ok(a, G, G);
        cr_assert_eq(offset_in(a, p[i]), i * G);
        ortmem_vmm_stats v = stats_of(b);
        cr_assert_eq(v.calls[ORTMEM_OP_CREATE] - creates0, creates_after[i], "alloc %zu", i);
        cr_assert_eq(v.calls[ORTMEM_OP_MAP], v.calls[ORTMEM_OP_CREATE], "one map per extent");
        ortmem_arena_stats s = arena_stats(a);
        cr_assert_eq(s.committed_bytes, committed_after[i] * G, "alloc %zu", i);
        cr_assert_eq(s.extents_committed, creates_after[i]);
        cr_assert_eq(v.mapped_extents, creates_after[i]);
    }
    /* The extents the region holds, as the layout laid them. */
    static const size_t starts[6] = {0, 1, 3, 7, 11, 15}, sizes[6] = {1, 2, 4, 4, 4, 4};
    for (size_t e = 0; e < 6; e++) {
        for (size_t g = starts[e]; g < starts[e] + sizes[e]; g++) {
            ortmem_granule_info info = arena_granule(a, g * G);
            cr_assert_eq(info.state, ORTMEM_GRANULE_MAPPED);
            cr_assert_eq(info.extent_offset, starts[e] * G, "granule %zu", g);
            cr_assert_eq(info.extent_granules, sizes[e], "granule %zu", g);
        }
    }
    cr_assert_eq(arena_granule(a, 19 * G).state, ORTMEM_GRANULE_UNMAPPED);
    for (size_t i = 0; i < 16; i++)
        OK(ortmem_arena_free(a, p[i]));
    OK(ortmem_arena_destroy(a, 0));
}

/* An allocation of known size is laid exactly (powers of two up to the cap),
 * and the tail grows from the last of its extents. */
Test(arena_extents, a_bulk_allocation_commits_exactly_what_it_needs)
{
    ortmem_arena *a = arena_ext(b, 64 * G, 0, ORTMEM_EXTENT_GEOMETRIC, 4);
    void *bulk = alloc_ok(a, 7 * G, 0); /* 4 + 2 + 1 */
    ortmem_vmm_stats v = stats_of(b);
    cr_assert_eq(v.calls[ORTMEM_OP_CREATE], 3);
    cr_assert_eq(arena_stats(a).committed_bytes, 7 * G, "nothing past the allocation");
    cr_assert_eq(arena_granule(a, 0).extent_granules, 4);
    cr_assert_eq(arena_granule(a, 4 * G).extent_granules, 2);
    cr_assert_eq(arena_granule(a, 6 * G).extent_granules, 1);
    void *next = alloc_ok(a, 100, 0); /* granule 7: twice the 1-granule extent below */
    cr_assert_eq(offset_in(a, next), 7 * G);
    cr_assert_eq(arena_granule(a, 7 * G).extent_granules, 2);
    cr_assert_eq(arena_stats(a).committed_bytes, 9 * G);
    OK(ortmem_arena_free(a, bulk));
    OK(ortmem_arena_free(a, next));
    OK(ortmem_arena_destroy(a, 0));
}

/* Below the committed top a hole is laid exactly; once the top extent goes,
 * the tail is lower and grows again from the extent under it. */
Test(arena_extents, a_hole_is_laid_exactly_and_the_tail_follows_the_committed_top)
{
    ortmem_arena *a = arena_ext(b, 64 * G, 0, ORTMEM_EXTENT_GEOMETRIC, 4); /* cache 0 */
    void *p0 = alloc_ok(a, G, G);                                          /* extent [0, 1) */
    void *p1 = alloc_ok(a, 2 * G, G);                                      /* extent [1, 3) */
    void *p2 = alloc_ok(a, 4 * G, G);                                      /* extent [3, 7) */
    OK(ortmem_arena_free(a, p1)); /* [1, 3) goes: a hole under [3, 7) */
    void *q = alloc_ok(a, G, G);
    cr_assert_eq(offset_in(a, q), G);
    cr_assert_eq(arena_granule(a, G).extent_granules, 1, "a hole is laid exactly");
    cr_assert_eq(arena_granule(a, 2 * G).state, ORTMEM_GRANULE_UNMAPPED);
    OK(ortmem_arena_free(a, p2)); /* the top extent goes: granule 1 is the top now */
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.committed_bytes, 2 * G);
    cr_assert_eq(s.extents_committed, 2);
    void *r = alloc_ok(a, G, G);
    cr_assert_eq(offset_in(a, r), 2 * G);
    cr_assert_eq(arena_granule(a, 2 * G).extent_granules, 2, "the tail doubles [1, 2)");
    cr_assert_eq(arena_granule(a, 3 * G).state, ORTMEM_GRANULE_MAPPED);
    cr_assert_eq(arena_stats(a).committed_bytes, 4 * G);
    OK(ortmem_arena_free(a, p0));
    OK(ortmem_arena_free(a, q));
    OK(ortmem_arena_free(a, r));
    cr_assert_eq(arena_stats(a).committed_bytes, 0);
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena_extents, a_freed_allocation_inside_a_partly_live_extent_keeps_it_mapped)
{
    ortmem_arena *a = arena_ext(b, 16 * G, 0, ORTMEM_EXTENT_GEOMETRIC, 4); /* cache 0 */
    void *p = alloc_ok(a, G, G);                                           /* extent [0, 1) */
    void *q = alloc_ok(a, G, G);                                           /* extent [1, 3) */
    void *r = alloc_ok(a, G, G);                                           /* granule 2 */
    cr_assert_eq(offset_in(a, r), 2 * G);
    ortmem_vmm_stats before = stats_of(b);
    OK(ortmem_arena_free(a, q));
    ortmem_vmm_stats after = stats_of(b);
    cr_assert_eq(after.calls[ORTMEM_OP_UNMAP], before.calls[ORTMEM_OP_UNMAP]);
    cr_assert_eq(arena_granule(a, G).state, ORTMEM_GRANULE_MAPPED, "r keeps the extent");
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.committed_bytes, 3 * G);
    cr_assert_eq(s.cached_bytes, 0, "a partly live extent is not cached");
    OK(ortmem_arena_free(a, r)); /* the extent is empty: with cache 0 it goes, whole */
    after = stats_of(b);
    cr_assert_eq(after.calls[ORTMEM_OP_UNMAP], before.calls[ORTMEM_OP_UNMAP] + 1);
    cr_assert_eq(after.calls[ORTMEM_OP_RELEASE], before.calls[ORTMEM_OP_RELEASE] + 1);
    cr_assert_eq(arena_granule(a, G).state, ORTMEM_GRANULE_UNMAPPED);
    cr_assert_eq(arena_granule(a, 2 * G).state, ORTMEM_GRANULE_UNMAPPED);
    s = arena_stats(a);
    cr_assert_eq(s.committed_bytes, G);
    cr_assert_eq(s.extents_committed, 1);
    OK(ortmem_arena_free(a, p));
    OK(ortmem_arena_destroy(a, 0));
}

Test(arena_extents, an_empty_extent_is_cached_and_reused_without_backend_calls)
{
    ortmem_arena *a = arena_ext(b, 16 * G, 8 * G, ORTMEM_EXTENT_GEOMETRIC, 4);
    void *p = alloc_ok(a, G, G);     /* extent [0, 1) */
    void *q = alloc_ok(a, G / 2, G); /* extent [1, 3), half of granule 1 used */
    OK(ortmem_arena_free(a, q));
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.cached_bytes, 2 * G, "the whole extent is cached");
    cr_assert_eq(s.extents_committed, 2);
    ortmem_vmm_stats before = stats_of(b);
    void *big = alloc_ok(a, 2 * G, G); /* granules 1..2: the cached extent */
    cr_assert_eq(offset_in(a, big), G);
    ortmem_vmm_stats after = stats_of(b);
    for (int op = 0; op < ORTMEM_OP_COUNT; op++)
        cr_assert_eq(after.calls[op], before.calls[op], "op %d", op);
    s = arena_stats(a);
    cr_assert_eq(s.cached_bytes, 0, "the extent left the cache");
    cr_assert_eq(s.committed_bytes, 3 * G);
    OK(ortmem_arena_free(a, big));
    OK(ortmem_arena_free(a, p));
    cr_assert_eq(arena_stats(a).cached_bytes, 3 * G);
    OK(ortmem_arena_destroy(a, 0));
}

/* The watermark counts bytes; only whole extents go, oldest first. */
Test(arena_extents, the_watermark_evicts_whole_extents_oldest_first)
{
    ortmem_arena *a = arena_ext(b, 16 * G, 4 * G, ORTMEM_EXTENT_GEOMETRIC, 4);
    void *p0 = alloc_ok(a, G, G);     /* extent [0, 1) */
    void *p1 = alloc_ok(a, 2 * G, G); /* extent [1, 3) */
    void *p2 = alloc_ok(a, 4 * G, G); /* extent [3, 7) */
    OK(ortmem_arena_free(a, p1));     /* cached: 2 granules */
    OK(ortmem_arena_free(a, p0));     /* 3 */
    cr_assert_eq(arena_stats(a).cached_bytes, 3 * G);
    ortmem_vmm_stats before = stats_of(b);
    OK(ortmem_arena_free(a, p2)); /* 7 > 4: [1, 3) then [0, 1) go, [3, 7) stays */
    ortmem_vmm_stats after = stats_of(b);
    cr_assert_eq(after.calls[ORTMEM_OP_UNMAP], before.calls[ORTMEM_OP_UNMAP] + 1,
                 "[0, 3) is one contiguous run");
    cr_assert_eq(after.calls[ORTMEM_OP_RELEASE], before.calls[ORTMEM_OP_RELEASE] + 2,
                 "two extents, two handles");
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.cached_bytes, 4 * G);
    cr_assert_eq(s.committed_bytes, 4 * G);
    cr_assert_eq(s.extents_committed, 1);
    cr_assert_eq(arena_granule(a, 0).state, ORTMEM_GRANULE_UNMAPPED);
    cr_assert_eq(arena_granule(a, 3 * G).state, ORTMEM_GRANULE_MAPPED);
    OK(ortmem_arena_destroy(a, 0));
}

/* Reclaim gives whole extents straight back to the backend: the pool does
 * not grow though its cap would allow it, owned bytes fall. An ordinary
 * overflow of the watermark may pool, as before. */
Test(arena_extents, reclaim_releases_whole_extents_past_the_pool)
{
    OK(ortmem_pool_set_cap(b, 64 * G));
    ortmem_arena *a = arena_ext(b, 32 * G, 16 * G, ORTMEM_EXTENT_GEOMETRIC, 4);
    void *p0 = alloc_ok(a, G, G);     /* extent [0, 1) */
    void *p1 = alloc_ok(a, 2 * G, G); /* extent [1, 3) */
    void *p2 = alloc_ok(a, 4 * G, G); /* extent [3, 7) */
    OK(ortmem_arena_free(a, p1));
    OK(ortmem_arena_free(a, p0));
    OK(ortmem_arena_free(a, p2));
    ortmem_vmm_stats before = stats_of(b);
    cr_assert_eq(before.pool_bytes, 0);
    uint64_t got = 0;
    OK(ortmem_arena_reclaim(a, 1, &got)); /* the oldest extent, whole */
    cr_assert_eq(got, 2 * G);
    ortmem_vmm_stats after = stats_of(b);
    cr_assert_eq(after.pool_bytes, before.pool_bytes, "reclaimed bytes skip the pool");
    cr_assert_eq(after.owned_bytes, before.owned_bytes - 2 * G);
    cr_assert_eq(after.owned_extents, before.owned_extents - 1);
    cr_assert_eq(arena_granule(a, G).state, ORTMEM_GRANULE_UNMAPPED);
    cr_assert_eq(arena_granule(a, 0).state, ORTMEM_GRANULE_MAPPED, "only whole extents go");
    OK(ortmem_arena_reclaim(a, 2 * G, &got)); /* [0, 1) then [3, 7): 5 granules */
    cr_assert_eq(got, 5 * G);
    after = stats_of(b);
    cr_assert_eq(after.pool_bytes, 0);
    cr_assert_eq(after.owned_bytes, 0);
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.reclaimed_bytes, 7 * G);
    cr_assert_eq(s.committed_bytes, 0);
    cr_assert_eq(s.extents_committed, 0);
    /* A trim (as a watermark overflow) pools what it decommits. */
    void *p = alloc_ok(a, G, G);
    OK(ortmem_arena_free(a, p));
    OK(ortmem_arena_trim(a, 0));
    cr_assert_eq(stats_of(b).pool_bytes, G, "a trim pools as before");
    OK(ortmem_arena_destroy(a, 0));
    OK(ortmem_pool_set_cap(b, 0));
}

/* Every allocation's bytes lie in mapped extents, each a power of two of
 * granules no larger than the cap, and the arena's counts agree with the
 * backend's, through a random workload with a small cache. */
Test(arena_extents, allocations_never_lie_outside_mapped_extents)
{
    ortmem_arena *a = arena_ext(b, 96 * G, 3 * G, ORTMEM_EXTENT_GEOMETRIC, 8);
    ortmem_region *r = ortmem_arena_region(a);
    live_alloc live[48];
    memset(live, 0, sizeof live);
    uint64_t rng = 0x5eed;
    for (int step = 0; step < 3000; step++) {
        live_alloc *l = &live[rng_next(&rng) % 48];
        if (l->ptr) {
            cr_assert(check_all(l->ptr, l->size, l->seed), "step %d: data corrupted", step);
            OK(ortmem_arena_free(a, l->ptr));
            l->ptr = NULL;
        } else {
            uint64_t pick = rng_next(&rng);
            size_t size = pick % 4 == 0 ? 1 + (size_t)(pick >> 8) % (5 * G)
                                        : 1 + (size_t)(pick >> 8) % (G / 3);
            void *p = NULL;
            ortmem_status st = ortmem_arena_alloc(a, size, 0, &p);
            if (st == ORTMEM_E_NOMEM)
                continue;
            OK(st);
            size_t off = offset_in(a, p);
            for (size_t g = off / G; g <= (off + size - 1) / G; g++) {
                ortmem_granule_info info = granule_info(r, g * G);
                cr_assert_eq(info.state, ORTMEM_GRANULE_MAPPED, "step %d granule %zu", step, g);
                cr_assert(info.extent_granules >= 1 && info.extent_granules <= 8 &&
                              (info.extent_granules & (info.extent_granules - 1)) == 0,
                          "step %d: extent of %u granules", step, info.extent_granules);
                cr_assert(info.extent_offset <= g * G &&
                          g * G < info.extent_offset + info.extent_granules * G);
            }
            *l = (live_alloc){p, size, (uint64_t)step};
            fill_all(p, size, l->seed);
        }
        ortmem_arena_stats s = arena_stats(a);
        ortmem_vmm_stats v = stats_of(b);
        cr_assert_eq(s.committed_bytes, v.mapped_bytes, "step %d", step);
        cr_assert_eq(s.extents_committed, v.mapped_extents, "step %d", step);
        cr_assert_leq(s.cached_bytes, 3 * G, "step %d", step);
    }
    for (size_t i = 0; i < 48; i++) {
        if (live[i].ptr)
            OK(ortmem_arena_free(a, live[i].ptr));
    }
    OK(ortmem_arena_destroy(a, 0));
}

/* ---- fault injection: own backends per run ---- */

TestSuite(arena_fault);

typedef struct fault_rig {
    ortmem_backend *cpu;
    ortmem_backend *fault;
} fault_rig;

static fault_rig rig_create(ortmem_backend_op op, uint64_t fail_at)
{
    fault_rig rig = {test_backend(), NULL};
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = op;
    fo.fail_at = fail_at;
    OK(ortmem_fault_backend_create(rig.cpu, &fo, &rig.fault));
    return rig;
}

static void rig_destroy(fault_rig rig)
{
    ortmem_status st = ortmem_backend_destroy(rig.fault);
    cr_assert(st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED, "%s: %s", ortmem_status_str(st),
              ortmem_last_error());
    OK(ortmem_backend_destroy(rig.cpu));
}

Test(arena_fault, failed_commit_changes_nothing)
{
    fault_rig rig = rig_create(ORTMEM_OP_MAP, 3);
    ortmem_arena *a = arena_on(rig.fault, 16 * G, 0, 0);
    uint8_t *keep = alloc_ok(a, G / 2, 0); /* map call 1 */
    ortmem_arena_stats before = arena_stats(a);
    ortmem_vmm_stats vbefore = stats_of(rig.fault);
    void *p = NULL;
    /* Granules 0..3: 0 is committed, 1..3 need maps 2, 3 (fails), 4. */
    EXPECT_STATUS(ortmem_arena_alloc(a, 3 * G, 0, &p), ORTMEM_E_BACKEND);
    cr_assert(strstr(ortmem_last_error(), "arena alloc of"), "%s", ortmem_last_error());
    cr_assert_null(p);
    ortmem_arena_stats after = arena_stats(a);
    cr_assert_eq(after.failed_allocs, before.failed_allocs + 1);
    after.failed_allocs = before.failed_allocs;
    cr_assert(same_stats(&after, &before), "stats exactly as before");
    ortmem_vmm_stats v = stats_of(rig.fault);
    cr_assert_eq(v.mapped_bytes, vbefore.mapped_bytes);
    cr_assert_eq(v.owned_bytes, vbefore.owned_bytes);
    cr_assert_eq(granule_state(a, G), ORTMEM_GRANULE_UNMAPPED);
    /* The index is unchanged too: the retry lands where the first try would have. */
    p = alloc_ok(a, 3 * G, 0);
    cr_assert_eq(offset_in(a, p), G / 2);
    fill_all(p, 3 * G, 4);
    OK(ortmem_arena_free(a, keep));
    OK(ortmem_arena_free(a, p));
    OK(ortmem_arena_destroy(a, 0));
    cr_assert_eq(stats_of(rig.fault).owned_bytes, 0);
    rig_destroy(rig);
}

/* A bulk allocation past a 1-granule extent lays 4 + 2 + 1 granules; a
 * failure in the middle of that commit (a create, a map) leaves the arena,
 * the backend's ledger and the region exactly as they were, and the retry
 * lays the same extents. */
Test(arena_fault, a_failed_extent_commit_changes_nothing)
{
    static const struct {
        ortmem_backend_op op;
        uint64_t fail_at;
    } cases[] = {{ORTMEM_OP_CREATE, 3}, {ORTMEM_OP_MAP, 4}, {ORTMEM_OP_SET_ACCESS, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fault_rig rig = rig_create(cases[c].op, cases[c].fail_at);
        ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
        opt.capacity = 32 * G;
        opt.extents.cap_bytes = 4 * G;
        ortmem_arena *a = NULL;
        OK(ortmem_arena_create(rig.fault, &opt, &a));
        void *keep = alloc_ok(a, G / 2, 0); /* extent [0, 1) */
        ortmem_arena_stats before = arena_stats(a);
        ortmem_vmm_stats vbefore = stats_of(rig.fault);
        void *p = NULL;
        EXPECT_STATUS(ortmem_arena_alloc(a, 7 * G, G, &p), ORTMEM_E_BACKEND);
        cr_assert_null(p);
        ortmem_arena_stats after = arena_stats(a);
        cr_assert_eq(after.failed_allocs, before.failed_allocs + 1, "case %zu", c);
        after.failed_allocs = before.failed_allocs;
        cr_assert(same_stats(&after, &before), "case %zu: stats exactly as before", c);
        ortmem_vmm_stats v = stats_of(rig.fault);
        cr_assert_eq(v.owned_bytes, vbefore.owned_bytes, "case %zu", c);
        cr_assert_eq(v.mapped_bytes, vbefore.mapped_bytes, "case %zu", c);
        cr_assert_eq(v.owned_extents, vbefore.owned_extents, "case %zu", c);
        cr_assert_eq(v.mapped_extents, vbefore.mapped_extents, "case %zu", c);
        cr_assert_eq(v.quarantined_bytes, 0, "case %zu", c);
        for (size_t g = 1; g < 8; g++)
            cr_assert_eq(granule_state(a, g * G), ORTMEM_GRANULE_UNMAPPED, "case %zu", c);
        p = alloc_ok(a, 7 * G, G);
        cr_assert_eq(offset_in(a, p), G);
        cr_assert_eq(granule_info(ortmem_arena_region(a), G).extent_granules, 4);
        cr_assert_eq(granule_info(ortmem_arena_region(a), 5 * G).extent_granules, 2);
        cr_assert_eq(granule_info(ortmem_arena_region(a), 7 * G).extent_granules, 1);
        cr_assert_eq(arena_stats(a).extents_committed, 4);
        fill_all(p, 7 * G, c);
        cr_assert(check_all(p, 7 * G, c));
        OK(ortmem_arena_free(a, p));
        OK(ortmem_arena_free(a, keep));
        OK(ortmem_arena_destroy(a, 0));
        cr_assert_eq(stats_of(rig.fault).owned_bytes, 0);
        rig_destroy(rig);
    }
}

/* The inner wrapper fails the second map, the outer one the rollback's unmap:
 * granule 0 ends quarantined and must never be handed out again. */
Test(arena_fault, a_quarantined_granule_is_fenced_off_and_the_alloc_goes_elsewhere)
{
    fault_rig inner = rig_create(ORTMEM_OP_MAP, 2);
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = ORTMEM_OP_UNMAP;
    fo.fail_at = 1;
    ortmem_backend *outer;
    OK(ortmem_fault_backend_create(inner.fault, &fo, &outer));
    ortmem_arena *a = arena_on(outer, 8 * G, 0, 0);
    uint8_t *p = alloc_ok(a, 2 * G, 0);
    cr_assert_eq(granule_state(a, 0), ORTMEM_GRANULE_QUARANTINED);
    cr_assert_eq(offset_in(a, p), G, "placed after the fenced granule");
    fill_all(p, 2 * G, 9);
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.quarantined_bytes, G);
    cr_assert_eq(s.failed_allocs, 0, "the retry succeeded");
    /* Small allocations never land in granule 0 again. */
    for (int i = 0; i < 16; i++) {
        uint8_t *q = alloc_ok(a, 256, 0);
        cr_assert_geq(offset_in(a, q), G, "allocation %d at offset %zu", i, offset_in(a, q));
    }
    cr_assert(check_all(p, 2 * G, 9));
    OK(ortmem_arena_free(a, p));
    EXPECT_STATUS(ortmem_arena_destroy(a, 1), ORTMEM_E_QUARANTINED);
    ortmem_vmm_stats v = stats_of(outer);
    cr_assert_eq(v.owned_bytes, v.quarantined_bytes);
    cr_assert_eq(v.mapped_bytes, v.quarantined_mapped_bytes);
    EXPECT_STATUS(ortmem_backend_destroy(outer), ORTMEM_E_QUARANTINED);
    rig_destroy(inner);
}

Test(arena_fault, failed_decommit_keeps_the_granule_cached_and_the_free_succeeds)
{
    fault_rig rig = rig_create(ORTMEM_OP_UNMAP, 1);
    ortmem_arena *a = arena_on(rig.fault, 8 * G, 0, 0);
    void *p = alloc_ok(a, 2 * G, 0);
    OK(ortmem_arena_free(a, p));
    cr_assert_str_eq(ortmem_last_error(), "", "a successful free leaves no detail");
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.live_allocations, 0);
    cr_assert_eq(s.committed_bytes, 2 * G);
    cr_assert_eq(s.cached_bytes, 2 * G, "over the bound of 0, but not lost");
    ortmem_vmm_stats v = stats_of(rig.fault);
    cr_assert_eq(v.mapped_bytes, 2 * G);
    cr_assert_eq(v.quarantined_bytes, 0);
    EXPECT_STATUS(ortmem_arena_free(a, p), ORTMEM_E_DOUBLE_FREE);
    /* The fault is spent: the next eviction releases them. */
    OK(ortmem_arena_trim(a, 0));
    cr_assert_eq(arena_stats(a).cached_bytes, 0);
    cr_assert_eq(stats_of(rig.fault).mapped_bytes, 0);
    cr_assert_eq(stats_of(rig.fault).owned_bytes, 0);
    OK(ortmem_arena_destroy(a, 0));
    rig_destroy(rig);
}

static ortmem_arena *logged_arena;
static char logged[512];
static uint64_t logged_cached;

static void log_and_look(void *user, ortmem_log_level level, const char *message)
{
    (void)user;
    if (level != ORTMEM_LOG_WARN || !strstr(message, "arena free"))
        return;
    snprintf(logged, sizeof logged, "%s", message);
    /* Calling back into the arena from the callback must not deadlock. */
    ortmem_arena_stats s = {.struct_size = sizeof s};
    if (ortmem_arena_stats_get(logged_arena, &s) == ORTMEM_OK)
        logged_cached = s.cached_bytes;
}

Test(arena_fault, a_failed_decommit_on_free_is_logged_outside_the_lock, .timeout = 30)
{
    fault_rig rig = rig_create(ORTMEM_OP_UNMAP, 1);
    logged_arena = arena_on(rig.fault, 8 * G, 0, 0);
    ortmem_set_log(log_and_look, NULL, ORTMEM_LOG_DEBUG);
    void *p = alloc_ok(logged_arena, G, 0);
    OK(ortmem_arena_free(logged_arena, p));
    ortmem_set_log(NULL, NULL, ORTMEM_LOG_INFO);
    cr_assert(strstr(logged, "decommitting granules [0, 0] failed"), "logged: '%s'", logged);
    cr_assert_eq(logged_cached, G);
    OK(ortmem_arena_destroy(logged_arena, 0));
    rig_destroy(rig);
}

Test(arena_fault, trim_reports_a_failed_decommit)
{
    fault_rig rig = rig_create(ORTMEM_OP_UNMAP, 1);
    ortmem_arena *a = arena_on(rig.fault, 8 * G, 4 * G, 0);
    void *p = alloc_ok(a, 2 * G, 0);
    OK(ortmem_arena_free(a, p));
    cr_assert_eq(arena_stats(a).cached_bytes, 2 * G);
    EXPECT_STATUS(ortmem_arena_trim(a, 0), ORTMEM_E_BACKEND);
    cr_assert(strstr(ortmem_last_error(), "arena trim"), "%s", ortmem_last_error());
    cr_assert_eq(arena_stats(a).cached_bytes, 2 * G);
    cr_assert_eq(stats_of(rig.fault).mapped_bytes, 2 * G);
    OK(ortmem_arena_trim(a, 0));
    cr_assert_eq(stats_of(rig.fault).mapped_bytes, 0);
    OK(ortmem_arena_destroy(a, 0));
    rig_destroy(rig);
}

Test(arena_fault, failed_release_on_free_is_quarantined_not_cached)
{
    fault_rig rig = rig_create(ORTMEM_OP_RELEASE, 1);
    ortmem_arena *a = arena_on(rig.fault, 8 * G, 0, 0);
    void *p = alloc_ok(a, G, 0);
    OK(ortmem_arena_free(a, p));
    ortmem_arena_stats s = arena_stats(a);
    cr_assert_eq(s.committed_bytes, 0, "the granule was unmapped");
    cr_assert_eq(s.cached_bytes, 0);
    ortmem_vmm_stats v = stats_of(rig.fault);
    cr_assert_eq(v.mapped_bytes, 0);
    cr_assert_eq(v.quarantined_bytes, G);
    cr_assert_eq(v.owned_bytes, v.quarantined_bytes);
    OK(ortmem_arena_destroy(a, 0));
    rig_destroy(rig);
}

/* One scripted workload; op < 0 frees slot -op-1, TRIM trims to 0. */
#define TRIM 100
typedef struct script_op {
    int slot;
    size_t size;
    size_t align;
} script_op;

static const script_op fault_script[] = {
    {0, G / 2, 0}, {1, 3 * G, 0}, {2, 100, 4 * G}, {-1, 0, 0},    {3, 2 * G, G}, {-2, 0, 0},
    {4, G / 4, 0}, {-3, 0, 0},    {TRIM, 0, 0},    {5, 5 * G, 0}, {-4, 0, 0},    {6, 700, 0},
    {-5, 0, 0},    {7, G, 512},   {-7, 0, 0},      {-8, 0, 0},    {1, 2 * G, 0},
};

/* Runs the script; frees may not fail, allocs fail only with the injected
 * status and then change nothing. Leaves some allocations live. */
static void run_fault_script(ortmem_backend *fb, uint64_t n, ortmem_extent_growth growth)
{
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    opt.extents.growth = growth;
    opt.capacity = 24 * G;
    opt.cache_bytes = G;
    ortmem_arena *a = NULL;
    ortmem_status st = ortmem_arena_create(fb, &opt, &a);
    if (st != ORTMEM_OK) {
        cr_assert_eq(st, ORTMEM_E_BACKEND, "N=%llu: %s", (unsigned long long)n,
                     ortmem_last_error());
        return;
    }
    live_alloc live[8];
    memset(live, 0, sizeof live);
    for (size_t i = 0; i < sizeof fault_script / sizeof fault_script[0]; i++) {
        script_op op = fault_script[i];
        if (op.slot == TRIM) {
            st = ortmem_arena_trim(a, 0);
            cr_assert(st == ORTMEM_OK || st == ORTMEM_E_BACKEND || st == ORTMEM_E_QUARANTINED,
                      "N=%llu trim: %s", (unsigned long long)n, ortmem_status_str(st));
        } else if (op.slot < 0) {
            live_alloc *l = &live[-op.slot - 1];
            if (!l->ptr)
                continue; /* its alloc was the one that failed */
            cr_assert(check_all(l->ptr, l->size, l->seed), "N=%llu step %zu: data corrupted",
                      (unsigned long long)n, i);
            OK(ortmem_arena_free(a, l->ptr));
            l->ptr = NULL;
        } else {
            ortmem_arena_stats before = arena_stats(a);
            void *p = NULL;
            st = ortmem_arena_alloc(a, op.size, op.align, &p);
            if (st != ORTMEM_OK) {
                cr_assert_eq(st, ORTMEM_E_BACKEND, "N=%llu step %zu: %s", (unsigned long long)n, i,
                             ortmem_last_error());
                ortmem_arena_stats after = arena_stats(a);
                after.failed_allocs--;
                cr_assert(same_stats(&after, &before),
                          "N=%llu step %zu: a failed alloc changed "
                          "the stats",
                          (unsigned long long)n, i);
                continue;
            }
            cr_assert(!overlaps_any(live, 8, p, op.size), "N=%llu step %zu: overlap",
                      (unsigned long long)n, i);
            live[op.slot] = (live_alloc){p, op.size, n * 100 + i};
            fill_all(p, op.size, n * 100 + i);
        }
        ortmem_vmm_stats v = stats_of(fb);
        cr_assert_eq(arena_stats(a).committed_bytes, v.mapped_bytes - v.quarantined_mapped_bytes,
                     "N=%llu step %zu", (unsigned long long)n, i);
    }
    for (size_t i = 0; i < 8; i++) {
        if (live[i].ptr)
            cr_assert(check_all(live[i].ptr, live[i].size, live[i].seed));
    }
    st = ortmem_arena_destroy(a, 1);
    cr_assert(st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED, "N=%llu destroy: %s",
              (unsigned long long)n, ortmem_last_error());
}

/* Under the per-granule baseline and the default geometric extents (fewer,
 * larger handles: fewer calls, each failure spanning more granules). */
static void every_backend_call_can_fail(ortmem_extent_growth growth, uint64_t least_calls)
{
    /* Count the workload's backend calls first. */
    fault_rig rig = rig_create(ORTMEM_OP_ANY, 0);
    run_fault_script(rig.fault, 0, growth);
    uint64_t total = 0, injected = 0;
    OK(ortmem_fault_backend_counts(rig.fault, &total, &injected));
    ortmem_vmm_stats v = stats_of(rig.fault);
    cr_assert_eq(v.owned_bytes, 0);
    cr_assert_eq(v.mapped_bytes, 0);
    rig_destroy(rig);
    cr_assert_gt(total, least_calls, "the script exercises the backend (%llu calls)",
                 (unsigned long long)total);
    uint64_t quarantined_runs = 0;
    for (uint64_t n = 1; n <= total; n++) {
        rig = rig_create(ORTMEM_OP_ANY, n);
        run_fault_script(rig.fault, n, growth);
        OK(ortmem_fault_backend_counts(rig.fault, NULL, &injected));
        cr_assert_eq(injected, 1, "N=%llu: the fault was injected", (unsigned long long)n);
        v = stats_of(rig.fault);
        cr_assert_eq(v.owned_bytes, v.quarantined_bytes, "N=%llu: owned %llu, quarantined %llu",
                     (unsigned long long)n, (unsigned long long)v.owned_bytes,
                     (unsigned long long)v.quarantined_bytes);
        cr_assert_eq(v.mapped_bytes, v.quarantined_mapped_bytes,
                     "N=%llu: mapped %llu, quarantined mapped %llu", (unsigned long long)n,
                     (unsigned long long)v.mapped_bytes,
                     (unsigned long long)v.quarantined_mapped_bytes);
        cr_assert_eq(v.reserved_va_bytes, 0, "N=%llu", (unsigned long long)n);
        quarantined_runs += v.quarantined_bytes != 0;
        rig_destroy(rig);
    }
    cr_assert_gt(quarantined_runs, 0, "some runs failed a release and quarantined it");
}

Test(arena_fault, every_backend_call_can_fail_and_the_ledger_balances)
{
    every_backend_call_can_fail(ORTMEM_EXTENT_GRANULE, 40);
}

Test(arena_fault, every_backend_call_can_fail_under_geometric_extents)
{
    every_backend_call_can_fail(ORTMEM_EXTENT_GEOMETRIC, 30); /* 34 calls today */
}
