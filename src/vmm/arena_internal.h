/* Private to the arena files (src/vmm/arena*.c): the arena struct and the
 * parts they share.
 *
 * arena.c          create, destroy, alloc, free, stats, trim, reclaim
 * arena_tlsf.c     free-block index (TLSF) and block nodes: carve, coalesce
 * arena_map.c      the offset -> entry maps (used blocks, freed starts)
 * arena_granule.c  per-granule live counts, extents: layout, commit, fencing
 * arena_cache.c    the LRU of empty committed extents and its eviction
 * arena_sleep.c    sleep and wake: every extent decommitted, the VA kept, the
 *                  live bytes backed up to host on request and restored
 *
 * Debug builds assert the invariants below; release builds (NDEBUG) compile
 * the checks out. */
#ifndef ORTMEM_SRC_VMM_ARENA_INTERNAL_H
#define ORTMEM_SRC_VMM_ARENA_INTERNAL_H

#include <assert.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <ortmem/vmm.h>

#include "core/handle.h"
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

/* Granules are committed in extents (one backend handle each, mapped and
 * unmapped whole); the extent's record lives on its first granule. */
typedef struct om_granule {
    size_t live;      /* live allocations touching this granule */
    size_t ext_first; /* committed: the first granule of its extent */
    /* On an extent's first granule only: */
    size_t ext_granules;       /* granules in the extent */
    size_t ext_live;           /* its granules with live > 0; 0 = the extent is empty */
    size_t lru_prev, lru_next; /* neighbours on the LRU list (extent starts) */
    bool committed;
    bool cached; /* first granule: the extent is committed, empty, on the LRU list */
} om_granule;

/* An extent sleep decommitted while allocations lived on it: wake commits
 * it again, whole, at the same offset. */
typedef struct om_dormant {
    size_t first, granules;
} om_dormant;

/* Allocated bytes [offset, +length) backed up at host_offset of the backup. */
typedef struct om_backup_run {
    size_t offset, length, host_offset;
} om_backup_run;

/* What a sleeping arena keeps to wake with (all empty while awake). */
typedef struct om_sleep_state {
    om_dormant *dormant; /* extents wake commits again */
    size_t dormant_count;
    om_backup_run *runs; /* backed-up allocated bytes, address order */
    size_t run_count;
    unsigned char *backup; /* host copy of the runs; NULL: not backed up */
    size_t backup_bytes;
    bool backup_owned; /* allocated by the arena (om_malloc), freed at wake */
} om_sleep_state;

struct ortmem_arena {
    om_handle hdr;
    pthread_mutex_t lock;
    ortmem_region *region;
    ortmem_backend *backend; /* the region's: the backup's copies go through it */
    uintptr_t base;
    size_t capacity;
    size_t granule;
    size_t granule_count;
    size_t min_align;
    size_t quantum;        /* block sizes and offsets are multiples of it */
    size_t cache_granules; /* the watermark: granules of empty extents kept committed, at most */
    ortmem_extent_policy extents; /* how commits lay extents (checked at create) */
    bool destroying;              /* a destroy is retiring the handle */
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
    size_t lru_head, lru_tail; /* extent starts; head: least recently emptied */
    size_t cached_count;       /* granules of cached extents */
    size_t committed_count;    /* granules */
    size_t extent_count;       /* extents committed */
    size_t committed_top;      /* one past the highest committed granule; 0: none */
    size_t cap_granules;       /* the policy's largest extent, in granules */
    size_t quarantined_count;  /* granules the region quarantined, never handed out */
    om_account account;        /* told the allocated bytes as the requested content */
    size_t *scratch;           /* extent starts of one eviction pass */
    /* Stats. */
    uint64_t allocated_bytes, allocated_peak, live_allocations, committed_peak;
    uint64_t allocs, frees, failed_allocs;
    uint64_t reclaimed_bytes; /* cached bytes given back under pressure, in all */
    /* Sleep: allocs refused, extents decommitted, the VA kept. */
    bool asleep;
    om_sleep_state sleep;
    uint64_t sleeps, wakes;
};

static inline ortmem_status om_arena_pin(ortmem_arena *a, const char *what)
{
    ortmem_status st = om_handle_pin(a, OM_KIND_ARENA, what);
    if (st == ORTMEM_OK)
        pthread_mutex_lock(&a->lock);
    return st;
}

static inline void om_arena_unpin(ortmem_arena *a)
{
    pthread_mutex_unlock(&a->lock);
    om_handle_unpin(&a->hdr);
}

static inline bool om_is_pow2(size_t v)
{
    return v && !(v & (v - 1));
}

static inline size_t om_round_up(size_t v, size_t pow2)
{
    return (v + pow2 - 1) & ~(pow2 - 1);
}

static inline unsigned om_floor_log2(size_t v)
{
    return 63u - (unsigned)__builtin_clzll((unsigned long long)v);
}

/* For assertions: the arena's counters agree with each other. Cached
 * granules are committed ones, every extent holds a granule at least, every live allocation is in the used map, the
 * caller's bytes fit in the rounded blocks, and no peak is below its value. */
static inline bool om_arena_ledger_consistent(const ortmem_arena *a)
{
    return a->cached_count <= a->committed_count && a->committed_count <= a->granule_count &&
           a->extent_count <= a->committed_count &&
           (a->extent_count > 0) == (a->committed_count > 0) &&
           a->committed_top <= a->granule_count &&
           (a->committed_top == 0 || a->granules[a->committed_top - 1].committed) &&
           a->quarantined_count <= a->granule_count && a->used_bytes <= a->capacity &&
           a->allocated_bytes <= a->used_bytes && a->live_allocations == a->used.count &&
           a->allocated_bytes <= a->allocated_peak &&
           (uint64_t)a->committed_count * a->granule <= a->committed_peak;
}

/* ---- arena_map.c: offset -> entry maps ---- */

void *om_map_find(const om_addr_map *m, size_t key);
/* Makes room for one more entry, so the insert that follows cannot fail. */
bool om_map_grow(om_addr_map *m);
/* The key must be absent and room made (om_map_grow). */
void om_map_insert(om_addr_map *m, void *entry);
void om_map_remove(om_addr_map *m, size_t key);
void om_map_free(om_addr_map *m);

/* ---- arena_tlsf.c: free-block index and block nodes ---- */

void om_index_insert(ortmem_arena *a, om_block *b);
/* A free block that holds bytes at align; *start gets the aligned offset. */
om_block *om_index_find(const ortmem_arena *a, size_t bytes, size_t align, size_t *start);
size_t om_index_largest(const ortmem_arena *a);
/* Tops up the spare nodes so the carve that follows cannot fail. */
bool om_blocks_grow(ortmem_arena *a, size_t n);
/* Turns [start, end) of the free block b into a used block (b itself); the
 * rest becomes free blocks on either side. Needs two spare nodes. Freed
 * starts inside [start, end) are forgotten: that memory is handed out again. */
void om_block_carve(ortmem_arena *a, om_block *b, size_t start, size_t end);
/* Merges the newly free block b with free neighbours and indexes the result. */
void om_block_coalesce(ortmem_arena *a, om_block *b);
/* Frees every block node, spare or linked, with their freed starts. */
void om_blocks_release(ortmem_arena *a);

/* ---- arena_granule.c: live counts, extents, fencing ---- */

/* Commits the uncommitted granules of [g_first, g_last] in extents: the run
 * at the committed tail laid by the arena's policy (it may reach past
 * g_last), a hole below the tail exactly. *c_first and *c_last get the
 * granules the extents span (OM_NONE: all were committed already). A refusal
 * changes nothing but fences the granules the region quarantined (*fenced). */
ortmem_status om_granules_commit(ortmem_arena *a, size_t g_first, size_t g_last, om_relief *relief,
                                 bool *fenced, size_t *c_first, size_t *c_last);
/* One more live allocation on each granule of [g_first, g_last]. */
void om_granules_take(ortmem_arena *a, size_t g_first, size_t g_last);
/* One less; an extent left empty enters the cache. */
void om_granules_put(ortmem_arena *a, size_t g_first, size_t g_last);
/* The extent starting at granule first is no longer mapped. */
void om_extent_decommitted(ortmem_arena *a, size_t first);
/* Fences off a granule the region quarantined; false when it cannot. */
bool om_granule_fence(ortmem_arena *a, size_t i);
/* The extents ext[0, count) were just mapped: records them, each empty. */
void om_extents_mark_committed(ortmem_arena *a, const ortmem_range *ext, size_t count);

/* ---- arena_sleep.c ---- */

/* Frees what a sleeping arena kept to wake with (destroy). */
void om_sleep_state_free(om_sleep_state *s);

/* ---- arena_cache.c: the LRU of empty committed extents ---- */

/* The extent starting at granule first; most_recent: at the tail (evicted
 * last); else at the head (evicted next). */
void om_cache_add(ortmem_arena *a, size_t first, bool most_recent);
void om_cache_remove(ortmem_arena *a, size_t first);
/* Decommits the least recently emptied extents, whole, until at most keep
 * granules stay cached; flags are ORTMEM_DECOMMIT_* (NO_POOL: the handles go
 * back to the backend). *unmapped (may be NULL) gets the granules that the
 * runs that succeeded decommitted. */
ortmem_status om_cache_evict(ortmem_arena *a, size_t keep, unsigned flags, size_t *unmapped);

#endif
