/* A backend built from the public headers alone, as the library's own CPU,
 * CUDA and fault backends are: a wrapper over the forwarding vtable of an
 * inner backend (ortmem_backend_forwarding_ops, ortmem_backend_create_wrapper)
 * and a function of its own reaching its state through the handle
 * (ortmem_backend_visit). */
#include "../support.h"

/* A wrapper that counts the maps it forwards. */
typedef struct counting_wrapper {
    ortmem_backend *inner;
    ortmem_backend_ops inner_calls;
    uint64_t maps;
    int destroyed;
} counting_wrapper;

static int wrapper_destroys;

static ortmem_status cw_granularity(void *self, size_t *minimum, size_t *recommended)
{
    counting_wrapper *w = self;
    return w->inner_calls.granularity(w->inner, minimum, recommended);
}

static ortmem_status cw_reserve(void *self, size_t size, size_t align, uintptr_t *va)
{
    counting_wrapper *w = self;
    return w->inner_calls.reserve(w->inner, size, align, va);
}

static ortmem_status cw_unreserve(void *self, uintptr_t va, size_t size)
{
    counting_wrapper *w = self;
    return w->inner_calls.unreserve(w->inner, va, size);
}

static ortmem_status cw_create(void *self, size_t size, unsigned flags, uint64_t *handle)
{
    counting_wrapper *w = self;
    return w->inner_calls.create(w->inner, size, flags, handle);
}

static ortmem_status cw_release(void *self, uint64_t handle)
{
    counting_wrapper *w = self;
    return w->inner_calls.release(w->inner, handle);
}

static ortmem_status cw_map(void *self, uintptr_t va, size_t size, uint64_t handle,
                            size_t handle_offset)
{
    counting_wrapper *w = self;
    w->maps++;
    return w->inner_calls.map(w->inner, va, size, handle, handle_offset);
}

static ortmem_status cw_unmap(void *self, uintptr_t va, size_t size)
{
    counting_wrapper *w = self;
    return w->inner_calls.unmap(w->inner, va, size);
}

static ortmem_status cw_set_access(void *self, uintptr_t va, size_t size, ortmem_access access)
{
    counting_wrapper *w = self;
    return w->inner_calls.set_access(w->inner, va, size, access);
}

static void cw_destroy(void *self)
{
    wrapper_destroys++;
    free(self);
}

static ortmem_backend *counting_wrapper_over(ortmem_backend *inner, counting_wrapper **out)
{
    counting_wrapper *w = calloc(1, sizeof *w);
    cr_assert(w);
    w->inner = inner;
    OK(ortmem_backend_forwarding_ops(inner, &w->inner_calls));
    ortmem_backend_ops ops = {
        .struct_size = sizeof ops,
        .name = "counting",
        .granularity = cw_granularity,
        .reserve = cw_reserve,
        .unreserve = cw_unreserve,
        .create = cw_create,
        .release = cw_release,
        .map = cw_map,
        .unmap = cw_unmap,
        .set_access = cw_set_access,
        .destroy = cw_destroy,
    };
    ortmem_backend *b = NULL;
    OK(ortmem_backend_create_wrapper(inner, &ops, w, &b));
    *out = w;
    return b;
}

Test(forwarding_ops, describe_the_inner_backend_and_never_destroy_it)
{
    ortmem_backend *cpu = test_backend();
    ortmem_backend_ops calls;
    memset(&calls, 0xa5, sizeof calls);
    OK(ortmem_backend_forwarding_ops(cpu, &calls));
    cr_assert_eq(calls.struct_size, sizeof calls);
    cr_assert_str_eq(calls.name, "cpu");
    cr_assert_null(calls.destroy);
    /* The CPU backend has export, import, copy and events: so does its vtable. */
    cr_assert(calls.export_fd && calls.import_fd && calls.copy);
    cr_assert(calls.event_record && calls.event_query && calls.event_destroy);
    size_t minimum = 0, recommended = 0, granule = 0;
    OK(calls.granularity(cpu, &minimum, &recommended));
    OK(ortmem_backend_granule(cpu, &granule));
    cr_assert_eq(recommended, granule);
    cr_assert_eq(recommended, TEST_GRANULE);
    cr_assert(minimum > 0 && minimum <= recommended);
    /* granularity is not a counted call. */
    ortmem_vmm_stats s = stats_of(cpu);
    for (int op = 0; op < ORTMEM_OP_COUNT; op++)
        cr_assert_eq(s.calls[op], 0, "op %s", ortmem_backend_op_name((ortmem_backend_op)op));
    EXPECT_STATUS(ortmem_backend_forwarding_ops(cpu, NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_backend_forwarding_ops(NULL, &calls), ORTMEM_E_INVALID);
    OK(ortmem_backend_destroy(cpu));
    EXPECT_STATUS(ortmem_backend_forwarding_ops(cpu, &calls), ORTMEM_E_HANDLE);
}

Test(forwarding_ops, count_each_call_and_failure_in_the_inner_ledger)
{
    ortmem_backend *cpu = test_backend();
    ortmem_backend_ops calls;
    OK(ortmem_backend_forwarding_ops(cpu, &calls));
    uintptr_t va = 0;
    OK(calls.reserve(cpu, TEST_GRANULE, TEST_GRANULE, &va));
    cr_assert(va != 0 && va % TEST_GRANULE == 0);
    OK(calls.unreserve(cpu, va, TEST_GRANULE));
    /* A descriptor that is not open: the failure is counted and named. */
    uint64_t handle = 0;
    EXPECT_STATUS(calls.import_fd(cpu, -1, TEST_GRANULE, &handle), ORTMEM_E_BACKEND);
    cr_assert(strstr(ortmem_last_error(), "backend 'cpu' import"), "%s", ortmem_last_error());
    ortmem_vmm_stats s = stats_of(cpu);
    cr_assert_eq(s.calls[ORTMEM_OP_RESERVE], 1);
    cr_assert_eq(s.calls[ORTMEM_OP_UNRESERVE], 1);
    cr_assert_eq(s.calls[ORTMEM_OP_IMPORT], 1);
    cr_assert_eq(s.failures[ORTMEM_OP_IMPORT], 1);
    cr_assert_eq(s.failures[ORTMEM_OP_RESERVE], 0);
    /* Events go through the inner backend's tracking: a value it never handed
     * out is refused before it reaches the primitive. */
    EXPECT_STATUS(calls.event_query(cpu, 12345), ORTMEM_E_NOT_FOUND);
    uint64_t event = 0;
    OK(calls.event_record(cpu, 0, &event));
    OK(ortmem_backend_event_query(cpu, event));
    OK(calls.event_destroy(cpu, event));
    EXPECT_STATUS(ortmem_backend_event_destroy(cpu, event), ORTMEM_E_NOT_FOUND);
    OK(ortmem_backend_destroy(cpu));
}

Test(create_wrapper, keeps_the_inner_backend_alive_and_its_ledger_counts_the_forwarded_calls)
{
    wrapper_destroys = 0;
    ortmem_backend *cpu = test_backend();
    counting_wrapper *w = NULL;
    ortmem_backend *wrapped = counting_wrapper_over(cpu, &w);
    cr_assert_str_eq(ortmem_backend_name(wrapped), "counting");
    size_t granule = 0;
    OK(ortmem_backend_granule(wrapped, &granule));
    cr_assert_eq(granule, TEST_GRANULE);

    ortmem_region *r = region_on(wrapped, 4 * TEST_GRANULE, 0);
    OK(ortmem_region_commit(r, 0, 3 * TEST_GRANULE));
    cr_assert_eq(w->maps, 3);
    ortmem_vmm_stats outer = stats_of(wrapped), inner = stats_of(cpu);
    cr_assert_eq(outer.calls[ORTMEM_OP_MAP], 3);
    cr_assert_eq(inner.calls[ORTMEM_OP_MAP], 3);
    cr_assert_eq(inner.calls[ORTMEM_OP_CREATE], 3);
    /* The wrapper's ledger owns the bytes; the inner one only counted calls. */
    cr_assert_eq(outer.owned_bytes, 3 * TEST_GRANULE);
    cr_assert_eq(inner.owned_bytes, 0);

    EXPECT_STATUS(ortmem_backend_destroy(cpu), ORTMEM_E_BUSY);
    OK(ortmem_region_destroy(r));
    cr_assert_eq(stats_of(cpu).calls[ORTMEM_OP_RELEASE], 3);
    OK(ortmem_backend_destroy(wrapped));
    cr_assert_eq(wrapper_destroys, 1);
    OK(ortmem_backend_destroy(cpu));
}

Test(create_wrapper, a_failure_creates_nothing_and_leaves_self_to_the_caller)
{
    wrapper_destroys = 0;
    ortmem_backend *cpu = test_backend();
    ortmem_backend_ops incomplete = {.struct_size = sizeof incomplete, .name = "broken"};
    int self = 0;
    ortmem_backend *b = NULL;
    EXPECT_STATUS(ortmem_backend_create_wrapper(cpu, &incomplete, &self, &b), ORTMEM_E_INVALID);
    cr_assert_null(b);
    /* No user was registered on the inner backend. */
    OK(ortmem_backend_destroy(cpu));
    EXPECT_STATUS(ortmem_backend_create_wrapper(cpu, &incomplete, &self, &b), ORTMEM_E_HANDLE);
    cr_assert_eq(wrapper_destroys, 0);
}

/* What a visit saw. */
typedef struct visit_log {
    int runs;
    void *self;
    const char *name;
} visit_log;

static ortmem_status record_visit(void *self, const ortmem_backend_ops *ops, void *arg)
{
    visit_log *log = arg;
    log->runs++;
    log->self = self;
    log->name = ops->name;
    if (ops->reserve != cw_reserve)
        return ortmem_error_set(ORTMEM_E_HANDLE, "not a counting wrapper");
    ((counting_wrapper *)self)->maps += 100;
    return ORTMEM_OK;
}

Test(visit, gives_the_implementation_its_own_self_and_nothing_to_a_stale_handle)
{
    ortmem_backend *cpu = test_backend();
    counting_wrapper *w = NULL;
    ortmem_backend *wrapped = counting_wrapper_over(cpu, &w);

    visit_log log = {0};
    OK(ortmem_backend_visit(wrapped, record_visit, &log));
    cr_assert_eq(log.runs, 1);
    cr_assert_eq(log.self, w);
    cr_assert_str_eq(log.name, "counting");
    cr_assert_eq(w->maps, 100);

    /* Another implementation's backend: fn decides (here: refuses). */
    EXPECT_STATUS(ortmem_backend_visit(cpu, record_visit, &log), ORTMEM_E_HANDLE);
    cr_assert_eq(log.runs, 2);
    cr_assert_str_eq(log.name, "cpu");

    OK(ortmem_backend_destroy(wrapped));
    EXPECT_STATUS(ortmem_backend_visit(wrapped, record_visit, &log), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_backend_visit(NULL, record_visit, &log), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_backend_visit(cpu, NULL, NULL), ORTMEM_E_INVALID);
    cr_assert_eq(log.runs, 2);
    OK(ortmem_backend_destroy(cpu));
}
