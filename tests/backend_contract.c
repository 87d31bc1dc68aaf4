/* The backend contract's scenarios (see backend_contract.h). Public API only. */
#include "backend_contract.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "support.h"

/* ---- helpers ---- */

static void run_check(const backend_contract *c, ortmem_backend *b, const char *when)
{
    if (c->check)
        c->check(b, when);
}

/* What the backend answered where the contract allows more than one answer:
 * logged, and printed as "<report_prefix>: ..." where the fixture asks. */
static void finding(const backend_contract *c, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    cr_log_info("%s", line);
    if (c->report_prefix) {
        printf("%s: %s\n", c->report_prefix, line);
        fflush(stdout);
    }
}

static size_t granule_of(ortmem_backend *b)
{
    size_t g = 0;
    OK(ortmem_backend_granule(b, &g));
    return g;
}

static uint8_t *base_of(ortmem_region *r)
{
    return ortmem_region_base(r);
}

static ortmem_region *region_aligned(ortmem_backend *b, size_t size, size_t alignment)
{
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    opt.size = size;
    opt.alignment = alignment;
    ortmem_region *r = NULL;
    OK(ortmem_region_create(b, &opt, &r));
    return r;
}

/* Writes the pattern through the backend's copy, or through the pointer where
 * the backend has no copy and the memory is the host's. */
static void put(const backend_contract *c, ortmem_backend *b, void *dst, size_t len, uint64_t seed)
{
    uint8_t *tmp = malloc(len);
    cr_assert_not_null(tmp);
    for (size_t i = 0; i < len; i++)
        tmp[i] = pattern_byte(seed, i);
    ortmem_status st = ortmem_backend_copy(b, dst, tmp, len);
    if (st == ORTMEM_E_UNSUPPORTED && c->host_memory)
        memcpy(dst, tmp, len);
    else
        cr_assert_eq(st, ORTMEM_OK, "copy of %zu bytes in: %s", len, ortmem_last_error());
    free(tmp);
}

/* Checks the pattern through the backend's copy and, on host memory, through
 * the pointer too (the mapping itself holds the bytes). */
static void expect_bytes(const backend_contract *c, ortmem_backend *b, const void *src, size_t len,
                         uint64_t seed, const char *what)
{
    uint8_t *tmp = malloc(len);
    cr_assert_not_null(tmp);
    ortmem_status st = ortmem_backend_copy(b, tmp, src, len);
    if (st == ORTMEM_E_UNSUPPORTED && c->host_memory)
        memcpy(tmp, src, len);
    else
        cr_assert_eq(st, ORTMEM_OK, "%s: copy of %zu bytes out: %s", what, len,
                     ortmem_last_error());
    size_t bad = len;
    for (size_t i = 0; i < len && bad == len; i++)
        if (tmp[i] != pattern_byte(seed, i))
            bad = i;
    free(tmp);
    cr_assert_eq(bad, len, "%s: byte %zu of %zu differs from pattern %llu", what, bad, len,
                 (unsigned long long)seed);
    if (c->host_memory) {
        const volatile uint8_t *p = src;
        for (size_t i = 0; i < len && bad == len; i++)
            if (p[i] != pattern_byte(seed, i))
                bad = i;
        cr_assert_eq(bad, len, "%s: byte %zu read through the pointer differs", what, bad);
    }
}

/* The kernel reads (write(2) from the page) or writes (read(2) into it) 64
 * bytes at p: 0 when it could, else the errno (EFAULT without access). */
static int kernel_access(void *p, int writing)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    uint8_t junk[64];
    memset(junk, 0xEE, sizeof junk);
    int err = 0;
    if (writing) {
        cr_assert_eq(write(fds[1], junk, sizeof junk), (ssize_t)sizeof junk);
        if (read(fds[0], p, sizeof junk) != (ssize_t)sizeof junk)
            err = errno;
    } else if (write(fds[1], p, sizeof junk) != (ssize_t)sizeof junk) {
        err = errno;
    }
    close(fds[0]);
    close(fds[1]);
    return err;
}

/* A write into a read-only mapping is refused: by the MMU on host memory (the
 * kernel's own write is EFAULT), by the backend's copy with a status and a
 * detail on device memory. Either way the bytes stay. */
static void expect_write_refused(const backend_contract *c, ortmem_backend *b, void *ro,
                                 const char *what)
{
    if (c->host_memory) {
        cr_assert_eq(kernel_access(ro, 1), EFAULT, "%s: the kernel could write a READ page", what);
        cr_assert_eq(kernel_access(ro, 0), 0, "%s: the kernel cannot read a READ page", what);
        return;
    }
    ortmem_vmm_stats s0 = stats_of(b);
    uint8_t junk[4096];
    memset(junk, 0xEE, sizeof junk);
    ortmem_status st = ortmem_backend_copy(b, ro, junk, sizeof junk);
    finding(c, "%s: a copy into a read-only mapping -> %s: %s", what, ortmem_status_str(st),
            ortmem_last_error());
    cr_assert_neq(st, ORTMEM_OK, "%s: a copy into a READ mapping is refused", what);
    cr_assert_neq(ortmem_last_error()[0], '\0', "%s: the refusal has a detail", what);
    ortmem_vmm_stats s1 = stats_of(b);
    cr_assert_eq(s1.failures[ORTMEM_OP_COPY], s0.failures[ORTMEM_OP_COPY] + 1);
    cr_assert_eq(s1.owned_bytes, s0.owned_bytes);
    cr_assert_eq(s1.mapped_bytes, s0.mapped_bytes);
}

/* The byte axes of the ledger are where they were. */
static void same_bytes(const ortmem_vmm_stats *want, const ortmem_vmm_stats *got, const char *when)
{
    cr_assert_eq(got->owned_bytes, want->owned_bytes, "%s: owned %llu, was %llu", when,
                 (unsigned long long)got->owned_bytes, (unsigned long long)want->owned_bytes);
    cr_assert_eq(got->mapped_bytes, want->mapped_bytes, "%s: mapped %llu, was %llu", when,
                 (unsigned long long)got->mapped_bytes, (unsigned long long)want->mapped_bytes);
    cr_assert_eq(got->owned_granules, want->owned_granules, "%s", when);
    cr_assert_eq(got->mapped_granules, want->mapped_granules, "%s", when);
    cr_assert_eq(got->reserved_va_bytes, want->reserved_va_bytes, "%s: reserved %llu, was %llu",
                 when, (unsigned long long)got->reserved_va_bytes,
                 (unsigned long long)want->reserved_va_bytes);
    cr_assert_eq(got->quarantined_bytes, want->quarantined_bytes, "%s", when);
}

/* Nothing reached the backend: every call and failure counter is unchanged. */
static void no_backend_call(const ortmem_vmm_stats *want, const ortmem_vmm_stats *got,
                            const char *when)
{
    for (int op = 0; op < ORTMEM_OP_COUNT; op++) {
        cr_assert_eq(got->calls[op], want->calls[op], "%s: %llu %s calls, was %llu", when,
                     (unsigned long long)got->calls[op], ortmem_backend_op_name(op),
                     (unsigned long long)want->calls[op]);
        cr_assert_eq(got->failures[op], want->failures[op], "%s: %s failures", when,
                     ortmem_backend_op_name(op));
    }
}

static uint64_t all_failures(const ortmem_vmm_stats *s)
{
    uint64_t n = 0;
    for (int op = 0; op < ORTMEM_OP_COUNT; op++)
        n += s->failures[op];
    return n;
}

/* After a teardown: nothing owned, mapped or reserved, every granule created
 * or imported was released. */
static void ledger_empty(ortmem_backend *b, const char *when)
{
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.owned_bytes, 0, "%s: owned %llu", when, (unsigned long long)s.owned_bytes);
    cr_assert_eq(s.mapped_bytes, 0, "%s: mapped %llu", when, (unsigned long long)s.mapped_bytes);
    cr_assert_eq(s.reserved_va_bytes, 0, "%s: reserved %llu", when,
                 (unsigned long long)s.reserved_va_bytes);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE] + s.calls[ORTMEM_OP_IMPORT] -
                     s.failures[ORTMEM_OP_CREATE] - s.failures[ORTMEM_OP_IMPORT],
                 s.calls[ORTMEM_OP_RELEASE] - s.failures[ORTMEM_OP_RELEASE],
                 "%s: %llu creates, %llu imports, %llu releases", when,
                 (unsigned long long)s.calls[ORTMEM_OP_CREATE],
                 (unsigned long long)s.calls[ORTMEM_OP_IMPORT],
                 (unsigned long long)s.calls[ORTMEM_OP_RELEASE]);
    cr_assert_eq(s.calls[ORTMEM_OP_RESERVE] - s.failures[ORTMEM_OP_RESERVE],
                 s.calls[ORTMEM_OP_UNRESERVE] - s.failures[ORTMEM_OP_UNRESERVE],
                 "%s: every reservation returned", when);
}

/* ---- granularity ---- */

void contract_granularity_minimum_and_recommended(const backend_contract *c)
{
    size_t g[2] = {0, 0};
    for (int which = CONTRACT_GRANULE_RECOMMENDED; which <= CONTRACT_GRANULE_MINIMUM; which++) {
        const char *what = which == CONTRACT_GRANULE_MINIMUM ? "minimum" : "recommended";
        size_t want = which == CONTRACT_GRANULE_MINIMUM ? c->granule_min : c->granule_rec;
        ortmem_backend *b = c->create((contract_granularity)which);
        cr_assert_str_eq(ortmem_backend_name(b), c->name);
        g[which] = granule_of(b);
        cr_assert(g[which] && !(g[which] & (g[which] - 1)), "%s granule %zu is a power of two",
                  what, g[which]);
        if (want)
            cr_assert_eq(g[which], want, "%s granule %zu, expected %zu", what, g[which], want);
        /* A region of one byte is one granule, and one commit creates,
         * maps and opens exactly that granule. */
        ortmem_region *r = region_on(b, 1, 0);
        cr_assert_eq(ortmem_region_size(r), g[which]);
        cr_assert_eq(ortmem_region_granule(r), g[which]);
        cr_assert_eq((uintptr_t)ortmem_region_base(r) % g[which], 0);
        OK(ortmem_region_commit(r, 0, 1));
        ortmem_vmm_stats s = stats_of(b);
        cr_assert_eq(s.calls[ORTMEM_OP_CREATE], 1);
        cr_assert_eq(s.calls[ORTMEM_OP_MAP], 1);
        cr_assert_eq(s.calls[ORTMEM_OP_SET_ACCESS], 1);
        cr_assert_eq(s.owned_bytes, g[which], "%s: the granule is the unit of memory", what);
        cr_assert_eq(s.mapped_bytes, g[which]);
        put(c, b, ortmem_region_base(r), g[which], 1 + (uint64_t)which);
        expect_bytes(c, b, ortmem_region_base(r), g[which], 1 + (uint64_t)which, what);
        run_check(c, b, what);
        OK(ortmem_region_destroy(r));
        ledger_empty(b, what);
        run_check(c, b, what);
        c->destroy(b);
    }
    finding(c, "%s: granularity minimum %zu, recommended %zu", c->name, g[1], g[0]);
    cr_assert_geq(g[0], g[1], "recommended %zu >= minimum %zu", g[0], g[1]);
    cr_assert_eq(g[0] % g[1], 0);
}

/* ---- reservations ---- */

void contract_reserve_aligns_and_unreserve_returns_the_va(const backend_contract *c)
{
    ortmem_backend *b = c->create(CONTRACT_GRANULE_RECOMMENDED);
    size_t g = granule_of(b);
    enum { N = 4 };
    size_t aligns[N] = {0, 2 * g, 8 * g, 64 * g}; /* 0: the granule */
    ortmem_region *r[N];
    for (int i = 0; i < N; i++) {
        ortmem_vmm_stats s0 = stats_of(b);
        r[i] = region_aligned(b, 3 * g + 1, aligns[i]);
        size_t align = aligns[i] ? aligns[i] : g;
        cr_assert_eq((uintptr_t)base_of(r[i]) % align, 0, "base %p, alignment %zu",
                     (void *)base_of(r[i]), align);
        cr_assert_eq(ortmem_region_size(r[i]), 4 * g, "rounded up to whole granules");
        ortmem_vmm_stats s1 = stats_of(b);
        cr_assert_eq(s1.calls[ORTMEM_OP_RESERVE], s0.calls[ORTMEM_OP_RESERVE] + 1);
        cr_assert_eq(s1.reserved_va_bytes, s0.reserved_va_bytes + 4 * g);
        cr_assert_eq(s1.owned_bytes, 0, "reserving commits nothing");
        cr_assert_eq(s1.mapped_bytes, 0);
        cr_assert_eq(s1.calls[ORTMEM_OP_CREATE] + s1.calls[ORTMEM_OP_MAP], 0);
    }
    /* The reservations are disjoint. */
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++) {
            uintptr_t a = (uintptr_t)base_of(r[i]), z = (uintptr_t)base_of(r[j]);
            cr_assert(a + 4 * g <= z || z + 4 * g <= a, "regions %d and %d overlap", i, j);
        }
    /* Each is usable at both ends. */
    for (int i = 0; i < N; i++) {
        OK(ortmem_region_commit(r[i], 0, 1));
        OK(ortmem_region_commit(r[i], 4 * g - 1, 1));
        put(c, b, base_of(r[i]) + 4 * g - 256, 256, 10 + (uint64_t)i);
        expect_bytes(c, b, base_of(r[i]) + 4 * g - 256, 256, 10 + (uint64_t)i, "the far end");
    }
    run_check(c, b, "four reservations");
    for (int i = 0; i < N; i++) {
        ortmem_vmm_stats s0 = stats_of(b);
        OK(ortmem_region_destroy(r[i]));
        ortmem_vmm_stats s1 = stats_of(b);
        cr_assert_eq(s1.calls[ORTMEM_OP_UNRESERVE], s0.calls[ORTMEM_OP_UNRESERVE] + 1);
        cr_assert_eq(s1.reserved_va_bytes, s0.reserved_va_bytes - 4 * g);
    }
    ledger_empty(b, "after the reservations");
    run_check(c, b, "after the reservations");
    c->destroy(b);
}

/* ---- physical granules ---- */

void contract_create_and_release_physical_granules(const backend_contract *c)
{
    ortmem_backend *b = c->create(CONTRACT_GRANULE_RECOMMENDED);
    size_t g = granule_of(b);
    ortmem_region *r = region_on(b, 4 * g, 0);
    ortmem_vmm_stats s0 = stats_of(b);
    OK(ortmem_region_commit(r, 0, 3 * g));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE], s0.calls[ORTMEM_OP_CREATE] + 3);
    cr_assert_eq(s.owned_bytes, 3 * g);
    cr_assert_eq(s.owned_granules, 3);
    cr_assert_eq(s.mapped_bytes, 3 * g);
    cr_assert_eq(s.mapped_granules, 3);
    cr_assert_eq(s.reserved_va_bytes, s0.reserved_va_bytes, "commit reserves nothing more");
    cr_assert_eq(all_failures(&s), 0);
    for (size_t k = 0; k < 3; k++)
        put(c, b, base_of(r) + k * g, g, 20 + k);
    run_check(c, b, "three granules");

    /* Releasing the middle one leaves its neighbours' bytes alone. */
    OK(ortmem_region_decommit(r, g, g));
    s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_RELEASE], s0.calls[ORTMEM_OP_RELEASE] + 1);
    cr_assert_eq(s.calls[ORTMEM_OP_UNMAP], s0.calls[ORTMEM_OP_UNMAP] + 1);
    cr_assert_eq(s.owned_bytes, 2 * g);
    cr_assert_eq(s.owned_granules, 2);
    cr_assert_eq(s.mapped_bytes, 2 * g);
    cr_assert_eq(granule_info(r, g).state, ORTMEM_GRANULE_UNMAPPED);
    expect_bytes(c, b, base_of(r), g, 20, "granule 0 after its neighbour went");
    expect_bytes(c, b, base_of(r) + 2 * g, g, 22, "granule 2 after its neighbour went");
    run_check(c, b, "after a release");

    /* A new granule in its place (no pool: a create). */
    OK(ortmem_region_commit(r, g, g));
    s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE], s0.calls[ORTMEM_OP_CREATE] + 4);
    cr_assert_eq(s.owned_bytes, 3 * g);
    put(c, b, base_of(r) + g, g, 23);
    expect_bytes(c, b, base_of(r) + g, g, 23, "the new granule");
    OK(ortmem_region_destroy(r));
    s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_RELEASE], s.calls[ORTMEM_OP_CREATE]);
    cr_assert_eq(s.owned_granules, 0);
    ledger_empty(b, "after the granules");
    run_check(c, b, "after the granules");
    c->destroy(b);
}

/* Extents of 1, 2 and 8 granules: one create and one map of the whole handle
 * each, one set-access over the contiguous run, one unmap over it, one
 * release each; the bytes of every extent are its own. */
void contract_extents_are_created_mapped_and_released_whole(const backend_contract *c)
{
    ortmem_backend *b = c->create(CONTRACT_GRANULE_RECOMMENDED);
    size_t g = granule_of(b);
    ortmem_region *r = region_on(b, 12 * g, 0);
    ortmem_vmm_stats s0 = stats_of(b);
    ortmem_range ext[3] = {{0, g}, {g, 2 * g}, {3 * g, 8 * g}};
    OK(ortmem_region_commit_extents(r, ext, 3));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE] - s0.calls[ORTMEM_OP_CREATE], 3);
    cr_assert_eq(s.calls[ORTMEM_OP_MAP] - s0.calls[ORTMEM_OP_MAP], 3);
    cr_assert_eq(s.calls[ORTMEM_OP_SET_ACCESS] - s0.calls[ORTMEM_OP_SET_ACCESS], 1);
    cr_assert_eq(s.owned_bytes, 11 * g);
    cr_assert_eq(s.owned_granules, 11);
    cr_assert_eq(s.owned_extents, 3);
    cr_assert_eq(s.mapped_extents, 3);
    cr_assert_eq(all_failures(&s), 0);
    for (size_t e = 0; e < 3; e++)
        put(c, b, base_of(r) + ext[e].offset, ext[e].length, 60 + e);
    run_check(c, b, "three extents");
    for (size_t e = 0; e < 3; e++)
        expect_bytes(c, b, base_of(r) + ext[e].offset, ext[e].length, 60 + e, "an extent");
    OK(ortmem_region_decommit(r, 0, 12 * g));
    s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_UNMAP] - s0.calls[ORTMEM_OP_UNMAP], 1, "one unmap of the run");
    cr_assert_eq(s.calls[ORTMEM_OP_RELEASE] - s0.calls[ORTMEM_OP_RELEASE], 3);
    cr_assert_eq(s.owned_extents, 0);
    cr_assert_eq(all_failures(&s), 0);
    OK(ortmem_region_destroy(r));
    ledger_empty(b, "after the extents");
    run_check(c, b, "after the extents");
    c->destroy(b);
}

/* ---- map and unmap ---- */

void contract_map_and_unmap_runs_and_unmap_keeps_the_va(const backend_contract *c)
{
    ortmem_backend *b = c->create(CONTRACT_GRANULE_RECOMMENDED);
    size_t g = granule_of(b);
    ortmem_region *r = region_on(b, 16 * g, 0);
    uint8_t *base = base_of(r);
    ortmem_range ranges[] = {{0, 2 * g}, {2 * g, 1}, {8 * g, 3 * g}, {15 * g, g}};
    OK(ortmem_region_commit_ranges(r, ranges, 4));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE], 7);
    cr_assert_eq(s.calls[ORTMEM_OP_MAP], 7);
    cr_assert_eq(s.calls[ORTMEM_OP_SET_ACCESS], 3, "one set-access per contiguous run");
    cr_assert_eq(s.mapped_bytes, 7 * g);
    for (size_t k = 0; k < 16; k++) {
        bool mapped = k < 3 || (k >= 8 && k < 11) || k == 15;
        ortmem_granule_info info = granule_info(r, k * g);
        cr_assert_eq(info.state, mapped ? ORTMEM_GRANULE_MAPPED : ORTMEM_GRANULE_UNMAPPED,
                     "granule %zu", k);
        if (mapped)
            cr_assert_eq(info.access, ORTMEM_ACCESS_READ_WRITE, "granule %zu", k);
    }
    /* Patterns across the seams between the granules of each run. */
    put(c, b, base, 3 * g, 60);
    put(c, b, base + 8 * g, 3 * g, 61);
    put(c, b, base + 15 * g, g, 62);
    expect_bytes(c, b, base, 3 * g, 60, "run 0-2");
    expect_bytes(c, b, base + 8 * g, 3 * g, 61, "run 8-10");
    run_check(c, b, "three runs mapped");

    ortmem_range out[] = {{0, 3 * g}, {8 * g, 3 * g}};
    OK(ortmem_region_decommit_ranges(r, out, 2));
    s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_UNMAP], 2, "one unmap per contiguous run");
    cr_assert_eq(s.calls[ORTMEM_OP_RELEASE], 6);
    cr_assert_eq(s.owned_bytes, g);
    cr_assert_eq(s.mapped_bytes, g);
    cr_assert_eq(granule_info(r, 15 * g).state, ORTMEM_GRANULE_MAPPED);
    cr_assert_eq(granule_info(r, 0).state, ORTMEM_GRANULE_UNMAPPED);
    cr_assert_eq(granule_info(r, 9 * g).state, ORTMEM_GRANULE_UNMAPPED);
    expect_bytes(c, b, base + 15 * g, g, 62, "the run left mapped");

    /* Unmap keeps the VA reserved: nothing unreserved, and (host memory) the
     * range is still a mapping of the process, with no access. */
    cr_assert_eq(s.calls[ORTMEM_OP_UNRESERVE], 0);
    cr_assert_eq(s.reserved_va_bytes, 16 * g);
    if (c->host_memory) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        unsigned char *vec = malloc(3 * g / page + 1);
        cr_assert_not_null(vec);
        cr_assert_eq(mincore(base, 3 * g, vec), 0, "the unmapped run is still reserved: %s",
                     strerror(errno));
        cr_assert_eq(mincore(base + 8 * g, 3 * g, vec), 0, "%s", strerror(errno));
        free(vec);
        cr_assert_eq(kernel_access(base, 0), EFAULT, "an unmapped granule has no access");
    }
    run_check(c, b, "two runs unmapped");

    /* The same VA maps again. */
    OK(ortmem_region_commit(r, 0, 3 * g));
    cr_assert_eq(base_of(r), base);
    s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_MAP], 10);
    cr_assert_eq(s.calls[ORTMEM_OP_SET_ACCESS], 4);
    put(c, b, base + g - 100, g + 200, 63);
    expect_bytes(c, b, base + g - 100, g + 200, 63, "the remapped run");
    OK(ortmem_region_destroy(r));
    ledger_empty(b, "after the runs");
    s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_UNRESERVE], 1);
    cr_assert_eq(all_failures(&s), 0);
    run_check(c, b, "after the runs");
    c->destroy(b);
}

/* ---- access ---- */

void contract_set_access_read_write_and_read_only(const backend_contract *c)
{
    ortmem_backend *b = c->create(CONTRACT_GRANULE_RECOMMENDED);
    size_t g = granule_of(b);
    ortmem_region *r = region_on(b, 2 * g, 0);
    uint8_t *base = base_of(r);
    OK(ortmem_region_commit(r, 0, 2 * g));
    cr_assert_eq(granule_info(r, 0).access, ORTMEM_ACCESS_READ_WRITE);
    cr_assert_eq(granule_info(r, g).access, ORTMEM_ACCESS_READ_WRITE);
    put(c, b, base, 2 * g, 9);
    if (c->host_memory) {
        cr_assert_eq(kernel_access(base, 1), 0, "READ_WRITE is writable");
        put(c, b, base, 64, 9); /* the probe wrote junk */
    }
    ortmem_vmm_stats s0 = stats_of(b);

    OK(ortmem_region_protect(r, 0, g, ORTMEM_ACCESS_READ));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_SET_ACCESS], s0.calls[ORTMEM_OP_SET_ACCESS] + 1);
    cr_assert_eq(s.calls[ORTMEM_OP_MAP], s0.calls[ORTMEM_OP_MAP], "access changes remap nothing");
    same_bytes(&s0, &s, "protect READ");
    cr_assert_eq(granule_info(r, 0).access, ORTMEM_ACCESS_READ);
    cr_assert_eq(granule_info(r, g).access, ORTMEM_ACCESS_READ_WRITE, "only the range changed");
    expect_bytes(c, b, base, 2 * g, 9, "READ still reads");
    expect_write_refused(c, b, base, "protect READ");
    expect_bytes(c, b, base, 2 * g, 9, "the refused write left the bytes");
    put(c, b, base + g, 64, 10); /* the neighbour stays writable */
    expect_bytes(c, b, base + g, 64, 10, "the read-write neighbour");
    run_check(c, b, "READ");

    OK(ortmem_region_protect(r, 0, g, ORTMEM_ACCESS_READ_WRITE));
    cr_assert_eq(granule_info(r, 0).access, ORTMEM_ACCESS_READ_WRITE);
    put(c, b, base, 64, 11);
    expect_bytes(c, b, base, 64, 11, "writable again");
    s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_SET_ACCESS], s0.calls[ORTMEM_OP_SET_ACCESS] + 2);
    same_bytes(&s0, &s, "protect READ_WRITE");
    OK(ortmem_region_destroy(r));
    ledger_empty(b, "after access");
    run_check(c, b, "after access");
    c->destroy(b);
}

/* ---- two mappings of one granule ---- */

void contract_a_second_mapping_sees_the_same_bytes(const backend_contract *c)
{
    ortmem_backend *b = c->create(CONTRACT_GRANULE_RECOMMENDED);
    size_t g = granule_of(b);
    ortmem_region *a = region_on(b, 2 * g, 0), *rw = region_on(b, 2 * g, 0);
    ortmem_region *ro = region_on(b, g, 0);
    OK(ortmem_region_commit(a, 0, 2 * g));
    put(c, b, base_of(a), g, 40);
    put(c, b, base_of(a) + g, g, 41);
    ortmem_vmm_stats s0 = stats_of(b);

    OK(ortmem_region_share(rw, 0, a, 0, 2 * g, ORTMEM_ACCESS_READ_WRITE));
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_MAP], s0.calls[ORTMEM_OP_MAP] + 2);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE], s0.calls[ORTMEM_OP_CREATE], "no new granule");
    cr_assert_eq(s.calls[ORTMEM_OP_SET_ACCESS], s0.calls[ORTMEM_OP_SET_ACCESS] + 1);
    cr_assert_eq(s.owned_bytes, 2 * g, "owned once");
    cr_assert_eq(s.mapped_bytes, 4 * g, "each mapping counts");
    cr_assert_eq(granule_info(a, 0).mappers, 2);
    cr_assert_eq(granule_info(rw, g).mappers, 2);
    cr_assert_eq(granule_info(rw, 0).access, ORTMEM_ACCESS_READ_WRITE);
    expect_bytes(c, b, base_of(rw), g, 40, "the second mapping reads the first's bytes");
    expect_bytes(c, b, base_of(rw) + g, g, 41, "granule 1 through the second mapping");

    /* Writes go both ways. */
    put(c, b, base_of(rw), g, 42);
    expect_bytes(c, b, base_of(a), g, 42, "written through the second, read through the first");
    put(c, b, base_of(a) + g, g, 43);
    expect_bytes(c, b, base_of(rw) + g, g, 43,
                 "written through the first, read through the second");
    if (c->host_memory) {
        volatile uint8_t *p = base_of(rw) + 5, *q = base_of(a) + 5;
        *p = 0x5C;
        cr_assert_eq(*q, 0x5C, "a store through one pointer is a load through the other");
        put(c, b, base_of(rw), g, 42);
    }

    /* A third, read-only mapping. */
    OK(ortmem_region_share(ro, 0, a, g, g, ORTMEM_ACCESS_READ));
    cr_assert_eq(granule_info(ro, 0).access, ORTMEM_ACCESS_READ);
    cr_assert_eq(granule_info(a, g).mappers, 3);
    cr_assert_eq(stats_of(b).mapped_bytes, 5 * g);
    expect_bytes(c, b, base_of(ro), g, 43, "the read-only alias reads the source");
    expect_write_refused(c, b, base_of(ro), "read-only alias");
    expect_bytes(c, b, base_of(a) + g, g, 43, "the source was not written through the alias");
    run_check(c, b, "three mappings");

    /* The first mapper goes first: the others keep the granules alive. */
    OK(ortmem_region_destroy(a));
    s = stats_of(b);
    cr_assert_eq(s.owned_bytes, 2 * g);
    cr_assert_eq(s.mapped_bytes, 3 * g);
    cr_assert_eq(granule_info(rw, 0).mappers, 1);
    expect_bytes(c, b, base_of(rw), g, 42, "granule 0 outlives its first mapper");
    expect_bytes(c, b, base_of(ro), g, 43, "granule 1 outlives its first mapper");
    OK(ortmem_region_destroy(rw));
    cr_assert_eq(stats_of(b).owned_bytes, g);
    expect_bytes(c, b, base_of(ro), g, 43, "the last mapper");
    OK(ortmem_region_destroy(ro));
    ledger_empty(b, "after the aliases");
    run_check(c, b, "after the aliases");
    c->destroy(b);
}

/* ---- bad input ---- */

#define REFUSED(call, want)                                                                        \
    do {                                                                                           \
        EXPECT_STATUS(call, want);                                                                 \
        cr_assert_neq(ortmem_last_error()[0], '\0', "%s: no detail", #call);                       \
        ortmem_vmm_stats now_ = stats_of(b);                                                       \
        same_bytes(&s0, &now_, #call);                                                             \
        no_backend_call(&s0, &now_, #call);                                                        \
    } while (0)

void contract_bad_input_is_a_status_and_changes_nothing(const backend_contract *c)
{
    ortmem_backend *b = c->create(CONTRACT_GRANULE_RECOMMENDED);
    size_t g = granule_of(b);
    ortmem_region *r = region_on(b, 4 * g, 0), *other = region_on(b, 4 * g, 0);
    OK(ortmem_region_commit(r, 0, 2 * g));
    put(c, b, base_of(r), 2 * g, 70);
    uint8_t host[64];
    ortmem_vmm_stats s0 = stats_of(b);

    /* NULL */
    ortmem_region *x = NULL;
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    opt.size = g;
    REFUSED(ortmem_backend_granule(b, NULL), ORTMEM_E_INVALID);
    REFUSED(ortmem_backend_granule(NULL, &g), ORTMEM_E_INVALID);
    REFUSED(ortmem_region_create(b, NULL, &x), ORTMEM_E_INVALID);
    REFUSED(ortmem_region_create(b, &opt, NULL), ORTMEM_E_INVALID);
    REFUSED(ortmem_region_create(NULL, &opt, &x), ORTMEM_E_INVALID);
    REFUSED(ortmem_backend_copy(b, NULL, host, sizeof host), ORTMEM_E_INVALID);
    REFUSED(ortmem_backend_copy(b, host, NULL, sizeof host), ORTMEM_E_INVALID);
    REFUSED(ortmem_backend_copy_async(b, NULL, host, sizeof host, 0), ORTMEM_E_INVALID);
    REFUSED(ortmem_backend_memset_async(b, NULL, 0, 64, 0), ORTMEM_E_INVALID);
    REFUSED(ortmem_backend_event_record(b, 0, NULL), ORTMEM_E_INVALID);
    REFUSED(ortmem_region_export(r, 0, NULL), ORTMEM_E_INVALID);
    REFUSED(ortmem_region_import(other, 0, -1, ORTMEM_ACCESS_READ_WRITE), ORTMEM_E_INVALID);
    /* zero size */
    opt.size = 0;
    REFUSED(ortmem_region_create(b, &opt, &x), ORTMEM_E_INVALID);
    opt.size = g;
    REFUSED(ortmem_region_commit(r, 0, 0), ORTMEM_E_INVALID);
    REFUSED(ortmem_region_decommit(r, 0, 0), ORTMEM_E_INVALID);
    REFUSED(ortmem_backend_copy(b, base_of(r), host, 0), ORTMEM_E_INVALID);
    REFUSED(ortmem_backend_copy_async(b, base_of(r), host, 0, 0), ORTMEM_E_INVALID);
    REFUSED(ortmem_backend_memset_async(b, base_of(r), 0, 0, 0), ORTMEM_E_INVALID);
    /* misaligned */
    opt.alignment = 3 * g;
    REFUSED(ortmem_region_create(b, &opt, &x), ORTMEM_E_ALIGN);
    opt.alignment = g / 2;
    REFUSED(ortmem_region_create(b, &opt, &x), ORTMEM_E_ALIGN);
    opt.alignment = 0;
    REFUSED(ortmem_region_protect(r, 1, g, ORTMEM_ACCESS_READ), ORTMEM_E_ALIGN);
    REFUSED(ortmem_region_protect(r, 0, g + 1, ORTMEM_ACCESS_READ), ORTMEM_E_ALIGN);
    REFUSED(ortmem_region_share(other, 1, r, 0, g, ORTMEM_ACCESS_READ), ORTMEM_E_ALIGN);
    REFUSED(ortmem_region_share(other, 0, r, g / 2, g, ORTMEM_ACCESS_READ), ORTMEM_E_ALIGN);
    REFUSED(ortmem_region_share(other, 0, r, 0, g / 2, ORTMEM_ACCESS_READ), ORTMEM_E_ALIGN);
    REFUSED(ortmem_region_import(other, g / 2, 0, ORTMEM_ACCESS_READ_WRITE), ORTMEM_E_ALIGN);
    /* outside, unknown, not live */
    REFUSED(ortmem_region_commit(r, 4 * g, 1), ORTMEM_E_RANGE);
    REFUSED(ortmem_region_commit(r, SIZE_MAX, 2), ORTMEM_E_OVERFLOW);
    REFUSED(ortmem_region_protect(r, 0, g, (ortmem_access)2), ORTMEM_E_INVALID);
    REFUSED(ortmem_region_protect(r, 2 * g, g, ORTMEM_ACCESS_READ), ORTMEM_E_STATE);
    REFUSED(ortmem_region_share(other, 0, r, 2 * g, g, ORTMEM_ACCESS_READ), ORTMEM_E_STATE);
    ortmem_status st = ortmem_backend_event_query(b, 0xE7E7E7);
    cr_assert(st == ORTMEM_E_NOT_FOUND || st == ORTMEM_E_UNSUPPORTED,
              "a foreign event never reaches the backend: %s", ortmem_status_str(st));
    cr_assert_null(x, "no region came out of a refused create");

    /* The regions still work. */
    expect_bytes(c, b, base_of(r), 2 * g, 70, "after the refusals");
    OK(ortmem_region_commit(other, 0, g));
    OK(ortmem_region_destroy(other));
    OK(ortmem_region_destroy(r));
    ledger_empty(b, "after bad input");
    run_check(c, b, "after bad input");
    c->destroy(b);
}

/* ---- optional capabilities ---- */

/* An UNSUPPORTED answer carries a detail and touches nothing. */
static void unsupported_changed_nothing(const backend_contract *c, ortmem_backend *b,
                                        const ortmem_vmm_stats *s0, const char *what)
{
    cr_assert_neq(ortmem_last_error()[0], '\0', "%s: UNSUPPORTED without a detail", what);
    finding(c, "%s: unsupported here: %s", what, ortmem_last_error());
    ortmem_vmm_stats s = stats_of(b);
    same_bytes(s0, &s, what);
}

static void capability_export_import(const backend_contract *c, ortmem_backend *b, size_t g)
{
    ortmem_region *plain = region_on(b, g, 0), *imp = region_on(b, g, 0);
    OK(ortmem_region_commit(plain, 0, g));
    int fd = -1;
    ortmem_vmm_stats s0 = stats_of(b);
    EXPECT_STATUS(ortmem_region_export(plain, 0, &fd), ORTMEM_E_UNSUPPORTED);
    unsupported_changed_nothing(c, b, &s0, "export of a granule not created exportable");
    cr_assert_eq(fd, -1);

    ortmem_region *exp = region_on(b, g, ORTMEM_REGION_EXPORTABLE);
    s0 = stats_of(b);
    ortmem_status st = ortmem_region_commit(exp, 0, g);
    if (st == ORTMEM_E_UNSUPPORTED) {
        unsupported_changed_nothing(c, b, &s0, "exportable granules");
        cr_assert_eq(granule_info(exp, 0).state, ORTMEM_GRANULE_UNMAPPED);
    } else {
        OK(st);
        put(c, b, base_of(exp), g, 80);
        s0 = stats_of(b);
        st = ortmem_region_export(exp, 0, &fd);
        if (st == ORTMEM_E_UNSUPPORTED) {
            unsupported_changed_nothing(c, b, &s0, "export");
        } else {
            OK(st);
            cr_assert_geq(fd, 0);
            cr_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC, "the exported descriptor is close-on-exec");
            s0 = stats_of(b);
            st = ortmem_region_import(imp, 0, fd, ORTMEM_ACCESS_READ_WRITE);
            close(fd);
            if (st == ORTMEM_E_UNSUPPORTED) {
                unsupported_changed_nothing(c, b, &s0, "import");
            } else {
                OK(st);
                ortmem_vmm_stats s = stats_of(b);
                cr_assert_eq(s.calls[ORTMEM_OP_IMPORT], s0.calls[ORTMEM_OP_IMPORT] + 1);
                cr_assert_eq(s.mapped_bytes, s0.mapped_bytes + g);
                expect_bytes(c, b, base_of(imp), g, 80, "the import reads the exporter's bytes");
                put(c, b, base_of(imp), 256, 81);
                expect_bytes(c, b, base_of(exp), 256, 81, "the exporter reads the import's bytes");
            }
        }
    }
    OK(ortmem_region_destroy(imp));
    OK(ortmem_region_destroy(exp));
    OK(ortmem_region_destroy(plain));
}

static void capability_copy(const backend_contract *c, ortmem_backend *b, size_t g)
{
    ortmem_region *r = region_on(b, 4 * g, 0);
    OK(ortmem_region_commit(r, 0, 4 * g));
    uint8_t *base = base_of(r);
    uint8_t probe[64] = {0};
    ortmem_vmm_stats s0 = stats_of(b);
    ortmem_status st = ortmem_backend_copy(b, base, probe, sizeof probe);
    if (st == ORTMEM_E_UNSUPPORTED) {
        unsupported_changed_nothing(c, b, &s0, "copy");
        OK(ortmem_region_destroy(r));
        return;
    }
    OK(st);
    /* Host to device and back across the seam of granules 0-1 and into 2. */
    put(c, b, base + g - 1000, g + 2000, 90);
    expect_bytes(c, b, base + g - 1000, g + 2000, 90, "across the seam");
    /* Device to device. */
    OK(ortmem_backend_copy(b, base + 3 * g - 1000, base + g - 1000, 2000));
    expect_bytes(c, b, base + 3 * g - 1000, 2000, 90, "a device-to-device copy");
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_COPY], s0.calls[ORTMEM_OP_COPY] + 5);
    cr_assert_eq(s.failures[ORTMEM_OP_COPY], s0.failures[ORTMEM_OP_COPY]);
    OK(ortmem_region_destroy(r));
}

static void capability_streams_and_events(const backend_contract *c, ortmem_backend *b, size_t g)
{
    ortmem_region *r = region_on(b, 2 * g, 0);
    OK(ortmem_region_commit(r, 0, 2 * g));
    uint8_t *base = base_of(r);
    ortmem_vmm_stats s0 = stats_of(b);
    ortmem_status st = ortmem_backend_memset_async(b, base, 0x5A, 2 * g, 0);
    if (st == ORTMEM_E_UNSUPPORTED)
        unsupported_changed_nothing(c, b, &s0, "memset_async");
    else
        OK(st);
    bool memset_done = st == ORTMEM_OK;
    uint8_t *host = malloc(2 * g);
    cr_assert_not_null(host);
    memset(host, 0, 2 * g);
    s0 = stats_of(b);
    st = ortmem_backend_copy_async(b, host, base, 2 * g, 0);
    if (st == ORTMEM_E_UNSUPPORTED)
        unsupported_changed_nothing(c, b, &s0, "copy_async");
    else
        OK(st);
    bool copy_done = st == ORTMEM_OK;

    uint64_t ev = 0;
    s0 = stats_of(b);
    st = ortmem_backend_event_record(b, 0, &ev);
    if (st == ORTMEM_E_UNSUPPORTED) {
        unsupported_changed_nothing(c, b, &s0, "events");
        EXPECT_STATUS(ortmem_backend_event_query(b, ev), ORTMEM_E_UNSUPPORTED);
        EXPECT_STATUS(ortmem_backend_event_destroy(b, ev), ORTMEM_E_UNSUPPORTED);
    } else {
        OK(st);
        long busy = 0;
        while ((st = ortmem_backend_event_query(b, ev)) == ORTMEM_E_BUSY) {
            busy++;
            cr_assert_lt(busy, 100000000L, "the event never completed");
        }
        OK(st);
        finding(c, "event pending for %ld queries", busy);
        if (memset_done && copy_done) {
            size_t bad = 2 * g;
            for (size_t i = 0; i < 2 * g && bad == 2 * g; i++)
                if (host[i] != 0x5A)
                    bad = i;
            cr_assert_eq(bad, 2 * g, "byte %zu of the async memset and copy", bad);
        }
        OK(ortmem_backend_event_destroy(b, ev));
        EXPECT_STATUS(ortmem_backend_event_query(b, ev), ORTMEM_E_NOT_FOUND);
        EXPECT_STATUS(ortmem_backend_event_destroy(b, ev), ORTMEM_E_NOT_FOUND);
        ortmem_vmm_stats s = stats_of(b);
        cr_assert_eq(s.calls[ORTMEM_OP_EVENT_RECORD], s0.calls[ORTMEM_OP_EVENT_RECORD] + 1);
        cr_assert_eq(s.calls[ORTMEM_OP_EVENT_DESTROY], s0.calls[ORTMEM_OP_EVENT_DESTROY] + 1);
        cr_assert_eq(s.failures[ORTMEM_OP_EVENT_QUERY], s0.failures[ORTMEM_OP_EVENT_QUERY],
                     "pending is not a failure");
    }
    free(host);
    OK(ortmem_region_destroy(r));
}

static void capability_access_none(const backend_contract *c, ortmem_backend *b, size_t g)
{
    ortmem_region *r = region_on(b, 2 * g, 0);
    OK(ortmem_region_commit(r, 0, 2 * g));
    put(c, b, base_of(r), 2 * g, 95);
    ortmem_vmm_stats s0 = stats_of(b);
    ortmem_status st = ortmem_region_protect(r, 0, g, ORTMEM_ACCESS_NONE);
    if (st == ORTMEM_E_UNSUPPORTED) {
        unsupported_changed_nothing(c, b, &s0, "access NONE");
        cr_assert_eq(granule_info(r, 0).access, ORTMEM_ACCESS_READ_WRITE, "access unchanged");
    } else {
        OK(st);
        cr_assert_eq(granule_info(r, 0).access, ORTMEM_ACCESS_NONE);
        cr_assert_eq(granule_info(r, 0).state, ORTMEM_GRANULE_MAPPED, "NONE keeps the mapping");
        if (c->host_memory)
            cr_assert_eq(kernel_access(base_of(r), 0), EFAULT, "NONE cannot be read");
        ortmem_vmm_stats s = stats_of(b);
        same_bytes(&s0, &s, "access NONE");
    }
    OK(ortmem_region_protect(r, 0, g, ORTMEM_ACCESS_READ));
    OK(ortmem_region_protect(r, 0, g, ORTMEM_ACCESS_READ_WRITE));
    expect_bytes(c, b, base_of(r), 2 * g, 95, "after NONE, READ and READ_WRITE again");
    OK(ortmem_region_destroy(r));
}

void contract_optional_capabilities_work_or_are_unsupported(const backend_contract *c)
{
    ortmem_backend *b = c->create(CONTRACT_GRANULE_RECOMMENDED);
    size_t g = granule_of(b);
    capability_copy(c, b, g);
    run_check(c, b, "copy");
    capability_export_import(c, b, g);
    run_check(c, b, "export and import");
    capability_streams_and_events(c, b, g);
    run_check(c, b, "streams and events");
    capability_access_none(c, b, g);
    run_check(c, b, "access NONE");
    ledger_empty(b, "after the capabilities");
    c->destroy(b);
}

/* ---- failures ---- */

static ortmem_backend *fault_over(ortmem_backend *b, ortmem_backend_op op, uint64_t from)
{
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = op;
    fo.fail_at = from;
    fo.persistent = 1;
    ortmem_backend *f = NULL;
    OK(ortmem_fault_backend_create(b, &fo, &f));
    return f;
}

static void rearm(ortmem_backend *f, ortmem_backend_op op, uint64_t from)
{
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = op;
    fo.fail_at = from;
    fo.persistent = from != 0;
    OK(ortmem_fault_backend_arm(f, &fo));
}

/* A commit that fails at its k-th call of op leaves the region and both
 * ledgers where they were, the backend under test included. */
static void commit_fails_cleanly(const backend_contract *c, ortmem_backend *b, ortmem_backend *f,
                                 ortmem_region *r, ortmem_backend_op op, uint64_t from)
{
    size_t g = ortmem_region_granule(r);
    char what[64];
    snprintf(what, sizeof what, "commit with %s failing from call %llu", ortmem_backend_op_name(op),
             (unsigned long long)from);
    rearm(f, op, from);
    ortmem_vmm_stats sf = stats_of(f), sb = stats_of(b);
    EXPECT_STATUS(ortmem_region_commit(r, 0, 3 * g), ORTMEM_E_BACKEND);
    cr_assert(strstr(ortmem_last_error(), "fault injected"), "%s: %s", what, ortmem_last_error());
    ortmem_vmm_stats sf1 = stats_of(f), sb1 = stats_of(b);
    same_bytes(&sf, &sf1, what);
    same_bytes(&sb, &sb1, what);
    cr_assert_eq(sf1.failures[op], sf.failures[op] + 1, "%s", what);
    cr_assert_eq(all_failures(&sb1), all_failures(&sb), "%s: the backend under test never failed",
                 what);
    /* What the commit did before the fault, the backend under test undid:
     * every granule it created was released, and a map made means an unmap. */
    cr_assert_eq(sb1.calls[ORTMEM_OP_CREATE] - sb.calls[ORTMEM_OP_CREATE],
                 sb1.calls[ORTMEM_OP_RELEASE] - sb.calls[ORTMEM_OP_RELEASE], "%s", what);
    cr_assert_eq(sb1.calls[ORTMEM_OP_MAP] > sb.calls[ORTMEM_OP_MAP],
                 sb1.calls[ORTMEM_OP_UNMAP] > sb.calls[ORTMEM_OP_UNMAP], "%s: maps undone", what);
    for (size_t k = 0; k < 3; k++)
        cr_assert_eq(granule_info(r, k * g).state, ORTMEM_GRANULE_UNMAPPED, "%s: granule %zu", what,
                     k);
    run_check(c, b, what);
}

void contract_failures_change_nothing_and_set_a_detail(const backend_contract *c)
{
    ortmem_backend *b = c->create(CONTRACT_GRANULE_RECOMMENDED);
    size_t g = granule_of(b);

    /* A backend with a region cannot go, and refusing changed nothing. */
    ortmem_region *r = region_on(b, 4 * g, 0);
    EXPECT_STATUS(ortmem_backend_destroy(b), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "1 users"), "%s", ortmem_last_error());
    OK(ortmem_region_commit(r, 0, 1));
    put(c, b, base_of(r), 256, 100);
    expect_bytes(c, b, base_of(r), 256, 100, "after a refused destroy");

    /* A native failure: a descriptor that is no granule. */
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    ortmem_vmm_stats s0 = stats_of(b);
    ortmem_status st = ortmem_region_import(r, g, fds[0], ORTMEM_ACCESS_READ_WRITE);
    close(fds[0]);
    close(fds[1]);
    cr_assert_neq(st, ORTMEM_OK, "a pipe imported as a granule");
    cr_assert_neq(ortmem_last_error()[0], '\0', "the import failure has a detail");
    finding(c, "import of a pipe -> %s: %s", ortmem_status_str(st), ortmem_last_error());
    ortmem_vmm_stats s1 = stats_of(b);
    same_bytes(&s0, &s1, "import of a pipe");
    if (st != ORTMEM_E_UNSUPPORTED)
        cr_assert_gt(all_failures(&s1), all_failures(&s0), "the backend's failure is counted");
    cr_assert_eq(granule_info(r, g).state, ORTMEM_GRANULE_UNMAPPED);
    OK(ortmem_region_destroy(r));
    run_check(c, b, "native failures");

    /* Injected failures: the fault wrapper over the backend under test fails
     * one operation from its k-th call on; the region above rolls back through
     * the backend under test. */
    ortmem_backend *f = fault_over(b, ORTMEM_OP_RESERVE, 1);
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    opt.size = 4 * g;
    ortmem_region *x = NULL;
    s0 = stats_of(b);
    EXPECT_STATUS(ortmem_region_create(f, &opt, &x), ORTMEM_E_BACKEND);
    cr_assert_null(x);
    cr_assert(strstr(ortmem_last_error(), "fault injected"), "%s", ortmem_last_error());
    cr_assert_eq(stats_of(f).reserved_va_bytes, 0);
    s1 = stats_of(b);
    same_bytes(&s0, &s1, "a failed reserve");
    no_backend_call(&s0, &s1, "a failed reserve");
    rearm(f, ORTMEM_OP_ANY, 0);
    r = region_on(f, 4 * g, 0);
    commit_fails_cleanly(c, b, f, r, ORTMEM_OP_CREATE, 2);
    commit_fails_cleanly(c, b, f, r, ORTMEM_OP_MAP, 2);
    commit_fails_cleanly(c, b, f, r, ORTMEM_OP_MAP, 3);
    commit_fails_cleanly(c, b, f, r, ORTMEM_OP_SET_ACCESS, 1);

    /* Commit works once re-armed; a failed unmap then changes nothing. */
    rearm(f, ORTMEM_OP_ANY, 0);
    OK(ortmem_region_commit(r, 0, 3 * g));
    put(c, b, base_of(r), 3 * g, 101);
    rearm(f, ORTMEM_OP_UNMAP, 1);
    s0 = stats_of(f);
    EXPECT_STATUS(ortmem_region_decommit(r, 0, 3 * g), ORTMEM_E_BACKEND);
    cr_assert_neq(ortmem_last_error()[0], '\0');
    s1 = stats_of(f);
    same_bytes(&s0, &s1, "a failed unmap");
    for (size_t k = 0; k < 3; k++)
        cr_assert_eq(granule_info(r, k * g).state, ORTMEM_GRANULE_MAPPED, "granule %zu", k);
    expect_bytes(c, b, base_of(r), 3 * g, 101, "after a failed unmap");
    /* And a failed set-access leaves the access. */
    rearm(f, ORTMEM_OP_SET_ACCESS, 1);
    EXPECT_STATUS(ortmem_region_protect(r, 0, g, ORTMEM_ACCESS_READ), ORTMEM_E_BACKEND);
    cr_assert_eq(granule_info(r, 0).access, ORTMEM_ACCESS_READ_WRITE);
    put(c, b, base_of(r), 64, 102);
    expect_bytes(c, b, base_of(r), 64, 102, "still writable");
    rearm(f, ORTMEM_OP_ANY, 0);
    OK(ortmem_region_destroy(r));
    ledger_empty(f, "the wrapper after the injected failures");
    OK(ortmem_backend_destroy(f));
    ledger_empty(b, "after the failures");
    run_check(c, b, "after the failures");
    c->destroy(b);
}
