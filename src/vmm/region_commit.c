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

/* Marks the unmapped granules of every range in want[] (relative to g0); a
 * quarantined granule in a range refuses the commit. */
static ortmem_status select_unmapped(const ortmem_region *r, const ortmem_range *ranges,
                                     size_t count, size_t g0, bool *want)
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
    return ORTMEM_OK;
}

/* Lays policy's extents over the run ext[at, at + need) (relative): below is
 * the extent just below, room the granules free from at. Writes each
 * extent's granules at its first entry; *laid = granules covered. */
static ortmem_status lay_run(const ortmem_region *r, const ortmem_extent_policy *policy,
                             uint64_t below, size_t need, size_t room, uint32_t *ext, size_t at,
                             uint64_t *sizes, size_t *laid)
{
    size_t count = 0;
    ortmem_status st =
        ortmem_extent_layout(policy, r->granule, below, need, room, sizes, need, &count);
    if (st != ORTMEM_OK)
        return st;
    size_t k = at;
    for (size_t e = 0; e < count; e++) {
        if (sizes[e] > UINT32_MAX || sizes[e] > room - (k - at))
            return OM_ERR(ORTMEM_E_RANGE, "extent of %llu granules does not fit",
                          (unsigned long long)sizes[e]);
        ext[k] = (uint32_t)sizes[e];
        k += (size_t)sizes[e];
    }
    *laid = k - at;
    return ORTMEM_OK;
}

/* ext[] for every maximal run of want[]: the region's policy, an exact ask. */
static ortmem_status plan_runs(const ortmem_region *r, size_t n, const bool *want, uint32_t *ext,
                               uint64_t *sizes, size_t *wanted)
{
    size_t i = 0;
    for (size_t len; (len = om_next_run(want, &i, n)) != 0; i += len) {
        size_t laid = 0;
        ortmem_status st = lay_run(r, &r->extents, 0, len, len, ext, i, sizes, &laid);
        if (st != ORTMEM_OK)
            return st;
        *wanted += laid;
    }
    return ORTMEM_OK;
}

/* Acquires and maps the planned extents, charged to the account. */
static ortmem_status commit_extents(ortmem_region *r, size_t g0, size_t n, const uint32_t *ext,
                                    om_phys **phys, size_t wanted)
{
    om_hold hold = {0, 0};
    size_t pooled_end = 0;
    ortmem_status st =
        om_region_acquire(r, n, ext, phys, (uint64_t)wanted * r->granule, &hold, &pooled_end);
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

static ortmem_status commit_failed(ortmem_status st, const char *what, const ortmem_range *ranges,
                                   size_t count, size_t wanted)
{
    if (count == 1)
        return om_error_wrap(st, "%s [%zu, +%zu) of %zu granule%s", what, ranges[0].offset,
                             ranges[0].length, wanted, wanted == 1 ? "" : "s");
    return om_error_wrap(st, "%s of %zu ranges (%zu granule%s)", what, count, wanted,
                         wanted == 1 ? "" : "s");
}

/* The bookkeeping of one commit over n granules from g0: the extents laid
 * (ext), the extents got (phys), the granules wanted, scratch for layouts. */
typedef struct commit_plan {
    size_t g0, n, wanted;
    uint32_t *ext;
    om_phys **phys;
    bool *want;
    uint64_t *sizes;
} commit_plan;

static ortmem_status plan_alloc(commit_plan *plan, const char *what)
{
    size_t n = plan->n;
    plan->phys = om_calloc(n, sizeof *plan->phys);
    plan->ext = plan->phys ? om_calloc(n, sizeof *plan->ext) : NULL;
    plan->want = plan->ext ? om_calloc(n, sizeof *plan->want) : NULL;
    plan->sizes = plan->want ? om_calloc(n, sizeof *plan->sizes) : NULL;
    if (!plan->sizes)
        return OM_ERR(ORTMEM_E_NOMEM, "%s: bookkeeping for %zu granules", what, n);
    return ORTMEM_OK;
}

static void plan_free(commit_plan *plan)
{
    om_free(plan->sizes);
    om_free(plan->want);
    om_free(plan->ext);
    om_free(plan->phys);
}

/* Maps the planned extents and notes the ranges; words a failure. */
static ortmem_status commit_planned(ortmem_region *r, commit_plan *plan, ortmem_status st,
                                    const char *what, const ortmem_range *ranges, size_t count)
{
    if (st == ORTMEM_OK && plan->wanted)
        st = commit_extents(r, plan->g0, plan->n, plan->ext, plan->phys, plan->wanted);
    if (st == ORTMEM_OK)
        note_committed(r, ranges, count);
    else
        st = commit_failed(st, what, ranges, count, plan->wanted);
    plan_free(plan);
    return st;
}

static ortmem_status commit_locked(ortmem_region *r, const ortmem_range *ranges, size_t count)
{
    commit_plan plan = {0};
    ortmem_status st = ranges_span(r, ranges, count, "region commit", &plan.g0, &plan.n);
    if (st == ORTMEM_OK)
        st = plan_alloc(&plan, "region commit");
    if (st == ORTMEM_OK)
        st = select_unmapped(r, ranges, count, plan.g0, plan.want);
    if (st == ORTMEM_OK)
        st = plan_runs(r, plan.n, plan.want, plan.ext, plan.sizes, &plan.wanted);
    return commit_planned(r, &plan, st, "region commit", ranges, count);
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

/* ---- commit whole extents ---- */

static bool pow2(uint64_t v)
{
    return v && (v & (v - 1)) == 0;
}

/* Each range one extent: aligned, a power of two of granules, every granule
 * unmapped and in no other range. */
static ortmem_status plan_exact(const ortmem_region *r, const ortmem_range *ranges, size_t count,
                                commit_plan *plan)
{
    const char *what = "region commit extents";
    for (size_t i = 0; i < count; i++) {
        size_t first = ranges[i].offset / r->granule, k = ranges[i].length / r->granule;
        if (ranges[i].offset % r->granule || ranges[i].length % r->granule || !pow2(k) ||
            k > UINT32_MAX)
            return OM_ERR(ORTMEM_E_INVALID,
                          "%s: range %zu [%zu, +%zu) is not one extent (granule-aligned, a "
                          "power of two of %zu-byte granules)",
                          what, i, ranges[i].offset, ranges[i].length, r->granule);
        for (size_t g = first; g < first + k; g++) {
            if (r->slots[g].state != ORTMEM_GRANULE_UNMAPPED)
                return OM_ERR(
                    ORTMEM_E_STATE, "%s: granule at offset %zu is %s", what, g * r->granule,
                    r->slots[g].state == ORTMEM_GRANULE_MAPPED ? "already mapped" : "quarantined");
            if (plan->want[g - plan->g0])
                return OM_ERR(ORTMEM_E_INVALID, "%s: range %zu overlaps an earlier one", what, i);
            plan->want[g - plan->g0] = true;
        }
        plan->ext[first - plan->g0] = (uint32_t)k;
        plan->wanted += k;
    }
    return ORTMEM_OK;
}

static ortmem_status commit_extents_locked(ortmem_region *r, const ortmem_range *ranges,
                                           size_t count)
{
    const char *what = "region commit extents";
    commit_plan plan = {0};
    ortmem_status st = ranges_span(r, ranges, count, what, &plan.g0, &plan.n);
    if (st == ORTMEM_OK)
        st = plan_alloc(&plan, what);
    if (st == ORTMEM_OK)
        st = plan_exact(r, ranges, count, &plan);
    return commit_planned(r, &plan, st, what, ranges, count);
}

/* ---- commit with growth windows ---- */

/* Granules of the extent holding granule g (mapped, or planned by this call
 * in cover[]); 0 when none. */
static uint64_t extent_below(const ortmem_region *r, const commit_plan *plan, const uint32_t *cover,
                             size_t g)
{
    const om_slot *s = &r->slots[g];
    if (s->state == ORTMEM_GRANULE_MAPPED)
        return s->phys->granules;
    if (g >= plan->g0 && g < plan->g0 + plan->n)
        return cover[g - plan->g0];
    return 0;
}

/* Free for growth: unmapped and not planned already. */
static bool grow_free(const ortmem_region *r, const commit_plan *plan, size_t g)
{
    return r->slots[g].state == ORTMEM_GRANULE_UNMAPPED && !plan->want[g - plan->g0];
}

/* Lays the unmapped runs of granules [first, last]; the run reaching last
 * may grow up to wend (exclusive) or the first granule that is not free. */
static ortmem_status plan_grow_range(const ortmem_region *r, const ortmem_extent_policy *policy,
                                     size_t first, size_t last, size_t wend, commit_plan *plan,
                                     uint32_t *cover)
{
    for (size_t a = first; a <= last;) {
        if (!grow_free(r, plan, a)) {
            a++;
            continue;
        }
        size_t b = a;
        while (b <= last && grow_free(r, plan, b))
            b++;
        size_t room = b - a;
        if (b == last + 1) {
            while (a + room < wend && grow_free(r, plan, a + room))
                room++;
        }
        uint64_t below = a > 0 ? extent_below(r, plan, cover, a - 1) : 0;
        size_t rel = a - plan->g0, laid = 0;
        ortmem_status st =
            lay_run(r, policy, below, b - a, room, plan->ext, rel, plan->sizes, &laid);
        if (st != ORTMEM_OK)
            return st;
        for (size_t k = rel; k < rel + laid; k += plan->ext[k]) {
            for (uint32_t j = 0; j < plan->ext[k]; j++) {
                plan->want[k + j] = true;
                cover[k + j] = plan->ext[k];
            }
        }
        plan->wanted += laid;
        a += laid;
    }
    return ORTMEM_OK;
}

/* Checks the growth ranges, gives their plain ranges (for the requested
 * bytes) and the granule span their windows cover. */
static ortmem_status grow_span(const ortmem_region *r, const ortmem_commit_range *ranges,
                               size_t count, ortmem_range *plain, commit_plan *plan)
{
    const char *what = "region commit grow";
    size_t lo = SIZE_MAX, hi = 0;
    for (size_t i = 0; i < count; i++) {
        const ortmem_commit_range *c = &ranges[i];
        ortmem_status st = om_region_check_range(r, c->offset, c->length, what);
        if (st != ORTMEM_OK)
            return om_error_wrap(st, "range %zu of %zu", i, count);
        size_t end = c->window_end ? c->window_end : c->offset + c->length;
        if (end < c->offset + c->length || end > r->size)
            return OM_ERR(ORTMEM_E_RANGE,
                          "%s: range %zu [%zu, +%zu) has window end %zu outside [%zu, %zu]", what,
                          i, c->offset, c->length, c->window_end, c->offset + c->length, r->size);
        plain[i] = (ortmem_range){c->offset, c->length};
        size_t first = c->offset / r->granule, wend = (end + r->granule - 1) / r->granule;
        st = om_region_check_unquarantined(
            r, first, (c->offset + c->length - 1) / r->granule - first + 1, what);
        if (st != ORTMEM_OK)
            return st;
        lo = first < lo ? first : lo;
        hi = wend > hi ? wend : hi;
    }
    plan->g0 = lo;
    plan->n = hi - lo;
    return ORTMEM_OK;
}

static ortmem_status commit_grow_locked(ortmem_region *r, const ortmem_commit_range *ranges,
                                        size_t count, const ortmem_extent_policy *policy)
{
    const char *what = "region commit grow";
    if (!ranges || count == 0)
        return OM_ERR(ORTMEM_E_INVALID, "%s: no ranges", what);
    uint64_t cap = 0;
    ortmem_status st = ortmem_extent_cap_granules(policy, r->granule, &cap);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "%s: policy", what);
    ortmem_range *plain = om_calloc(count, sizeof *plain);
    if (!plain)
        return OM_ERR(ORTMEM_E_NOMEM, "%s: bookkeeping for %zu ranges", what, count);
    commit_plan plan = {0};
    uint32_t *cover = NULL;
    st = grow_span(r, ranges, count, plain, &plan);
    if (st == ORTMEM_OK)
        st = plan_alloc(&plan, what);
    if (st == ORTMEM_OK && !(cover = om_calloc(plan.n, sizeof *cover)))
        st = OM_ERR(ORTMEM_E_NOMEM, "%s: bookkeeping for %zu granules", what, plan.n);
    for (size_t i = 0; st == ORTMEM_OK && i < count; i++) {
        const ortmem_commit_range *c = &ranges[i];
        size_t end = c->window_end ? c->window_end : c->offset + c->length;
        st = plan_grow_range(r, policy, c->offset / r->granule,
                             (c->offset + c->length - 1) / r->granule,
                             (end + r->granule - 1) / r->granule, &plan, cover);
    }
    om_free(cover);
    st = commit_planned(r, &plan, st, what, plain, count);
    om_free(plain);
    return st;
}

/* ---- one commit call, with relief ---- */

typedef enum commit_kind { COMMIT_EXTENTS, COMMIT_GROW } commit_kind;

typedef struct commit_call {
    commit_kind kind;
    const ortmem_range *ranges;
    const ortmem_commit_range *grow;
    size_t count;
    const ortmem_extent_policy *policy;
} commit_call;

static ortmem_status commit_call_once(ortmem_region *r, const commit_call *c, om_relief *relief)
{
    om_error_clear();
    ortmem_status st = om_region_lock(r, "region commit");
    if (st != ORTMEM_OK)
        return st;
    r->relief = relief;
    if (c->kind == COMMIT_EXTENTS)
        st = commit_extents_locked(r, c->ranges, c->count);
    else
        st = commit_grow_locked(r, c->grow, c->count, c->policy ? c->policy : &r->extents);
    r->relief = NULL;
    om_region_unlock(r);
    return st;
}

static ortmem_status commit_call_run(ortmem_region *r, const commit_call *c)
{
    om_relief relief = {0};
    ortmem_status st = commit_call_once(r, c, &relief);
    if (om_relief_run(&relief, st))
        st = commit_call_once(r, c, NULL);
    return st;
}

ortmem_status ortmem_region_commit_extents(ortmem_region *r, const ortmem_range *extents,
                                           size_t count)
{
    commit_call c = {COMMIT_EXTENTS, extents, NULL, count, NULL};
    return commit_call_run(r, &c);
}

/* The arena's commit (declared in src/vmm/arena_internal.h): a refused hold is
 * noted in relief, relieved by the caller once its own lock is dropped. */
ortmem_status om_region_commit_extents_for(ortmem_region *r, const ortmem_range *extents,
                                           size_t count, om_relief *relief)
{
    commit_call c = {COMMIT_EXTENTS, extents, NULL, count, NULL};
    return commit_call_once(r, &c, relief);
}

ortmem_status ortmem_region_commit_grow(ortmem_region *r, const ortmem_commit_range *ranges,
                                        size_t count, const ortmem_extent_policy *policy)
{
    commit_call c = {COMMIT_GROW, NULL, ranges, count, policy};
    return commit_call_run(r, &c);
}

/* ---- decommit ---- */

/* Marks in sel[] (relative to g0) the mapped extents lying wholly inside a
 * range; with strict, an extent a range cuts refuses (ORTMEM_E_RANGE). */
static ortmem_status select_whole_mapped(const ortmem_region *r, const ortmem_range *ranges,
                                         size_t count, size_t g0, bool *sel, bool strict)
{
    for (size_t i = 0; i < count; i++) {
        size_t lo = ranges[i].offset, hi = ranges[i].offset + ranges[i].length;
        size_t first = lo / r->granule, last = (hi - 1) / r->granule;
        for (size_t k = first; k <= last; k++) {
            const om_slot *s = &r->slots[k];
            if (s->state != ORTMEM_GRANULE_MAPPED)
                continue;
            size_t start = om_extent_first(r, k) * r->granule;
            size_t end = start + s->phys->size;
            if (start >= lo && end <= hi) {
                sel[k - g0] = true;
                continue;
            }
            if (strict)
                return OM_ERR(ORTMEM_E_RANGE,
                              "region decommit: range [%zu, +%zu) cuts the mapped extent [%zu, "
                              "+%zu); an extent is decommitted whole",
                              lo, ranges[i].length, start, s->phys->size);
        }
    }
    return ORTMEM_OK;
}

/* Unmaps the selected extents (nothing changes if an unmap fails) and drops them. */
static ortmem_status decommit_selected(ortmem_region *r, const ortmem_range *ranges, size_t count,
                                       size_t g0, size_t n, const bool *sel, unsigned flags)
{
    ortmem_status st = om_region_unmap_runs(r, g0, n, sel);
    if (st == ORTMEM_OK) {
        unsigned drop = (flags & ORTMEM_DECOMMIT_NO_POOL) ? OM_DROP_NO_POOL : 0;
        st = om_region_drop_unmapped(r, g0, n, sel, drop);
        assert(om_slots_consistent(r, g0, n));
        return st;
    }
    /* Only an extent that could not be mapped back changed: it is quarantined. */
    bool stuck = false;
    for (size_t k = 0; k < n && !stuck; k++)
        stuck = sel[k] && r->slots[g0 + k].state == ORTMEM_GRANULE_QUARANTINED;
    const char *outcome = stuck ? "failed" : "nothing changed";
    if (count == 1)
        return om_error_wrap(st, "region decommit [%zu, +%zu): %s", ranges[0].offset,
                             ranges[0].length, outcome);
    return om_error_wrap(st, "region decommit of %zu ranges: %s", count, outcome);
}

static ortmem_status decommit_locked(ortmem_region *r, const ortmem_range *ranges, size_t count,
                                     unsigned flags)
{
    size_t g0 = 0, n = 0;
    ortmem_status st = ranges_span(r, ranges, count, "region decommit", &g0, &n);
    if (st == ORTMEM_OK && (flags & ~(ORTMEM_DECOMMIT_STRICT | ORTMEM_DECOMMIT_NO_POOL)))
        st = OM_ERR(ORTMEM_E_INVALID, "region decommit: unknown flags 0x%x", flags);
    if (st == ORTMEM_OK) {
        bool *sel = r->selection + g0;
        memset(sel, 0, n * sizeof *sel);
        st = select_whole_mapped(r, ranges, count, g0, sel, flags & ORTMEM_DECOMMIT_STRICT);
        if (st == ORTMEM_OK)
            st = decommit_selected(r, ranges, count, g0, n, sel, flags);
    }
    for (size_t i = 0; (st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED) && r->traced && i < count;
         i++)
        om_trace_line("decommit r%llu %zu %zu", (unsigned long long)r->id, ranges[i].offset,
                      ranges[i].length);
    return st;
}

ortmem_status ortmem_region_decommit_ex(ortmem_region *r, const ortmem_range *ranges, size_t count,
                                        unsigned flags)
{
    om_error_clear();
    ortmem_status st = om_region_lock(r, "region decommit");
    if (st != ORTMEM_OK)
        return st;
    st = decommit_locked(r, ranges, count, flags);
    om_region_unlock(r);
    return st;
}

ortmem_status ortmem_region_decommit_ranges(ortmem_region *r, const ortmem_range *ranges,
                                            size_t count)
{
    return ortmem_region_decommit_ex(r, ranges, count, 0);
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
