/* Growth grants: prepare takes a hold, charge charges what was really used,
 * abort rolls back. Also the all-or-nothing prepare over several holders. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "governance/holder.h"

ortmem_status om_grant_new(ortmem_holder *h, uint64_t bytes, ortmem_grant **out)
{
    ortmem_grant *g = om_calloc(1, sizeof *g);
    if (!g)
        return OM_ERR(ORTMEM_E_NOMEM, "grant: bookkeeping");
    g->holder = h;
    g->bytes = bytes;
    ortmem_status st = om_handle_register(&g->hdr, OM_KIND_GRANT);
    if (st != ORTMEM_OK) {
        om_free(g);
        return st;
    }
    h->grants_open++;
    *out = g;
    return ORTMEM_OK;
}

/* Ends a grant handle; caller holds its pin (and not the authority lock). */
static void om_grant_end(ortmem_grant *g)
{
    ortmem_authority *a = g->holder->authority;
    pthread_mutex_lock(&a->lock);
    g->holder->grants_open--;
    pthread_mutex_unlock(&a->lock);
    (void)om_handle_retire(&g->hdr, "grant end");
    om_free(g);
    om_handle_end_destroy();
}

ortmem_status ortmem_grant_prepare(ortmem_holder *h, uint64_t bytes, ortmem_grant **out)
{
    om_error_clear();
    if (!out || bytes == 0)
        return OM_ERR(ORTMEM_E_INVALID, "grant prepare: out is NULL or bytes is 0");
    ortmem_status st = om_holder_pin(h, "grant prepare");
    if (st != ORTMEM_OK)
        return st;
    ortmem_authority *a = h->authority;
    /* Grants cover memory the engine maps itself: owned and mapped alike. */
    st = om_take_hold(a, h, bytes, bytes, true, "grant prepare");
    if (st == ORTMEM_OK) {
        pthread_mutex_lock(&a->lock);
        st = om_grant_new(h, bytes, out);
        if (st != ORTMEM_OK)
            om_unhold_locked(a, h, bytes, bytes);
        pthread_mutex_unlock(&a->lock);
    }
    om_holder_unpin(h);
    return st;
}

ortmem_status ortmem_grant_charge(ortmem_grant *g, uint64_t actual_bytes)
{
    om_error_clear();
    ortmem_status st = om_handle_pin(g, OM_KIND_GRANT, "grant charge");
    if (st != ORTMEM_OK)
        return st;
    if (actual_bytes > g->bytes) {
        st = OM_ERR(ORTMEM_E_RANGE, "grant charge: %llu bytes used of %llu prepared",
                    (unsigned long long)actual_bytes, (unsigned long long)g->bytes);
        om_handle_unpin(&g->hdr);
        return st;
    }
    ortmem_holder *h = g->holder;
    ortmem_authority *a = h->authority;
    pthread_mutex_lock(&a->lock);
    /* The used part turns from held to charged; the rest is unheld. */
    h->held_owned -= g->bytes < h->held_owned ? g->bytes : h->held_owned;
    h->held_mapped -= g->bytes < h->held_mapped ? g->bytes : h->held_mapped;
    a->mapped_used -= g->bytes - actual_bytes;
    h->owned += actual_bytes;
    h->mapped += actual_bytes;
    a->owned_total += actual_bytes;
    a->mapped_total += actual_bytes;
    om_holder_restate(a, h);
    om_capacity_freed_locked(a);
    pthread_mutex_unlock(&a->lock);
    om_grant_end(g);
    return ORTMEM_OK;
}

ortmem_status ortmem_grant_abort(ortmem_grant *g)
{
    om_error_clear();
    ortmem_status st = om_handle_pin(g, OM_KIND_GRANT, "grant abort");
    if (st != ORTMEM_OK)
        return st;
    ortmem_authority *a = g->holder->authority;
    pthread_mutex_lock(&a->lock);
    om_unhold_locked(a, g->holder, g->bytes, g->bytes);
    pthread_mutex_unlock(&a->lock);
    om_grant_end(g);
    return ORTMEM_OK;
}

/* ---- several holders at once ---- */

typedef struct om_claim {
    ortmem_holder *holder;
    uint64_t bytes;
    size_t index; /* position in the caller's arrays */
} om_claim;

static int om_by_authority(const void *x, const void *y)
{
    const om_claim *a = x, *b = y;
    uint64_t ia = a->holder->authority->id, ib = b->holder->authority->id;
    if (ia != ib)
        return (ia > ib) - (ia < ib);
    return (a->index > b->index) - (a->index < b->index);
}

/* Tries every claim under all locks (taken in authority-id order); applies
 * all or none. Returns the index of a claim that did not fit, or count. */
static size_t om_try_claims(om_claim *c, size_t count)
{
    ortmem_authority *last = NULL;
    for (size_t i = 0; i < count; i++) {
        if (c[i].holder->authority != last)
            pthread_mutex_lock(&(last = c[i].holder->authority)->lock);
    }
    size_t failed = count;
    size_t applied = 0;
    for (; applied < count; applied++) {
        ortmem_holder *h = c[applied].holder;
        if (!om_fits_locked(h->authority, h, c[applied].bytes, c[applied].bytes)) {
            failed = applied;
            break;
        }
        h->held_owned += c[applied].bytes;
        h->held_mapped += c[applied].bytes;
        h->authority->mapped_used += c[applied].bytes;
        om_holder_restate(h->authority, h);
    }
    if (failed < count) {
        for (size_t i = 0; i < applied; i++)
            om_unhold_locked(c[i].holder->authority, c[i].holder, c[i].bytes, c[i].bytes);
    }
    last = NULL;
    for (size_t i = 0; i < count; i++) {
        if (c[i].holder->authority != last)
            pthread_mutex_unlock(&(last = c[i].holder->authority)->lock);
    }
    return failed;
}

ortmem_status ortmem_grant_prepare_many(size_t count, ortmem_holder *const *holders,
                                        const uint64_t *bytes, ortmem_grant **grants)
{
    om_error_clear();
    if (!count || !holders || !bytes || !grants)
        return OM_ERR(ORTMEM_E_INVALID, "grant prepare many: empty or NULL arrays");
    om_claim *c = om_calloc(count, sizeof *c);
    if (!c)
        return OM_ERR(ORTMEM_E_NOMEM, "grant prepare many: %zu claims", count);
    ortmem_status st = ORTMEM_OK;
    size_t pinned = 0;
    for (; pinned < count && st == ORTMEM_OK; pinned++) {
        if (bytes[pinned] == 0)
            st = OM_ERR(ORTMEM_E_INVALID, "grant prepare many: bytes[%zu] is 0", pinned);
        else
            st = om_holder_pin(holders[pinned], "grant prepare many");
        if (st != ORTMEM_OK)
            break;
        c[pinned] = (om_claim){holders[pinned], bytes[pinned], pinned};
    }
    if (st == ORTMEM_OK) {
        qsort(c, count, sizeof *c, om_by_authority);
        size_t failed = om_try_claims(c, count);
        if (failed < count && !om_in_pressure_callback()) {
            /* One round of pressure on the authority that refused, then again. */
            ortmem_authority *a = c[failed].holder->authority;
            pthread_mutex_lock(&a->lock);
            uint64_t want = c[failed].bytes;
            pthread_mutex_unlock(&a->lock);
            (void)om_apply_pressure(a, c[failed].holder, want);
            failed = om_try_claims(c, count);
        }
        if (failed < count) {
            ortmem_holder *h = c[failed].holder;
            pthread_mutex_lock(&h->authority->lock);
            st = om_refuse_locked(h->authority, h, c[failed].bytes, c[failed].bytes,
                                  "grant prepare many");
            pthread_mutex_unlock(&h->authority->lock);
        }
    }
    size_t made = 0;
    for (; st == ORTMEM_OK && made < count; made++) {
        ortmem_authority *a = c[made].holder->authority;
        pthread_mutex_lock(&a->lock);
        st = om_grant_new(c[made].holder, c[made].bytes, &grants[c[made].index]);
        pthread_mutex_unlock(&a->lock);
    }
    if (st != ORTMEM_OK && made) {
        /* Bookkeeping failed part way (at claim made - 1): abort what was
         * made, unhold the rest, the failed one included.
         * The aborts clear the thread's detail: keep the failure's. */
        char detail[256];
        snprintf(detail, sizeof detail, "%s", ortmem_last_error());
        for (size_t i = 0; i < count; i++) {
            if (i < made - 1) {
                (void)ortmem_grant_abort(grants[c[i].index]);
            } else {
                ortmem_authority *a = c[i].holder->authority;
                pthread_mutex_lock(&a->lock);
                om_unhold_locked(a, c[i].holder, c[i].bytes, c[i].bytes);
                pthread_mutex_unlock(&a->lock);
            }
        }
        st = OM_ERR(st, "grant prepare many: claim %zu of %zu: %s", made, count, detail);
    }
    for (size_t i = 0; i < pinned && i < count; i++)
        om_holder_unpin(holders[i]);
    om_free(c);
    return st;
}
