/* The backend contract: what every backend owes the layers above it, written
 * once and run against each backend (CPU, the fault wrapper, CUDA over the
 * fake driver, CUDA on a GPU) through a fixture that says how to make one.
 *
 * Tests see the public headers only, so each primitive is reached the way the
 * layers above reach it (a region create is one reserve, a commit of n
 * granules is n creates, n maps and one set-access per run, ...) and checked
 * through the backend's ledger, which counts every primitive call and failure
 * (ortmem_vmm_stats.calls[op], failures[op]), and through the bytes.
 *
 * Each scenario is a function taking the fixture; BACKEND_CONTRACT_TESTS
 * defines one Criterion test per scenario in the caller's suite (the suite's
 * TestSuite .init, if any, runs first). */
#ifndef ORTMEM_TESTS_BACKEND_CONTRACT_H
#define ORTMEM_TESTS_BACKEND_CONTRACT_H

#include <criterion/criterion.h>
#include <ortmem/ortmem.h>
#include <stddef.h>

typedef enum contract_granularity {
    CONTRACT_GRANULE_RECOMMENDED = 0, /* regions use the backend's recommended granule */
    CONTRACT_GRANULE_MINIMUM          /* regions use its minimum granule */
} contract_granularity;

typedef struct backend_contract {
    const char *name; /* what ortmem_backend_name says of the backend under test */
    /* A new backend whose regions use the granularity asked for. Skips the
     * test (cr_skip_test) with the reason where the backend is unavailable. */
    ortmem_backend *(*create)(contract_granularity which);
    /* Destroys what create made, asserting ORTMEM_OK, and checks what only the
     * fixture can see (a wrapped backend, the fake driver's live objects). */
    void (*destroy)(ortmem_backend *b);
    /* Optional: checks the backend's own view against its ledger (the fake
     * driver's counters, the wrapped backend's ledger); run after each step. */
    void (*check)(ortmem_backend *b, const char *when);
    size_t granule_min; /* expected minimum granule; 0 = whatever the device reports */
    size_t granule_rec; /* expected recommended granule; 0 = whatever the device reports */
    /* Non-zero: mappings are host memory. The contract then also reads them
     * through pointers and probes access with the kernel (a read(2) into a
     * read-only page is EFAULT). Zero: device memory, touched only through
     * the backend's copy, and a copy into a read-only mapping must be refused
     * with a status. */
    int host_memory;
    /* Non-NULL: what the backend answered where more than one answer is
     * allowed (granularity, a refused write's status, pending event queries,
     * a bad import) is also printed on stdout as "<report_prefix>: ..." for
     * the run's log. */
    const char *report_prefix;
} backend_contract;

void contract_granularity_minimum_and_recommended(const backend_contract *c);
void contract_reserve_aligns_and_unreserve_returns_the_va(const backend_contract *c);
void contract_create_and_release_physical_granules(const backend_contract *c);
void contract_extents_are_created_mapped_and_released_whole(const backend_contract *c);
void contract_map_and_unmap_runs_and_unmap_keeps_the_va(const backend_contract *c);
void contract_set_access_read_write_and_read_only(const backend_contract *c);
void contract_a_second_mapping_sees_the_same_bytes(const backend_contract *c);
void contract_bad_input_is_a_status_and_changes_nothing(const backend_contract *c);
void contract_optional_capabilities_work_or_are_unsupported(const backend_contract *c);
void contract_failures_change_nothing_and_set_a_detail(const backend_contract *c);

#define BACKEND_CONTRACT_TEST_(suite, scenario, fixture)                                           \
    Test(suite, scenario)                                                                          \
    {                                                                                              \
        scenario(&(fixture));                                                                      \
    }

/* One test per scenario in suite, each against fixture (a backend_contract). */
#define BACKEND_CONTRACT_TESTS(suite, fixture)                                                     \
    BACKEND_CONTRACT_TEST_(suite, contract_granularity_minimum_and_recommended, fixture)           \
    BACKEND_CONTRACT_TEST_(suite, contract_reserve_aligns_and_unreserve_returns_the_va, fixture)   \
    BACKEND_CONTRACT_TEST_(suite, contract_create_and_release_physical_granules, fixture)          \
    BACKEND_CONTRACT_TEST_(suite, contract_extents_are_created_mapped_and_released_whole, fixture) \
    BACKEND_CONTRACT_TEST_(suite, contract_map_and_unmap_runs_and_unmap_keeps_the_va, fixture)     \
    BACKEND_CONTRACT_TEST_(suite, contract_set_access_read_write_and_read_only, fixture)           \
    BACKEND_CONTRACT_TEST_(suite, contract_a_second_mapping_sees_the_same_bytes, fixture)          \
    BACKEND_CONTRACT_TEST_(suite, contract_bad_input_is_a_status_and_changes_nothing, fixture)     \
    BACKEND_CONTRACT_TEST_(suite, contract_optional_capabilities_work_or_are_unsupported, fixture) \
    BACKEND_CONTRACT_TEST_(suite, contract_failures_change_nothing_and_set_a_detail, fixture)

#endif
