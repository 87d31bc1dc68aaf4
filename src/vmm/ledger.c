#include <string.h>

#include "core/error.h"
#include "vmm/backend.h"

void om_ledger_count(om_counter *counter, uint64_t n, ortmem_backend *b)
{
    om_counter_add(counter, n, &b->ledger.saturations);
}

void om_ledger_owned_add(ortmem_backend *b, size_t bytes)
{
    om_ledger *l = &b->ledger;
    om_counter_add(&l->owned, bytes, &l->saturations);
    om_counter_add(&l->owned_granules, bytes / b->granule, &l->saturations);
    om_counter_add(&l->owned_extents, 1, &l->saturations);
    om_counter_max(&l->owned_peak, om_counter_get(&l->owned));
}

void om_ledger_owned_sub(ortmem_backend *b, size_t bytes)
{
    om_ledger *l = &b->ledger;
    om_counter_sub(&l->owned, bytes, &l->saturations);
    om_counter_sub(&l->owned_granules, bytes / b->granule, &l->saturations);
    om_counter_sub(&l->owned_extents, 1, &l->saturations);
}

void om_ledger_mapped_add(ortmem_backend *b, size_t bytes, size_t extents)
{
    om_ledger *l = &b->ledger;
    om_counter_add(&l->mapped, bytes, &l->saturations);
    om_counter_add(&l->mapped_granules, bytes / b->granule, &l->saturations);
    om_counter_add(&l->mapped_extents, extents, &l->saturations);
    om_counter_max(&l->mapped_peak, om_counter_get(&l->mapped));
}

void om_ledger_mapped_sub(ortmem_backend *b, size_t bytes, size_t extents)
{
    om_ledger *l = &b->ledger;
    om_counter_sub(&l->mapped, bytes, &l->saturations);
    om_counter_sub(&l->mapped_granules, bytes / b->granule, &l->saturations);
    om_counter_sub(&l->mapped_extents, extents, &l->saturations);
}

ortmem_status ortmem_backend_stats(ortmem_backend *b, ortmem_vmm_stats *stats)
{
    om_error_clear();
    ortmem_status st = OM_STRUCT_CHECK("backend stats", "stats", stats);
    if (st != ORTMEM_OK)
        return st;
    st = om_backend_pin(b, "backend stats");
    if (st != ORTMEM_OK)
        return st;
    om_ledger *l = &b->ledger;
    ortmem_vmm_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = stats->struct_size;
    s.owned_bytes = om_counter_get(&l->owned);
    s.owned_peak_bytes = om_counter_get(&l->owned_peak);
    s.mapped_bytes = om_counter_get(&l->mapped);
    s.mapped_peak_bytes = om_counter_get(&l->mapped_peak);
    s.owned_granules = om_counter_get(&l->owned_granules);
    s.mapped_granules = om_counter_get(&l->mapped_granules);
    s.reserved_va_bytes = om_counter_get(&l->reserved);
    s.quarantined_bytes = om_counter_get(&l->quarantined);
    s.quarantined_mapped_bytes = om_counter_get(&l->quarantined_mapped);
    s.quarantined_granules = om_counter_get(&l->quarantined_granules);
    s.leaked_va_bytes = om_counter_get(&l->leaked_va);
    s.pool_hits = om_counter_get(&l->pool_hits);
    s.pool_misses = om_counter_get(&l->pool_misses);
    for (unsigned i = 0; i < ORTMEM_OP_COUNT; i++) {
        s.calls[i] = om_counter_get(&l->calls[i]);
        s.failures[i] = om_counter_get(&l->failures[i]);
    }
    s.saturations = om_counter_get(&l->saturations);
    s.owned_extents = om_counter_get(&l->owned_extents);
    s.mapped_extents = om_counter_get(&l->mapped_extents);
    s.quarantined_extents = om_counter_get(&l->quarantined_extents);
    pthread_mutex_lock(&b->lock);
    s.pool_bytes = b->pool.bytes;
    s.pool_cap_bytes = b->pool.cap_bytes;
    pthread_mutex_unlock(&b->lock);
    memcpy(stats, &s, stats->struct_size);
    om_backend_unpin(b);
    return ORTMEM_OK;
}
