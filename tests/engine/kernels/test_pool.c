#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"

typedef struct counts {
    atomic_uint *hits;
    size_t tasks;
    atomic_uint out_of_range;
} counts;

/* Runs on worker threads: records, the test thread asserts. */
static void count_task(void *ctx, size_t task)
{
    counts *c = ctx;
    if (task >= c->tasks)
        atomic_fetch_add(&c->out_of_range, 1);
    else
        atomic_fetch_add(&c->hits[task], 1);
}

/* Every task runs exactly once, run after run, whatever the thread count
 * and however the task count compares with it. */
static void check_pool(unsigned threads)
{
    eng_pool *pool = NULL;
    eng_error err = {0};
    cr_assert_eq(eng_pool_create(threads, &pool, &err), ORTMEM_OK, "%s", err.message);
    cr_assert_eq(eng_pool_threads(pool), threads);
    const size_t sizes[] = {0, 1, 2, 3, 7, 8, 9, 64, 1000};
    atomic_uint hits[1000];
    for (int run = 0; run < 1000; run++) {
        const size_t tasks = sizes[run % (sizeof sizes / sizeof sizes[0])];
        for (size_t i = 0; i < tasks; i++)
            atomic_init(&hits[i], 0);
        counts c = {hits, tasks, 0};
        eng_pool_run(pool, count_task, &c, tasks);
        cr_assert_eq(atomic_load(&c.out_of_range), 0u, "run %d: tasks past %zu", run, tasks);
        for (size_t i = 0; i < tasks; i++)
            cr_assert_eq(atomic_load(&hits[i]), 1u, "run %d: task %zu of %zu ran %u times", run, i,
                         tasks, atomic_load(&hits[i]));
    }
    eng_pool_destroy(pool);
}

Test(kernels_pool, every_task_once_1_thread)
{
    check_pool(1);
}

Test(kernels_pool, every_task_once_2_threads)
{
    check_pool(2);
}

Test(kernels_pool, every_task_once_8_threads)
{
    check_pool(8);
}

static void slow_task(void *ctx, size_t task)
{
    (void)task;
    atomic_uint *done = ctx;
    volatile unsigned spin = 0;
    for (unsigned i = 0; i < 20000; i++)
        spin += i;
    atomic_fetch_add(done, 1);
}

/* Workers that fell asleep between runs wake for the next one, and a pool
 * shuts down cleanly whether its workers spin or sleep (a lost wake-up
 * hangs: the timeout turns it into a failure). */
Test(kernels_pool, sleeping_workers_wake_and_shutdown_is_clean, .timeout = 20)
{
    eng_pool *pool = NULL;
    cr_assert_eq(eng_pool_create(4, &pool, NULL), ORTMEM_OK);
    atomic_uint done;
    atomic_init(&done, 0);
    eng_pool_run(pool, slow_task, &done, 16);
    struct timespec pause = {0, 20 * 1000 * 1000}; /* long past the spin */
    nanosleep(&pause, NULL);
    eng_pool_run(pool, slow_task, &done, 16);
    cr_assert_eq(atomic_load(&done), 32u);
    eng_pool_destroy(pool);
    eng_pool_destroy(NULL);
}

typedef struct slow_counts {
    atomic_uint hits[64];
    pthread_t caller;
    atomic_uint by_workers;
} slow_counts;

static void slow_count_task(void *ctx, size_t task)
{
    slow_counts *c = ctx;
    if (pthread_equal(pthread_self(), c->caller)) {
        volatile unsigned spin = 0;
        for (unsigned i = 0; i < 20000; i++)
            spin += i;
    } else { /* a worker's task outlasts the caller's share of the run */
        struct timespec pause = {0, 1000 * 1000};
        nanosleep(&pause, NULL);
        atomic_fetch_add(&c->by_workers, 1);
    }
    atomic_fetch_add(&c->hits[task], 1);
}

/* Tasks long enough for the workers to take part, and a worker's longer
 * than the caller's whole share: when a run returns, the tasks the workers
 * took are finished too, and the workers did take some. */
static void check_slow_runs(unsigned threads)
{
    eng_pool *pool = NULL;
    cr_assert_eq(eng_pool_create(threads, &pool, NULL), ORTMEM_OK);
    slow_counts c;
    c.caller = pthread_self();
    atomic_init(&c.by_workers, 0);
    for (int run = 0; run < 40; run++) {
        for (int i = 0; i < 64; i++)
            atomic_init(&c.hits[i], 0);
        eng_pool_run(pool, slow_count_task, &c, 64);
        for (int i = 0; i < 64; i++)
            cr_assert_eq(atomic_load(&c.hits[i]), 1u, "run %d: task %d ran %u times by the return",
                         run, i, atomic_load(&c.hits[i]));
    }
    cr_assert_gt(atomic_load(&c.by_workers), 0u, "the workers never ran a task");
    eng_pool_destroy(pool);
}

Test(kernels_pool, runs_return_after_the_workers_tasks_2_threads)
{
    check_slow_runs(2);
}

Test(kernels_pool, runs_return_after_the_workers_tasks_8_threads)
{
    check_slow_runs(8);
}

Test(kernels_pool, zero_threads_is_invalid)
{
    eng_pool *pool = (eng_pool *)0x1;
    eng_error err = {0};
    cr_assert_eq(eng_pool_create(0, &pool, &err), ORTMEM_E_INVALID);
    cr_assert_eq(pool, (eng_pool *)0x1, "a failed create leaves out alone");
    cr_assert(strstr(err.message, "0 threads"), "%s", err.message);
}
