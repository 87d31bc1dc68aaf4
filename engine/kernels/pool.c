/* The thread pool: threads - 1 workers plus the caller. A run publishes the
 * task function and bumps a generation counter; workers spin on it briefly
 * (decode issues hundreds of short runs per token, so waking through the
 * kernel each time would cost more than the work), then sleep on a condition
 * variable. Tasks are handed out through an atomic counter. */
#include "kernels/kernels.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Roughly 100-200 us of pause instructions before a worker sleeps. */
#define WORKER_SPINS 4096u
/* The caller spins this long on a straggler, then yields the core (on a
 * busy machine the straggler may be waiting for it). */
#define CALLER_SPINS 2048u

struct eng_pool {
    unsigned threads;
    unsigned workers_started;
    pthread_t *workers;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    atomic_uint_fast64_t generation;
    atomic_uint sleepers;
    atomic_size_t next_task;
    atomic_uint finished;
    atomic_bool stop;
    /* The current run; written before generation is bumped. */
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

static void *worker_main(void *arg)
{
    eng_pool *pool = arg;
    uint_fast64_t seen = 0;
    for (;;) {
        uint_fast64_t gen;
        unsigned spins = 0;
        while ((gen = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen) {
            if (++spins < WORKER_SPINS) {
                cpu_relax();
                continue;
            }
            /* Sequentially consistent with the caller's bump-then-check of
             * sleepers: one of the two sees the other, no wake-up is lost. */
            pthread_mutex_lock(&pool->lock);
            atomic_fetch_add(&pool->sleepers, 1);
            while (atomic_load(&pool->generation) == seen)
                pthread_cond_wait(&pool->wake, &pool->lock);
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->lock);
            spins = 0;
        }
        seen = gen;
        if (atomic_load_explicit(&pool->stop, memory_order_acquire))
            return NULL;
        drain(pool);
        atomic_fetch_add_explicit(&pool->finished, 1, memory_order_release);
    }
}

static void publish(eng_pool *pool)
{
    atomic_fetch_add(&pool->generation, 1);
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
    if (!out || threads == 0)
        return eng_fail(err, ORTMEM_E_INVALID, "thread pool: %u threads (at least 1), out %s",
                        threads, out ? "given" : "NULL");
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
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->sleepers, 0);
    atomic_init(&pool->next_task, 0);
    atomic_init(&pool->finished, 0);
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
    atomic_store_explicit(&pool->finished, 0, memory_order_relaxed);
    publish(pool);
    drain(pool);
    const unsigned workers = pool->workers_started;
    unsigned spins = 0;
    while (atomic_load_explicit(&pool->finished, memory_order_acquire) < workers) {
        if (++spins < CALLER_SPINS)
            cpu_relax();
        else
            sched_yield();
    }
}
