/* Fences inside governance: retirements count on them. */
#ifndef ORTMEM_SRC_GOVERNANCE_FENCE_H
#define ORTMEM_SRC_GOVERNANCE_FENCE_H

#include <stdbool.h>
#include <ortmem/governance.h>

/* Whether the fence completed; runs its query (if any) without any lock. */
bool om_fence_complete(ortmem_fence *fence);
/* A retirement starts or stops waiting on the fence. */
void om_fence_pin(ortmem_fence *fence);
void om_fence_unpin(ortmem_fence *fence);

#endif
