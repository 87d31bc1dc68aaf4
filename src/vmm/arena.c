/* Arena: a malloc-like sub-allocator over one region.
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
 * - per granule: how many live allocations touch it, whether it is committed,
 *   and its place in the LRU list of empty committed granules (the cache).
 *
 * Alloc is transactional: host bookkeeping is reserved and the granules are
 * committed (one region call for the run) before any index changes, so a
 * failure leaves the arena exactly as it was (failed_allocs aside, which
 * counts every failed alloc on a live handle). Free always takes effect: a
 * failed decommit leaves the granule committed and counted as cached.
 * Lock order: arena, then region (the region never calls back). */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/handle.h"
#include "core/log.h"
#include "core/trace.h"
#include "vmm/account.h"
#include "vmm/region.h"

_Static_assert(SIZE_MAX <= UINT64_MAX, "size classes assume a 64-bit size_t at most");
_Static_assert(sizeof(uintptr_t) >= sizeof(size_t), "offsets must fit in addresses");

#define OM_SL_LOG2 5u
#define OM_SL_COUNT (1u << OM_SL_LOG2)
#define OM_FL_COUNT 64u
#define OM_NONE SIZE_MAX
#define OM_DEFAULT_MIN_ALIGN ((size_t)256)
#define OM_SPARE_NODES_MAX 64u
#define OM_MAP_MIN_SLOTS 64u

/* A start that was freed; lives in the free block that holds it. */
typedef struct om_freed {
    size_t offset; /* first member: the key of the address map */
    struct om_freed *next;
} om_freed;

typedef struct om_block {
    size_t offset;    /* first member: the key of the address map */
    size_t size;      /* multiple of the quantum */
    size_t requested; /* used blocks: the size the caller asked for */
    struct om_block *phys_prev, *phys_next;
    struct om_block *free_prev, *free_next;
    om_freed *freed_head, *freed_tail; /* free blocks: freed starts, address order */
    bool is_free;
} om_block;

/* Linear-probing set of entries whose first member is their size_t key. */
typedef struct om_addr_map {
    void **slots;
    size_t cap; /* power of two, or 0 */
    size_t count;
} om_addr_map;

typedef struct om_granule {
    size_t live; /* live allocations touching this granule */
    size_t lru_prev, lru_next;
    bool committed;
    bool cached; /* committed, live == 0, on the LRU list */
} om_granule;

struct ortmem_arena {
    om_handle hdr;
    pthread_mutex_t lock;
    ortmem_region *region;
    uintptr_t base;
    size_t capacity;
    size_t granule;
    size_t granule_count;
    size_t min_align;
    size_t quantum; /* block sizes and offsets are multiples of it */
    size_t cache_granules;
    bool destroying; /* a destroy is retiring the handle */
    /* Free-block index. */
    uint64_t fl_bitmap;
    uint32_t sl_bitmap[OM_FL_COUNT];
    om_block *heads[OM_FL_COUNT][OM_SL_COUNT];
    om_block *first; /* block at offset 0 */
    om_block *spare; /* recycled nodes, linked through phys_next */
    size_t spare_count;
    om_addr_map used;  /* offset -> used block */
    om_addr_map freed; /* offset -> om_freed */
    size_t used_bytes; /* rounded sizes of used blocks */
    /* Granules. */
    om_granule *granules;
    size_t lru_head, lru_tail; /* head: least recently emptied */
    size_t cached_count;
    size_t committed_count;
    size_t fenced_count; /* granules the region quarantined, never handed out */
    om_account account;  /* told the allocated bytes as the requested content */
    size_t *scratch;     /* granule indices of one eviction pass */
    /* Stats. */
    uint64_t allocated_bytes, allocated_peak, live_allocations, committed_peak;
    uint64_t allocs, frees, failed_allocs;
};

static bool is_pow2(size_t v)
{
    return v && !(v & (v - 1));
}

static size_t round_up(size_t v, size_t pow2)
{
    return (v + pow2 - 1) & ~(pow2 - 1);
}

static unsigned floor_log2(size_t v)
{
    return 63u - (unsigned)__builtin_clzll((unsigned long long)v);
}

/* ---- address map ---- */

static size_t map_key(const void *entry)
{
    return *(const size_t *)entry;
}

static size_t map_hash(size_t key)
{
    uint64_t x = (uint64_t)key;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

/* Slot holding key, or the empty slot that ends its probe run. */
static size_t map_slot(const om_addr_map *m, size_t key)
{
    size_t mask = m->cap - 1;
    for (size_t i = map_hash(key) & mask;; i = (i + 1) & mask) {
        if (!m->slots[i] || map_key(m->slots[i]) == key)
            return i;
    }
}

static void *map_find(const om_addr_map *m, size_t key)
{
    return m->cap ? m->slots[map_slot(m, key)] : NULL;
}

/* Makes room for one more entry, so the insert that follows cannot fail. */
static bool map_reserve(om_addr_map *m)
{
    if ((m->count + 1) * 2 <= m->cap)
        return true;
    size_t ncap = m->cap ? m->cap * 2 : OM_MAP_MIN_SLOTS;
    if (ncap <= m->cap)
        return false;
    void **fresh = om_calloc(ncap, sizeof *fresh);
    if (!fresh)
        return false;
    void **old = m->slots;
    size_t ocap = m->cap;
    m->slots = fresh;
    m->cap = ncap;
    for (size_t i = 0; i < ocap; i++) {
        if (old[i])
            m->slots[map_slot(m, map_key(old[i]))] = old[i];
    }
    om_free(old);
    return true;
}

/* The key must be absent and room reserved. */
static void map_insert(om_addr_map *m, void *entry)
{
    m->slots[map_slot(m, map_key(entry))] = entry;
    m->count++;
}

static void map_remove(om_addr_map *m, size_t key)
{
    if (!m->cap)
        return;
    size_t mask = m->cap - 1;
    size_t hole = map_slot(m, key);
    if (!m->slots[hole])
        return;
    m->slots[hole] = NULL;
    m->count--;
    /* Backward shift: entries later in the run move into the hole when that
     * brings them nearer home, so lookups never need tombstones. */
    for (size_t j = (hole + 1) & mask; m->slots[j]; j = (j + 1) & mask) {
        size_t home = map_hash(map_key(m->slots[j])) & mask;
        if (((hole - home) & mask) < ((j - home) & mask)) {
            m->slots[hole] = m->slots[j];
            m->slots[j] = NULL;
            hole = j;
        }
    }
}

static void map_release(om_addr_map *m)
{
    om_free(m->slots);
    *m = (om_addr_map){NULL, 0, 0};
}

/* ---- free-block index (TLSF) ---- */

static void size_class(size_t size, unsigned *fl, unsigned *sl)
{
    if (size < OM_SL_COUNT) {
        *fl = 0;
        *sl = (unsigned)size;
        return;
    }
    unsigned log2 = floor_log2(size);
    *fl = log2 - OM_SL_LOG2 + 1;
    *sl = (unsigned)(size >> (log2 - OM_SL_LOG2)) - OM_SL_COUNT;
}

static void index_insert(ortmem_arena *a, om_block *b)
{
    unsigned fl, sl;
    size_class(b->size, &fl, &sl);
    om_block *head = a->heads[fl][sl];
    b->free_prev = NULL;
    b->free_next = head;
    if (head)
        head->free_prev = b;
    a->heads[fl][sl] = b;
    a->fl_bitmap |= (uint64_t)1 << fl;
    a->sl_bitmap[fl] |= (uint32_t)1 << sl;
}

static void index_remove(ortmem_arena *a, om_block *b)
{
    unsigned fl, sl;
    size_class(b->size, &fl, &sl);
    if (b->free_prev)
        b->free_prev->free_next = b->free_next;
    else
        a->heads[fl][sl] = b->free_next;
    if (b->free_next)
        b->free_next->free_prev = b->free_prev;
    b->free_prev = b->free_next = NULL;
    if (!a->heads[fl][sl]) {
        a->sl_bitmap[fl] &= ~((uint32_t)1 << sl);
        if (!a->sl_bitmap[fl])
            a->fl_bitmap &= ~((uint64_t)1 << fl);
    }
}

/* Head of the first non-empty list of class (fl, sl) or above. */
static om_block *index_first_at_or_above(const ortmem_arena *a, unsigned fl, unsigned sl)
{
    uint32_t sl_map = a->sl_bitmap[fl] & (~(uint32_t)0 << sl);
    if (!sl_map) {
        if (fl + 1 >= OM_FL_COUNT)
            return NULL;
        uint64_t fl_map = a->fl_bitmap & (~(uint64_t)0 << (fl + 1));
        if (!fl_map)
            return NULL;
        fl = (unsigned)__builtin_ctzll(fl_map);
        sl_map = a->sl_bitmap[fl];
    }
    return a->heads[fl][__builtin_ctz(sl_map)];
}

/* Offset at which b holds bytes aligned to align (absolute address), or OM_NONE. */
static size_t fit_offset(const ortmem_arena *a, const om_block *b, size_t bytes, size_t align)
{
    uintptr_t addr = a->base + b->offset;
    if (addr > UINTPTR_MAX - (align - 1))
        return OM_NONE;
    size_t pad = (size_t)(((addr + align - 1) & ~(uintptr_t)(align - 1)) - addr);
    if (pad > b->size || b->size - pad < bytes)
        return OM_NONE;
    return b->offset + pad;
}

/* A free block that holds bytes at align; *start gets the aligned offset. */
static om_block *index_find(const ortmem_arena *a, size_t bytes, size_t align, size_t *start)
{
    /* Good fit in O(1): round the request plus its worst padding up to the
     * next class boundary; every block at or above that class fits. */
    size_t worst_pad = align > a->quantum ? align - a->quantum : 0;
    if (bytes <= SIZE_MAX - worst_pad) {
        size_t want = bytes + worst_pad;
        size_t step = want >= OM_SL_COUNT ? (size_t)1 << (floor_log2(want) - OM_SL_LOG2) : 1;
        if (want <= SIZE_MAX - (step - 1)) {
            unsigned fl, sl;
            size_class(want + step - 1, &fl, &sl);
            om_block *b = index_first_at_or_above(a, fl, sl);
            size_t off = b ? fit_offset(a, b, bytes, align) : OM_NONE;
            if (off != OM_NONE) {
                *start = off;
                return b;
            }
        }
    }
    /* Rounding skipped the classes just below it, whose blocks may still fit
     * (given their real padding). Scan them, so that ORTMEM_E_NOMEM means no
     * block fits at all. Classes above were empty, so this walk stays short
     * unless the alignment is large. */
    unsigned fl, sl;
    size_class(bytes, &fl, &sl);
    for (; fl < OM_FL_COUNT; fl++, sl = 0) {
        uint32_t sl_map = a->sl_bitmap[fl] & (~(uint32_t)0 << sl);
        while (sl_map) {
            unsigned s = (unsigned)__builtin_ctz(sl_map);
            sl_map &= sl_map - 1;
            for (om_block *b = a->heads[fl][s]; b; b = b->free_next) {
                size_t off = fit_offset(a, b, bytes, align);
                if (off != OM_NONE) {
                    *start = off;
                    return b;
                }
            }
        }
    }
    return NULL;
}

static size_t largest_free_block(const ortmem_arena *a)
{
    if (!a->fl_bitmap)
        return 0;
    unsigned fl = 63u - (unsigned)__builtin_clzll(a->fl_bitmap);
    unsigned sl = 31u - (unsigned)__builtin_clz(a->sl_bitmap[fl]);
    size_t largest = 0;
    for (const om_block *b = a->heads[fl][sl]; b; b = b->free_next)
        largest = b->size > largest ? b->size : largest;
    return largest;
}

/* ---- block nodes ---- */

/* Tops up the spare nodes so the carve that follows cannot fail. */
static bool nodes_reserve(ortmem_arena *a, size_t n)
{
    while (a->spare_count < n) {
        om_block *b = om_malloc(sizeof *b);
        if (!b)
            return false;
        b->phys_next = a->spare;
        a->spare = b;
        a->spare_count++;
    }
    return true;
}

static om_block *node_take(ortmem_arena *a)
{
    om_block *b = a->spare;
    a->spare = b->phys_next;
    a->spare_count--;
    memset(b, 0, sizeof *b);
    return b;
}

static void node_give(ortmem_arena *a, om_block *b)
{
    if (a->spare_count >= OM_SPARE_NODES_MAX) {
        om_free(b);
        return;
    }
    b->phys_next = a->spare;
    a->spare = b;
    a->spare_count++;
}

static void link_before(ortmem_arena *a, om_block *at, om_block *b)
{
    b->phys_prev = at->phys_prev;
    b->phys_next = at;
    if (at->phys_prev)
        at->phys_prev->phys_next = b;
    else
        a->first = b;
    at->phys_prev = b;
}

static void link_after(om_block *at, om_block *b)
{
    b->phys_prev = at;
    b->phys_next = at->phys_next;
    if (at->phys_next)
        at->phys_next->phys_prev = b;
    at->phys_next = b;
}

/* Unlinks b, which always has a lower neighbour (it is merged into it). */
static void unlink_block(om_block *b)
{
    b->phys_prev->phys_next = b->phys_next;
    if (b->phys_next)
        b->phys_next->phys_prev = b->phys_prev;
}

static void freed_append(om_block *dst, om_freed *head, om_freed *tail)
{
    if (!head)
        return;
    if (dst->freed_tail)
        dst->freed_tail->next = head;
    else
        dst->freed_head = head;
    dst->freed_tail = tail;
}

/* Turns [start, end) of the free block b into a used block (b itself); the
 * rest becomes free blocks on either side. Needs two spare nodes. Freed
 * starts inside [start, end) are forgotten: that memory is handed out again. */
static void carve(ortmem_arena *a, om_block *b, size_t start, size_t end)
{
    index_remove(a, b);
    om_block *left = NULL, *right = NULL;
    if (start > b->offset) {
        left = node_take(a);
        left->offset = b->offset;
        left->size = start - b->offset;
        left->is_free = true;
        link_before(a, b, left);
    }
    size_t block_end = b->offset + b->size;
    if (end < block_end) {
        right = node_take(a);
        right->offset = end;
        right->size = block_end - end;
        right->is_free = true;
        link_after(b, right);
    }
    om_freed *r = b->freed_head, *tail = b->freed_tail;
    while (r && r->offset < start) {
        om_freed *next = r->next;
        r->next = NULL;
        freed_append(left, r, r);
        r = next;
    }
    while (r && r->offset < end) {
        om_freed *next = r->next;
        map_remove(&a->freed, r->offset);
        om_free(r);
        r = next;
    }
    if (r)
        freed_append(right, r, tail);
    b->offset = start;
    b->size = end - start;
    b->is_free = false;
    b->freed_head = b->freed_tail = NULL;
    if (left)
        index_insert(a, left);
    if (right)
        index_insert(a, right);
}

/* Merges the newly free block b with free neighbours and indexes the result. */
static void coalesce(ortmem_arena *a, om_block *b)
{
    om_block *prev = b->phys_prev;
    if (prev && prev->is_free) {
        index_remove(a, prev);
        prev->size += b->size;
        freed_append(prev, b->freed_head, b->freed_tail);
        unlink_block(b);
        node_give(a, b);
        b = prev;
    }
    om_block *next = b->phys_next;
    if (next && next->is_free) {
        index_remove(a, next);
        b->size += next->size;
        freed_append(b, next->freed_head, next->freed_tail);
        unlink_block(next);
        node_give(a, next);
    }
    index_insert(a, b);
}

/* ---- granule cache (LRU of empty committed granules) ---- */

static void lru_unlink(ortmem_arena *a, size_t i)
{
    om_granule *g = &a->granules[i];
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
    a->cached_count--;
}

/* most_recent: at the tail (evicted last); else at the head (evicted next). */
static void lru_add(ortmem_arena *a, size_t i, bool most_recent)
{
    om_granule *g = &a->granules[i];
    if (most_recent) {
        g->lru_prev = a->lru_tail;
        g->lru_next = OM_NONE;
        if (a->lru_tail != OM_NONE)
            a->granules[a->lru_tail].lru_next = i;
        else
            a->lru_head = i;
        a->lru_tail = i;
    } else {
        g->lru_prev = OM_NONE;
        g->lru_next = a->lru_head;
        if (a->lru_head != OM_NONE)
            a->granules[a->lru_head].lru_prev = i;
        else
            a->lru_tail = i;
        a->lru_head = i;
    }
    g->cached = true;
    a->cached_count++;
}

static void mark_decommitted(ortmem_arena *a, size_t i)
{
    a->granules[i].committed = false;
    a->committed_count--;
}

/* A granule the region quarantined can never be mapped again: its bytes
 * become a block that is never free, so no allocation lands there. An empty
 * granule lies wholly inside one free block (free neighbours coalesce). */
static bool fence_granule(ortmem_arena *a, size_t i)
{
    size_t start = i * a->granule, end = start + a->granule;
    om_block *b = a->first;
    while (b && b->offset + b->size <= start)
        b = b->phys_next;
    if (!b || !b->is_free || b->offset > start || b->offset + b->size < end || !nodes_reserve(a, 2))
        return false;
    carve(a, b, start, end);
    a->used_bytes += a->granule;
    a->granules[i].live = 1; /* never empty again: never cached nor recommitted */
    a->fenced_count++;
    return true;
}

static bool granule_poisoned(ortmem_arena *a, size_t i)
{
    ortmem_granule_info info = {.struct_size = sizeof info};
    return ortmem_region_granule_info(a->region, i * a->granule, &info) == ORTMEM_OK &&
           info.state == ORTMEM_GRANULE_POISONED;
}

static int compare_index(const void *x, const void *y)
{
    size_t a = *(const size_t *)x, b = *(const size_t *)y;
    return (a > b) - (a < b);
}

/* Decommits the least recently emptied cached granules until at most keep
 * stay cached: one region call per contiguous run. A run whose decommit fails
 * stays committed and cached, first in line next time; the first failure is
 * returned with its detail. */
static ortmem_status evict_cached(ortmem_arena *a, size_t keep)
{
    size_t n = 0;
    while (a->cached_count > keep) {
        size_t i = a->lru_head;
        lru_unlink(a, i);
        a->scratch[n++] = i;
    }
    if (n > 1)
        qsort(a->scratch, n, sizeof *a->scratch, compare_index);
    ortmem_status result = ORTMEM_OK;
    char detail[256] = "";
    size_t failed_first = 0, failed_last = 0;
    size_t g = a->granule;
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && a->scratch[j] == a->scratch[j - 1] + 1; j++) {
        }
        size_t g0 = a->scratch[i];
        ortmem_status st = ortmem_region_decommit(a->region, g0 * g, (j - i) * g);
        if (st == ORTMEM_OK) {
            for (size_t k = i; k < j; k++)
                mark_decommitted(a, a->scratch[k]);
            continue;
        }
        if (result == ORTMEM_OK) {
            result = st;
            failed_first = g0;
            failed_last = a->scratch[j - 1];
            snprintf(detail, sizeof detail, "%s", ortmem_last_error());
        }
        /* Ask the region what really happened (QUARANTINED: unmapped, but a
         * release failed; otherwise nothing changed). */
        for (size_t k = i; k < j; k++) {
            ortmem_granule_info info = {.struct_size = sizeof info};
            bool mapped =
                ortmem_region_granule_info(a->region, a->scratch[k] * g, &info) != ORTMEM_OK ||
                info.state == ORTMEM_GRANULE_MAPPED;
            if (mapped) {
                lru_add(a, a->scratch[k], false);
            } else {
                mark_decommitted(a, a->scratch[k]);
                if (info.state == ORTMEM_GRANULE_POISONED)
                    (void)fence_granule(a, a->scratch[k]);
            }
        }
    }
    if (result != ORTMEM_OK)
        return OM_ERR(result,
                      "arena: decommitting granules [%zu, %zu] failed (%s); %zu bytes stay "
                      "cached against a cache of %zu bytes",
                      failed_first, failed_last, detail, a->cached_count * g,
                      a->cache_granules * g);
    return ORTMEM_OK;
}

/* ---- entries ---- */

static ortmem_status pin_arena(ortmem_arena *a, const char *what)
{
    ortmem_status st = om_handle_pin(a, OM_KIND_ARENA, what);
    if (st == ORTMEM_OK)
        pthread_mutex_lock(&a->lock);
    return st;
}

static void unpin_arena(ortmem_arena *a)
{
    pthread_mutex_unlock(&a->lock);
    om_handle_unpin(&a->hdr);
}

static void release_metadata(ortmem_arena *a)
{
    for (om_block *b = a->first, *next; b; b = next) {
        next = b->phys_next;
        for (om_freed *r = b->freed_head, *rn; r; r = rn) {
            rn = r->next;
            om_free(r);
        }
        om_free(b);
    }
    for (om_block *b = a->spare, *next; b; b = next) {
        next = b->phys_next;
        om_free(b);
    }
    map_release(&a->used);
    map_release(&a->freed);
    om_free(a->granules);
    om_free(a->scratch);
    om_account_drop(&a->account);
    om_free(a);
}

ortmem_status ortmem_arena_create(ortmem_backend *backend, const ortmem_arena_options *options,
                                  ortmem_arena **out)
{
    om_error_clear();
    if (!options || !out)
        return OM_ERR(ORTMEM_E_INVALID, "arena create: options or out is NULL");
    if (options->struct_size == 0 || options->struct_size > sizeof(ortmem_arena_options))
        return OM_ERR(ORTMEM_E_INVALID,
                      "arena create: options struct_size %zu (this library knows %zu)",
                      options->struct_size, sizeof(ortmem_arena_options));
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    memcpy(&opt, options, options->struct_size);
    if (opt.capacity == 0)
        return OM_ERR(ORTMEM_E_INVALID, "arena create: capacity is 0");
    size_t min_align = opt.min_align ? opt.min_align : OM_DEFAULT_MIN_ALIGN;
    if (!is_pow2(min_align))
        return OM_ERR(ORTMEM_E_ALIGN, "arena create: min_align %zu is not a power of two",
                      min_align);
    om_account account;
    ortmem_status st = om_account_init(&account, opt.account, "arena create");
    if (st != ORTMEM_OK)
        return st;
    ortmem_region_options ropt = ORTMEM_REGION_OPTIONS_INIT;
    ropt.size = opt.capacity;
    /* The base is aligned to the capacity (a power of two, at most 1 GiB), so
     * where an aligned allocation lands does not depend on where the VA
     * happened to be reserved: placement is the same run after run. */
    size_t base_align = 1;
    while (base_align < opt.capacity && base_align < ((size_t)1 << 30))
        base_align <<= 1;
    size_t granule = 0;
    if (ortmem_backend_granule(backend, &granule) == ORTMEM_OK && base_align > granule)
        ropt.alignment = base_align;
    ropt.account = opt.account;
    ortmem_region *region = NULL;
    st = om_region_create(backend, &ropt, false, false, &region);
    if (st != ORTMEM_OK) {
        om_account_drop(&account);
        return om_error_wrap(st, "arena create (capacity %zu)", opt.capacity);
    }
    ortmem_arena *a = om_calloc(1, sizeof *a);
    if (!a) {
        (void)ortmem_region_destroy(region);
        om_account_drop(&account);
        return OM_ERR(ORTMEM_E_NOMEM, "arena create: %zu bytes of bookkeeping", sizeof *a);
    }
    a->region = region;
    a->account = account;
    a->base = (uintptr_t)ortmem_region_base(region);
    a->capacity = ortmem_region_size(region);
    a->granule = ortmem_region_granule(region);
    a->granule_count = a->capacity / a->granule;
    a->min_align = min_align;
    /* Offsets stay multiples of the quantum; the base is granule-aligned, so
     * addresses are too, and padding is always a whole number of quanta. */
    a->quantum = min_align < a->granule ? min_align : a->granule;
    a->cache_granules = opt.cache_bytes / a->granule;
    a->lru_head = a->lru_tail = OM_NONE;
    a->granules = om_calloc(a->granule_count, sizeof *a->granules);
    a->scratch = om_calloc(a->granule_count, sizeof *a->scratch);
    a->first = om_calloc(1, sizeof *a->first);
    if (!a->granules || !a->scratch || !a->first) {
        size_t count = a->granule_count;
        (void)ortmem_region_destroy(region);
        release_metadata(a);
        return OM_ERR(ORTMEM_E_NOMEM, "arena create: bookkeeping for %zu granules", count);
    }
    for (size_t i = 0; i < a->granule_count; i++)
        a->granules[i].lru_prev = a->granules[i].lru_next = OM_NONE;
    a->first->size = a->capacity;
    a->first->is_free = true;
    index_insert(a, a->first);
    pthread_mutex_init(&a->lock, NULL);
    st = om_handle_register(&a->hdr, OM_KIND_ARENA);
    if (st != ORTMEM_OK) {
        pthread_mutex_destroy(&a->lock);
        (void)ortmem_region_destroy(region);
        release_metadata(a);
        return st;
    }
    *out = a;
    return ORTMEM_OK;
}

static ortmem_status busy(ortmem_arena *a)
{
    return OM_ERR(ORTMEM_E_BUSY,
                  "arena destroy: %llu allocations (%llu bytes) are still live; free them or "
                  "pass force",
                  (unsigned long long)a->live_allocations, (unsigned long long)a->allocated_bytes);
}

ortmem_status ortmem_arena_destroy(ortmem_arena *a, int force)
{
    om_error_clear();
    ortmem_status st = pin_arena(a, "arena destroy");
    if (st != ORTMEM_OK)
        return st;
    if (a->destroying) {
        /* Two retires of one handle would wait for each other forever. */
        unpin_arena(a);
        return OM_ERR(ORTMEM_E_HANDLE, "arena destroy: %p is being destroyed by another call",
                      (void *)a);
    }
    if (a->live_allocations && !force) {
        st = busy(a);
        unpin_arena(a);
        return st;
    }
    /* Retire blocks new calls and waits for those in flight, which may have
     * allocated meanwhile: look again before tearing down. */
    a->destroying = true;
    pthread_mutex_unlock(&a->lock);
    /* Cannot fail: the destroying flag keeps a second destroy out. */
    (void)om_handle_retire(&a->hdr, "arena destroy");
    pthread_mutex_lock(&a->lock);
    if (a->live_allocations && !force) {
        st = busy(a);
        a->destroying = false;
        pthread_mutex_unlock(&a->lock);
        om_handle_revive(&a->hdr);
        om_handle_unpin(&a->hdr);
        return st;
    }
    uint64_t dropped = a->live_allocations;
    /* Dropped allocations stop being requested content. */
    om_account_requested(&a->account, -(int64_t)a->allocated_bytes);
    st = ortmem_region_destroy(a->region);
    if (st != ORTMEM_OK)
        st = om_error_wrap(st, "arena destroy (%llu live allocations dropped)",
                           (unsigned long long)dropped);
    pthread_mutex_unlock(&a->lock);
    pthread_mutex_destroy(&a->lock);
    release_metadata(a);
    om_handle_end_destroy();
    return st;
}

static ortmem_status alloc_once(ortmem_arena *a, size_t size, size_t align, void **ptr,
                                bool *fenced, om_relief *relief);

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

static ortmem_status alloc_once(ortmem_arena *a, size_t size, size_t align, void **ptr,
                                bool *fenced, om_relief *relief)
{
    if (!ptr)
        return OM_ERR(ORTMEM_E_INVALID, "arena alloc: ptr output is NULL");
    if (size == 0)
        return OM_ERR(ORTMEM_E_INVALID, "arena alloc: size is 0");
    if (align && !is_pow2(align))
        return OM_ERR(ORTMEM_E_ALIGN, "arena alloc: alignment %zu is not a power of two", align);
    size_t eff_align = align > a->min_align ? align : a->min_align;
    if (size > SIZE_MAX - eff_align)
        return OM_ERR(ORTMEM_E_OVERFLOW, "arena alloc: size %zu + alignment %zu overflows", size,
                      eff_align);
    size_t bytes = round_up(size, a->quantum);
    size_t start = 0;
    om_block *b = bytes <= a->capacity ? index_find(a, bytes, eff_align, &start) : NULL;
    if (!b)
        return OM_ERR(ORTMEM_E_NOMEM,
                      "arena alloc: no free block holds %zu bytes aligned to %zu (largest free "
                      "block %zu bytes; %zu of %zu bytes capacity free)",
                      size, eff_align, largest_free_block(a), a->capacity - a->used_bytes,
                      a->capacity);
    /* Everything that can fail comes before the first change. */
    if (!nodes_reserve(a, 2) || !map_reserve(&a->used))
        return OM_ERR(ORTMEM_E_NOMEM, "arena alloc: host bookkeeping for %zu live allocations",
                      a->used.count + 1);
    size_t end = start + bytes, g = a->granule;
    size_t g_first = start / g, g_last = (end - 1) / g;
    size_t c_first = OM_NONE, c_last = 0;
    for (size_t i = g_first; i <= g_last; i++) {
        if (!a->granules[i].committed) {
            c_first = c_first == OM_NONE ? i : c_first;
            c_last = i;
        }
    }
    if (c_first != OM_NONE) {
        /* One call for the run; the region skips granules already mapped. */
        /* A refused reservation is relieved by the caller once the arena lock
         * is dropped (a pressure callback may free into this very arena). */
        ortmem_range run = {c_first * g, (c_last - c_first + 1) * g};
        ortmem_status st = om_region_commit_for(a->region, &run, 1, relief);
        if (st != ORTMEM_OK) {
            /* Looking for poisoned granules goes through the region, which
             * clears the thread's detail: keep the commit's own. */
            char detail[512];
            snprintf(detail, sizeof detail, "%s", ortmem_last_error());
            for (size_t i = c_first; i <= c_last; i++) {
                if (!a->granules[i].committed && granule_poisoned(a, i))
                    *fenced |= fence_granule(a, i);
            }
            (void)ortmem_error_set(st, "%s", detail);
        }
        if (st != ORTMEM_OK)
            return om_error_wrap(st,
                                 "arena alloc of %zu bytes aligned to %zu: committing granules "
                                 "[%zu, %zu] failed, nothing changed",
                                 size, eff_align, c_first, c_last);
        for (size_t i = c_first; i <= c_last; i++) {
            if (!a->granules[i].committed) {
                a->granules[i].committed = true;
                a->committed_count++;
            }
        }
        uint64_t committed = (uint64_t)a->committed_count * g;
        a->committed_peak = committed > a->committed_peak ? committed : a->committed_peak;
    }
    carve(a, b, start, end);
    b->requested = size;
    map_insert(&a->used, b);
    a->used_bytes += bytes;
    for (size_t i = g_first; i <= g_last; i++) {
        if (a->granules[i].live++ == 0 && a->granules[i].cached)
            lru_unlink(a, i);
    }
    a->allocated_bytes += size;
    om_account_requested(&a->account, (int64_t)size);
    a->allocated_peak =
        a->allocated_bytes > a->allocated_peak ? a->allocated_bytes : a->allocated_peak;
    a->live_allocations++;
    a->allocs++;
    *ptr = (void *)(a->base + start);
    om_trace_line("alloc p%lx %zu %zu", (unsigned long)(uintptr_t)*ptr, size, align);
    return ORTMEM_OK;
}

static ortmem_status arena_alloc_once(ortmem_arena *a, size_t size, size_t align, void **ptr,
                                      om_relief *relief)
{
    om_error_clear();
    ortmem_status st = pin_arena(a, "arena alloc");
    if (st != ORTMEM_OK)
        return st;
    st = alloc_locked(a, size, align, ptr, relief);
    bool retried =
        st == ORTMEM_E_BUDGET && relief && relief->set && om_account_can_relieve(&relief->account);
    if (st != ORTMEM_OK && !retried)
        a->failed_allocs++; /* a refusal about to be relieved and retried is not final */
    unpin_arena(a);
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

/* warning gets what a failed decommit said, to be logged once unlocked. */
static ortmem_status free_locked(ortmem_arena *a, void *ptr, char *warning, size_t warning_len)
{
    if (!ptr)
        return OM_ERR(ORTMEM_E_INVALID, "arena free: pointer is NULL");
    uintptr_t addr = (uintptr_t)ptr;
    if (addr < a->base || addr - a->base >= a->capacity)
        return OM_ERR(ORTMEM_E_NOT_FOUND, "arena free: %p lies outside the arena [%p, +%zu)", ptr,
                      (void *)a->base, a->capacity);
    size_t offset = (size_t)(addr - a->base);
    om_block *b = map_find(&a->used, offset);
    if (!b) {
        if (map_find(&a->freed, offset))
            return OM_ERR(ORTMEM_E_DOUBLE_FREE,
                          "arena free: %p (offset %zu) was already freed and not handed out "
                          "since",
                          ptr, offset);
        return OM_ERR(ORTMEM_E_NOT_FOUND,
                      "arena free: %p (offset %zu) is not the start of a live allocation", ptr,
                      offset);
    }
    /* The record that makes a second free a DOUBLE_FREE; without host memory
     * for it the free still goes ahead (a second free then reads NOT_FOUND). */
    om_freed *record = om_malloc(sizeof *record);
    if (record && !map_reserve(&a->freed)) {
        om_free(record);
        record = NULL;
    }
    map_remove(&a->used, offset);
    size_t g = a->granule;
    size_t g_first = b->offset / g, g_last = (b->offset + b->size - 1) / g;
    a->used_bytes -= b->size;
    a->allocated_bytes -= b->requested;
    om_account_requested(&a->account, -(int64_t)b->requested);
    a->live_allocations--;
    a->frees++;
    b->is_free = true;
    b->requested = 0;
    if (record) {
        *record = (om_freed){offset, NULL};
        map_insert(&a->freed, record);
        b->freed_head = b->freed_tail = record;
    }
    coalesce(a, b);
    for (size_t i = g_first; i <= g_last; i++) {
        if (--a->granules[i].live == 0 && a->granules[i].committed)
            lru_add(a, i, true);
    }
    if (evict_cached(a, a->cache_granules) != ORTMEM_OK) {
        /* The block is free either way; the granules stay cached. */
        snprintf(warning, warning_len, "arena free of %p: %s", ptr, ortmem_last_error());
        om_error_clear();
    }
    om_trace_line("free p%lx", (unsigned long)addr);
    return ORTMEM_OK;
}

ortmem_status ortmem_arena_free(ortmem_arena *a, void *ptr)
{
    om_error_clear();
    ortmem_status st = pin_arena(a, "arena free");
    if (st != ORTMEM_OK)
        return st;
    char warning[512] = "";
    st = free_locked(a, ptr, warning, sizeof warning);
    unpin_arena(a);
    /* Logged outside the lock: the callback may call into this arena. */
    if (warning[0])
        om_log(ORTMEM_LOG_WARN, "%s", warning);
    return st;
}

ortmem_status ortmem_arena_stats_get(ortmem_arena *a, ortmem_arena_stats *stats)
{
    om_error_clear();
    if (!stats)
        return OM_ERR(ORTMEM_E_INVALID, "arena stats: output is NULL");
    if (stats->struct_size == 0 || stats->struct_size > sizeof *stats)
        return OM_ERR(ORTMEM_E_INVALID,
                      "arena stats: struct_size %zu (this library knows %zu); set it to "
                      "sizeof(ortmem_arena_stats)",
                      stats->struct_size, sizeof *stats);
    ortmem_status st = pin_arena(a, "arena stats");
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
    if (stats->struct_size >= offsetof(ortmem_arena_stats, fenced_bytes) + sizeof s.fenced_bytes)
        s.fenced_bytes = (uint64_t)a->fenced_count * a->granule;
    unpin_arena(a);
    memcpy(stats, &s, stats->struct_size);
    return ORTMEM_OK;
}

ortmem_status ortmem_arena_trim(ortmem_arena *a, size_t keep_bytes)
{
    om_error_clear();
    ortmem_status st = pin_arena(a, "arena trim");
    if (st != ORTMEM_OK)
        return st;
    st = evict_cached(a, keep_bytes / a->granule);
    if (st != ORTMEM_OK)
        st = om_error_wrap(st, "arena trim to %zu bytes", keep_bytes);
    unpin_arena(a);
    return st;
}

ortmem_region *ortmem_arena_region(ortmem_arena *a)
{
    om_error_clear();
    if (pin_arena(a, "arena region") != ORTMEM_OK)
        return NULL;
    ortmem_region *region = a->region;
    unpin_arena(a);
    return region;
}
