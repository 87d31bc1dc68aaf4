#include "stress_workloads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ortmem/ortmem.h>

#define G ((size_t)64 * 1024)
#define THREADS 4
#define GRANULES 16
#define ITERATIONS 400
#define PREFIX_SEED 777

static stress_outcome fail(const char *what, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static stress_outcome fail(const char *what, const char *fmt, ...)
{
    stress_outcome o = {what, ""};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o.detail, sizeof o.detail, fmt, ap);
    va_end(ap);
    return o;
}

static uint64_t next_random(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static uint8_t pattern_at(uint64_t seed, size_t i)
{
    return (uint8_t)((seed * 0x9e3779b97f4a7c15ULL + i * 0xbf58476d1ce4e5b9ULL) >> 56) | 1;
}

static void fill(uint8_t *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i += 64)
        p[i] = pattern_at(seed, i);
}

static bool holds(const uint8_t *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i += 64) {
        if (p[i] != pattern_at(seed, i))
            return false;
    }
    return true;
}

static ortmem_backend *small_backend(void)
{
    ortmem_cpu_options opt = ORTMEM_CPU_OPTIONS_INIT;
    opt.granule = G;
    ortmem_backend *b = NULL;
    return ortmem_cpu_backend_create(&opt, &b) == ORTMEM_OK ? b : NULL;
}

static ortmem_vmm_stats stats(ortmem_backend *b)
{
    ortmem_vmm_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    (void)ortmem_backend_stats(b, &s);
    return s;
}

/* ---- regions, shares and the pool ---- */

typedef struct region_worker {
    ortmem_backend *backend;
    ortmem_region *prefix;
    uint64_t seed;
    int corruptions;
    int failures;
    char last_error[256];
} region_worker;

static void *region_work(void *arg)
{
    region_worker *w = arg;
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    opt.size = GRANULES * G;
    ortmem_region *r;
    if (ortmem_region_create(w->backend, &opt, &r) != ORTMEM_OK) {
        w->failures++;
        return NULL;
    }
    uint8_t *base = ortmem_region_base(r);
    uint64_t written[GRANULES] = {0};
    bool shared[GRANULES] = {0};
    uint64_t s = w->seed;
    for (int it = 0; it < ITERATIONS; it++) {
        size_t g = next_random(&s) % GRANULES;
        bool empty = !written[g] && !shared[g];
        ortmem_status st = ORTMEM_OK;
        switch (next_random(&s) % 4) {
        case 0:
            if (empty && (st = ortmem_region_commit(r, g * G, G)) == ORTMEM_OK) {
                written[g] = next_random(&s) | 1;
                fill(base + g * G, G, written[g]);
            }
            break;
        case 1:
            if (!empty && (st = ortmem_region_decommit(r, g * G, G)) == ORTMEM_OK) {
                written[g] = 0;
                shared[g] = false;
            }
            break;
        case 2:
            if (empty && (st = ortmem_region_share(r, g * G, w->prefix, 0, G,
                                                   ORTMEM_ACCESS_READ)) == ORTMEM_OK)
                shared[g] = true;
            break;
        default:
            for (size_t k = 0; k < GRANULES; k++) {
                if (written[k] && !holds(base + k * G, G, written[k]))
                    w->corruptions++;
                if (shared[k] && !holds(base + k * G, G, PREFIX_SEED))
                    w->corruptions++;
            }
        }
        if (st != ORTMEM_OK) {
            w->failures++;
            snprintf(w->last_error, sizeof w->last_error, "%s", ortmem_last_error());
        }
    }
    if (ortmem_region_destroy(r) != ORTMEM_OK)
        w->failures++;
    return NULL;
}

stress_outcome stress_regions_shares_pool(void)
{
    ortmem_backend *b = small_backend();
    if (!b)
        return fail("backend", "%s", ortmem_last_error());
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    opt.size = G;
    ortmem_region *prefix;
    if (ortmem_pool_set_cap(b, 8 * G) != ORTMEM_OK ||
        ortmem_region_create(b, &opt, &prefix) != ORTMEM_OK ||
        ortmem_region_commit(prefix, 0, G) != ORTMEM_OK)
        return fail("setup", "%s", ortmem_last_error());
    fill(ortmem_region_base(prefix), G, PREFIX_SEED);
    pthread_t threads[THREADS];
    region_worker workers[THREADS];
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (region_worker){b, prefix, 0x1234567ULL * (uint64_t)(i + 1), 0, 0, ""};
        pthread_create(&threads[i], NULL, region_work, &workers[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < THREADS; i++) {
        if (workers[i].corruptions)
            return fail("corruption", "thread %d saw %d corrupted granules", i,
                        workers[i].corruptions);
        if (workers[i].failures)
            return fail("failure", "thread %d: %d failed calls, last: %s", i, workers[i].failures,
                        workers[i].last_error);
    }
    ortmem_granule_info info = {sizeof info, 0, 0, 0};
    (void)ortmem_region_granule_info(prefix, 0, &info);
    if (info.mappers != 1)
        return fail("mappers", "prefix still has %u mappers after every sharer left", info.mappers);
    (void)ortmem_region_destroy(prefix);
    ortmem_vmm_stats s = stats(b);
    if (s.mapped_bytes != 0 || s.owned_bytes != s.pool_bytes || s.pool_bytes > 8 * G)
        return fail("ledger", "mapped %llu, owned %llu, pool %llu",
                    (unsigned long long)s.mapped_bytes, (unsigned long long)s.owned_bytes,
                    (unsigned long long)s.pool_bytes);
    if (s.pool_hits == 0)
        return fail("pool", "no pool hit in %d iterations", THREADS * ITERATIONS);
    if (s.calls[ORTMEM_OP_CREATE] - s.calls[ORTMEM_OP_RELEASE] != s.pool_bytes / G)
        return fail("granules", "created %llu, released %llu, pooled %llu",
                    (unsigned long long)s.calls[ORTMEM_OP_CREATE],
                    (unsigned long long)s.calls[ORTMEM_OP_RELEASE],
                    (unsigned long long)(s.pool_bytes / G));
    if (ortmem_backend_destroy(b) != ORTMEM_OK)
        return fail("teardown", "%s", ortmem_last_error());
    return (stress_outcome){NULL, ""};
}

/* ---- destroy racing with use ---- */

typedef struct racer {
    ortmem_region *region;
    atomic_int ok;
    int gone, other;
} racer;

static void *use_until_gone(void *arg)
{
    racer *rc = arg;
    for (;;) {
        ortmem_status st = ortmem_region_commit(rc->region, 0, G);
        if (st == ORTMEM_OK)
            st = ortmem_region_decommit(rc->region, 0, G);
        if (st == ORTMEM_OK) {
            atomic_fetch_add(&rc->ok, 1);
            continue;
        }
        if (st == ORTMEM_E_HANDLE)
            rc->gone++;
        else
            rc->other++;
        return NULL;
    }
}

stress_outcome stress_destroy_racing_use(void)
{
    ortmem_backend *b = small_backend();
    if (!b)
        return fail("backend", "%s", ortmem_last_error());
    for (int round = 0; round < 20; round++) {
        ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
        opt.size = G;
        racer rc = {0};
        if (ortmem_region_create(b, &opt, &rc.region) != ORTMEM_OK)
            return fail("setup", "%s", ortmem_last_error());
        pthread_t t;
        pthread_create(&t, NULL, use_until_gone, &rc);
        while (round % 2 == 0 && atomic_load(&rc.ok) == 0)
            sched_yield();
        ortmem_status st = ortmem_region_destroy(rc.region);
        pthread_join(t, NULL);
        if (st != ORTMEM_OK)
            return fail("destroy", "round %d: %s", round, ortmem_last_error());
        if (rc.other || rc.gone != 1)
            return fail("status", "round %d: %d unexpected statuses, %d E_HANDLE", round, rc.other,
                        rc.gone);
    }
    ortmem_vmm_stats s = stats(b);
    if (s.owned_bytes || s.mapped_bytes)
        return fail("ledger", "owned %llu mapped %llu after all rounds",
                    (unsigned long long)s.owned_bytes, (unsigned long long)s.mapped_bytes);
    (void)ortmem_backend_destroy(b);
    return (stress_outcome){NULL, ""};
}

/* ---- arena ---- */

#define ARENA_SLOTS 64

typedef struct arena_worker {
    ortmem_arena *arena;
    uint64_t seed;
    int corruptions;
    int failures;
} arena_worker;

static void *arena_work(void *arg)
{
    arena_worker *w = arg;
    uint8_t *ptr[ARENA_SLOTS] = {0};
    size_t size[ARENA_SLOTS] = {0};
    uint64_t tag[ARENA_SLOTS] = {0};
    uint64_t s = w->seed;
    for (int it = 0; it < ITERATIONS * 4; it++) {
        size_t k = next_random(&s) % ARENA_SLOTS;
        if (ptr[k]) {
            if (!holds(ptr[k], size[k], tag[k]))
                w->corruptions++;
            if (ortmem_arena_free(w->arena, ptr[k]) != ORTMEM_OK)
                w->failures++;
            ptr[k] = NULL;
            continue;
        }
        size[k] = 64 + next_random(&s) % (3 * G);
        void *p;
        if (ortmem_arena_alloc(w->arena, size[k], 0, &p) != ORTMEM_OK) {
            w->failures++;
            continue;
        }
        ptr[k] = p;
        tag[k] = next_random(&s) | 1;
        fill(ptr[k], size[k], tag[k]);
    }
    for (size_t k = 0; k < ARENA_SLOTS; k++) {
        if (!ptr[k])
            continue;
        if (!holds(ptr[k], size[k], tag[k]))
            w->corruptions++;
        if (ortmem_arena_free(w->arena, ptr[k]) != ORTMEM_OK)
            w->failures++;
    }
    return NULL;
}

stress_outcome stress_arena_alloc_free(void)
{
    ortmem_backend *b = small_backend();
    if (!b)
        return fail("backend", "%s", ortmem_last_error());
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    opt.capacity = (size_t)THREADS * ARENA_SLOTS * 4 * G;
    opt.cache_bytes = 4 * G;
    ortmem_arena *a;
    if (ortmem_arena_create(b, &opt, &a) != ORTMEM_OK)
        return fail("setup", "%s", ortmem_last_error());
    pthread_t threads[THREADS];
    arena_worker workers[THREADS];
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (arena_worker){a, 0xabcdefULL * (uint64_t)(i + 3), 0, 0};
        pthread_create(&threads[i], NULL, arena_work, &workers[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < THREADS; i++) {
        if (workers[i].corruptions || workers[i].failures)
            return fail("arena", "thread %d: %d corruptions, %d failed calls", i,
                        workers[i].corruptions, workers[i].failures);
    }
    ortmem_arena_stats as;
    memset(&as, 0, sizeof as);
    as.struct_size = sizeof as;
    (void)ortmem_arena_stats_get(a, &as);
    if (as.live_allocations || as.allocated_bytes || as.committed_bytes != as.cached_bytes ||
        as.cached_bytes > 4 * G)
        return fail("arena ledger", "live %llu, allocated %llu, committed %llu, cached %llu",
                    (unsigned long long)as.live_allocations, (unsigned long long)as.allocated_bytes,
                    (unsigned long long)as.committed_bytes, (unsigned long long)as.cached_bytes);
    if (ortmem_arena_destroy(a, 0) != ORTMEM_OK)
        return fail("arena destroy", "%s", ortmem_last_error());
    ortmem_vmm_stats s = stats(b);
    if (s.owned_bytes || s.mapped_bytes)
        return fail("ledger", "owned %llu mapped %llu after the arena",
                    (unsigned long long)s.owned_bytes, (unsigned long long)s.mapped_bytes);
    (void)ortmem_backend_destroy(b);
    return (stress_outcome){NULL, ""};
}
