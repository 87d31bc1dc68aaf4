/* Concurrency suites under Criterion; tsan_stress.c runs the same workloads
 * under the thread sanitizer. */
#include <criterion/criterion.h>

#include "stress_workloads.h"

#define EXPECT_CLEAN(outcome)                                                                      \
    do {                                                                                           \
        stress_outcome o_ = (outcome);                                                             \
        cr_assert_null(o_.failure, "%s: %s", o_.failure, o_.detail);                               \
    } while (0)

Test(stress, racing_regions_shares_and_pool_keep_the_ledger_exact)
{
    EXPECT_CLEAN(stress_regions_shares_pool());
}

Test(stress, destroy_racing_with_use_answers_e_handle)
{
    EXPECT_CLEAN(stress_destroy_racing_use());
}

Test(stress, racing_arena_allocations_never_overlap_or_corrupt)
{
    EXPECT_CLEAN(stress_arena_alloc_free());
}

Test(stress, racing_grants_never_pass_the_limit_and_refusals_change_nothing)
{
    EXPECT_CLEAN(stress_grants_race());
}

Test(stress, capture_gate_keeps_shared_sections_out_of_captures_and_runs_each_deferral_once)
{
    EXPECT_CLEAN(stress_capture_gate());
}
