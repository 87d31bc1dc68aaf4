/* The CUDA backend without a GPU.
 *
 * suite cuda_backend: the real driver. On a machine without one, creation is
 * ORTMEM_E_UNAVAILABLE with the reason; with one, it works (and the smoke test
 * runs instead of being skipped with the reason).
 *
 * suite cuda_fake: the backend's own code against a test double of the driver
 * (tests/gpu/fake_cuda.h, handed over as get_proc_address): every primitive,
 * the context binding, error texts, regions, sharing, export/import, streams
 * and events, quarantine through the fault-injection wrapper and a KV cache.
 * Skipped, with the reason, when ortmem was built without CUDA headers. */
#include <pthread.h>

#include "backend_contract.h"
#include "gpu/fake_cuda.h"
#include "support.h"

#define FG ((size_t)128 * 1024) /* the fake's recommended granularity */

/* ---- the real driver ---- */

Test(cuda_backend, real_driver_is_available_or_says_why)
{
    ortmem_backend *b = NULL;
    ortmem_status st = ortmem_cuda_backend_create(NULL, &b);
    if (st == ORTMEM_OK) {
        cr_assert_str_eq(ortmem_backend_name(b), "cuda");
        size_t g = 0;
        OK(ortmem_backend_granule(b, &g));
        cr_assert(g && !(g & (g - 1)), "granule %zu is a power of two", g);
        OK(ortmem_backend_destroy(b));
        return;
    }
    cr_assert_eq(st, ORTMEM_E_UNAVAILABLE, "%s: %s", ortmem_status_str(st), ortmem_last_error());
    cr_assert_null(b);
    const char *why = ortmem_last_error();
    cr_assert_neq(why[0], '\0', "the reason is given");
    cr_assert(strstr(why, "built without CUDA headers") || strstr(why, "dlopen") ||
                  strstr(why, "cuInit") || strstr(why, "cuGetProcAddress") ||
                  strstr(why, "no devices") || strstr(why, "virtual memory"),
              "the reason names the cause: %s", why);
    cr_log_info("CUDA backend unavailable here: %s", why);
}

Test(cuda_backend, real_driver_smoke)
{
    ortmem_backend *b = NULL;
    ortmem_status st = ortmem_cuda_backend_create(NULL, &b);
    if (st == ORTMEM_E_UNAVAILABLE)
        cr_skip_test("no GPU here: %s", ortmem_last_error());
    OK(st);
    size_t g = 0;
    OK(ortmem_backend_granule(b, &g));
    ortmem_region *r = region_on(b, 2 * g, 0);
    OK(ortmem_region_commit(r, 0, 2 * g));
    uint8_t out[256], in[256];
    for (size_t i = 0; i < sizeof out; i++)
        out[i] = pattern_byte(3, i);
    uint8_t *seam = (uint8_t *)ortmem_region_base(r) + g - 128;
    OK(ortmem_backend_copy(b, seam, out, sizeof out));
    OK(ortmem_backend_copy(b, in, seam, sizeof in));
    cr_assert_eq(memcmp(in, out, sizeof in), 0);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(b));
}

Test(cuda_backend, options_are_validated_first)
{
    ortmem_backend *b = NULL;
    ortmem_cuda_options o = ORTMEM_CUDA_OPTIONS_INIT;
    EXPECT_STATUS(ortmem_cuda_backend_create(&o, NULL), ORTMEM_E_INVALID);
    o.struct_size = 0;
    EXPECT_STATUS(ortmem_cuda_backend_create(&o, &b), ORTMEM_E_INVALID);
    o.struct_size = sizeof o + 8;
    EXPECT_STATUS(ortmem_cuda_backend_create(&o, &b), ORTMEM_E_INVALID);
    o = (ortmem_cuda_options)ORTMEM_CUDA_OPTIONS_INIT;
    o.ordinal = -1;
    EXPECT_STATUS(ortmem_cuda_backend_create(&o, &b), ORTMEM_E_INVALID);
    o = (ortmem_cuda_options)ORTMEM_CUDA_OPTIONS_INIT;
    o.exportable = (ortmem_cuda_export)7;
    EXPECT_STATUS(ortmem_cuda_backend_create(&o, &b), ORTMEM_E_INVALID);
    o = (ortmem_cuda_options)ORTMEM_CUDA_OPTIONS_INIT;
    o.granularity = (ortmem_cuda_granularity)9;
    EXPECT_STATUS(ortmem_cuda_backend_create(&o, &b), ORTMEM_E_INVALID);
    o = (ortmem_cuda_options)ORTMEM_CUDA_OPTIONS_INIT;
    o.granule = 3 * 1024 * 1024;
    EXPECT_STATUS(ortmem_cuda_backend_create(&o, &b), ORTMEM_E_INVALID);
    cr_assert_not_null(strstr(ortmem_last_error(), "power of two"), "%s", ortmem_last_error());
    cr_assert_null(b);
}

/* ---- the test double ---- */

TestSuite(cuda_fake, .init = fake_reset);

static ortmem_status fake_create(ortmem_cuda_options o, ortmem_backend **b)
{
    o.get_proc_address = fake_get_proc_address;
    *b = NULL;
    return ortmem_cuda_backend_create(&o, b);
}

static void skip_without_headers(ortmem_status st)
{
    if (st == ORTMEM_E_UNAVAILABLE && strstr(ortmem_last_error(), "without CUDA headers"))
        cr_skip_test("%s", ortmem_last_error());
}

static ortmem_backend *fake_backend_with(ortmem_cuda_options o)
{
    ortmem_backend *b = NULL;
    ortmem_status st = fake_create(o, &b);
    skip_without_headers(st);
    OK(st);
    return b;
}

static ortmem_backend *fake_backend(void)
{
    return fake_backend_with((ortmem_cuda_options)ORTMEM_CUDA_OPTIONS_INIT);
}

static void fake_backend_destroy(ortmem_backend *b)
{
    OK(ortmem_backend_destroy(b));
    cr_assert_eq(fake.primary_retains, 0, "the primary context was released");
}

static void expect(ortmem_backend *b, const void *src, size_t len, uint64_t seed)
{
    size_t bad = backend_pattern_mismatch(b, src, len, seed);
    cr_assert_eq(bad, len, "byte %zu differs from the pattern", bad);
}

/* ---- the contract over the fake driver ---- */

static ortmem_backend *fake_contract_create(contract_granularity which)
{
    ortmem_cuda_options o = ORTMEM_CUDA_OPTIONS_INIT;
    if (which == CONTRACT_GRANULE_MINIMUM)
        o.granularity = ORTMEM_CUDA_GRANULE_MINIMUM;
    /* The driver's counters start with the backend, like its ledger. */
    cr_assert_eq(fake.live_allocs + fake.live_events + fake.primary_retains, 0);
    fake_reset();
    return fake_backend_with(o);
}

static uint64_t succeeded(const ortmem_vmm_stats *s, ortmem_backend_op op)
{
    return s->calls[op] - s->failures[op];
}

/* Each primitive the ledger counts as done is one driver call that succeeded,
 * the driver holds exactly the allocations and events the ledger says are
 * alive, and every call put the thread's own context back. */
static void fake_contract_check(ortmem_backend *b, const char *when)
{
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(fake.reserves, succeeded(&s, ORTMEM_OP_RESERVE), "%s: cuMemAddressReserve", when);
    cr_assert_eq(fake.frees, succeeded(&s, ORTMEM_OP_UNRESERVE), "%s: cuMemAddressFree", when);
    cr_assert_eq(fake.creates, succeeded(&s, ORTMEM_OP_CREATE), "%s: cuMemCreate", when);
    cr_assert_eq(fake.releases, succeeded(&s, ORTMEM_OP_RELEASE), "%s: cuMemRelease", when);
    cr_assert_eq(fake.maps, succeeded(&s, ORTMEM_OP_MAP), "%s: cuMemMap", when);
    cr_assert_eq(fake.unmaps, succeeded(&s, ORTMEM_OP_UNMAP), "%s: cuMemUnmap", when);
    cr_assert_eq(fake.set_access_calls, succeeded(&s, ORTMEM_OP_SET_ACCESS), "%s: cuMemSetAccess",
                 when);
    cr_assert_eq(fake.exports, succeeded(&s, ORTMEM_OP_EXPORT), "%s: export", when);
    cr_assert_eq(fake.imports, succeeded(&s, ORTMEM_OP_IMPORT), "%s: import", when);
    cr_assert_eq(fake.copies, s.calls[ORTMEM_OP_COPY], "%s: one cuMemcpy per copy", when);
    cr_assert_eq(fake.syncs, succeeded(&s, ORTMEM_OP_COPY), "%s: each copy waits until it landed",
                 when);
    cr_assert_eq(fake.async_copies, s.calls[ORTMEM_OP_COPY_ASYNC], "%s: cuMemcpyAsync", when);
    cr_assert_eq(fake.memsets, s.calls[ORTMEM_OP_MEMSET_ASYNC], "%s: cuMemsetD8Async", when);
    cr_assert_eq((uint64_t)fake.live_allocs,
                 succeeded(&s, ORTMEM_OP_CREATE) + succeeded(&s, ORTMEM_OP_IMPORT) -
                     succeeded(&s, ORTMEM_OP_RELEASE),
                 "%s: %ld live allocations", when, fake.live_allocs);
    cr_assert_eq((uint64_t)fake.live_events,
                 succeeded(&s, ORTMEM_OP_EVENT_RECORD) - succeeded(&s, ORTMEM_OP_EVENT_DESTROY),
                 "%s: %ld live events", when, fake.live_events);
    cr_assert_null(fake_current_context(), "%s: the thread's context was restored", when);
}

static void fake_contract_destroy(ortmem_backend *b)
{
    fake_contract_check(b, "destroy");
    fake_backend_destroy(b);
    cr_assert_eq(fake.live_allocs, 0);
    cr_assert_eq(fake.live_events, 0);
}

static const backend_contract fake_contract = {
    .name = "cuda",
    .create = fake_contract_create,
    .destroy = fake_contract_destroy,
    .check = fake_contract_check,
    .granule_min = 64 * 1024, /* fake_reset's granularities */
    .granule_rec = FG,
    .host_memory = 0,
};

BACKEND_CONTRACT_TESTS(cuda_fake, fake_contract)

/* ---- the CUDA backend's own behaviour over the fake driver ---- */

Test(cuda_fake, granule_option_and_the_primary_context)
{
    /* The granularities themselves: contract_granularity_minimum_and_recommended. */
    ortmem_backend *b = fake_backend();
    cr_assert_eq(fake.primary_retains, 1);
    fake_backend_destroy(b);

    ortmem_cuda_options o = ORTMEM_CUDA_OPTIONS_INIT;
    o.granule = 1024 * 1024;
    b = fake_backend_with(o);
    size_t g = 0;
    OK(ortmem_backend_granule(b, &g));
    cr_assert_eq(g, 1024 * 1024);
    fake_backend_destroy(b);

    o.granule = 4096;
    EXPECT_STATUS(fake_create(o, &b), ORTMEM_E_INVALID);
    cr_assert_not_null(strstr(ortmem_last_error(), "minimum"), "%s", ortmem_last_error());
    cr_assert_eq(fake.primary_retains, 0, "a failed create releases the context");
}

Test(cuda_fake, unavailable_reasons_are_named)
{
    ortmem_backend *b = NULL;
    ortmem_cuda_options o = ORTMEM_CUDA_OPTIONS_INIT;
    skip_without_headers(fake_create(o, &b));
    OK(ortmem_backend_destroy(b));

    fake.init_result = FK_NO_DEVICE;
    EXPECT_STATUS(fake_create(o, &b), ORTMEM_E_UNAVAILABLE);
    const char *why = ortmem_last_error();
    cr_assert_not_null(strstr(why, "cuInit(0) failed: CUDA_ERROR_NO_DEVICE"), "%s", why);
    cr_assert_not_null(strstr(why, "no CUDA-capable device is detected"), "%s", why);
    cr_assert_not_null(strstr(why, "CUresult 100"), "%s", why);
    fake.init_result = 0;

    fake.device_count = 0;
    EXPECT_STATUS(fake_create(o, &b), ORTMEM_E_UNAVAILABLE);
    cr_assert_not_null(strstr(ortmem_last_error(), "no devices"), "%s", ortmem_last_error());
    fake.device_count = 1;

    o.ordinal = 2;
    EXPECT_STATUS(fake_create(o, &b), ORTMEM_E_RANGE);
    cr_assert_not_null(strstr(ortmem_last_error(), "ordinal 2"), "%s", ortmem_last_error());
    o.ordinal = 0;

    fake.missing_symbol = "cuMemMap";
    EXPECT_STATUS(fake_create(o, &b), ORTMEM_E_UNAVAILABLE);
    cr_assert_not_null(strstr(ortmem_last_error(), "cuMemMap"), "%s", ortmem_last_error());
    fake.missing_symbol = NULL;

    fake.vmm_supported = 0;
    EXPECT_STATUS(fake_create(o, &b), ORTMEM_E_UNAVAILABLE);
    cr_assert_not_null(strstr(ortmem_last_error(), "virtual memory management"), "%s",
                       ortmem_last_error());
    fake.vmm_supported = 1;

    fake.fd_supported = 0;
    o.exportable = ORTMEM_CUDA_EXPORT_ALWAYS;
    EXPECT_STATUS(fake_create(o, &b), ORTMEM_E_UNSUPPORTED);
    o.exportable = ORTMEM_CUDA_EXPORT_ON_REQUEST;

    fake.fail_call = "cuDevicePrimaryCtxRetain";
    fake.fail_code = FK_UNKNOWN;
    EXPECT_STATUS(fake_create(o, &b), ORTMEM_E_BACKEND);
    cr_assert_not_null(strstr(ortmem_last_error(), "cuDevicePrimaryCtxRetain"), "%s",
                       ortmem_last_error());
    cr_assert_eq(fake.primary_retains, 0, "no context is left retained by a failed create");
}

typedef struct thread_job {
    ortmem_backend *b;
    ortmem_region *r;
    void *ctx_after;
    ortmem_status st;
} thread_job;

static void *commit_on_thread(void *arg)
{
    thread_job *j = arg;
    j->st = ortmem_region_commit(j->r, FG, FG);
    if (j->st == ORTMEM_OK)
        j->st = ortmem_region_decommit(j->r, FG, FG);
    j->ctx_after = fake_current_context();
    return NULL;
}

Test(cuda_fake, binds_the_context_per_call_and_restores_the_threads_own)
{
    ortmem_backend *b = fake_backend();
    cr_assert_null(fake_current_context(), "creation leaves the thread as it was");
    ortmem_region *r = region_on(b, 4 * FG, 0);
    OK(ortmem_region_commit(r, 0, FG));
    cr_assert_null(fake_current_context());

    /* The engine has another context current: calls work, and it stays. */
    fake_set_current_context(fake_foreign_context());
    backend_put_pattern(b, ortmem_region_base(r), 64, 1);
    expect(b, ortmem_region_base(r), 64, 1);
    cr_assert_eq(fake_current_context(), fake_foreign_context());

    /* With the primary context current already, nothing is switched. */
    fake_set_current_context(fake_primary_context());
    unsigned long sets = fake.ctx_sets;
    expect(b, ortmem_region_base(r), 64, 1);
    cr_assert_eq(fake.ctx_sets, sets);
    fake_set_current_context(NULL);

    /* A thread that never saw CUDA. */
    thread_job j = {b, r, (void *)1, ORTMEM_E_INVALID};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, commit_on_thread, &j), 0);
    pthread_join(t, NULL);
    cr_assert_eq(j.st, ORTMEM_OK, "%s", ortmem_status_str(j.st));
    cr_assert_null(j.ctx_after);

    OK(ortmem_region_destroy(r));
    fake_backend_destroy(b);
}

Test(cuda_fake, access_flags_and_the_driver_words_in_refusals)
{
    /* Reads through a READ alias, the refused write and NONE being
     * unsupported: contract_set_access_read_write_and_read_only,
     * contract_a_second_mapping_sees_the_same_bytes and
     * contract_optional_capabilities_work_or_are_unsupported. Here: what
     * reaches the driver, and what the details say. */
    ortmem_backend *b = fake_backend();
    ortmem_region *src = region_on(b, 2 * FG, 0);
    ortmem_region *alias = region_on(b, 2 * FG, 0);
    OK(ortmem_region_commit(src, 0, 2 * FG));
    cr_assert_eq(fake.last_access_flags, 3, "PROT_READWRITE");
    OK(ortmem_region_share(alias, 0, src, 0, 2 * FG, ORTMEM_ACCESS_READ));
    cr_assert_eq(fake.last_access_flags, 1, "PROT_READ");

    uint8_t junk[64] = {0};
    EXPECT_STATUS(ortmem_backend_copy(b, ortmem_region_base(alias), junk, sizeof junk),
                  ORTMEM_E_BACKEND);
    cr_assert_not_null(strstr(ortmem_last_error(), "cuMemcpy"), "%s", ortmem_last_error());
    cr_assert_not_null(strstr(ortmem_last_error(), "CUresult 700"), "%s", ortmem_last_error());

    /* NONE never reaches cuMemSetAccess, and the detail says what to do. */
    unsigned long calls = fake.set_access_calls;
    EXPECT_STATUS(ortmem_region_protect(src, 0, FG, ORTMEM_ACCESS_NONE), ORTMEM_E_UNSUPPORTED);
    cr_assert_not_null(strstr(ortmem_last_error(), "decommit"), "%s", ortmem_last_error());
    cr_assert_eq(fake.set_access_calls, calls);
    OK(ortmem_region_protect(src, 0, FG, ORTMEM_ACCESS_READ));
    cr_assert_eq(fake.last_access_flags, 1);
    EXPECT_STATUS(ortmem_backend_copy(b, ortmem_region_base(src), junk, 8), ORTMEM_E_BACKEND);

    OK(ortmem_region_destroy(alias));
    OK(ortmem_region_destroy(src));
    cr_assert_eq(fake.live_allocs, 0);
    fake_backend_destroy(b);
}

Test(cuda_fake, cow_copies_a_shared_granule_on_the_device)
{
    ortmem_backend *b = fake_backend();
    ortmem_region *a = region_on(b, FG, 0), *c = region_on(b, FG, 0);
    OK(ortmem_region_commit(a, 0, FG));
    backend_put_pattern(b, ortmem_region_base(a), FG, 4);
    OK(ortmem_region_share(c, 0, a, 0, FG, ORTMEM_ACCESS_READ));
    unsigned long copies = fake.copies;
    OK(ortmem_region_cow(c, 0, FG));
    cr_assert_eq(fake.copies, copies + 1, "one device copy");
    cr_assert_eq(granule_info(c, 0).mappers, 1);
    cr_assert_eq(granule_info(c, 0).access, ORTMEM_ACCESS_READ_WRITE);
    expect(b, ortmem_region_base(c), FG, 4);
    backend_put_pattern(b, ortmem_region_base(c), 128, 5);
    expect(b, ortmem_region_base(a), FG, 4);
    OK(ortmem_region_destroy(c));
    OK(ortmem_region_destroy(a));
    cr_assert_eq(fake.live_allocs, 0);
    fake_backend_destroy(b);
}

/* The driver maps a handle whole and unmaps whole mappings (the fake refuses
 * anything else, as the driver does): an extent is one cuMemCreate, one
 * cuMemMap of the whole handle, and one cuMemUnmap per contiguous run. */
Test(cuda_fake, extent_maps_whole_and_unmaps_whole)
{
    ortmem_backend *b = fake_backend();
    ortmem_region *a = region_on(b, 16 * FG, 0), *c = region_on(b, 16 * FG, 0);
    ortmem_range ext[2] = {{0, 8 * FG}, {8 * FG, 4 * FG}};
    OK(ortmem_region_commit_extents(a, ext, 2));
    cr_assert_eq(fake.creates, 2);
    cr_assert_eq(fake.maps, 2);
    cr_assert_eq(fake.set_access_calls, 1, "one set-access over the contiguous run");
    backend_put_pattern(b, ortmem_region_base(a), 12 * FG, 8);
    OK(ortmem_region_share(c, 0, a, 0, 8 * FG, ORTMEM_ACCESS_READ_WRITE));
    cr_assert_eq(fake.maps, 3);
    /* Copy on write of one byte copies the whole 8-granule extent on the device. */
    OK(ortmem_region_cow(c, FG, 1));
    cr_assert_eq(fake.creates, 3);
    expect(b, ortmem_region_base(c), 8 * FG, 8);
    /* A decommit that cuts the first extent leaves it mapped; the second goes. */
    OK(ortmem_region_decommit(a, 4 * FG, 12 * FG));
    cr_assert_eq(fake.unmaps, 3, "cow's shared extent and scratch mapping, then the second extent");
    cr_assert_eq(granule_info(a, 7 * FG).state, ORTMEM_GRANULE_MAPPED);
    OK(ortmem_region_decommit(a, 0, 16 * FG));
    OK(ortmem_region_destroy(c));
    OK(ortmem_region_destroy(a));
    cr_assert_eq(fake.refused_partial_maps, 0);
    cr_assert_eq(fake.refused_cut_unmaps, 0);
    cr_assert_eq(fake.live_allocs, 0);
    fake_backend_destroy(b);
}

Test(cuda_fake, exportable_granules_use_posix_fds)
{
    /* Export, import and the bytes both ways: the contract. Here: the handle
     * types asked of cuMemCreate, and the export options. */
    ortmem_backend *b = fake_backend();
    ortmem_region *plain = region_on(b, FG, 0);
    OK(ortmem_region_commit(plain, 0, FG));
    cr_assert_eq(fake.last_create_handle_types, 0, "no handle type unless asked");
    ortmem_region *exp = region_on(b, FG, ORTMEM_REGION_EXPORTABLE);
    OK(ortmem_region_commit(exp, 0, FG));
    cr_assert_eq(fake.last_create_handle_types, 1, "POSIX file descriptor");
    int fd = -1;
    OK(ortmem_region_export(exp, 0, &fd));
    cr_assert_eq(fake.exports, 1);
    close(fd);
    OK(ortmem_region_destroy(exp));
    OK(ortmem_region_destroy(plain));
    cr_assert_eq(fake.live_allocs, 0);
    fake_backend_destroy(b);

    ortmem_cuda_options o = ORTMEM_CUDA_OPTIONS_INIT;
    o.exportable = ORTMEM_CUDA_EXPORT_NEVER;
    b = fake_backend_with(o);
    exp = region_on(b, FG, ORTMEM_REGION_EXPORTABLE);
    EXPECT_STATUS(ortmem_region_commit(exp, 0, FG), ORTMEM_E_UNSUPPORTED);
    OK(ortmem_region_destroy(exp));
    fake_backend_destroy(b);

    o.exportable = ORTMEM_CUDA_EXPORT_ALWAYS;
    b = fake_backend_with(o);
    plain = region_on(b, FG, 0);
    OK(ortmem_region_commit(plain, 0, FG));
    cr_assert_eq(fake.last_create_handle_types, 1);
    OK(ortmem_region_destroy(plain));
    fake_backend_destroy(b);
}

Test(cuda_fake, driver_errors_carry_names_and_numbers_and_change_nothing)
{
    ortmem_backend *b = fake_backend();
    ortmem_region *r = region_on(b, 4 * FG, 0);
    fake.fail_call = "cuMemCreate";
    fake.fail_code = FK_OUT_OF_MEMORY;
    EXPECT_STATUS(ortmem_region_commit(r, 0, 2 * FG), ORTMEM_E_NOMEM);
    const char *why = ortmem_last_error();
    cr_assert_not_null(strstr(why, "cuMemCreate of 131072 bytes on device 0"), "%s", why);
    cr_assert_not_null(strstr(why, "CUDA_ERROR_OUT_OF_MEMORY (out of memory; CUresult 2)"), "%s",
                       why);
    cr_assert_eq(fake.live_allocs, 0);
    cr_assert_eq(stats_of(b).owned_bytes, 0);

    /* The second map fails: the first is unmapped and both granules go. */
    fake.fail_call = "cuMemMap";
    fake.fail_code = FK_INVALID_VALUE;
    fake.fail_after = 1;
    fake.fail_counter = 0;
    EXPECT_STATUS(ortmem_region_commit(r, 0, 2 * FG), ORTMEM_E_BACKEND);
    cr_assert_not_null(strstr(ortmem_last_error(), "CUDA_ERROR_INVALID_VALUE"), "%s",
                       ortmem_last_error());
    cr_assert_eq(fake.maps, fake.unmaps);
    cr_assert_eq(fake.live_allocs, 0);
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.owned_bytes, 0);
    cr_assert_eq(s.mapped_bytes, 0);
    cr_assert_eq(granule_info(r, 0).state, ORTMEM_GRANULE_UNMAPPED);
    fake.fail_call = NULL;
    OK(ortmem_region_commit(r, 0, 2 * FG));
    OK(ortmem_region_destroy(r));
    fake_backend_destroy(b);
}

Test(cuda_fake, events_pending_and_driver_errors)
{
    /* Async memset and copy, record, query, release and NOT_FOUND after it:
     * contract_optional_capabilities_work_or_are_unsupported. Here: an event
     * the driver holds pending, and a driver error on a query. */
    ortmem_backend *b = fake_backend();
    const uint64_t stream = 0x5000;
    fake.hold_events = 1;
    uint64_t ev = 0, done = 0;
    OK(ortmem_backend_event_record(b, stream, &ev));
    EXPECT_STATUS(ortmem_backend_event_query(b, ev), ORTMEM_E_BUSY);
    fake_complete_events();
    OK(ortmem_backend_event_query(b, ev));
    OK(ortmem_backend_event_destroy(b, ev));
    cr_assert_eq(fake.live_events, 0);

    /* An error from the driver is a failure with its name. */
    fake.fail_call = "cuEventQuery";
    fake.fail_code = FK_ILLEGAL_ADDRESS;
    OK(ortmem_backend_event_record(b, stream, &done));
    EXPECT_STATUS(ortmem_backend_event_query(b, done), ORTMEM_E_BACKEND);
    cr_assert_not_null(strstr(ortmem_last_error(), "CUDA_ERROR_ILLEGAL_ADDRESS"), "%s",
                       ortmem_last_error());
    fake.fail_call = NULL;

    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_EVENT_QUERY], 3);
    cr_assert_eq(s.failures[ORTMEM_OP_EVENT_QUERY], 1, "pending is not a failure, the error is");
    cr_assert_eq(fake.live_events, 1);
    fake_backend_destroy(b);
    cr_assert_eq(fake.live_events, 0, "destroy released the live event");
}

Test(cuda_fake, release_and_unmap_faults_quarantine_through_the_fault_backend)
{
    ortmem_backend *cuda = fake_backend();
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = ORTMEM_OP_UNMAP;
    fo.fail_at = 1;
    ortmem_backend *f = NULL;
    OK(ortmem_fault_backend_create(cuda, &fo, &f));
    cr_assert_str_eq(ortmem_backend_name(f), "fault(cuda)");

    /* A failed unmap: decommit is all or nothing and the data survives. */
    ortmem_region *r = region_on(f, 4 * FG, 0);
    OK(ortmem_region_commit(r, 0, 2 * FG));
    backend_put_pattern(f, ortmem_region_base(r), 2 * FG, 31);
    EXPECT_STATUS(ortmem_region_decommit(r, 0, 2 * FG), ORTMEM_E_BACKEND);
    cr_assert_eq(granule_info(r, 0).state, ORTMEM_GRANULE_MAPPED);
    expect(f, ortmem_region_base(r), 2 * FG, 31);
    OK(ortmem_region_decommit(r, 0, 2 * FG));
    cr_assert_eq(fake.live_allocs, 0);

    /* A failed release: the granule is quarantined, charged and leaked. */
    fo.op = ORTMEM_OP_RELEASE;
    OK(ortmem_fault_backend_arm(f, &fo));
    OK(ortmem_region_commit(r, 0, 2 * FG));
    EXPECT_STATUS(ortmem_region_destroy(r), ORTMEM_E_QUARANTINED);
    ortmem_vmm_stats s = stats_of(f);
    cr_assert_eq(s.quarantined_granules, 1);
    cr_assert_eq(s.quarantined_bytes, FG);
    cr_assert_eq(s.owned_bytes, FG, "the quarantined granule stays owned");
    cr_assert_eq(s.mapped_bytes, 0);
    cr_assert_eq(fake.live_allocs, 1, "deliberately leaked");
    cr_assert_eq(fake.unmaps, 2, "one unmap per run: the decommit and the destroy");
    EXPECT_STATUS(ortmem_backend_destroy(f), ORTMEM_E_QUARANTINED);
    fake_backend_destroy(cuda);
}

Test(cuda_fake, kv_cache_stable_growth_keeps_pointers_and_matches_the_geometry)
{
    ortmem_backend *b = fake_backend();
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = 256 * MiB;
    ortmem_authority *a = NULL;
    OK(ortmem_authority_create(b, &ao, &a));
    ortmem_kv_cache_options o = ORTMEM_KV_CACHE_OPTIONS_INIT;
    o.geometry.layers = 2;
    o.geometry.kv_heads = 2;
    o.geometry.head_dim = 64;
    o.geometry.dtype = ORTMEM_KV_F16;
    o.geometry.layout = ORTMEM_KV_HEAD_MAJOR;
    o.strategy = ORTMEM_KV_STABLE;
    o.max_context = 4096;
    /* The per-granule baseline: ortmem_kv_evaluate models granule windows. */
    o.extents.growth = ORTMEM_EXTENT_GRANULE;
    ortmem_kv_cache *cache = NULL;
    OK(ortmem_kv_cache_create(a, &o, &cache));
    o.geometry.granule = FG;
    ortmem_kv_seq *s = NULL;
    OK(ortmem_kv_seq_create(cache, &s));
    static const uint64_t steps[] = {1, 100, 1000, 1024, 1025, 3000, 4096};
    ortmem_kv_binding first;
    memset(&first, 0, sizeof first);
    uint64_t len = 0;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        OK(ortmem_kv_seq_append(s, steps[i] - len));
        len = steps[i];
        ortmem_kv_binding bind;
        memset(&bind, 0, sizeof bind);
        bind.struct_size = sizeof bind;
        OK(ortmem_kv_seq_binding(s, 1, 1, &bind));
        if (i == 0)
            first = bind;
        cr_assert_eq(bind.base, first.base, "n %llu: the pointer never moves",
                     (unsigned long long)len);
        cr_assert_eq(bind.generation, first.generation);
        ortmem_kv_eval e;
        memset(&e, 0, sizeof e);
        e.struct_size = sizeof e;
        OK(ortmem_kv_evaluate(&o.geometry, len, o.max_context, 1, 0, 0, &e));
        ortmem_kv_stats st;
        memset(&st, 0, sizeof st);
        st.struct_size = sizeof st;
        OK(ortmem_kv_cache_stats(cache, &st));
        cr_assert_eq(st.committed_bytes, e.committed_bytes, "n %llu: %llu committed, geometry %llu",
                     (unsigned long long)len, (unsigned long long)st.committed_bytes,
                     (unsigned long long)e.committed_bytes);
        cr_assert_eq(stats_of(b).owned_bytes, e.committed_bytes);
    }
    OK(ortmem_kv_seq_destroy(s));
    OK(ortmem_kv_cache_destroy(cache));
    OK(ortmem_authority_destroy(a));
    cr_assert_eq(stats_of(b).owned_bytes, 0);
    cr_assert_eq(fake.live_allocs, 0);
    fake_backend_destroy(b);
}
