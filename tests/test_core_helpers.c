/* The library's internal helpers in src/core, tested directly (this suite alone
 * sees the internal headers). */
#include <criterion/criterion.h>
#include <ortmem/ortmem.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/hashset.h"

/* A cleanup call that fails on its own and overwrites the thread's detail. */
static void failing_cleanup(void)
{
    (void)OM_ERR(ORTMEM_E_BACKEND, "cleanup: unmap failed");
}

Test(core_helpers, error_restore_reports_the_first_failure_not_the_cleanup)
{
    ortmem_status st = OM_ERR(ORTMEM_E_RANGE, "commit [%d, +%d) outside %d bytes", 64, 32, 80);
    om_error_saved first;
    om_error_save(&first);
    failing_cleanup();
    cr_assert_str_eq(ortmem_last_error(), "cleanup: unmap failed");
    cr_assert_eq(om_error_restore(&first, st), ORTMEM_E_RANGE);
    cr_assert_str_eq(ortmem_last_error(), "commit [64, +32) outside 80 bytes");
    cr_assert_str_eq(first.detail, "commit [64, +32) outside 80 bytes");
}

Test(core_helpers, error_save_keeps_the_longest_detail_whole)
{
    char longest[OM_DETAIL_MAX];
    memset(longest, 'x', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0';
    (void)OM_ERR(ORTMEM_E_INVALID, "%s", longest);
    om_error_saved saved;
    om_error_save(&saved);
    om_error_clear();
    (void)om_error_restore(&saved, ORTMEM_E_INVALID);
    cr_assert_eq(strlen(ortmem_last_error()), OM_DETAIL_MAX - 1);
    cr_assert_str_eq(ortmem_last_error(), longest);
}

typedef struct versioned {
    size_t struct_size;
    int required;
    int optional;
} versioned;

Test(core_helpers, struct_check_takes_any_set_size_up_to_the_known_struct)
{
    versioned v = {.struct_size = sizeof v};
    versioned *opts = &v;
    cr_assert_eq(OM_STRUCT_CHECK("demo call", "options", opts), ORTMEM_OK);
    v.struct_size = 1; /* an older caller: the rest takes defaults */
    cr_assert_eq(OM_STRUCT_CHECK("demo call", "options", opts), ORTMEM_OK);
    v.struct_size = 0;
    cr_assert_eq(OM_STRUCT_CHECK("demo call", "options", opts), ORTMEM_E_INVALID);
    cr_assert_str_eq(ortmem_last_error(),
                     "demo call: options struct_size is 0 (set it to sizeof the struct)");
    v.struct_size = sizeof v + 8;
    cr_assert_eq(OM_STRUCT_CHECK("demo call", "options", opts), ORTMEM_E_INVALID);
    char want[160];
    snprintf(want, sizeof want,
             "demo call: options struct_size %zu is larger than the %zu bytes this library knows",
             sizeof v + 8, sizeof v);
    cr_assert_str_eq(ortmem_last_error(), want);
    versioned *none = NULL;
    cr_assert_eq(OM_STRUCT_CHECK("demo call", "options", none), ORTMEM_E_INVALID);
    cr_assert_str_eq(ortmem_last_error(), "demo call: options is NULL");
}

Test(core_helpers, struct_check_needs_the_required_fields_and_may_take_larger_structs)
{
    size_t need = OM_SIZE_THROUGH(versioned, required);
    cr_assert_eq(need, offsetof(versioned, required) + sizeof(int));
    versioned v = {.struct_size = need};
    cr_assert_eq(om_struct_check("demo create", "ops", &v.struct_size, need, SIZE_MAX), ORTMEM_OK);
    v.struct_size = 4096; /* a newer caller: slots past the known ones are not read */
    cr_assert_eq(om_struct_check("demo create", "ops", &v.struct_size, need, SIZE_MAX), ORTMEM_OK);
    v.struct_size = need - 1;
    cr_assert_eq(om_struct_check("demo create", "ops", &v.struct_size, need, SIZE_MAX),
                 ORTMEM_E_INVALID);
    char want[160];
    snprintf(want, sizeof want,
             "demo create: ops struct_size %zu is smaller than the %zu bytes this library needs",
             need - 1, need);
    cr_assert_str_eq(ortmem_last_error(), want);
}

Test(core_helpers, hashset_inserts_finds_and_removes_keys_including_zero)
{
    om_hashset set = {0};
    cr_assert_not(om_hashset_contains(&set, 7));
    cr_assert_not(om_hashset_remove(&set, 7));
    cr_assert(om_hashset_insert(&set, 7));
    cr_assert(om_hashset_insert(&set, 7)); /* already there: nothing changes */
    cr_assert(om_hashset_insert(&set, 0));
    cr_assert(om_hashset_insert(&set, UINT64_MAX));
    cr_assert_eq(om_hashset_size(&set), 3);
    cr_assert(om_hashset_contains(&set, 0));
    cr_assert(om_hashset_contains(&set, 7));
    cr_assert(om_hashset_contains(&set, UINT64_MAX));
    cr_assert_not(om_hashset_contains(&set, 8));
    cr_assert(om_hashset_remove(&set, 0));
    cr_assert_not(om_hashset_remove(&set, 0));
    cr_assert(om_hashset_remove(&set, 7));
    cr_assert_not(om_hashset_contains(&set, 7));
    cr_assert_eq(om_hashset_size(&set), 1);
    om_hashset_release(&set);
    cr_assert_eq(om_hashset_size(&set), 0);
    cr_assert_not(om_hashset_contains(&set, UINT64_MAX));
}

/* Deterministic pseudo-random keys (xorshift). */
static uint64_t next_random(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

Test(core_helpers, hashset_matches_a_plain_array_through_growth_and_removals)
{
    enum { KEYS = 3000, STEPS = 60000 };
    static bool in[KEYS];
    memset(in, 0, sizeof in);
    om_hashset set = {0};
    size_t expected = 0;
    uint64_t rnd = 0x9e3779b97f4a7c15ULL;
    for (int step = 0; step < STEPS; step++) {
        uint64_t k = next_random(&rnd) % KEYS;
        /* Keys that share low bits crowd the same probe runs. */
        uint64_t key = k << 12;
        if (next_random(&rnd) % 3) {
            cr_assert(om_hashset_insert(&set, key));
            expected += !in[k];
            in[k] = true;
        } else {
            cr_assert_eq(om_hashset_remove(&set, key), in[k], "step %d key %llu", step,
                         (unsigned long long)key);
            expected -= in[k];
            in[k] = false;
        }
        cr_assert_eq(om_hashset_size(&set), expected);
        if (step % 5000 == 0) {
            for (uint64_t j = 0; j < KEYS; j++)
                cr_assert_eq(om_hashset_contains(&set, j << 12), in[j], "step %d key %llu", step,
                             (unsigned long long)(j << 12));
        }
    }
    /* Half load at most: the slots grew with the keys. */
    cr_assert_geq(set.capacity, 2 * set.count);
    /* The visit sees every key once. */
    static bool seen[KEYS];
    memset(seen, 0, sizeof seen);
    size_t visited = 0;
    uint64_t key;
    for (size_t cursor = 0; om_hashset_next(&set, &cursor, &key);) {
        cr_assert_eq(key & 0xfff, 0);
        cr_assert(in[key >> 12] && !seen[key >> 12], "key %llu", (unsigned long long)key);
        seen[key >> 12] = true;
        visited++;
    }
    cr_assert_eq(visited, expected);
    om_hashset_release(&set);
}

Test(core_helpers, hashset_without_memory_fills_free_slots_then_refuses_changing_nothing)
{
    om_hashset set = {0};
    cr_assert(om_hashset_insert(&set, 1)); /* the first grow */
    size_t capacity = set.capacity;
    for (uint64_t k = 2; k <= capacity / 2; k++)
        cr_assert(om_hashset_insert(&set, k));
    cr_assert_eq(set.capacity, capacity);
    ortmem_alloc_fault(1, 1); /* every allocation from now on fails */
    uint64_t k = capacity / 2 + 1;
    for (; set.count + 1 < capacity; k++)
        cr_assert(om_hashset_insert(&set, k), "key %llu", (unsigned long long)k);
    cr_assert_eq(set.capacity, capacity);
    /* One slot stays free, so probes end: the next key is refused. */
    cr_assert_not(om_hashset_insert(&set, k));
    cr_assert_not(om_hashset_contains(&set, k));
    cr_assert_eq(om_hashset_size(&set), capacity - 1);
    /* A key already there, and a removal, need no memory. */
    cr_assert(om_hashset_insert(&set, 1));
    cr_assert(om_hashset_remove(&set, 1));
    cr_assert(om_hashset_insert(&set, k));
    uint64_t failed = 0;
    ortmem_alloc_counts(NULL, &failed);
    cr_assert_geq(failed, 1);
    ortmem_alloc_fault(0, 0);
    for (uint64_t j = 2; j <= k; j++)
        cr_assert(om_hashset_contains(&set, j), "key %llu", (unsigned long long)j);
    om_hashset_release(&set);
}
