/* libortmem_torch: the pluggable allocator's two functions over one ortmem
 * arena per device and tag, and the control API (ortmem_torch.h). Public
 * ortmem headers only (scripts/check-layers.py rule 'adapters'). */
#include "ortmem_torch.h"

#include <ortmem/core.h>
#include <ortmem/governance.h>
#include <ortmem/vmm.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH_MAX 64   /* frees behind one event */
#define POLL_EVERY 16  /* allocs between two polls of the release queue */
#define DRAIN_MS 60000 /* a flush waits this long for the device at most */
#define DETAIL_MAX 1024

typedef struct torch_tag {
    ortmem_holder *holder;
    ortmem_arena *arena;
    uintptr_t base;
    size_t size;
} torch_tag;

typedef struct torch_device {
    atomic_bool ready;
    ortmem_backend *backend;
    ortmem_authority *authority;
    torch_tag tags[ORTMEM_TORCH_TAGS];
    pthread_mutex_t lock; /* the open batch and the fences */
    void *batch[BATCH_MAX];
    ortmem_arena *batch_arena[BATCH_MAX];
    size_t batch_count;
    uint64_t batch_stream;
    ortmem_fence **fences; /* batches' events still waited on */
    size_t fence_count, fence_cap;
    uint64_t pending_frees;
    atomic_size_t queued; /* fence_count + batch_count, read without the lock */
    atomic_uint allocs_since_poll;
} torch_device;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* device creation, options */
static ortmem_torch_options g_options = ORTMEM_TORCH_OPTIONS_INIT;
static torch_device g_devices[ORTMEM_TORCH_MAX_DEVICES];
static size_t g_device_count; /* devices created and not yet destroyed */

static pthread_mutex_t g_error_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_error[DETAIL_MAX + 64]; /* the status's name, then the text */
static atomic_uint_fast64_t g_failures;
static __thread char t_error[DETAIL_MAX + 64];
static __thread int t_tag = ORTMEM_ROLE_OTHER;

/* ---- failures ---- */

__attribute__((format(printf, 2, 3))) static int fail(ortmem_status st, const char *fmt, ...)
{
    char text[DETAIL_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&g_error_lock);
    snprintf(g_error, sizeof g_error, "%s: %s", ortmem_status_str(st), text);
    pthread_mutex_unlock(&g_error_lock);
    return (int)st;
}

/* fail() with ortmem's detail of the call that just failed appended. */
static int fail_ortmem(ortmem_status st, const char *what)
{
    return fail(st, "ortmem_torch: %s: %s", what, ortmem_last_error());
}

const char *ortmem_torch_last_error(void)
{
    pthread_mutex_lock(&g_error_lock);
    snprintf(t_error, sizeof t_error, "%s", g_error);
    pthread_mutex_unlock(&g_error_lock);
    return t_error;
}

uint64_t ortmem_torch_failures(void)
{
    return atomic_load(&g_failures);
}

/* ---- devices ---- */

static const int tag_priority[ORTMEM_TORCH_TAGS] = {30, 20, 10, 0};

static void device_teardown(torch_device *d)
{
    for (int t = 0; t < ORTMEM_TORCH_TAGS; t++) {
        if (d->tags[t].arena)
            (void)ortmem_arena_destroy(d->tags[t].arena, 1);
        if (d->tags[t].holder)
            (void)ortmem_holder_unregister(d->tags[t].holder);
    }
    for (size_t i = 0; i < d->fence_count; i++)
        (void)ortmem_fence_destroy(d->fences[i]);
    free(d->fences);
    if (d->authority)
        (void)ortmem_authority_destroy(d->authority);
    if (d->backend)
        (void)ortmem_backend_destroy(d->backend);
    pthread_mutex_destroy(&d->lock);
    memset(d, 0, sizeof *d);
}

static ortmem_status create_backend(int ordinal, ortmem_backend **out)
{
    if (g_options.backend == ORTMEM_TORCH_BACKEND_CPU) {
        ortmem_cpu_options co = ORTMEM_CPU_OPTIONS_INIT;
        co.granule = (size_t)g_options.granule_bytes;
        return ortmem_cpu_backend_create(&co, out);
    }
    ortmem_cuda_options co = ORTMEM_CUDA_OPTIONS_INIT;
    co.ordinal = ordinal;
    co.granule = (size_t)g_options.granule_bytes;
    return ortmem_cuda_backend_create(&co, out);
}

static ortmem_status create_tag(torch_device *d, int t)
{
    ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
    ho.name = ortmem_role_name((ortmem_role)t);
    ho.role = (ortmem_role)t;
    ho.priority = tag_priority[t];
    ortmem_status st = ortmem_holder_register(d->authority, &ho, &d->tags[t].holder);
    ortmem_account account;
    if (st == ORTMEM_OK)
        st = ortmem_holder_account(d->tags[t].holder, &account);
    if (st != ORTMEM_OK)
        return st;
    ortmem_arena_options ao = ORTMEM_ARENA_OPTIONS_INIT;
    ao.capacity = (size_t)g_options.arena_bytes;
    if (ao.capacity == 0)
        ao.capacity =
            g_options.backend == ORTMEM_TORCH_BACKEND_CPU ? (size_t)1 << 30 : (size_t)64 << 30;
    if (g_options.cache_bytes != UINT64_MAX)
        ao.cache_bytes = (size_t)g_options.cache_bytes;
    ao.min_align = 512; /* what PyTorch's caching allocator hands out */
    ao.account = &account;
    st = ortmem_arena_create(d->backend, &ao, &d->tags[t].arena);
    if (st != ORTMEM_OK)
        return st;
    /* Frees reach the arena only once their stream is done, so its cached
     * extents are idle and pressure may decommit them. */
    st = ortmem_holder_set_pressure(d->tags[t].holder, ortmem_arena_pressure, d->tags[t].arena);
    ortmem_region *region = ortmem_arena_region(d->tags[t].arena);
    d->tags[t].base = (uintptr_t)ortmem_region_base(region);
    d->tags[t].size = ortmem_region_size(region);
    return st;
}

/* Under g_lock. */
static ortmem_status device_create(int ordinal, torch_device *d)
{
    memset(d, 0, sizeof *d);
    pthread_mutex_init(&d->lock, NULL);
    ortmem_status st = create_backend(ordinal, &d->backend);
    if (st == ORTMEM_OK) {
        ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
        ao.limit_bytes = g_options.budget_bytes ? g_options.budget_bytes : (uint64_t)1 << 50;
        st = ortmem_authority_create(d->backend, &ao, &d->authority);
    }
    for (int t = 0; st == ORTMEM_OK && t < ORTMEM_TORCH_TAGS; t++)
        st = create_tag(d, t);
    if (st != ORTMEM_OK) {
        char detail[DETAIL_MAX];
        snprintf(detail, sizeof detail, "%s", ortmem_last_error());
        device_teardown(d);
        return (ortmem_status)fail(st, "ortmem_torch: creating device %d (%s backend): %s", ordinal,
                                   g_options.backend == ORTMEM_TORCH_BACKEND_CPU ? "cpu" : "cuda",
                                   detail);
    }
    atomic_store_explicit(&d->ready, true, memory_order_release);
    g_device_count++;
    return ORTMEM_OK;
}

static ortmem_status device_get(int ordinal, torch_device **out)
{
    if (ordinal < 0 || ordinal >= ORTMEM_TORCH_MAX_DEVICES)
        return (ortmem_status)fail(ORTMEM_E_RANGE, "ortmem_torch: device %d outside [0, %d)",
                                   ordinal, ORTMEM_TORCH_MAX_DEVICES);
    torch_device *d = &g_devices[ordinal];
    *out = d;
    if (atomic_load_explicit(&d->ready, memory_order_acquire))
        return ORTMEM_OK;
    pthread_mutex_lock(&g_lock);
    ortmem_status st = atomic_load(&d->ready) ? ORTMEM_OK : device_create(ordinal, d);
    pthread_mutex_unlock(&g_lock);
    return st;
}

static torch_device *device_if_ready(int ordinal)
{
    if (ordinal < 0 || ordinal >= ORTMEM_TORCH_MAX_DEVICES)
        return NULL;
    torch_device *d = &g_devices[ordinal];
    return atomic_load_explicit(&d->ready, memory_order_acquire) ? d : NULL;
}

static int tag_of(torch_device *d, const void *ptr)
{
    uintptr_t p = (uintptr_t)ptr;
    for (int t = 0; t < ORTMEM_TORCH_TAGS; t++) {
        if (p >= d->tags[t].base && p - d->tags[t].base < d->tags[t].size)
            return t;
    }
    return -1;
}

/* ---- the release queue ---- */

/* Under d->lock: the open batch goes behind one event on its stream. */
static void close_batch_locked(torch_device *d)
{
    if (d->batch_count == 0)
        return;
    ortmem_fence *fence = NULL;
    ortmem_status st = ORTMEM_OK;
    if (d->fence_count == d->fence_cap) {
        size_t cap = d->fence_cap ? d->fence_cap * 2 : 16;
        ortmem_fence **grown = realloc(d->fences, cap * sizeof *grown);
        if (grown) {
            d->fences = grown;
            d->fence_cap = cap;
        } else {
            st = ORTMEM_E_NOMEM;
        }
    }
    if (st == ORTMEM_OK)
        st = ortmem_fence_create_event(d->backend, d->batch_stream, &fence);
    if (st != ORTMEM_OK) {
        /* Without an event the stream cannot be followed: the batch waits
         * no longer (the caller's next synchronize is its only order). */
        fail_ortmem(st, "recording the event for a batch of frees");
        for (size_t i = 0; i < d->batch_count; i++)
            (void)ortmem_arena_free(d->batch_arena[i], d->batch[i]);
        d->batch_count = 0;
        return;
    }
    for (size_t i = 0; i < d->batch_count; i++) {
        st = ortmem_arena_free_after(d->batch_arena[i], d->batch[i], fence);
        if (st != ORTMEM_OK)
            fail_ortmem(st, "queueing a free behind its stream");
        else
            d->pending_frees++;
    }
    d->fences[d->fence_count++] = fence;
    d->batch_count = 0;
}

static void note_queued_locked(torch_device *d)
{
    atomic_store(&d->queued, d->fence_count + d->batch_count);
}

/* Under d->lock: fences whose frees were all carried out are destroyed. */
static void settle_locked(torch_device *d, const ortmem_retire_report *report)
{
    size_t kept = 0;
    for (size_t i = 0; i < d->fence_count; i++) {
        if (ortmem_fence_destroy(d->fences[i]) != ORTMEM_OK)
            d->fences[kept++] = d->fences[i];
    }
    d->fence_count = kept;
    d->pending_frees = report->pending;
    note_queued_locked(d);
}

/* Under d->lock: the open batch closes (so frees do not wait for a full
 * one) and the frees whose events completed are carried out. */
static void poll_locked(torch_device *d)
{
    close_batch_locked(d);
    ortmem_retire_report report = {.struct_size = sizeof report};
    if (ortmem_authority_poll(d->authority, &report) == ORTMEM_OK)
        settle_locked(d, &report);
}

static ortmem_status flush_device(torch_device *d)
{
    pthread_mutex_lock(&d->lock);
    close_batch_locked(d);
    ortmem_retire_report report = {.struct_size = sizeof report};
    ortmem_status st = ORTMEM_OK;
    if (d->fence_count) {
        st = ortmem_authority_drain(d->authority, DRAIN_MS, &report);
        settle_locked(d, &report);
    }
    note_queued_locked(d);
    pthread_mutex_unlock(&d->lock);
    return st;
}

/* ---- the pluggable allocator ---- */

void *ortmem_torch_alloc(ssize_t size, int device, void *stream)
{
    (void)stream; /* the arena serves any stream; frees are what is ordered */
    if (size <= 0)
        return NULL;
    torch_device *d = NULL;
    if (device_get(device, &d) != ORTMEM_OK) {
        atomic_fetch_add(&g_failures, 1);
        return NULL;
    }
    if (atomic_load(&d->queued) && atomic_fetch_add(&d->allocs_since_poll, 1) + 1 >= POLL_EVERY) {
        atomic_store(&d->allocs_since_poll, 0);
        pthread_mutex_lock(&d->lock);
        poll_locked(d);
        pthread_mutex_unlock(&d->lock);
    }
    int t = t_tag;
    void *p = NULL;
    ortmem_status st = ortmem_arena_alloc(d->tags[t].arena, (size_t)size, 0, &p);
    if ((st == ORTMEM_E_BUDGET || st == ORTMEM_E_NOMEM) && atomic_load(&d->queued)) {
        /* Memory freed on a stream still running may be what is missing. */
        (void)flush_device(d);
        st = ortmem_arena_alloc(d->tags[t].arena, (size_t)size, 0, &p);
    }
    if (st != ORTMEM_OK) {
        char what[128];
        snprintf(what, sizeof what, "alloc of %zd bytes on device %d, tag %s", size, device,
                 ortmem_role_name((ortmem_role)t));
        fail_ortmem(st, what);
        atomic_fetch_add(&g_failures, 1);
        return NULL;
    }
    return p;
}

void ortmem_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
    (void)size;
    if (!ptr)
        return;
    torch_device *d = device_if_ready(device);
    int t = d ? tag_of(d, ptr) : -1;
    if (t < 0) {
        fail(ORTMEM_E_NOT_FOUND,
             "ortmem_torch: free of %p on device %d: not an allocation of "
             "this library",
             ptr, device);
        return;
    }
    bool ordered = g_options.ordered_frees < 0 ? g_options.backend == ORTMEM_TORCH_BACKEND_CUDA
                                               : g_options.ordered_frees > 0;
    if (!ordered) {
        ortmem_status st = ortmem_arena_free(d->tags[t].arena, ptr);
        if (st != ORTMEM_OK)
            fail_ortmem(st, "free");
        return;
    }
    pthread_mutex_lock(&d->lock);
    if (d->batch_count && d->batch_stream != (uint64_t)(uintptr_t)stream)
        close_batch_locked(d);
    d->batch_stream = (uint64_t)(uintptr_t)stream;
    d->batch[d->batch_count] = ptr;
    d->batch_arena[d->batch_count++] = d->tags[t].arena;
    if (d->batch_count == BATCH_MAX)
        close_batch_locked(d);
    note_queued_locked(d);
    pthread_mutex_unlock(&d->lock);
}

/* ---- control ---- */

int ortmem_torch_init(const ortmem_torch_options *options)
{
    ortmem_torch_options o = ORTMEM_TORCH_OPTIONS_INIT;
    if (options) {
        if (options->struct_size < sizeof(size_t) || options->struct_size > sizeof o)
            return fail(ORTMEM_E_INVALID, "ortmem_torch init: struct_size %zu (this library: %zu)",
                        options->struct_size, sizeof o);
        memcpy(&o, options, options->struct_size);
        o.struct_size = sizeof o;
    }
    if (o.backend != ORTMEM_TORCH_BACKEND_CUDA && o.backend != ORTMEM_TORCH_BACKEND_CPU)
        return fail(ORTMEM_E_INVALID, "ortmem_torch init: unknown backend %d", (int)o.backend);
    pthread_mutex_lock(&g_lock);
    int st = ORTMEM_OK;
    if (g_device_count && memcmp(&o, &g_options, sizeof o) != 0)
        st = fail(ORTMEM_E_STATE,
                  "ortmem_torch init: %zu devices exist already with other "
                  "options (ortmem_torch_shutdown first)",
                  g_device_count);
    else
        g_options = o;
    pthread_mutex_unlock(&g_lock);
    return st;
}

int ortmem_torch_shutdown(void)
{
    pthread_mutex_lock(&g_lock);
    uint64_t live = 0;
    for (int i = 0; i < ORTMEM_TORCH_MAX_DEVICES; i++) {
        torch_device *d = device_if_ready(i);
        if (!d)
            continue;
        (void)flush_device(d);
        for (int t = 0; t < ORTMEM_TORCH_TAGS; t++) {
            ortmem_arena_stats s = {.struct_size = sizeof s};
            if (ortmem_arena_stats_get(d->tags[t].arena, &s) == ORTMEM_OK)
                live += s.live_allocations;
        }
    }
    int st = ORTMEM_OK;
    if (live) {
        st = fail(ORTMEM_E_BUSY, "ortmem_torch shutdown: %llu allocations are still live",
                  (unsigned long long)live);
    } else {
        for (int i = 0; i < ORTMEM_TORCH_MAX_DEVICES; i++) {
            if (device_if_ready(i))
                device_teardown(&g_devices[i]);
        }
        g_device_count = 0;
    }
    pthread_mutex_unlock(&g_lock);
    return st;
}

int ortmem_torch_set_tag(const char *tag)
{
    ortmem_role role = ORTMEM_ROLE_OTHER;
    if (tag && tag[0] && ortmem_role_parse(tag, &role) != ORTMEM_OK)
        return fail(ORTMEM_E_INVALID,
                    "ortmem_torch: tag \"%s\" is none of weights, kv, workspace, other", tag);
    t_tag = (int)role;
    return ORTMEM_OK;
}

const char *ortmem_torch_get_tag(void)
{
    return ortmem_role_name((ortmem_role)t_tag);
}

static int parse_tag(const char *tag, int *t)
{
    ortmem_role role = ORTMEM_ROLE_OTHER;
    if (!tag || ortmem_role_parse(tag, &role) != ORTMEM_OK)
        return fail(ORTMEM_E_INVALID,
                    "ortmem_torch: tag \"%s\" is none of weights, kv, "
                    "workspace, other",
                    tag ? tag : "(null)");
    *t = (int)role;
    return ORTMEM_OK;
}

int ortmem_torch_set_budget(int device, uint64_t bytes)
{
    torch_device *d = NULL;
    ortmem_status st = device_get(device, &d);
    if (st != ORTMEM_OK)
        return (int)st;
    if (bytes == 0)
        return fail(ORTMEM_E_INVALID, "ortmem_torch: a budget of 0 bytes");
    st = ortmem_authority_set_limit(d->authority, bytes, NULL);
    return st == ORTMEM_OK ? ORTMEM_OK : fail_ortmem(st, "set budget");
}

static void add_arena_stats(ortmem_torch_stats *s, ortmem_arena *arena)
{
    ortmem_arena_stats a = {.struct_size = sizeof a};
    if (ortmem_arena_stats_get(arena, &a) != ORTMEM_OK)
        return;
    s->allocated_bytes += a.allocated_bytes;
    s->allocated_peak_bytes += a.allocated_peak_bytes;
    s->live_allocations += a.live_allocations;
    s->reserved_bytes += a.committed_bytes;
    s->reserved_peak_bytes += a.committed_peak_bytes;
    s->cached_bytes += a.cached_bytes;
    s->allocs += a.allocs;
    s->frees += a.frees;
    s->failed_allocs += a.failed_allocs;
    s->asleep += a.asleep;
    s->backup_bytes += a.backup_bytes;
}

int ortmem_torch_stats_get(int device, const char *tag, ortmem_torch_stats *out)
{
    if (!out || out->struct_size < sizeof(size_t))
        return fail(ORTMEM_E_INVALID, "ortmem_torch stats: out is NULL or its struct_size unset");
    torch_device *d = device_if_ready(device);
    if (!d)
        return fail(ORTMEM_E_NOT_FOUND, "ortmem_torch stats: device %d was never used", device);
    int t = -1;
    if (tag && parse_tag(tag, &t) != ORTMEM_OK)
        return ORTMEM_E_INVALID;
    ortmem_torch_stats s;
    memset(&s, 0, sizeof s);
    for (int i = 0; i < ORTMEM_TORCH_TAGS; i++) {
        if (t >= 0 && i != t)
            continue;
        add_arena_stats(&s, d->tags[i].arena);
        ortmem_holder_report h;
        memset(&h, 0, sizeof h);
        if (ortmem_holder_report_get(d->tags[i].holder, &h) == ORTMEM_OK)
            s.owned_bytes += h.owned_bytes;
    }
    ortmem_authority_report r = {.struct_size = sizeof r};
    if (ortmem_authority_report_get(d->authority, &r, NULL, 0) == ORTMEM_OK) {
        s.limit_bytes = r.limit_bytes;
        s.available_bytes = r.available_bytes;
    }
    ortmem_vmm_stats v = {.struct_size = sizeof v};
    if (ortmem_backend_stats(d->backend, &v) == ORTMEM_OK)
        s.device_owned_bytes = v.owned_bytes;
    pthread_mutex_lock(&d->lock);
    s.pending_frees = d->pending_frees + d->batch_count;
    pthread_mutex_unlock(&d->lock);
    size_t n = out->struct_size < sizeof s ? out->struct_size : sizeof s;
    s.struct_size = out->struct_size;
    memcpy(out, &s, n);
    return ORTMEM_OK;
}

int ortmem_torch_sleep(int device, const char *tag, int backup)
{
    int t = -1;
    torch_device *d = device_if_ready(device);
    if (!d)
        return fail(ORTMEM_E_NOT_FOUND, "ortmem_torch sleep: device %d was never used", device);
    if (parse_tag(tag, &t) != ORTMEM_OK)
        return ORTMEM_E_INVALID;
    ortmem_status st = flush_device(d);
    if (st != ORTMEM_OK)
        return fail_ortmem(st, "sleep: waiting for pending frees");
    ortmem_arena_sleep_options o = ORTMEM_ARENA_SLEEP_OPTIONS_INIT;
    o.backup = backup != 0;
    st = ortmem_arena_sleep(d->tags[t].arena, &o);
    return st == ORTMEM_OK ? ORTMEM_OK : fail_ortmem(st, "sleep");
}

int ortmem_torch_wake(int device, const char *tag)
{
    int t = -1;
    torch_device *d = device_if_ready(device);
    if (!d)
        return fail(ORTMEM_E_NOT_FOUND, "ortmem_torch wake: device %d was never used", device);
    if (parse_tag(tag, &t) != ORTMEM_OK)
        return ORTMEM_E_INVALID;
    ortmem_status st = ortmem_arena_wake(d->tags[t].arena);
    return st == ORTMEM_OK ? ORTMEM_OK : fail_ortmem(st, "wake");
}

int ortmem_torch_flush(int device)
{
    int result = ORTMEM_OK;
    for (int i = 0; i < ORTMEM_TORCH_MAX_DEVICES; i++) {
        if (device >= 0 && i != device)
            continue;
        torch_device *d = device_if_ready(i);
        ortmem_status st = d ? flush_device(d) : ORTMEM_OK;
        if (st != ORTMEM_OK)
            result = fail_ortmem(st, "flush");
    }
    return result;
}
