/* The residency cache's lifecycle: create (slots, the weights holder, the
 * policy over the catalog) and destroy (refused while anything is acquired or
 * pinned, or from inside a pressure pass that picked the holder). */
#include "offload/residency.h"

#include <pthread.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "governance/authority.h"
#include "offload/catalog.h"
#include "offload/slots.h"

static void om_cache_free(ortmem_residency_cache *c)
{
    om_free(c->slot_bytes);
    om_free(c->tensor_bytes);
    om_free(c->rings);
    om_free(c->w);
    pthread_mutex_destroy(&c->lock);
    om_free(c);
}

ortmem_status om_residency_cache_create_with_ops(ortmem_authority *authority,
                                                 ortmem_weight_catalog *catalog,
                                                 const ortmem_residency_options *options,
                                                 const om_policy_ops *ops,
                                                 ortmem_residency_cache **out)
{
    static const char what[] = "residency cache create";
    ortmem_status st = OM_STRUCT_CHECK(what, "options", options);
    if (st != ORTMEM_OK)
        return st;
    if (!authority || !catalog || !ops || !out)
        return OM_ERR(ORTMEM_E_INVALID, "%s: authority %p, catalog %p, policy ops %p, out %p", what,
                      (void *)authority, (void *)catalog, (const void *)ops, (void *)out);
    ortmem_residency_options o = ORTMEM_RESIDENCY_OPTIONS_INIT;
    memcpy(&o, options, options->struct_size);
    if (o.budget_bytes == 0)
        return OM_ERR(ORTMEM_E_INVALID, "%s: budget_bytes is 0", what);
    uint32_t ring = o.ring_slots ? o.ring_slots : 2;
    size_t granule = 0;
    st = ortmem_backend_granule(ortmem_authority_backend(authority), &granule);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "%s", what);
    uint32_t n = (uint32_t)ortmem_weight_catalog_count(catalog);
    uint32_t largest = 0;
    uint64_t largest_bytes = 0;
    for (uint32_t t = 0; t < n; t++)
        if (om_catalog_bytes(catalog, t) > largest_bytes) {
            largest_bytes = om_catalog_bytes(catalog, t);
            largest = t;
        }
    if (largest_bytes > UINT64_MAX / 2 / (ring + 1u))
        return OM_ERR(ORTMEM_E_OVERFLOW, "%s: tensor '%s' is %llu bytes", what,
                      om_catalog_name(catalog, largest), (unsigned long long)largest_bytes);
    const uint64_t largest_slot = (largest_bytes + granule - 1) / granule * granule;
    uint64_t slot_bytes = largest_slot;
    if (o.ring_slot_bytes && o.ring_slot_bytes < largest_slot)
        slot_bytes = (o.ring_slot_bytes + granule - 1) / granule * granule;
    uint64_t ring_bytes = (uint64_t)ring * slot_bytes;
    if (o.budget_bytes < largest_slot && slot_bytes == largest_slot)
        return OM_ERR(ORTMEM_E_BUDGET,
                      "%s: a budget of %llu bytes is below the largest tensor, '%s' (%llu bytes, "
                      "a %llu-byte slot of %zu-byte granules)",
                      what, (unsigned long long)o.budget_bytes, om_catalog_name(catalog, largest),
                      (unsigned long long)largest_bytes, (unsigned long long)slot_bytes, granule);
    if (o.budget_bytes <= ring_bytes)
        return OM_ERR(ORTMEM_E_BUDGET,
                      "%s: a budget of %llu bytes leaves nothing for resident tensors after a "
                      "ring of %u slots of %llu bytes (%llu)",
                      what, (unsigned long long)o.budget_bytes, ring,
                      (unsigned long long)slot_bytes, (unsigned long long)ring_bytes);
    if (slot_bytes < largest_slot && largest_slot > o.budget_bytes - ring_bytes)
        return OM_ERR(ORTMEM_E_BUDGET,
                      "%s: '%s' (a %llu-byte slot) fits neither a ring slot of %llu bytes nor the "
                      "resident budget of %llu bytes (budget %llu less the ring's %llu)",
                      what, om_catalog_name(catalog, largest), (unsigned long long)largest_slot,
                      (unsigned long long)slot_bytes,
                      (unsigned long long)(o.budget_bytes - ring_bytes),
                      (unsigned long long)o.budget_bytes, (unsigned long long)ring_bytes);

    ortmem_residency_cache *c = om_calloc(1, sizeof *c);
    if (!c)
        return OM_ERR(ORTMEM_E_NOMEM, "%s: bookkeeping", what);
    pthread_mutex_init(&c->lock, NULL);
    c->w = om_calloc(n, sizeof *c->w);
    c->rings = om_calloc(ring, sizeof *c->rings);
    uint64_t *bytes = om_calloc((size_t)n + ring, sizeof *bytes);
    c->slot_bytes = bytes;
    c->tensor_bytes = om_calloc(n, sizeof *c->tensor_bytes);
    if (!c->w || !c->rings || !bytes || !c->tensor_bytes) {
        om_cache_free(c);
        return OM_ERR(ORTMEM_E_NOMEM, "%s: bookkeeping for %u tensors", what, n);
    }
    c->authority = authority;
    c->catalog = catalog;
    c->ops = ops;
    c->tensors = n;
    c->ring = ring;
    c->budget = o.budget_bytes;
    c->ring_slot_bytes = slot_bytes;
    c->resident_budget = o.budget_bytes - ring_bytes;
    c->current = OM_POLICY_NONE;
    c->o = o;
    c->o.ring_slots = ring;
    c->stats.struct_size = sizeof c->stats;
    for (uint32_t t = 0; t < n; t++) {
        c->tensor_bytes[t] = om_catalog_bytes(catalog, t);
        bytes[t] = (c->tensor_bytes[t] + granule - 1) / granule * granule;
    }
    for (uint32_t r = 0; r < ring; r++)
        bytes[n + r] = slot_bytes;

    om_policy_config pc = {bytes, n, c->resident_budget, NULL, 0, c->tensor_bytes};
    st = ops->create(&pc, &c->policy);
    if (st != ORTMEM_OK) {
        om_cache_free(c);
        return om_error_wrap(st, "%s: policy '%s'", what, ortmem_residency_policy_name(ops->kind));
    }
    ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
    ho.name = "weights";
    ho.role = ORTMEM_ROLE_WEIGHTS;
    ho.priority = o.priority;
    ho.on_pressure = om_residency_pressure;
    ho.user = c;
    ortmem_account account;
    st = ortmem_holder_register(authority, &ho, &c->holder);
    if (st == ORTMEM_OK)
        st = ortmem_holder_account(c->holder, &account);
    if (st == ORTMEM_OK)
        st = om_slots_create(authority, &account, bytes, n + ring, &c->slots);
    if (st != ORTMEM_OK) {
        om_error_saved saved;
        om_error_save(&saved);
        if (c->holder)
            (void)ortmem_holder_unregister(c->holder);
        ops->destroy(c->policy);
        om_cache_free(c);
        (void)om_error_restore(&saved, st);
        return om_error_wrap(st, "%s", what);
    }
    om_catalog_use(catalog);
    *out = c;
    return ORTMEM_OK;
}

ortmem_status ortmem_residency_cache_create(ortmem_authority *authority,
                                            ortmem_weight_catalog *catalog,
                                            const ortmem_residency_options *options,
                                            ortmem_residency_cache **out)
{
    om_error_clear();
    ortmem_status st = OM_STRUCT_CHECK("residency cache create", "options", options);
    if (st != ORTMEM_OK)
        return st;
    ortmem_residency_policy kind = options->policy;
    if ((unsigned)kind >= ORTMEM_RESIDENCY_POLICY_COUNT)
        return OM_ERR(ORTMEM_E_INVALID, "residency cache create: policy %d is not a policy",
                      (int)kind);
    const om_policy_ops *ops = om_policy_ops_of(kind);
    if (!ops)
        return OM_ERR(ORTMEM_E_UNSUPPORTED,
                      "residency cache create: policy '%s' is not built into this library",
                      ortmem_residency_policy_name(kind));
    return om_residency_cache_create_with_ops(authority, catalog, options, ops, out);
}

ortmem_status ortmem_residency_cache_destroy(ortmem_residency_cache *c)
{
    om_error_clear();
    if (!c)
        return OM_ERR(ORTMEM_E_INVALID, "residency cache destroy: cache is NULL");
    /* The weights holder's pressure callback names c: no pass may run it
     * once c is freed (refused, nothing changed, from inside such a pass). */
    ortmem_status st = om_holder_quiesce(c->holder, "residency cache destroy");
    if (st != ORTMEM_OK)
        return st;
    pthread_mutex_lock(&c->lock);
    uint32_t acquired = 0, pinned = 0;
    for (uint32_t t = 0; t < c->tensors; t++) {
        acquired += c->w[t].acquired + c->w[t].streamed_holds;
        pinned += c->w[t].pins;
    }
    if (acquired || pinned) {
        pthread_mutex_unlock(&c->lock);
        om_holder_unquiesce(c->holder);
        return OM_ERR(ORTMEM_E_BUSY,
                      "residency cache destroy: %u acquires not released and %u pins held",
                      acquired, pinned);
    }
    st = om_slots_destroy(c->slots);
    if (st == ORTMEM_E_BUSY) {
        pthread_mutex_unlock(&c->lock);
        om_holder_unquiesce(c->holder);
        return om_error_wrap(st, "residency cache destroy");
    }
    c->slots = NULL;
    om_error_saved saved;
    om_error_save(&saved);
    pthread_mutex_unlock(&c->lock);
    /* The holder's pressure callback names the cache: unregister before free. */
    ortmem_status un = ortmem_holder_unregister(c->holder);
    if (st == ORTMEM_OK && un != ORTMEM_OK) {
        st = un;
        om_error_save(&saved);
    }
    c->ops->destroy(c->policy);
    om_catalog_unuse(c->catalog);
    om_cache_free(c);
    if (st != ORTMEM_OK)
        return om_error_restore(&saved, st);
    return ORTMEM_OK;
}
