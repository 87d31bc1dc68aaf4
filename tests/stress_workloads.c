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
    ortmem_granule_info info = {.struct_size = sizeof info};
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

/* ---- grants racing for one authority ---- */

#define RACE_LIMIT_GRANULES 32
#define RACE_REGION_GRANULES 24
#define RACE_GRANTS 3
#define RACE_ITERATIONS 1500

typedef struct race_worker {
    ortmem_authority *authority;
    ortmem_backend *backend;
    ortmem_holder *holder;
    char name[16];
    uint64_t seed;
    atomic_int *go; /* the watcher runs: start */
    int failures;   /* calls that failed for another reason than the budget */
    int refused;    /* ORTMEM_E_BUDGET refusals */
    int succeeded;  /* holds (prepares, commits) that went through */
    int changed;    /* refusals that changed this thread's own holder */
    char detail[256];
} race_worker;

typedef struct race_watch {
    ortmem_authority *authority;
    uint64_t limit;
    atomic_int go; /* set by the watcher once it runs: the workers start */
    atomic_int done;
    uint64_t samples;
    uint64_t over; /* samples with owned + claimed above the limit */
    uint64_t worst;
} race_watch;

/* This holder's line of the ledger (the caller's holder only changes on the
 * caller's thread, so two reads around a refusal must agree). */
static bool own_line(ortmem_authority *a, const char *name, ortmem_holder_report *out)
{
    ortmem_authority_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    ortmem_holder_report hs[THREADS + 4];
    if (ortmem_authority_report_get(a, &r, hs, THREADS + 4) != ORTMEM_OK)
        return false;
    for (size_t i = 0; i < r.holder_count && i < THREADS + 4; i++) {
        if (strcmp(hs[i].name, name) == 0) {
            *out = hs[i];
            return true;
        }
    }
    return false;
}

static bool same_line(const ortmem_holder_report *x, const ortmem_holder_report *y)
{
    return x->owned_bytes == y->owned_bytes && x->mapped_bytes == y->mapped_bytes &&
           x->held_bytes == y->held_bytes && x->leased_bytes == y->leased_bytes &&
           x->requested_bytes == y->requested_bytes;
}

static void race_refused(race_worker *w, const ortmem_holder_report *before, const char *what)
{
    w->refused++;
    ortmem_holder_report after = {0};
    if (!own_line(w->authority, w->name, &after) || !same_line(before, &after)) {
        w->changed++;
        snprintf(w->detail, sizeof w->detail,
                 "%s refused but the holder changed: owned %llu -> %llu, held %llu -> %llu", what,
                 (unsigned long long)before->owned_bytes, (unsigned long long)after.owned_bytes,
                 (unsigned long long)before->held_bytes, (unsigned long long)after.held_bytes);
    }
}

static void race_failed(race_worker *w, const char *what, ortmem_status st)
{
    w->failures++;
    snprintf(w->detail, sizeof w->detail, "%s: %s: %s", what, ortmem_status_str(st),
             ortmem_last_error());
}

static void *race_work(void *arg)
{
    race_worker *w = arg;
    ortmem_account acct;
    ortmem_region *r = NULL;
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    opt.size = RACE_REGION_GRANULES * G;
    opt.account = &acct;
    if (ortmem_holder_account(w->holder, &acct) != ORTMEM_OK ||
        ortmem_region_create(w->backend, &opt, &r) != ORTMEM_OK) {
        race_failed(w, "setup", ORTMEM_E_STATE);
        return NULL;
    }
    ortmem_grant *grants[RACE_GRANTS] = {0};
    uint64_t granted[RACE_GRANTS] = {0};
    uint64_t charged = 0; /* through grants */
    uint64_t s = w->seed;
    while (!atomic_load(w->go))
        sched_yield();
    for (int it = 0; it < RACE_ITERATIONS; it++) {
        size_t k = next_random(&s) % RACE_GRANTS;
        size_t g0 = next_random(&s) % RACE_REGION_GRANULES;
        size_t n = 1 + next_random(&s) % 4;
        if (g0 + n > RACE_REGION_GRANULES)
            n = RACE_REGION_GRANULES - g0;
        ortmem_holder_report before;
        if (!own_line(w->authority, w->name, &before)) {
            race_failed(w, "report", ORTMEM_E_STATE);
            break;
        }
        ortmem_status st;
        switch (next_random(&s) % 6) {
        case 0:
        case 1: /* grant prepare, or finish an open one */
            if (!grants[k]) {
                uint64_t bytes = 1 + next_random(&s) % (8 * G);
                st = ortmem_grant_prepare(w->holder, bytes, &grants[k]);
                if (st == ORTMEM_OK) {
                    granted[k] = bytes;
                    w->succeeded++;
                } else if (st == ORTMEM_E_BUDGET) {
                    grants[k] = NULL;
                    race_refused(w, &before, "grant prepare");
                } else {
                    grants[k] = NULL;
                    race_failed(w, "grant prepare", st);
                }
            } else if (next_random(&s) % 3 == 0) {
                if ((st = ortmem_grant_abort(grants[k])) != ORTMEM_OK)
                    race_failed(w, "grant abort", st);
                grants[k] = NULL;
            } else {
                uint64_t actual = next_random(&s) % (granted[k] + 1);
                if ((st = ortmem_grant_charge(grants[k], actual)) != ORTMEM_OK)
                    race_failed(w, "grant charge", st);
                else
                    charged += actual;
                grants[k] = NULL;
            }
            break;
        case 2: /* refund part of what grants charged */
            if (charged) {
                uint64_t x = 1 + next_random(&s) % charged;
                if ((st = ortmem_holder_refund(w->holder, x)) != ORTMEM_OK)
                    race_failed(w, "refund", st);
                else
                    charged -= x;
            }
            break;
        case 3:
        case 4: /* region commit */
            st = ortmem_region_commit(r, g0 * G, n * G);
            if (st == ORTMEM_OK)
                w->succeeded++;
            else if (st == ORTMEM_E_BUDGET)
                race_refused(w, &before, "region commit");
            else
                race_failed(w, "region commit", st);
            break;
        default:
            if ((st = ortmem_region_decommit(r, g0 * G, n * G)) != ORTMEM_OK)
                race_failed(w, "region decommit", st);
        }
    }
    for (size_t k = 0; k < RACE_GRANTS; k++) {
        if (grants[k] && ortmem_grant_abort(grants[k]) != ORTMEM_OK)
            race_failed(w, "final abort", ORTMEM_E_STATE);
    }
    if (charged && ortmem_holder_refund(w->holder, charged) != ORTMEM_OK)
        race_failed(w, "final refund", ORTMEM_E_STATE);
    if (ortmem_region_destroy(r) != ORTMEM_OK)
        race_failed(w, "region destroy", ORTMEM_E_STATE);
    return NULL;
}

static void *race_watch_work(void *arg)
{
    race_watch *wt = arg;
    while (!atomic_load(&wt->done)) {
        ortmem_authority_report r;
        memset(&r, 0, sizeof r);
        r.struct_size = sizeof r;
        if (ortmem_authority_report_get(wt->authority, &r, NULL, 0) != ORTMEM_OK)
            continue;
        wt->samples++;
        atomic_store(&wt->go, 1);
        uint64_t charged = r.owned_bytes + r.claimed_bytes;
        if (charged > wt->limit) {
            wt->over++;
            if (charged > wt->worst)
                wt->worst = charged;
        }
        sched_yield();
    }
    return NULL;
}

/* A pressure callback that is asked but never gives anything back: pressure
 * runs concurrently without touching another thread's holder. */
static uint64_t race_reclaim_nothing(void *user, uint64_t want)
{
    (void)user;
    (void)want;
    return 0;
}

stress_outcome stress_grants_race(void)
{
    ortmem_backend *b = small_backend();
    if (!b)
        return fail("backend", "%s", ortmem_last_error());
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = RACE_LIMIT_GRANULES * G;
    ortmem_authority *a;
    if (ortmem_authority_create(b, &ao, &a) != ORTMEM_OK)
        return fail("authority", "%s", ortmem_last_error());
    race_watch watch = {a, RACE_LIMIT_GRANULES * G, 0, 0, 0, 0, 0};
    race_worker workers[THREADS];
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (race_worker){a, b, NULL, "", 0x9e3779b9ULL * (uint64_t)(i + 5), &watch.go, 0,
                                   0, 0, 0,    ""};
        snprintf(workers[i].name, sizeof workers[i].name, "racer%d", i);
        ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
        ho.name = workers[i].name;
        ho.priority = i;
        ho.on_pressure = i % 2 ? race_reclaim_nothing : NULL;
        if (ortmem_holder_register(a, &ho, &workers[i].holder) != ORTMEM_OK)
            return fail("holder", "%s", ortmem_last_error());
    }
    pthread_t watcher, threads[THREADS];
    pthread_create(&watcher, NULL, race_watch_work, &watch);
    for (int i = 0; i < THREADS; i++)
        pthread_create(&threads[i], NULL, race_work, &workers[i]);
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    atomic_store(&watch.done, 1);
    pthread_join(watcher, NULL);
    int refused = 0, succeeded = 0;
    for (int i = 0; i < THREADS; i++) {
        race_worker *w = &workers[i];
        if (w->failures)
            return fail("failure", "thread %d: %d failed calls, last: %s", i, w->failures,
                        w->detail);
        if (w->changed)
            return fail("refusal changed the ledger", "thread %d: %d times, last: %s", i,
                        w->changed, w->detail);
        refused += w->refused;
        succeeded += w->succeeded;
    }
    if (watch.over)
        return fail("over the limit", "%llu of %llu samples above %llu bytes (worst %llu)",
                    (unsigned long long)watch.over, (unsigned long long)watch.samples,
                    (unsigned long long)watch.limit, (unsigned long long)watch.worst);
    if (!refused || !succeeded)
        return fail("no race", "%d refusals and %d holds: the workload did not contend", refused,
                    succeeded);
    ortmem_authority_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    if (ortmem_authority_report_get(a, &r, NULL, 0) != ORTMEM_OK || r.owned_bytes ||
        r.claimed_bytes || r.mapped_bytes || r.owned_peak_bytes > watch.limit)
        return fail("ledger", "owned %llu, claimed %llu, mapped %llu, peak %llu at the end",
                    (unsigned long long)r.owned_bytes, (unsigned long long)r.claimed_bytes,
                    (unsigned long long)r.mapped_bytes, (unsigned long long)r.owned_peak_bytes);
    if ((uint64_t)refused > r.refusals)
        return fail("refusals", "threads saw %d, the authority counted %llu", refused,
                    (unsigned long long)r.refusals);
    for (int i = 0; i < THREADS; i++) {
        if (ortmem_holder_unregister(workers[i].holder) != ORTMEM_OK)
            return fail("unregister", "%s", ortmem_last_error());
    }
    if (ortmem_authority_destroy(a) != ORTMEM_OK)
        return fail("authority destroy", "%s", ortmem_last_error());
    ortmem_vmm_stats s = stats(b);
    if (s.owned_bytes || s.mapped_bytes)
        return fail("backend ledger", "owned %llu mapped %llu at the end",
                    (unsigned long long)s.owned_bytes, (unsigned long long)s.mapped_bytes);
    (void)ortmem_backend_destroy(b);
    return (stress_outcome){NULL, ""};
}

/* ---- the capture gate ---- */

#define GATE_SHARED_THREADS 4
#define GATE_CAPTURE_THREADS 2
#define GATE_SHARED_ITERATIONS 3000
#define GATE_CAPTURES 400
#define GATE_DEFER_EVERY 10 /* a shared thread defers on every tenth iteration */
#define GATE_ITEMS                                                                                 \
    (GATE_SHARED_THREADS * (GATE_SHARED_ITERATIONS / GATE_DEFER_EVERY) +                           \
     GATE_CAPTURE_THREADS * GATE_CAPTURES)

typedef struct gate_item {
    _Atomic int runs;
    uint64_t serial; /* the capture it was deferred from; 0 = none */
} gate_item;

typedef struct gate_shared_state {
    _Atomic int holders;     /* shared-section threads inside a section */
    _Atomic int capturing;   /* threads between begin and end */
    _Atomic uint64_t active; /* serial of the capture held now; 0 = none */
    _Atomic uint64_t serials;
    _Atomic int overlap;        /* a shared section inside a capture */
    _Atomic int double_capture; /* two captures at once */
    _Atomic int ran_inside;     /* a deferred item ran inside its own capture */
    _Atomic int refused;        /* try-enter refusals seen */
    _Atomic int failures;
    _Atomic int next_item;
    gate_item items[GATE_ITEMS];
    char detail[128];
} gate_shared_state;

typedef struct gate_worker {
    gate_shared_state *g;
    uint64_t seed;
} gate_worker;

static gate_shared_state *gate_state;

static void gate_item_run(void *arg)
{
    gate_item *it = arg;
    atomic_fetch_add(&it->runs, 1);
    if (it->serial && atomic_load(&gate_state->active) == it->serial)
        atomic_fetch_add(&gate_state->ran_inside, 1);
}

static void gate_defer(gate_shared_state *g, uint64_t serial)
{
    int i = atomic_fetch_add(&g->next_item, 1);
    if (i >= GATE_ITEMS) {
        atomic_fetch_add(&g->failures, 1);
        return;
    }
    g->items[i].serial = serial;
    if (ortmem_capture_defer(gate_item_run, &g->items[i]) != ORTMEM_OK)
        atomic_fetch_add(&g->failures, 1);
}

static void *gate_shared_work(void *arg)
{
    gate_worker *w = arg;
    gate_shared_state *g = w->g;
    uint64_t s = w->seed;
    for (int it = 0; it < GATE_SHARED_ITERATIONS; it++) {
        if (it % GATE_DEFER_EVERY == 0)
            gate_defer(g, 0);
        uint64_t r = next_random(&s);
        if (r % 4 == 0) {
            if (ortmem_capture_shared_try_enter() != ORTMEM_OK) {
                atomic_fetch_add(&g->refused, 1);
                continue;
            }
        } else {
            ortmem_capture_shared_enter();
        }
        atomic_fetch_add(&g->holders, 1);
        if (atomic_load(&g->capturing) != 0)
            atomic_fetch_add(&g->overlap, 1);
        if (r % 8 == 1) { /* nested: must not wait behind a waiting capture */
            ortmem_capture_shared_enter();
            if (atomic_load(&g->capturing) != 0)
                atomic_fetch_add(&g->overlap, 1);
            (void)ortmem_capture_shared_leave();
        }
        if (r % 16 == 2)
            sched_yield();
        if (atomic_load(&g->capturing) != 0)
            atomic_fetch_add(&g->overlap, 1);
        atomic_fetch_sub(&g->holders, 1);
        if (ortmem_capture_shared_leave() != ORTMEM_OK)
            atomic_fetch_add(&g->failures, 1);
    }
    return NULL;
}

static void *gate_capture_work(void *arg)
{
    gate_worker *w = arg;
    gate_shared_state *g = w->g;
    for (int c = 0; c < GATE_CAPTURES; c++) {
        if (ortmem_capture_begin() != ORTMEM_OK) {
            snprintf(g->detail, sizeof g->detail, "begin: %s", ortmem_last_error());
            atomic_fetch_add(&g->failures, 1);
            return NULL;
        }
        uint64_t serial = atomic_fetch_add(&g->serials, 1) + 1;
        if (atomic_fetch_add(&g->capturing, 1) != 0)
            atomic_fetch_add(&g->double_capture, 1);
        atomic_store(&g->active, serial);
        if (atomic_load(&g->holders) != 0)
            atomic_fetch_add(&g->overlap, 1);
        gate_defer(g, serial);
        /* The capturing thread's own driver calls bypass the gate. */
        ortmem_capture_shared_enter();
        (void)ortmem_capture_shared_leave();
        sched_yield();
        if (atomic_load(&g->holders) != 0)
            atomic_fetch_add(&g->overlap, 1);
        atomic_store(&g->active, 0);
        atomic_fetch_sub(&g->capturing, 1);
        if (ortmem_capture_end() != ORTMEM_OK) {
            snprintf(g->detail, sizeof g->detail, "end: %s", ortmem_last_error());
            atomic_fetch_add(&g->failures, 1);
            return NULL;
        }
    }
    return NULL;
}

static ortmem_capture_stats gate_stats_now(void)
{
    ortmem_capture_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    (void)ortmem_capture_stats_get(&s);
    return s;
}

stress_outcome stress_capture_gate(void)
{
    gate_shared_state *g = calloc(1, sizeof *g);
    if (!g)
        return fail("setup", "state of %zu bytes", sizeof *g);
    gate_state = g;
    ortmem_capture_stats s0 = gate_stats_now();
    pthread_t threads[GATE_SHARED_THREADS + GATE_CAPTURE_THREADS];
    gate_worker workers[GATE_SHARED_THREADS + GATE_CAPTURE_THREADS];
    int started = 0;
    for (int i = 0; i < GATE_SHARED_THREADS + GATE_CAPTURE_THREADS; i++) {
        workers[i] = (gate_worker){g, 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1)};
        void *(*body)(void *) = i < GATE_SHARED_THREADS ? gate_shared_work : gate_capture_work;
        if (pthread_create(&threads[i], NULL, body, &workers[i]) != 0)
            break;
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    ortmem_capture_stats s1 = gate_stats_now();
    stress_outcome o = {NULL, ""};
    int items = atomic_load(&g->next_item);
    int wrong = -1;
    for (int i = 0; i < items && i < GATE_ITEMS; i++) {
        if (atomic_load(&g->items[i].runs) != 1) {
            wrong = i;
            break;
        }
    }
    if (started != GATE_SHARED_THREADS + GATE_CAPTURE_THREADS)
        o = fail("setup", "started %d threads", started);
    else if (atomic_load(&g->failures))
        o = fail("failure", "%d failed calls; %s", atomic_load(&g->failures), g->detail);
    else if (atomic_load(&g->overlap))
        o = fail("shared section inside a capture", "%d times", atomic_load(&g->overlap));
    else if (atomic_load(&g->double_capture))
        o = fail("two captures at once", "%d times", atomic_load(&g->double_capture));
    else if (atomic_load(&g->ran_inside))
        o = fail("deferred item ran inside its capture", "%d times", atomic_load(&g->ran_inside));
    else if (items != GATE_ITEMS)
        o = fail("items", "%d deferred, %d expected", items, GATE_ITEMS);
    else if (wrong >= 0)
        o = fail("deferred item not run exactly once", "item %d (serial %llu) ran %d times", wrong,
                 (unsigned long long)g->items[wrong].serial, atomic_load(&g->items[wrong].runs));
    else if (s1.captures - s0.captures != GATE_CAPTURE_THREADS * GATE_CAPTURES)
        o = fail("captures", "the gate counted %llu, the threads made %d",
                 (unsigned long long)(s1.captures - s0.captures),
                 GATE_CAPTURE_THREADS * GATE_CAPTURES);
    else if ((s1.deferred_run - s0.deferred_run) +
                 (s1.deferred_immediate - s0.deferred_immediate) !=
             (uint64_t)GATE_ITEMS)
        o = fail("deferred counters", "run %llu + immediate %llu != %d items",
                 (unsigned long long)(s1.deferred_run - s0.deferred_run),
                 (unsigned long long)(s1.deferred_immediate - s0.deferred_immediate), GATE_ITEMS);
    else if (s1.shared_refused - s0.shared_refused != (uint64_t)atomic_load(&g->refused))
        o = fail("refusals", "the gate counted %llu, the threads saw %d",
                 (unsigned long long)(s1.shared_refused - s0.shared_refused),
                 atomic_load(&g->refused));
    else if (s1.shared_active || s1.shared_waiting || s1.captures_waiting || s1.capture_active ||
             s1.deferred_pending)
        o = fail("gate not idle",
                 "active %llu waiting %llu captures waiting %llu held %d "
                 "pending %llu",
                 (unsigned long long)s1.shared_active, (unsigned long long)s1.shared_waiting,
                 (unsigned long long)s1.captures_waiting, s1.capture_active,
                 (unsigned long long)s1.deferred_pending);
    else if (s1.deferred_queued == s0.deferred_queued || s1.capture_waits == s0.capture_waits)
        o = fail("no race",
                 "queued %llu deferrals and %llu capture waits: the workload did not "
                 "contend",
                 (unsigned long long)(s1.deferred_queued - s0.deferred_queued),
                 (unsigned long long)(s1.capture_waits - s0.capture_waits));
    gate_state = NULL;
    free(g);
    return o;
}
