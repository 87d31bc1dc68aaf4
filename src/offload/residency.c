/* The residency cache: the policy proposes (admit or stream a miss, which
 * resident tensor goes), the cache disposes (commits, copies, evicts, or
 * refuses with the numbers). One lock per cache; no ortmem lock is held
 * while it runs, so the pressure callback may take it. */
#include "offload/residency.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"
#include "governance/authority.h"
#include "offload/catalog.h"
#include "offload/slots.h"

static bool om_evictable(void *ctx, uint32_t t)
{
    ortmem_residency_cache *c = ctx;
    return t < c->tensors && t != c->current && c->w[t].resident && !c->w[t].pins &&
           !c->w[t].acquired;
}

/* A slot left RETIRING (the retire queue carried its decommit out, dropped
 * it undone, or quarantined granules). */
static void om_slot_done(void *ctx, uint32_t slot, om_slot_state state)
{
    ortmem_residency_cache *c = ctx;
    uint64_t len = om_slots_bytes(c->slots, slot);
    if (slot < c->tensors)
        c->retiring_bytes -= len;
    if (slot < c->tensors && c->w[slot].stale) {
        if (state == OM_SLOT_FILLED)
            c->retiring_bytes += len; /* still mapped, still stale */
        else
            c->w[slot].stale = false;
    }
    if (slot < c->tensors && state == OM_SLOT_FILLED && c->w[slot].stale) {
        /* nothing more: the next page-in refills it */
    } else if (state == OM_SLOT_EMPTY || state == OM_SLOT_QUARANTINED) {
        c->emptied_bytes += len;
        if (slot >= c->tensors)
            c->stats.ring_bytes -= len;
    } else if (state == OM_SLOT_FILLED && slot < c->tensors) {
        c->w[slot].resident = true;
        c->stats.resident_bytes += len;
        c->ops->inserted(c->policy, slot);
    }
}

static void om_collect(ortmem_residency_cache *c)
{
    om_slots_collect(c->slots, om_slot_done, c);
}

static ortmem_status om_evict_one(ortmem_residency_cache *c, uint32_t t)
{
    ortmem_status st = om_slots_retire(c->slots, t, c->o.compute_stream);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "evicting '%s'", om_catalog_name(c->catalog, t));
    uint64_t len = om_slots_bytes(c->slots, t);
    c->w[t].resident = false;
    c->stats.resident_bytes -= len;
    c->retiring_bytes += len;
    c->stats.evictions++;
    c->ops->removed(c->policy, t);
    om_collect(c);
    return ORTMEM_OK;
}

static void om_count_blockers(const ortmem_residency_cache *c, uint32_t *pinned, uint32_t *acquired)
{
    *pinned = *acquired = 0;
    for (uint32_t t = 0; t < c->tensors; t++) {
        *pinned += c->w[t].resident && c->w[t].pins;
        *acquired += c->w[t].resident && !c->w[t].pins && c->w[t].acquired;
    }
}

/* Waits for pending evictions (a stall: the device still uses those slots). */
static void om_wait_retiring(ortmem_residency_cache *c)
{
    c->stats.stalls++;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    (void)ortmem_authority_drain(c->authority, 1000, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    c->stats.stall_ns +=
        (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
    om_collect(c);
}

/* Evicts the policy's victims until need more bytes fit the resident budget. */
static ortmem_status om_make_room(ortmem_residency_cache *c, uint64_t need)
{
    for (;;) {
        om_collect(c);
        uint64_t used = c->stats.resident_bytes + c->retiring_bytes;
        if (used + need <= c->resident_budget)
            return ORTMEM_OK;
        uint32_t v = c->ops->victim(c->policy, c->pos, om_evictable, c);
        if (v != OM_POLICY_NONE && om_evictable(c, v)) {
            ortmem_status st = om_evict_one(c, v);
            if (st != ORTMEM_OK)
                return st;
            continue;
        }
        if (c->retiring_bytes) {
            uint64_t before = c->retiring_bytes;
            om_wait_retiring(c);
            if (c->retiring_bytes < before)
                continue;
        }
        uint32_t pinned, acquired;
        om_count_blockers(c, &pinned, &acquired);
        return OM_ERR(ORTMEM_E_BUDGET,
                      "residency cache: %llu bytes do not fit: %llu resident + %llu being "
                      "evicted of a resident budget of %llu (budget %llu less a ring of %u x "
                      "%llu); %u resident tensors pinned, %u acquired, none evictable",
                      (unsigned long long)need, (unsigned long long)c->stats.resident_bytes,
                      (unsigned long long)c->retiring_bytes, (unsigned long long)c->resident_budget,
                      (unsigned long long)c->budget, c->ring,
                      (unsigned long long)c->ring_slot_bytes, pinned, acquired);
    }
}

/* Pages tensor t into its own slot (room made through the policy). */
static ortmem_status om_page_in(ortmem_residency_cache *c, uint32_t t)
{
    const void *host = NULL;
    ortmem_status st = om_catalog_source(c->catalog, t, &host);
    if (st != ORTMEM_OK)
        return st;
    if (om_slots_state(c->slots, t) == OM_SLOT_QUARANTINED)
        return OM_ERR(ORTMEM_E_QUARANTINED,
                      "residency cache: the slot of '%s' has quarantined granules; it cannot "
                      "be paged in",
                      om_catalog_name(c->catalog, t));
    uint64_t len = om_slots_bytes(c->slots, t);
    uint64_t bytes = om_catalog_bytes(c->catalog, t);
    bool refill = c->w[t].stale && om_slots_state(c->slots, t) == OM_SLOT_FILLED;
    for (uint32_t tries = 0;; tries++) {
        /* A stale slot's bytes are counted already (as retiring). */
        st = om_make_room(c, refill ? 0 : len);
        if (st != ORTMEM_OK)
            return st;
        bool stalled = false;
        if (refill)
            st = om_slots_refill(c->slots, t, host, bytes, c->o.copy_stream, &stalled);
        else
            st = om_slots_fill(c->slots, t, host, bytes, c->o.copy_stream, &stalled);
        c->stats.stalls += stalled;
        if (st == ORTMEM_OK)
            break;
        if (!refill && om_slots_state(c->slots, t) == OM_SLOT_FILLED) {
            /* Mapped but not filled, the undo failed: count it, and let the
             * retire queue decommit it (or the next page-in refill it). */
            om_error_saved saved;
            om_error_save(&saved);
            c->w[t].stale = true;
            c->retiring_bytes += len;
            (void)om_slots_retire(c->slots, t, c->o.compute_stream);
            (void)om_error_restore(&saved, st);
            return st;
        }
        if (refill)
            return om_error_wrap(st, "residency cache: refilling '%s'",
                                 om_catalog_name(c->catalog, t));
        /* The authority refused (other holders could not give enough): our
         * own cold weights go next, one at a time. */
        uint32_t v = st == ORTMEM_E_BUDGET && tries < c->tensors
                         ? c->ops->victim(c->policy, c->pos, om_evictable, c)
                         : OM_POLICY_NONE;
        if (v == OM_POLICY_NONE || !om_evictable(c, v))
            return om_error_wrap(st, "residency cache: paging in '%s' (%llu bytes)",
                                 om_catalog_name(c->catalog, t), (unsigned long long)bytes);
        om_error_saved saved;
        om_error_save(&saved);
        if (om_evict_one(c, v) != ORTMEM_OK) {
            (void)om_error_restore(&saved, st);
            return om_error_wrap(st, "residency cache: paging in '%s'",
                                 om_catalog_name(c->catalog, t));
        }
    }
    if (refill) {
        c->w[t].stale = false;
        c->retiring_bytes -= len;
    }
    c->w[t].resident = true;
    c->stats.resident_bytes += len;
    c->stats.page_ins++;
    c->stats.bytes_moved += bytes;
    c->ops->inserted(c->policy, t);
    return ORTMEM_OK;
}

/* Copies tensor t into a free ring slot. */
static ortmem_status om_stream(ortmem_residency_cache *c, uint32_t t, void **ptr)
{
    if (om_catalog_bytes(c->catalog, t) > c->ring_slot_bytes)
        return OM_ERR(ORTMEM_E_BUDGET,
                      "residency cache: '%s' (%llu bytes) is not resident and is larger than a "
                      "ring slot (%llu bytes): pin it resident, or raise ring_slot_bytes",
                      om_catalog_name(c->catalog, t),
                      (unsigned long long)om_catalog_bytes(c->catalog, t),
                      (unsigned long long)c->ring_slot_bytes);
    const void *host = NULL;
    ortmem_status st = om_catalog_source(c->catalog, t, &host);
    if (st != ORTMEM_OK)
        return st;
    uint32_t r = UINT32_MAX;
    for (uint32_t k = 0; k < c->ring && r == UINT32_MAX; k++) {
        uint32_t cand = (c->ring_next + k) % c->ring;
        om_slot_state s = om_slots_state(c->slots, c->tensors + cand);
        if (!c->rings[cand].acquired && s != OM_SLOT_QUARANTINED)
            r = cand;
    }
    if (r == UINT32_MAX)
        return OM_ERR(ORTMEM_E_BUDGET,
                      "residency cache: '%s' is streamed but all %u ring slots are acquired "
                      "(or quarantined)",
                      om_catalog_name(c->catalog, t), c->ring);
    uint32_t slot = c->tensors + r;
    if (om_slots_state(c->slots, slot) == OM_SLOT_RETIRING)
        om_wait_retiring(c);
    uint64_t bytes = om_catalog_bytes(c->catalog, t);
    bool stalled = false;
    om_slot_state s = om_slots_state(c->slots, slot);
    if (s == OM_SLOT_FILLED)
        st = om_slots_refill(c->slots, slot, host, bytes, c->o.copy_stream, &stalled);
    else {
        st = om_slots_fill(c->slots, slot, host, bytes, c->o.copy_stream, &stalled);
        if (st == ORTMEM_OK)
            c->stats.ring_bytes += om_slots_bytes(c->slots, slot);
        else if (om_slots_state(c->slots, slot) == OM_SLOT_FILLED)
            c->stats.ring_bytes += om_slots_bytes(c->slots, slot); /* left mapped */
    }
    c->stats.stalls += stalled;
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "residency cache: streaming '%s' through ring slot %u",
                             om_catalog_name(c->catalog, t), r);
    c->rings[r] = (om_ring_slot){t, 1};
    c->ring_next = (r + 1) % c->ring;
    c->w[t].streamed_holds = 1;
    c->w[t].ring_slot = r;
    c->stats.streamed++;
    c->stats.bytes_moved += bytes;
    *ptr = om_slots_ptr(c->slots, slot);
    return ORTMEM_OK;
}

static ortmem_status om_enter(ortmem_residency_cache *c, uint32_t t, const char *what)
{
    if (!c)
        return OM_ERR(ORTMEM_E_INVALID, "%s: cache is NULL", what);
    if (t >= c->tensors)
        return OM_ERR(ORTMEM_E_NOT_FOUND, "%s: tensor id %u, the catalog has %u", what, t,
                      c->tensors);
    pthread_mutex_lock(&c->lock);
    return ORTMEM_OK;
}

/* A slot RETIRING is waited for, so that it is EMPTY (or FILLED again). */
static void om_settle(ortmem_residency_cache *c, uint32_t t)
{
    om_collect(c);
    if (om_slots_state(c->slots, t) == OM_SLOT_RETIRING)
        om_wait_retiring(c);
}

ortmem_status ortmem_residency_acquire(ortmem_residency_cache *c, uint32_t t, void **ptr)
{
    om_error_clear();
    if (!ptr)
        return OM_ERR(ORTMEM_E_INVALID, "residency acquire: device_ptr is NULL");
    ortmem_status st = om_enter(c, t, "residency acquire");
    if (st != ORTMEM_OK)
        return st;
    uint64_t bytes = om_catalog_bytes(c->catalog, t);
    om_weight *w = &c->w[t];
    if (w->streamed_holds) {
        /* A tensor's acquires are in one place: while it is acquired in a
         * ring slot (even if pinned resident since), acquires share that
         * slot, so that a release never frees a slot another caller reads. */
        if (w->streamed_holds == UINT32_MAX)
            st = OM_ERR(ORTMEM_E_OVERFLOW,
                        "residency acquire: '%s' is acquired %u times in ring slot %u",
                        om_catalog_name(c->catalog, t), w->streamed_holds, w->ring_slot);
        else {
            c->ops->accessed(c->policy, t, c->pos++, w->resident);
            w->streamed_holds++;
            c->rings[w->ring_slot].acquired++;
            c->stats.hits++;
            c->stats.hit_bytes += bytes;
            *ptr = om_slots_ptr(c->slots, c->tensors + w->ring_slot);
        }
        c->stats.refusals += st != ORTMEM_OK;
        pthread_mutex_unlock(&c->lock);
        return st;
    }
    om_settle(c, t);
    c->current = t;
    if (c->w[t].resident) {
        c->ops->accessed(c->policy, t, c->pos++, true);
        c->w[t].acquired++;
        c->stats.hits++;
        c->stats.hit_bytes += bytes;
        *ptr = om_slots_ptr(c->slots, t);
    } else if (om_slots_state(c->slots, t) == OM_SLOT_RETIRING) {
        st = OM_ERR(ORTMEM_E_BUSY,
                    "residency acquire: the eviction of '%s' is still pending after 1 s",
                    om_catalog_name(c->catalog, t));
    } else {
        uint64_t pos = c->pos++;
        c->ops->accessed(c->policy, t, pos, false);
        bool admit =
            c->ops->admit(c->policy, t, pos) && om_slots_bytes(c->slots, t) <= c->resident_budget;
        if (admit) {
            st = om_page_in(c, t);
            /* The policy admitted it but nothing may go: stream it instead. */
            if (st == ORTMEM_E_BUDGET)
                st = om_stream(c, t, ptr);
            else if (st == ORTMEM_OK) {
                c->w[t].acquired++;
                *ptr = om_slots_ptr(c->slots, t);
            }
        } else
            st = om_stream(c, t, ptr);
        if (st == ORTMEM_OK) {
            c->stats.misses++;
            c->stats.miss_bytes += bytes;
        }
    }
    c->current = OM_POLICY_NONE;
    c->stats.refusals += st != ORTMEM_OK;
    pthread_mutex_unlock(&c->lock);
    return st;
}

ortmem_status ortmem_residency_release(ortmem_residency_cache *c, uint32_t t)
{
    om_error_clear();
    ortmem_status st = om_enter(c, t, "residency release");
    if (st != ORTMEM_OK)
        return st;
    om_weight *w = &c->w[t];
    if (w->streamed_holds) {
        uint32_t r = w->ring_slot;
        /* The last holder's kernels may still read the slot: its refill waits
         * for an event recorded after them on the compute stream. */
        if (c->rings[r].acquired == 1)
            om_slots_readers_done(c->slots, c->tensors + r, c->o.compute_stream);
        c->rings[r].acquired--;
        w->streamed_holds--;
    } else if (w->acquired)
        w->acquired--;
    else
        st = OM_ERR(ORTMEM_E_STATE, "residency release: '%s' is not acquired",
                    om_catalog_name(c->catalog, t));
    pthread_mutex_unlock(&c->lock);
    return st;
}

ortmem_status ortmem_residency_pin(ortmem_residency_cache *c, uint32_t t)
{
    om_error_clear();
    ortmem_status st = om_enter(c, t, "residency pin");
    if (st != ORTMEM_OK)
        return st;
    if (c->w[t].pins == UINT32_MAX)
        st = OM_ERR(ORTMEM_E_OVERFLOW, "residency pin: '%s' is pinned %u times",
                    om_catalog_name(c->catalog, t), c->w[t].pins);
    else if (om_slots_bytes(c->slots, t) > c->resident_budget)
        st = OM_ERR(ORTMEM_E_BUDGET,
                    "residency pin: '%s' needs a %llu-byte slot, the resident budget is %llu",
                    om_catalog_name(c->catalog, t), (unsigned long long)om_slots_bytes(c->slots, t),
                    (unsigned long long)c->resident_budget);
    if (st == ORTMEM_OK) {
        om_settle(c, t);
        c->current = t;
        if (!c->w[t].resident)
            st = om_page_in(c, t);
        c->current = OM_POLICY_NONE;
    }
    if (st == ORTMEM_OK)
        c->w[t].pins++;
    else
        c->stats.refusals++;
    pthread_mutex_unlock(&c->lock);
    return st;
}

ortmem_status ortmem_residency_unpin(ortmem_residency_cache *c, uint32_t t)
{
    om_error_clear();
    ortmem_status st = om_enter(c, t, "residency unpin");
    if (st != ORTMEM_OK)
        return st;
    if (!c->w[t].pins)
        st = OM_ERR(ORTMEM_E_STATE, "residency unpin: '%s' is not pinned",
                    om_catalog_name(c->catalog, t));
    else
        c->w[t].pins--;
    pthread_mutex_unlock(&c->lock);
    return st;
}

ortmem_status ortmem_residency_evict(ortmem_residency_cache *c, uint32_t t)
{
    om_error_clear();
    ortmem_status st = om_enter(c, t, "residency evict");
    if (st != ORTMEM_OK)
        return st;
    om_weight *w = &c->w[t];
    if (w->pins)
        st = OM_ERR(ORTMEM_E_BUSY, "residency evict: '%s' is pinned (%u pins): refused",
                    om_catalog_name(c->catalog, t), w->pins);
    else if (w->acquired)
        st = OM_ERR(ORTMEM_E_BUSY, "residency evict: '%s' is acquired %u times: refused",
                    om_catalog_name(c->catalog, t), w->acquired);
    else if (!w->resident)
        st = OM_ERR(ORTMEM_E_STATE, "residency evict: '%s' is not resident",
                    om_catalog_name(c->catalog, t));
    else
        st = om_evict_one(c, t);
    pthread_mutex_unlock(&c->lock);
    return st;
}

ortmem_status ortmem_residency_slot_range(ortmem_residency_cache *c, uint32_t t,
                                          ortmem_region **region, size_t *offset, size_t *len,
                                          const char **name)
{
    om_error_clear();
    if (!region || !offset || !len)
        return OM_ERR(ORTMEM_E_INVALID, "residency slot range: region %p, offset %p, len %p",
                      (void *)region, (void *)offset, (void *)len);
    ortmem_status st = om_enter(c, t, "residency slot range");
    if (st != ORTMEM_OK)
        return st;
    *region = om_slots_region(c->slots, t, offset);
    *len = (size_t)om_slots_bytes(c->slots, t);
    if (name)
        *name = om_catalog_name(c->catalog, t);
    pthread_mutex_unlock(&c->lock);
    return ORTMEM_OK;
}

ortmem_status ortmem_residency_slot(ortmem_residency_cache *c, uint32_t t, void **ptr)
{
    om_error_clear();
    if (!ptr)
        return OM_ERR(ORTMEM_E_INVALID, "residency slot: device_ptr is NULL");
    ortmem_status st = om_enter(c, t, "residency slot");
    if (st != ORTMEM_OK)
        return st;
    *ptr = om_slots_ptr(c->slots, t);
    pthread_mutex_unlock(&c->lock);
    return ORTMEM_OK;
}

int ortmem_residency_is_resident(ortmem_residency_cache *c, uint32_t t)
{
    if (om_enter(c, t, "residency is resident") != ORTMEM_OK)
        return 0;
    om_collect(c);
    int resident = c->w[t].resident;
    pthread_mutex_unlock(&c->lock);
    return resident;
}

ortmem_status ortmem_residency_stats_get(ortmem_residency_cache *c, ortmem_residency_stats *stats)
{
    om_error_clear();
    ortmem_status st = OM_STRUCT_CHECK("residency stats", "stats", stats);
    if (st != ORTMEM_OK)
        return st;
    if (!c)
        return OM_ERR(ORTMEM_E_INVALID, "residency stats: cache is NULL");
    pthread_mutex_lock(&c->lock);
    om_collect(c);
    ortmem_residency_stats s = c->stats;
    s.retiring_bytes = c->retiring_bytes;
    s.stall_ns += om_slots_stall_ns(c->slots);
    pthread_mutex_unlock(&c->lock);
    s.struct_size = stats->struct_size;
    memcpy(stats, &s, stats->struct_size);
    return ORTMEM_OK;
}

ortmem_holder *ortmem_residency_holder(ortmem_residency_cache *c)
{
    return c ? c->holder : NULL;
}

/* Pressure from another holder: cold weights (unpinned, unacquired, the
 * policy's victims first) and idle ring slots go; returns what was
 * decommitted by the time it returns. */
uint64_t om_residency_pressure(void *user, uint64_t want)
{
    ortmem_residency_cache *c = user;
    /* A cache busy in its own page-in gives nothing now: waiting could
     * deadlock with a second cache paging in under the same authority. */
    if (pthread_mutex_trylock(&c->lock) != 0)
        return 0;
    if (!c->slots) { /* being destroyed */
        pthread_mutex_unlock(&c->lock);
        return 0;
    }
    om_collect(c);
    uint64_t start = c->emptied_bytes, asked = 0;
    while (asked < want) {
        uint32_t v = c->ops->victim(c->policy, c->pos, om_evictable, c);
        if (v == OM_POLICY_NONE || !om_evictable(c, v) || om_evict_one(c, v) != ORTMEM_OK)
            break;
        asked += om_slots_bytes(c->slots, v);
    }
    for (uint32_t r = 0; r < c->ring && asked < want; r++) {
        uint32_t slot = c->tensors + r;
        if (c->rings[r].acquired || om_slots_state(c->slots, slot) != OM_SLOT_FILLED)
            continue;
        if (om_slots_retire(c->slots, slot, c->o.compute_stream) == ORTMEM_OK)
            asked += om_slots_bytes(c->slots, slot);
    }
    om_collect(c);
    uint64_t reclaimed = c->emptied_bytes - start;
    c->stats.reclaimed_bytes += reclaimed;
    pthread_mutex_unlock(&c->lock);
    return reclaimed;
}
