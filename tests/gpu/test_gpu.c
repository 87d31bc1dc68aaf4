/* The GPU suite: ortmem on the CUDA backend, on a real device.
 *
 * Every test skips, with the reason, when the CUDA backend is unavailable (no
 * driver, no device, built without CUDA headers). With ORTMEM_GPU_FAKE=1 the
 * suite runs against the driver test double in fake_cuda.h instead, which
 * checks the tests' own logic where there is no GPU.
 *
 * Device memory is never touched through host pointers here: bytes go in and
 * out through the backend's copy (cuMemcpy) or raw cuMemcpyHtoD/DtoH. Counts
 * come from the ledger; the only timings are in bench/. */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "../backend_contract.h"
#include "../support.h"
#include "gpu_support.h"

extern char **environ;

#define GiB ((size_t)1 << 30)

/* ---- fixtures ---- */

static ortmem_backend *gpu_backend_with(ortmem_cuda_options o)
{
    ortmem_backend *b = NULL;
    ortmem_status st = gpu_backend_create(o, &b);
    if (st == ORTMEM_E_UNAVAILABLE)
        cr_skip_test("CUDA backend unavailable: %s", ortmem_last_error());
    OK(st);
    return b;
}

static ortmem_backend *gpu_backend(void)
{
    return gpu_backend_with((ortmem_cuda_options)ORTMEM_CUDA_OPTIONS_INIT);
}

static size_t granule_of(ortmem_backend *b)
{
    size_t g = 0;
    OK(ortmem_backend_granule(b, &g));
    return g;
}

static gpu_raw raw_driver(void)
{
    gpu_raw raw;
    char why[256];
    if (gpu_raw_open(&raw, why, sizeof why) != 0)
        cr_skip_test("raw driver entry points unavailable: %s", why);
    return raw;
}

static void assert_ledger_empty(ortmem_backend *b, const char *when)
{
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.owned_bytes, 0, "%s: owned %llu", when, (unsigned long long)s.owned_bytes);
    cr_assert_eq(s.mapped_bytes, 0, "%s: mapped %llu", when, (unsigned long long)s.mapped_bytes);
    cr_assert_eq(s.reserved_va_bytes, 0, "%s: reserved %llu", when,
                 (unsigned long long)s.reserved_va_bytes);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE] + s.calls[ORTMEM_OP_IMPORT], s.calls[ORTMEM_OP_RELEASE],
                 "%s: %llu creates, %llu imports, %llu releases", when,
                 (unsigned long long)s.calls[ORTMEM_OP_CREATE],
                 (unsigned long long)s.calls[ORTMEM_OP_IMPORT],
                 (unsigned long long)s.calls[ORTMEM_OP_RELEASE]);
}

static int matches(ortmem_backend *b, const void *src, size_t len, uint64_t seed)
{
    size_t bad = backend_pattern_mismatch(b, src, len, seed);
    if (bad != len)
        cr_log_error("first mismatch at byte %zu of %zu", bad, len);
    return bad == len;
}

static uint8_t *base_of(ortmem_region *r)
{
    return ortmem_region_base(r);
}

/* ---- the backend contract on the device ----
 * Granularity, reservations, granules, map/unmap runs, READ and READ_WRITE
 * (a copy-engine write into a READ alias is refused and the context
 * survives), aliases, bad input, streams and events, failures:
 * tests/backend_contract.c. */

static ortmem_backend *gpu_contract_create(contract_granularity which)
{
    ortmem_cuda_options o = ORTMEM_CUDA_OPTIONS_INIT;
    if (which == CONTRACT_GRANULE_MINIMUM)
        o.granularity = ORTMEM_CUDA_GRANULE_MINIMUM;
    return gpu_backend_with(o);
}

static void gpu_contract_destroy(ortmem_backend *b)
{
    OK(ortmem_backend_destroy(b));
}

static const backend_contract gpu_contract = {
    .name = "cuda",
    .create = gpu_contract_create,
    .destroy = gpu_contract_destroy,
    .check = NULL,
    .granule_min = 0, /* what the device reports */
    .granule_rec = 0,
    .host_memory = 0,
    .report_prefix = "gpu", /* the suite's log keeps the driver's answers */
};

BACKEND_CONTRACT_TESTS(gpu, gpu_contract)

/* ---- reservation at scale, the seam ---- */

Test(gpu, a_64_gib_reservation)
{
    ortmem_backend *b = gpu_backend();
    size_t g = granule_of(b);
    ortmem_region *r = region_on(b, 64 * GiB, 0);
    cr_assert_eq(ortmem_region_size(r), 64 * GiB);
    cr_assert_eq(stats_of(b).reserved_va_bytes, 64 * GiB);
    cr_assert_eq(stats_of(b).owned_bytes, 0, "reserving commits nothing");
    /* The first and the last granule, 64 GiB apart, both work. */
    OK(ortmem_region_commit(r, 0, g));
    OK(ortmem_region_commit(r, 64 * GiB - g, g));
    backend_put_pattern(b, base_of(r), 4096, 1);
    backend_put_pattern(b, base_of(r) + 64 * GiB - 4096, 4096, 2);
    cr_assert(matches(b, base_of(r), 4096, 1));
    cr_assert(matches(b, base_of(r) + 64 * GiB - 4096, 4096, 2));
    cr_assert_eq(stats_of(b).owned_bytes, 2 * g);
    OK(ortmem_region_destroy(r));
    assert_ledger_empty(b, "after the 64 GiB region");
    OK(ortmem_backend_destroy(b));
}

Test(gpu, a_copy_across_the_seam_between_two_physical_granules)
{
    ortmem_backend *b = gpu_backend();
    gpu_raw raw = raw_driver();
    size_t g = granule_of(b);
    ortmem_region *r = region_on(b, 2 * g, 0);
    OK(ortmem_region_commit(r, 0, 2 * g));
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_CREATE], 2, "two physical granules");

    /* cuMemcpyHtoD of a pattern spanning the boundary... */
    size_t len = 2 * 65536, at = g - 65536;
    uint8_t *src = malloc(len), *dst = malloc(len);
    cr_assert(src && dst);
    for (size_t i = 0; i < len; i++)
        src[i] = pattern_byte(77, i);
    int rc = raw.cuMemcpyHtoD((unsigned long long)(uintptr_t)(base_of(r) + at), src, len);
    cr_assert_eq(rc, 0, "cuMemcpyHtoD: %s", gpu_raw_error(&raw, rc));
    /* ...read back through the backend's copy into a host buffer. */
    memset(dst, 0, len);
    OK(ortmem_backend_copy(b, dst, base_of(r) + at, len));
    cr_assert_eq(memcmp(src, dst, len), 0, "the seam holds the pattern");
    /* And the other way round: the backend writes, the raw driver reads. */
    backend_put_pattern(b, base_of(r) + at, len, 78);
    rc = raw.cuMemcpyDtoH(dst, (unsigned long long)(uintptr_t)(base_of(r) + at), len);
    cr_assert_eq(rc, 0, "cuMemcpyDtoH: %s", gpu_raw_error(&raw, rc));
    for (size_t i = 0; i < len; i++)
        cr_assert_eq(dst[i], pattern_byte(78, i), "byte %zu", i);
    free(src);
    free(dst);
    OK(ortmem_region_destroy(r));
    assert_ledger_empty(b, "after the seam copy");
    OK(ortmem_backend_destroy(b));
}

/* ---- access ---- */

Test(gpu, what_the_driver_says_about_prot_none)
{
    /* ortmem's NONE being ORTMEM_E_UNSUPPORTED, READ and READ_WRITE: the
     * contract (contract_optional_capabilities_work_or_are_unsupported). */
    ortmem_backend *b = gpu_backend();
    gpu_raw raw = raw_driver();
    size_t g = granule_of(b);
    ortmem_region *r = region_on(b, g, 0);
    OK(ortmem_region_commit(r, 0, g));
    backend_put_pattern(b, base_of(r), 4096, 8);

    /* Informational: what cuMemSetAccess(PROT_NONE) does on this driver. */
    fk_access_desc desc = {{1, 0}, 0};
    int rc = raw.cuMemSetAccess((unsigned long long)(uintptr_t)base_of(r), g, &desc, 1);
    uint8_t probe[64];
    int rd = raw.cuMemcpyDtoH(probe, (unsigned long long)(uintptr_t)base_of(r), sizeof probe);
    printf("gpu: raw cuMemSetAccess(PROT_NONE) -> %s; a read after it -> %s\n",
           gpu_raw_error(&raw, rc), gpu_raw_error(&raw, rd));
    cr_log_info("cuMemSetAccess(PROT_NONE) -> %s; read after -> %s", gpu_raw_error(&raw, rc),
                gpu_raw_error(&raw, rd));
    /* The probe may have left the mapping in any state: no verdict on teardown. */
    (void)ortmem_region_destroy(r);
    (void)ortmem_backend_destroy(b);
}

/* ---- sharing ---- */

Test(gpu, eight_sharers_of_one_prefix_own_it_once)
{
    ortmem_backend *b = gpu_backend();
    size_t g = granule_of(b);
    enum { SHARERS = 8, PREFIX = 4 };
    ortmem_region *prefix = region_on(b, PREFIX * g, 0);
    OK(ortmem_region_commit(prefix, 0, PREFIX * g));
    backend_put_pattern(b, base_of(prefix), PREFIX * g, 40);
    ortmem_region *s[SHARERS];
    for (int i = 0; i < SHARERS; i++) {
        s[i] = region_on(b, (PREFIX + 1) * g, 0);
        OK(ortmem_region_share(s[i], 0, prefix, 0, PREFIX * g, ORTMEM_ACCESS_READ));
        OK(ortmem_region_commit(s[i], PREFIX * g, g)); /* a private tail */
        backend_put_pattern(b, base_of(s[i]) + PREFIX * g, 4096, 100 + (uint64_t)i);
    }
    ortmem_vmm_stats st = stats_of(b);
    cr_assert_eq(st.owned_bytes, (PREFIX + SHARERS) * g, "the prefix is owned once");
    cr_assert_eq(st.mapped_bytes, (PREFIX + SHARERS * (PREFIX + 1)) * g, "aliases count again");
    cr_assert_eq(st.calls[ORTMEM_OP_CREATE], PREFIX + SHARERS);
    cr_assert_eq(granule_info(prefix, 0).mappers, SHARERS + 1);
    for (int i = 0; i < SHARERS; i++) {
        cr_assert(matches(b, base_of(s[i]), PREFIX * g, 40), "sharer %d reads the prefix", i);
        cr_assert(matches(b, base_of(s[i]) + PREFIX * g, 4096, 100 + (uint64_t)i));
    }
    /* The prefix's owner goes first: the sharers keep the granules alive. */
    OK(ortmem_region_destroy(prefix));
    cr_assert_eq(stats_of(b).owned_bytes, (PREFIX + SHARERS) * g);
    cr_assert(matches(b, base_of(s[3]), PREFIX * g, 40));
    for (int i = 0; i < SHARERS; i++)
        OK(ortmem_region_destroy(s[i]));
    assert_ledger_empty(b, "after the sharers");
    OK(ortmem_backend_destroy(b));
}

Test(gpu, copy_on_write_on_the_device)
{
    ortmem_backend *b = gpu_backend();
    size_t g = granule_of(b);
    ortmem_region *a = region_on(b, 2 * g, 0), *c = region_on(b, 2 * g, 0);
    OK(ortmem_region_commit(a, 0, 2 * g));
    backend_put_pattern(b, base_of(a), 2 * g, 50);
    OK(ortmem_region_share(c, 0, a, 0, 2 * g, ORTMEM_ACCESS_READ));
    OK(ortmem_region_cow(c, g, 1));
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_COPY] >= 1, 1);
    cr_assert_eq(granule_info(c, g).mappers, 1);
    cr_assert_eq(granule_info(c, 0).mappers, 2, "only the touched granule was copied");
    cr_assert(matches(b, base_of(c), 2 * g, 50));
    backend_put_pattern(b, base_of(c) + g, 4096, 51);
    cr_assert(matches(b, base_of(a), 2 * g, 50), "the original is untouched");
    OK(ortmem_region_destroy(c));
    OK(ortmem_region_destroy(a));
    assert_ledger_empty(b, "after cow");
    OK(ortmem_backend_destroy(b));
}

/* ---- extents: one handle of k granules, mapped whole ---- */

Test(gpu, extent_of_256_granules_round_trip)
{
    ortmem_backend *b = gpu_backend();
    size_t g = granule_of(b);
    enum { K = 256 };
    ortmem_region *a = region_on(b, K * g, 0), *c = region_on(b, K * g, 0);
    ortmem_range extent = {0, K * g};
    OK(ortmem_region_commit_extents(a, &extent, 1));
    ortmem_vmm_stats st = stats_of(b);
    cr_assert_eq(st.calls[ORTMEM_OP_CREATE], 1, "one cuMemCreate of %d granules", K);
    cr_assert_eq(st.calls[ORTMEM_OP_MAP], 1, "one cuMemMap of the whole handle");
    cr_assert_eq(st.calls[ORTMEM_OP_SET_ACCESS], 1);
    cr_assert_eq(st.owned_granules, K);
    cr_assert_eq(st.owned_extents, 1);
    backend_put_pattern(b, base_of(a), K * g, 70);
    cr_assert(matches(b, base_of(a), K * g, 70));
    /* A read-only alias of the whole extent, then the owner's decommit. */
    OK(ortmem_region_share(c, 0, a, 0, K * g, ORTMEM_ACCESS_READ));
    cr_assert_eq(granule_info(c, (K - 1) * g).mappers, 2);
    cr_assert_eq(granule_info(c, (K - 1) * g).extent_granules, K);
    OK(ortmem_region_decommit(a, 0, K * g));
    cr_assert(matches(b, base_of(c), K * g, 70), "the alias keeps the extent alive");
    OK(ortmem_region_destroy(c));
    st = stats_of(b);
    cr_assert_eq(st.calls[ORTMEM_OP_RELEASE], 1);
    cr_assert_eq(st.calls[ORTMEM_OP_UNMAP], 2);
    OK(ortmem_region_destroy(a));
    assert_ledger_empty(b, "after the extent");
    OK(ortmem_backend_destroy(b));
}

Test(gpu, set_access_on_part_of_a_mapping)
{
    /* Informational: ortmem_region_protect works per granule; over an extent
     * it sets access over a granule-aligned part of one cuMemMap. What the
     * driver answers is recorded; protect's rule follows from it
     * (docs/memory/EXTENTS.md). */
    ortmem_backend *b = gpu_backend();
    size_t g = granule_of(b);
    ortmem_region *r = region_on(b, 4 * g, 0);
    ortmem_range extent = {0, 4 * g};
    OK(ortmem_region_commit_extents(r, &extent, 1));
    backend_put_pattern(b, base_of(r), 4 * g, 71);
    ortmem_status st = ortmem_region_protect(r, g, g, ORTMEM_ACCESS_READ);
    printf("gpu: cuMemSetAccess(READ) over granule 1 of a 4-granule mapping -> %s%s%s\n",
           ortmem_status_str(st), st == ORTMEM_OK ? "" : ": ",
           st == ORTMEM_OK ? "" : ortmem_last_error());
    cr_log_info("set-access over part of a mapping -> %s", ortmem_status_str(st));
    if (st == ORTMEM_OK) {
        cr_assert_eq(granule_info(r, g).access, ORTMEM_ACCESS_READ);
        cr_assert_eq(granule_info(r, 0).access, ORTMEM_ACCESS_READ_WRITE);
        cr_assert(matches(b, base_of(r), 4 * g, 71));
    }
    (void)ortmem_region_destroy(r);
    (void)ortmem_backend_destroy(b);
}

/* ---- the foundation's region behaviour on the device ---- */

Test(gpu, region_copy_device_to_device_and_the_pool)
{
    ortmem_backend *b = gpu_backend();
    size_t g = granule_of(b);
    OK(ortmem_pool_set_cap(b, 4 * g));
    ortmem_region *x = region_on(b, 4 * g, 0), *y = region_on(b, 4 * g, 0);
    OK(ortmem_region_commit(x, 0, 4 * g));
    OK(ortmem_region_commit(y, 0, 4 * g));
    backend_put_pattern(b, base_of(x), 4 * g, 70);
    OK(ortmem_region_copy(y, 100, x, 100, 3 * g));
    uint8_t *h = malloc(3 * g);
    cr_assert_not_null(h);
    OK(ortmem_backend_copy(b, h, base_of(y) + 100, 3 * g));
    for (size_t i = 0; i < 3 * g; i += 997)
        cr_assert_eq(h[i], pattern_byte(70, 100 + i), "byte %zu", i);
    free(h);
    /* Granules go to the pool and come back without a create. */
    OK(ortmem_region_decommit(x, 0, 4 * g));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.pool_bytes, 4 * g);
    uint64_t creates = s.calls[ORTMEM_OP_CREATE];
    OK(ortmem_region_commit(x, 0, 4 * g));
    s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE], creates, "served from the pool");
    cr_assert_eq(s.pool_hits, 4);
    OK(ortmem_region_destroy(x));
    OK(ortmem_region_destroy(y));
    size_t released = 0;
    OK(ortmem_pool_trim(b, 0, &released));
    cr_assert_eq(released, 4 * g);
    assert_ledger_empty(b, "after the pool");
    OK(ortmem_backend_destroy(b));
}

Test(gpu, an_arena_on_the_device)
{
    ortmem_backend *b = gpu_backend();
    size_t g = granule_of(b);
    ortmem_arena_options ao = ORTMEM_ARENA_OPTIONS_INIT;
    ao.capacity = 16 * g;
    ortmem_arena *a = NULL;
    OK(ortmem_arena_create(b, &ao, &a));
    void *p[6];
    size_t sizes[6] = {1000, g / 2, g + 17, 256, 3 * g, 4096};
    for (int i = 0; i < 6; i++) {
        OK(ortmem_arena_alloc(a, sizes[i], 0, &p[i]));
        backend_put_pattern(b, p[i], sizes[i], 200 + (uint64_t)i);
    }
    for (int i = 0; i < 6; i++)
        cr_assert(matches(b, p[i], sizes[i], 200 + (uint64_t)i), "allocation %d", i);
    for (int i = 0; i < 6; i += 2)
        OK(ortmem_arena_free(a, p[i]));
    for (int i = 1; i < 6; i += 2)
        cr_assert(matches(b, p[i], sizes[i], 200 + (uint64_t)i), "allocation %d survives", i);
    for (int i = 1; i < 6; i += 2)
        OK(ortmem_arena_free(a, p[i]));
    OK(ortmem_arena_destroy(a, 0));
    assert_ledger_empty(b, "after the arena");
    OK(ortmem_backend_destroy(b));
}

/* ---- injected driver faults ---- */

Test(gpu, release_quarantine_with_injected_driver_faults)
{
    ortmem_backend *cuda = gpu_backend();
    size_t g = granule_of(cuda);
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = ORTMEM_OP_UNMAP;
    fo.fail_at = 1;
    ortmem_backend *f = NULL;
    OK(ortmem_fault_backend_create(cuda, &fo, &f));

    /* A failed unmap: decommit changes nothing, the data is intact. */
    ortmem_region *r = region_on(f, 4 * g, 0);
    OK(ortmem_region_commit(r, 0, 2 * g));
    backend_put_pattern(f, base_of(r), 2 * g, 90);
    EXPECT_STATUS(ortmem_region_decommit(r, 0, 2 * g), ORTMEM_E_BACKEND);
    cr_assert_eq(granule_info(r, g).state, ORTMEM_GRANULE_MAPPED);
    cr_assert(matches(f, base_of(r), 2 * g, 90));
    OK(ortmem_region_decommit(r, 0, 2 * g));

    /* A failed release: quarantined, still owned, never reused. */
    fo.op = ORTMEM_OP_RELEASE;
    OK(ortmem_fault_backend_arm(f, &fo));
    OK(ortmem_region_commit(r, 0, 3 * g));
    EXPECT_STATUS(ortmem_region_destroy(r), ORTMEM_E_QUARANTINED);
    ortmem_vmm_stats s = stats_of(f);
    cr_assert_eq(s.quarantined_granules, 1);
    cr_assert_eq(s.quarantined_bytes, g);
    cr_assert_eq(s.owned_bytes, g);
    cr_assert_eq(s.mapped_bytes, 0);
    cr_assert_eq(s.reserved_va_bytes, 0, "nothing stayed mapped, so the VA went back");
    EXPECT_STATUS(ortmem_backend_destroy(f), ORTMEM_E_QUARANTINED);
    OK(ortmem_backend_destroy(cuda));
}

/* One scripted workload over a fault backend; returns how many steps failed. */
static int fault_workload(ortmem_backend *f, size_t g, int *corrupt)
{
    int failures = 0;
    ortmem_region *r = NULL, *alias = NULL;
    ortmem_region_options ro = ORTMEM_REGION_OPTIONS_INIT;
    ro.size = 6 * g;
    if (ortmem_region_create(f, &ro, &r) != ORTMEM_OK)
        return 1;
    if (ortmem_region_create(f, &ro, &alias) != ORTMEM_OK) {
        failures++;
        alias = NULL;
    }
    int written = 0;
    if (ortmem_region_commit(r, 0, 3 * g) == ORTMEM_OK) {
        uint8_t *tmp = malloc(3 * g);
        for (size_t i = 0; i < 3 * g; i++)
            tmp[i] = pattern_byte(123, i);
        if (ortmem_backend_copy(f, base_of(r), tmp, 3 * g) == ORTMEM_OK)
            written = 1;
        else
            failures++;
        free(tmp);
    } else {
        failures++;
    }
    if (alias && written) {
        if (ortmem_region_share(alias, 0, r, 0, 2 * g, ORTMEM_ACCESS_READ) != ORTMEM_OK)
            failures++;
        else if (ortmem_region_cow(alias, 0, g) != ORTMEM_OK)
            failures++;
    }
    if (ortmem_region_decommit(r, 2 * g, g) != ORTMEM_OK)
        failures++;
    ortmem_range rr[] = {{3 * g, g}, {5 * g, g}};
    if (ortmem_region_commit_ranges(r, rr, 2) != ORTMEM_OK)
        failures++;
    if (written) {
        /* Whatever failed, the bytes that stayed mapped are intact. */
        uint8_t *tmp = malloc(2 * g);
        if (granule_info(r, 0).state == ORTMEM_GRANULE_MAPPED &&
            granule_info(r, g).state == ORTMEM_GRANULE_MAPPED) {
            if (ortmem_backend_copy(f, tmp, base_of(r), 2 * g) != ORTMEM_OK) {
                failures++;
            } else {
                for (size_t i = 0; i < 2 * g; i++)
                    if (tmp[i] != pattern_byte(123, i)) {
                        (*corrupt)++;
                        break;
                    }
            }
        }
        free(tmp);
    }
    if (alias && ortmem_region_destroy(alias) != ORTMEM_OK)
        failures++;
    if (ortmem_region_destroy(r) != ORTMEM_OK)
        failures++;
    return failures;
}

Test(gpu, fault_injection_sweep_on_the_device)
{
    ortmem_backend *cuda = gpu_backend();
    size_t g = granule_of(cuda);
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    ortmem_backend *clean = NULL;
    OK(ortmem_fault_backend_create(cuda, &fo, &clean));
    int corrupt = 0;
    cr_assert_eq(fault_workload(clean, g, &corrupt), 0, "clean run: %s", ortmem_last_error());
    uint64_t total = 0;
    OK(ortmem_fault_backend_counts(clean, &total, NULL));
    assert_ledger_empty(clean, "clean run");
    OK(ortmem_backend_destroy(clean));
    cr_assert_gt(total, 20);
    printf("gpu: fault sweep over %llu driver calls\n", (unsigned long long)total);

    int quarantining = 0;
    for (uint64_t n = 1; n <= total; n++) {
        fo.fail_at = n;
        ortmem_backend *f = NULL;
        OK(ortmem_fault_backend_create(cuda, &fo, &f));
        corrupt = 0;
        int failures = fault_workload(f, g, &corrupt);
        uint64_t injected = 0;
        OK(ortmem_fault_backend_counts(f, NULL, &injected));
        cr_assert_eq(injected, 1, "call %llu was reached", (unsigned long long)n);
        cr_assert_gt(failures, 0, "call %llu: the failure was reported", (unsigned long long)n);
        cr_assert_eq(corrupt, 0, "call %llu: data corrupted", (unsigned long long)n);
        ortmem_vmm_stats s = stats_of(f);
        cr_assert_eq(s.owned_bytes, s.quarantined_bytes, "call %llu: owned %llu, quarantined %llu",
                     (unsigned long long)n, (unsigned long long)s.owned_bytes,
                     (unsigned long long)s.quarantined_bytes);
        cr_assert_eq(s.mapped_bytes, s.quarantined_mapped_bytes, "call %llu",
                     (unsigned long long)n);
        quarantining += s.quarantined_bytes > 0;
        (void)ortmem_backend_destroy(f);
    }
    printf("gpu: %d of %llu injected faults left quarantined granules\n", quarantining,
           (unsigned long long)total);
    OK(ortmem_backend_destroy(cuda));
}

/* ---- streams and events ---- */

/* ---- KV cache ---- */

static ortmem_kv_cache_options kv_options(ortmem_kv_strategy strategy, uint64_t max_context)
{
    ortmem_kv_cache_options o = ORTMEM_KV_CACHE_OPTIONS_INIT;
    o.geometry.layers = 4;
    o.geometry.kv_heads = 2;
    o.geometry.head_dim = 128;
    o.geometry.dtype = ORTMEM_KV_F16;
    o.geometry.layout = ORTMEM_KV_HEAD_MAJOR;
    o.strategy = strategy;
    o.max_context = max_context;
    return o;
}

static ortmem_kv_binding binding_of(ortmem_kv_seq *s, uint32_t layer, int value)
{
    ortmem_kv_binding bind;
    memset(&bind, 0, sizeof bind);
    bind.struct_size = sizeof bind;
    OK(ortmem_kv_seq_binding(s, layer, value, &bind));
    return bind;
}

static ortmem_kv_stats kv_stats_of(ortmem_kv_cache *c)
{
    ortmem_kv_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    OK(ortmem_kv_cache_stats(c, &st));
    return st;
}

Test(gpu, kv_cache_stable_growth_keeps_pointers_and_commits_the_geometry)
{
    ortmem_backend *b = gpu_backend();
    size_t g = granule_of(b);
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = 8 * GiB;
    ortmem_authority *a = NULL;
    OK(ortmem_authority_create(b, &ao, &a));
    ortmem_kv_cache_options o = kv_options(ORTMEM_KV_STABLE, 32768);
    /* Compared with ortmem_kv_evaluate's per-granule windows: the per-granule
     * policy (the geometric default is checked against its model by
     * gpu_kv_growth_batch1_* in bench/gpu_bench.cpp and tests/test_kv_extents.c). */
    o.extents.growth = ORTMEM_EXTENT_GRANULE;
    ortmem_kv_cache *c = NULL;
    OK(ortmem_kv_cache_create(a, &o, &c));
    o.geometry.granule = g;
    ortmem_kv_seq *s = NULL;
    OK(ortmem_kv_seq_create(c, &s));
    static const uint64_t steps[] = {1, 17, 1000, 4096, 8191, 8192, 8193, 20000, 32768};
    ortmem_kv_binding first = {0};
    uint64_t len = 0;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        OK(ortmem_kv_seq_append(s, steps[i] - len));
        len = steps[i];
        ortmem_kv_binding k = binding_of(s, 3, 1);
        if (i == 0) {
            first = k;
            /* The first token's row is live device memory. */
            backend_put_pattern(b, k.base, 256, 300);
        }
        cr_assert_eq(k.base, first.base, "n %llu: pointers never move", (unsigned long long)len);
        cr_assert_eq(k.generation, first.generation);
        ortmem_kv_eval e;
        memset(&e, 0, sizeof e);
        e.struct_size = sizeof e;
        OK(ortmem_kv_evaluate(&o.geometry, len, o.max_context, 1, 0, 0, &e));
        ortmem_kv_stats st = kv_stats_of(c);
        cr_assert_eq(st.committed_bytes, e.committed_bytes, "n %llu: committed %llu, geometry %llu",
                     (unsigned long long)len, (unsigned long long)st.committed_bytes,
                     (unsigned long long)e.committed_bytes);
        cr_assert(matches(b, first.base, 256, 300), "n %llu: earlier tokens kept",
                  (unsigned long long)len);
    }
    OK(ortmem_kv_seq_destroy(s));
    OK(ortmem_kv_cache_destroy(c));
    OK(ortmem_authority_destroy(a));
    assert_ledger_empty(b, "after the KV cache");
    OK(ortmem_backend_destroy(b));
}

Test(gpu, kv_cache_bucket_growth_copies_on_the_device)
{
    ortmem_backend *b = gpu_backend();
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = 8 * GiB;
    ortmem_authority *a = NULL;
    OK(ortmem_authority_create(b, &ao, &a));
    ortmem_kv_cache_options o = kv_options(ORTMEM_KV_BUCKET, 32768);
    ortmem_kv_cache *c = NULL;
    OK(ortmem_kv_cache_create(a, &o, &c));
    ortmem_kv_seq *s = NULL;
    OK(ortmem_kv_seq_create(c, &s));
    OK(ortmem_kv_seq_append(s, 200));
    ortmem_kv_binding before = binding_of(s, 0, 0);
    size_t row = (size_t)before.token_stride * 200;
    backend_put_pattern(b, before.base, row, 310);
    ortmem_vmm_stats ops0 = stats_of(b);
    OK(ortmem_kv_seq_append(s, 5000));
    ortmem_vmm_stats ops1 = stats_of(b);
    cr_assert_gt(ops1.calls[ORTMEM_OP_COPY_ASYNC], ops0.calls[ORTMEM_OP_COPY_ASYNC],
                 "the live prefix moves as async copies on the cache's stream");
    cr_assert_eq(ops1.calls[ORTMEM_OP_EVENT_RECORD], ops0.calls[ORTMEM_OP_EVENT_RECORD] + 1);
    cr_assert_eq(ops1.calls[ORTMEM_OP_EVENT_DESTROY], ops0.calls[ORTMEM_OP_EVENT_DESTROY] + 1);
    ortmem_kv_binding after = binding_of(s, 0, 0);
    cr_assert_neq(after.generation, before.generation, "bucket growth bumps the generation");
    cr_assert(matches(b, after.base, row, 310), "the live tokens moved with the bucket");
    cr_assert_geq(kv_stats_of(c).generations_bumped, 1);
    OK(ortmem_kv_seq_destroy(s));
    OK(ortmem_kv_cache_destroy(c));
    OK(ortmem_authority_destroy(a));
    assert_ledger_empty(b, "after the bucket cache");
    OK(ortmem_backend_destroy(b));
}

Test(gpu, kv_cache_zero_tail_on_the_device)
{
    /* The zero tail is one read-only granule of zeros shared over the
     * uncommitted tail. Its zeros must be written on the device. */
    ortmem_backend *b = gpu_backend();
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = 8 * GiB;
    ortmem_authority *a = NULL;
    OK(ortmem_authority_create(b, &ao, &a));
    ortmem_kv_cache_options o = kv_options(ORTMEM_KV_STABLE, 32768);
    o.zero_tail = 1;
    ortmem_kv_cache *c = NULL;
    OK(ortmem_kv_cache_create(a, &o, &c));
    ortmem_kv_seq *s = NULL;
    OK(ortmem_kv_seq_create(c, &s));
    OK(ortmem_kv_seq_append(s, 10));
    ortmem_kv_binding k = binding_of(s, 0, 0);
    /* Far past the live tokens: the tail reads zeros. */
    uint8_t tail[4096];
    memset(tail, 0xCC, sizeof tail);
    OK(ortmem_backend_copy(b, tail, (uint8_t *)k.base + k.token_stride * 30000, sizeof tail));
    for (size_t i = 0; i < sizeof tail; i++)
        cr_assert_eq(tail[i], 0, "byte %zu of the zero tail", i);
    OK(ortmem_kv_seq_destroy(s));
    OK(ortmem_kv_cache_destroy(c));
    OK(ortmem_authority_destroy(a));
    OK(ortmem_backend_destroy(b));
}

/* ---- process fault isolation ---- */

Test(gpu, an_imported_granule_survives_the_exporter_faulting)
{
    const char *exporter = getenv("ORTMEM_GPU_IPC_EXPORTER");
    if (!exporter)
        cr_skip_test("ORTMEM_GPU_IPC_EXPORTER is not set (meson test sets it)");
    ortmem_backend *b = gpu_backend();
    size_t g = granule_of(b);
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    char fdarg[16];
    snprintf(fdarg, sizeof fdarg, "%d", sv[1]);
    char *argv[] = {(char *)exporter, fdarg, NULL};
    pid_t pid;
    /* A new program (exec), never a fork of a process with a live context. */
    cr_assert_eq(posix_spawn(&pid, exporter, NULL, NULL, argv, environ), 0);
    close(sv[1]);
    int fd = -1;
    ortmem_status st = ortmem_fd_recv(sv[0], &fd);
    if (st != ORTMEM_OK) {
        int wst = 0;
        waitpid(pid, &wst, 0);
        cr_assert_fail("no descriptor from the exporter (exit status 0x%x): %s", wst,
                       ortmem_last_error());
    }
    ortmem_region *r = region_on(b, g, 0);
    OK(ortmem_region_import(r, 0, fd, ORTMEM_ACCESS_READ_WRITE));
    close(fd);
    cr_assert(matches(b, base_of(r), g, 500), "the exporter's bytes");
    /* Tell the exporter to fault, and wait for it to die of it. */
    char go = 'x';
    cr_assert_eq(write(sv[0], &go, 1), 1);
    int wst = 0;
    cr_assert_eq(waitpid(pid, &wst, 0), pid);
    cr_assert(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGSEGV, "the exporter faulted (status 0x%x)",
              wst);
    close(sv[0]);
    cr_assert(matches(b, base_of(r), g, 500), "the granule outlived its exporter");
    backend_put_pattern(b, base_of(r), g, 501);
    cr_assert(matches(b, base_of(r), g, 501), "and is still writable");
    OK(ortmem_region_destroy(r));
    assert_ledger_empty(b, "after the import");
    OK(ortmem_backend_destroy(b));
}
