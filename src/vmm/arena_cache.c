/* The arena's extent cache: committed extents that no live allocation
 * touches, kept mapped on an LRU list (by first granule) up to the watermark
 * (cache_granules, counted in granules) and decommitted whole, least recently
 * emptied first, one region call per contiguous run, by a free past the
 * watermark, a trim or a reclaim (src/vmm/arena_internal.h). */
#include "vmm/arena_internal.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"

void om_cache_remove(ortmem_arena *a, size_t first)
{
    om_granule *g = &a->granules[first];
    assert(g->cached && a->cached_count >= g->ext_granules);
    if (g->lru_prev != OM_NONE)
        a->granules[g->lru_prev].lru_next = g->lru_next;
    else
        a->lru_head = g->lru_next;
    if (g->lru_next != OM_NONE)
        a->granules[g->lru_next].lru_prev = g->lru_prev;
    else
        a->lru_tail = g->lru_prev;
    g->lru_prev = g->lru_next = OM_NONE;
    g->cached = false;
    a->cached_count -= g->ext_granules;
}

void om_cache_add(ortmem_arena *a, size_t first, bool most_recent)
{
    om_granule *g = &a->granules[first];
    /* only whole empty committed extents */
    assert(!g->cached && g->committed && g->ext_first == first && g->ext_live == 0);
    if (most_recent) {
        g->lru_prev = a->lru_tail;
        g->lru_next = OM_NONE;
        if (a->lru_tail != OM_NONE)
            a->granules[a->lru_tail].lru_next = first;
        else
            a->lru_head = first;
        a->lru_tail = first;
    } else {
        g->lru_prev = OM_NONE;
        g->lru_next = a->lru_head;
        if (a->lru_head != OM_NONE)
            a->granules[a->lru_head].lru_prev = first;
        else
            a->lru_tail = first;
        a->lru_head = first;
    }
    g->cached = true;
    a->cached_count += g->ext_granules;
}

static int compare_index(const void *x, const void *y)
{
    size_t a = *(const size_t *)x, b = *(const size_t *)y;
    return (a > b) - (a < b);
}

/* Takes the least recently emptied extents off the list until at most keep
 * granules stay; returns their starts sorted in a->scratch. */
static size_t take_oldest(ortmem_arena *a, size_t keep)
{
    size_t n = 0;
    while (a->cached_count > keep) {
        size_t first = a->lru_head;
        om_cache_remove(a, first);
        a->scratch[n++] = first;
    }
    if (n > 1)
        qsort(a->scratch, n, sizeof *a->scratch, compare_index);
    return n;
}

/* After the decommit of the extents scratch[i, j) failed, asks the region
 * what really happened to each (QUARANTINED: unmapped, but a release failed;
 * otherwise nothing changed): still mapped goes back to the cache, first in
 * line next time. */
static void settle_failed_run(ortmem_arena *a, size_t i, size_t j)
{
    for (size_t k = i; k < j; k++) {
        size_t first = a->scratch[k], n = a->granules[first].ext_granules;
        ortmem_granule_info info = {.struct_size = sizeof info};
        bool mapped =
            ortmem_region_granule_info(a->region, first * a->granule, &info) != ORTMEM_OK ||
            info.state == ORTMEM_GRANULE_MAPPED;
        if (mapped) {
            om_cache_add(a, first, false);
            continue;
        }
        om_extent_decommitted(a, first);
        for (size_t g = first; info.state == ORTMEM_GRANULE_QUARANTINED && g < first + n; g++)
            (void)om_granule_fence(a, g);
    }
}

/* The first failed run of one eviction pass, kept for its message. */
typedef struct evict_failure {
    ortmem_status status;
    size_t first, last;
    char detail[256];
} evict_failure;

/* Granules in the extents scratch[i, j). */
static size_t run_granules(const ortmem_arena *a, size_t i, size_t j)
{
    size_t n = 0;
    for (size_t k = i; k < j; k++)
        n += a->granules[a->scratch[k]].ext_granules;
    return n;
}

/* Decommits the extents scratch[i, j) (contiguous) with one region call;
 * returns the granules that went back. STRICT: a range that cuts an extent
 * would mean the arena and its region disagree, so it refuses. A failed run
 * counts none: an unmapped extent may still be owned, quarantined by the
 * backend, which does not say which. */
static size_t evict_run(ortmem_arena *a, size_t i, size_t j, unsigned flags, evict_failure *failure)
{
    size_t g0 = a->scratch[i], n = run_granules(a, i, j);
    ortmem_range run = {g0 * a->granule, n * a->granule};
    ortmem_status st =
        ortmem_region_decommit_ex(a->region, &run, 1, ORTMEM_DECOMMIT_STRICT | flags);
    if (st == ORTMEM_OK) {
        for (size_t k = i; k < j; k++)
            om_extent_decommitted(a, a->scratch[k]);
        return n;
    }
    if (failure->status == ORTMEM_OK) {
        failure->status = st;
        failure->first = g0;
        failure->last = g0 + n - 1;
        snprintf(failure->detail, sizeof failure->detail, "%s", ortmem_last_error());
    }
    settle_failed_run(a, i, j);
    return 0;
}

/* A run whose decommit fails stays committed and cached, first in line next
 * time; the first failure is returned with its detail. */
ortmem_status om_cache_evict(ortmem_arena *a, size_t keep, unsigned flags, size_t *unmapped)
{
    size_t n = take_oldest(a, keep), done = 0;
    evict_failure failure = {ORTMEM_OK, 0, 0, ""};
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && a->scratch[j] == a->scratch[j - 1] +
                                                      a->granules[a->scratch[j - 1]].ext_granules;
             j++) {
        }
        done += evict_run(a, i, j, flags, &failure);
    }
    if (unmapped)
        *unmapped = done;
    if (failure.status == ORTMEM_OK)
        return ORTMEM_OK;
    return OM_ERR(failure.status,
                  "arena: decommitting granules [%zu, %zu] failed (%s); %zu bytes stay "
                  "cached against a cache of %zu bytes",
                  failure.first, failure.last, failure.detail, a->cached_count * a->granule,
                  a->cache_granules * a->granule);
}
