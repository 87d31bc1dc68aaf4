/* The residency policy seam: a policy proposes, the cache (or the simulator)
 * disposes. A policy sees tensor ids 0..tensors-1, their bytes and the
 * access stream; it never maps, copies nor evicts anything itself.
 * One line per primitive states its preconditions. */
#ifndef ORTMEM_OFFLOAD_POLICY_H
#define ORTMEM_OFFLOAD_POLICY_H

#include <ortmem/offload.h>

#include <stdbool.h>
#include <stdint.h>

/* What a policy is created over; the arrays outlive the policy (it may keep
 * the pointers). future/future_len: the whole access stream when it is known
 * in advance (required by BELADY, ignored by the others). */
typedef struct om_policy_config {
    const uint64_t *bytes; /* bytes[t] > 0, the tensor's resident size */
    uint32_t tensors;      /* >= 1 */
    uint64_t budget_bytes; /* > 0: resident bytes never exceed it */
    const uint32_t *future;
    uint64_t future_len;
    const uint64_t *value; /* value[t] in 1..bytes[t]: what a hit saves (the tensor's own
                              bytes before granule rounding); NULL: bytes */
} om_policy_config;

/* Asks the cache which resident tensors may go now (a tensor pinned by a
 * live graph or by the current access may not). */
typedef bool (*om_policy_evictable_fn)(void *ctx, uint32_t tensor);

#define OM_POLICY_NONE UINT32_MAX

typedef struct om_policy_ops {
    ortmem_residency_policy kind;
    /* config valid (as above); *state set on OK; detail on failure. */
    ortmem_status (*create)(const om_policy_config *config, void **state);
    /* state from create; called once. */
    void (*destroy)(void *state);
    /* tensor < tensors; pos = the access's index in the stream, increasing; resident = a hit. */
    void (*accessed)(void *state, uint32_t tensor, uint64_t pos, bool resident);
    /* after accessed(.., false): true = make the tensor resident, false = stream it. */
    bool (*admit)(void *state, uint32_t tensor, uint64_t pos);
    /* a resident tensor for which evictable says true, or OM_POLICY_NONE. */
    uint32_t (*victim)(void *state, uint64_t pos, om_policy_evictable_fn evictable, void *ctx);
    /* the cache made tensor resident / evicted it (the policy's view follows). */
    void (*inserted)(void *state, uint32_t tensor);
    void (*removed)(void *state, uint32_t tensor);
} om_policy_ops;

/* The ops of a policy, or NULL for a kind out of range. */
const om_policy_ops *om_policy_ops_of(ortmem_residency_policy kind);

#endif
