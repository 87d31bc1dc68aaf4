/* Internal to src/offload: the residency cache's state, shared by its
 * decisions (residency.c) and its lifecycle (residency_lifecycle.c), and the
 * entry that creates it over any policy ops (a test double, or a policy not
 * in the table yet). */
#ifndef ORTMEM_OFFLOAD_RESIDENCY_H
#define ORTMEM_OFFLOAD_RESIDENCY_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "offload/policy.h"
#include "offload/slots.h"

typedef struct om_weight {
    uint32_t pins;           /* pin/unpin: never evicted while > 0 */
    uint32_t acquired;       /* acquires of its own slot not released yet */
    uint32_t streamed_holds; /* acquires served through its ring slot not released yet */
    uint32_t ring_slot;      /* the ring slot they share, while streamed_holds > 0 */
    bool resident;           /* its slot holds its bytes (the policy was told) */
    bool stale; /* its slot stayed mapped after a failed page-in, its bytes not all there:
                   counted with retiring_bytes until decommitted or refilled */
} om_weight;

typedef struct om_ring_slot {
    uint32_t tensor;
    uint32_t acquired; /* acquires of tensor served here not released yet; 0 = free */
} om_ring_slot;

struct ortmem_residency_cache {
    pthread_mutex_t lock;
    ortmem_authority *authority;
    ortmem_weight_catalog *catalog;
    const om_policy_ops *ops;
    void *policy;
    ortmem_holder *holder;
    om_slots *slots;
    uint32_t tensors, ring; /* ring slot r is slot tensors + r */
    uint32_t ring_next;
    om_weight *w;
    om_ring_slot *rings;
    uint64_t *slot_bytes;   /* per slot (tensors, then ring); the policy may keep the pointer */
    uint64_t *tensor_bytes; /* per tensor, unrounded: what a hit saves (the policy's value) */
    uint64_t budget, resident_budget, ring_slot_bytes;
    uint64_t retiring_bytes; /* tensor slots whose decommit is pending */
    uint64_t emptied_bytes;  /* tensor and ring slot bytes decommitted, ever */
    uint64_t pos;            /* accesses so far */
    uint32_t current;        /* the tensor being acquired or pinned */
    ortmem_residency_options o;
    ortmem_residency_stats stats;
};

/* The weights holder's pressure callback: evicts cold (unpinned, unacquired)
 * weights until want bytes came back (residency.c). */
uint64_t om_residency_pressure(void *user, uint64_t want);

/* As ortmem_residency_cache_create with ops in place of options->policy
 * (ops must outlive the cache). */
ortmem_status om_residency_cache_create_with_ops(ortmem_authority *authority,
                                                 ortmem_weight_catalog *catalog,
                                                 const ortmem_residency_options *options,
                                                 const om_policy_ops *ops,
                                                 ortmem_residency_cache **out);

#endif
