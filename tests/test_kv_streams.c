/* Bucket growth, swap and fork against a backend whose stream work completes late:
 * copies enqueued with copy_async run only when an event recorded after them
 * is queried to completion, and each event reports busy a few times first (as
 * a device stream does while the copy engine works). Each must hand every
 * copy to the cache's stream, wait on its event through the busy answers, and
 * keep the source mapped until then; the moved tokens must be intact. */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "support.h"

#define LATE_GRANULE ((size_t)64 << 10)
#define LATE_QUEUE 256
#define BUSY_QUERIES 3
#define CACHE_STREAM 0x5EEDu

typedef struct late_copy {
    uintptr_t dst, src;
    size_t size;
} late_copy;

typedef struct late_backend {
    late_copy queue[LATE_QUEUE];
    size_t queued, done;
    uint64_t events, busy_answers, destroyed;
    size_t event_mark;      /* copies queued before the last event */
    uint64_t busy_left;     /* busy answers the last event still gives */
    uint64_t other_streams; /* stream work not on the cache's stream */
} late_backend;

static ortmem_status late_granularity(void *self, size_t *minimum, size_t *recommended)
{
    (void)self;
    *minimum = *recommended = LATE_GRANULE;
    return ORTMEM_OK;
}
static ortmem_status late_reserve(void *self, size_t size, size_t alignment, uintptr_t *va)
{
    (void)self;
    size_t span = size + alignment;
    uint8_t *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return ORTMEM_E_NOMEM;
    uintptr_t start = ((uintptr_t)p + alignment - 1) & ~(uintptr_t)(alignment - 1);
    if (start > (uintptr_t)p)
        munmap(p, start - (uintptr_t)p);
    uintptr_t end = (uintptr_t)p + span;
    if (end > start + size)
        munmap((void *)(start + size), end - (start + size));
    *va = start;
    return ORTMEM_OK;
}
static ortmem_status late_unreserve(void *self, uintptr_t va, size_t size)
{
    (void)self;
    return munmap((void *)va, size) == 0 ? ORTMEM_OK : ORTMEM_E_BACKEND;
}
static ortmem_status late_create(void *self, size_t size, unsigned flags, uint64_t *handle)
{
    (void)self;
    (void)flags;
    int fd = memfd_create("late-granule", MFD_CLOEXEC);
    if (fd < 0)
        return ORTMEM_E_NOMEM;
    if (ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        return ORTMEM_E_NOMEM;
    }
    *handle = (uint64_t)fd + 1;
    return ORTMEM_OK;
}
static ortmem_status late_release(void *self, uint64_t handle)
{
    (void)self;
    return close((int)(handle - 1)) == 0 ? ORTMEM_OK : ORTMEM_E_BACKEND;
}
static ortmem_status late_map(void *self, uintptr_t va, size_t size, uint64_t handle, size_t offset)
{
    (void)self;
    void *p =
        mmap((void *)va, size, PROT_NONE, MAP_SHARED | MAP_FIXED, (int)(handle - 1), (off_t)offset);
    return p == MAP_FAILED ? ORTMEM_E_BACKEND : ORTMEM_OK;
}
static ortmem_status late_unmap(void *self, uintptr_t va, size_t size)
{
    (void)self;
    void *p = mmap((void *)va, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? ORTMEM_E_BACKEND : ORTMEM_OK;
}
static ortmem_status late_set_access(void *self, uintptr_t va, size_t size, ortmem_access access)
{
    (void)self;
    int prot = access == ORTMEM_ACCESS_READ_WRITE ? PROT_READ | PROT_WRITE
               : access == ORTMEM_ACCESS_READ     ? PROT_READ
                                                  : PROT_NONE;
    return mprotect((void *)va, size, prot) == 0 ? ORTMEM_OK : ORTMEM_E_BACKEND;
}
static ortmem_status late_copy_now(void *self, uintptr_t dst, uintptr_t src, size_t size)
{
    (void)self;
    memmove((void *)dst, (const void *)src, size);
    return ORTMEM_OK;
}
static ortmem_status late_copy_async(void *self, uintptr_t dst, uintptr_t src, size_t size,
                                     uint64_t stream)
{
    late_backend *b = self;
    if (b->queued == LATE_QUEUE)
        return ORTMEM_E_NOMEM;
    b->other_streams += stream != CACHE_STREAM;
    b->queue[b->queued++] = (late_copy){dst, src, size};
    return ORTMEM_OK;
}
static ortmem_status late_memset_async(void *self, uintptr_t dst, int value, size_t size,
                                       uint64_t stream)
{
    late_backend *b = self;
    b->other_streams += stream != CACHE_STREAM;
    memset((void *)dst, value, size);
    return ORTMEM_OK;
}
static ortmem_status late_event_record(void *self, uint64_t stream, uint64_t *event)
{
    late_backend *b = self;
    b->other_streams += stream != CACHE_STREAM;
    b->event_mark = b->queued;
    b->busy_left = BUSY_QUERIES;
    *event = ++b->events;
    return ORTMEM_OK;
}
/* The copies behind the event run only when a query finds it complete. */
static ortmem_status late_event_query(void *self, uint64_t event)
{
    late_backend *b = self;
    if (event == b->events && b->busy_left) {
        b->busy_left--;
        b->busy_answers++;
        return ORTMEM_E_BUSY;
    }
    for (; b->done < b->event_mark; b->done++)
        memmove((void *)b->queue[b->done].dst, (const void *)b->queue[b->done].src,
                b->queue[b->done].size);
    return ORTMEM_OK;
}
static ortmem_status late_event_destroy(void *self, uint64_t event)
{
    (void)event;
    ((late_backend *)self)->destroyed++;
    return ORTMEM_OK;
}
static void late_destroy(void *self)
{
    (void)self;
}

static ortmem_backend *late_backend_create(late_backend *state)
{
    memset(state, 0, sizeof *state);
    ortmem_backend_ops ops = {
        .struct_size = sizeof ops,
        .name = "late",
        .granularity = late_granularity,
        .reserve = late_reserve,
        .unreserve = late_unreserve,
        .create = late_create,
        .release = late_release,
        .map = late_map,
        .unmap = late_unmap,
        .set_access = late_set_access,
        .copy = late_copy_now,
        .destroy = late_destroy,
        .copy_async = late_copy_async,
        .memset_async = late_memset_async,
        .event_record = late_event_record,
        .event_query = late_event_query,
        .event_destroy = late_event_destroy,
    };
    ortmem_backend *b = NULL;
    OK(ortmem_backend_create(&ops, state, &b));
    return b;
}

static uint8_t token_byte(uint64_t token, uint64_t i)
{
    return (uint8_t)(token * 131u + i * 7u + 1u);
}

/* Writes (or checks) every byte of head 0 of layer 0's K for tokens [from, to). */
static uint64_t tokens_pass(ortmem_kv_seq *s, uint64_t from, uint64_t to, uint64_t row, int check)
{
    ortmem_kv_binding k = {.struct_size = sizeof k};
    OK(ortmem_kv_seq_binding(s, 0, 0, &k));
    uint64_t bad = 0;
    for (uint64_t t = from; t < to; t++) {
        uint8_t *p = (uint8_t *)k.base + t * k.token_stride;
        for (uint64_t i = 0; i < row; i++) {
            if (check)
                bad += p[i] != token_byte(t, i);
            else
                p[i] = token_byte(t, i);
        }
    }
    return bad;
}

typedef struct late_env {
    late_backend state;
    ortmem_backend *backend, *host;
    ortmem_authority *authority;
    ortmem_kv_cache *cache;
} late_env;

static void late_env_open(late_env *e, ortmem_kv_strategy strategy, int with_host)
{
    e->backend = late_backend_create(&e->state);
    e->host = with_host ? test_backend() : NULL;
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = 1ull << 30;
    e->authority = NULL;
    OK(ortmem_authority_create(e->backend, &ao, &e->authority));
    ortmem_kv_cache_options o = ORTMEM_KV_CACHE_OPTIONS_INIT;
    o.geometry.layers = 2;
    o.geometry.kv_heads = 2;
    o.geometry.head_dim = 64;
    o.geometry.dtype = ORTMEM_KV_F16;
    o.geometry.layout = ORTMEM_KV_HEAD_MAJOR;
    o.strategy = strategy;
    o.max_context = 4096;
    o.stream = CACHE_STREAM;
    o.host_backend = e->host;
    e->cache = NULL;
    OK(ortmem_kv_cache_create(e->authority, &o, &e->cache));
}

static void late_env_close(late_env *e)
{
    OK(ortmem_kv_cache_destroy(e->cache));
    OK(ortmem_authority_destroy(e->authority));
    OK(ortmem_backend_destroy(e->backend));
    if (e->host)
        OK(ortmem_backend_destroy(e->host));
}

#define ROW_BYTES ((uint64_t)64 * 2) /* one head of one token, f16 */

Test(kv_streams, bucket_growth_waits_for_its_stream_through_busy_events)
{
    late_env e;
    late_env_open(&e, ORTMEM_KV_BUCKET, 0);
    late_backend *state = &e.state;
    ortmem_kv_seq *s = NULL;
    OK(ortmem_kv_seq_create(e.cache, &s));

    const uint64_t row = ROW_BYTES;
    static const uint64_t lengths[] = {200, 256, 257, 700, 1500, 4096};
    uint64_t len = 0, moves = 0;
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        ortmem_kv_binding before = {.struct_size = sizeof before};
        if (len)
            OK(ortmem_kv_seq_binding(s, 0, 0, &before));
        OK(ortmem_kv_seq_append(s, lengths[i] - len));
        ortmem_kv_binding after = {.struct_size = sizeof after};
        OK(ortmem_kv_seq_binding(s, 0, 0, &after));
        moves += len && after.base != before.base;
        cr_assert_eq(state->done, state->queued, "every queued copy ran before append returned");
        cr_assert_eq(tokens_pass(s, 0, len, row, 1), 0, "tokens [0, %llu) intact at %llu",
                     (unsigned long long)len, (unsigned long long)lengths[i]);
        tokens_pass(s, len, lengths[i], row, 0);
        len = lengths[i];
    }
    cr_assert_eq(moves, 4, "256 -> 512 -> 1024 -> 2048 -> 4096");
    cr_assert_eq(state->events, moves, "one event per move");
    cr_assert_eq(state->destroyed, state->events, "every event is destroyed");
    cr_assert_eq(state->busy_answers, moves * BUSY_QUERIES, "growth queried through every busy");
    cr_assert_eq(state->other_streams, 0, "all growth work is on the cache's stream");
    cr_assert_gt(state->queued, moves, "the live prefix moves as one copy per fragment");

    OK(ortmem_kv_seq_destroy(s));
    late_env_close(&e);
}

Test(kv_streams, swap_waits_for_its_stream_before_releasing_either_side)
{
    late_env e;
    late_env_open(&e, ORTMEM_KV_STABLE, 1);
    ortmem_kv_seq *s = NULL;
    OK(ortmem_kv_seq_create(e.cache, &s));
    OK(ortmem_kv_seq_append(s, 1000));
    tokens_pass(s, 0, 1000, ROW_BYTES, 0);
    OK(ortmem_kv_seq_swap_out(s));
    cr_assert_eq(e.state.events, 1, "one event orders the device decommit after the copies");
    cr_assert_eq(e.state.done, e.state.queued, "swap-out returned after its copies ran");
    cr_assert_gt(e.state.queued, 1, "one copy per fragment");
    OK(ortmem_kv_seq_swap_in(s));
    cr_assert_eq(e.state.events, 2);
    cr_assert_eq(e.state.done, e.state.queued, "swap-in returned after its copies ran");
    cr_assert_eq(tokens_pass(s, 0, 1000, ROW_BYTES, 1), 0, "byte for byte after the round trip");
    cr_assert_eq(e.state.busy_answers, 2 * BUSY_QUERIES);
    cr_assert_eq(e.state.destroyed, 2);
    cr_assert_eq(e.state.other_streams, 0, "swap copies run on the cache's stream");
    OK(ortmem_kv_seq_destroy(s));
    late_env_close(&e);
}

Test(kv_streams, a_fork_copies_its_partial_granules_on_the_stream)
{
    late_env e;
    late_env_open(&e, ORTMEM_KV_BUCKET, 0);
    ortmem_kv_seq *parent = NULL, *child = NULL;
    OK(ortmem_kv_seq_create(e.cache, &parent));
    OK(ortmem_kv_seq_append(parent, 300)); /* 300 of a 512-token bucket: partial granules */
    tokens_pass(parent, 0, 300, ROW_BYTES, 0);
    OK(ortmem_kv_seq_fork(parent, &child));
    cr_assert_eq(e.state.events, 1, "the fork waits on one event");
    cr_assert_gt(e.state.queued, 0, "the partial granules are copied on the stream");
    cr_assert_eq(e.state.done, e.state.queued, "the fork returned after its copies ran");
    cr_assert_eq(e.state.other_streams, 0);
    cr_assert_eq(tokens_pass(child, 0, 300, ROW_BYTES, 1), 0,
                 "the child reads the parent's tokens");
    OK(ortmem_kv_seq_destroy(child));
    OK(ortmem_kv_seq_destroy(parent));
    late_env_close(&e);
}
