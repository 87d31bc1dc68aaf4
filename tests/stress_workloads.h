/* Concurrency workloads, free of any test framework so that the same code
 * runs under Criterion (test_stress.c) and under the thread sanitizer
 * (tsan_stress.c): Criterion cannot start under TSAN (upstream issue #274). */
#ifndef ORTMEM_TESTS_STRESS_WORKLOADS_H
#define ORTMEM_TESTS_STRESS_WORKLOADS_H

#include <stdint.h>

typedef struct stress_outcome {
    const char *failure; /* NULL when every check held, else what broke */
    char detail[256];
} stress_outcome;

/* Threads racing commits, decommits and read-only shares of one prefix on a
 * pooled backend; checks bytes, mapper counts and the final ledger. */
stress_outcome stress_regions_shares_pool(void);

/* A region destroyed while another thread uses it: the user sees ORTMEM_OK
 * until the handle goes, then exactly ORTMEM_E_HANDLE. */
stress_outcome stress_destroy_racing_use(void);

/* Threads allocating and freeing in one arena: no overlap, no corruption,
 * committed bytes back to zero. */
stress_outcome stress_arena_alloc_free(void);

/* Threads, each with its own holder, racing grant prepare/commit/abort,
 * refunds and region commits with random sizes on one authority: a watcher
 * never sees owned + reserved above the limit, and every refusal left the
 * refused thread's holder exactly as it was. */
stress_outcome stress_grants_race(void);

/* Threads taking shared sections of the capture gate (some nested, some
 * try-enter, some deferring work) while others begin and end captures that
 * defer work and bypass the gate for their own sections: never a shared
 * section inside another thread's capture, never two captures at once, and
 * every deferred function runs exactly once, never inside the capture it was
 * deferred from. */
stress_outcome stress_capture_gate(void);

#endif
