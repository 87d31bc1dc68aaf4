/* The arena's granules: how many live allocations touch each, which are
 * committed (one region commit per allocation's hull), and fencing of the
 * ones the region quarantined (src/vmm/arena_internal.h). */
#include "vmm/arena_internal.h"

#include "core/error.h"
#include "vmm/region.h"

void om_granule_decommitted(ortmem_arena *a, size_t i)
{
    assert(a->granules[i].committed && !a->granules[i].cached && a->committed_count > 0);
    a->granules[i].committed = false;
    a->committed_count--;
}

/* A granule the region quarantined can never be mapped again: its bytes
 * become a block that is never free, so no allocation lands there. An empty
 * granule lies wholly inside one free block (free neighbours coalesce). */
bool om_granule_fence(ortmem_arena *a, size_t i)
{
    assert(!a->granules[i].cached && a->granules[i].live == 0);
    size_t start = i * a->granule, end = start + a->granule;
    om_block *b = a->first;
    while (b && b->offset + b->size <= start)
        b = b->phys_next;
    if (!b || !b->is_free || b->offset > start || b->offset + b->size < end ||
        !om_blocks_grow(a, 2))
        return false;
    om_block_carve(a, b, start, end);
    a->used_bytes += a->granule;
    a->granules[i].live = 1; /* never empty again: never cached nor recommitted */
    a->quarantined_count++;
    return true;
}

static bool granule_quarantined(ortmem_arena *a, size_t i)
{
    ortmem_granule_info info = {.struct_size = sizeof info};
    return ortmem_region_granule_info(a->region, i * a->granule, &info) == ORTMEM_OK &&
           info.state == ORTMEM_GRANULE_QUARANTINED;
}

/* Hull of the uncommitted granules in [g_first, g_last]; false when none. */
static bool uncommitted_hull(const ortmem_arena *a, size_t g_first, size_t g_last, size_t *c_first,
                             size_t *c_last)
{
    *c_first = OM_NONE;
    *c_last = 0;
    for (size_t i = g_first; i <= g_last; i++) {
        if (!a->granules[i].committed) {
            *c_first = *c_first == OM_NONE ? i : *c_first;
            *c_last = i;
        }
    }
    return *c_first != OM_NONE;
}

/* After a refused commit: fences the granules of the hull the region
 * quarantined. Asking the region clears the thread's detail, so the commit's
 * own is kept and put back. */
static bool fence_quarantined(ortmem_arena *a, ortmem_status st, size_t c_first, size_t c_last)
{
    om_error_saved saved;
    om_error_save(&saved);
    bool fenced = false;
    for (size_t i = c_first; i <= c_last; i++) {
        if (!a->granules[i].committed && granule_quarantined(a, i))
            fenced |= om_granule_fence(a, i);
    }
    (void)om_error_restore(&saved, st);
    return fenced;
}

static void mark_committed(ortmem_arena *a, size_t c_first, size_t c_last)
{
    for (size_t i = c_first; i <= c_last; i++) {
        if (!a->granules[i].committed) {
            a->granules[i].committed = true;
            a->committed_count++;
        }
    }
    uint64_t committed = (uint64_t)a->committed_count * a->granule;
    a->committed_peak = committed > a->committed_peak ? committed : a->committed_peak;
}

ortmem_status om_granules_commit(ortmem_arena *a, size_t g_first, size_t g_last, om_relief *relief,
                                 bool *fenced, size_t *c_first, size_t *c_last)
{
    if (!uncommitted_hull(a, g_first, g_last, c_first, c_last))
        return ORTMEM_OK;
    /* One call for the hull; the region skips granules already mapped. A
     * refused hold is relieved by the caller once the arena lock is
     * dropped (a pressure callback may free into this very arena). */
    ortmem_range run = {*c_first * a->granule, (*c_last - *c_first + 1) * a->granule};
    ortmem_status st = om_region_commit_for(a->region, &run, 1, relief);
    if (st != ORTMEM_OK)
        *fenced |= fence_quarantined(a, st, *c_first, *c_last);
    else
        mark_committed(a, *c_first, *c_last);
    return st;
}

void om_granules_take(ortmem_arena *a, size_t g_first, size_t g_last)
{
    for (size_t i = g_first; i <= g_last; i++) {
        assert(a->granules[i].committed); /* a live allocation's bytes are mapped */
        if (a->granules[i].live++ == 0 && a->granules[i].cached)
            om_cache_remove(a, i);
    }
}

void om_granules_put(ortmem_arena *a, size_t g_first, size_t g_last)
{
    for (size_t i = g_first; i <= g_last; i++) {
        assert(a->granules[i].live > 0); /* a live count never goes below zero */
        if (--a->granules[i].live == 0 && a->granules[i].committed)
            om_cache_add(a, i, true);
    }
}
