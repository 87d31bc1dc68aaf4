/* Leases: standing claims on budget. A dropped lease stays registered as a
 * tombstone until its authority goes, so a second drop is told apart
 * (ORTMEM_E_DOUBLE_FREE) from a lease of a destroyed authority (ORTMEM_E_HANDLE). */
#include <stdio.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "core/error.h"
#include "governance/holder.h"

static void om_lease_restate_locked(ortmem_authority *a, ortmem_holder *h)
{
    uint64_t leased = 0;
    for (ortmem_lease *l = a->leases; l; l = l->next) {
        if (l->holder == h && !l->dropped)
            leased += l->bytes;
    }
    h->leased = leased;
    om_holder_restate(a, h);
}

ortmem_status ortmem_lease_acquire(ortmem_holder *h, uint64_t bytes, ortmem_lease **out)
{
    om_error_clear();
    if (!out || bytes == 0)
        return OM_ERR(ORTMEM_E_INVALID, "lease acquire: out is NULL or bytes is 0");
    ortmem_status st = om_holder_pin(h, "lease acquire");
    if (st != ORTMEM_OK)
        return st;
    ortmem_authority *a = h->authority;
    ortmem_lease *l = om_calloc(1, sizeof *l);
    if (!l) {
        om_holder_unpin(h);
        return OM_ERR(ORTMEM_E_NOMEM, "lease acquire: bookkeeping");
    }
    l->authority = a;
    l->holder = h;
    snprintf(l->holder_name, sizeof l->holder_name, "%s", h->name);
    l->bytes = bytes;
    st = om_handle_register(&l->hdr, OM_KIND_LEASE);
    if (st != ORTMEM_OK) {
        om_free(l);
        om_holder_unpin(h);
        return st;
    }
    pthread_mutex_lock(&a->lock);
    /* The footprint grows from max(owned + held, leased) to the same with
     * the new lease; only that growth needs room. */
    uint64_t charged = h->owned + h->held_owned;
    uint64_t grown = h->leased + bytes > charged ? h->leased + bytes : charged;
    uint64_t delta = grown - h->footprint;
    if (grown < h->leased || a->used + delta > a->limit || a->used + delta < a->used) {
        st = om_refuse_locked(a, h, bytes, 0, "lease acquire");
        pthread_mutex_unlock(&a->lock);
        om_handle_pin(l, OM_KIND_LEASE, "lease acquire");
        (void)om_handle_retire(&l->hdr, "lease acquire");
        om_free(l);
        om_handle_end_destroy();
        om_holder_unpin(h);
        return st;
    }
    l->next = a->leases;
    a->leases = l;
    h->leases_held++;
    om_lease_restate_locked(a, h);
    pthread_mutex_unlock(&a->lock);
    om_holder_unpin(h);
    *out = l;
    return ORTMEM_OK;
}

ortmem_status ortmem_lease_drop(ortmem_lease *l)
{
    om_error_clear();
    ortmem_status st = om_handle_pin(l, OM_KIND_LEASE, "lease drop");
    if (st != ORTMEM_OK)
        return st;
    /* A dropped lease's holder may have unregistered since: only the
     * authority (which keeps the tombstone) is safe to reach. */
    ortmem_authority *a = l->authority;
    pthread_mutex_lock(&a->lock);
    if (l->dropped) {
        st = OM_ERR(ORTMEM_E_DOUBLE_FREE,
                    "lease drop: the lease of %llu bytes for '%s' was "
                    "dropped already",
                    (unsigned long long)l->bytes, l->holder_name);
    } else {
        ortmem_holder *h = l->holder; /* live: its held lease keeps it registered */
        l->dropped = true;
        h->leases_held--;
        om_lease_restate_locked(a, h);
        om_capacity_freed_locked(a);
    }
    pthread_mutex_unlock(&a->lock);
    om_handle_unpin(&l->hdr);
    return st;
}

void om_leases_free_all(ortmem_authority *a)
{
    for (ortmem_lease *l = a->leases, *next; l; l = next) {
        next = l->next;
        if (om_handle_pin(l, OM_KIND_LEASE, "authority teardown") == ORTMEM_OK) {
            (void)om_handle_retire(&l->hdr, "authority teardown");
            om_handle_end_destroy();
        }
        om_free(l);
    }
    a->leases = NULL;
}
