/* CPU backend: the backend contract (backend_contract.h), then what only the
 * CPU backend does: its options, NUMA binding, pages the kernel really
 * allocates and returns, and the seam's checks of custom backends. */
#include <dirent.h>
#include <stdio.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend_contract.h"
#include "support.h"

/* ---- the contract ---- */

/* Recommended: the default granule (2 MiB); minimum: the page. */
static ortmem_backend *cpu_contract_create(contract_granularity which)
{
    ortmem_cpu_options opt = ORTMEM_CPU_OPTIONS_INIT;
    if (which == CONTRACT_GRANULE_MINIMUM)
        opt.granule = (size_t)sysconf(_SC_PAGESIZE);
    ortmem_backend *b = NULL;
    OK(ortmem_cpu_backend_create(&opt, &b));
    return b;
}

static void cpu_contract_destroy(ortmem_backend *b)
{
    OK(ortmem_backend_destroy(b));
}

static const backend_contract *cpu_contract(void)
{
    static backend_contract c;
    c = (backend_contract){
        .name = "cpu",
        .create = cpu_contract_create,
        .destroy = cpu_contract_destroy,
        .granule_min = (size_t)sysconf(_SC_PAGESIZE),
        .granule_rec = 2 * MiB,
        .host_memory = 1,
    };
    return &c;
}

BACKEND_CONTRACT_TESTS(cpu_backend, *cpu_contract())

/* ---- CPU only ---- */

Test(cpu_backend, default_granule_is_2_mib)
{
    ortmem_backend *b;
    OK(ortmem_cpu_backend_create(NULL, &b));
    size_t g = 0;
    OK(ortmem_backend_granule(b, &g));
    cr_assert_eq(g, 2 * MiB);
    cr_assert_str_eq(ortmem_backend_name(b), "cpu");
    OK(ortmem_backend_destroy(b));
}

Test(cpu_backend, bad_options_are_refused)
{
    ortmem_backend *b = NULL;
    ortmem_cpu_options opt = ORTMEM_CPU_OPTIONS_INIT;
    opt.granule = 3 * 4096;
    EXPECT_STATUS(ortmem_cpu_backend_create(&opt, &b), ORTMEM_E_INVALID);
    opt.granule = 1024; /* below the page */
    EXPECT_STATUS(ortmem_cpu_backend_create(&opt, &b), ORTMEM_E_INVALID);
    opt = (ortmem_cpu_options)ORTMEM_CPU_OPTIONS_INIT;
    opt.struct_size = 0;
    EXPECT_STATUS(ortmem_cpu_backend_create(&opt, &b), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_cpu_backend_create(NULL, NULL), ORTMEM_E_INVALID);
    opt = (ortmem_cpu_options)ORTMEM_CPU_OPTIONS_INIT;
    opt.numa_node = 4096;
    ortmem_status st = ortmem_cpu_backend_create(&opt, &b);
    cr_assert(st == ORTMEM_E_RANGE || st == ORTMEM_E_UNSUPPORTED, "%s", ortmem_status_str(st));
    cr_assert_null(b);
}

Test(cpu_backend, numa_node_zero_binds_when_hwloc_is_present)
{
    ortmem_cpu_options opt = ORTMEM_CPU_OPTIONS_INIT;
    opt.granule = TEST_GRANULE;
    opt.numa_node = 0;
    ortmem_backend *b = NULL;
    ortmem_status st = ortmem_cpu_backend_create(&opt, &b);
    if (st == ORTMEM_E_UNSUPPORTED)
        cr_skip_test("built without hwloc: %s", ortmem_last_error());
    OK(st);
    ortmem_region *r = region_on(b, TEST_GRANULE, 0);
    OK(ortmem_region_commit(r, 0, TEST_GRANULE));
    memset(ortmem_region_base(r), 0xAB, TEST_GRANULE);
    cr_assert_eq(((uint8_t *)ortmem_region_base(r))[TEST_GRANULE - 1], 0xAB);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(b));
}

/* Bytes the kernel really allocated to the backend's shared memfd. */
static long long shared_memfd_allocated_bytes(void)
{
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    long long total = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[300], target[256];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        if (strstr(target, "memfd:ortmem-granules")) {
            struct stat st;
            cr_assert_eq(stat(path, &st), 0);
            total = (long long)st.st_blocks * 512;
        }
    }
    closedir(d);
    return total;
}

Test(cpu_backend, commit_allocates_pages_and_decommit_returns_them_to_the_os)
{
    ortmem_backend *b = cpu_backend_with_granule(2 * MiB);
    ortmem_region *r = region_on(b, 8 * MiB, 0);
    OK(ortmem_region_commit(r, 0, 6 * MiB));
    cr_assert_eq(shared_memfd_allocated_bytes(), 6LL * (long long)MiB);
    OK(ortmem_region_decommit(r, 0, 4 * MiB));
    cr_assert_eq(shared_memfd_allocated_bytes(), 2LL * (long long)MiB);
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.owned_bytes, 2 * MiB);
    cr_assert_eq(s.calls[ORTMEM_OP_RELEASE], 2);
    OK(ortmem_region_destroy(r));
    cr_assert_eq(shared_memfd_allocated_bytes(), 0);
    OK(ortmem_backend_destroy(b));
}

Test(cpu_backend, a_granule_mapped_twice_is_one_physical_page_set)
{
    ortmem_backend *b = test_backend();
    ortmem_region *a = region_on(b, TEST_GRANULE, 0);
    ortmem_region *c = region_on(b, TEST_GRANULE, 0);
    OK(ortmem_region_commit(a, 0, TEST_GRANULE));
    OK(ortmem_region_share(c, 0, a, 0, TEST_GRANULE, ORTMEM_ACCESS_READ_WRITE));
    cr_assert_eq(shared_memfd_allocated_bytes(), (long long)TEST_GRANULE);
    OK(ortmem_region_destroy(c));
    OK(ortmem_region_destroy(a));
    OK(ortmem_backend_destroy(b));
}

static ortmem_status noop_granularity(void *self, size_t *minimum, size_t *recommended)
{
    (void)self;
    *minimum = 4096;
    *recommended = 3000;
    return ORTMEM_OK;
}

Test(cpu_backend, custom_backend_needs_required_slots_and_sane_granularity)
{
    ortmem_backend *b;
    ortmem_backend_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.struct_size = sizeof ops;
    ops.granularity = noop_granularity;
    EXPECT_STATUS(ortmem_backend_create(&ops, NULL, &b), ORTMEM_E_INVALID);
    cr_assert(strstr(ortmem_last_error(), "required slot"), "%s", ortmem_last_error());
    ops.struct_size = 8;
    EXPECT_STATUS(ortmem_backend_create(&ops, NULL, &b), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_backend_create(NULL, NULL, &b), ORTMEM_E_INVALID);
}

Test(cpu_backend, reserving_a_terabyte_of_va_costs_no_memory)
{
    ortmem_backend *b = cpu_backend_with_granule(2 * MiB);
    ortmem_region *r = region_on(b, (size_t)1 << 40, 0);
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.reserved_va_bytes, (uint64_t)1 << 40);
    cr_assert_eq(s.owned_bytes, 0);
    cr_assert_eq((uintptr_t)ortmem_region_base(r) % (2 * MiB), 0);
    /* Commit at the far end. */
    OK(ortmem_region_commit(r, ((size_t)1 << 40) - 1, 1));
    ((volatile uint8_t *)ortmem_region_base(r))[((size_t)1 << 40) - 1] = 7;
    cr_assert_eq(stats_of(b).owned_bytes, 2 * MiB);
    OK(ortmem_region_destroy(r));
    cr_assert_eq(stats_of(b).reserved_va_bytes, 0);
    OK(ortmem_backend_destroy(b));
}
