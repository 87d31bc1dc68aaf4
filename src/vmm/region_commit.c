/* Region commit, decommit and protect: which granules of a range are mapped,
 * what the callers asked for in them, and their access. Commit and decommit
 * are all-or-nothing (src/vmm/region_internal.h). */
#include "core/alloc.h"
#include "vmm/region_internal.h"

#include <string.h>

#include "core/error.h"
#include "core/trace.h"

/* Granules [first, last] of one range. */
static void range_granules(const ortmem_region *r, const ortmem_range *range, size_t *first,
                           size_t *last)
{
    *first = range->offset / r->granule;
    *last = (range->offset + range->length - 1) / r->granule;
}

/* Granule span [*g0, *g0 + *n) touched by ranges, or an error naming the bad one. */
static ortmem_status ranges_span(const ortmem_region *r, const ortmem_range *ranges, size_t count,
                                 const char *what, size_t *g0, size_t *n)
{
    if (!ranges || count == 0)
        return OM_ERR(ORTMEM_E_INVALID, "%s: no ranges", what);
    size_t lo = SIZE_MAX, hi = 0;
    for (size_t i = 0; i < count; i++) {
        ortmem_status st = om_region_check_range(r, ranges[i].offset, ranges[i].length, what);
        if (st != ORTMEM_OK)
            return om_error_wrap(st, "range %zu of %zu", i, count);
        size_t first, last;
        range_granules(r, &ranges[i], &first, &last);
        lo = first < lo ? first : lo;
        hi = last > hi ? last : hi;
    }
    *g0 = lo;
    *n = hi - lo + 1;
    return ORTMEM_OK;
}

/* ---- commit ---- */

/* Widens each committed granule's requested hull by [offset, offset+len). */
static void note_requested(ortmem_region *r, size_t g0, size_t n, size_t offset, size_t len)
{
    if (!r->report_requested)
        return;
    int64_t delta = 0;
    for (size_t k = 0; k < n; k++) {
        om_slot *s = &r->slots[g0 + k];
        size_t start = (g0 + k) * r->granule, end = start + r->granule;
        uint32_t lo = (uint32_t)((offset > start ? offset : start) - start);
        uint32_t hi = (uint32_t)((offset + len < end ? offset + len : end) - start);
        uint32_t old = s->requested_hi - s->requested_lo;
        if (old) {
            lo = lo < s->requested_lo ? lo : s->requested_lo;
            hi = hi > s->requested_hi ? hi : s->requested_hi;
        }
        s->requested_lo = lo;
        s->requested_hi = hi;
        delta += (int64_t)(hi - lo) - (int64_t)old;
    }
    om_account_requested(&r->account, delta);
}

/* Marks the unmapped granules of every range in want[] (relative to g0) and
 * counts them in *wanted; a quarantined granule in a range refuses the commit. */
static ortmem_status select_unmapped(const ortmem_region *r, const ortmem_range *ranges,
                                     size_t count, size_t g0, size_t n, bool *want, size_t *wanted)
{
    for (size_t i = 0; i < count; i++) {
        size_t first, last;
        range_granules(r, &ranges[i], &first, &last);
        ortmem_status st =
            om_region_check_unquarantined(r, first, last - first + 1, "region commit");
        if (st != ORTMEM_OK)
            return st;
        for (size_t k = first; k <= last; k++)
            want[k - g0] = r->slots[k].state == ORTMEM_GRANULE_UNMAPPED;
    }
    for (size_t k = 0; k < n; k++)
        *wanted += want[k];
    return ORTMEM_OK;
}

/* Acquires and maps the wanted granules, charged to the account. */
static ortmem_status commit_granules(ortmem_region *r, size_t g0, size_t n, const bool *want,
                                     om_phys **phys, size_t wanted)
{
    om_hold hold = {0, 0};
    size_t pooled_end = 0;
    ortmem_status st =
        om_region_acquire(r, n, want, phys, (uint64_t)wanted * r->granule, &hold, &pooled_end);
    if (st == ORTMEM_OK) {
        st = om_region_map(r, g0, n, phys, ORTMEM_ACCESS_READ_WRITE, &hold);
        if (st != ORTMEM_OK)
            om_region_give_back(r, n, phys, pooled_end);
    }
    assert(st != ORTMEM_OK || hold.mapped == 0);
    om_region_unhold_rest(r, &hold);
    return st;
}

/* After a commit: the requested bytes, the trace, and (debug) every granule of
 * every range mapped. */
static void note_committed(ortmem_region *r, const ortmem_range *ranges, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        size_t first, last;
        range_granules(r, &ranges[i], &first, &last);
        assert(om_slots_in_state(r, first, last - first + 1, ORTMEM_GRANULE_MAPPED));
        assert(om_slots_consistent(r, first, last - first + 1));
        note_requested(r, first, last - first + 1, ranges[i].offset, ranges[i].length);
        if (r->traced)
            om_trace_line("commit r%llu %zu %zu", (unsigned long long)r->id, ranges[i].offset,
                          ranges[i].length);
    }
}

static ortmem_status commit_failed(ortmem_status st, const ortmem_range *ranges, size_t count,
                                   size_t wanted)
{
    if (count == 1)
        return om_error_wrap(st, "region commit [%zu, +%zu) of %zu granule%s", ranges[0].offset,
                             ranges[0].length, wanted, wanted == 1 ? "" : "s");
    return om_error_wrap(st, "region commit of %zu ranges (%zu granule%s)", count, wanted,
                         wanted == 1 ? "" : "s");
}

static ortmem_status commit_locked(ortmem_region *r, const ortmem_range *ranges, size_t count)
{
    size_t g0 = 0, n = 0, wanted = 0;
    om_phys **phys = NULL;
    bool *want = NULL;
    ortmem_status st = ranges_span(r, ranges, count, "region commit", &g0, &n);
    if (st == ORTMEM_OK) {
        phys = om_calloc(n, sizeof *phys);
        want = phys ? om_calloc(n, sizeof *want) : NULL;
        if (!want)
            st = OM_ERR(ORTMEM_E_NOMEM, "region commit: bookkeeping for %zu granules", n);
    }
    if (st == ORTMEM_OK)
        st = select_unmapped(r, ranges, count, g0, n, want, &wanted);
    if (st == ORTMEM_OK && wanted)
        st = commit_granules(r, g0, n, want, phys, wanted);
    if (st == ORTMEM_OK)
        note_committed(r, ranges, count);
    else
        st = commit_failed(st, ranges, count, wanted);
    om_free(want);
    om_free(phys);
    return st;
}

ortmem_status om_region_commit_for(ortmem_region *r, const ortmem_range *ranges, size_t count,
                                   om_relief *relief)
{
    om_error_clear();
    ortmem_status st = om_region_lock(r, "region commit");
    if (st != ORTMEM_OK)
        return st;
    r->relief = relief;
    st = commit_locked(r, ranges, count);
    r->relief = NULL;
    om_region_unlock(r);
    return st;
}

ortmem_status ortmem_region_commit_ranges(ortmem_region *r, const ortmem_range *ranges,
                                          size_t count)
{
    om_relief relief = {0};
    ortmem_status st = om_region_commit_for(r, ranges, count, &relief);
    if (om_relief_run(&relief, st))
        st = om_region_commit_for(r, ranges, count, NULL);
    return st;
}

ortmem_status ortmem_region_commit(ortmem_region *r, size_t offset, size_t len)
{
    ortmem_range range = {offset, len};
    return ortmem_region_commit_ranges(r, &range, 1);
}

/* ---- decommit ---- */

/* Marks in sel[] (relative to g0) the mapped granules wholly inside a range. */
static void select_whole_mapped(const ortmem_region *r, const ortmem_range *ranges, size_t count,
                                size_t g0, bool *sel)
{
    for (size_t i = 0; i < count; i++) {
        size_t first = (ranges[i].offset + r->granule - 1) / r->granule;
        size_t end = (ranges[i].offset + ranges[i].length) / r->granule;
        for (size_t k = first; k < end; k++)
            sel[k - g0] = r->slots[k].state == ORTMEM_GRANULE_MAPPED;
    }
}

/* Unmaps the selected granules (nothing changes if an unmap fails) and drops them. */
static ortmem_status decommit_selected(ortmem_region *r, const ortmem_range *ranges, size_t count,
                                       size_t g0, size_t n, const bool *sel)
{
    ortmem_status st = om_region_unmap_runs(r, g0, n, sel);
    if (st == ORTMEM_OK) {
        st = om_region_drop_unmapped(r, g0, n, sel);
        assert(om_slots_consistent(r, g0, n));
        return st;
    }
    if (count == 1)
        return om_error_wrap(st, "region decommit [%zu, +%zu): nothing changed", ranges[0].offset,
                             ranges[0].length);
    return om_error_wrap(st, "region decommit of %zu ranges: nothing changed", count);
}

static ortmem_status decommit_locked(ortmem_region *r, const ortmem_range *ranges, size_t count)
{
    size_t g0 = 0, n = 0;
    ortmem_status st = ranges_span(r, ranges, count, "region decommit", &g0, &n);
    if (st == ORTMEM_OK) {
        bool *sel = r->selection + g0;
        memset(sel, 0, n * sizeof *sel);
        select_whole_mapped(r, ranges, count, g0, sel);
        st = decommit_selected(r, ranges, count, g0, n, sel);
    }
    for (size_t i = 0; (st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED) && r->traced && i < count;
         i++)
        om_trace_line("decommit r%llu %zu %zu", (unsigned long long)r->id, ranges[i].offset,
                      ranges[i].length);
    return st;
}

ortmem_status ortmem_region_decommit_ranges(ortmem_region *r, const ortmem_range *ranges,
                                            size_t count)
{
    om_error_clear();
    ortmem_status st = om_region_lock(r, "region decommit");
    if (st != ORTMEM_OK)
        return st;
    st = decommit_locked(r, ranges, count);
    om_region_unlock(r);
    return st;
}

ortmem_status ortmem_region_decommit(ortmem_region *r, size_t offset, size_t len)
{
    ortmem_range range = {offset, len};
    return ortmem_region_decommit_ranges(r, &range, 1);
}

/* ---- protect ---- */

static ortmem_status protect_locked(ortmem_region *r, size_t offset, size_t len,
                                    ortmem_access access)
{
    ortmem_status st = om_region_check_range(r, offset, len, "region protect");
    if (st == ORTMEM_OK)
        st = om_region_check_aligned(r, offset, len, "region protect");
    if (st != ORTMEM_OK)
        return st;
    size_t g0 = offset / r->granule, n = len / r->granule;
    for (size_t k = 0; k < n; k++) {
        if (r->slots[g0 + k].state != ORTMEM_GRANULE_MAPPED)
            return OM_ERR(ORTMEM_E_STATE, "region protect: granule at offset %zu is not mapped",
                          (g0 + k) * r->granule);
    }
    st = om_backend_set_access(r->backend, om_region_va(r, g0), len, access);
    for (size_t k = 0; st == ORTMEM_OK && k < n; k++)
        r->slots[g0 + k].access = (uint8_t)access;
    return st;
}

ortmem_status ortmem_region_protect(ortmem_region *r, size_t offset, size_t len,
                                    ortmem_access access)
{
    om_error_clear();
    if (!om_access_known(access))
        return OM_ERR(ORTMEM_E_INVALID, "region protect: unknown access %d", (int)access);
    ortmem_status st = om_region_lock(r, "region protect");
    if (st != ORTMEM_OK)
        return st;
    st = protect_locked(r, offset, len, access);
    om_region_unlock(r);
    return st;
}
