/* Growth: a stable sequence's append plans the extents the cache's policy
 * lays per fragment, commits them, then copies the shared extents its tokens
 * land in; a bucket sequence moves to the next bucket. The same extents as
 * the growth model (growth_model.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "kv/kv.h"

/* Bytes of the shared extents (mapped elsewhere too, not the zero alias)
 * that range r touches: what copy-on-write copies, each extent whole. */
static ortmem_status om_shared_extent_bytes(ortmem_kv_cache *c, ortmem_kv_seq *s, ortmem_range r,
                                            uint64_t *seen_end, uint64_t *bytes)
{
    uint64_t g = c->geometry.granule;
    *bytes = 0;
    for (size_t k = r.offset / g; r.length && k <= (r.offset + r.length - 1) / g; k++) {
        ortmem_granule_info info = {.struct_size = sizeof info};
        if (s->zero_mapped[k])
            continue;
        ortmem_status st = ortmem_region_granule_info(s->region, k * g, &info);
        if (st != ORTMEM_OK)
            return st;
        if (info.state != ORTMEM_GRANULE_MAPPED || info.mappers < 2 ||
            info.extent_offset < *seen_end) /* counted for an earlier range */
            continue;
        *bytes += (uint64_t)info.extent_granules * g;
        *seen_end = info.extent_offset + (uint64_t)info.extent_granules * g;
        k = info.extent_offset / g + info.extent_granules - 1; /* the next extent */
    }
    return ORTMEM_OK;
}

/* An extent shared into s read-only stays read-only after every other
 * mapper dropped it (mappers 1): cow has nothing to copy, but the tokens about
 * to be written land there, so it becomes writable again. */
static ortmem_status om_unshare_writable(ortmem_kv_cache *c, ortmem_kv_seq *s, ortmem_range r)
{
    uint64_t g = c->geometry.granule;
    ortmem_status st = ORTMEM_OK;
    for (size_t k = r.offset / g; st == ORTMEM_OK && r.length && k <= (r.offset + r.length - 1) / g;
         k++) {
        ortmem_granule_info info = {.struct_size = sizeof info};
        if (s->zero_mapped[k])
            continue;
        st = ortmem_region_granule_info(s->region, k * g, &info);
        if (st == ORTMEM_OK && info.state == ORTMEM_GRANULE_MAPPED &&
            info.access != ORTMEM_ACCESS_READ_WRITE && info.mappers == 1) {
            /* The whole extent: it is this sequence's alone now, and one
             * access change covers a whole mapping. */
            st =
                ortmem_region_protect(s->region, info.extent_offset,
                                      (size_t)(info.extent_granules * g), ORTMEM_ACCESS_READ_WRITE);
            k = info.extent_offset / g + info.extent_granules - 1;
        }
    }
    return st;
}

/* The granules one stable append commits: per fragment, the extents the
 * cache's policy lays over the granules its new tokens touch that are not
 * committed (unmapped, or holding the zero alias). */
typedef struct om_growth_plan {
    bool *planned;         /* per granule of the sequence */
    ortmem_range *extents; /* one range per extent, in the order laid */
    size_t count, capacity;
    uint64_t *sizes; /* layout scratch */
    size_t sizes_capacity;
} om_growth_plan;

static void om_plan_free(om_growth_plan *p)
{
    om_free(p->planned);
    om_free(p->extents);
    om_free(p->sizes);
}

/* Free for growth: no private bytes there (unmapped or the zero alias) and
 * not laid already by this append (a granule two fragments share). */
static bool om_growth_free(const ortmem_kv_seq *s, const om_growth_plan *p, size_t k,
                           const ortmem_granule_info *info)
{
    return !p->planned[k] && (s->zero_mapped[k] || info->state == ORTMEM_GRANULE_UNMAPPED);
}

static ortmem_status om_granule_at(const ortmem_kv_seq *s, uint64_t g, size_t k,
                                   ortmem_granule_info *info)
{
    memset(info, 0, sizeof *info);
    info->struct_size = sizeof *info;
    return ortmem_region_granule_info(s->region, k * g, info);
}

static ortmem_status om_plan_extent(om_growth_plan *p, uint64_t g, size_t first, uint64_t granules)
{
    if (p->count == p->capacity) {
        size_t want = p->capacity ? p->capacity * 2 : 16;
        ortmem_range *more = om_realloc(p->extents, want * sizeof *more);
        if (!more)
            return OM_ERR(ORTMEM_E_NOMEM, "kv append: a plan of %zu extents", want);
        p->extents = more;
        p->capacity = want;
    }
    p->extents[p->count++] = (ortmem_range){(size_t)(first * g), (size_t)(granules * g)};
    for (uint64_t j = 0; j < granules; j++)
        p->planned[first + j] = true;
    return ORTMEM_OK;
}

/* Granules of the private extent holding granule k - 1 when it lies in the
 * fragment's window (first granule wfirst): the extent the tail grows from.
 * The zero alias, a shared extent and a neighbour's extent give 0. */
static ortmem_status om_extent_below(const ortmem_kv_seq *s, uint64_t g, size_t k, size_t wfirst,
                                     uint64_t *below)
{
    *below = 0;
    if (k == 0 || k <= wfirst || s->zero_mapped[k - 1])
        return ORTMEM_OK;
    ortmem_granule_info info;
    ortmem_status st = om_granule_at(s, g, k - 1, &info);
    if (st == ORTMEM_OK && info.state == ORTMEM_GRANULE_MAPPED && info.mappers == 1 &&
        info.extent_offset >= wfirst * g)
        *below = info.extent_granules;
    return st;
}

/* Lays fragment f's growth for tokens [from, to) into the plan. */
static ortmem_status om_plan_fragment(ortmem_kv_cache *c, ortmem_kv_seq *s, om_growth_plan *p,
                                      uint64_t f, uint64_t from, uint64_t to, uint64_t cap)
{
    uint64_t g = c->geometry.granule, off = 0, len = 0;
    ortmem_status st = om_kv_fragment(c, s->capacity, f, &off, &len);
    if (st != ORTMEM_OK)
        return st;
    size_t wfirst = (size_t)(off / g), wend = (size_t)((off + len + g - 1) / g);
    size_t last = (size_t)((off + to * c->contig - 1) / g);
    wend = wend < s->granules ? wend : s->granules;
    for (size_t k = (size_t)((off + from * c->contig) / g); k <= last;) {
        ortmem_granule_info info;
        st = om_granule_at(s, g, k, &info);
        if (st != ORTMEM_OK)
            return st;
        if (info.state == ORTMEM_GRANULE_QUARANTINED)
            return OM_ERR(ORTMEM_E_STATE,
                          "kv append: granule %zu (offset %llu) of fragment %llu is quarantined "
                          "after a failed backend call and cannot hold tokens",
                          k, (unsigned long long)(k * g), (unsigned long long)f);
        if (!om_growth_free(s, p, k, &info)) {
            k++;
            continue;
        }
        /* need: the free run up to the last touched granule; room: as far as
         * the window or the next private granule allows, scanned only as far
         * as a geometric tail's next extent could reach. */
        uint64_t below = 0, need = 1, room;
        st = om_extent_below(s, g, k, wfirst, &below);
        for (; st == ORTMEM_OK && k + need <= last; need++) {
            st = om_granule_at(s, g, k + need, &info);
            if (st != ORTMEM_OK || !om_growth_free(s, p, k + need, &info))
                break;
        }
        uint64_t next = below == 0 ? 1 : (below >= cap / 2 ? cap : below * 2);
        uint64_t enough = c->extents.growth == ORTMEM_EXTENT_GEOMETRIC && next > need ? next : need;
        for (room = need; st == ORTMEM_OK && room < enough && k + room < wend; room++) {
            st = om_granule_at(s, g, k + room, &info);
            if (st != ORTMEM_OK || !om_growth_free(s, p, k + room, &info))
                break;
        }
        if (st != ORTMEM_OK)
            return st;
        size_t count = 0;
        st = ortmem_extent_layout(&c->extents, (size_t)g, below, need, room, p->sizes,
                                  p->sizes_capacity, &count);
        if (st == ORTMEM_E_RANGE && count > p->sizes_capacity) {
            uint64_t *more = om_realloc(p->sizes, count * sizeof *more);
            if (!more)
                return OM_ERR(ORTMEM_E_NOMEM, "kv append: a layout of %zu extents", count);
            p->sizes = more;
            p->sizes_capacity = count;
            st = ortmem_extent_layout(&c->extents, (size_t)g, below, need, room, p->sizes,
                                      p->sizes_capacity, &count);
        }
        for (size_t e = 0; st == ORTMEM_OK && e < count; e++) {
            st = om_plan_extent(p, g, k, p->sizes[e]);
            k += (size_t)p->sizes[e];
        }
        if (st != ORTMEM_OK)
            return om_error_wrap(st, "kv append: fragment %llu", (unsigned long long)f);
    }
    return ORTMEM_OK;
}

/* Unmaps the zero alias from exactly the planned granules. */
static ortmem_status om_zero_clear_planned(ortmem_kv_cache *c, ortmem_kv_seq *s,
                                           const om_growth_plan *p)
{
    uint64_t g = c->geometry.granule;
    ortmem_range *ranges = NULL;
    size_t n = 0;
    for (size_t k = 0; k < s->granules; k++) {
        if (!p->planned[k] || !s->zero_mapped[k])
            continue;
        if (!ranges && !(ranges = om_calloc(s->granules, sizeof *ranges)))
            return OM_ERR(ORTMEM_E_NOMEM, "kv append: zero tail bookkeeping");
        if (n && ranges[n - 1].offset + ranges[n - 1].length == k * g)
            ranges[n - 1].length += (size_t)g;
        else
            ranges[n++] = (ortmem_range){(size_t)(k * g), (size_t)g};
    }
    ortmem_status st = n ? ortmem_region_decommit_ranges(s->region, ranges, n) : ORTMEM_OK;
    for (size_t i = 0; (st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED) && i < n; i++) {
        for (size_t k = ranges[i].offset / g; k * g < ranges[i].offset + ranges[i].length; k++)
            s->zero_mapped[k] = false;
    }
    om_free(ranges);
    return st;
}

ortmem_status om_kv_append_stable(ortmem_kv_cache *c, ortmem_kv_seq *s, uint64_t to)
{
    ortmem_range *ranges = om_calloc(c->fragments, sizeof *ranges);
    om_growth_plan plan = {0};
    plan.planned = om_calloc(s->granules ? s->granules : 1, sizeof *plan.planned);
    plan.sizes_capacity = 64;
    plan.sizes = om_calloc(plan.sizes_capacity, sizeof *plan.sizes);
    if (!ranges || !plan.planned || !plan.sizes) {
        om_free(ranges);
        om_plan_free(&plan);
        return OM_ERR(ORTMEM_E_NOMEM, "kv append: bookkeeping for %llu fragments",
                      (unsigned long long)c->fragments);
    }
    uint64_t cap = 1;
    ortmem_status st = ortmem_extent_cap_granules(&c->extents, (size_t)c->geometry.granule, &cap);
    if (st == ORTMEM_OK)
        st = om_kv_token_ranges(c, s->capacity, s->length, to, ranges);
    /* The plan first, fragment by fragment in ascending offset (as
     * ortmem_kv_growth_evaluate models it): nothing planned, no call. */
    for (uint64_t f = 0; st == ORTMEM_OK && f < c->fragments; f++)
        st = om_plan_fragment(c, s, &plan, f, s->length, to, cap);
    /* A step that took effect but quarantined something (a scratch VA, an
     * alias) is carried on; the append then reports ORTMEM_E_QUARANTINED. */
    om_error_saved quarantined = {""};
    /* The zero tail goes first: the zero granule is mapped everywhere, and
     * copy-on-write would copy it. */
    if (st == ORTMEM_OK) {
        st = om_zero_clear_planned(c, s, &plan);
        if (st == ORTMEM_E_QUARANTINED) {
            om_error_save(&quarantined);
            st = ORTMEM_OK;
        }
    }
    /* The planned extents before copy-on-write: a refused commit (budget,
     * backend) then leaves the shared extents shared, and a failed
     * copy-on-write gives the planned extents back (below). The planned
     * granules are unmapped or were the zero alias, so cow never sees them
     * shared. */
    bool committed = false;
    if (st == ORTMEM_OK && plan.count) {
        st = ortmem_region_commit_extents(s->region, plan.extents, plan.count);
        committed = st == ORTMEM_OK;
    }
    /* Writes below shared_upto would land in extents another sequence maps:
     * give this one private copies before the tokens are written. */
    if (st == ORTMEM_OK && s->length < s->shared_upto) {
        uint64_t copied = 0, seen_end = 0; /* the ranges ascend */
        for (uint64_t f = 0; st == ORTMEM_OK && f < c->fragments; f++) {
            uint64_t bytes = 0;
            st = om_shared_extent_bytes(c, s, ranges[f], &seen_end, &bytes);
            copied += bytes;
        }
        /* Every fragment at once: a failure leaves no fragment copied. */
        if (st == ORTMEM_OK)
            st = ortmem_region_cow_ranges(s->region, ranges, c->fragments);
        if (st == ORTMEM_E_QUARANTINED) {
            om_error_save(&quarantined);
            st = ORTMEM_OK;
        }
        pthread_mutex_lock(&c->lock);
        c->cow_copied += st == ORTMEM_OK ? copied : 0;
        pthread_mutex_unlock(&c->lock);
        for (uint64_t f = 0; st == ORTMEM_OK && f < c->fragments; f++)
            st = om_unshare_writable(c, s, ranges[f]);
    }
    if (st != ORTMEM_OK) {
        om_error_saved failure;
        om_error_save(&failure);
        ortmem_status undo =
            committed ? ortmem_region_decommit_ranges(s->region, plan.extents, plan.count)
                      : ORTMEM_OK;
        (void)om_kv_zero_fill(c, s); /* the zero tail comes back: nothing changed */
        st = om_error_restore(&failure, st);
        if (undo != ORTMEM_OK)
            st = om_error_wrap(st, "kv append (its %zu planned extents given back: %s)", plan.count,
                               ortmem_status_str(undo));
    }
    om_free(ranges);
    om_plan_free(&plan);
    if (st == ORTMEM_OK && s->tail_missing)
        (void)om_kv_zero_fill(c, s); /* a tail an earlier failure left unmapped; retried later */
    if (st == ORTMEM_OK && quarantined.detail[0])
        st =
            ortmem_error_set(ORTMEM_E_QUARANTINED, "kv append took effect: %s", quarantined.detail);
    return st;
}

ortmem_status om_kv_commit_exact(ortmem_region *r, const ortmem_range *ranges, size_t count,
                                 size_t cap_bytes)
{
    ortmem_commit_range *grow = om_calloc(count ? count : 1, sizeof *grow);
    if (!grow)
        return OM_ERR(ORTMEM_E_NOMEM, "kv commit: %zu ranges", count);
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        if (ranges[i].length)
            grow[n++] = (ortmem_commit_range){ranges[i].offset, ranges[i].length, 0};
    }
    ortmem_extent_policy exact = {sizeof exact, ORTMEM_EXTENT_EXACT, cap_bytes};
    ortmem_status st = n ? ortmem_region_commit_grow(r, grow, n, &exact) : ORTMEM_OK;
    om_free(grow);
    return st;
}

size_t om_kv_extent_cap_bytes(const ortmem_kv_cache *c)
{
    uint64_t cap = 1;
    (void)ortmem_extent_cap_granules(&c->extents, (size_t)c->geometry.granule, &cap);
    return cap > SIZE_MAX / c->geometry.granule ? 0 : (size_t)(cap * c->geometry.granule);
}

/* Moves s into a bucket that holds `to` tokens, copying its live prefix. */
ortmem_status om_kv_grow_bucket(ortmem_kv_cache *c, ortmem_kv_seq *s, uint64_t to)
{
    uint64_t cap = ortmem_kv_bucket(to, c->min_bucket, c->max_context);
    ortmem_kv_seq next = {0};
    ortmem_status st = om_seq_attach(c, &next, cap);
    if (st != ORTMEM_OK)
        return st;
    /* A bucket is committed whole: one extent per region (its power-of-two
     * pieces when the region's granule count is not one). */
    ortmem_range whole = {0, ortmem_region_size(next.region)};
    st = om_kv_commit_exact(next.region, &whole, 1, 0);
    /* The live prefix moves on the cache's stream; the old bucket goes once
     * an event after the copies completed: that stream is waited for, never
     * the whole device. */
    uint8_t *from_base = s->region ? ortmem_region_base(s->region) : NULL;
    uint8_t *to_base = ortmem_region_base(next.region);
    bool copied = false;
    for (uint64_t f = 0; st == ORTMEM_OK && s->region && s->length && f < c->fragments; f++) {
        uint64_t from_off, to_off, len;
        st = om_kv_fragment(c, s->capacity, f, &from_off, &len);
        if (st == ORTMEM_OK)
            st = om_kv_fragment(c, cap, f, &to_off, &len);
        if (st == ORTMEM_OK)
            st = ortmem_backend_copy_async(c->backend, to_base + to_off, from_base + from_off,
                                           s->length * c->contig, c->stream);
        copied = copied || st == ORTMEM_OK;
    }
    if (copied) {
        ortmem_status wait = om_kv_stream_wait(c->backend, c->stream);
        st = st == ORTMEM_OK ? wait : st;
    }
    if (st != ORTMEM_OK) {
        om_error_saved failure;
        om_error_save(&failure);
        (void)ortmem_region_destroy(next.region);
        om_free(next.zero_mapped);
        return om_error_restore(&failure, st);
    }
    /* The move took effect; a quarantine of the old bucket is reported. */
    st = s->region ? ortmem_region_destroy(s->region) : ORTMEM_OK;
    om_free(s->zero_mapped);
    pthread_mutex_lock(&c->lock);
    c->growth_copied += s->length * c->bytes_per_token;
    c->generations++;
    pthread_mutex_unlock(&c->lock);
    s->region = next.region;
    s->zero_mapped = next.zero_mapped;
    s->granules = next.granules;
    s->capacity = cap;
    s->generation++;
    s->shared_upto = 0;
    return st;
}
