/* Holders: registration, a pressure callback set after it, the account
 * through which regions and arenas charge them, and refunds of
 * grant-charged memory. */
#include "core/alloc.h"
#include "governance/holder.h"

#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>

#include "core/error.h"

ortmem_status om_holder_pin(ortmem_holder *h, const char *what)
{
    return om_handle_pin(h, OM_KIND_HOLDER, what);
}

void om_holder_unpin(ortmem_holder *h)
{
    om_handle_unpin(&h->hdr);
}

ortmem_status om_holder_add(ortmem_authority *a, const ortmem_holder_options *o, bool builtin,
                            ortmem_holder **out)
{
    ortmem_holder *h = om_calloc(1, sizeof *h);
    if (!h)
        return OM_ERR(ORTMEM_E_NOMEM, "holder register: bookkeeping");
    h->authority = a;
    snprintf(h->name, sizeof h->name, "%s", o->name && *o->name ? o->name : "unnamed");
    h->role = o->role;
    h->priority = o->priority;
    h->on_pressure = o->on_pressure;
    h->user = o->user;
    h->builtin = builtin;
    ortmem_status st = om_handle_register(&h->hdr, OM_KIND_HOLDER);
    if (st != ORTMEM_OK) {
        om_free(h);
        return st;
    }
    pthread_mutex_lock(&a->lock);
    if (a->holder_count == a->holder_capacity) {
        size_t ncap = a->holder_capacity ? a->holder_capacity * 2 : 8;
        ortmem_holder **grown = om_realloc(a->holders, ncap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&a->lock);
            om_handle_pin(h, OM_KIND_HOLDER, "holder register");
            (void)om_handle_retire(&h->hdr, "holder register");
            om_free(h);
            om_handle_end_destroy();
            return OM_ERR(ORTMEM_E_NOMEM, "holder register: list of %zu holders", ncap);
        }
        a->holders = grown;
        a->holder_capacity = ncap;
    }
    a->holders[a->holder_count++] = h;
    pthread_mutex_unlock(&a->lock);
    *out = h;
    return ORTMEM_OK;
}

void om_holders_free_all(ortmem_authority *a)
{
    for (size_t i = 0; i < a->holder_count; i++) {
        ortmem_holder *h = a->holders[i];
        if (om_handle_pin(h, OM_KIND_HOLDER, "authority teardown") == ORTMEM_OK) {
            (void)om_handle_retire(&h->hdr, "authority teardown");
            om_handle_end_destroy();
        }
        om_free(h);
    }
    a->holder_count = 0;
}

ortmem_status ortmem_holder_register(ortmem_authority *a, const ortmem_holder_options *options,
                                     ortmem_holder **out)
{
    om_error_clear();
    if (!options || !out)
        return OM_ERR(ORTMEM_E_INVALID, "holder register: options or out is NULL");
    ortmem_status st = OM_STRUCT_CHECK("holder register", "options", options);
    if (st != ORTMEM_OK)
        return st;
    ortmem_holder_options opt = ORTMEM_HOLDER_OPTIONS_INIT;
    memcpy(&opt, options, options->struct_size);
    if ((unsigned)opt.role >= ORTMEM_ROLE_COUNT)
        return OM_ERR(ORTMEM_E_INVALID, "holder register: unknown role %d", (int)opt.role);
    st = om_authority_pin(a, "holder register");
    if (st != ORTMEM_OK)
        return st;
    st = om_holder_add(a, &opt, false, out);
    om_authority_unpin(a);
    return st;
}

ortmem_status ortmem_holder_unregister(ortmem_holder *h)
{
    om_error_clear();
    ortmem_status st = om_holder_pin(h, "holder unregister");
    if (st != ORTMEM_OK)
        return st;
    ortmem_authority *a = h->authority;
    pthread_mutex_lock(&a->lock);
    const char *why = NULL;
    if (h->builtin)
        why = "it is built into the authority";
    else if (h->owned || h->mapped)
        why = "it is charged";
    else if (h->retained)
        why = "regions, arenas or granules still use its account";
    else if (h->held_owned || h->held_mapped || h->grants_open)
        why = "a grant or hold is open";
    else if (h->leases_held)
        why = "it holds a lease";
    else if (h->tickets_waiting)
        why = "a ticket is waiting";
    else if (h->retirements_pending)
        why = "a retirement is pending";
    else if (h->in_pressure)
        why = "its pressure callback is running";
    if (why) {
        st = OM_ERR(ORTMEM_E_BUSY,
                    "holder unregister: '%s' stays because %s (owned %llu, mapped %llu, "
                    "account copies %llu, leased %llu)",
                    h->name, why, (unsigned long long)h->owned, (unsigned long long)h->mapped,
                    (unsigned long long)h->retained, (unsigned long long)h->leased);
        pthread_mutex_unlock(&a->lock);
        om_holder_unpin(h);
        return st;
    }
    for (size_t i = 0; i < a->holder_count; i++) {
        if (a->holders[i] == h) {
            a->holders[i] = a->holders[--a->holder_count];
            break;
        }
    }
    pthread_mutex_unlock(&a->lock);
    st = om_handle_retire(&h->hdr, "holder unregister");
    if (st != ORTMEM_OK) {
        om_holder_unpin(h);
        return st;
    }
    om_free(h);
    om_handle_end_destroy();
    return ORTMEM_OK;
}

/* Set under the authority's lock, where pressure looks for callbacks; set
 * once, so a callback pressure already picked never changes under it. */
ortmem_status ortmem_holder_set_pressure(ortmem_holder *h, ortmem_pressure_fn fn, void *user)
{
    om_error_clear();
    if (!fn)
        return OM_ERR(ORTMEM_E_INVALID, "holder set pressure: callback is NULL");
    ortmem_status st = om_holder_pin(h, "holder set pressure");
    if (st != ORTMEM_OK)
        return st;
    ortmem_authority *a = h->authority;
    pthread_mutex_lock(&a->lock);
    if (h->builtin) {
        st = OM_ERR(ORTMEM_E_STATE, "holder set pressure: '%s' is built into the authority",
                    h->name);
    } else if (h->on_pressure) {
        st = OM_ERR(ORTMEM_E_STATE,
                    "holder set pressure: '%s' has a pressure callback already (set once, at "
                    "registration or by one earlier call)",
                    h->name);
    } else {
        h->user = user;
        h->on_pressure = fn;
    }
    pthread_mutex_unlock(&a->lock);
    om_holder_unpin(h);
    return st;
}

/* ---- the account ---- */

/* vmm calls hold with its locks held: no pressure here (a callback could
 * wait for those very locks); vmm calls relieve once it dropped them. */
static ortmem_status acct_hold(void *self, uint64_t owned, uint64_t mapped)
{
    ortmem_holder *h = self;
    return om_take_hold(h->authority, h, owned, mapped, false, "commit");
}

static uint64_t acct_relieve(void *self, uint64_t owned, uint64_t mapped)
{
    ortmem_holder *h = self;
    ortmem_authority *a = h->authority;
    pthread_mutex_lock(&a->lock);
    /* vmm tries once more after every relieve, so the refusal relieved here
     * is not final and is not counted; the retry counts if refused again. */
    if (a->refusals)
        a->refusals--;
    uint64_t want = om_in_pressure_callback() ? 0 : om_shortfall_locked(a, h, owned, mapped);
    pthread_mutex_unlock(&a->lock);
    return want ? om_apply_pressure(a, h, want) : 0;
}

static void acct_unhold(void *self, uint64_t owned, uint64_t mapped)
{
    ortmem_holder *h = self;
    ortmem_authority *a = h->authority;
    pthread_mutex_lock(&a->lock);
    om_unhold_locked(a, h, owned, mapped);
    pthread_mutex_unlock(&a->lock);
}

/* Charged bytes come out of the holder's hold first. */
static void acct_charge(void *self, uint64_t owned, uint64_t mapped)
{
    ortmem_holder *h = self;
    ortmem_authority *a = h->authority;
    pthread_mutex_lock(&a->lock);
    uint64_t from_owned = owned < h->held_owned ? owned : h->held_owned;
    uint64_t from_mapped = mapped < h->held_mapped ? mapped : h->held_mapped;
    h->held_owned -= from_owned;
    h->held_mapped -= from_mapped;
    h->owned += owned;
    h->mapped += mapped;
    a->owned_total += owned;
    a->mapped_total += mapped;
    a->mapped_used += mapped - from_mapped;
    om_holder_restate(a, h);
    pthread_mutex_unlock(&a->lock);
}

static void om_adopt_locked(ortmem_authority *a, ortmem_holder *h, uint64_t owned, uint64_t mapped)
{
    h->owned += owned;
    h->mapped += mapped;
    a->owned_total += owned;
    a->mapped_total += mapped;
    a->mapped_used += mapped;
    om_holder_restate(a, h);
}

static void om_refund_locked(ortmem_authority *a, ortmem_holder *h, uint64_t owned, uint64_t mapped)
{
    owned = owned < h->owned ? owned : h->owned;
    mapped = mapped < h->mapped ? mapped : h->mapped;
    h->owned -= owned;
    h->mapped -= mapped;
    a->owned_total -= owned;
    a->mapped_total -= mapped;
    a->mapped_used -= mapped;
    om_holder_restate(a, h);
}

static void acct_adopt(void *self, uint64_t owned, uint64_t mapped)
{
    ortmem_holder *h = self;
    ortmem_authority *a = h->authority;
    pthread_mutex_lock(&a->lock);
    om_adopt_locked(a, h, owned, mapped);
    pthread_mutex_unlock(&a->lock);
}

static void acct_refund(void *self, uint64_t owned, uint64_t mapped)
{
    ortmem_holder *h = self;
    ortmem_authority *a = h->authority;
    pthread_mutex_lock(&a->lock);
    om_refund_locked(a, h, owned, mapped);
    om_capacity_freed_locked(a);
    pthread_mutex_unlock(&a->lock);
}

/* Owner to quarantine, pool to owner and the like: one locked step, so no
 * hold or ticket sees the bytes free between the refund and the adopt.
 * Holders of two authorities move as a refund and an adopt. */
static int acct_move(void *self, void *to_self, uint64_t owned, uint64_t mapped)
{
    ortmem_holder *h = self, *to = to_self;
    ortmem_authority *a = h->authority;
    if (to->authority != a)
        return 0;
    pthread_mutex_lock(&a->lock);
    om_refund_locked(a, h, owned, mapped);
    om_adopt_locked(a, to, owned, mapped);
    om_capacity_freed_locked(a); /* used falls when a lease of to already counted them */
    pthread_mutex_unlock(&a->lock);
    return 1;
}

static void acct_requested(void *self, int64_t delta)
{
    ortmem_holder *h = self;
    ortmem_authority *a = h->authority;
    pthread_mutex_lock(&a->lock);
    if (delta < 0 && (uint64_t)-delta > h->requested)
        h->requested = 0;
    else
        h->requested += (uint64_t)delta;
    pthread_mutex_unlock(&a->lock);
}

static void acct_retain(void *self)
{
    ortmem_holder *h = self;
    pthread_mutex_lock(&h->authority->lock);
    h->retained++;
    pthread_mutex_unlock(&h->authority->lock);
}

static void acct_unretain(void *self)
{
    ortmem_holder *h = self;
    pthread_mutex_lock(&h->authority->lock);
    h->retained--;
    pthread_mutex_unlock(&h->authority->lock);
}

void om_holder_fill_account(ortmem_holder *h, ortmem_account *account)
{
    *account = (ortmem_account){
        .struct_size = sizeof *account,
        .self = h,
        .hold = acct_hold,
        .unhold = acct_unhold,
        .charge = acct_charge,
        .adopt = acct_adopt,
        .refund = acct_refund,
        .requested = acct_requested,
        .retain = acct_retain,
        .unretain = acct_unretain,
        .relieve = acct_relieve,
        .move = acct_move,
    };
}

ortmem_holder *om_holder_of_account(const ortmem_account *account)
{
    return account && account->hold == acct_hold ? account->self : NULL;
}

ortmem_status ortmem_holder_account(ortmem_holder *h, ortmem_account *account)
{
    om_error_clear();
    if (!account)
        return OM_ERR(ORTMEM_E_INVALID, "holder account: output is NULL");
    ortmem_status st = om_holder_pin(h, "holder account");
    if (st != ORTMEM_OK)
        return st;
    om_holder_fill_account(h, account);
    om_holder_unpin(h);
    return ORTMEM_OK;
}

ortmem_status ortmem_holder_refund(ortmem_holder *h, uint64_t bytes)
{
    om_error_clear();
    ortmem_status st = om_holder_pin(h, "holder refund");
    if (st != ORTMEM_OK)
        return st;
    ortmem_authority *a = h->authority;
    pthread_mutex_lock(&a->lock);
    if (bytes > h->owned || bytes > h->mapped) {
        st = OM_ERR(ORTMEM_E_RANGE,
                    "holder refund: '%s' returns %llu bytes but is charged %llu owned, %llu "
                    "mapped",
                    h->name, (unsigned long long)bytes, (unsigned long long)h->owned,
                    (unsigned long long)h->mapped);
        pthread_mutex_unlock(&a->lock);
        om_holder_unpin(h);
        return st;
    }
    pthread_mutex_unlock(&a->lock);
    acct_refund(h, bytes, bytes);
    om_holder_unpin(h);
    return ORTMEM_OK;
}

ortmem_status om_holder_quiesce(ortmem_holder *h, const char *what)
{
    ortmem_authority *a = h->authority;
    pthread_mutex_lock(&a->lock);
    if (h->in_pressure && om_in_pressure_callback()) {
        pthread_mutex_unlock(&a->lock);
        return OM_ERR(ORTMEM_E_BUSY,
                      "%s: the pressure callback of holder '%s' is running and this call comes "
                      "from inside a pressure callback; call it again once that pass returned",
                      what, h->name);
    }
    h->quiesced = true;
    /* A pass that picked h before the flag was set runs to its end; it
     * never waits for this thread (this thread is in no pressure pass). */
    while (h->in_pressure) {
        pthread_mutex_unlock(&a->lock);
        sched_yield();
        pthread_mutex_lock(&a->lock);
    }
    pthread_mutex_unlock(&a->lock);
    return ORTMEM_OK;
}

void om_holder_unquiesce(ortmem_holder *h)
{
    ortmem_authority *a = h->authority;
    pthread_mutex_lock(&a->lock);
    h->quiesced = false;
    pthread_mutex_unlock(&a->lock);
}
