/* Private to the region files (src/vmm/region*.c): the region and its slot
 * table, and the mapping machinery that commit, share, cow and import share.
 *
 * region.c          lifecycle, slot table, lookups, range checks
 * region_map.c      acquire, map + set-access, unmap, rollback, restore, quarantine
 * region_commit.c   commit, decommit, protect
 * region_share.c    share and copy between two regions
 * region_cow.c      copy-on-write
 * region_fd.c       export and import of one granule as a descriptor
 *
 * Debug builds assert the invariants below; release builds (NDEBUG) compile
 * the checks out. */
#ifndef ORTMEM_SRC_VMM_REGION_INTERNAL_H
#define ORTMEM_SRC_VMM_REGION_INTERNAL_H

#include <assert.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "vmm/backend.h"
#include "vmm/region.h"

/* A mapped or quarantined slot names its extent and its granule's place in
 * it: the extent's k granules sit in k consecutive slots with indices 0..k-1
 * and one mapper reference, held by the mapping as a whole. */
typedef struct om_slot {
    om_phys *phys;
    uint32_t index; /* this granule's place in the extent (0..k-1) */
    uint8_t state;  /* ortmem_granule_state */
    uint8_t access; /* ortmem_access */
    /* Bytes of this granule that commits asked for: the hull [lo, hi). */
    uint32_t requested_lo, requested_hi;
    /* Mapping epoch: +1 whenever this granule's mapping changes (map, unmap,
     * cow swap, quarantine); a rollback that restores the mapping keeps it.
     * Read by ortmem_region_range_state; wraps after 2^32 changes. */
    uint32_t epoch;
} om_slot;

/* What one call still holds of the capacity it reserved on its account. */
typedef struct om_hold {
    uint64_t owned, mapped;
} om_hold;

struct ortmem_region {
    om_handle hdr;
    ortmem_backend *backend;
    pthread_mutex_t lock;
    uintptr_t base;
    size_t size;
    size_t granule;
    size_t count;
    unsigned flags;
    bool traced;
    bool report_requested; /* an arena reports its allocations instead */
    uint64_t id;           /* lock order between regions, and the trace id */
    om_account account;
    om_relief *relief; /* where a refused reservation is noted, while locked */
    om_slot *slots;
    /* One flag per granule for a decommit's selection, under the lock: set
     * aside at create so that a decommit (the undo of many a failed call)
     * needs no host memory. */
    bool *selection;
    ortmem_extent_policy extents; /* how commit lays extents over unmapped runs */
};

/* The first slot of the extent slot i belongs to (i mapped or quarantined). */
static inline size_t om_extent_first(const ortmem_region *r, size_t i)
{
    return i - r->slots[i].index;
}

static inline uintptr_t om_region_va(const ortmem_region *r, size_t index)
{
    return r->base + index * r->granule;
}

/* Next run of selected entries at or after *i (relative to sel); 0 when none.
 * Callers start at 0 and step past each run, so every run is maximal: one
 * backend call per contiguous run. */
static inline size_t om_next_run(const bool *sel, size_t *i, size_t n)
{
    while (*i < n && !sel[*i])
        (*i)++;
    size_t start = *i;
    assert(start == 0 || start >= n || !sel[start - 1]);
    while (*i < n && sel[*i])
        (*i)++;
    size_t len = *i - start;
    *i = start;
    return len;
}

static inline bool om_access_known(ortmem_access access)
{
    return access == ORTMEM_ACCESS_NONE || access == ORTMEM_ACCESS_READ ||
           access == ORTMEM_ACCESS_READ_WRITE;
}

/* For assertions: slot i's extent lies inside the region, every one of its
 * slots holding it at its own index and in one state. */
static inline bool om_extent_whole(const ortmem_region *r, size_t i)
{
    const om_slot *s = &r->slots[i];
    if (s->index >= s->phys->granules || i < s->index ||
        i - s->index + s->phys->granules > r->count)
        return false;
    size_t first = i - s->index;
    for (size_t j = 0; j < s->phys->granules; j++) {
        const om_slot *t = &r->slots[first + j];
        if (t->phys != s->phys || t->index != j || t->state != s->state)
            return false;
    }
    return true;
}

/* For assertions: a mapped slot holds an extent with at least one mapper, an
 * unmapped one holds nothing and no requested bytes, a quarantined one keeps its
 * extent; every extent lies whole in its slots; the requested hull lies inside
 * the granule. */
static inline bool om_slots_consistent(const ortmem_region *r, size_t g0, size_t n)
{
    for (size_t i = g0; i < g0 + n; i++) {
        const om_slot *s = &r->slots[i];
        bool ok = s->requested_lo <= s->requested_hi && s->requested_hi <= r->granule;
        if (s->state == ORTMEM_GRANULE_MAPPED)
            ok = ok && s->phys && atomic_load(&s->phys->mappers) > 0 && om_extent_whole(r, i);
        else if (s->state == ORTMEM_GRANULE_UNMAPPED)
            ok = ok && !s->phys && s->access == ORTMEM_ACCESS_NONE && s->requested_hi == 0;
        else
            ok = ok && s->phys && s->phys->quarantined && om_extent_whole(r, i);
        if (!ok)
            return false;
    }
    return true;
}

/* For assertions: sel[] (relative to g0) selects whole extents only. */
static inline bool om_selection_extent_closed(const ortmem_region *r, size_t g0, size_t n,
                                              const bool *sel)
{
    for (size_t k = 0; k < n; k++) {
        if (!sel[k])
            continue;
        const om_slot *s = &r->slots[g0 + k];
        if (!s->phys || s->index > k || s->index + n - k < s->phys->granules)
            return false;
        for (size_t j = 0; j < s->phys->granules; j++) {
            if (!sel[k - s->index + j])
                return false;
        }
    }
    return true;
}

/* For assertions: every granule of [g0, g0 + n) is in state. */
static inline bool om_slots_in_state(const ortmem_region *r, size_t g0, size_t n,
                                     ortmem_granule_state state)
{
    for (size_t i = g0; i < g0 + n; i++) {
        if (r->slots[i].state != state)
            return false;
    }
    return true;
}

/* ---- region.c: locking and range checks ---- */

/* Pins the handle and takes the region's lock. */
ortmem_status om_region_lock(ortmem_region *r, const char *what);
void om_region_unlock(ortmem_region *r);
/* Byte range [off, off+len) inside the region, len > 0. */
ortmem_status om_region_check_range(const ortmem_region *r, size_t off, size_t len,
                                    const char *what);
ortmem_status om_region_check_aligned(const ortmem_region *r, size_t off, size_t len,
                                      const char *what);
/* No granule of [g0, g0 + n) is quarantined. */
ortmem_status om_region_check_unquarantined(const ortmem_region *r, size_t g0, size_t n,
                                            const char *what);

/* ---- region_map.c: the mapping machinery ---- */

/* Reserves owned and mapped capacity on the region's account for one call; a
 * refusal is noted in r->relief. On failure *hold is empty. */
ortmem_status om_region_hold(ortmem_region *r, uint64_t owned, uint64_t mapped, om_hold *hold);
void om_region_unhold_rest(ortmem_region *r, om_hold *hold);
/* The mappings of slots [first, +len) (whole extents) leave the ledger and
 * the region's account. */
void om_region_mapped_out(ortmem_region *r, size_t first, size_t len);
/* Requested bytes of granule i dropped (decommit, destroy, quarantine). */
void om_region_forget_requested(ortmem_region *r, size_t i);
/* Marks slot i quarantined, holding p at index (the extent's mapper
 * reference is kept once for all its slots). */
void om_region_quarantine_slot(ortmem_region *r, size_t i, om_phys *p, uint32_t index,
                               bool still_mapped);
/* Quarantines the whole extent slot i belongs to (all its slots). */
void om_region_quarantine_extent(ortmem_region *r, size_t i, bool still_mapped);
/* Drops a mapping's reference on p (an extent it mapped until now). */
ortmem_status om_region_drop_phys(ortmem_region *r, om_phys *p, unsigned drop_flags);

/* Extent arrays: phys[] holds one entry per granule; an extent of k granules
 * fills k consecutive entries with the same pointer, starting at its first
 * granule, so walking by p->granules visits each extent once. ext[] (acquire)
 * holds at each extent's first entry its granules, 0 elsewhere. */

/* Gets an extent for every ext[k] > 0: pooled ones first (those before
 * *pooled_end), then capacity for the rest plus mapped_bytes is reserved and
 * they are created. On failure everything acquired goes back (the pool as it
 * was) and nothing stays held. */
ortmem_status om_region_acquire(ortmem_region *r, size_t n, const uint32_t *ext, om_phys **phys,
                                uint64_t mapped_bytes, om_hold *hold, size_t *pooled_end);
/* Gives back extents om_region_acquire got that nothing maps (the non-NULL,
 * unquarantined phys[k]) and clears phys[]: those before pooled_end go back to
 * the pool, the ones it created are released, so the pool ends as it was. */
void om_region_give_back(ortmem_region *r, size_t n, om_phys **phys, size_t pooled_end);
/* Maps each extent of phys[] at granule g0+k into unmapped slots (one map of
 * the whole handle each) and sets access per contiguous run; needs no host
 * memory. On failure everything this call mapped is rolled back; the extents
 * stay the caller's (a run whose unmap failed is quarantined and its phys[]
 * entries cleared). */
ortmem_status om_region_map(ortmem_region *r, size_t g0, size_t n, om_phys **phys,
                            ortmem_access access, om_hold *hold);
/* Maps the recorded extents of sel[] (whole extents) back after a failed
 * unmap elsewhere; an extent that cannot be restored is quarantined. */
void om_region_restore_runs(ortmem_region *r, size_t g0, size_t n, const bool *sel);
/* Unmaps every run of sel[] (whole extents; one call per run). On a failure
 * the runs already unmapped are mapped back and the error returned: nothing
 * changed. */
ortmem_status om_region_unmap_runs(ortmem_region *r, size_t g0, size_t n, const bool *sel);
/* After its unmap succeeded: clears slot i; its extent's first slot drops
 * the mapping's reference on the extent. */
ortmem_status om_region_drop_slot(ortmem_region *r, size_t i, unsigned drop_flags);
/* After the unmap succeeded: clears the slots and drops their extents. */
ortmem_status om_region_drop_unmapped(ortmem_region *r, size_t g0, size_t n, const bool *sel,
                                      unsigned drop_flags);
/* Extents whose first slot lies in the selected run [g0+i, +len). */
size_t om_region_extents_in(const ortmem_region *r, size_t first, size_t len);

#endif
