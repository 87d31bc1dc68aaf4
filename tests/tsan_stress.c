/* Runs the concurrency workloads without Criterion, for the thread-sanitizer
 * pass. Prints one line per workload and a closing 'N passed, N failed'. */
#include <stdio.h>

#include "stress_workloads.h"

int main(void)
{
    struct {
        const char *name;
        stress_outcome (*run)(void);
    } workloads[] = {
        {"regions_shares_pool", stress_regions_shares_pool},
        {"destroy_racing_use", stress_destroy_racing_use},
        {"arena_alloc_free", stress_arena_alloc_free},
        {"grants_race", stress_grants_race},
        {"capture_gate", stress_capture_gate},
    };
    int passed = 0, failed = 0;
    for (size_t i = 0; i < sizeof workloads / sizeof workloads[0]; i++) {
        stress_outcome o = workloads[i].run();
        if (o.failure) {
            failed++;
            printf("FAIL %s: %s: %s\n", workloads[i].name, o.failure, o.detail);
        } else {
            passed++;
            printf("PASS %s\n", workloads[i].name);
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
