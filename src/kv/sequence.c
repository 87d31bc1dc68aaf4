/* Sequences: create, append, truncate, fork, destroy, bindings. A stable
 * sequence reserves the full context as VA and commits the extents its
 * tokens land in (growth.c); a bucket sequence holds a whole power-of-two
 * bucket and moves to the next one, copying its live prefix, when it
 * outgrows it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "kv/kv.h"

ortmem_status om_seq_pin(ortmem_kv_seq *s, const char *what)
{
    ortmem_status st = om_handle_pin(s, OM_KIND_KV_SEQ, what);
    if (st == ORTMEM_OK)
        pthread_mutex_lock(&s->lock);
    return st;
}

void om_seq_unpin(ortmem_kv_seq *s)
{
    pthread_mutex_unlock(&s->lock);
    om_handle_unpin(&s->hdr);
}

/* Gives s a region laid out for cap tokens (no zero tail yet). */
ortmem_status om_seq_attach(ortmem_kv_cache *c, ortmem_kv_seq *s, uint64_t cap)
{
    ortmem_region *r = NULL;
    ortmem_status st = om_kv_region_create(c, cap, &c->account, &r);
    if (st != ORTMEM_OK)
        return st;
    size_t granules = ortmem_region_size(r) / c->geometry.granule;
    bool *zero = om_calloc(granules ? granules : 1, sizeof *zero);
    if (!zero) {
        (void)ortmem_region_destroy(r);
        return OM_ERR(ORTMEM_E_NOMEM, "kv sequence: bookkeeping for %zu granules", granules);
    }
    om_free(s->zero_mapped);
    s->zero_mapped = zero;
    s->granules = granules;
    s->region = r;
    s->capacity = cap;
    return ORTMEM_OK;
}

/* ORTMEM_E_QUARANTINED when a region's granules were quarantined (the
 * sequence is gone either way). */
static ortmem_status om_seq_free(ortmem_kv_seq *s)
{
    ortmem_status st = ORTMEM_OK, rst;
    if (s->region && (rst = ortmem_region_destroy(s->region)) != ORTMEM_OK)
        st = rst;
    if (s->host && (rst = ortmem_region_destroy(s->host)) != ORTMEM_OK && st == ORTMEM_OK)
        st = rst;
    om_free(s->zero_mapped);
    pthread_mutex_destroy(&s->lock);
    om_free(s);
    return st;
}

static void om_seq_unlink(ortmem_kv_cache *c, ortmem_kv_seq *s)
{
    pthread_mutex_lock(&c->lock);
    if (s->prev)
        s->prev->next = s->next;
    else
        c->seqs = s->next;
    if (s->next)
        s->next->prev = s->prev;
    c->seq_count--;
    pthread_mutex_unlock(&c->lock);
}

/* A new, empty, listed sequence; stable ones get their region: a warm range
 * of the kind asked for (prefix, fork parent or neither; *warm says so) or,
 * without one or when take is false (a prewarm builds new ranges), a cold
 * one. */
static ortmem_status om_seq_new(ortmem_kv_cache *c, ortmem_kv_seq **out, om_prefix *prefix,
                                ortmem_kv_seq *parent, uint64_t need_bytes, bool take, bool *warm)
{
    *warm = false;
    ortmem_kv_seq *s = om_calloc(1, sizeof *s);
    if (!s)
        return OM_ERR(ORTMEM_E_NOMEM, "kv sequence create: bookkeeping");
    s->cache = c;
    pthread_mutex_init(&s->lock, NULL);
    ortmem_status st = ORTMEM_OK;
    /* A create the sequence limit will refuse leaves the warm ranges be. */
    pthread_mutex_lock(&c->lock);
    bool full = c->max_sequences && c->seq_count >= c->max_sequences;
    pthread_mutex_unlock(&c->lock);
    if (c->strategy == ORTMEM_KV_STABLE && !full && take)
        st = om_warm_take(c, s, prefix, parent, need_bytes, warm);
    if (st == ORTMEM_OK && c->strategy == ORTMEM_KV_STABLE && !*warm)
        st = om_seq_attach(c, s, c->max_context);
    if (st == ORTMEM_OK)
        st = om_handle_register(&s->hdr, OM_KIND_KV_SEQ);
    if (st != ORTMEM_OK) {
        (void)om_seq_free(s);
        return st;
    }
    pthread_mutex_lock(&c->lock);
    if (c->max_sequences && c->seq_count >= c->max_sequences) {
        st = OM_ERR(ORTMEM_E_BUSY, "kv sequence create: %llu sequences live, the most allowed",
                    (unsigned long long)c->seq_count);
    } else {
        s->next = c->seqs;
        if (c->seqs)
            c->seqs->prev = s;
        c->seqs = s;
        c->seq_count++;
    }
    pthread_mutex_unlock(&c->lock);
    if (st != ORTMEM_OK) {
        (void)om_handle_pin(s, OM_KIND_KV_SEQ, "kv sequence create");
        (void)om_handle_retire(&s->hdr, "kv sequence create");
        (void)om_seq_free(s);
        om_handle_end_destroy();
        return st;
    }
    *out = s;
    return ORTMEM_OK;
}

/* Undoes om_seq_new for a sequence nobody has seen yet. */
static void om_seq_discard(ortmem_kv_cache *c, ortmem_kv_seq *s)
{
    om_seq_unlink(c, s);
    if (s->prefix)
        om_prefix_unref(c, s->prefix);
    (void)om_handle_pin(s, OM_KIND_KV_SEQ, "kv sequence");
    (void)om_handle_retire(&s->hdr, "kv sequence");
    (void)om_seq_free(s);
    om_handle_end_destroy();
}

ortmem_status om_seq_create_prompt(ortmem_kv_cache *c, const int32_t *tokens, size_t count,
                                   ortmem_kv_seq **out, uint64_t *reused_tokens, bool take)
{
    om_error_clear();
    if (!out || (count && !tokens))
        return OM_ERR(ORTMEM_E_INVALID, "kv sequence create: out NULL or tokens NULL");
    ortmem_status st = om_handle_pin(c, OM_KIND_KV_CACHE, "kv sequence create");
    if (st != ORTMEM_OK)
        return st;
    ortmem_kv_seq *s = NULL;
    uint64_t reused = 0;
    om_prefix *p = c->prefix_cache && count ? om_prefix_find(c, tokens, count) : NULL;
    /* A warm range fits best when it holds the prompt's bytes already; a
     * create without a prompt does not know its length: the largest. */
    uint64_t need = tokens ? count * c->bytes_per_token : UINT64_MAX;
    bool warm = false;
    st = om_seq_new(c, &s, p, NULL, need, take, &warm);
    if (st != ORTMEM_OK && p) {
        om_prefix_unref(c, p);
        p = NULL;
    }
    if (p) {
        uint64_t shared = 0;
        /* A warm range of this prefix maps its granules already. */
        st = warm ? ORTMEM_OK
                  : om_kv_share_prefix(c, s->region, p->region, c->max_context, p->count, false,
                                       &shared);
        if (st == ORTMEM_OK) {
            s->prefix = p;
            s->length = s->shared_upto = s->source_tokens = reused = p->count;
            s->written = s->written > reused ? s->written : reused;
            /* A prewarm's sequence is no request: the take counts. */
            pthread_mutex_lock(&c->lock);
            c->prefix_hits += take;
            c->prefix_tokens += take ? p->count : 0;
            c->prefix_saved += take ? (warm ? p->granules : shared) * c->geometry.granule : 0;
            pthread_mutex_unlock(&c->lock);
        } else {
            om_prefix_unref(c, p);
        }
    }
    if (st == ORTMEM_OK)
        st = om_kv_zero_fill(c, s); /* a warm range's tail is mapped: no call */
    if (st != ORTMEM_OK && s) {
        om_error_saved failure;
        om_error_save(&failure);
        om_seq_discard(c, s);
        st = om_error_restore(&failure, st);
    }
    if (st == ORTMEM_OK) {
        *out = s;
        if (reused_tokens)
            *reused_tokens = reused;
    }
    om_handle_unpin(&c->hdr);
    return st;
}

ortmem_status ortmem_kv_seq_create_with_prompt(ortmem_kv_cache *c, const int32_t *tokens,
                                               size_t count, ortmem_kv_seq **out,
                                               uint64_t *reused_tokens)
{
    return om_seq_create_prompt(c, tokens, count, out, reused_tokens, true);
}

ortmem_status ortmem_kv_seq_create(ortmem_kv_cache *c, ortmem_kv_seq **out)
{
    return ortmem_kv_seq_create_with_prompt(c, NULL, 0, out, NULL);
}

ortmem_status ortmem_kv_seq_destroy(ortmem_kv_seq *s)
{
    return om_seq_destroy_keep(s, NULL, NULL);
}

ortmem_status om_seq_destroy_keep(ortmem_kv_seq *s, om_warm **keep, bool *kept)
{
    om_error_clear();
    ortmem_status st = om_handle_pin(s, OM_KIND_KV_SEQ, "kv sequence destroy");
    if (st != ORTMEM_OK)
        return st;
    st = om_handle_retire(&s->hdr, "kv sequence destroy");
    if (st != ORTMEM_OK) {
        om_handle_unpin(&s->hdr);
        return st;
    }
    ortmem_kv_cache *c = s->cache;
    om_seq_unlink(c, s);
    /* Warm forks of it can never be taken again; a range kept warm (with its
     * prefix reference) is the list's now. */
    ortmem_status forgot = om_warm_forget_source(c, s->region), evicted = ORTMEM_OK;
    om_error_saved warm_failure = {""};
    if (forgot != ORTMEM_OK)
        om_error_save(&warm_failure);
    bool was_kept = om_warm_finish(c, s, &evicted, keep);
    if (kept)
        *kept = was_kept;
    if (evicted != ORTMEM_OK)
        om_error_save(&warm_failure);
    if (s->prefix)
        om_prefix_unref(c, s->prefix);
    st = om_seq_free(s);
    om_handle_end_destroy();
    if (st == ORTMEM_OK && warm_failure.detail[0])
        st = ortmem_error_set(ORTMEM_E_QUARANTINED, "kv sequence destroy: %s", warm_failure.detail);
    return st;
}

ortmem_status ortmem_kv_seq_append(ortmem_kv_seq *s, uint64_t tokens)
{
    om_error_clear();
    ortmem_status st = om_seq_pin(s, "kv append");
    if (st != ORTMEM_OK)
        return st;
    ortmem_kv_cache *c = s->cache;
    uint64_t to = s->length + tokens;
    if (s->host)
        st = OM_ERR(ORTMEM_E_STATE, "kv append: the sequence is swapped out");
    else if (to < s->length || to > c->max_context)
        st = OM_ERR(ORTMEM_E_RANGE,
                    "kv append: %llu + %llu tokens exceed the maximum context of %llu",
                    (unsigned long long)s->length, (unsigned long long)tokens,
                    (unsigned long long)c->max_context);
    else if (tokens && c->strategy == ORTMEM_KV_STABLE)
        st = om_kv_append_stable(c, s, to);
    else if (tokens && (!s->region || to > s->capacity))
        st = om_kv_grow_bucket(c, s, to);
    else if (tokens && s->length < s->shared_upto)
        st = om_kv_append_stable(c, s, to); /* rewound into a fork's shared granules: copy them */
    if (st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED) {
        s->length = to;
        s->written = s->written > to ? s->written : to;
    } else if (st != ORTMEM_E_STATE && st != ORTMEM_E_RANGE)
        st = om_error_wrap(st, "kv append of %llu tokens to %llu: the sequence is unchanged",
                           (unsigned long long)tokens, (unsigned long long)s->length);
    om_seq_unpin(s);
    return st;
}

ortmem_status ortmem_kv_seq_truncate(ortmem_kv_seq *s, uint64_t length)
{
    om_error_clear();
    ortmem_status st = om_seq_pin(s, "kv truncate");
    if (st != ORTMEM_OK)
        return st;
    ortmem_kv_cache *c = s->cache;
    if (s->host)
        st = OM_ERR(ORTMEM_E_STATE, "kv truncate: the sequence is swapped out");
    else if (length > s->length)
        st = OM_ERR(ORTMEM_E_RANGE, "kv truncate: to %llu tokens of %llu",
                    (unsigned long long)length, (unsigned long long)s->length);
    /* Warm forks of s at its old length can never be taken again. */
    if (st == ORTMEM_OK && c->strategy == ORTMEM_KV_STABLE && length < s->length &&
        om_warm_forget_source(c, s->region) != ORTMEM_OK)
        om_error_clear(); /* a quarantine on the way shows in the ledger */
    if (st == ORTMEM_OK && c->strategy == ORTMEM_KV_STABLE && length < s->length) {
        /* Every granule that holds no live byte at the new length. A range
         * per fragment would miss the granules a fragment shares with its
         * neighbour or with the padding up to the next binding base. */
        uint64_t g = c->geometry.granule;
        ortmem_range *ranges = om_calloc(s->granules ? s->granules : 1, sizeof *ranges);
        uint64_t *live = om_calloc(s->granules ? s->granules : 1, sizeof *live);
        st = ranges && live
                 ? om_kv_live_bytes_per_granule(c, s->capacity, length, live, s->granules)
                 : OM_ERR(ORTMEM_E_NOMEM, "kv truncate: bookkeeping");
        size_t n = 0;
        for (size_t k = 0; st == ORTMEM_OK && k < s->granules; k++) {
            if (live[k] || s->zero_mapped[k])
                continue;
            if (n && ranges[n - 1].offset + ranges[n - 1].length == k * g)
                ranges[n - 1].length += g;
            else
                ranges[n++] = (ortmem_range){k * g, g};
        }
        om_free(live);
        if (st == ORTMEM_OK && n)
            st = ortmem_region_decommit_ranges(s->region, ranges, n);
        if (st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED) {
            for (size_t k = 0; k < s->granules; k++) {
                ortmem_granule_info info = {.struct_size = sizeof info};
                if (ortmem_region_granule_info(s->region, k * c->geometry.granule, &info) ==
                        ORTMEM_OK &&
                    info.state == ORTMEM_GRANULE_UNMAPPED)
                    s->zero_mapped[k] = false;
            }
            /* The granules are gone: the truncate took effect whatever the
             * zero tail does. A tail left unmapped is mapped again by the
             * next append or truncate. */
            s->length = length;
            ortmem_status zst = om_kv_zero_fill(c, s);
            if (zst != ORTMEM_OK && st == ORTMEM_OK)
                st = om_error_wrap(zst,
                                   "kv truncate to %llu tokens took effect, but the zero tail "
                                   "is not mapped over every freed granule",
                                   (unsigned long long)length);
        }
        om_free(ranges);
    } else if (st == ORTMEM_OK && length == s->length && s->tail_missing)
        (void)om_kv_zero_fill(c, s); /* a tail an earlier failure left unmapped; retried later */
    if (st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED)
        s->length = length;
    om_seq_unpin(s);
    return st;
}

ortmem_status ortmem_kv_seq_fork(ortmem_kv_seq *s, ortmem_kv_seq **child)
{
    om_error_clear();
    if (!child)
        return OM_ERR(ORTMEM_E_INVALID, "kv fork: child output is NULL");
    ortmem_status st = om_seq_pin(s, "kv fork");
    if (st != ORTMEM_OK)
        return st;
    st = om_seq_fork_locked(s, child, true);
    om_seq_unpin(s);
    return st;
}

ortmem_status om_seq_fork_locked(ortmem_kv_seq *s, ortmem_kv_seq **child, bool take)
{
    ortmem_kv_cache *c = s->cache;
    ortmem_status st = ORTMEM_OK;
    ortmem_kv_seq *k = NULL;
    if (s->host)
        st = OM_ERR(ORTMEM_E_STATE, "kv fork: the sequence is swapped out");
    bool warm = false;
    if (st == ORTMEM_OK)
        st = om_seq_new(c, &k, NULL, s, UINT64_MAX, take, &warm);
    if (st == ORTMEM_OK && c->strategy == ORTMEM_KV_BUCKET && s->region)
        st = om_seq_attach(c, k, s->capacity);
    /* A warm range of this parent maps its extents and has its copies. */
    if (st == ORTMEM_OK && s->region && s->length && !warm) {
        uint64_t shared = 0;
        st = om_kv_share_prefix(c, k->region, s->region, s->capacity, s->length, true, &shared);
    }
    if (st == ORTMEM_OK && c->strategy == ORTMEM_KV_STABLE && s->region && s->length) {
        ortmem_range_state rs = {.struct_size = sizeof rs};
        st = ortmem_region_range_state(s->region, 0, c->geometry.granule, &rs);
        k->source_id = rs.region_id;
        k->source_tokens = s->length;
    }
    /* A bucket is committed whole: the rest of the region, in exact extents. */
    if (st == ORTMEM_OK && c->strategy == ORTMEM_KV_BUCKET && k->region) {
        ortmem_range whole = {0, ortmem_region_size(k->region)};
        st = om_kv_commit_exact(k->region, &whole, 1, 0);
    }
    if (st == ORTMEM_OK)
        st = om_kv_zero_fill(c, k);
    if (st != ORTMEM_OK && k) {
        om_error_saved failure;
        om_error_save(&failure);
        om_seq_discard(c, k);
        st = ortmem_error_set(st, "kv fork: %s", failure.detail);
    }
    if (st == ORTMEM_OK) {
        k->length = k->shared_upto = s->length;
        k->written = k->written > s->length ? k->written : s->length;
        if (s->length > s->shared_upto)
            s->shared_upto = s->length; /* the parent's granules are shared now too */
        *child = k;
    }
    return st;
}

ortmem_status ortmem_kv_seq_length(ortmem_kv_seq *s, uint64_t *length)
{
    om_error_clear();
    if (!length)
        return OM_ERR(ORTMEM_E_INVALID, "kv length: output is NULL");
    ortmem_status st = om_seq_pin(s, "kv length");
    if (st != ORTMEM_OK)
        return st;
    *length = s->length;
    om_seq_unpin(s);
    return ORTMEM_OK;
}

ortmem_status ortmem_kv_seq_binding(ortmem_kv_seq *s, uint32_t layer, int value,
                                    ortmem_kv_binding *binding)
{
    om_error_clear();
    ortmem_status st = OM_STRUCT_CHECK("kv binding", "binding", binding);
    if (st != ORTMEM_OK)
        return st;
    st = om_seq_pin(s, "kv binding");
    if (st != ORTMEM_OK)
        return st;
    ortmem_kv_cache *c = s->cache;
    const ortmem_kv_geometry *g = &c->geometry;
    if (layer >= g->layers || (value != 0 && value != 1)) {
        st =
            OM_ERR(ORTMEM_E_RANGE, "kv binding: layer %u of %u, value %d", layer, g->layers, value);
        om_seq_unpin(s);
        return st;
    }
    uint64_t b = 2ULL * layer + (uint64_t)value;
    uint64_t head_bytes = c->contig;
    if (g->layout == ORTMEM_KV_SEQ_MAJOR)
        head_bytes = c->contig / g->kv_heads;
    else if (g->layout == ORTMEM_KV_TOKEN_MAJOR)
        head_bytes = c->contig / (2ULL * g->layers * g->kv_heads);
    ortmem_kv_binding out = {sizeof out, NULL, 0, 0, s->capacity, s->generation};
    uint64_t offset = 0, len = 0;
    switch (g->layout) {
    case ORTMEM_KV_HEAD_MAJOR:
        st = om_kv_fragment(c, s->capacity, b * g->kv_heads, &offset, &len);
        out.token_stride = head_bytes;
        out.head_stride = s->capacity * head_bytes;
        break;
    case ORTMEM_KV_SEQ_MAJOR:
        st = om_kv_fragment(c, s->capacity, b, &offset, &len);
        out.token_stride = c->contig;
        out.head_stride = head_bytes;
        break;
    default:
        offset = b * g->kv_heads * head_bytes;
        out.token_stride = c->bytes_per_token;
        out.head_stride = head_bytes;
        break;
    }
    if (st == ORTMEM_OK && s->region && !s->host)
        out.base = (uint8_t *)ortmem_region_base(s->region) + offset;
    if (st == ORTMEM_OK) {
        out.struct_size = binding->struct_size;
        memcpy(binding, &out, binding->struct_size);
    }
    om_seq_unpin(s);
    return st;
}
