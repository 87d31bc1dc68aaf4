/* The arena's granules: how many live allocations touch each, the extents
 * they are committed in (laid here, one region call per allocation's
 * commit), and fencing of the ones the region quarantined
 * (src/vmm/arena_internal.h). */
#include "vmm/arena_internal.h"

#include "core/alloc.h"
#include "core/error.h"

void om_extent_decommitted(ortmem_arena *a, size_t first)
{
    om_granule *e = &a->granules[first];
    size_t k = e->ext_granules;
    assert(e->committed && !e->cached && e->ext_live == 0 && k > 0 && a->committed_count >= k &&
           a->extent_count > 0);
    for (size_t i = first; i < first + k; i++) {
        assert(a->granules[i].committed && a->granules[i].ext_first == first);
        a->granules[i].committed = false;
        a->granules[i].ext_first = 0;
    }
    e->ext_granules = 0;
    a->committed_count -= k;
    a->extent_count--;
    if (first + k == a->committed_top) {
        size_t top = first;
        while (top > 0 && !a->granules[top - 1].committed)
            top--;
        a->committed_top = top;
    }
}

/* A granule the region quarantined can never be mapped again: its bytes
 * become a block that is never free, so no allocation lands there. An empty
 * granule lies wholly inside one free block (free neighbours coalesce). */
bool om_granule_fence(ortmem_arena *a, size_t i)
{
    assert(!a->granules[i].committed && a->granules[i].live == 0);
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

/* After a refused commit: fences the granules of the planned extents the
 * region quarantined. Asking the region clears the thread's detail, so the
 * commit's own is kept and put back. */
static bool fence_quarantined(ortmem_arena *a, ortmem_status st, const ortmem_range *ext,
                              size_t count)
{
    om_error_saved saved;
    om_error_save(&saved);
    bool fenced = false;
    for (size_t e = 0; e < count; e++) {
        size_t first = ext[e].offset / a->granule, k = ext[e].length / a->granule;
        for (size_t i = first; i < first + k; i++) {
            if (!a->granules[i].committed && a->granules[i].live == 0 && granule_quarantined(a, i))
                fenced |= om_granule_fence(a, i);
        }
    }
    (void)om_error_restore(&saved, st);
    return fenced;
}

void om_extents_mark_committed(ortmem_arena *a, const ortmem_range *ext, size_t count)
{
    for (size_t e = 0; e < count; e++) {
        size_t first = ext[e].offset / a->granule, k = ext[e].length / a->granule;
        for (size_t i = first; i < first + k; i++) {
            /* live > 0 only where wake commits a sleeping extent again */
            assert(!a->granules[i].committed);
            a->granules[i].committed = true;
            a->granules[i].ext_first = first;
        }
        a->granules[first].ext_granules = k;
        a->granules[first].ext_live = 0; /* the allocation being placed takes it */
        a->committed_count += k;
        a->extent_count++;
        a->committed_top = first + k > a->committed_top ? first + k : a->committed_top;
    }
    uint64_t committed = (uint64_t)a->committed_count * a->granule;
    a->committed_peak = committed > a->committed_peak ? committed : a->committed_peak;
}

/* Free for growth: neither committed nor fenced. */
static bool granule_free(const ortmem_arena *a, size_t i)
{
    return !a->granules[i].committed && a->granules[i].live == 0;
}

/* Lays the uncommitted run [r0, r1]: at the tail (nothing committed above)
 * by the policy, growing from the extent below into the free granules above
 * (no extent is larger than the cap, so room past it does not matter); a
 * hole exactly. Appends the extents to ext[*count ...]. */
static ortmem_status lay_run(ortmem_arena *a, size_t r0, size_t r1, uint64_t *sizes,
                             size_t capacity, ortmem_range *ext, size_t *count)
{
    uint64_t need = r1 - r0 + 1, room = need, below = 0;
    if (r1 + 1 >= a->committed_top) {
        while (room < a->cap_granules && r0 + room < a->granule_count &&
               granule_free(a, (size_t)(r0 + room)))
            room++;
        if (r0 > 0 && a->granules[r0 - 1].committed)
            below = a->granules[a->granules[r0 - 1].ext_first].ext_granules;
    }
    size_t n = 0;
    ortmem_status st =
        ortmem_extent_layout(&a->extents, a->granule, below, need, room, sizes, capacity, &n);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "arena: laying extents over granules [%zu, %zu]", r0, r1);
    size_t at = r0;
    for (size_t e = 0; e < n; e++) {
        ext[(*count)++] = (ortmem_range){at * a->granule, (size_t)sizes[e] * a->granule};
        at += (size_t)sizes[e];
    }
    return ORTMEM_OK;
}

/* The extents covering the uncommitted granules of [g_first, g_last]; each
 * run's layout has at most one extent per granule it needs. */
static ortmem_status plan_extents(ortmem_arena *a, size_t g_first, size_t g_last, ortmem_range *ext,
                                  uint64_t *sizes, size_t capacity, size_t *count)
{
    *count = 0;
    for (size_t i = g_first; i <= g_last;) {
        if (a->granules[i].committed) {
            i++;
            continue;
        }
        size_t r1 = i;
        while (r1 < g_last && !a->granules[r1 + 1].committed)
            r1++;
        ortmem_status st = lay_run(a, i, r1, sizes, capacity, ext, count);
        if (st != ORTMEM_OK)
            return st;
        i = r1 + 1;
    }
    return ORTMEM_OK;
}

ortmem_status om_granules_commit(ortmem_arena *a, size_t g_first, size_t g_last, om_relief *relief,
                                 bool *fenced, size_t *c_first, size_t *c_last)
{
    *c_first = OM_NONE;
    *c_last = 0;
    size_t n = g_last - g_first + 1, count = 0;
    bool any = false;
    for (size_t i = g_first; i <= g_last && !any; i++)
        any = !a->granules[i].committed;
    if (!any)
        return ORTMEM_OK;
    *c_first = g_first; /* until the extents are laid */
    *c_last = g_last;
    ortmem_range *ext = om_calloc(n, sizeof *ext);
    uint64_t *sizes = ext ? om_calloc(n, sizeof *sizes) : NULL;
    if (!sizes) {
        om_free(ext);
        return OM_ERR(ORTMEM_E_NOMEM, "arena: extent plan for %zu granules", n);
    }
    ortmem_status st = plan_extents(a, g_first, g_last, ext, sizes, n, &count);
    if (st == ORTMEM_OK) {
        *c_first = ext[0].offset / a->granule;
        *c_last = (ext[count - 1].offset + ext[count - 1].length) / a->granule - 1;
        /* One call for every extent; a refused hold is relieved by the caller
         * once the arena lock is dropped (a pressure callback may free into
         * this very arena). */
        st = om_region_commit_extents_for(a->region, ext, count, relief);
        if (st != ORTMEM_OK)
            *fenced |= fence_quarantined(a, st, ext, count);
        else
            om_extents_mark_committed(a, ext, count);
    }
    om_free(sizes);
    om_free(ext);
    return st;
}

void om_granules_take(ortmem_arena *a, size_t g_first, size_t g_last)
{
    for (size_t i = g_first; i <= g_last; i++) {
        om_granule *g = &a->granules[i];
        assert(g->committed); /* a live allocation's bytes are mapped */
        if (g->live++ > 0)
            continue;
        om_granule *e = &a->granules[g->ext_first];
        if (e->ext_live++ == 0 && e->cached)
            om_cache_remove(a, g->ext_first);
    }
}

void om_granules_put(ortmem_arena *a, size_t g_first, size_t g_last)
{
    for (size_t i = g_first; i <= g_last; i++) {
        om_granule *g = &a->granules[i];
        assert(g->live > 0); /* a live count never goes below zero */
        if (--g->live > 0 || !g->committed)
            continue;
        om_granule *e = &a->granules[g->ext_first];
        assert(e->ext_live > 0);
        if (--e->ext_live == 0)
            om_cache_add(a, g->ext_first, true);
    }
}
