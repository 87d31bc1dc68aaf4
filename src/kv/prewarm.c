/* Prewarm: ranges of one kind built up front, each as a cold sequence grown
 * to a stated length and finished, checked against the warm list's bounds
 * and the budget first, and linked all at once (or none). */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "kv/kv.h"
#include "kv/warm.h"

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
