/* The extent layout policy: which extents a growing tail commits. */
#include <criterion/criterion.h>
#include <ortmem/vmm.h>

#define MiB ((size_t)1 << 20)
#define G (2 * MiB)

static ortmem_extent_policy policy(ortmem_extent_growth growth, size_t cap)
{
    ortmem_extent_policy p = ORTMEM_EXTENT_POLICY_INIT;
    p.growth = growth;
    p.cap_bytes = cap;
    return p;
}

static size_t lay(ortmem_extent_policy p, uint64_t below, uint64_t need, uint64_t room,
                  uint64_t *sizes)
{
    size_t n = 0;
    ortmem_status st = ortmem_extent_layout(&p, G, below, need, room, sizes, 64, &n);
    cr_assert_eq(st, ORTMEM_OK, "%s", ortmem_last_error());
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        cr_assert(sizes[i] > 0 && (sizes[i] & (sizes[i] - 1)) == 0, "extent %llu granules",
                  (unsigned long long)sizes[i]);
        sum += sizes[i];
    }
    cr_assert(sum >= need && sum <= room, "laid %llu for need %llu room %llu",
              (unsigned long long)sum, (unsigned long long)need, (unsigned long long)room);
    return n;
}

Test(extent_policy, granule_lays_one_extent_per_granule)
{
    uint64_t s[64];
    cr_assert_eq(lay(policy(ORTMEM_EXTENT_GRANULE, 0), 0, 5, 100, s), 5);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(s[i], 1);
}

Test(extent_policy, geometric_doubles_the_extent_below_up_to_the_cap)
{
    ortmem_extent_policy p = policy(ORTMEM_EXTENT_GEOMETRIC, 0); /* 32 MiB = 16 granules */
    uint64_t s[64];
    uint64_t below = 0, expect[] = {1, 2, 4, 8, 16, 16, 16};
    for (size_t i = 0; i < sizeof expect / sizeof *expect; i++) {
        cr_assert_eq(lay(p, below, 1, 1000, s), 1);
        cr_assert_eq(s[0], expect[i], "step %zu: %llu", i, (unsigned long long)s[0]);
        below = s[0];
    }
    uint64_t cap = 0;
    cr_assert_eq(ortmem_extent_cap_granules(&p, G, &cap), ORTMEM_OK);
    cr_assert_eq(cap, 16);
}

Test(extent_policy, an_ask_of_at_least_the_next_extent_is_laid_exactly)
{
    uint64_t s[64];
    /* 11 granules after an extent of 2: next would be 4, the ask is known. */
    cr_assert_eq(lay(policy(ORTMEM_EXTENT_GEOMETRIC, 0), 2, 11, 1000, s), 3);
    cr_assert_eq(s[0], 8);
    cr_assert_eq(s[1], 2);
    cr_assert_eq(s[2], 1);
    /* 40 granules under a 16-granule cap: 16 + 16 + 8. */
    cr_assert_eq(lay(policy(ORTMEM_EXTENT_GEOMETRIC, 0), 0, 40, 1000, s), 3);
    cr_assert_eq(s[0], 16);
    cr_assert_eq(s[2], 8);
}

Test(extent_policy, exact_without_a_cap_lays_a_gibibyte_as_one_extent)
{
    uint64_t s[64];
    cr_assert_eq(lay(policy(ORTMEM_EXTENT_EXACT, 0), 0, 512, 512, s), 1);
    cr_assert_eq(s[0], 512);
    cr_assert_eq(lay(policy(ORTMEM_EXTENT_EXACT, 64 * MiB), 0, 512, 512, s), 16);
}

Test(extent_policy, the_window_clips_the_tail)
{
    uint64_t s[64];
    /* next would be 8 after 4, but only 3 granules fit: the ask itself is laid. */
    cr_assert_eq(lay(policy(ORTMEM_EXTENT_GEOMETRIC, 0), 4, 3, 3, s), 2);
    cr_assert_eq(s[0], 2);
    cr_assert_eq(s[1], 1);
}

Test(extent_policy, over_commit_stays_below_one_cap_for_every_step_of_a_random_growth)
{
    ortmem_extent_policy p = policy(ORTMEM_EXTENT_GEOMETRIC, 0);
    const uint64_t window = 4096, cap = 16;
    uint64_t committed = 0, live = 0, below = 0, seed = 12345;
    uint64_t s[64];
    while (live < window) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t step = 1 + (seed >> 33) % 40;
        live = live + step > window ? window : live + step;
        if (live > committed) {
            size_t n = lay(p, below, live - committed, window - committed, s);
            for (size_t i = 0; i < n; i++)
                committed += s[i];
            below = s[n - 1];
        }
        cr_assert(committed - live < cap, "committed %llu live %llu", (unsigned long long)committed,
                  (unsigned long long)live);
    }
}

Test(extent_policy, bad_input_is_a_status_and_short_capacity_names_the_count)
{
    ortmem_extent_policy p = policy(ORTMEM_EXTENT_GRANULE, 0);
    uint64_t s[2];
    size_t n = 0;
    cr_assert_eq(ortmem_extent_layout(NULL, G, 0, 1, 1, s, 2, &n), ORTMEM_E_INVALID);
    cr_assert_eq(ortmem_extent_layout(&p, 3 * MiB, 0, 1, 1, s, 2, &n), ORTMEM_E_INVALID);
    cr_assert_eq(ortmem_extent_layout(&p, G, 0, 5, 4, s, 2, &n), ORTMEM_E_RANGE);
    cr_assert_eq(ortmem_extent_layout(&p, G, 0, 5, 5, s, 2, &n), ORTMEM_E_RANGE);
    cr_assert_eq(n, 5);
    cr_assert_str_neq(ortmem_last_error(), "");
    p.growth = (ortmem_extent_growth)7;
    cr_assert_eq(ortmem_extent_layout(&p, G, 0, 1, 1, s, 2, &n), ORTMEM_E_INVALID);
    p = policy(ORTMEM_EXTENT_GEOMETRIC, MiB);
    cr_assert_eq(ortmem_extent_layout(&p, G, 0, 1, 1, s, 2, &n), ORTMEM_E_INVALID);
}
