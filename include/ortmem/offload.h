/* ortmem offload: weights that do not fit the device budget live on the host
 * and are paged into stable-VA slots by a residency cache; which tensors stay
 * resident is a policy's proposal (docs/memory/OFFLOAD.md).
 *
 * Two parts: residency policies and their simulation (pure, no memory is
 * touched), and the residency cache over a weight catalog. */
#ifndef ORTMEM_OFFLOAD_H
#define ORTMEM_OFFLOAD_H

#include <ortmem/core.h>
#include <ortmem/governance.h>
#include <ortmem/kv.h>
#include <ortmem/vmm.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Residency policies ------------------------------------------------------
 * The policy proposes (admit a missed tensor or stream it; which resident
 * tensor to evict), the cache disposes (maps, copies, evicts, or refuses). */
typedef enum ortmem_residency_policy {
    ORTMEM_RESIDENCY_LRU = 0,        /* admit every miss, evict the least recently used */
    ORTMEM_RESIDENCY_SCAN_RESISTANT, /* keep a stable subset that fits, stream the rest */
    ORTMEM_RESIDENCY_ADAPTIVE,       /* recency and frequency balanced by what misses */
    ORTMEM_RESIDENCY_BELADY,         /* offline optimum over a known access trace */
    ORTMEM_RESIDENCY_POLICY_COUNT
} ortmem_residency_policy;

ORTMEM_API const char *ortmem_residency_policy_name(ortmem_residency_policy policy);
ORTMEM_API ortmem_status ortmem_residency_policy_parse(const char *name,
                                                       ortmem_residency_policy *policy);

/* ---- Residency cache ---------------------------------------------------------*/

#ifdef __cplusplus
}
#endif

#endif /* ORTMEM_OFFLOAD_H */
