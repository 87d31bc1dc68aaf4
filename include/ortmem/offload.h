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
    ORTMEM_RESIDENCY_ADAPTIVE,       /* LRU or bimodal insertion, whichever hit more bytes */
    ORTMEM_RESIDENCY_BELADY,         /* the oracle over a known trace (MIN for equal sizes) */
    ORTMEM_RESIDENCY_POLICY_COUNT
} ortmem_residency_policy;

ORTMEM_API const char *ortmem_residency_policy_name(ortmem_residency_policy policy);
ORTMEM_API ortmem_status ortmem_residency_policy_parse(const char *name,
                                                       ortmem_residency_policy *policy);

/* A simulation's counters. Hit, miss and moved bytes are the tensors' own
 * bytes (what a copy moves); resident bytes are rounded up to the granule
 * (what a slot commits). Byte hit rate = hit_bytes / (hit_bytes +
 * miss_bytes); count hit rate = hits / accesses. */
typedef struct ortmem_residency_sim_stats {
    size_t struct_size;
    uint64_t accesses;
    uint64_t hits;   /* the tensor was resident */
    uint64_t misses; /* = page_ins + streamed */
    uint64_t hit_bytes;
    uint64_t miss_bytes;
    uint64_t page_ins;            /* misses admitted into a resident slot */
    uint64_t evictions;           /* resident tensors evicted to make room */
    uint64_t bytes_moved;         /* host to device: every miss's bytes */
    uint64_t streamed;            /* misses served through a ring slot, not admitted */
    uint64_t peak_resident_bytes; /* granule-rounded, <= the budget */
    uint64_t weights_bytes;       /* every tensor granule-rounded, the 100% of a budget sweep */
} ortmem_residency_sim_stats;

/* One access as the simulation disposed of it, for observers. */
typedef struct ortmem_residency_step {
    uint64_t pos; /* index in the trace */
    uint32_t tensor;
    int hit;                 /* resident when accessed */
    int admitted;            /* a miss paged in; a miss with 0 here streamed */
    uint32_t evicted;        /* tensors evicted for this access */
    uint64_t resident_bytes; /* after the access, granule-rounded */
} ortmem_residency_step;

typedef void (*ortmem_residency_step_fn)(void *ctx, const ortmem_residency_step *step);

/* Replays trace (tensor ids < count, trace_len of them) against policy under
 * budget_bytes of device memory, pure: nothing is mapped or copied. A tensor
 * occupies tensor_bytes[t] rounded up to granule (> 0). The ring a streamed
 * tensor passes through is the cache's own, outside the budget. BELADY
 * reads the trace as its known future. ORTMEM_E_INVALID: a NULL array, zero
 * count or granule, a tensor of zero bytes, an unknown policy;
 * ORTMEM_E_RANGE: a trace id not below count, or a budget below the largest
 * rounded tensor (both named); ORTMEM_E_OVERFLOW: sizes past 64 bits. On
 * failure *stats is untouched. */
ORTMEM_API ortmem_status ortmem_residency_simulate(const uint64_t *tensor_bytes, uint32_t count,
                                                   const uint32_t *trace, uint64_t trace_len,
                                                   uint64_t granule, uint64_t budget_bytes,
                                                   ortmem_residency_policy policy,
                                                   ortmem_residency_sim_stats *stats);

/* The same, calling step (may be NULL) after every access, in order. */
ORTMEM_API ortmem_status ortmem_residency_simulate_steps(
    const uint64_t *tensor_bytes, uint32_t count, const uint32_t *trace, uint64_t trace_len,
    uint64_t granule, uint64_t budget_bytes, ortmem_residency_policy policy,
    ortmem_residency_sim_stats *stats, ortmem_residency_step_fn step, void *ctx);

/* ---- Residency cache ---------------------------------------------------------*/

#ifdef __cplusplus
}
#endif

#endif /* ORTMEM_OFFLOAD_H */
