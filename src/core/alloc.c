#include "core/alloc.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include <ortmem/core.h>

/* 0 = no fault armed. Relaxed atomics: a sweep arms the fault from one thread
 * and reads the counts after the workload; concurrent callers only need the
 * counts not to tear. */
static _Atomic uint64_t om_alloc_calls;
static _Atomic uint64_t om_alloc_failed;
static _Atomic uint64_t om_alloc_fail_at;
static _Atomic bool om_alloc_persistent;

static bool om_alloc_should_fail(void)
{
    uint64_t n = atomic_fetch_add_explicit(&om_alloc_calls, 1, memory_order_relaxed) + 1;
    uint64_t at = atomic_load_explicit(&om_alloc_fail_at, memory_order_relaxed);
    if (at == 0 || n < at)
        return false;
    if (n > at && !atomic_load_explicit(&om_alloc_persistent, memory_order_relaxed))
        return false;
    atomic_fetch_add_explicit(&om_alloc_failed, 1, memory_order_relaxed);
    return true;
}

void *om_malloc(size_t size)
{
    return om_alloc_should_fail() ? NULL : malloc(size);
}

void *om_calloc(size_t count, size_t size)
{
    return om_alloc_should_fail() ? NULL : calloc(count, size);
}

void *om_realloc(void *ptr, size_t size)
{
    return om_alloc_should_fail() ? NULL : realloc(ptr, size);
}

void om_free(void *ptr)
{
    free(ptr);
}

void ortmem_alloc_fault(uint64_t fail_at, int persistent)
{
    atomic_store_explicit(&om_alloc_persistent, persistent != 0, memory_order_relaxed);
    atomic_store_explicit(&om_alloc_fail_at, 0, memory_order_relaxed);
    atomic_store_explicit(&om_alloc_calls, 0, memory_order_relaxed);
    atomic_store_explicit(&om_alloc_failed, 0, memory_order_relaxed);
    atomic_store_explicit(&om_alloc_fail_at, fail_at, memory_order_relaxed);
}

void ortmem_alloc_counts(uint64_t *calls, uint64_t *failed)
{
    if (calls)
        *calls = atomic_load_explicit(&om_alloc_calls, memory_order_relaxed);
    if (failed)
        *failed = atomic_load_explicit(&om_alloc_failed, memory_order_relaxed);
}
