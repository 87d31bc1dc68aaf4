/* Arena sleep and wake (include/ortmem/vmm.h, docs/memory/ARENA.md): sleep
 * backs the live allocations' bytes up to host on request, then decommits
 * every committed extent straight to the backend, keeping the VA and the
 * block index; wake commits the extents that still hold live allocations
 * again, whole and at the same offsets, and restores the backup.
 *
 * Both are all or nothing where the backend lets them be: a failed copy or a
 * refused commit changes nothing. Only a decommit that fails after unmapping
 * some extents (the region then reports which are still mapped) leaves a
 * sleep half done; the arena is then asleep with those extents committed,
 * which wake handles like any other sleep (src/vmm/arena_internal.h). */
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "vmm/arena_internal.h"

void om_sleep_state_free(om_sleep_state *s)
{
    om_free(s->dormant);
    om_free(s->runs);
    if (s->backup_owned)
        om_free(s->backup);
    memset(s, 0, sizeof *s);
}

static size_t min_size(size_t x, size_t y)
{
    return x < y ? x : y;
}

/* ---- backup ---- */

static bool is_allocation(const ortmem_arena *a, const om_block *b)
{
    /* A fenced granule is a used block no allocation owns: not in the map. */
    return !b->is_free && om_map_find(&a->used, b->offset) == b;
}

/* The live allocations as runs of adjacent blocks; runs may be NULL to count.
 * *bytes gets their total. */
static size_t collect_runs(const ortmem_arena *a, om_backup_run *runs, size_t *bytes)
{
    size_t n = 0, host = 0, prev_end = OM_NONE;
    for (const om_block *b = a->first; b; b = b->phys_next) {
        if (!is_allocation(a, b))
            continue;
        if (n > 0 && prev_end == b->offset) {
            if (runs)
                runs[n - 1].length += b->size;
        } else {
            if (runs)
                runs[n] = (om_backup_run){b->offset, b->size, host};
            n++;
        }
        host += b->size;
        prev_end = b->offset + b->size;
    }
    *bytes = host;
    return n;
}

ortmem_status ortmem_arena_backup_bytes(ortmem_arena *a, size_t *bytes)
{
    om_error_clear();
    if (!bytes)
        return OM_ERR(ORTMEM_E_INVALID, "arena backup bytes: bytes output is NULL");
    ortmem_status st = om_arena_pin(a, "arena backup bytes");
    if (st != ORTMEM_OK)
        return st;
    (void)collect_runs(a, NULL, bytes);
    om_arena_unpin(a);
    return ORTMEM_OK;
}

/* Copies the live allocations to host into s; nothing changes on failure. */
static ortmem_status take_backup(ortmem_arena *a, const ortmem_arena_sleep_options *o,
                                 om_sleep_state *s)
{
    size_t bytes = 0, n = collect_runs(a, NULL, &bytes);
    if (o->backup_buffer && o->backup_capacity < bytes)
        return OM_ERR(ORTMEM_E_RANGE,
                      "arena sleep: the backup buffer holds %zu bytes, the %llu live allocations "
                      "need %zu (ortmem_arena_backup_bytes)",
                      o->backup_capacity, (unsigned long long)a->live_allocations, bytes);
    s->runs = om_calloc(n ? n : 1, sizeof *s->runs);
    s->backup_owned = !o->backup_buffer;
    s->backup = o->backup_buffer ? o->backup_buffer : om_malloc(bytes ? bytes : 1);
    if (!s->runs || !s->backup) {
        om_sleep_state_free(s);
        return OM_ERR(ORTMEM_E_NOMEM, "arena sleep: a host backup of %zu bytes in %zu runs", bytes,
                      n);
    }
    s->run_count = collect_runs(a, s->runs, &s->backup_bytes);
    for (size_t i = 0; i < s->run_count; i++) {
        const om_backup_run *r = &s->runs[i];
        ortmem_status st = ortmem_backend_copy(a->backend, s->backup + r->host_offset,
                                               (const void *)(a->base + r->offset), r->length);
        if (st != ORTMEM_OK) {
            size_t offset = r->offset, length = r->length; /* r goes with s */
            om_sleep_state_free(s);
            return om_error_wrap(st, "arena sleep: backing up [%zu, +%zu) to host failed", offset,
                                 length);
        }
    }
    return ORTMEM_OK;
}

/* Copies the backup back into the committed granules of each run (an extent
 * every allocation on which was freed while asleep is not committed). */
static ortmem_status restore_backup(ortmem_arena *a)
{
    const om_sleep_state *s = &a->sleep;
    size_t g = a->granule;
    for (size_t i = 0; s->backup && i < s->run_count; i++) {
        const om_backup_run *r = &s->runs[i];
        size_t at = r->offset, end = r->offset + r->length;
        while (at < end) {
            bool mapped = a->granules[at / g].committed;
            size_t stop = at;
            while (stop < end && a->granules[stop / g].committed == mapped)
                stop = min_size(end, (stop / g + 1) * g);
            ortmem_status st =
                mapped
                    ? ortmem_backend_copy(a->backend, (void *)(a->base + at),
                                          s->backup + r->host_offset + (at - r->offset), stop - at)
                    : ORTMEM_OK;
            if (st != ORTMEM_OK)
                return om_error_wrap(st, "arena wake: restoring [%zu, +%zu) from host failed", at,
                                     stop - at);
            at = stop;
        }
    }
    return ORTMEM_OK;
}

/* ---- decommit and settle ---- */

static bool extent_still_mapped(ortmem_arena *a, size_t first)
{
    ortmem_granule_info info = {.struct_size = sizeof info};
    return ortmem_region_granule_info(a->region, first * a->granule, &info) != ORTMEM_OK ||
           info.state == ORTMEM_GRANULE_MAPPED;
}

static bool extent_quarantined(ortmem_arena *a, size_t first)
{
    ortmem_granule_info info = {.struct_size = sizeof info};
    return ortmem_region_granule_info(a->region, first * a->granule, &info) == ORTMEM_OK &&
           info.state == ORTMEM_GRANULE_QUARANTINED;
}

/* The extent at first is no longer mapped: it leaves the cache and the
 * committed counts; one that held live allocations is returned true (to be
 * committed again), an empty one the region quarantined is fenced off. */
static bool extent_gone(ortmem_arena *a, size_t first, bool check_quarantine)
{
    om_granule *e = &a->granules[first];
    size_t k = e->ext_granules;
    bool live = e->ext_live > 0;
    bool quarantined = check_quarantine && !live && extent_quarantined(a, first);
    if (e->cached)
        om_cache_remove(a, first);
    e->ext_live = 0;
    om_extent_decommitted(a, first);
    for (size_t i = first; quarantined && i < first + k; i++)
        (void)om_granule_fence(a, i);
    return live;
}

/* Decommits the extents ext[0, n) (each whole, one region call) and settles
 * the arena's records by what really happened: with every extent unmapped
 * (ORTMEM_OK, or ORTMEM_E_QUARANTINED where a release failed afterwards) all
 * are gone; on another failure the region is asked about each. Appends the
 * live extents that went to dormant; *gone counts every extent that went. */
static ortmem_status decommit_settle(ortmem_arena *a, const ortmem_range *ext, size_t n,
                                     om_dormant *dormant, size_t *dormant_count, size_t *gone)
{
    *gone = 0;
    if (n == 0)
        return ORTMEM_OK;
    ortmem_status st = ortmem_region_decommit_ex(a->region, ext, n,
                                                 ORTMEM_DECOMMIT_STRICT | ORTMEM_DECOMMIT_NO_POOL);
    bool all = st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED;
    om_error_saved saved;
    om_error_save(&saved); /* asking the region clears the detail */
    for (size_t i = 0; i < n; i++) {
        size_t first = ext[i].offset / a->granule, k = ext[i].length / a->granule;
        if (!all && extent_still_mapped(a, first))
            continue;
        if (extent_gone(a, first, !all))
            dormant[(*dormant_count)++] = (om_dormant){first, k};
        (*gone)++;
    }
    return om_error_restore(&saved, st);
}

/* ---- sleep ---- */

static ortmem_status read_sleep_options(const ortmem_arena_sleep_options *options,
                                        ortmem_arena_sleep_options *o)
{
    *o = (ortmem_arena_sleep_options)ORTMEM_ARENA_SLEEP_OPTIONS_INIT;
    if (!options)
        return ORTMEM_OK;
    ortmem_status st = OM_STRUCT_CHECK("arena sleep", "options", options);
    if (st != ORTMEM_OK)
        return st;
    memcpy(o, options, options->struct_size);
    if (o->backup_buffer && !o->backup)
        return OM_ERR(ORTMEM_E_INVALID, "arena sleep: a backup buffer without backup set");
    return ORTMEM_OK;
}

/* Every committed extent, address order; returns how many. */
static size_t list_extents(const ortmem_arena *a, ortmem_range *ext)
{
    size_t n = 0;
    for (size_t g = 0; g < a->committed_top;) {
        const om_granule *e = &a->granules[g];
        if (!e->committed || e->ext_first != g) {
            g++;
            continue;
        }
        ext[n++] = (ortmem_range){g * a->granule, e->ext_granules * a->granule};
        g += e->ext_granules;
    }
    return n;
}

static ortmem_status sleep_locked(ortmem_arena *a, const ortmem_arena_sleep_options *o)
{
    if (a->asleep)
        return OM_ERR(ORTMEM_E_STATE, "arena sleep: the arena is asleep already");
    om_sleep_state s;
    memset(&s, 0, sizeof s);
    ortmem_status st = o->backup ? take_backup(a, o, &s) : ORTMEM_OK;
    if (st != ORTMEM_OK)
        return st;
    size_t cap = a->extent_count ? a->extent_count : 1;
    ortmem_range *ext = om_calloc(cap, sizeof *ext);
    s.dormant = ext ? om_calloc(cap, sizeof *s.dormant) : NULL;
    if (!s.dormant) {
        om_free(ext);
        om_sleep_state_free(&s);
        return OM_ERR(ORTMEM_E_NOMEM, "arena sleep: a list of %zu extents", cap);
    }
    size_t n = list_extents(a, ext), gone = 0;
    uint64_t committed = (uint64_t)a->committed_count * a->granule;
    st = decommit_settle(a, ext, n, s.dormant, &s.dormant_count, &gone);
    om_free(ext);
    if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED && gone == 0) {
        om_sleep_state_free(&s);
        return om_error_wrap(st,
                             "arena sleep: decommitting %zu extents (%llu bytes) failed; "
                             "nothing changed, the arena is awake",
                             n, (unsigned long long)committed);
    }
    a->sleep = s;
    a->asleep = true;
    a->sleeps++;
    if (st == ORTMEM_E_QUARANTINED)
        return om_error_wrap(st,
                             "arena sleep took effect (%zu extents decommitted), but a "
                             "release failed: its bytes stay owned, quarantined",
                             n);
    if (st != ORTMEM_OK)
        return om_error_wrap(st,
                             "arena sleep: the backend failed after %zu of %zu extents were "
                             "decommitted; the arena is asleep with %zu bytes still committed "
                             "(ortmem_arena_wake restores it)",
                             gone, n, (size_t)a->committed_count * a->granule);
    return ORTMEM_OK;
}

ortmem_status ortmem_arena_sleep(ortmem_arena *a, const ortmem_arena_sleep_options *options)
{
    om_error_clear();
    ortmem_arena_sleep_options o;
    ortmem_status st = read_sleep_options(options, &o);
    if (st != ORTMEM_OK)
        return st;
    st = om_arena_pin(a, "arena sleep");
    if (st != ORTMEM_OK)
        return st;
    st = sleep_locked(a, &o);
    assert(om_arena_ledger_consistent(a));
    om_arena_unpin(a);
    return st;
}

/* ---- wake ---- */

static bool extent_has_live(const ortmem_arena *a, const om_dormant *d)
{
    for (size_t i = d->first; i < d->first + d->granules; i++) {
        if (a->granules[i].live > 0)
            return true;
    }
    return false;
}

/* The extents ext[0, n) were just mapped again: their records and live counts. */
static void mark_woken(ortmem_arena *a, const ortmem_range *ext, size_t n)
{
    om_extents_mark_committed(a, ext, n);
    for (size_t e = 0; e < n; e++) {
        size_t first = ext[e].offset / a->granule, k = ext[e].length / a->granule;
        size_t live = 0;
        for (size_t i = first; i < first + k; i++)
            live += a->granules[i].live > 0;
        a->granules[first].ext_live = live;
    }
}

/* After a failed restore: the extents this wake committed go again. Those
 * still mapped after a failed decommit stay committed, which a sleeping
 * arena allows. */
static void undo_wake(ortmem_arena *a, const ortmem_range *ext, size_t n)
{
    om_error_saved saved;
    om_error_save(&saved);
    om_dormant *scratch = om_calloc(n, sizeof *scratch);
    size_t count = 0, gone = 0;
    if (scratch)
        (void)decommit_settle(a, ext, n, scratch, &count, &gone);
    om_free(scratch);
    (void)om_error_restore(&saved, ORTMEM_OK);
}

static ortmem_status wake_locked(ortmem_arena *a, om_relief *relief)
{
    if (!a->asleep)
        return OM_ERR(ORTMEM_E_STATE, "arena wake: the arena is awake");
    om_sleep_state *s = &a->sleep;
    ortmem_range *ext = om_calloc(s->dormant_count ? s->dormant_count : 1, sizeof *ext);
    if (!ext)
        return OM_ERR(ORTMEM_E_NOMEM, "arena wake: a list of %zu extents", s->dormant_count);
    size_t n = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < s->dormant_count; i++) {
        const om_dormant *d = &s->dormant[i];
        if (a->granules[d->first].committed || !extent_has_live(a, d))
            continue;
        ext[n++] = (ortmem_range){d->first * a->granule, d->granules * a->granule};
        bytes += (uint64_t)d->granules * a->granule;
    }
    ortmem_status st = n ? om_region_commit_extents_for(a->region, ext, n, relief) : ORTMEM_OK;
    if (st != ORTMEM_OK) {
        om_free(ext);
        return om_error_wrap(st,
                             "arena wake: committing %zu extents (%llu bytes) again failed; "
                             "nothing changed, the arena is asleep",
                             n, (unsigned long long)bytes);
    }
    mark_woken(a, ext, n);
    st = restore_backup(a);
    if (st != ORTMEM_OK) {
        undo_wake(a, ext, n);
        om_free(ext);
        return om_error_wrap(st, "the arena is asleep, its backup kept");
    }
    om_free(ext);
    om_sleep_state_free(s);
    a->asleep = false;
    a->wakes++;
    return ORTMEM_OK;
}

static ortmem_status wake_once(ortmem_arena *a, om_relief *relief)
{
    om_error_clear();
    ortmem_status st = om_arena_pin(a, "arena wake");
    if (st != ORTMEM_OK)
        return st;
    st = wake_locked(a, relief);
    assert(om_arena_ledger_consistent(a));
    om_arena_unpin(a);
    return st;
}

ortmem_status ortmem_arena_wake(ortmem_arena *a)
{
    om_relief relief = {0};
    ortmem_status st = wake_once(a, &relief);
    /* A refused hold is relieved with the arena unlocked (a pressure
     * callback may use this very arena), then tried once more. */
    if (om_relief_run(&relief, st))
        st = wake_once(a, NULL);
    return st;
}
