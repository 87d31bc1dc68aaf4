/* Saturating atomic counters: a counter that would wrap stays at its bound and
 * the clamp is counted, so a ledger never silently turns a huge value small. */
#ifndef ORTMEM_SRC_CORE_COUNTER_H
#define ORTMEM_SRC_CORE_COUNTER_H

#include <stdatomic.h>
#include <stdint.h>

typedef _Atomic uint64_t om_counter;

static inline void om_counter_add(om_counter *c, uint64_t v, om_counter *clamps)
{
    uint64_t cur = atomic_load_explicit(c, memory_order_relaxed);
    uint64_t next;
    do {
        next = cur > UINT64_MAX - v ? UINT64_MAX : cur + v;
    } while (!atomic_compare_exchange_weak_explicit(c, &cur, next, memory_order_relaxed,
                                                    memory_order_relaxed));
    if (next != cur + v && clamps)
        atomic_fetch_add_explicit(clamps, 1, memory_order_relaxed);
}

static inline void om_counter_sub(om_counter *c, uint64_t v, om_counter *clamps)
{
    uint64_t cur = atomic_load_explicit(c, memory_order_relaxed);
    uint64_t next;
    do {
        next = cur < v ? 0 : cur - v;
    } while (!atomic_compare_exchange_weak_explicit(c, &cur, next, memory_order_relaxed,
                                                    memory_order_relaxed));
    if (cur < v && clamps)
        atomic_fetch_add_explicit(clamps, 1, memory_order_relaxed);
}

/* Raises peak to at least value. */
static inline void om_counter_max(om_counter *peak, uint64_t value)
{
    uint64_t cur = atomic_load_explicit(peak, memory_order_relaxed);
    while (cur < value && !atomic_compare_exchange_weak_explicit(
                              peak, &cur, value, memory_order_relaxed, memory_order_relaxed)) {
    }
}

static inline uint64_t om_counter_get(om_counter *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

#endif
