/* The mapping machinery every region operation shares: capacity held on the
 * account for one call, granules acquired, mapped with one set-access per run,
 * unmapped one call per run, rolled back or restored on failure, and quarantined
 * where a backend call left them stuck (src/vmm/region_internal.h). */
#include "core/alloc.h"
#include "vmm/region_internal.h"

#include "core/error.h"

/* ---- account and ledger ---- */

ortmem_status om_region_hold(ortmem_region *r, uint64_t owned, uint64_t mapped, om_hold *hold)
{
    ortmem_status st = om_account_hold(&r->account, owned, mapped);
    if (st == ORTMEM_E_BUDGET)
        om_relief_note(r->relief, &r->account, owned, mapped);
    *hold = st == ORTMEM_OK ? (om_hold){owned, mapped} : (om_hold){0, 0};
    return st;
}

void om_region_unhold_rest(ortmem_region *r, om_hold *hold)
{
    om_account_unhold(&r->account, hold->owned, hold->mapped);
    hold->owned = hold->mapped = 0;
}

/* Mapped bytes enter the ledger and the region's account: out of the call's
 * hold, or (hold NULL: a rollback mapping back what was there) adopted. */
static void mapped_in(ortmem_region *r, size_t bytes, size_t extents, om_hold *hold)
{
    om_ledger_mapped_add(r->backend, bytes, extents);
    if (!hold) {
        om_account_adopt(&r->account, 0, bytes);
        return;
    }
    /* Every call reserves exactly the mappings it makes, so the account ends
     * up charged for the granules the region maps, no more. */
    assert(bytes <= hold->mapped);
    om_account_charge(&r->account, 0, bytes);
    hold->mapped -= bytes < hold->mapped ? bytes : hold->mapped;
}

size_t om_region_extents_in(const ortmem_region *r, size_t first, size_t len)
{
    size_t extents = 0;
    for (size_t k = first; k < first + len; k++)
        extents += r->slots[k].index == 0;
    return extents;
}

void om_region_mapped_out(ortmem_region *r, size_t first, size_t len)
{
    om_ledger_mapped_sub(r->backend, len * r->granule, om_region_extents_in(r, first, len));
    om_account_refund(&r->account, 0, len * r->granule);
}

void om_region_forget_requested(ortmem_region *r, size_t i)
{
    om_slot *s = &r->slots[i];
    int64_t gone = (int64_t)s->requested_hi - (int64_t)s->requested_lo;
    s->requested_lo = s->requested_hi = 0;
    if (r->report_requested)
        om_account_requested(&r->account, -gone);
}

/* ---- extent references ---- */

void om_region_quarantine_slot(ortmem_region *r, size_t i, om_phys *p, uint32_t index,
                               bool still_mapped)
{
    om_slot *s = &r->slots[i];
    om_region_forget_requested(r, i);
    s->state = ORTMEM_GRANULE_QUARANTINED;
    s->epoch++;
    s->phys = p;
    s->index = index;
    s->access = ORTMEM_ACCESS_NONE;
    om_phys_quarantine(r->backend, p);
    if (still_mapped)
        om_quarantine_mapping(r->backend, &r->account, r->granule);
}

void om_region_quarantine_extent(ortmem_region *r, size_t i, bool still_mapped)
{
    size_t first = om_extent_first(r, i);
    om_phys *p = r->slots[i].phys;
    for (uint32_t j = 0; j < p->granules; j++)
        om_region_quarantine_slot(r, first + j, p, j, still_mapped);
}

ortmem_status om_region_drop_phys(ortmem_region *r, om_phys *p, unsigned drop_flags)
{
    /* A mapper count never goes below zero: only a mapping of p drops it. */
    assert(atomic_load(&p->mappers) > 0);
    return om_phys_drop(r->backend, p, drop_flags);
}

/* Next extent of phys[] at or after *k, below upto: its first entry; NULL when none. */
static om_phys *next_extent(om_phys *const *phys, size_t *k, size_t upto)
{
    while (*k < upto && !phys[*k])
        (*k)++;
    return *k < upto ? phys[*k] : NULL;
}

void om_region_give_back(ortmem_region *r, size_t n, om_phys **phys, size_t pooled_end)
{
    /* Forwards once to keep only each extent's first entry, then backwards,
     * so the pooled ones go back in the order they were taken. */
    size_t k = 0;
    for (om_phys *p; (p = next_extent(phys, &k, n)) != NULL; k += p->granules) {
        assert(k + p->granules <= n);
        for (uint32_t j = 1; j < p->granules; j++)
            phys[k + j] = NULL;
    }
    /* The failure that brought us here stays the one reported. */
    om_error_saved first;
    om_error_save(&first);
    size_t stuck = 0;
    for (size_t i = n; i-- > 0;) {
        om_phys *p = phys[i];
        phys[i] = NULL;
        if (!p || p->quarantined) /* a quarantined extent belongs to the quarantine */
            continue;
        /* An extent is released or pooled only once its last mapper is gone. */
        assert(atomic_load(&p->mappers) == 0);
        ortmem_status st =
            i < pooled_end ? om_phys_discard(r->backend, p, 0) : om_phys_release(r->backend, p);
        stuck += st != ORTMEM_OK;
    }
    (void)om_error_restore(&first, ORTMEM_OK);
    if (stuck)
        (void)om_error_wrap(ORTMEM_OK, "%zu extent%s quarantined after a failed release", stuck,
                            stuck == 1 ? "" : "s");
}

/* ---- acquire ---- */

/* Fills phys[k, k + p->granules) with p. */
static void place_extent(om_phys **phys, size_t k, om_phys *p)
{
    for (uint32_t j = 0; j < p->granules; j++)
        phys[k + j] = p;
}

/* Takes a pooled extent for each ext[k] in order until the pool has none of
 * the size asked (their charge moves in and needs no capacity), so the pooled
 * ones are those before *pooled_end; returns the bytes of the missing ones. */
static uint64_t take_pooled(ortmem_region *r, size_t n, const uint32_t *ext, om_phys **phys,
                            unsigned flags, size_t *pooled_end)
{
    uint64_t missing = 0;
    *pooled_end = n;
    for (size_t k = 0; k < n; k++) {
        if (!ext[k])
            continue;
        if (missing) { /* counted as the miss the pool would have answered */
            if (!(flags & OM_PHYS_EXPORTABLE)) {
                om_ledger_count(&r->backend->ledger.pool_misses, 1, r->backend);
                pthread_mutex_lock(&r->backend->lock);
                om_pool_count_miss_locked(r->backend, ext[k]);
                pthread_mutex_unlock(&r->backend->lock);
            }
            missing += (uint64_t)ext[k] * r->granule;
            continue;
        }
        om_phys *p = om_phys_take_pooled(r->backend, flags, &r->account, ext[k]);
        if (p) {
            place_extent(phys, k, p);
        } else {
            missing += (uint64_t)ext[k] * r->granule;
            *pooled_end = k;
        }
    }
    return missing;
}

ortmem_status om_region_acquire(ortmem_region *r, size_t n, const uint32_t *ext, om_phys **phys,
                                uint64_t mapped_bytes, om_hold *hold, size_t *pooled_end)
{
    unsigned flags = (r->flags & ORTMEM_REGION_EXPORTABLE) ? OM_PHYS_EXPORTABLE : 0;
    uint64_t missing = take_pooled(r, n, ext, phys, flags, pooled_end);
    ortmem_status st = om_region_hold(r, missing, mapped_bytes, hold);
    for (size_t k = 0; st == ORTMEM_OK && k < n; k++) {
        if (!ext[k] || phys[k])
            continue;
        om_phys *p = NULL;
        st = om_phys_create(r->backend, flags, &r->account, ext[k], &p);
        if (st == ORTMEM_OK) {
            place_extent(phys, k, p);
            hold->owned -= p->size;
        }
    }
    if (st == ORTMEM_OK) {
        assert(hold->owned == 0); /* every created extent is charged to the account */
        return ORTMEM_OK;
    }
    om_region_give_back(r, n, phys, *pooled_end);
    om_region_unhold_rest(r, hold);
    return st;
}

/* ---- map ---- */

/* Quarantines the extents of the run [i, i + len) of phys[] whose unmap
 * failed; their slots keep them with one mapper reference each, and phys[]
 * is cleared. */
static void quarantine_run(ortmem_region *r, size_t g0, size_t i, size_t len, om_phys **phys)
{
    size_t k = i;
    for (om_phys *p; (p = next_extent(phys, &k, i + len)) != NULL;) {
        atomic_fetch_add(&p->mappers, 1);
        for (uint32_t j = 0; j < p->granules; j++) {
            om_region_quarantine_slot(r, g0 + k + j, p, j, true);
            phys[k + j] = NULL;
        }
        k += p->granules;
    }
}

/* Next run of non-NULL phys[] at or after *i, below upto; 0 when none. The
 * granules a map call maps are the non-NULL ones, so their runs need no
 * bookkeeping of their own. */
static size_t next_phys_run(om_phys *const *phys, size_t *i, size_t upto)
{
    while (*i < upto && !phys[*i])
        (*i)++;
    size_t len = 0;
    while (*i + len < upto && phys[*i + len])
        len++;
    return len;
}

/* Extents whose first entry lies in phys[i, i + len) (a run of whole extents). */
static size_t extents_in_run(om_phys *const *phys, size_t i, size_t len)
{
    size_t extents = 0;
    for (size_t k = i; k < i + len; k += phys[k]->granules)
        extents++;
    return extents;
}

/* Undoes mappings made by the failing call: unmaps each run of phys[] below
 * upto (the ones it mapped). A failed unmap quarantines the run instead (and
 * clears its phys[] entries). */
static void rollback_new_mappings(ortmem_region *r, size_t g0, size_t upto, om_phys **phys)
{
    om_error_saved first; /* the failure that brought us here stays the one reported */
    om_error_save(&first);
    size_t stuck = 0;
    size_t i = 0;
    for (size_t len; (len = next_phys_run(phys, &i, upto)) != 0; i += len) {
        size_t bytes = len * r->granule;
        if (om_backend_unmap(r->backend, om_region_va(r, g0 + i), bytes) == ORTMEM_OK) {
            om_ledger_mapped_sub(r->backend, bytes, extents_in_run(phys, i, len));
            om_account_refund(&r->account, 0, bytes);
        } else {
            quarantine_run(r, g0, i, len, phys);
            stuck += len;
        }
    }
    (void)om_error_restore(&first, ORTMEM_OK);
    if (stuck)
        (void)om_error_wrap(ORTMEM_OK,
                            "%zu granule%s quarantined: the rollback could not unmap them", stuck,
                            stuck == 1 ? "" : "s");
}

/* Maps each extent of phys[] whole at its first granule; stops at the first
 * failure, with *upto the extent start it reached (the ones before are mapped). */
static ortmem_status map_each(ortmem_region *r, size_t g0, size_t n, om_phys **phys, size_t *upto,
                              om_hold *hold)
{
    *upto = 0;
    for (om_phys *p; (p = next_extent(phys, upto, n)) != NULL; *upto += p->granules) {
        assert(*upto + p->granules <= n);
        ortmem_status st =
            om_backend_map(r->backend, om_region_va(r, g0 + *upto), p->size, p->handle, 0);
        if (st != ORTMEM_OK)
            return st;
        mapped_in(r, p->size, 1, hold);
    }
    *upto = n;
    return ORTMEM_OK;
}

/* One set-access per run of phys[]: every granule mapped gets its access. */
static ortmem_status set_access_runs(ortmem_region *r, size_t g0, size_t n, om_phys *const *phys,
                                     ortmem_access access)
{
    ortmem_status st = ORTMEM_OK;
    size_t i = 0;
    for (size_t len; st == ORTMEM_OK && (len = next_phys_run(phys, &i, n)) != 0; i += len)
        st = om_backend_set_access(r->backend, om_region_va(r, g0 + i), len * r->granule, access);
    return st;
}

/* Records the new mappings in the slots; each extent takes one mapper reference. */
static void record_mapped(ortmem_region *r, size_t g0, size_t n, om_phys **phys,
                          ortmem_access access)
{
    size_t k = 0;
    for (om_phys *p; (p = next_extent(phys, &k, n)) != NULL; k += p->granules) {
        atomic_fetch_add(&p->mappers, 1);
        for (uint32_t j = 0; j < p->granules; j++) {
            om_slot *s = &r->slots[g0 + k + j];
            /* Mapped and given its access by this call, into a slot that held nothing. */
            assert(s->state == ORTMEM_GRANULE_UNMAPPED && !s->phys);
            *s = (om_slot){p, j, ORTMEM_GRANULE_MAPPED, (uint8_t)access, 0, 0, s->epoch + 1};
        }
    }
}

ortmem_status om_region_map(ortmem_region *r, size_t g0, size_t n, om_phys **phys,
                            ortmem_access access, om_hold *hold)
{
    size_t upto = 0;
    ortmem_status st = map_each(r, g0, n, phys, &upto, hold);
    if (st == ORTMEM_OK)
        st = set_access_runs(r, g0, n, phys, access);
    if (st == ORTMEM_OK)
        record_mapped(r, g0, n, phys, access);
    else
        rollback_new_mappings(r, g0, upto, phys);
    return st;
}

/* ---- unmap and restore ---- */

void om_region_restore_runs(ortmem_region *r, size_t g0, size_t n, const bool *sel)
{
    ortmem_backend *b = r->backend;
    assert(om_selection_extent_closed(r, g0, n, sel));
    for (size_t k = 0; k < n; k++) {
        if (!sel[k] || r->slots[g0 + k].index != 0)
            continue;
        om_slot *s = &r->slots[g0 + k];
        om_phys *p = s->phys;
        uintptr_t va = om_region_va(r, g0 + k);
        if (om_backend_map(b, va, p->size, p->handle, 0) != ORTMEM_OK) {
            om_region_quarantine_extent(r, g0 + k, false);
            continue;
        }
        mapped_in(r, p->size, 1, NULL);
        if (om_backend_set_access(b, va, p->size, (ortmem_access)s->access) != ORTMEM_OK)
            om_region_quarantine_extent(r, g0 + k, true);
    }
}

ortmem_status om_region_unmap_runs(ortmem_region *r, size_t g0, size_t n, const bool *sel)
{
    assert(om_selection_extent_closed(r, g0, n, sel));
    size_t i = 0;
    for (size_t len; (len = om_next_run(sel, &i, n)) != 0; i += len) {
        size_t bytes = len * r->granule;
        ortmem_status st = om_backend_unmap(r->backend, om_region_va(r, g0 + i), bytes);
        if (st != ORTMEM_OK) {
            om_error_saved first;
            om_error_save(&first);
            om_region_restore_runs(r, g0, i, sel); /* the runs before i */
            size_t stuck = 0;
            for (size_t k = 0; k < i; k++)
                stuck += sel[k] && r->slots[g0 + k].state == ORTMEM_GRANULE_QUARANTINED;
            (void)om_error_restore(&first, st);
            if (stuck)
                st = om_error_wrap(st, "%zu granule%s quarantined: they could not be mapped back",
                                   stuck, stuck == 1 ? "" : "s");
            return st;
        }
        om_region_mapped_out(r, g0 + i, len);
    }
    return ORTMEM_OK;
}

ortmem_status om_region_drop_slot(ortmem_region *r, size_t i, unsigned drop_flags)
{
    om_slot *s = &r->slots[i];
    om_phys *p = s->phys;
    bool first = s->index == 0;
    om_region_forget_requested(r, i);
    *s = (om_slot){NULL, 0, ORTMEM_GRANULE_UNMAPPED, ORTMEM_ACCESS_NONE, 0, 0, s->epoch + 1};
    /* The mapping holds one reference for the whole extent. */
    return first ? om_region_drop_phys(r, p, drop_flags) : ORTMEM_OK;
}

ortmem_status om_region_drop_unmapped(ortmem_region *r, size_t g0, size_t n, const bool *sel,
                                      unsigned drop_flags)
{
    ortmem_status result = ORTMEM_OK;
    om_error_saved first; /* the first failed release is the one reported */
    size_t stuck = 0;
    for (size_t k = 0; k < n; k++) {
        if (!sel[k])
            continue;
        ortmem_status st = om_region_drop_slot(r, g0 + k, drop_flags);
        if (st != ORTMEM_OK) {
            if (!stuck++)
                om_error_save(&first);
            result = st;
        }
    }
    if (stuck > 1)
        result = om_error_wrap(om_error_restore(&first, result),
                               "%zu extents quarantined after failed releases, the first", stuck);
    return result;
}
