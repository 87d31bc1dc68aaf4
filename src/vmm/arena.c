/* Arena: a malloc-like sub-allocator over one region. This file: the public
 * entry points (create, destroy, alloc, free, stats, trim, reclaim); the structures
 * live in arena_*.c (src/vmm/arena_internal.h lists them).
 *
 * The managed memory may be device memory, so no byte of metadata lives in it:
 * - blocks tile the region in address order (phys_prev/phys_next), so a free
 *   coalesces with both neighbours in O(1);
 * - free blocks sit in TLSF segregated lists (first level: power of two,
 *   second level: 32 linear steps) found through two bitmaps in O(1);
 * - an open-addressing map from offset to used block answers om_free() in O(1);
 * - starts that were handed out, freed and still lie in free memory are kept
 *   per free block (address order) and in a second map, so a repeated free is
 *   ORTMEM_E_DOUBLE_FREE rather than ORTMEM_E_NOT_FOUND; handing the memory
 *   out again drops them;
 * - per granule: how many live allocations touch it and the extent it is
 *   committed in; per extent (on its first granule): how many of its granules
 *   are live and its place in the LRU list of empty committed extents (the
 *   cache, kept under the watermark cache_granules; reclaim empties it on
 *   demand, straight back to the backend).
 *
 * Alloc is transactional: room for the host bookkeeping is made and the granules are
 * committed (one region call for every extent laid) before any index changes, so a
 * failure leaves the arena exactly as it was (failed_allocs aside, which
 * counts every failed alloc on a live handle). Free always takes effect: a
 * failed decommit leaves the extent committed and counted as cached.
 * Lock order: arena, then region (the region never calls back). */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/handle.h"
#include "core/log.h"
#include "core/trace.h"
#include "vmm/account.h"
#include "vmm/arena_internal.h"
#include "vmm/region.h"

static void free_metadata(ortmem_arena *a)
{
    om_blocks_release(a);
    om_map_free(&a->used);
    om_map_free(&a->freed);
    om_free(a->granules);
    om_free(a->scratch);
    om_sleep_state_free(&a->sleep);
    om_account_drop(&a->account);
    om_free(a);
}

/* ---- create ---- */

static ortmem_status read_options(const ortmem_arena_options *options, ortmem_arena **out,
                                  ortmem_arena_options *opt)
{
    if (!options || !out)
        return OM_ERR(ORTMEM_E_INVALID, "arena create: options or out is NULL");
    ortmem_status st = OM_STRUCT_CHECK("arena create", "options", options);
    if (st != ORTMEM_OK)
        return st;
    memcpy(opt, options, options->struct_size);
    if (opt->capacity == 0)
        return OM_ERR(ORTMEM_E_INVALID, "arena create: capacity is 0");
    if (opt->min_align == 0)
        opt->min_align = OM_DEFAULT_MIN_ALIGN;
    if (!om_is_pow2(opt->min_align))
        return OM_ERR(ORTMEM_E_ALIGN, "arena create: min_align %zu is not a power of two",
                      opt->min_align);
    /* As a region's: a zeroed policy is one extent per granule. Options too
     * short to hold one keep ORTMEM_ARENA_OPTIONS_INIT's. */
    if (opt->extents.struct_size == 0)
        opt->extents = (ortmem_extent_policy){sizeof opt->extents, ORTMEM_EXTENT_GRANULE, 0};
    return ORTMEM_OK;
}

/* The extent policy against the backend's granule; a backend that cannot
 * say is refused by the region create that follows. */
static ortmem_status check_extents(ortmem_backend *backend, const ortmem_extent_policy *policy)
{
    size_t granule = 0;
    uint64_t cap = 0;
    if (ortmem_backend_granule(backend, &granule) != ORTMEM_OK) {
        om_error_clear();
        return ORTMEM_OK;
    }
    ortmem_status st = ortmem_extent_cap_granules(policy, granule, &cap);
    return st == ORTMEM_OK ? st : om_error_wrap(st, "arena create: extents");
}

/* The arena's region, its base aligned to the capacity (a power of two, at
 * most 1 GiB), so where an aligned allocation lands does not depend on where
 * the VA happened to be reserved: placement is the same run after run. */
static ortmem_status create_region(ortmem_backend *backend, const ortmem_arena_options *opt,
                                   ortmem_region **region)
{
    ortmem_region_options ropt = ORTMEM_REGION_OPTIONS_INIT;
    ropt.size = opt->capacity;
    size_t base_align = 1;
    while (base_align < opt->capacity && base_align < ((size_t)1 << 30))
        base_align <<= 1;
    size_t granule = 0;
    if (ortmem_backend_granule(backend, &granule) == ORTMEM_OK && base_align > granule)
        ropt.alignment = base_align;
    ropt.account = opt->account;
    return om_region_create(backend, &ropt, false, false, region);
}

/* Fills in a zeroed arena over region; it takes over the account. */
static void init_arena(ortmem_arena *a, ortmem_region *region, const om_account *account,
                       const ortmem_arena_options *opt)
{
    a->region = region;
    a->account = *account;
    a->base = (uintptr_t)ortmem_region_base(region);
    a->capacity = ortmem_region_size(region);
    a->granule = ortmem_region_granule(region);
    a->granule_count = a->capacity / a->granule;
    a->min_align = opt->min_align;
    a->extents = opt->extents;
    /* Checked before the region was created, against the same granule. */
    uint64_t cap = 1;
    (void)ortmem_extent_cap_granules(&opt->extents, a->granule, &cap);
    a->cap_granules = cap < a->granule_count ? (size_t)cap : a->granule_count;
    /* Offsets stay multiples of the quantum; the base is granule-aligned, so
     * addresses are too, and padding is always a whole number of quanta. */
    a->quantum = opt->min_align < a->granule ? opt->min_align : a->granule;
    size_t cache_bytes = opt->cache_bytes;
    if (cache_bytes == ORTMEM_ARENA_CACHE_DEFAULT)
        cache_bytes = a->capacity < ORTMEM_ARENA_CACHE_DEFAULT_MAX ? a->capacity
                                                                   : ORTMEM_ARENA_CACHE_DEFAULT_MAX;
    /* Never more than the arena has: the reported watermark stays real. */
    a->cache_granules = cache_bytes / a->granule;
    if (a->cache_granules > a->granule_count)
        a->cache_granules = a->granule_count;
    a->lru_head = a->lru_tail = OM_NONE;
}

/* Granule table, eviction scratch and the one free block spanning everything. */
static bool alloc_bookkeeping(ortmem_arena *a)
{
    a->granules = om_calloc(a->granule_count, sizeof *a->granules);
    a->scratch = om_calloc(a->granule_count, sizeof *a->scratch);
    a->first = om_calloc(1, sizeof *a->first);
    if (!a->granules || !a->scratch || !a->first)
        return false;
    for (size_t i = 0; i < a->granule_count; i++)
        a->granules[i].lru_prev = a->granules[i].lru_next = OM_NONE;
    a->first->size = a->capacity;
    a->first->is_free = true;
    om_index_insert(a, a->first);
    return true;
}

/* Undoes a create once the region exists: the region goes first, then the
 * bookkeeping (a NULL: none yet) and the account. The region's destroy
 * clears the thread's detail, so callers set theirs afterwards. */
static void undo_create(ortmem_region *region, ortmem_arena *a, om_account *account)
{
    (void)ortmem_region_destroy(region);
    if (a)
        free_metadata(a);
    else
        om_account_drop(account);
}

ortmem_status ortmem_arena_create(ortmem_backend *backend, const ortmem_arena_options *options,
                                  ortmem_arena **out)
{
    om_error_clear();
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    ortmem_status st = read_options(options, out, &opt);
    if (st != ORTMEM_OK)
        return st;
    om_account account;
    st = om_account_init(&account, opt.account, "arena create");
    if (st != ORTMEM_OK)
        return st;
    st = check_extents(backend, &opt.extents);
    if (st != ORTMEM_OK) {
        om_account_drop(&account);
        return st;
    }
    ortmem_region *region = NULL;
    st = create_region(backend, &opt, &region);
    if (st != ORTMEM_OK) {
        om_account_drop(&account);
        return om_error_wrap(st, "arena create (capacity %zu)", opt.capacity);
    }
    ortmem_arena *a = om_calloc(1, sizeof *a);
    if (!a) {
        undo_create(region, NULL, &account);
        return OM_ERR(ORTMEM_E_NOMEM, "arena create: %zu bytes of bookkeeping", sizeof *a);
    }
    init_arena(a, region, &account, &opt);
    a->backend = backend;
    if (!alloc_bookkeeping(a)) {
        size_t count = a->granule_count;
        undo_create(region, a, NULL);
        return OM_ERR(ORTMEM_E_NOMEM, "arena create: bookkeeping for %zu granules", count);
    }
    pthread_mutex_init(&a->lock, NULL);
    st = om_handle_register(&a->hdr, OM_KIND_ARENA);
    if (st != ORTMEM_OK) {
        pthread_mutex_destroy(&a->lock);
        undo_create(region, a, NULL);
        return st;
    }
    *out = a;
    return ORTMEM_OK;
}

/* ---- destroy ---- */

static ortmem_status busy(ortmem_arena *a)
{
    return OM_ERR(ORTMEM_E_BUSY,
                  "arena destroy: %llu allocations (%llu bytes) are still live; free them or "
                  "pass force",
                  (unsigned long long)a->live_allocations, (unsigned long long)a->allocated_bytes);
}

/* Retires the handle with the lock dropped, so that calls in flight end; they
 * may allocate meanwhile, so the caller looks again. Locked on return. */
static void retire_unlocked(ortmem_arena *a)
{
    a->destroying = true;
    pthread_mutex_unlock(&a->lock);
    /* Cannot fail: the destroying flag keeps a second destroy out. */
    (void)om_handle_retire(&a->hdr, "arena destroy");
    pthread_mutex_lock(&a->lock);
}

/* Drops what is left and destroys the region; a is gone afterwards. */
static ortmem_status tear_down(ortmem_arena *a)
{
    uint64_t dropped = a->live_allocations;
    /* Dropped allocations stop being requested content. */
    om_account_requested(&a->account, -(int64_t)a->allocated_bytes);
    ortmem_status st = ortmem_region_destroy(a->region);
    if (st != ORTMEM_OK)
        st = om_error_wrap(st, "arena destroy (%llu live allocations dropped)",
                           (unsigned long long)dropped);
    pthread_mutex_unlock(&a->lock);
    pthread_mutex_destroy(&a->lock);
    free_metadata(a);
    om_handle_end_destroy();
    return st;
}

ortmem_status ortmem_arena_destroy(ortmem_arena *a, int force)
{
    om_error_clear();
    ortmem_status st = om_arena_pin(a, "arena destroy");
    if (st != ORTMEM_OK)
        return st;
    bool retired = false;
    if (a->destroying) { /* two retires of one handle would wait for each other forever */
        st = OM_ERR(ORTMEM_E_HANDLE, "arena destroy: %p is being destroyed by another call",
                    (void *)a);
    } else if (a->live_allocations && !force) {
        st = busy(a);
    } else {
        retire_unlocked(a);
        retired = true;
        if (a->live_allocations && !force) {
            st = busy(a);
            a->destroying = false;
        }
    }
    if (st == ORTMEM_OK)
        return tear_down(a);
    pthread_mutex_unlock(&a->lock);
    if (retired)
        om_handle_revive(&a->hdr);
    om_handle_unpin(&a->hdr);
    return st;
}

/* ---- alloc ---- */

static ortmem_status check_alloc(const ortmem_arena *a, size_t size, size_t align, void **ptr,
                                 size_t *eff_align)
{
    if (!ptr)
        return OM_ERR(ORTMEM_E_INVALID, "arena alloc: ptr output is NULL");
    if (size == 0)
        return OM_ERR(ORTMEM_E_INVALID, "arena alloc: size is 0");
    if (align && !om_is_pow2(align))
        return OM_ERR(ORTMEM_E_ALIGN, "arena alloc: alignment %zu is not a power of two", align);
    *eff_align = align > a->min_align ? align : a->min_align;
    if (size > SIZE_MAX - *eff_align)
        return OM_ERR(ORTMEM_E_OVERFLOW, "arena alloc: size %zu + alignment %zu overflows", size,
                      *eff_align);
    return ORTMEM_OK;
}

/* Turns [start, start + bytes) of the free block b into the allocation. */
static void place(ortmem_arena *a, om_block *b, size_t start, size_t bytes, size_t size)
{
    om_block_carve(a, b, start, start + bytes);
    b->requested = size;
    om_map_insert(&a->used, b);
    a->used_bytes += bytes;
    om_granules_take(a, start / a->granule, (start + bytes - 1) / a->granule);
    a->allocated_bytes += size;
    om_account_requested(&a->account, (int64_t)size);
    a->allocated_peak =
        a->allocated_bytes > a->allocated_peak ? a->allocated_bytes : a->allocated_peak;
    a->live_allocations++;
    a->allocs++;
}

/* One attempt; everything that can fail comes before the first change. A
 * commit refused because the region quarantined a granule fences it (*fenced). */
static ortmem_status alloc_once(ortmem_arena *a, size_t size, size_t align, void **ptr,
                                bool *fenced, om_relief *relief)
{
    size_t eff_align = 0;
    ortmem_status st = check_alloc(a, size, align, ptr, &eff_align);
    if (st != ORTMEM_OK)
        return st;
    if (a->asleep)
        return OM_ERR(ORTMEM_E_STATE,
                      "arena alloc of %zu bytes: the arena is asleep (ortmem_arena_wake first)",
                      size);
    size_t bytes = om_round_up(size, a->quantum), start = 0;
    om_block *b = bytes <= a->capacity ? om_index_find(a, bytes, eff_align, &start) : NULL;
    if (!b)
        return OM_ERR(ORTMEM_E_NOMEM,
                      "arena alloc: no free block holds %zu bytes aligned to %zu (largest free "
                      "block %zu bytes; %zu of %zu bytes capacity free)",
                      size, eff_align, om_index_largest(a), a->capacity - a->used_bytes,
                      a->capacity);
    if (!om_blocks_grow(a, 2) || !om_map_grow(&a->used))
        return OM_ERR(ORTMEM_E_NOMEM, "arena alloc: host bookkeeping for %zu live allocations",
                      a->used.count + 1);
    size_t c_first = OM_NONE, c_last = 0;
    st = om_granules_commit(a, start / a->granule, (start + bytes - 1) / a->granule, relief, fenced,
                            &c_first, &c_last);
    if (st != ORTMEM_OK)
        return om_error_wrap(st,
                             "arena alloc of %zu bytes aligned to %zu: committing granules "
                             "[%zu, %zu] failed, nothing changed",
                             size, eff_align, c_first, c_last);
    place(a, b, start, bytes, size);
    assert(om_arena_ledger_consistent(a));
    *ptr = (void *)(a->base + start);
    om_trace_line("alloc p%lx %zu %zu", (unsigned long)(uintptr_t)*ptr, size, align);
    return ORTMEM_OK;
}

/* A commit refused because the region quarantined a granule fences that
 * granule off and searches again, so later allocations go elsewhere. */
static ortmem_status alloc_locked(ortmem_arena *a, size_t size, size_t align, void **ptr,
                                  om_relief *relief)
{
    ortmem_status st;
    bool fenced;
    int attempts = 0;
    do {
        fenced = false;
        st = alloc_once(a, size, align, ptr, &fenced, relief);
    } while (st != ORTMEM_OK && fenced && ++attempts < 4);
    return st;
}

/* A commit refused for budget while empty extents are cached: the cache
 * goes (pressure never asks the requester's own holder) and the alloc is
 * tried once more, so it fails only where an uncached arena's would. */
static ortmem_status alloc_without_cache(ortmem_arena *a, size_t size, size_t align, void **ptr,
                                         om_relief *relief)
{
    om_error_saved refused;
    om_error_save(&refused);
    size_t unmapped = 0;
    /* Back to the backend, not its pool, so the budget sees the bytes go;
     * what fails to go stays cached. */
    (void)om_cache_evict(a, 0, ORTMEM_DECOMMIT_NO_POOL, &unmapped);
    if (unmapped == 0)
        return om_error_restore(&refused, ORTMEM_E_BUDGET);
    a->reclaimed_bytes += (uint64_t)unmapped * a->granule;
    om_error_clear();
    return alloc_locked(a, size, align, ptr, relief);
}

static ortmem_status arena_alloc_once(ortmem_arena *a, size_t size, size_t align, void **ptr,
                                      om_relief *relief)
{
    om_error_clear();
    ortmem_status st = om_arena_pin(a, "arena alloc");
    if (st != ORTMEM_OK)
        return st;
    st = alloc_locked(a, size, align, ptr, relief);
    if (st == ORTMEM_E_BUDGET && a->cached_count > 0)
        st = alloc_without_cache(a, size, align, ptr, relief);
    bool retried =
        st == ORTMEM_E_BUDGET && relief && relief->set && om_account_can_relieve(&relief->account);
    if (st != ORTMEM_OK && !retried)
        a->failed_allocs++; /* a refusal about to be relieved and retried is not final */
    om_arena_unpin(a);
    return st;
}

ortmem_status ortmem_arena_alloc(ortmem_arena *a, size_t size, size_t align, void **ptr)
{
    om_relief relief = {0};
    ortmem_status st = arena_alloc_once(a, size, align, ptr, &relief);
    if (om_relief_run(&relief, st))
        st = arena_alloc_once(a, size, align, ptr, NULL);
    return st;
}

/* ---- free ---- */

/* The used block starting at ptr, or why there is none. */
static ortmem_status find_used(const ortmem_arena *a, void *ptr, om_block **out)
{
    if (!ptr)
        return OM_ERR(ORTMEM_E_INVALID, "arena free: pointer is NULL");
    uintptr_t addr = (uintptr_t)ptr;
    if (addr < a->base || addr - a->base >= a->capacity)
        return OM_ERR(ORTMEM_E_NOT_FOUND, "arena free: %p lies outside the arena [%p, +%zu)", ptr,
                      (void *)a->base, a->capacity);
    size_t offset = (size_t)(addr - a->base);
    *out = om_map_find(&a->used, offset);
    if (*out)
        return ORTMEM_OK;
    if (om_map_find(&a->freed, offset))
        return OM_ERR(ORTMEM_E_DOUBLE_FREE,
                      "arena free: %p (offset %zu) was already freed and not handed out "
                      "since",
                      ptr, offset);
    return OM_ERR(ORTMEM_E_NOT_FOUND,
                  "arena free: %p (offset %zu) is not the start of a live allocation", ptr, offset);
}

/* The record that makes a second free a DOUBLE_FREE; without host memory for
 * it the free still goes ahead (a second free then reads NOT_FOUND). */
static om_freed *new_freed_record(ortmem_arena *a)
{
    om_freed *record = om_malloc(sizeof *record);
    if (record && !om_map_grow(&a->freed)) {
        om_free(record);
        record = NULL;
    }
    return record;
}

/* Turns the used block b back into free memory, remembering its start. */
static void unplace(ortmem_arena *a, om_block *b, om_freed *record)
{
    size_t offset = b->offset, g = a->granule;
    size_t g_first = b->offset / g, g_last = (b->offset + b->size - 1) / g;
    om_map_remove(&a->used, offset);
    a->used_bytes -= b->size;
    a->allocated_bytes -= b->requested;
    om_account_requested(&a->account, -(int64_t)b->requested);
    a->live_allocations--;
    a->frees++;
    b->is_free = true;
    b->requested = 0;
    if (record) {
        *record = (om_freed){offset, NULL};
        om_map_insert(&a->freed, record);
        b->freed_head = b->freed_tail = record;
    }
    om_block_coalesce(a, b);
    om_granules_put(a, g_first, g_last);
}

/* warning gets what a failed decommit said, to be logged once unlocked. */
static ortmem_status free_locked(ortmem_arena *a, void *ptr, char *warning, size_t warning_len)
{
    om_block *b = NULL;
    ortmem_status st = find_used(a, ptr, &b);
    if (st != ORTMEM_OK)
        return st;
    unplace(a, b, new_freed_record(a));
    if (om_cache_evict(a, a->cache_granules, 0, NULL) != ORTMEM_OK) {
        /* The block is free either way; the granules stay cached. */
        snprintf(warning, warning_len, "arena free of %p: %s", ptr, ortmem_last_error());
        om_error_clear();
    }
    assert(om_arena_ledger_consistent(a));
    om_trace_line("free p%lx", (unsigned long)(uintptr_t)ptr);
    return ORTMEM_OK;
}

ortmem_status ortmem_arena_free(ortmem_arena *a, void *ptr)
{
    om_error_clear();
    ortmem_status st = om_arena_pin(a, "arena free");
    if (st != ORTMEM_OK)
        return st;
    char warning[512] = "";
    st = free_locked(a, ptr, warning, sizeof warning);
    om_arena_unpin(a);
    /* Logged outside the lock: the callback may call into this arena. */
    if (warning[0])
        om_log(ORTMEM_LOG_WARN, "%s", warning);
    return st;
}

/* ---- stats, trim, region ---- */

ortmem_status ortmem_arena_stats_get(ortmem_arena *a, ortmem_arena_stats *stats)
{
    om_error_clear();
    ortmem_status st = OM_STRUCT_CHECK("arena stats", "stats", stats);
    if (st != ORTMEM_OK)
        return st;
    st = om_arena_pin(a, "arena stats");
    if (st != ORTMEM_OK)
        return st;
    ortmem_arena_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = stats->struct_size;
    s.allocated_bytes = a->allocated_bytes;
    s.allocated_peak_bytes = a->allocated_peak;
    s.live_allocations = a->live_allocations;
    s.committed_bytes = (uint64_t)a->committed_count * a->granule;
    s.committed_peak_bytes = a->committed_peak;
    s.cached_bytes = (uint64_t)a->cached_count * a->granule;
    s.allocs = a->allocs;
    s.frees = a->frees;
    s.failed_allocs = a->failed_allocs;
    s.quarantined_bytes = (uint64_t)a->quarantined_count * a->granule;
    s.cache_limit_bytes = (uint64_t)a->cache_granules * a->granule;
    s.reclaimed_bytes = a->reclaimed_bytes;
    s.extents_committed = a->extent_count;
    s.asleep = a->asleep;
    for (size_t i = 0; i < a->sleep.dormant_count; i++)
        s.dormant_bytes += (uint64_t)a->sleep.dormant[i].granules * a->granule;
    s.backup_bytes = a->sleep.backup ? a->sleep.backup_bytes : 0;
    s.sleeps = a->sleeps;
    s.wakes = a->wakes;
    om_arena_unpin(a);
    memcpy(stats, &s, stats->struct_size);
    return ORTMEM_OK;
}

ortmem_status ortmem_arena_trim(ortmem_arena *a, size_t keep_bytes)
{
    om_error_clear();
    ortmem_status st = om_arena_pin(a, "arena trim");
    if (st != ORTMEM_OK)
        return st;
    st = om_cache_evict(a, keep_bytes / a->granule, 0, NULL);
    if (st != ORTMEM_OK)
        st = om_error_wrap(st, "arena trim to %zu bytes", keep_bytes);
    assert(om_arena_ledger_consistent(a));
    om_arena_unpin(a);
    return st;
}

ortmem_status ortmem_arena_reclaim(ortmem_arena *a, uint64_t want_bytes, uint64_t *reclaimed_bytes)
{
    om_error_clear();
    if (reclaimed_bytes)
        *reclaimed_bytes = 0;
    ortmem_status st = om_arena_pin(a, "arena reclaim");
    if (st != ORTMEM_OK)
        return st;
    uint64_t want_granules = want_bytes / a->granule + (want_bytes % a->granule != 0);
    size_t keep = a->cached_count > want_granules ? a->cached_count - (size_t)want_granules : 0;
    size_t unmapped = 0;
    st = om_cache_evict(a, keep, ORTMEM_DECOMMIT_NO_POOL, &unmapped);
    uint64_t got = (uint64_t)unmapped * a->granule;
    a->reclaimed_bytes += got;
    if (st != ORTMEM_OK)
        st = om_error_wrap(st, "arena reclaim of %llu bytes (%llu reclaimed)",
                           (unsigned long long)want_bytes, (unsigned long long)got);
    assert(om_arena_ledger_consistent(a));
    om_arena_unpin(a);
    if (reclaimed_bytes)
        *reclaimed_bytes = got;
    return st;
}

uint64_t ortmem_arena_pressure(void *arena, uint64_t want_bytes)
{
    uint64_t got = 0;
    ortmem_status st = ortmem_arena_reclaim(arena, want_bytes, &got);
    /* Logged with the arena unlocked: the log callback may call into it. */
    if (st != ORTMEM_OK)
        om_log(ORTMEM_LOG_WARN, "arena pressure: %s", ortmem_last_error());
    return got;
}

ortmem_region *ortmem_arena_region(ortmem_arena *a)
{
    om_error_clear();
    if (om_arena_pin(a, "arena region") != ORTMEM_OK)
        return NULL;
    ortmem_region *region = a->region;
    om_arena_unpin(a);
    return region;
}
