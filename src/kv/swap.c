/* Swap: a sequence's live bytes move to a host tier (a region on the host
 * backend) and its device granules are decommitted; swap-in commits and copies
 * them back byte for byte. The device VA stays reserved, so a stable
 * sequence's pointers are the same after swap-in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "kv/kv.h"

/* Copies every fragment's first `tokens` tokens between the two regions'
 * same offsets on the cache's stream (the device backend reaches host
 * memory) and returns once they completed, failed or not: nothing may be
 * decommitted while a copy still reads or writes it. */
static ortmem_status om_copy_live(ortmem_kv_cache *c, ortmem_kv_seq *s, ortmem_region *to,
                                  ortmem_region *from)
{
    uint8_t *dst = ortmem_region_base(to), *src = ortmem_region_base(from);
    ortmem_status st = ORTMEM_OK;
    bool enqueued = false;
    for (uint64_t f = 0; st == ORTMEM_OK && f < c->fragments; f++) {
        uint64_t off, len;
        st = om_kv_fragment(c, s->capacity, f, &off, &len);
        if (st == ORTMEM_OK && s->length)
            st = ortmem_backend_copy_async(c->backend, dst + off, src + off, s->length * c->contig,
                                           c->stream);
        enqueued = enqueued || (st == ORTMEM_OK && s->length);
    }
    if (enqueued) {
        ortmem_status wait = om_kv_stream_wait(c->backend, c->stream);
        st = st == ORTMEM_OK ? wait : st;
    }
    return st;
}

/* The live ranges of s (stable) or the whole bucket, in exact extents: a
 * stable sequence's device extents of at most the policy's cap (so committed
 * - live stays under a granule per fragment), the host tier's and a bucket's
 * one per run. */
static ortmem_status om_commit_live(ortmem_kv_cache *c, ortmem_kv_seq *s, ortmem_region *r)
{
    if (c->strategy == ORTMEM_KV_BUCKET) {
        ortmem_range whole = {0, ortmem_region_size(r)};
        return om_kv_commit_exact(r, &whole, 1, 0);
    }
    ortmem_range *ranges = om_calloc(c->fragments, sizeof *ranges);
    if (!ranges)
        return OM_ERR(ORTMEM_E_NOMEM, "kv swap: ranges");
    ortmem_status st = om_kv_token_ranges(c, s->capacity, 0, s->length, ranges);
    if (st == ORTMEM_OK)
        st = om_kv_commit_exact(r, ranges, c->fragments,
                                r == s->region ? om_kv_extent_cap_bytes(c) : 0);
    om_free(ranges);
    return st;
}

ortmem_status ortmem_kv_seq_swap_out(ortmem_kv_seq *s)
{
    om_error_clear();
    ortmem_status st = om_seq_pin(s, "kv swap out");
    if (st != ORTMEM_OK)
        return st;
    ortmem_kv_cache *c = s->cache;
    ortmem_region *host = NULL;
    if (!c->host_backend)
        st = OM_ERR(ORTMEM_E_UNSUPPORTED, "kv swap out: the cache has no host tier");
    else if (s->host)
        st = OM_ERR(ORTMEM_E_STATE, "kv swap out: the sequence is swapped out already");
    else if (!s->region || !s->length)
        st = OM_ERR(ORTMEM_E_STATE, "kv swap out: the sequence holds no tokens");
    if (st == ORTMEM_OK) {
        ortmem_region_options ro = ORTMEM_REGION_OPTIONS_INIT;
        ro.size = ortmem_region_size(s->region);
        st = ortmem_region_create(c->host_backend, &ro, &host);
    }
    if (st == ORTMEM_OK)
        st = om_commit_live(c, s, host);
    if (st == ORTMEM_OK)
        st = om_copy_live(c, s, host, s->region);
    /* Decommit every device granule; the VA stays. */
    if (st == ORTMEM_OK)
        st = ortmem_region_decommit(s->region, 0, ortmem_region_size(s->region));
    if (st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED) {
        memset(s->zero_mapped, 0, s->granules * sizeof *s->zero_mapped);
        s->host = host;
        s->shared_upto = 0;
        if (s->prefix)
            om_prefix_unref(c, s->prefix);
        s->prefix = NULL;
        pthread_mutex_lock(&c->lock);
        c->swaps_out++;
        pthread_mutex_unlock(&c->lock);
    } else if (host) {
        om_error_saved failure, destroy;
        om_error_save(&failure);
        if (ortmem_region_destroy(host) != ORTMEM_OK) {
            om_error_save(&destroy); /* the detail is formatted over itself otherwise */
            st = ortmem_error_set(st,
                                  "kv swap out: the sequence is unchanged, but destroying the "
                                  "host-tier region quarantined (%s): %s",
                                  destroy.detail, failure.detail);
        } else {
            st = ortmem_error_set(st, "kv swap out: nothing changed: %s", failure.detail);
        }
    }
    om_seq_unpin(s);
    return st;
}

ortmem_status ortmem_kv_seq_swap_in(ortmem_kv_seq *s)
{
    om_error_clear();
    ortmem_status st = om_seq_pin(s, "kv swap in");
    if (st != ORTMEM_OK)
        return st;
    ortmem_kv_cache *c = s->cache;
    if (!s->host)
        st = OM_ERR(ORTMEM_E_STATE, "kv swap in: the sequence is not swapped out");
    if (st == ORTMEM_OK)
        st = om_commit_live(c, s, s->region);
    if (st == ORTMEM_OK)
        st = om_copy_live(c, s, s->region, s->host);
    if (st == ORTMEM_OK)
        st = om_kv_zero_fill(c, s);
    if (st != ORTMEM_OK && st != ORTMEM_E_STATE) {
        /* Back to swapped out: the device granules go again. */
        om_error_saved failure;
        om_error_save(&failure);
        ortmem_status dst = ortmem_region_decommit(s->region, 0, ortmem_region_size(s->region));
        if (dst == ORTMEM_OK || dst == ORTMEM_E_QUARANTINED)
            memset(s->zero_mapped, 0, s->granules * sizeof *s->zero_mapped);
        st = om_error_restore(&failure, st);
    }
    if (st == ORTMEM_OK) {
        st = ortmem_region_destroy(s->host);
        if (st != ORTMEM_OK) /* the region is gone either way */
            st = om_error_wrap(st, "kv swap in took effect, but destroying the host-tier region "
                                   "did not finish cleanly");
        s->host = NULL;
        pthread_mutex_lock(&c->lock);
        c->swaps_in++;
        pthread_mutex_unlock(&c->lock);
    } else if (st != ORTMEM_E_STATE) {
        st = om_error_wrap(st, "kv swap in: the sequence stays swapped out");
    }
    om_seq_unpin(s);
    return st;
}
