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

typedef struct om_slot {
    om_phys *phys;
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
};

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

/* For assertions: a mapped slot holds a granule with at least one mapper, an
 * unmapped one holds nothing and no requested bytes, a quarantined one keeps its
 * granule; the requested hull lies inside the granule. */
static inline bool om_slots_consistent(const ortmem_region *r, size_t g0, size_t n)
{
    for (size_t i = g0; i < g0 + n; i++) {
        const om_slot *s = &r->slots[i];
        bool ok = s->requested_lo <= s->requested_hi && s->requested_hi <= r->granule;
        if (s->state == ORTMEM_GRANULE_MAPPED)
            ok = ok && s->phys && atomic_load(&s->phys->mappers) > 0;
        else if (s->state == ORTMEM_GRANULE_UNMAPPED)
            ok = ok && !s->phys && s->access == ORTMEM_ACCESS_NONE && s->requested_hi == 0;
        else
            ok = ok && s->phys && s->phys->quarantined;
        if (!ok)
            return false;
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
/* Mapped bytes leave the ledger and the region's account. */
void om_region_mapped_out(ortmem_region *r, size_t bytes);
/* Requested bytes of granule i dropped (decommit, destroy, quarantine). */
void om_region_forget_requested(ortmem_region *r, size_t i);
/* Marks slot i quarantined, holding p (whose mapper reference it keeps). */
void om_region_quarantine_slot(ortmem_region *r, size_t i, om_phys *p, bool still_mapped);
/* Drops the slot's mapper reference on p (a granule it mapped until now). */
ortmem_status om_region_drop_phys(ortmem_region *r, om_phys *p);
/* Gets a granule for every want[k]: pooled ones first (those before
 * *pooled_end), then capacity for the rest plus mapped_bytes is reserved and
 * they are created. On failure everything acquired goes back (the pool as it
 * was) and nothing stays held. */
ortmem_status om_region_acquire(ortmem_region *r, size_t n, const bool *want, om_phys **phys,
                                uint64_t mapped_bytes, om_hold *hold, size_t *pooled_end);
/* Gives back granules om_region_acquire got that nothing maps (the non-NULL,
 * unquarantined phys[k]) and clears phys[]: those before pooled_end go back to
 * the pool, the ones it created are released, so the pool ends as it was. */
void om_region_give_back(ortmem_region *r, size_t n, om_phys **phys, size_t pooled_end);
/* Maps phys[k] (where non-NULL) at granule g0+k into unmapped slots and sets
 * access per run; needs no host memory. On failure everything this call
 * mapped is rolled back; the granules stay the caller's (a run whose unmap
 * failed is quarantined and its phys[] entries cleared). */
ortmem_status om_region_map(ortmem_region *r, size_t g0, size_t n, om_phys **phys,
                            ortmem_access access, om_hold *hold);
/* Maps the recorded granules of sel[] back after a failed unmap elsewhere; a
 * granule that cannot be restored is quarantined. */
void om_region_restore_runs(ortmem_region *r, size_t g0, size_t n, const bool *sel);
/* Unmaps every run of sel[] (one call per run). On a failure the runs already
 * unmapped are mapped back and the error returned: nothing changed. */
ortmem_status om_region_unmap_runs(ortmem_region *r, size_t g0, size_t n, const bool *sel);
/* After its unmap succeeded: clears slot i and drops its granule. */
ortmem_status om_region_drop_slot(ortmem_region *r, size_t i);
/* After the unmap succeeded: clears the slots and drops their granules. */
ortmem_status om_region_drop_unmapped(ortmem_region *r, size_t g0, size_t n, const bool *sel);

#endif
