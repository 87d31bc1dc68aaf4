/* The thread pool: threads - 1 workers plus the caller. Decode issues
 * hundreds of short runs per token, so workers spin on the run state for a
 * while before sleeping on a condition variable, and the caller never waits
 * for a worker that has not joined the run: on a busy machine a worker may be
 * off its core for milliseconds, and the caller then does the tasks itself.
 *
 * The run state is one atomic word: the run's generation, a closed flag and
 * the number of workers inside the run. A worker joins only an open run of a
 * generation it has not served; the caller closes the run once every task is
 * handed out and waits only for the workers inside to leave. Tasks are handed
 * out through an atomic counter. */
#include "kernels/kernels.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Roughly 100-200 us of pause instructions before a worker sleeps. */
#define WORKER_SPINS 4096u
/* The caller spins this long on a worker still inside the run, then yields
 * the core (on a busy machine that worker may be waiting for it). */
#define CALLER_SPINS 2048u

#define STATE_ACTIVE_MASK 0xffffull /* workers inside the run */
#define STATE_CLOSED (1ull << 16)   /* no more joining */
#define STATE_GEN_SHIFT 17

static inline uint64_t state_gen(uint64_t state)
{
    return state >> STATE_GEN_SHIFT;
}

struct eng_pool {
    unsigned threads;
    unsigned workers_started;
    pthread_t *workers;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    _Atomic uint64_t state;
    atomic_uint sleepers;
    atomic_size_t next_task;
    atomic_bool stop;
    /* The current run: written while the run is closed and empty, read only
     * by workers inside it. */
    eng_task_fn fn;
    void *ctx;
    size_t tasks;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void drain(eng_pool *pool)
{
    for (;;) {
        size_t task = atomic_fetch_add_explicit(&pool->next_task, 1, memory_order_relaxed);
        if (task >= pool->tasks)
            return;
        pool->fn(pool->ctx, task);
    }
}

/* Waits until the run state's generation differs from seen; returns it. */
static uint64_t wait_for_run(eng_pool *pool, uint64_t seen)
{
    unsigned spins = 0;
    uint64_t state;
    while (state_gen(state = atomic_load_explicit(&pool->state, memory_order_acquire)) == seen) {
        if (++spins < WORKER_SPINS) {
            cpu_relax();
            continue;
        }
        /* Sequentially consistent with the caller's publish-then-check of
         * sleepers: one of the two sees the other, no wake-up is lost. */
        pthread_mutex_lock(&pool->lock);
        atomic_fetch_add(&pool->sleepers, 1);
        while (state_gen(atomic_load(&pool->state)) == seen)
            pthread_cond_wait(&pool->wake, &pool->lock);
        atomic_fetch_sub(&pool->sleepers, 1);
        pthread_mutex_unlock(&pool->lock);
        spins = 0;
    }
    return state;
}

static void *worker_main(void *arg)
{
    eng_pool *pool = arg;
    uint64_t seen = 0;
    for (;;) {
        uint64_t state = wait_for_run(pool, seen);
        seen = state_gen(state);
        if (atomic_load_explicit(&pool->stop, memory_order_acquire))
            return NULL;
        bool joined = false;
        while (state_gen(state) == seen && !(state & STATE_CLOSED)) {
            if (atomic_compare_exchange_weak_explicit(&pool->state, &state, state + 1,
                                                      memory_order_acquire, memory_order_acquire)) {
                joined = true;
                break;
            }
        }
        if (!joined) /* came too late: the caller did this run's tasks */
            continue;
        drain(pool);
        atomic_fetch_sub_explicit(&pool->state, 1, memory_order_release);
    }
}

/* Opens a new, empty run (the previous one is closed and empty). */
static void publish(eng_pool *pool)
{
    const uint64_t gen = state_gen(atomic_load(&pool->state)) + 1;
    atomic_store(&pool->state, gen << STATE_GEN_SHIFT);
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->lock);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->lock);
    }
}

static void stop_workers(eng_pool *pool)
{
    atomic_store_explicit(&pool->stop, true, memory_order_release);
    publish(pool);
    for (unsigned i = 0; i < pool->workers_started; i++)
        pthread_join(pool->workers[i], NULL);
}

ortmem_status eng_pool_create(unsigned threads, eng_pool **out, eng_error *err)
{
    if (!out || threads == 0 || threads > STATE_ACTIVE_MASK)
        return eng_fail(err, ORTMEM_E_INVALID, "thread pool: %u threads (1 to %llu), out %s",
                        threads, (unsigned long long)STATE_ACTIVE_MASK, out ? "given" : "NULL");
    eng_pool *pool = calloc(1, sizeof *pool);
    pthread_t *workers = threads > 1 ? calloc(threads - 1, sizeof *workers) : NULL;
    if (!pool || (threads > 1 && !workers)) {
        free(pool);
        free(workers);
        return eng_fail(err, ORTMEM_E_NOMEM, "thread pool: no memory for %u threads", threads);
    }
    pool->threads = threads;
    pool->workers = workers;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    atomic_init(&pool->state, STATE_CLOSED); /* generation 0, closed, empty */
    atomic_init(&pool->sleepers, 0);
    atomic_init(&pool->next_task, 0);
    atomic_init(&pool->stop, false);
    for (unsigned i = 0; i + 1 < threads; i++) {
        int rc = pthread_create(&workers[i], NULL, worker_main, pool);
        if (rc != 0) {
            stop_workers(pool);
            pthread_cond_destroy(&pool->wake);
            pthread_mutex_destroy(&pool->lock);
            free(workers);
            free(pool);
            return eng_fail(err, ORTMEM_E_NOMEM,
                            "thread pool: starting worker %u of %u failed (error %d)", i + 1,
                            threads - 1, rc);
        }
        pool->workers_started++;
    }
    *out = pool;
    return ORTMEM_OK;
}

void eng_pool_destroy(eng_pool *pool)
{
    if (!pool)
        return;
    stop_workers(pool);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->lock);
    free(pool->workers);
    free(pool);
}

unsigned eng_pool_threads(const eng_pool *pool)
{
    return pool ? pool->threads : 0;
}

void eng_pool_run(eng_pool *pool, eng_task_fn fn, void *ctx, size_t tasks)
{
    if (!fn || tasks == 0)
        return;
    if (!pool || pool->threads == 1 || tasks == 1) {
        for (size_t task = 0; task < tasks; task++)
            fn(ctx, task);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    pool->tasks = tasks;
    atomic_store_explicit(&pool->next_task, 0, memory_order_relaxed);
    publish(pool);
    drain(pool);
    /* Every task is handed out: close the run and wait for those inside. */
    atomic_fetch_or_explicit(&pool->state, STATE_CLOSED, memory_order_acq_rel);
    unsigned spins = 0;
    while (atomic_load_explicit(&pool->state, memory_order_acquire) & STATE_ACTIVE_MASK) {
        if (++spins < CALLER_SPINS)
            cpu_relax();
        else
            sched_yield();
    }
}
