/* The warm list: finished stable ranges kept mapped for the next sequence.
 *
 * Finish (ortmem_kv_seq_destroy of a stable, resident sequence whose granules
 * are all healthy): the range's private granules are zeroed on the cache
 * stream (the clear: no byte of the old sequence is ever readable by the next
 * one), its charge moves to the reclaimable holder "kv-warm" and it goes to
 * the tail of the list; over warm_max_ranges or warm_max_bytes the oldest go.
 * Take (sequence create, create with a prompt, fork): a range of the same kind
 * — plain; mapping the same prefix entry; mapping the same parent's extents —
 * best fit by private committed bytes; its charge moves back to "kv". A plain
 * take makes no backend call; a fork take copies the parent's live bytes back
 * into the private granules its tokens end in (copies, never a create, map,
 * unmap or release); prewarm.c builds ranges up front. Pressure releases
 * ranges oldest first straight to the backend; teardown releases all. */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "kv/kv.h"
#include "kv/warm.h"

static uint64_t om_warm_backend_owned(ortmem_kv_cache *c)
{
    ortmem_vmm_stats v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    return ortmem_backend_stats(c->backend, &v) == ORTMEM_OK ? v.owned_bytes : 0;
}

static uint64_t om_warm_owned(ortmem_kv_cache *c)
{
    ortmem_holder_report r;
    if (ortmem_holder_report_get(c->warm_holder, &r) != ORTMEM_OK)
        return 0;
    return r.owned_bytes;
}

/* Cache lock held. */
void om_warm_unlink(ortmem_kv_cache *c, om_warm *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        c->warm_head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        c->warm_tail = w->prev;
    w->prev = w->next = NULL;
    c->warm_count--;
    c->warm_bytes -= w->committed;
}

/* Cache lock held: w becomes the newest range. */
void om_warm_link_tail(ortmem_kv_cache *c, om_warm *w)
{
    w->finished = ++c->warm_seq;
    w->prev = c->warm_tail;
    w->next = NULL;
    if (c->warm_tail)
        c->warm_tail->next = w;
    else
        c->warm_head = w;
    c->warm_tail = w;
    c->warm_count++;
    c->warm_bytes += w->committed;
}

static void om_warm_entry_free(om_warm *w)
{
    om_free(w->zero_mapped);
    om_free(w->kind);
    om_free(w);
}

/* Releases an unlinked range: the memsets of its clear complete first, then
 * every extent goes (no_pool: straight to the backend, not the pool). Only a
 * quarantine is reported: a range is released whatever the wait says (a
 * failed wait returns once the stream is idle or broken either way). */
ortmem_status om_warm_release(ortmem_kv_cache *c, om_warm *w, bool no_pool)
{
    if (w->committed && om_kv_stream_wait(c->backend, c->stream) != ORTMEM_OK)
        om_error_clear();
    /* A decommit that failed changed nothing (or quarantined, reported):
     * the destroy unmaps and releases what is left either way. */
    ortmem_status st = ORTMEM_OK;
    if (no_pool) {
        ortmem_range all = {0, ortmem_region_size(w->region)};
        st = ortmem_region_decommit_ex(w->region, &all, 1, ORTMEM_DECOMMIT_NO_POOL);
        if (st != ORTMEM_E_QUARANTINED)
            st = ORTMEM_OK;
    }
    om_error_saved quarantine;
    om_error_save(&quarantine);
    ortmem_status dst = ortmem_region_destroy(w->region);
    if (dst == ORTMEM_OK && st != ORTMEM_OK)
        dst = om_error_restore(&quarantine, st);
    st = dst;
    if (w->prefix)
        om_prefix_unref(c, w->prefix);
    om_warm_entry_free(w);
    return st;
}

/* Releases a list of unlinked ranges (next-linked) to the pool, counting what
 * kv-warm gave back; ORTMEM_E_QUARANTINED (with its detail) when one
 * quarantined. */
ortmem_status om_warm_release_list(ortmem_kv_cache *c, om_warm *gone)
{
    om_error_saved quarantine = {""};
    while (gone) {
        om_warm *next = gone->next;
        uint64_t before = om_warm_owned(c);
        if (om_warm_release(c, gone, false) == ORTMEM_E_QUARANTINED)
            om_error_save(&quarantine);
        uint64_t after = om_warm_owned(c);
        pthread_mutex_lock(&c->lock);
        c->warm_reclaimed += before > after ? before - after : 0;
        pthread_mutex_unlock(&c->lock);
        gone = next;
    }
    om_error_clear();
    if (quarantine.detail[0])
        return ortmem_error_set(ORTMEM_E_QUARANTINED, "kv warm range released: %s",
                                quarantine.detail);
    return ORTMEM_OK;
}

/* Classifies s's granules into w->kind; false when s cannot be kept warm (a
 * granule quarantined, read-only but private, writable but shared, or shared
 * granules that are not exactly its source's). */
static bool om_warm_classify(ortmem_kv_cache *c, ortmem_kv_seq *s, om_warm *w)
{
    uint64_t g = c->geometry.granule;
    uint64_t *live = NULL;
    if (w->source_tokens) {
        live = om_calloc(s->granules ? s->granules : 1, sizeof *live);
        if (!live || om_kv_live_bytes_per_granule(c, s->capacity, w->source_tokens, live,
                                                  s->granules) != ORTMEM_OK) {
            om_free(live);
            return false;
        }
    }
    bool ok = true;
    for (size_t k = 0; ok && k < s->granules; k++) {
        ortmem_granule_info info = {.struct_size = sizeof info};
        if (ortmem_region_granule_info(s->region, k * g, &info) != ORTMEM_OK)
            ok = false;
        else if (s->zero_mapped[k])
            w->kind[k] = OM_WARM_ZERO;
        else if (info.state == ORTMEM_GRANULE_UNMAPPED)
            w->kind[k] = OM_WARM_UNMAPPED;
        else if (info.state != ORTMEM_GRANULE_MAPPED)
            ok = false;
        else if (info.mappers == 1 && info.access == ORTMEM_ACCESS_READ_WRITE)
            w->kind[k] = OM_WARM_PRIVATE;
        else if (info.mappers >= 2 && info.access == ORTMEM_ACCESS_READ)
            w->kind[k] = OM_WARM_SHARED;
        else
            ok = false;
        if (!ok)
            break;
        uint64_t l = live ? live[k] : 0;
        /* Shared only where the source's granules are wholly live. A fork
         * shares whole extents, so the live granules of an extent its length
         * cuts are private copies (copied back at take); a prefix maps its
         * entry's whole extents and holds no private live granule. */
        if (w->kind[k] == OM_WARM_SHARED && l != g)
            ok = false;
        else if (w->prefix && l == g && w->kind[k] != OM_WARM_SHARED)
            ok = false;
        else if (l && w->kind[k] != OM_WARM_SHARED && (w->prefix || w->kind[k] != OM_WARM_PRIVATE))
            ok = false;
    }
    om_free(live);
    return ok;
}

/* Zeroes, on the cache stream, the bytes of its private granules that s may
 * have written: each fragment's first `written` tokens. The rest of a private
 * granule was not written since it was committed or last cleared, so the range
 * goes warm as clean as a cold one (and untouched host pages stay untouched).
 * Adjacent pieces are merged into one memset. */
static ortmem_status om_warm_clear(ortmem_kv_cache *c, om_warm *w, uint64_t written,
                                   uint64_t *cleared)
{
    uint64_t g = c->geometry.granule;
    uint8_t *base = ortmem_region_base(w->region);
    uint64_t run_lo = 0, run_hi = 0;
    ortmem_status st = ORTMEM_OK;
    *cleared = 0;
    for (uint64_t f = 0; st == ORTMEM_OK && written && f < c->fragments; f++) {
        uint64_t off, len;
        st = om_kv_fragment(c, w->capacity, f, &off, &len);
        uint64_t end = off + written * c->contig;
        for (uint64_t lo = off; st == ORTMEM_OK && lo < end;) {
            uint64_t k = lo / g, hi = (k + 1) * g < end ? (k + 1) * g : end;
            if (k < w->granules && w->kind[k] == OM_WARM_PRIVATE) {
                if (run_hi != lo && run_hi > run_lo) {
                    st = ortmem_backend_memset_async(c->backend, base + run_lo, 0,
                                                     (size_t)(run_hi - run_lo), c->stream);
                    *cleared += run_hi - run_lo;
                    run_lo = lo;
                } else if (run_hi <= run_lo) {
                    run_lo = lo;
                }
                run_hi = hi;
            }
            lo = hi;
        }
    }
    if (st == ORTMEM_OK && run_hi > run_lo) {
        st = ortmem_backend_memset_async(c->backend, base + run_lo, 0, (size_t)(run_hi - run_lo),
                                         c->stream);
        *cleared += run_hi - run_lo;
    }
    return st;
}

bool om_warm_finish(ortmem_kv_cache *c, ortmem_kv_seq *s, ortmem_status *evicted, om_warm **keep)
{
    *evicted = ORTMEM_OK;
    if (!c->warm_holder || c->strategy != ORTMEM_KV_STABLE || !s->region || s->host ||
        s->tail_missing || s->capacity != c->max_context)
        return false;
    om_warm *w = om_calloc(1, sizeof *w);
    if (w)
        w->kind = om_calloc(s->granules ? s->granules : 1, sizeof *w->kind);
    if (!w || !w->kind) {
        om_free(w);
        return false; /* decommitted as without warm ranges */
    }
    w->region = s->region;
    w->granules = s->granules;
    w->capacity = s->capacity;
    w->prefix = s->prefix;
    w->source_id = s->prefix ? 0 : s->source_id;
    w->source_tokens = s->prefix || s->source_id ? s->source_tokens : 0;
    bool ok = om_warm_classify(c, s, w);
    for (size_t k = 0; ok && k < w->granules; k++)
        w->committed += w->kind[k] == OM_WARM_PRIVATE ? c->geometry.granule : 0;
    ok = ok && w->committed <= c->warm_max_bytes;
    uint64_t cleared = 0;
    /* The clear is ordered before the next user's kernels on the cache stream. */
    bool clearing = ok;
    if (ok)
        ok = om_warm_clear(c, w, s->written, &cleared) == ORTMEM_OK;
    if (ok)
        ok = ortmem_region_set_account(w->region, &c->warm_account) == ORTMEM_OK;
    if (!ok) {
        /* Memsets of a clear that stopped half way may still be queued: the
         * region is decommitted (to the pool) only after they ran. */
        if (clearing)
            (void)om_kv_stream_wait(c->backend, c->stream);
        om_error_clear();
        om_free(w->kind);
        om_free(w);
        return false;
    }
    w->zero_mapped = s->zero_mapped;
    s->zero_mapped = NULL;
    s->region = NULL;
    s->prefix = NULL;
    if (keep) { /* a prewarm's: linked onto the list by the prewarm, all at once */
        pthread_mutex_lock(&c->lock);
        c->warm_cleared += cleared;
        pthread_mutex_unlock(&c->lock);
        w->next = *keep;
        *keep = w;
        return true;
    }
    /* Linked at the tail; the oldest go while over the limits. */
    om_warm *evict = NULL;
    pthread_mutex_lock(&c->lock);
    om_warm_link_tail(c, w);
    c->warm_cleared += cleared;
    while (c->warm_head != w &&
           (c->warm_count > c->warm_max_ranges || c->warm_bytes > c->warm_max_bytes)) {
        om_warm *old = c->warm_head;
        om_warm_unlink(c, old);
        old->next = evict;
        evict = old;
    }
    pthread_mutex_unlock(&c->lock);
    *evicted = om_warm_release_list(c, evict);
    return true;
}

/* Copies the parent's live bytes into the private granules that hold them
 * (zeroed at finish): the granules of an extent the parent's length cuts, as
 * a cold fork does. */
static ortmem_status om_warm_refill(ortmem_kv_cache *c, om_warm *w, ortmem_region *src)
{
    uint64_t g = c->geometry.granule, copied = 0;
    uint64_t *live = om_calloc(w->granules ? w->granules : 1, sizeof *live);
    if (!live)
        return OM_ERR(ORTMEM_E_NOMEM, "kv warm take: bookkeeping for %zu granules", w->granules);
    ortmem_status st =
        om_kv_live_bytes_per_granule(c, w->capacity, w->source_tokens, live, w->granules);
    uint8_t *to = ortmem_region_base(w->region), *from = ortmem_region_base(src);
    for (uint64_t f = 0; st == ORTMEM_OK && f < c->fragments; f++) {
        uint64_t off, len;
        st = om_kv_fragment(c, w->capacity, f, &off, &len);
        uint64_t end = off + w->source_tokens * c->contig;
        for (uint64_t k = off / g; st == ORTMEM_OK && k < w->granules && k * g < end; k++) {
            if (w->kind[k] != OM_WARM_PRIVATE || live[k] == 0)
                continue;
            uint64_t lo = k * g > off ? k * g : off;
            uint64_t hi = (k + 1) * g < end ? (k + 1) * g : end;
            st = ortmem_backend_copy_async(c->backend, to + lo, from + lo, (size_t)(hi - lo),
                                           c->stream);
            copied += st == ORTMEM_OK ? hi - lo : 0;
        }
    }
    om_free(live);
    if (copied) {
        ortmem_status wait = om_kv_stream_wait(c->backend, c->stream);
        st = st == ORTMEM_OK ? wait : st;
    }
    if (st == ORTMEM_OK) {
        pthread_mutex_lock(&c->lock);
        c->cow_copied += copied;
        pthread_mutex_unlock(&c->lock);
    }
    return st;
}

/* Whether every granule w shares maps the same extent in src. */
static bool om_warm_maps_same(ortmem_kv_cache *c, om_warm *w, ortmem_region *src)
{
    uint64_t g = c->geometry.granule;
    for (size_t k = 0; k < w->granules;) {
        size_t run = 0;
        while (k + run < w->granules && w->kind[k + run] == OM_WARM_SHARED)
            run++;
        int same = 0;
        if (run &&
            (ortmem_region_maps_same(w->region, k * g, src, k * g, run * g, &same) != ORTMEM_OK ||
             !same))
            return false;
        k += run ? run : 1;
    }
    return true;
}

ortmem_status om_warm_take(ortmem_kv_cache *c, ortmem_kv_seq *s, om_prefix *prefix,
                           ortmem_kv_seq *parent, uint64_t need_bytes, bool *taken)
{
    *taken = false;
    if (!c->warm_holder || c->strategy != ORTMEM_KV_STABLE)
        return ORTMEM_OK;
    uint64_t source_id = 0, source_tokens = prefix ? prefix->count : 0;
    if (!prefix && parent && parent->region && parent->length) {
        ortmem_range_state rs = {.struct_size = sizeof rs};
        ortmem_status st = ortmem_region_range_state(parent->region, 0, c->geometry.granule, &rs);
        if (st != ORTMEM_OK)
            return st;
        source_id = rs.region_id;
        source_tokens = parent->length;
    }
    for (;;) {
        /* Best fit: the smallest range that holds need_bytes, else the
         * largest; among equals the most recently finished. */
        pthread_mutex_lock(&c->lock);
        om_warm *best = NULL;
        for (om_warm *w = c->warm_head; w; w = w->next) {
            if (w->prefix != prefix || w->source_id != source_id ||
                w->source_tokens != source_tokens || w->capacity != c->max_context)
                continue;
            bool fits = w->committed >= need_bytes,
                 best_fits = best && best->committed >= need_bytes;
            if (!best || (fits && !best_fits) ||
                (fits && best_fits && w->committed <= best->committed) ||
                (!fits && !best_fits && w->committed >= best->committed))
                best = w;
        }
        if (best)
            om_warm_unlink(c, best);
        else
            c->warm_misses++;
        pthread_mutex_unlock(&c->lock);
        if (!best)
            return ORTMEM_OK;
        ortmem_status st = ORTMEM_OK;
        /* A parent whose shared extents changed since (rewound and grown
         * again) is not this range's any more: it goes, and the next one is
         * tried. */
        ortmem_region *src = prefix ? prefix->region : source_id ? parent->region : NULL;
        if (src && !om_warm_maps_same(c, best, src)) {
            (void)om_warm_release(c, best, false);
            om_error_clear();
            continue;
        }
        st = ortmem_region_set_account(best->region, &c->account);
        bool moved = st == ORTMEM_OK;
        if (st == ORTMEM_OK && source_id)
            st = om_warm_refill(c, best, src);
        if (st != ORTMEM_OK) {
            /* Not taken now: the range goes back on the list (a fork's
             * refill is redone by its next take) and the sequence starts
             * cold, so a failed take costs neither the call nor the range. */
            if (moved)
                (void)ortmem_region_set_account(best->region, &c->warm_account);
            om_error_clear();
            pthread_mutex_lock(&c->lock);
            om_warm_link_tail(c, best);
            c->warm_misses++;
            pthread_mutex_unlock(&c->lock);
            return ORTMEM_OK;
        }
        om_free(s->zero_mapped);
        s->region = best->region;
        s->zero_mapped = best->zero_mapped;
        s->granules = best->granules;
        s->capacity = best->capacity;
        if (best->prefix)
            om_prefix_unref(c, best->prefix); /* the caller holds its own reference */
        best->zero_mapped = NULL;
        om_free(best->kind);
        om_free(best);
        pthread_mutex_lock(&c->lock);
        c->warm_hits++;
        pthread_mutex_unlock(&c->lock);
        *taken = true;
        return ORTMEM_OK;
    }
}

ortmem_status om_warm_forget_source(ortmem_kv_cache *c, ortmem_region *parent)
{
    if (!c->warm_holder || !parent)
        return ORTMEM_OK;
    ortmem_range_state rs = {.struct_size = sizeof rs};
    if (ortmem_region_range_state(parent, 0, c->geometry.granule, &rs) != ORTMEM_OK) {
        om_error_clear();
        return ORTMEM_OK;
    }
    om_warm *gone = NULL;
    pthread_mutex_lock(&c->lock);
    for (om_warm *w = c->warm_head, *next; w; w = next) {
        next = w->next;
        if (w->source_id != rs.region_id)
            continue;
        om_warm_unlink(c, w);
        w->next = gone;
        gone = w;
    }
    pthread_mutex_unlock(&c->lock);
    return om_warm_release_list(c, gone);
}

uint64_t om_warm_pressure(void *user, uint64_t want_bytes)
{
    ortmem_kv_cache *c = user;
    uint64_t reclaimed = 0;
    while (reclaimed < want_bytes) {
        pthread_mutex_lock(&c->lock);
        om_warm *victim = c->warm_head;
        if (victim)
            om_warm_unlink(c, victim);
        pthread_mutex_unlock(&c->lock);
        if (!victim)
            break;
        /* What comes back: the backend's owned bytes. Extents shared with a
         * sequence that lives on count nothing; extents only this range still
         * maps count though another holder owns them (a fork's, whose parent
         * unmapped them). */
        uint64_t before = om_warm_backend_owned(c);
        (void)om_warm_release(c, victim, true); /* a quarantine shows in the ledger */
        uint64_t after = om_warm_backend_owned(c);
        uint64_t got = before > after ? before - after : 0;
        reclaimed += got;
        pthread_mutex_lock(&c->lock);
        c->warm_reclaimed += got;
        pthread_mutex_unlock(&c->lock);
    }
    om_error_clear();
    return reclaimed;
}

ortmem_status om_warm_free_all(ortmem_kv_cache *c)
{
    pthread_mutex_lock(&c->lock);
    om_warm *w = c->warm_head;
    c->warm_head = c->warm_tail = NULL;
    c->warm_count = 0;
    c->warm_bytes = 0;
    pthread_mutex_unlock(&c->lock);
    ortmem_status st = ORTMEM_OK;
    while (w) {
        om_warm *next = w->next;
        ortmem_status wst = om_warm_release(c, w, true);
        st = st == ORTMEM_OK ? wst : st;
        w = next;
    }
    return st;
}
