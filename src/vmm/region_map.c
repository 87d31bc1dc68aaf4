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
static void mapped_in(ortmem_region *r, size_t bytes, om_hold *hold)
{
    om_ledger_mapped_add(r->backend, bytes);
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

void om_region_mapped_out(ortmem_region *r, size_t bytes)
{
    om_ledger_mapped_sub(r->backend, bytes);
    om_account_refund(&r->account, 0, bytes);
}

void om_region_forget_requested(ortmem_region *r, size_t i)
{
    om_slot *s = &r->slots[i];
    int64_t gone = (int64_t)s->requested_hi - (int64_t)s->requested_lo;
    s->requested_lo = s->requested_hi = 0;
    if (r->report_requested)
        om_account_requested(&r->account, -gone);
}

/* ---- granule references ---- */

void om_region_quarantine_slot(ortmem_region *r, size_t i, om_phys *p, bool still_mapped)
{
    om_slot *s = &r->slots[i];
    om_region_forget_requested(r, i);
    s->state = ORTMEM_GRANULE_QUARANTINED;
    s->epoch++;
    s->phys = p;
    s->access = ORTMEM_ACCESS_NONE;
    om_phys_quarantine(r->backend, p);
    if (still_mapped)
        om_quarantine_mapping(r->backend, &r->account, r->granule);
}

ortmem_status om_region_drop_phys(ortmem_region *r, om_phys *p)
{
    /* A mapper count never goes below zero: only a slot that mapped p drops it. */
    assert(atomic_load(&p->mappers) > 0);
    return om_phys_drop(r->backend, p);
}

void om_region_give_back(ortmem_region *r, size_t n, om_phys **phys, size_t pooled_end)
{
    /* Backwards, so the pooled ones go back in the order they were taken. */
    for (size_t k = n; k-- > 0;) {
        om_phys *p = phys[k];
        phys[k] = NULL;
        if (!p || p->quarantined) /* a quarantined granule belongs to the quarantine */
            continue;
        /* A granule is released or pooled only once its last mapper is gone. */
        assert(atomic_load(&p->mappers) == 0);
        if (k < pooled_end)
            (void)om_phys_discard(r->backend, p);
        else
            (void)om_phys_release(r->backend, p);
    }
}

/* ---- acquire ---- */

/* Takes a pooled granule for want[k] in order until the pool runs dry (their
 * charge moves in and needs no capacity), so the pooled ones are those before
 * *pooled_end; returns how many wanted ones are missing. */
static size_t take_pooled(ortmem_region *r, size_t n, const bool *want, om_phys **phys,
                          unsigned flags, size_t *pooled_end)
{
    size_t missing = 0;
    *pooled_end = n;
    for (size_t k = 0; k < n; k++) {
        if (!want[k])
            continue;
        if (missing) { /* counted as the miss the pool would have answered */
            if (!(flags & OM_PHYS_EXPORTABLE))
                om_ledger_count(&r->backend->ledger.pool_misses, 1, r->backend);
            missing++;
            continue;
        }
        phys[k] = om_phys_take_pooled(r->backend, flags, &r->account);
        if (!phys[k]) {
            missing++;
            *pooled_end = k;
        }
    }
    return missing;
}

ortmem_status om_region_acquire(ortmem_region *r, size_t n, const bool *want, om_phys **phys,
                                uint64_t mapped_bytes, om_hold *hold, size_t *pooled_end)
{
    unsigned flags = (r->flags & ORTMEM_REGION_EXPORTABLE) ? OM_PHYS_EXPORTABLE : 0;
    size_t missing = take_pooled(r, n, want, phys, flags, pooled_end);
    ortmem_status st = om_region_hold(r, (uint64_t)missing * r->granule, mapped_bytes, hold);
    for (size_t k = 0; st == ORTMEM_OK && k < n; k++) {
        if (!want[k] || phys[k])
            continue;
        st = om_phys_create(r->backend, flags, &r->account, &phys[k]);
        if (st == ORTMEM_OK)
            hold->owned -= r->granule;
    }
    if (st == ORTMEM_OK) {
        assert(hold->owned == 0); /* every created granule is charged to the account */
        return ORTMEM_OK;
    }
    om_region_give_back(r, n, phys, *pooled_end);
    om_region_unhold_rest(r, hold);
    return st;
}

/* ---- map ---- */

/* Quarantines the run [i, i + len) of phys[] whose unmap failed; each slot keeps
 * its granule with a mapper reference, and phys[k] is cleared. */
static void quarantine_run(ortmem_region *r, size_t g0, size_t i, size_t len, om_phys **phys)
{
    for (size_t k = i; k < i + len; k++) {
        atomic_fetch_add(&phys[k]->mappers, 1);
        om_region_quarantine_slot(r, g0 + k, phys[k], true);
        phys[k] = NULL;
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

/* Undoes mappings made by the failing call: unmaps each run of phys[] below
 * upto (the ones it mapped). A failed unmap quarantines the run instead (and
 * clears its phys[] entries). */
static void rollback_new_mappings(ortmem_region *r, size_t g0, size_t upto, om_phys **phys)
{
    size_t i = 0;
    for (size_t len; (len = next_phys_run(phys, &i, upto)) != 0; i += len) {
        size_t bytes = len * r->granule;
        if (om_backend_unmap(r->backend, om_region_va(r, g0 + i), bytes) == ORTMEM_OK)
            om_region_mapped_out(r, bytes);
        else
            quarantine_run(r, g0, i, len, phys);
    }
}

/* Maps each phys[k] into its granule; stops at the first failure, with
 * *upto the index it reached (the ones before it are mapped). */
static ortmem_status map_each(ortmem_region *r, size_t g0, size_t n, om_phys **phys, size_t *upto,
                              om_hold *hold)
{
    for (*upto = 0; *upto < n; (*upto)++) {
        size_t k = *upto;
        if (!phys[k])
            continue;
        ortmem_status st =
            om_backend_map(r->backend, om_region_va(r, g0 + k), r->granule, phys[k]->handle, 0);
        if (st != ORTMEM_OK)
            return st;
        mapped_in(r, r->granule, hold);
    }
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

/* Records the new mappings in the slots, each taking a mapper reference. */
static void record_mapped(ortmem_region *r, size_t g0, size_t n, om_phys **phys,
                          ortmem_access access)
{
    for (size_t k = 0; k < n; k++) {
        if (!phys[k])
            continue;
        om_slot *s = &r->slots[g0 + k];
        /* Mapped and given its access by this call, into a slot that held nothing. */
        assert(s->state == ORTMEM_GRANULE_UNMAPPED && !s->phys);
        atomic_fetch_add(&phys[k]->mappers, 1);
        *s = (om_slot){phys[k], ORTMEM_GRANULE_MAPPED, (uint8_t)access, 0, 0, s->epoch + 1};
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
    for (size_t k = 0; k < n; k++) {
        if (!sel[k])
            continue;
        om_slot *s = &r->slots[g0 + k];
        uintptr_t va = om_region_va(r, g0 + k);
        if (om_backend_map(b, va, r->granule, s->phys->handle, 0) != ORTMEM_OK) {
            om_region_quarantine_slot(r, g0 + k, s->phys, false);
            continue;
        }
        mapped_in(r, r->granule, NULL);
        if (om_backend_set_access(b, va, r->granule, (ortmem_access)s->access) != ORTMEM_OK)
            om_region_quarantine_slot(r, g0 + k, s->phys, true);
    }
}

ortmem_status om_region_unmap_runs(ortmem_region *r, size_t g0, size_t n, const bool *sel)
{
    size_t i = 0;
    for (size_t len; (len = om_next_run(sel, &i, n)) != 0; i += len) {
        size_t bytes = len * r->granule;
        ortmem_status st = om_backend_unmap(r->backend, om_region_va(r, g0 + i), bytes);
        if (st != ORTMEM_OK) {
            om_region_restore_runs(r, g0, i, sel); /* the runs before i */
            return st;
        }
        om_region_mapped_out(r, bytes);
    }
    return ORTMEM_OK;
}

ortmem_status om_region_drop_slot(ortmem_region *r, size_t i)
{
    om_slot *s = &r->slots[i];
    om_phys *p = s->phys;
    om_region_forget_requested(r, i);
    *s = (om_slot){NULL, ORTMEM_GRANULE_UNMAPPED, ORTMEM_ACCESS_NONE, 0, 0, s->epoch + 1};
    return om_region_drop_phys(r, p);
}

ortmem_status om_region_drop_unmapped(ortmem_region *r, size_t g0, size_t n, const bool *sel)
{
    ortmem_status result = ORTMEM_OK;
    for (size_t k = 0; k < n; k++) {
        if (!sel[k])
            continue;
        ortmem_status st = om_region_drop_slot(r, g0 + k);
        if (st != ORTMEM_OK)
            result = st;
    }
    return result;
}
