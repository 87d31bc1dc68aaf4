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

/* ---- Residency cache ---------------------------------------------------------
 * A weight catalog names the tensors an engine may touch (bytes, layer, role,
 * access order) and where their bytes live on the host: a read-only mmap of
 * the model file, or pinned host memory from a staging arena that the caller
 * fills. A residency cache gives every catalogued tensor a device slot whose
 * VA is reserved once and never changes; page-in commits the slot's extents
 * and copies host to device on a copy stream, eviction decommits them after a
 * fence (the VA stays). docs/memory/OFFLOAD.md. */

typedef struct ortmem_weight_catalog ortmem_weight_catalog;
typedef struct ortmem_staging ortmem_staging;
typedef struct ortmem_residency_cache ortmem_residency_cache;

typedef enum ortmem_weight_role {
    ORTMEM_WEIGHT_ATTENTION = 0,
    ORTMEM_WEIGHT_MLP,
    ORTMEM_WEIGHT_NORM,
    ORTMEM_WEIGHT_EMBEDDING,
    ORTMEM_WEIGHT_OUTPUT,
    ORTMEM_WEIGHT_OTHER,
    ORTMEM_WEIGHT_ROLE_COUNT
} ortmem_weight_role;

/* "attention", "mlp", "norm", "embedding", "output", "other"; "unknown" out of range. */
ORTMEM_API const char *ortmem_weight_role_name(ortmem_weight_role role);

/* One tensor of a catalog. name: unique, copied. offset: into the model file
 * (file catalogs; ignored for host ones). order: its place in the engine's
 * access order (decode order), for policies and traces. */
typedef struct ortmem_weight_tensor {
    const char *name;
    uint64_t offset;
    uint64_t bytes; /* > 0 */
    uint32_t layer;
    ortmem_weight_role role;
    uint32_t order;
} ortmem_weight_tensor;

/* What a file catalog checks at open (beyond every tensor lying inside the
 * file). The file's size and modification time are recorded at open and
 * checked again before every page-in: a truncated or changed file is then
 * refused instead of read. */
typedef struct ortmem_weight_file_options {
    size_t struct_size;
    uint64_t expected_file_bytes; /* 0 = any size */
    /* FNV-1a 64 of [checksum_offset, +checksum_bytes) (the file's tensor
     * table, say) must equal expected_checksum; checksum_bytes 0 = unchecked. */
    uint64_t checksum_offset, checksum_bytes;
    uint64_t expected_checksum;
} ortmem_weight_file_options;

#define ORTMEM_WEIGHT_FILE_OPTIONS_INIT                                                            \
    {                                                                                              \
        sizeof(ortmem_weight_file_options), 0, 0, 0, 0                                             \
    }

/* FNV-1a 64 of len bytes (the checksum ortmem_weight_file_options expects). */
ORTMEM_API uint64_t ortmem_weight_checksum(const void *bytes, size_t len);

/* Opens path read-only and maps it (PROT_READ, MAP_PRIVATE); every tensor
 * must lie inside the file (ORTMEM_E_RANGE naming the tensor, its end and the
 * file size), names must be unique (ORTMEM_E_INVALID). options may be NULL. */
ORTMEM_API ortmem_status ortmem_weight_catalog_open_file(const char *path,
                                                         const ortmem_weight_tensor *tensors,
                                                         size_t count,
                                                         const ortmem_weight_file_options *options,
                                                         ortmem_weight_catalog **out);

/* A catalog whose tensors' bytes live in pinned host memory allocated from
 * staging (offsets are ignored); the caller fills them through
 * ortmem_weight_catalog_host. staging must outlive the catalog. */
ORTMEM_API ortmem_status ortmem_weight_catalog_create_host(ortmem_staging *staging,
                                                           const ortmem_weight_tensor *tensors,
                                                           size_t count,
                                                           ortmem_weight_catalog **out);

/* ORTMEM_E_BUSY (nothing changes) while a residency cache uses it. */
ORTMEM_API ortmem_status ortmem_weight_catalog_destroy(ortmem_weight_catalog *catalog);

ORTMEM_API size_t ortmem_weight_catalog_count(const ortmem_weight_catalog *catalog);

/* The id (0..count-1, the order given at creation) of the tensor called name;
 * ORTMEM_E_NOT_FOUND naming it when there is none. */
ORTMEM_API ortmem_status ortmem_weight_catalog_find(const ortmem_weight_catalog *catalog,
                                                    const char *name, uint32_t *id);

/* The tensor's description (name valid while the catalog lives). */
ORTMEM_API ortmem_status ortmem_weight_catalog_tensor(const ortmem_weight_catalog *catalog,
                                                      uint32_t id, ortmem_weight_tensor *tensor);

/* The tensor's host bytes: writable for a host catalog (fill them before the
 * first page-in), read-only (the mapped file) for a file catalog. */
ORTMEM_API ortmem_status ortmem_weight_catalog_host(ortmem_weight_catalog *catalog, uint32_t id,
                                                    void **host);

/* ORTMEM_OK when a file catalog's file still has the size and modification
 * time it had at open (host catalogs: always); otherwise ORTMEM_E_IO naming
 * the numbers. */
ORTMEM_API ortmem_status ortmem_weight_catalog_verify(ortmem_weight_catalog *catalog);

/* ---- Pinned staging ----
 * A jemalloc arena whose extent hooks hand out host memory in large chunks,
 * each pinned once when it is mapped (register) and unpinned when the
 * staging is destroyed. jemalloc is a private, renamed copy inside ortmem: the
 * process's malloc is never replaced (docs/memory/OFFLOAD.md, Pinned
 * staging). ORTMEM_E_UNAVAILABLE where ortmem was built without it. */

/* Pins (registers) a chunk of host memory with the device, e.g. a wrapper
 * of cuMemHostRegister; unregister undoes it. */
typedef ortmem_status (*ortmem_host_register_fn)(void *user, void *ptr, size_t bytes);
typedef void (*ortmem_host_unregister_fn)(void *user, void *ptr, size_t bytes);

typedef struct ortmem_staging_options {
    size_t struct_size;
    size_t chunk_bytes; /* host memory mapped and pinned at a time; 0 = 64 MiB */
    int numa_node;      /* hwloc NUMA node (the GPU's) to bind chunks to; -1 = none */
    /* NULL: chunks are not registered (the CPU backend needs nothing), or
     * mlocked when lock_pages is non-zero. */
    ortmem_host_register_fn host_register;
    ortmem_host_unregister_fn host_unregister;
    void *user;
    int lock_pages;
} ortmem_staging_options;

#define ORTMEM_STAGING_OPTIONS_INIT                                                                \
    {                                                                                              \
        sizeof(ortmem_staging_options), 0, -1, NULL, NULL, NULL, 0                                 \
    }

typedef struct ortmem_staging_stats {
    size_t struct_size;
    uint64_t chunks;          /* chunks mapped and pinned */
    uint64_t chunk_bytes;     /* their bytes */
    uint64_t allocated_bytes; /* live allocations, as asked */
    uint64_t allocations;     /* live */
} ortmem_staging_stats;

/* options may be NULL for the defaults. */
ORTMEM_API ortmem_status ortmem_staging_create(const ortmem_staging_options *options,
                                               ortmem_staging **out);
/* ORTMEM_E_BUSY (nothing changes) while allocations are live. */
ORTMEM_API ortmem_status ortmem_staging_destroy(ortmem_staging *staging);
/* align: power of two, 0 = 64. */
ORTMEM_API ortmem_status ortmem_staging_alloc(ortmem_staging *staging, size_t bytes, size_t align,
                                              void **ptr);
ORTMEM_API ortmem_status ortmem_staging_free(ortmem_staging *staging, void *ptr);
ORTMEM_API ortmem_status ortmem_staging_stats_get(ortmem_staging *staging,
                                                  ortmem_staging_stats *stats);

/* ---- The cache ----*/
typedef struct ortmem_residency_options {
    size_t struct_size;
    ortmem_residency_policy policy;
    /* Device bytes the cache may map: resident slots plus the ring, each
     * rounded up to the granule. Below the largest tensor's slot (ring
     * included) is refused at create. */
    uint64_t budget_bytes;
    uint32_t ring_slots;     /* slots that streamed tensors pass through; 0 = 2 */
    uint64_t copy_stream;    /* stream the host-to-device copies go on (0 = default) */
    uint64_t compute_stream; /* stream an eviction (its fence) and a ring refill wait for */
    int priority;            /* of the cache's weights holder */
    /* Bytes of one ring slot; 0 = the largest tensor's (every tensor can
     * stream). Smaller: the ring costs less of the budget, and a tensor
     * larger than a ring slot must be resident when acquired (pin it); a
     * budget where the largest such tensor fits neither is refused at create. */
    uint64_t ring_slot_bytes;
} ortmem_residency_options;

#define ORTMEM_RESIDENCY_OPTIONS_INIT                                                              \
    {                                                                                              \
        sizeof(ortmem_residency_options), ORTMEM_RESIDENCY_SCAN_RESISTANT, 0, 0, 0, 0, 0, 0        \
    }

typedef struct ortmem_residency_stats {
    size_t struct_size;
    uint64_t hits, misses; /* acquires served without a copy (resident, or sharing the ring
                              slot the tensor is acquired in) / with one */
    uint64_t hit_bytes, miss_bytes;
    uint64_t page_ins;        /* tensors copied into their own slot */
    uint64_t evictions;       /* slots decommitted (policy, pressure or unpin) */
    uint64_t bytes_moved;     /* host-to-device bytes copied (page-ins and streams) */
    uint64_t streamed;        /* misses served through a ring slot */
    uint64_t stalls;          /* acquires that waited: on a copy event, a pending eviction, or a
                                 ring slot's last reader on the compute stream */
    uint64_t resident_bytes;  /* slot bytes mapped for resident tensors */
    uint64_t ring_bytes;      /* ring slot bytes mapped */
    uint64_t retiring_bytes;  /* evicted slots whose fence-ordered decommit is pending */
    uint64_t refusals;        /* acquires refused (budget, pins, file checks) */
    uint64_t reclaimed_bytes; /* given back under pressure */
    uint64_t stall_ns;        /* time the stalls took: acquires waiting for copies to land,
                                 for a ring slot's last reader, for pending evictions */
} ortmem_residency_stats;

/* Reserves a slot per catalogued tensor (one region, one granule-aligned
 * slot each) and the ring, and registers a holder "weights" of role
 * ORTMEM_ROLE_WEIGHTS that is reclaimable: pressure evicts cold (unpinned,
 * unacquired) weights. The catalog stays in use until destroy. */
ORTMEM_API ortmem_status ortmem_residency_cache_create(ortmem_authority *authority,
                                                       ortmem_weight_catalog *catalog,
                                                       const ortmem_residency_options *options,
                                                       ortmem_residency_cache **out);
/* ORTMEM_E_BUSY (nothing changes) while a tensor is acquired or pinned, or
 * an eviction is still pending after a second. Decommits
 * everything, unreserves, unregisters the holder. */
ORTMEM_API ortmem_status ortmem_residency_cache_destroy(ortmem_residency_cache *cache);

/* Makes tensor readable on the device and sets *device_ptr: its own slot
 * when resident (a hit copies nothing) or admitted, else a ring slot
 * (streamed). The bytes have landed when it returns. The tensor stays put
 * until ortmem_residency_release. ORTMEM_E_BUDGET naming the numbers when
 * room cannot be made (everything resident is pinned or acquired).
 * A tensor's outstanding acquires are in one place at a time: while it has
 * acquires not released in a ring slot, a further acquire returns that same
 * slot and counts one more there (a hit: nothing is copied), even if the
 * tensor was pinned resident meanwhile; once they are all released, acquires
 * use its own slot again. */
ORTMEM_API ortmem_status ortmem_residency_acquire(ortmem_residency_cache *cache, uint32_t tensor,
                                                  void **device_ptr);
/* Ends one acquire of tensor, wherever its acquires are (its ring slot while
 * it has acquires there, else its own slot); which caller releases does not
 * matter, as all of them read the same slot. The release of a ring slot's
 * last acquire records an event on compute_stream: the slot is refilled only
 * once that event has completed, so kernels enqueued before the release may
 * still read it. ORTMEM_E_STATE when the tensor is not acquired. */
ORTMEM_API ortmem_status ortmem_residency_release(ortmem_residency_cache *cache, uint32_t tensor);

/* Pins a tensor resident (paging it in when it is not): never evicted until
 * unpinned. A captured graph that references the slot pins it. */
ORTMEM_API ortmem_status ortmem_residency_pin(ortmem_residency_cache *cache, uint32_t tensor);
ORTMEM_API ortmem_status ortmem_residency_unpin(ortmem_residency_cache *cache, uint32_t tensor);

/* Evicts a resident tensor now (fence-ordered decommit, the VA stays).
 * ORTMEM_E_BUSY naming the pins for a pinned or acquired tensor. */
ORTMEM_API ortmem_status ortmem_residency_evict(ortmem_residency_cache *cache, uint32_t tensor);

/* The tensor's own slot: the same pointer for the cache's whole life,
 * resident or not. */
/* The region a tensor's slot lies in, the slot's offset and bytes (granule-
 * rounded) and the tensor's name (name may be NULL; it lives as long as the
 * catalog): what a graph signature records for a captured graph that reads
 * the slot (ortmem_graph_signature_add_slot in capture.h). */
ORTMEM_API ortmem_status ortmem_residency_slot_range(ortmem_residency_cache *cache, uint32_t tensor,
                                                     ortmem_region **region, size_t *offset,
                                                     size_t *len, const char **name);
ORTMEM_API ortmem_status ortmem_residency_slot(ortmem_residency_cache *cache, uint32_t tensor,
                                               void **device_ptr);

/* Non-zero when the tensor's slot is mapped with its bytes. */
ORTMEM_API int ortmem_residency_is_resident(ortmem_residency_cache *cache, uint32_t tensor);

ORTMEM_API ortmem_status ortmem_residency_stats_get(ortmem_residency_cache *cache,
                                                    ortmem_residency_stats *stats);

/* The cache's weights holder (for reports; never unregister it). */
ORTMEM_API ortmem_holder *ortmem_residency_holder(ortmem_residency_cache *cache);

#ifdef __cplusplus
}
#endif

#endif /* ORTMEM_OFFLOAD_H */
