/* ortmem-ort: an OrtAllocator over an ortmem arena charged to a holder. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "ort_internal.h"

#define LAST_ERROR_CAPACITY 512
#define DEFAULT_CAPACITY ((uint64_t)16 << 30)

struct ortmem_ort_allocator {
    OrtAllocator ort_allocator; /* first: ORT hands back this pointer */
    ortmem_ort *ort;
    OrtMemoryInfo *memory_info;
    ortmem_holder *holder;
    ortmem_arena *arena;
    pthread_mutex_t lock; /* the counters and last_error */
    uint64_t allocs, reserves, frees, failed;
    char last_error[LAST_ERROR_CAPACITY];
};

static ortmem_ort_allocator *from_ort(const OrtAllocator *a)
{
    return (ortmem_ort_allocator *)(uintptr_t)a;
}

static void *allocate(OrtAllocator *this_, size_t size, int reserve)
{
    ortmem_ort_allocator *a = from_ort(this_);
    void *p = NULL;
    /* ORT may ask for 0 bytes (an empty tensor); it still frees the pointer. */
    ortmem_status st = ortmem_arena_alloc(a->arena, size != 0 ? size : 1, 0, &p);
    pthread_mutex_lock(&a->lock);
    if (st == ORTMEM_OK) {
        a->allocs++;
        a->reserves += reserve != 0;
    } else {
        a->failed++;
        /* ortmem_last_error is this thread's; keep it where the caller can read it. */
        snprintf(a->last_error, sizeof(a->last_error), "%s of %zu bytes refused: %s: %s",
                 reserve ? "Reserve" : "Alloc", size, ortmem_status_str(st), ortmem_last_error());
        p = NULL;
    }
    pthread_mutex_unlock(&a->lock);
    return p;
}

static void *ORT_API_CALL ort_alloc(OrtAllocator *this_, size_t size)
{
    return allocate(this_, size, 0);
}

static void *ORT_API_CALL ort_reserve(OrtAllocator *this_, size_t size)
{
    return allocate(this_, size, 1);
}

static void ORT_API_CALL ort_free(OrtAllocator *this_, void *p)
{
    if (p == NULL)
        return;
    ortmem_ort_allocator *a = from_ort(this_);
    ortmem_status st = ortmem_arena_free(a->arena, p);
    pthread_mutex_lock(&a->lock);
    if (st == ORTMEM_OK)
        a->frees++;
    else
        snprintf(a->last_error, sizeof(a->last_error), "Free of %p refused: %s: %s", p,
                 ortmem_status_str(st), ortmem_last_error());
    pthread_mutex_unlock(&a->lock);
}

static const OrtMemoryInfo *ORT_API_CALL ort_info(const OrtAllocator *this_)
{
    return from_ort(this_)->memory_info;
}

static ortmem_status resolve_authority(ortmem_ort *ort, const OrtMemoryInfo *info,
                                       const ortmem_ort_allocator_options *o,
                                       ortmem_device_kind *kind, int *ordinal,
                                       ortmem_authority **authority)
{
    *kind = ORTMEM_DEVICE_CPU;
    *ordinal = 0;
    if (info != NULL) {
        ortmem_status st = ort_device_of(ort, info, kind, ordinal);
        if (st != ORTMEM_OK)
            return st;
    }
    if (o->authority != NULL) {
        *authority = o->authority;
        return ort_check_backend(o->authority, *kind, "ortmem_ort_allocator_create");
    }
    ortmem_device_id id;
    ortmem_status st = ortmem_device_get(*kind, *ordinal, NULL, &id);
    if (st == ORTMEM_OK)
        st = ortmem_device_authority(id, authority);
    return st;
}

ortmem_status ortmem_ort_allocator_create(ortmem_ort *ort, const OrtMemoryInfo *memory_info,
                                          const ortmem_ort_allocator_options *options,
                                          ortmem_ort_allocator **out)
{
    ortmem_ort_allocator_options o = ORTMEM_ORT_ALLOCATOR_OPTIONS_INIT;
    if (ort == NULL || out == NULL)
        return ortmem_error_set(ORTMEM_E_INVALID,
                                "ortmem_ort_allocator_create: ort or out is NULL");
    if (options != NULL) {
        if (options->struct_size < sizeof(o))
            return ortmem_error_set(ORTMEM_E_INVALID,
                                    "ortmem_ort_allocator_create: options struct_size %zu < %zu",
                                    options->struct_size, sizeof(o));
        o = *options;
    }
    ortmem_device_kind kind;
    int ordinal;
    ortmem_authority *authority = NULL;
    ortmem_status st = resolve_authority(ort, memory_info, &o, &kind, &ordinal, &authority);
    if (st != ORTMEM_OK)
        return st;

    ortmem_ort_allocator *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return ortmem_error_set(ORTMEM_E_NOMEM, "ortmem_ort_allocator_create: %zu bytes",
                                sizeof(*a));
    a->ort = ort;
    pthread_mutex_init(&a->lock, NULL);
    const OrtApi *api = ortmem_ort_api(ort);
    st = ortmem_ort_check(
        ort,
        api->CreateMemoryInfo(kind == ORTMEM_DEVICE_CUDA ? ORT_CUDA_NAME : ORT_CPU_NAME,
                              OrtDeviceAllocator, ordinal, OrtMemTypeDefault, &a->memory_info),
        "CreateMemoryInfo");
    if (st != ORTMEM_OK)
        goto fail;
    ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
    ho.name = o.holder_name != NULL ? o.holder_name : "ort";
    ho.role = ORTMEM_ROLE_WORKSPACE;
    ho.priority = o.priority;
    st = ortmem_holder_register(authority, &ho, &a->holder);
    if (st != ORTMEM_OK)
        goto fail;
    ortmem_account account;
    account.struct_size = sizeof(account);
    st = ortmem_holder_account(a->holder, &account);
    if (st != ORTMEM_OK)
        goto fail;
    ortmem_arena_options ao = ORTMEM_ARENA_OPTIONS_INIT;
    ao.capacity = o.capacity != 0 ? o.capacity : DEFAULT_CAPACITY;
    ao.cache_bytes = o.cache_bytes;
    ao.account = &account;
    st = ortmem_arena_create(ortmem_authority_backend(authority), &ao, &a->arena);
    if (st != ORTMEM_OK)
        goto fail;
    /* Under pressure the arena gives back its cached empty extents. */
    st = ortmem_holder_set_pressure(a->holder, ortmem_arena_pressure, a->arena);
    if (st != ORTMEM_OK)
        goto fail;
    a->ort_allocator.version = ORT_API_VERSION;
    a->ort_allocator.Alloc = ort_alloc;
    a->ort_allocator.Free = ort_free;
    a->ort_allocator.Info = ort_info;
    a->ort_allocator.Reserve = ort_reserve;
    *out = a;
    return ORTMEM_OK;

fail:;
    char detail[LAST_ERROR_CAPACITY];
    snprintf(detail, sizeof(detail), "%s", ortmem_last_error());
    if (a->arena != NULL)
        ortmem_arena_destroy(a->arena, 0);
    if (a->holder != NULL)
        ortmem_holder_unregister(a->holder);
    if (a->memory_info != NULL)
        api->ReleaseMemoryInfo(a->memory_info);
    pthread_mutex_destroy(&a->lock);
    free(a);
    return ortmem_error_set(st, "ortmem_ort_allocator_create: %s", detail);
}

OrtAllocator *ortmem_ort_allocator_ort(ortmem_ort_allocator *allocator)
{
    return allocator != NULL ? &allocator->ort_allocator : NULL;
}

const OrtMemoryInfo *ortmem_ort_allocator_memory_info(const ortmem_ort_allocator *allocator)
{
    return allocator != NULL ? allocator->memory_info : NULL;
}

ortmem_holder *ortmem_ort_allocator_holder(ortmem_ort_allocator *allocator)
{
    return allocator != NULL ? allocator->holder : NULL;
}

ortmem_status ortmem_ort_allocator_register(ortmem_ort_allocator *allocator, OrtEnv *env)
{
    if (allocator == NULL || env == NULL)
        return ortmem_error_set(ORTMEM_E_INVALID, "ortmem_ort_allocator_register: NULL argument");
    return ortmem_ort_check(
        allocator->ort,
        ortmem_ort_api(allocator->ort)->RegisterAllocator(env, &allocator->ort_allocator),
        "RegisterAllocator");
}

ortmem_status ortmem_ort_allocator_unregister(ortmem_ort_allocator *allocator, OrtEnv *env)
{
    if (allocator == NULL || env == NULL)
        return ortmem_error_set(ORTMEM_E_INVALID, "ortmem_ort_allocator_unregister: NULL argument");
    return ortmem_ort_check(
        allocator->ort,
        ortmem_ort_api(allocator->ort)->UnregisterAllocator(env, allocator->memory_info),
        "UnregisterAllocator");
}

ortmem_status ortmem_ort_allocator_stats_get(ortmem_ort_allocator *allocator,
                                             ortmem_ort_allocator_stats *stats)
{
    if (allocator == NULL || stats == NULL || stats->struct_size < sizeof(*stats))
        return ortmem_error_set(ORTMEM_E_INVALID,
                                "ortmem_ort_allocator_stats_get: NULL argument or struct_size "
                                "below %zu",
                                sizeof(*stats));
    ortmem_arena_stats as;
    as.struct_size = sizeof(as);
    ortmem_status st = ortmem_arena_stats_get(allocator->arena, &as);
    if (st != ORTMEM_OK)
        return st;
    pthread_mutex_lock(&allocator->lock);
    stats->allocs = allocator->allocs;
    stats->reserves = allocator->reserves;
    stats->frees = allocator->frees;
    stats->failed = allocator->failed;
    pthread_mutex_unlock(&allocator->lock);
    stats->live = as.live_allocations;
    stats->live_bytes = as.allocated_bytes;
    stats->peak_bytes = as.allocated_peak_bytes;
    stats->committed_bytes = as.committed_bytes;
    return ORTMEM_OK;
}

void ortmem_ort_allocator_last_error(ortmem_ort_allocator *allocator, char *buffer, size_t capacity)
{
    if (buffer == NULL || capacity == 0)
        return;
    if (allocator == NULL) {
        buffer[0] = '\0';
        return;
    }
    pthread_mutex_lock(&allocator->lock);
    snprintf(buffer, capacity, "%s", allocator->last_error);
    pthread_mutex_unlock(&allocator->lock);
}

ortmem_status ortmem_ort_allocator_destroy(ortmem_ort_allocator *allocator)
{
    if (allocator == NULL)
        return ORTMEM_OK;
    ortmem_status st = ortmem_arena_destroy(allocator->arena, 0);
    if (st != ORTMEM_OK)
        return ortmem_error_set(st, "ortmem_ort_allocator_destroy: %s", ortmem_last_error());
    allocator->arena = NULL;
    st = ortmem_holder_unregister(allocator->holder);
    ortmem_ort_api(allocator->ort)->ReleaseMemoryInfo(allocator->memory_info);
    pthread_mutex_destroy(&allocator->lock);
    free(allocator);
    return st;
}
