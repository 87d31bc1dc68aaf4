/* Streams and events through the backend seam: the CPU backend's synchronous
 * async primitives, the ledger's counts, event tracking (foreign and destroyed
 * events never reach a backend), the fault-injection wrapper forwarding and
 * failing each new operation, and backends that lack the optional slots. */
#include <pthread.h>
#include <stddef.h>

#include "support.h"

static const ortmem_backend_op stream_ops[] = {
    ORTMEM_OP_COPY_ASYNC,  ORTMEM_OP_MEMSET_ASYNC,  ORTMEM_OP_EVENT_RECORD,
    ORTMEM_OP_EVENT_QUERY, ORTMEM_OP_EVENT_DESTROY,
};
#define STREAM_OP_COUNT (sizeof stream_ops / sizeof stream_ops[0])

static ortmem_region *committed_region(ortmem_backend *b, size_t size)
{
    ortmem_region *r = region_on(b, size, 0);
    OK(ortmem_region_commit(r, 0, size));
    return r;
}

Test(streams, cpu_async_copy_and_memset_work_and_are_counted)
{
    ortmem_backend *b = test_backend();
    ortmem_region *r = committed_region(b, 2 * TEST_GRANULE);
    uint8_t *base = ortmem_region_base(r);
    ortmem_vmm_stats before = stats_of(b);

    /* A memset and a copy spanning the seam between the two granules. */
    size_t seam = TEST_GRANULE - 100, n = 200;
    OK(ortmem_backend_memset_async(b, base + seam, 0xA5, n, 0));
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(base[seam + i], 0xA5, "byte %zu", i);
    uint8_t src[300];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = pattern_byte(7, i);
    OK(ortmem_backend_copy_async(b, base + seam, src, sizeof src, 42));
    cr_assert_eq(memcmp(base + seam, src, sizeof src), 0);
    uint8_t back[300];
    OK(ortmem_backend_copy_async(b, back, base + seam, sizeof back, 0));
    cr_assert_eq(memcmp(back, src, sizeof back), 0);

    /* Value is taken as an unsigned char, like memset and cuMemsetD8. */
    OK(ortmem_backend_memset_async(b, base, 0x1FF, 16, 0));
    cr_assert_eq(base[0], 0xFF);

    ortmem_vmm_stats after = stats_of(b);
    cr_assert_eq(after.calls[ORTMEM_OP_MEMSET_ASYNC] - before.calls[ORTMEM_OP_MEMSET_ASYNC], 2);
    cr_assert_eq(after.calls[ORTMEM_OP_COPY_ASYNC] - before.calls[ORTMEM_OP_COPY_ASYNC], 2);
    cr_assert_eq(after.calls[ORTMEM_OP_COPY], before.calls[ORTMEM_OP_COPY], "sync copy untouched");
    for (size_t k = 0; k < STREAM_OP_COUNT; k++)
        cr_assert_eq(after.failures[stream_ops[k]], 0);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(b));
}

Test(streams, cpu_events_complete_at_once_and_are_tracked)
{
    ortmem_backend *b = test_backend();
    uint64_t e1 = 0, e2 = 0;
    OK(ortmem_backend_event_record(b, 0, &e1));
    OK(ortmem_backend_event_record(b, 7, &e2));
    cr_assert_neq(e1, e2, "each record is a distinct event");
    OK(ortmem_backend_event_query(b, e1));
    OK(ortmem_backend_event_query(b, e2));
    OK(ortmem_backend_event_destroy(b, e1));
    /* Released and never-recorded events are refused before the backend. */
    EXPECT_STATUS(ortmem_backend_event_query(b, e1), ORTMEM_E_NOT_FOUND);
    cr_assert_not_null(strstr(ortmem_last_error(), "not live"), "%s", ortmem_last_error());
    EXPECT_STATUS(ortmem_backend_event_destroy(b, e1), ORTMEM_E_NOT_FOUND);
    EXPECT_STATUS(ortmem_backend_event_destroy(b, 0xdeadbeef), ORTMEM_E_NOT_FOUND);
    OK(ortmem_backend_event_query(b, e2));
    OK(ortmem_backend_event_destroy(b, e2));

    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_EVENT_RECORD], 2);
    cr_assert_eq(s.calls[ORTMEM_OP_EVENT_QUERY], 3, "refused queries never reached the backend");
    cr_assert_eq(s.calls[ORTMEM_OP_EVENT_DESTROY], 2);
    cr_assert_eq(s.failures[ORTMEM_OP_EVENT_QUERY], 0);
    OK(ortmem_backend_destroy(b));
}

Test(streams, many_live_events_stay_distinct)
{
    ortmem_backend *b = test_backend();
    enum { N = 1000 };
    static uint64_t ev[N];
    for (int i = 0; i < N; i++)
        OK(ortmem_backend_event_record(b, 0, &ev[i]));
    /* Release every other one, then check both halves. */
    for (int i = 0; i < N; i += 2)
        OK(ortmem_backend_event_destroy(b, ev[i]));
    for (int i = 0; i < N; i++) {
        if (i % 2)
            OK(ortmem_backend_event_query(b, ev[i]));
        else
            EXPECT_STATUS(ortmem_backend_event_query(b, ev[i]), ORTMEM_E_NOT_FOUND);
    }
    for (int i = 1; i < N; i += 2)
        OK(ortmem_backend_event_destroy(b, ev[i]));
    cr_assert_eq(stats_of(b).calls[ORTMEM_OP_EVENT_DESTROY], N);
    OK(ortmem_backend_destroy(b));
}

Test(streams, bad_input_is_a_status)
{
    ortmem_backend *b = test_backend();
    uint8_t buf[16];
    uint64_t ev;
    EXPECT_STATUS(ortmem_backend_copy_async(b, NULL, buf, 4, 0), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_backend_copy_async(b, buf, NULL, 4, 0), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_backend_copy_async(b, buf, buf + 8, 0, 0), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_backend_memset_async(b, NULL, 0, 4, 0), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_backend_memset_async(b, buf, 0, 0, 0), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_backend_event_record(b, 0, NULL), ORTMEM_E_INVALID);
    ortmem_vmm_stats s = stats_of(b);
    for (size_t k = 0; k < STREAM_OP_COUNT; k++)
        cr_assert_eq(s.calls[stream_ops[k]], 0, "refused input never reaches the backend");
    OK(ortmem_backend_destroy(b));
    EXPECT_STATUS(ortmem_backend_copy_async(b, buf, buf + 8, 4, 0), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_backend_memset_async(b, buf, 0, 4, 0), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_backend_event_record(b, 0, &ev), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_backend_event_query(b, 1), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_backend_event_destroy(b, 1), ORTMEM_E_HANDLE);
}

Test(streams, op_names_cover_the_new_operations)
{
    static const char *const names[] = {"copy_async", "memset_async", "event_record", "event_query",
                                        "event_destroy"};
    for (size_t k = 0; k < STREAM_OP_COUNT; k++) {
        cr_assert_str_eq(ortmem_backend_op_name(stream_ops[k]), names[k]);
        ortmem_backend_op op;
        OK(ortmem_backend_op_parse(names[k], &op));
        cr_assert_eq(op, stream_ops[k]);
    }
    cr_assert_str_eq(ortmem_backend_op_name(ORTMEM_OP_ANY), "any");
    cr_assert_eq(ORTMEM_OP_EVENT_DESTROY + 1, ORTMEM_OP_COUNT, "appended before the count");
}

/* ---- the fault-injection wrapper ---- */

static ortmem_backend *fault_on(ortmem_backend *inner, ortmem_backend_op op, uint64_t at)
{
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = op;
    fo.fail_at = at;
    ortmem_backend *f = NULL;
    OK(ortmem_fault_backend_create(inner, &fo, &f));
    return f;
}

/* Calls op once through b; ev is a live event for query and destroy. */
static ortmem_status call_op(ortmem_backend *b, ortmem_backend_op op, uint8_t *mem, uint64_t ev)
{
    uint64_t out;
    switch (op) {
    case ORTMEM_OP_COPY_ASYNC: return ortmem_backend_copy_async(b, mem, mem + 64, 32, 0);
    case ORTMEM_OP_MEMSET_ASYNC: return ortmem_backend_memset_async(b, mem, 3, 32, 0);
    case ORTMEM_OP_EVENT_RECORD: {
        ortmem_status st = ortmem_backend_event_record(b, 0, &out);
        if (st == ORTMEM_OK)
            OK(ortmem_backend_event_destroy(b, out));
        return st;
    }
    case ORTMEM_OP_EVENT_QUERY: return ortmem_backend_event_query(b, ev);
    case ORTMEM_OP_EVENT_DESTROY: return ortmem_backend_event_destroy(b, ev);
    default: cr_assert_fail("not a stream op");
    }
    return ORTMEM_E_INVALID;
}

Test(streams, fault_backend_forwards_and_fails_each_new_operation)
{
    ortmem_backend *cpu = test_backend();
    ortmem_region *r = committed_region(cpu, TEST_GRANULE);
    uint8_t *mem = ortmem_region_base(r);
    for (size_t k = 0; k < STREAM_OP_COUNT; k++) {
        ortmem_backend_op op = stream_ops[k];
        ortmem_backend *f = fault_on(cpu, op, 1);
        uint64_t ev = 0;
        if (op == ORTMEM_OP_EVENT_QUERY || op == ORTMEM_OP_EVENT_DESTROY)
            OK(ortmem_backend_event_record(f, 0, &ev));
        ortmem_vmm_stats inner_before = stats_of(cpu);

        /* The first counted call fails before it reaches the inner backend. */
        EXPECT_STATUS(call_op(f, op, mem, ev), ORTMEM_E_BACKEND);
        cr_assert_not_null(strstr(ortmem_last_error(), ortmem_backend_op_name(op)), "%s",
                           ortmem_last_error());
        cr_assert_eq(stats_of(cpu).calls[op], inner_before.calls[op], "%s reached the inner",
                     ortmem_backend_op_name(op));
        cr_assert_eq(stats_of(f).failures[op], 1);

        /* The second is forwarded. A failed destroy left the event live. */
        OK(call_op(f, op, mem, ev));
        cr_assert_eq(stats_of(cpu).calls[op], inner_before.calls[op] + 1);
        uint64_t calls = 0, injected = 0;
        OK(ortmem_fault_backend_counts(f, &calls, &injected));
        cr_assert_eq(calls, 2);
        cr_assert_eq(injected, 1);
        if (op == ORTMEM_OP_EVENT_QUERY)
            OK(ortmem_backend_event_destroy(f, ev));
        OK(ortmem_backend_destroy(f));
    }
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(cpu));
}

Test(streams, fault_backend_with_probability_fails_some_async_copies)
{
    ortmem_backend *cpu = test_backend();
    ortmem_region *r = committed_region(cpu, TEST_GRANULE);
    uint8_t *mem = ortmem_region_base(r);
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = ORTMEM_OP_COPY_ASYNC;
    fo.probability = 0.5;
    fo.seed = 11;
    ortmem_backend *f = NULL;
    OK(ortmem_fault_backend_create(cpu, &fo, &f));
    int failed = 0;
    for (int i = 0; i < 64; i++) {
        ortmem_status st = ortmem_backend_copy_async(f, mem, mem + 128, 64, 0);
        cr_assert(st == ORTMEM_OK || st == ORTMEM_E_BACKEND);
        failed += st != ORTMEM_OK;
    }
    uint64_t injected = 0;
    OK(ortmem_fault_backend_counts(f, NULL, &injected));
    cr_assert_eq((uint64_t)failed, injected);
    cr_assert(failed > 0 && failed < 64, "%d of 64 failed", failed);
    cr_assert_eq(stats_of(cpu).calls[ORTMEM_OP_COPY_ASYNC], (uint64_t)(64 - failed));
    OK(ortmem_backend_destroy(f));
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(cpu));
}

/* ---- custom backends with and without the slots ---- */

typedef struct counting_backend {
    int destroys;
    int destroyed;
} counting_backend;

static ortmem_status cb_granularity(void *self, size_t *minimum, size_t *recommended)
{
    (void)self;
    *minimum = 4096;
    *recommended = TEST_GRANULE;
    return ORTMEM_OK;
}
static ortmem_status cb_reserve(void *self, size_t size, size_t align, uintptr_t *va)
{
    (void)self;
    (void)size;
    (void)align;
    (void)va;
    return ortmem_error_set(ORTMEM_E_UNSUPPORTED, "counting backend: no memory");
}
static ortmem_status cb_unreserve(void *self, uintptr_t va, size_t size)
{
    (void)self;
    (void)va;
    (void)size;
    return ORTMEM_OK;
}
static ortmem_status cb_create(void *self, size_t size, unsigned flags, uint64_t *handle)
{
    (void)self;
    (void)size;
    (void)flags;
    (void)handle;
    return ortmem_error_set(ORTMEM_E_UNSUPPORTED, "counting backend: no memory");
}
static ortmem_status cb_release(void *self, uint64_t handle)
{
    (void)self;
    (void)handle;
    return ORTMEM_OK;
}
static ortmem_status cb_map(void *self, uintptr_t va, size_t size, uint64_t handle, size_t off)
{
    (void)self;
    (void)va;
    (void)size;
    (void)handle;
    (void)off;
    return ORTMEM_E_UNSUPPORTED;
}
static ortmem_status cb_unmap(void *self, uintptr_t va, size_t size)
{
    (void)self;
    (void)va;
    (void)size;
    return ORTMEM_OK;
}
static ortmem_status cb_set_access(void *self, uintptr_t va, size_t size, ortmem_access access)
{
    (void)self;
    (void)va;
    (void)size;
    (void)access;
    return ORTMEM_OK;
}
static ortmem_status cb_event_record(void *self, uint64_t stream, uint64_t *event)
{
    (void)self;
    static uint64_t next = 100;
    *event = next++ + stream;
    return ORTMEM_OK;
}
static ortmem_status cb_event_query(void *self, uint64_t event)
{
    (void)self;
    return event % 2 ? ORTMEM_E_BUSY : ORTMEM_OK;
}
static ortmem_status cb_event_destroy(void *self, uint64_t event)
{
    (void)event;
    ((counting_backend *)self)->destroys++;
    return ORTMEM_OK;
}
static void cb_destroy(void *self)
{
    ((counting_backend *)self)->destroyed = 1;
}

static ortmem_backend_ops counting_ops(void)
{
    ortmem_backend_ops ops = {
        .struct_size = sizeof ops,
        .name = "counting",
        .granularity = cb_granularity,
        .reserve = cb_reserve,
        .unreserve = cb_unreserve,
        .create = cb_create,
        .release = cb_release,
        .map = cb_map,
        .unmap = cb_unmap,
        .set_access = cb_set_access,
        .destroy = cb_destroy,
        .event_record = cb_event_record,
        .event_query = cb_event_query,
        .event_destroy = cb_event_destroy,
    };
    return ops;
}

Test(streams, missing_slots_are_unsupported_and_not_counted)
{
    counting_backend state = {0};
    ortmem_backend_ops ops = counting_ops();
    ops.event_record = NULL; /* events need all three slots */
    ortmem_backend *b = NULL;
    OK(ortmem_backend_create(&ops, &state, &b));
    uint8_t buf[64];
    uint64_t ev;
    EXPECT_STATUS(ortmem_backend_copy_async(b, buf, buf + 32, 8, 0), ORTMEM_E_UNSUPPORTED);
    EXPECT_STATUS(ortmem_backend_memset_async(b, buf, 0, 8, 0), ORTMEM_E_UNSUPPORTED);
    EXPECT_STATUS(ortmem_backend_event_record(b, 0, &ev), ORTMEM_E_UNSUPPORTED);
    EXPECT_STATUS(ortmem_backend_event_query(b, 1), ORTMEM_E_UNSUPPORTED);
    EXPECT_STATUS(ortmem_backend_event_destroy(b, 1), ORTMEM_E_UNSUPPORTED);
    /* A wrapper offers exactly what its inner backend offers. */
    ortmem_backend *f = fault_on(b, ORTMEM_OP_ANY, 0);
    EXPECT_STATUS(ortmem_backend_copy_async(f, buf, buf + 32, 8, 0), ORTMEM_E_UNSUPPORTED);
    EXPECT_STATUS(ortmem_backend_event_record(f, 0, &ev), ORTMEM_E_UNSUPPORTED);
    ortmem_vmm_stats s = stats_of(b);
    for (size_t k = 0; k < STREAM_OP_COUNT; k++)
        cr_assert_eq(s.calls[stream_ops[k]], 0);
    OK(ortmem_backend_destroy(f));
    OK(ortmem_backend_destroy(b));
    cr_assert_eq(state.destroyed, 1);
}

Test(streams, an_older_vtable_has_no_stream_slots)
{
    /* A backend compiled against the vtable before the stream slots: its
     * struct_size ends at destroy, so whatever lies beyond is never read. */
    counting_backend state = {0};
    ortmem_backend_ops ops = counting_ops();
    ops.struct_size = offsetof(ortmem_backend_ops, copy_async);
    ortmem_backend *b = NULL;
    OK(ortmem_backend_create(&ops, &state, &b));
    uint64_t ev;
    EXPECT_STATUS(ortmem_backend_event_record(b, 0, &ev), ORTMEM_E_UNSUPPORTED);
    OK(ortmem_backend_destroy(b));
    cr_assert_eq(state.destroys, 0);
}

Test(streams, pending_is_busy_and_live_events_are_destroyed_with_the_backend)
{
    counting_backend state = {0};
    ortmem_backend_ops ops = counting_ops();
    ortmem_backend *b = NULL;
    OK(ortmem_backend_create(&ops, &state, &b));
    uint64_t ev[4];
    for (int i = 0; i < 4; i++)
        OK(ortmem_backend_event_record(b, 0, &ev[i]));
    int busy = 0;
    for (int i = 0; i < 4; i++) {
        ortmem_status st = ortmem_backend_event_query(b, ev[i]);
        cr_assert(st == ORTMEM_OK || st == ORTMEM_E_BUSY, "%s", ortmem_status_str(st));
        busy += st == ORTMEM_E_BUSY;
    }
    cr_assert_eq(busy, 2, "the counting backend keeps odd events pending");
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_EVENT_QUERY], 4);
    cr_assert_eq(s.failures[ORTMEM_OP_EVENT_QUERY], 0, "pending is an answer, not a failure");
    OK(ortmem_backend_event_destroy(b, ev[0]));
    cr_assert_eq(state.destroys, 1);
    OK(ortmem_backend_destroy(b));
    cr_assert_eq(state.destroys, 4, "the three live events were destroyed with the backend");
}

/* ---- threads ---- */

typedef struct racer {
    ortmem_backend *b;
    int rounds;
} racer;

static void *race_events(void *arg)
{
    racer *r = arg;
    for (int i = 0; i < r->rounds; i++) {
        uint64_t ev;
        if (ortmem_backend_event_record(r->b, (uint64_t)i, &ev) != ORTMEM_OK ||
            ortmem_backend_event_query(r->b, ev) != ORTMEM_OK ||
            ortmem_backend_event_destroy(r->b, ev) != ORTMEM_OK)
            return (void *)1;
    }
    return NULL;
}

Test(streams, events_from_several_threads)
{
    ortmem_backend *b = test_backend();
    enum { THREADS = 4, ROUNDS = 2000 };
    pthread_t t[THREADS];
    racer r = {b, ROUNDS};
    for (int i = 0; i < THREADS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, race_events, &r), 0);
    for (int i = 0; i < THREADS; i++) {
        void *ret = (void *)2;
        pthread_join(t[i], &ret);
        cr_assert_null(ret, "thread %d failed", i);
    }
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_EVENT_RECORD], THREADS * ROUNDS);
    cr_assert_eq(s.calls[ORTMEM_OP_EVENT_QUERY], THREADS * ROUNDS);
    cr_assert_eq(s.calls[ORTMEM_OP_EVENT_DESTROY], THREADS * ROUNDS);
    OK(ortmem_backend_destroy(b));
}
