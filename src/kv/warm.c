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
 * unmap or release). Prewarm builds ranges of one kind up front, each as a
 * cold sequence grown to a stated length and finished, checked against the
 * list's bounds and the budget first. Pressure releases ranges oldest first
 * straight to the backend; teardown releases all. */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "kv/kv.h"

/* Per granule, what a finished range holds there. */
enum { OM_WARM_UNMAPPED = 0, OM_WARM_ZERO, OM_WARM_PRIVATE, OM_WARM_SHARED };

struct om_warm {
    om_warm *prev, *next; /* by finish: head = oldest */
    ortmem_region *region;
    bool *zero_mapped;
    uint8_t *kind; /* OM_WARM_* per granule */
    size_t granules;
    uint64_t capacity;
    uint64_t committed;     /* private bytes mapped */
    om_prefix *prefix;      /* the entry its shared granules map (a reference), or NULL */
    uint64_t source_id;     /* fork: the parent region's id; 0 none */
    uint64_t source_tokens; /* tokens of the prefix or parent it shares */
    uint64_t finished;      /* finish order */
};

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
static void om_warm_unlink(ortmem_kv_cache *c, om_warm *w)
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
static void om_warm_link_tail(ortmem_kv_cache *c, om_warm *w)
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
static ortmem_status om_warm_release(ortmem_kv_cache *c, om_warm *w, bool no_pool)
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
static ortmem_status om_warm_release_list(ortmem_kv_cache *c, om_warm *gone)
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

/* ---- prewarm ---- */

/* One range of the kind asked for (prompt set: a prefix start; parent set: a
 * fork; neither: plain), grown cold to `tokens` and finished onto *made. */
static ortmem_status om_prewarm_one(ortmem_kv_cache *c, const int32_t *prompt, size_t prompt_tokens,
                                    ortmem_kv_seq *parent, uint64_t tokens, om_warm **made)
{
    ortmem_kv_seq *s = NULL;
    uint64_t reused = 0;
    ortmem_status st;
    if (parent) {
        st = om_seq_pin(parent, "kv prewarm forks");
        if (st == ORTMEM_OK) {
            st = parent->host
                     ? OM_ERR(ORTMEM_E_STATE, "kv prewarm forks: the parent is swapped out")
                     : om_seq_fork_locked(parent, &s, false);
            om_seq_unpin(parent);
        }
    } else {
        st = om_seq_create_prompt(c, prompt, prompt_tokens, &s, &reused, false);
    }
    if (st != ORTMEM_OK)
        return st;
    if (prompt && reused == 0)
        st = OM_ERR(ORTMEM_E_NOT_FOUND,
                    "kv prewarm: the prompt (%zu tokens) has no published prefix entry (evicted?)",
                    prompt_tokens);
    if (st == ORTMEM_OK && tokens > s->length)
        st = ortmem_kv_seq_append(s, tokens - s->length);
    om_error_saved failure;
    om_error_save(&failure);
    bool kept = false;
    ortmem_status dst = om_seq_destroy_keep(s, made, &kept);
    if (st != ORTMEM_OK)
        return om_error_restore(&failure, st);
    if (dst != ORTMEM_OK)
        return dst;
    if (!kept)
        return OM_ERR(ORTMEM_E_STATE,
                      "kv prewarm: a range of %llu tokens could not be kept warm (a granule "
                      "quarantined or its bookkeeping refused)",
                      (unsigned long long)tokens);
    return ORTMEM_OK;
}

static uint64_t om_warm_available(ortmem_kv_cache *c)
{
    ortmem_authority_report ar = {.struct_size = sizeof ar};
    if (ortmem_authority_report_get(c->authority, &ar, NULL, 0) != ORTMEM_OK) {
        om_error_clear();
        return 0;
    }
    return ar.available_bytes;
}

/* Refuses when `count` ranges of `each` private bytes do not fit the list's
 * bounds or, less the `built` of them made already (owned now), the budget's
 * available bytes. */
static ortmem_status om_prewarm_fits(ortmem_kv_cache *c, const char *what, uint64_t count,
                                     uint64_t each, uint64_t tokens, uint64_t built)
{
    pthread_mutex_lock(&c->lock);
    uint64_t ranges = c->warm_count, bytes = c->warm_bytes;
    pthread_mutex_unlock(&c->lock);
    uint64_t need = count && each > UINT64_MAX / count ? UINT64_MAX : count * each;
    uint64_t to_own = need - built * each;
    if (ranges + count > c->warm_max_ranges)
        return OM_ERR(ORTMEM_E_RANGE,
                      "%s: %llu more ranges and the %llu on the warm list exceed warm_max_ranges "
                      "%llu",
                      what, (unsigned long long)count, (unsigned long long)ranges,
                      (unsigned long long)c->warm_max_ranges);
    if (c->warm_max_bytes != ORTMEM_KV_WARM_UNLIMITED &&
        (need > c->warm_max_bytes || bytes > c->warm_max_bytes - need))
        return OM_ERR(ORTMEM_E_RANGE,
                      "%s: %llu ranges of %llu bytes (%llu tokens) and the %llu bytes on the "
                      "warm list exceed warm_max_bytes %llu",
                      what, (unsigned long long)count, (unsigned long long)each,
                      (unsigned long long)tokens, (unsigned long long)bytes,
                      (unsigned long long)c->warm_max_bytes);
    uint64_t available = om_warm_available(c);
    if (to_own > available)
        return OM_ERR(ORTMEM_E_BUDGET,
                      "%s: %llu ranges of %llu bytes (%llu tokens) need %llu bytes more, the "
                      "budget has %llu available",
                      what, (unsigned long long)count - built, (unsigned long long)each,
                      (unsigned long long)tokens, (unsigned long long)to_own,
                      (unsigned long long)available);
    return ORTMEM_OK;
}

/* Releases a prewarm's ranges straight to the backend (its refusal). */
static void om_prewarm_undo(ortmem_kv_cache *c, om_warm *made)
{
    while (made) {
        om_warm *next = made->next;
        (void)om_warm_release(c, made, true);
        made = next;
    }
    om_error_clear();
}

static ortmem_status om_prewarm(ortmem_kv_cache *c, const int32_t *prompt, size_t prompt_tokens,
                                ortmem_kv_seq *parent, uint32_t count, uint64_t tokens,
                                const char *what)
{
    if (!c->warm_holder || c->strategy != ORTMEM_KV_STABLE)
        return OM_ERR(ORTMEM_E_STATE, "%s: the cache keeps no warm ranges (%s)", what,
                      c->strategy != ORTMEM_KV_STABLE ? "not the stable strategy"
                                                      : "warm_max_bytes is 0");
    if (tokens > c->max_context)
        return OM_ERR(ORTMEM_E_RANGE, "%s: %llu tokens is above max_context %llu", what,
                      (unsigned long long)tokens, (unsigned long long)c->max_context);
    if (count == 0)
        return ORTMEM_OK;
    if (prompt) {
        om_prefix *p = c->prefix_cache ? om_prefix_find(c, prompt, prompt_tokens) : NULL;
        if (!p)
            return OM_ERR(ORTMEM_E_NOT_FOUND,
                          "%s: the prompt (%zu tokens) has no published prefix entry%s", what,
                          prompt_tokens, c->prefix_cache ? "" : " (the cache keeps no prefixes)");
        om_prefix_unref(c, p);
    }
    /* A plain range commits what the growth model says for one append of
     * `tokens`: refused before any call. A fork or prefix range shares some
     * and lays its own growth: the first one built is measured. */
    uint64_t each = 0;
    ortmem_status st = ORTMEM_OK;
    if (!prompt && !parent && tokens) {
        ortmem_kv_growth_cost cost = {.struct_size = sizeof cost};
        st = ortmem_kv_growth_evaluate(&c->geometry, &c->extents, c->max_context, tokens, tokens,
                                       tokens, &cost);
        if (st != ORTMEM_OK)
            return om_error_wrap(st, "%s: the growth model", what);
        each = cost.committed_bytes;
    }
    st = om_prewarm_fits(c, what, count, each, tokens, 0);
    om_warm *made = NULL;
    for (uint32_t i = 0; st == ORTMEM_OK && i < count; i++) {
        st = om_prewarm_one(c, prompt, prompt_tokens, parent, tokens, &made);
        if (st == ORTMEM_OK && i == 0 && count > 1) {
            /* The rest are built the same way: each as the first. */
            uint64_t built = made->committed;
            if (built > each)
                st = om_prewarm_fits(c, what, count, built, tokens, 1);
        }
    }
    if (st != ORTMEM_OK) {
        om_error_saved failure;
        om_error_save(&failure);
        om_prewarm_undo(c, made);
        return om_error_restore(&failure, st);
    }
    /* Onto the list in build order, newest last; the bounds are checked
     * again (a concurrent finish may have filled the list): the oldest go. */
    om_warm *first = NULL;
    while (made) { /* made is newest first: reverse it */
        om_warm *next = made->next;
        made->next = first;
        first = made;
        made = next;
    }
    om_warm *evict = NULL;
    pthread_mutex_lock(&c->lock);
    for (om_warm *w = first, *next; w; w = next) {
        next = w->next;
        om_warm_link_tail(c, w);
        c->warm_prewarmed++;
    }
    while (c->warm_head &&
           (c->warm_count > c->warm_max_ranges || c->warm_bytes > c->warm_max_bytes)) {
        om_warm *old = c->warm_head;
        om_warm_unlink(c, old);
        old->next = evict;
        evict = old;
    }
    pthread_mutex_unlock(&c->lock);
    return om_warm_release_list(c, evict);
}

ortmem_status ortmem_kv_cache_prewarm(ortmem_kv_cache *c, uint32_t count, uint64_t tokens)
{
    om_error_clear();
    ortmem_status st = om_handle_pin(c, OM_KIND_KV_CACHE, "kv prewarm");
    if (st != ORTMEM_OK)
        return st;
    st = om_prewarm(c, NULL, 0, NULL, count, tokens, "kv prewarm");
    om_handle_unpin(&c->hdr);
    return st;
}

ortmem_status ortmem_kv_cache_prewarm_prompt(ortmem_kv_cache *c, const int32_t *prompt,
                                             size_t prompt_tokens, uint32_t count, uint64_t tokens)
{
    om_error_clear();
    if (!prompt || !prompt_tokens)
        return OM_ERR(ORTMEM_E_INVALID, "kv prewarm prompt: prompt NULL or empty");
    ortmem_status st = om_handle_pin(c, OM_KIND_KV_CACHE, "kv prewarm prompt");
    if (st != ORTMEM_OK)
        return st;
    st = om_prewarm(c, prompt, prompt_tokens, NULL, count, tokens, "kv prewarm prompt");
    om_handle_unpin(&c->hdr);
    return st;
}

ortmem_status ortmem_kv_seq_prewarm_forks(ortmem_kv_seq *parent, uint32_t count, uint64_t tokens)
{
    om_error_clear();
    ortmem_status st = om_handle_pin(parent, OM_KIND_KV_SEQ, "kv prewarm forks");
    if (st != ORTMEM_OK)
        return st;
    ortmem_kv_cache *c = parent->cache;
    st = om_prewarm(c, NULL, 0, parent, count, tokens, "kv prewarm forks");
    om_handle_unpin(&parent->hdr);
    return st;
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
