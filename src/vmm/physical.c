/* Physical extents (one backend handle of k granules): creation, pooling,
 * release and quarantine, each moving the extent's owned charge between
 * accounts (owner, pool, quarantine). */
#include <stdlib.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "vmm/backend.h"

static bool om_poolable(unsigned flags)
{
    return !(flags & (OM_PHYS_EXPORTABLE | OM_PHYS_IMPORTED));
}

void om_phys_set_owner(om_phys *p, const om_account *owner)
{
    om_account previous = p->owner;
    p->owner = om_account_copy(owner); /* retain the new one before dropping the old */
    om_account_drop(&previous);
}

om_phys *om_phys_take_pooled(ortmem_backend *b, unsigned flags, const om_account *owner,
                             uint32_t granules)
{
    if (!om_poolable(flags))
        return NULL;
    /* The charge moves under the pool lock so that the pool account never
     * sees a take before the matching put (lock order: backend, then account). */
    pthread_mutex_lock(&b->lock);
    om_phys *p = om_pool_take_locked(b, granules);
    if (p) {
        om_account_move(&b->pool_account, owner, p->size, 0);
        om_phys_set_owner(p, owner);
    }
    pthread_mutex_unlock(&b->lock);
    om_ledger_count(p ? &b->ledger.pool_hits : &b->ledger.pool_misses, 1, b);
    return p;
}

static ortmem_status om_phys_new(ortmem_backend *b, unsigned flags, const om_account *owner,
                                 uint32_t granules, om_phys **out)
{
    om_phys *p = om_calloc(1, sizeof *p);
    if (!p)
        return OM_ERR(ORTMEM_E_NOMEM, "extent bookkeeping: %zu bytes", sizeof *p);
    p->granules = granules;
    p->size = (size_t)granules * b->granule;
    p->flags = flags;
    p->owner = om_account_copy(owner);
    *out = p;
    return ORTMEM_OK;
}

ortmem_status om_phys_create(ortmem_backend *b, unsigned flags, const om_account *owner,
                             uint32_t granules, om_phys **out)
{
    om_phys *p = NULL;
    ortmem_status st = om_phys_new(b, flags, owner, granules, &p);
    if (st != ORTMEM_OK)
        return st;
    unsigned create_flags = (flags & OM_PHYS_EXPORTABLE) ? ORTMEM_CREATE_EXPORTABLE : 0;
    st = om_backend_create_granule(b, p->size, create_flags, &p->handle);
    if (st != ORTMEM_OK) {
        om_account_drop(&p->owner);
        om_free(p);
        return st;
    }
    om_ledger_owned_add(b, p->size);
    om_account_charge(owner, p->size, 0);
    *out = p;
    return ORTMEM_OK;
}

ortmem_status om_phys_import(ortmem_backend *b, int fd, const om_account *owner, om_phys **out)
{
    om_phys *p = NULL;
    ortmem_status st = om_phys_new(b, OM_PHYS_IMPORTED, owner, 1, &p);
    if (st != ORTMEM_OK)
        return st;
    st = om_backend_import(b, fd, p->size, &p->handle);
    if (st != ORTMEM_OK) {
        om_account_drop(&p->owner);
        om_free(p);
        return st;
    }
    om_ledger_owned_add(b, p->size);
    om_account_charge(owner, p->size, 0);
    *out = p;
    return ORTMEM_OK;
}

void om_quarantine_mapping(ortmem_backend *b, const om_account *from, size_t bytes)
{
    om_ledger_count(&b->ledger.quarantined_mapped, bytes, b);
    om_account_move(from, &b->quarantine_account, 0, bytes);
}

void om_phys_quarantine(ortmem_backend *b, om_phys *p)
{
    pthread_mutex_lock(&b->lock);
    bool fresh = !p->quarantined;
    if (fresh) {
        p->quarantined = true;
        if (b->quarantine_count == b->quarantine_capacity) {
            size_t ncap = b->quarantine_capacity ? b->quarantine_capacity * 2 : 16;
            om_phys **grown = om_realloc(b->quarantine, ncap * sizeof *grown);
            if (grown) {
                b->quarantine = grown;
                b->quarantine_capacity = ncap;
            }
        }
        /* Without room the record is lost but the granule stays quarantined and counted. */
        if (b->quarantine_count < b->quarantine_capacity)
            b->quarantine[b->quarantine_count++] = p;
    }
    pthread_mutex_unlock(&b->lock);
    if (fresh) {
        om_ledger_count(&b->ledger.quarantined, p->size, b);
        om_ledger_count(&b->ledger.quarantined_granules, p->granules, b);
        om_ledger_count(&b->ledger.quarantined_extents, 1, b);
        om_account_move(&p->owner, &b->quarantine_account, p->size, 0);
        om_phys_set_owner(p, &b->quarantine_account);
        om_log(ORTMEM_LOG_WARN,
               "backend '%s': extent of %u granule%s (%zu bytes) quarantined after: %s",
               b->ops.name, p->granules, p->granules == 1 ? "" : "s", p->size, ortmem_last_error());
    }
}

ortmem_status om_phys_release(ortmem_backend *b, om_phys *p)
{
    ortmem_status st = om_backend_release_granule(b, p->handle);
    if (st != ORTMEM_OK) {
        om_phys_quarantine(b, p);
        return om_error_wrap(ORTMEM_E_QUARANTINED,
                             "extent of %u granule%s (%zu bytes) quarantined after a failed "
                             "release",
                             p->granules, p->granules == 1 ? "" : "s", p->size);
    }
    om_ledger_owned_sub(b, p->size);
    om_account_refund(&p->owner, p->size, 0);
    om_account_drop(&p->owner);
    om_free(p);
    return ORTMEM_OK;
}

ortmem_status om_phys_discard(ortmem_backend *b, om_phys *p, unsigned drop_flags)
{
    if (om_poolable(p->flags) && !(drop_flags & OM_DROP_NO_POOL)) {
        pthread_mutex_lock(&b->lock);
        bool kept = om_pool_put_locked(b, p);
        if (kept) {
            om_account_move(&p->owner, &b->pool_account, p->size, 0);
            om_phys_set_owner(p, &b->pool_account);
        }
        pthread_mutex_unlock(&b->lock);
        if (kept)
            return ORTMEM_OK;
    }
    return om_phys_release(b, p);
}

ortmem_status om_phys_drop(ortmem_backend *b, om_phys *p, unsigned drop_flags)
{
    unsigned before = atomic_fetch_sub(&p->mappers, 1);
    if (before != 1 || p->quarantined)
        return ORTMEM_OK;
    return om_phys_discard(b, p, drop_flags);
}
