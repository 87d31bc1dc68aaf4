/* The authority: budget, capacity arithmetic, pressure, limit changes, and
 * its lifetime. Lock order: authority lock, then the handle registry (leaf).
 * The authority lock is never held across a pressure callback, a fence query,
 * a log callback or a backend call. */
#include "core/alloc.h"
#include "governance/authority.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "governance/holder.h"
#include "vmm/backend.h"

static _Atomic uint64_t om_authority_ids;
static _Thread_local unsigned om_pressure_depth;
/* Set by om_apply_pressure when it could not ask anyone (no memory for its list). */
static _Thread_local bool om_pressure_unasked;

static const char *const om_role_names[ORTMEM_ROLE_COUNT] = {
    [ORTMEM_ROLE_WEIGHTS] = "weights",
    [ORTMEM_ROLE_KV] = "kv",
    [ORTMEM_ROLE_WORKSPACE] = "workspace",
    [ORTMEM_ROLE_OTHER] = "other",
};

const char *ortmem_role_name(ortmem_role role)
{
    return (unsigned)role < ORTMEM_ROLE_COUNT ? om_role_names[role] : NULL;
}

ortmem_status ortmem_role_parse(const char *name, ortmem_role *role)
{
    if (!name || !role)
        return OM_ERR(ORTMEM_E_INVALID, "role parse: name or output is NULL");
    for (unsigned i = 0; i < ORTMEM_ROLE_COUNT; i++) {
        if (strcmp(name, om_role_names[i]) == 0) {
            *role = (ortmem_role)i;
            return ORTMEM_OK;
        }
    }
    return OM_ERR(ORTMEM_E_INVALID, "role parse: unknown role '%s' (weights, kv, workspace, other)",
                  name);
}

bool om_in_pressure_callback(void)
{
    return om_pressure_depth > 0;
}

ortmem_status om_authority_pin(ortmem_authority *a, const char *what)
{
    return om_handle_pin(a, OM_KIND_AUTHORITY, what);
}

void om_authority_unpin(ortmem_authority *a)
{
    om_handle_unpin(&a->hdr);
}

/* ---- capacity ---- */

static uint64_t om_max(uint64_t x, uint64_t y)
{
    return x > y ? x : y;
}

static uint64_t om_footprint(const ortmem_holder *h, uint64_t extra_owned)
{
    return om_max(h->owned + h->held_owned + extra_owned, h->leased);
}

void om_holder_restate(ortmem_authority *a, ortmem_holder *h)
{
    uint64_t fp = om_footprint(h, 0);
    a->used = a->used - h->footprint + fp;
    h->footprint = fp;
    h->owned_peak = om_max(h->owned_peak, h->owned);
    a->owned_peak = om_max(a->owned_peak, a->owned_total);
}

bool om_fits_locked(const ortmem_authority *a, const ortmem_holder *h, uint64_t owned_bytes,
                    uint64_t mapped_bytes)
{
    uint64_t fp = om_footprint(h, owned_bytes);
    uint64_t used = a->used - h->footprint + fp;
    if (fp > h->footprint && (used > a->limit || used < a->used))
        return false;
    if (a->mapped_allowance && mapped_bytes &&
        (a->mapped_used + mapped_bytes > a->mapped_allowance ||
         a->mapped_used + mapped_bytes < a->mapped_used))
        return false;
    return true;
}

uint64_t om_shortfall_locked(const ortmem_authority *a, const ortmem_holder *h,
                             uint64_t owned_bytes, uint64_t mapped_bytes)
{
    uint64_t used = a->used - h->footprint + om_footprint(h, owned_bytes);
    uint64_t owned_short = used > a->limit ? used - a->limit : 0;
    uint64_t mapped_short = 0;
    if (a->mapped_allowance && a->mapped_used + mapped_bytes > a->mapped_allowance)
        mapped_short = a->mapped_used + mapped_bytes - a->mapped_allowance;
    return om_max(owned_short, mapped_short);
}

static int om_by_owned_desc(const void *x, const void *y)
{
    const ortmem_holder *a = *(const ortmem_holder *const *)x;
    const ortmem_holder *b = *(const ortmem_holder *const *)y;
    return (a->owned < b->owned) - (a->owned > b->owned);
}

ortmem_status om_refuse_locked(ortmem_authority *a, const ortmem_holder *h, uint64_t owned_bytes,
                               uint64_t mapped_bytes, const char *what)
{
    a->refusals++;
    ortmem_holder *top[3] = {0};
    size_t n = 0;
    ortmem_holder **sorted = om_malloc(a->holder_count * sizeof *sorted);
    if (sorted) {
        memcpy(sorted, a->holders, a->holder_count * sizeof *sorted);
        qsort(sorted, a->holder_count, sizeof *sorted, om_by_owned_desc);
        for (; n < 3 && n < a->holder_count; n++)
            top[n] = sorted[n];
        om_free(sorted);
    }
    char largest[200] = "";
    size_t used = 0;
    for (size_t i = 0; i < n && used < sizeof largest; i++)
        used += (size_t)snprintf(largest + used, sizeof largest - used, "%s%s %llu", i ? ", " : "",
                                 top[i]->name, (unsigned long long)top[i]->owned);
    uint64_t available = a->used < a->limit ? a->limit - a->used : 0;
    if (a->mapped_allowance && a->mapped_used + mapped_bytes > a->mapped_allowance)
        return OM_ERR(ORTMEM_E_BUDGET,
                      "%s: holder '%s' asked to map %llu bytes; mapped %llu of the allowance "
                      "%llu; largest holders: %s",
                      what, h->name, (unsigned long long)mapped_bytes,
                      (unsigned long long)a->mapped_used, (unsigned long long)a->mapped_allowance,
                      largest);
    return OM_ERR(ORTMEM_E_BUDGET,
                  "%s: holder '%s' (%s) requested %llu bytes; available %llu of limit %llu "
                  "(owned %llu, claimed %llu); largest holders: %s",
                  what, h->name, ortmem_role_name(h->role), (unsigned long long)owned_bytes,
                  (unsigned long long)available, (unsigned long long)a->limit,
                  (unsigned long long)a->owned_total,
                  (unsigned long long)(a->used > a->owned_total ? a->used - a->owned_total : 0),
                  largest);
}

ortmem_status om_take_hold(ortmem_authority *a, ortmem_holder *h, uint64_t owned_bytes,
                           uint64_t mapped_bytes, bool pressure, const char *what)
{
    pthread_mutex_lock(&a->lock);
    bool pressed = false, unasked = false;
    for (;;) {
        if (om_fits_locked(a, h, owned_bytes, mapped_bytes)) {
            h->held_owned += owned_bytes;
            h->held_mapped += mapped_bytes;
            a->mapped_used += mapped_bytes;
            om_holder_restate(a, h);
            pthread_mutex_unlock(&a->lock);
            return ORTMEM_OK;
        }
        if (!pressure || pressed || om_in_pressure_callback())
            break;
        uint64_t want = om_shortfall_locked(a, h, owned_bytes, mapped_bytes);
        pthread_mutex_unlock(&a->lock);
        (void)om_apply_pressure(a, h, want);
        unasked = om_pressure_unasked;
        pthread_mutex_lock(&a->lock);
        pressed = true;
    }
    /* Holders never asked for want of memory: not a budget refusal. */
    ortmem_status st =
        unasked ? OM_ERR(ORTMEM_E_NOMEM,
                         "%s: holder '%s' requested %llu bytes beyond what is available, and "
                         "no holder could be asked to reclaim (no memory for the list of %zu "
                         "holders)",
                         what, h->name, (unsigned long long)owned_bytes, a->holder_count)
                : om_refuse_locked(a, h, owned_bytes, mapped_bytes, what);
    pthread_mutex_unlock(&a->lock);
    return st;
}

void om_unhold_locked(ortmem_authority *a, ortmem_holder *h, uint64_t owned_bytes,
                      uint64_t mapped_bytes)
{
    owned_bytes = owned_bytes < h->held_owned ? owned_bytes : h->held_owned;
    mapped_bytes = mapped_bytes < h->held_mapped ? mapped_bytes : h->held_mapped;
    h->held_owned -= owned_bytes;
    h->held_mapped -= mapped_bytes;
    a->mapped_used -= mapped_bytes;
    om_holder_restate(a, h);
    om_capacity_freed_locked(a);
}

void om_capacity_freed_locked(ortmem_authority *a)
{
    om_tickets_serve_locked(a);
    pthread_cond_broadcast(&a->changed);
}

/* ---- pressure ---- */

static int om_by_priority(const void *x, const void *y)
{
    const ortmem_holder *a = *(const ortmem_holder *const *)x;
    const ortmem_holder *b = *(const ortmem_holder *const *)y;
    return (a->priority > b->priority) - (a->priority < b->priority);
}

uint64_t om_apply_pressure(ortmem_authority *a, const ortmem_holder *exclude, uint64_t want_bytes)
{
    pthread_mutex_lock(&a->lock);
    ortmem_holder **asked = om_malloc((a->holder_count ? a->holder_count : 1) * sizeof *asked);
    om_pressure_unasked = asked == NULL;
    size_t n = 0;
    for (size_t i = 0; asked && i < a->holder_count; i++) {
        ortmem_holder *h = a->holders[i];
        /* Pinned so that it stays registered while its callback runs. */
        /* A holder with nothing charged, held or mapped has nothing to give
         * back (mapped counts: dropping an alias can free another's granule). */
        if (h != exclude && h->on_pressure && !h->quiesced && (h->footprint || h->mapped) &&
            om_handle_pin(h, OM_KIND_HOLDER, "pressure") == ORTMEM_OK) {
            h->in_pressure++;
            asked[n++] = h;
        }
    }
    pthread_mutex_unlock(&a->lock);
    /* Stable sort keeps registration order among equal priorities. */
    for (size_t i = 1; i < n; i++) {
        for (size_t j = i; j > 0 && om_by_priority(&asked[j - 1], &asked[j]) > 0; j--) {
            ortmem_holder *t = asked[j];
            asked[j] = asked[j - 1];
            asked[j - 1] = t;
        }
    }
    uint64_t reclaimed = 0;
    for (size_t i = 0; i < n; i++) {
        ortmem_holder *h = asked[i];
        uint64_t got = 0;
        if (reclaimed < want_bytes) {
            om_pressure_depth++;
            got = h->on_pressure(h->user, want_bytes - reclaimed);
            om_pressure_depth--;
            reclaimed += got;
        }
        pthread_mutex_lock(&a->lock);
        if (got || reclaimed < want_bytes) {
            a->pressure_calls++;
            a->pressure_reclaimed += got;
        }
        h->in_pressure--;
        pthread_mutex_unlock(&a->lock);
        om_handle_unpin(&h->hdr);
    }
    om_free(asked);
    return reclaimed;
}

/* ---- the built-in pool holder ---- */

static uint64_t om_pool_pressure(void *user, uint64_t want_bytes)
{
    ortmem_authority *a = user;
    ortmem_vmm_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    if (ortmem_backend_stats(a->backend, &s) != ORTMEM_OK)
        return 0;
    size_t keep = s.pool_bytes > want_bytes ? (size_t)(s.pool_bytes - want_bytes) : 0;
    size_t released = 0;
    (void)ortmem_pool_trim(a->backend, keep, &released);
    return released;
}

/* ---- lifetime ---- */

static void om_authority_free(ortmem_authority *a)
{
    pthread_mutex_destroy(&a->lock);
    pthread_cond_destroy(&a->changed);
    om_free(a->holders);
    om_free(a);
}

ortmem_status ortmem_authority_create(ortmem_backend *backend,
                                      const ortmem_authority_options *options,
                                      ortmem_authority **out)
{
    om_error_clear();
    if (!options || !out)
        return OM_ERR(ORTMEM_E_INVALID, "authority create: options or out is NULL");
    ortmem_status st = OM_STRUCT_CHECK("authority create", "options", options);
    if (st != ORTMEM_OK)
        return st;
    ortmem_authority_options opt = ORTMEM_AUTHORITY_OPTIONS_INIT;
    memcpy(&opt, options, options->struct_size);
    if (opt.limit_bytes == 0)
        return OM_ERR(ORTMEM_E_INVALID, "authority create: limit_bytes is 0");
    if (!(opt.aging_per_second >= 0.0))
        return OM_ERR(ORTMEM_E_INVALID, "authority create: aging_per_second %g is negative",
                      opt.aging_per_second);
    st = om_backend_pin(backend, "authority create");
    if (st != ORTMEM_OK)
        return st;
    ortmem_authority *a = om_calloc(1, sizeof *a);
    if (!a) {
        om_backend_unpin(backend);
        return OM_ERR(ORTMEM_E_NOMEM, "authority create: bookkeeping");
    }
    a->backend = backend;
    a->id = atomic_fetch_add(&om_authority_ids, 1) + 1;
    a->limit = opt.limit_bytes;
    a->mapped_allowance = opt.mapped_allowance_bytes;
    a->aging_per_second = opt.aging_per_second > 0.0 ? opt.aging_per_second : 1.0;
    pthread_mutex_init(&a->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&a->changed, &attr);
    pthread_condattr_destroy(&attr);
    ortmem_holder_options pool = ORTMEM_HOLDER_OPTIONS_INIT;
    pool.name = "pool";
    pool.priority = INT_MIN;
    pool.on_pressure = om_pool_pressure;
    pool.user = a;
    ortmem_holder_options quarantine = ORTMEM_HOLDER_OPTIONS_INIT;
    quarantine.name = "quarantine";
    st = om_holder_add(a, &pool, true, &a->pool_holder);
    if (st == ORTMEM_OK)
        st = om_holder_add(a, &quarantine, true, &a->quarantine_holder);
    if (st == ORTMEM_OK) {
        ortmem_account pool_account, quarantine_account;
        om_holder_fill_account(a->pool_holder, &pool_account);
        om_holder_fill_account(a->quarantine_holder, &quarantine_account);
        st = ortmem_backend_set_accounts(backend, &pool_account, &quarantine_account);
        if (st == ORTMEM_E_STATE)
            st = OM_ERR(ORTMEM_E_STATE,
                        "authority create: backend '%s' already answers to an authority",
                        backend->ops.name);
        if (st == ORTMEM_OK && (st = om_handle_register(&a->hdr, OM_KIND_AUTHORITY)) != ORTMEM_OK)
            (void)ortmem_backend_set_accounts(backend, NULL, NULL);
    }
    if (st != ORTMEM_OK) {
        om_holders_free_all(a);
        om_authority_free(a);
        om_backend_unpin(backend);
        return st;
    }
    om_backend_use(backend);
    om_backend_unpin(backend);
    *out = a;
    return ORTMEM_OK;
}

/* Why the authority cannot go yet, or NULL. Caller holds the lock. */
static const char *om_busy_reason_locked(const ortmem_authority *a, const ortmem_holder **who)
{
    if (a->retirement_count)
        return "retirements are pending";
    for (size_t i = 0; i < a->holder_count; i++) {
        const ortmem_holder *h = a->holders[i];
        *who = h;
        if (h->tickets_waiting)
            return "a ticket is waiting";
        if (h->grants_open)
            return "a grant is open";
        if (!h->builtin && (h->owned || h->mapped || h->retained || h->held_owned))
            return "a holder is charged or still used by regions or arenas";
        if (h->in_pressure)
            return "a pressure callback is running";
    }
    return NULL;
}

ortmem_status ortmem_authority_destroy(ortmem_authority *a)
{
    om_error_clear();
    ortmem_status st = om_authority_pin(a, "authority destroy");
    if (st != ORTMEM_OK)
        return st;
    pthread_mutex_lock(&a->lock);
    const ortmem_holder *who = NULL;
    const char *reason = om_busy_reason_locked(a, &who);
    if (reason) {
        st = OM_ERR(ORTMEM_E_BUSY, "authority destroy: %s (holder '%s': owned %llu, mapped %llu)",
                    reason, who ? who->name : "?", who ? (unsigned long long)who->owned : 0ULL,
                    who ? (unsigned long long)who->mapped : 0ULL);
        pthread_mutex_unlock(&a->lock);
        om_authority_unpin(a);
        return st;
    }
    pthread_mutex_unlock(&a->lock);
    st = om_handle_retire(&a->hdr, "authority destroy");
    if (st != ORTMEM_OK) {
        om_authority_unpin(a);
        return st;
    }
    /* Pooled and quarantined granules stop being charged to this authority. */
    (void)ortmem_backend_set_accounts(a->backend, NULL, NULL);
    om_leases_free_all(a);
    om_holders_free_all(a);
    om_backend_unuse(a->backend);
    om_authority_free(a);
    om_handle_end_destroy();
    return ORTMEM_OK;
}

ortmem_backend *ortmem_authority_backend(ortmem_authority *a)
{
    if (om_authority_pin(a, "authority backend") != ORTMEM_OK)
        return NULL;
    ortmem_backend *b = a->backend;
    om_authority_unpin(a);
    return b;
}

ortmem_status ortmem_authority_set_limit(ortmem_authority *a, uint64_t limit_bytes,
                                         ortmem_limit_outcome *outcome)
{
    om_error_clear();
    if (limit_bytes == 0)
        return OM_ERR(ORTMEM_E_INVALID, "authority set limit: limit is 0");
    ortmem_status st =
        outcome ? OM_STRUCT_CHECK("authority set limit", "outcome", outcome) : ORTMEM_OK;
    if (st != ORTMEM_OK)
        return st;
    st = om_authority_pin(a, "authority set limit");
    if (st != ORTMEM_OK)
        return st;
    pthread_mutex_lock(&a->lock);
    uint64_t old = a->limit;
    uint64_t excess = a->used > limit_bytes ? a->used - limit_bytes : 0;
    pthread_mutex_unlock(&a->lock);
    /* Phase one: ask holders to make room below the new limit. */
    uint64_t reclaimed = excess ? om_apply_pressure(a, NULL, excess) : 0;
    /* Phase two: commit the new limit. */
    pthread_mutex_lock(&a->lock);
    a->limit = limit_bytes;
    uint64_t charged = a->used;
    om_capacity_freed_locked(a);
    pthread_mutex_unlock(&a->lock);
    if (outcome) {
        ortmem_limit_outcome o = {outcome->struct_size,  old, limit_bytes, reclaimed, charged,
                                  charged <= limit_bytes};
        memcpy(outcome, &o, outcome->struct_size);
    }
    om_authority_unpin(a);
    return ORTMEM_OK;
}
