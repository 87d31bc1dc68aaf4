/* Copy-on-write: every shared extent a range touches gets a private copy of
 * the whole extent (same size), filled
 * through a scratch VA with the backend's copy primitive and swapped in at the
 * same address, so the VA never changes. All-or-nothing like every region
 * operation (src/vmm/region_internal.h). */
#include "core/alloc.h"
#include "vmm/region_internal.h"

#include <string.h>

#include "core/error.h"

/* Scratch mappings charge no account: they live only inside one call. */
static const om_account om_no_account;

/* One cow call: the granules it looks at, the shared ones (cand) and their
 * copies (fresh), all relative to g0. */
typedef struct cow_job {
    size_t g0, n;
    size_t count; /* candidates */
    bool *cand;
    uint32_t *ext; /* at each candidate extent's first granule: its granules */
    om_phys **fresh;
    size_t pooled_end; /* the copies before it came from the pool */
    om_hold hold;
    bool leaked_va; /* the scratch VA could not be returned */
} cow_job;

/* The scratch VA the copies are filled through, one granule per candidate. */
typedef struct cow_scratch {
    uintptr_t va;
    size_t count;
    bool *mapped;
    om_phys **order; /* the copy mapped at scratch granule j */
} cow_scratch;

/* ---- fill the copies ---- */

static ortmem_status scratch_map(ortmem_region *r, const cow_job *job, cow_scratch *sc)
{
    ortmem_backend *b = r->backend;
    size_t j = 0;
    for (size_t k = 0; k < job->n;) {
        if (!job->cand[k]) {
            k++;
            continue;
        }
        om_phys *p = job->fresh[k];
        ortmem_status st = om_backend_map(b, sc->va + j * r->granule, p->size, p->handle, 0);
        if (st != ORTMEM_OK)
            return st;
        for (uint32_t q = 0; q < p->granules; q++) {
            sc->order[j + q] = p;
            sc->mapped[j + q] = true;
        }
        om_ledger_mapped_add(b, p->size, 1);
        j += p->granules;
        k += p->granules;
    }
    return om_backend_set_access(b, sc->va, sc->count * r->granule, ORTMEM_ACCESS_READ_WRITE);
}

static ortmem_status scratch_copy(ortmem_region *r, const cow_job *job, const cow_scratch *sc)
{
    size_t j = 0;
    for (size_t k = 0; k < job->n;) {
        if (!job->cand[k]) {
            k++;
            continue;
        }
        size_t bytes = job->fresh[k]->size; /* the whole extent */
        ortmem_status st = om_backend_copy(r->backend, sc->va + j * r->granule,
                                           om_region_va(r, job->g0 + k), bytes);
        if (st != ORTMEM_OK)
            return st;
        j += job->fresh[k]->granules;
        k += job->fresh[k]->granules;
    }
    return ORTMEM_OK;
}

/* Unmaps one run of scratch granules; a failed unmap quarantines their copies. */
static bool scratch_unmap_run(ortmem_region *r, const cow_scratch *sc, size_t i, size_t len)
{
    ortmem_backend *b = r->backend;
    if (om_backend_unmap(b, sc->va + i * r->granule, len * r->granule) == ORTMEM_OK) {
        size_t extents = 0;
        for (size_t q = i; q < i + len; q++)
            extents += q == i || sc->order[q] != sc->order[q - 1];
        om_ledger_mapped_sub(b, len * r->granule, extents);
        return true;
    }
    for (size_t q = i; q < i + len; q++) {
        om_phys_quarantine(b, sc->order[q]);
        om_quarantine_mapping(b, &om_no_account, r->granule);
    }
    return false;
}

/* Tears the scratch mappings down and returns the VA; what cannot be given
 * back stays quarantined or reserved (*leaked_va). */
static ortmem_status scratch_release(ortmem_region *r, const cow_scratch *sc, ortmem_status st,
                                     bool *leaked_va)
{
    ortmem_backend *b = r->backend;
    /* A failure before this one stays the one reported. */
    om_error_saved first;
    om_error_save(&first);
    size_t stuck = 0;
    size_t i = 0;
    for (size_t len; sc->mapped && (len = om_next_run(sc->mapped, &i, sc->count)) != 0; i += len) {
        if (!scratch_unmap_run(r, sc, i, len))
            stuck += len;
    }
    size_t bytes = sc->count * r->granule;
    if (stuck || om_backend_unreserve(b, sc->va, bytes) != ORTMEM_OK) {
        om_ledger_count(&b->ledger.leaked_va, bytes, b);
        *leaked_va = true;
    }
    if (st != ORTMEM_OK)
        (void)om_error_restore(&first, st);
    if (stuck) /* the copies stay quarantined in the scratch VA (cow_finish words the VA) */
        st = om_error_wrap(st == ORTMEM_OK ? ORTMEM_E_BACKEND : st,
                           "%zu granule%s of copies quarantined: the scratch mapping could not be "
                           "unmapped",
                           stuck, stuck == 1 ? "" : "s");
    return st;
}

/* Copies each candidate's bytes into its new granule through a scratch VA. */
static ortmem_status cow_fill(ortmem_region *r, cow_job *job)
{
    cow_scratch sc = {0, job->count, NULL, NULL};
    ortmem_status st = om_backend_reserve(r->backend, sc.count * r->granule, r->granule, &sc.va);
    if (st != ORTMEM_OK)
        return st;
    sc.mapped = om_calloc(sc.count, sizeof *sc.mapped);
    sc.order = om_calloc(sc.count, sizeof *sc.order);
    if (!sc.mapped || !sc.order)
        st = OM_ERR(ORTMEM_E_NOMEM, "cow: bookkeeping for %zu granules", sc.count);
    if (st == ORTMEM_OK)
        st = scratch_map(r, job, &sc);
    if (st == ORTMEM_OK)
        st = scratch_copy(r, job, &sc);
    st = scratch_release(r, &sc, st, &job->leaked_va);
    om_free(sc.mapped);
    om_free(sc.order);
    return st;
}

/* ---- swap the copies in ---- */

/* Empties the candidates' slots, keeping what they held in old[]. */
static void detach_shared(ortmem_region *r, const cow_job *job, om_slot *old)
{
    for (size_t k = 0; k < job->n; k++) {
        if (!job->cand[k])
            continue;
        old[k] = r->slots[job->g0 + k];
        /* Same epoch: the map that follows counts the swap as one change. */
        r->slots[job->g0 + k] =
            (om_slot){NULL, 0, ORTMEM_GRANULE_UNMAPPED, ORTMEM_ACCESS_NONE, 0, 0, old[k].epoch};
    }
}

/* The copies are mapped: they inherit the requested bytes and the shared
 * granules lose this region as a mapper. */
static void finish_swap(ortmem_region *r, cow_job *job, const om_slot *old)
{
    for (size_t k = 0; k < job->n; k++) {
        if (!old[k].phys)
            continue;
        r->slots[job->g0 + k].requested_lo = old[k].requested_lo;
        r->slots[job->g0 + k].requested_hi = old[k].requested_hi;
        if (old[k].index == 0) /* one reference per extent mapping */
            (void)om_region_drop_phys(r, old[k].phys, 0);
    }
    memset(job->fresh, 0, job->n * sizeof *job->fresh);
}

/* The copies are unmapped again: puts the shared granules back. */
static void undo_swap(ortmem_region *r, cow_job *job, const om_slot *old)
{
    for (size_t k = 0; k < job->n; k++) {
        if (!old[k].phys)
            continue;
        if (r->slots[job->g0 + k].state != ORTMEM_GRANULE_QUARANTINED) {
            r->slots[job->g0 + k] = old[k];
            continue;
        }
        /* The copy stuck there quarantined; the old mapping is gone. */
        if (old[k].index == 0)
            (void)om_region_drop_phys(r, old[k].phys, 0);
        job->fresh[k] = NULL;
        job->cand[k] = false;
    }
    om_region_restore_runs(r, job->g0, job->n, job->cand);
}

/* Unmaps the shared granules (one call per run) and maps the copies. */
static ortmem_status cow_swap(ortmem_region *r, cow_job *job)
{
    ortmem_status st = om_region_unmap_runs(r, job->g0, job->n, job->cand);
    if (st != ORTMEM_OK)
        return st;
    om_slot *old = om_calloc(job->n, sizeof *old);
    if (!old) {
        om_region_restore_runs(r, job->g0, job->n, job->cand);
        return OM_ERR(ORTMEM_E_NOMEM, "region cow: bookkeeping");
    }
    detach_shared(r, job, old);
    st = om_region_map(r, job->g0, job->n, job->fresh, ORTMEM_ACCESS_READ_WRITE, &job->hold);
    if (st == ORTMEM_OK) {
        finish_swap(r, job, old);
    } else {
        om_error_saved first; /* the failed map stays the one reported */
        om_error_save(&first);
        undo_swap(r, job, old);
        size_t stuck = 0;
        for (size_t k = 0; k < job->n; k++)
            stuck += r->slots[job->g0 + k].state == ORTMEM_GRANULE_QUARANTINED;
        (void)om_error_restore(&first, st);
        if (stuck)
            st = om_error_wrap(st, "%zu granule%s quarantined: they could not be swapped back",
                               stuck, stuck == 1 ? "" : "s");
    }
    assert(st != ORTMEM_OK || job->hold.mapped == 0);
    om_free(old);
    return st;
}

/* ---- one call ---- */

/* The candidates: the granules of mapped extents that another mapping shares
 * (job's span holds whole extents). */
/* want (NULL: every granule): the granules of the span the call covers. */
static ortmem_status select_shared(const ortmem_region *r, cow_job *job, const bool *want)
{
    for (size_t k = 0; k < job->n; k++) {
        const om_slot *s = &r->slots[job->g0 + k];
        if (want && !want[k])
            continue;
        if (s->state != ORTMEM_GRANULE_MAPPED || atomic_load(&s->phys->mappers) < 2)
            continue;
        job->cand[k] = true;
        if (s->index == 0)
            job->ext[k] = s->phys->granules;
        job->count++;
        if (s->access == ORTMEM_ACCESS_NONE)
            return OM_ERR(ORTMEM_E_STATE,
                          "region cow: shared granule at offset %zu has no access "
                          "and cannot be read",
                          (job->g0 + k) * r->granule);
    }
    return ORTMEM_OK;
}

/* [*first, *last]: the granules of [offset, +len) widened to whole extents
 * at both ends (an extent is copied whole). */
static ortmem_status cow_span(ortmem_region *r, size_t offset, size_t len, size_t *first,
                              size_t *last)
{
    ortmem_status st = om_region_check_range(r, offset, len, "region cow");
    if (st != ORTMEM_OK)
        return st;
    size_t f = offset / r->granule, l = (offset + len - 1) / r->granule;
    st = om_region_check_unquarantined(r, f, l - f + 1, "region cow");
    if (st != ORTMEM_OK)
        return st;
    if (r->slots[f].state == ORTMEM_GRANULE_MAPPED)
        f = om_extent_first(r, f);
    if (r->slots[l].state == ORTMEM_GRANULE_MAPPED)
        l = om_extent_first(r, l) + r->slots[l].phys->granules - 1;
    *first = f;
    *last = l;
    return ORTMEM_OK;
}

/* One job over the span that covers every range; only the granules of the
 * ranges (widened to whole extents) are looked at. */
static ortmem_status cow_prepare(ortmem_region *r, const ortmem_range *ranges, size_t count,
                                 cow_job *job)
{
    size_t first = SIZE_MAX, last = 0;
    ortmem_status st = ORTMEM_OK;
    for (size_t i = 0; st == ORTMEM_OK && i < count; i++) {
        size_t f, l;
        st = cow_span(r, ranges[i].offset, ranges[i].length, &f, &l);
        if (st == ORTMEM_OK) {
            first = f < first ? f : first;
            last = l > last ? l : last;
        }
    }
    if (st != ORTMEM_OK || count == 0)
        return st;
    job->g0 = first;
    job->n = last - first + 1;
    bool *want = count > 1 ? om_calloc(job->n, sizeof *want) : NULL;
    job->cand = count == 1 || want ? om_calloc(job->n, sizeof *job->cand) : NULL;
    job->ext = job->cand ? om_calloc(job->n, sizeof *job->ext) : NULL;
    job->fresh = job->ext ? om_calloc(job->n, sizeof *job->fresh) : NULL;
    if (!job->fresh) {
        om_free(want);
        return OM_ERR(ORTMEM_E_NOMEM, "region cow: bookkeeping for %zu granules", job->n);
    }
    for (size_t i = 0; want && i < count; i++) {
        size_t f = 0, l = 0;
        (void)cow_span(r, ranges[i].offset, ranges[i].length, &f, &l); /* checked above */
        for (size_t k = f; k <= l; k++)
            want[k - first] = true;
    }
    st = select_shared(r, job, want);
    om_free(want);
    if (st == ORTMEM_OK && job->count && !om_backend_can_copy(r->backend))
        st = OM_ERR(ORTMEM_E_UNSUPPORTED, "region cow: backend '%s' has no copy primitive",
                    r->backend->ops.name);
    return st;
}

static ortmem_status cow_run(ortmem_region *r, cow_job *job)
{
    ortmem_status st =
        om_region_acquire(r, job->n, job->ext, job->fresh, (uint64_t)job->count * r->granule,
                          &job->hold, &job->pooled_end);
    if (st == ORTMEM_OK)
        st = cow_fill(r, job);
    if (st == ORTMEM_OK)
        st = cow_swap(r, job);
    return st;
}

/* Gives back the copies that were not swapped in and what stays held, and
 * words the outcome. */
static ortmem_status cow_finish(ortmem_region *r, cow_job *job, ortmem_status st, size_t offset,
                                size_t len)
{
    if (job->fresh)
        om_region_give_back(r, job->n, job->fresh, job->pooled_end);
    om_region_unhold_rest(r, &job->hold);
    if (st != ORTMEM_OK && job->leaked_va)
        st = om_error_wrap(st,
                           "region cow [%zu, +%zu) of %zu shared granules, the %zu-byte scratch VA "
                           "left reserved",
                           offset, len, job->count, job->count * r->granule);
    else if (st != ORTMEM_OK)
        st = om_error_wrap(st, "region cow [%zu, +%zu) of %zu shared granules", offset, len,
                           job->count);
    else if (job->leaked_va) /* keeps the failed unreserve's detail */
        st = om_error_wrap(ORTMEM_E_QUARANTINED,
                           "region cow [%zu, +%zu): copied, but the %zu-byte scratch VA could not "
                           "be returned and is left reserved",
                           offset, len, job->count * r->granule);
    assert(job->n == 0 || om_slots_consistent(r, job->g0, job->n));
    om_free(job->cand);
    om_free(job->ext);
    om_free(job->fresh);
    return st;
}

static ortmem_status region_cow_once(ortmem_region *r, const ortmem_range *ranges, size_t count,
                                     om_relief *relief)
{
    om_error_clear();
    ortmem_status st = om_region_lock(r, "region cow");
    if (st != ORTMEM_OK)
        return st;
    r->relief = relief;
    cow_job job = {0};
    st = cow_prepare(r, ranges, count, &job);
    if (st == ORTMEM_OK && job.count)
        st = cow_run(r, &job);
    size_t offset = job.n ? job.g0 * r->granule : 0, len = job.n * r->granule;
    st = cow_finish(r, &job, st, offset, len);
    r->relief = NULL;
    om_region_unlock(r);
    return st;
}

ortmem_status ortmem_region_cow_ranges(ortmem_region *r, const ortmem_range *ranges, size_t count)
{
    if (count && !ranges) {
        om_error_clear();
        return OM_ERR(ORTMEM_E_INVALID, "region cow: %zu ranges at NULL", count);
    }
    om_relief relief = {0};
    ortmem_status st = region_cow_once(r, ranges, count, &relief);
    if (om_relief_run(&relief, st))
        st = region_cow_once(r, ranges, count, NULL);
    return st;
}

ortmem_status ortmem_region_cow(ortmem_region *r, size_t offset, size_t len)
{
    ortmem_range range = {offset, len};
    return ortmem_region_cow_ranges(r, &range, 1);
}
