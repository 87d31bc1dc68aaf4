/* ortmem vmm: backends, regions, the physical pool, the ledger and the arena.
 *
 * A backend is the mechanism: it reserves virtual address (VA) ranges, creates
 * physical granules, maps them and sets access. A region is a reserved VA range
 * divided into granules that are committed (mapped) only where bytes are live.
 * The ledger counts owned bytes (physical granules, once each) and mapped bytes
 * (per mapping; an alias counts again) for every backend handle.
 *
 * Thread safety: every function here is thread-safe unless stated otherwise.
 * Operations on one region are serialised; different regions run in parallel.
 * Destroying a handle while another thread still uses it is answered with
 * ORTMEM_E_HANDLE on that thread, never a crash. */
#ifndef ORTMEM_VMM_H
#define ORTMEM_VMM_H

#include <ortmem/core.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ortmem_backend ortmem_backend;
typedef struct ortmem_region ortmem_region;
typedef struct ortmem_arena ortmem_arena;

typedef enum ortmem_access {
    ORTMEM_ACCESS_NONE = 0,
    ORTMEM_ACCESS_READ = 1,
    ORTMEM_ACCESS_READ_WRITE = 3
} ortmem_access;

/* The backend operations, in the order the ledger counts them. */
typedef enum ortmem_backend_op {
    ORTMEM_OP_RESERVE = 0,
    ORTMEM_OP_UNRESERVE,
    ORTMEM_OP_CREATE,
    ORTMEM_OP_RELEASE,
    ORTMEM_OP_MAP,
    ORTMEM_OP_UNMAP,
    ORTMEM_OP_SET_ACCESS,
    ORTMEM_OP_EXPORT,
    ORTMEM_OP_IMPORT,
    ORTMEM_OP_COPY,
    ORTMEM_OP_COPY_ASYNC,
    ORTMEM_OP_MEMSET_ASYNC,
    ORTMEM_OP_EVENT_RECORD,
    ORTMEM_OP_EVENT_QUERY,
    ORTMEM_OP_EVENT_DESTROY,
    ORTMEM_OP_COUNT,
    ORTMEM_OP_ANY = ORTMEM_OP_COUNT /* fault injection: every operation */
} ortmem_backend_op;

/* "reserve", "create", ...; "any" for ORTMEM_OP_ANY; NULL when out of range. */
ORTMEM_API const char *ortmem_backend_op_name(ortmem_backend_op op);
/* Parses a name produced by ortmem_backend_op_name. */
ORTMEM_API ortmem_status ortmem_backend_op_parse(const char *name, ortmem_backend_op *op);

/* Physical granule creation flags. */
#define ORTMEM_CREATE_EXPORTABLE 0x1u /* can be exported as a file descriptor */

/* ---- The backend seam -------------------------------------------------------
 * One primitive per operation. `self` is the pointer given at creation. Sizes
 * and VAs are multiples of the minimum granularity unless stated. A primitive
 * that fails changes nothing and sets a detail with ortmem_error_set. */
typedef struct ortmem_backend_ops {
    size_t struct_size; /* sizeof(ortmem_backend_ops) as the caller knows it */
    const char *name;   /* "cpu", "cuda", "fault(cpu)" */
    /* Minimum and recommended granule, both powers of two, recommended >= minimum. */
    ortmem_status (*granularity)(void *self, size_t *minimum, size_t *recommended);
    /* Reserves size bytes of VA aligned to alignment; nothing is mapped. */
    ortmem_status (*reserve)(void *self, size_t size, size_t alignment, uintptr_t *va);
    /* Returns a whole reservation; nothing in it may be mapped. */
    ortmem_status (*unreserve)(void *self, uintptr_t va, size_t size);
    /* Creates one physical extent of size bytes, size = k * granule with k >= 1
     * (flags ORTMEM_CREATE_*); map always maps a whole handle at offset 0. */
    ortmem_status (*create)(void *self, size_t size, unsigned flags, uint64_t *handle);
    /* Releases a physical granule that is mapped nowhere. */
    ortmem_status (*release)(void *self, uint64_t handle);
    /* Maps size bytes of handle, from handle_offset, at va; access stays NONE. */
    ortmem_status (*map)(void *self, uintptr_t va, size_t size, uint64_t handle,
                         size_t handle_offset);
    /* Unmaps a run of mapped granules (any handles); the VA stays reserved. */
    ortmem_status (*unmap)(void *self, uintptr_t va, size_t size);
    /* Sets access over a run of mapped granules. */
    ortmem_status (*set_access)(void *self, uintptr_t va, size_t size, ortmem_access access);
    /* Optional (NULL = ORTMEM_E_UNSUPPORTED). Exports a granule created
     * exportable as a new file descriptor the caller owns. */
    ortmem_status (*export_fd)(void *self, uint64_t handle, int *fd);
    /* Optional. Imports a granule of size bytes from fd (fd is not consumed). */
    ortmem_status (*import_fd)(void *self, int fd, size_t size, uint64_t *handle);
    /* Optional. Copies size bytes between mapped, accessible VAs; synchronous. */
    ortmem_status (*copy)(void *self, uintptr_t dst, uintptr_t src, size_t size);
    /* Frees self. Called once, by ortmem_backend_destroy. */
    void (*destroy)(void *self);
    /* ---- Optional stream-ordered slots (NULL = ORTMEM_E_UNSUPPORTED). A stream
     * is the engine's own stream handle as an integer (a CUstream on CUDA);
     * 0 is the backend's default stream (CUDA's legacy default stream). An
     * event is a value the backend hands out; the caller destroys it. */
    /* Enqueues a copy of size bytes (any size) between addresses the backend
     * reaches; returns once enqueued. */
    ortmem_status (*copy_async)(void *self, uintptr_t dst, uintptr_t src, size_t size,
                                uint64_t stream);
    /* Enqueues setting size bytes at dst to (unsigned char)value. */
    ortmem_status (*memset_async)(void *self, uintptr_t dst, int value, size_t size,
                                  uint64_t stream);
    /* Creates an event that completes when the work enqueued on stream so far has. */
    ortmem_status (*event_record)(void *self, uint64_t stream, uint64_t *event);
    /* ORTMEM_OK once the event completed, ORTMEM_E_BUSY while it is pending. */
    ortmem_status (*event_query)(void *self, uint64_t event);
    /* Destroys an event (pending or not); it is never named again. */
    ortmem_status (*event_destroy)(void *self, uint64_t event);
} ortmem_backend_ops;

/* Wraps a custom backend. ops is copied; self is owned by the new handle and
 * freed through ops->destroy. Required slots: granularity through set_access. */
ORTMEM_API ortmem_status ortmem_backend_create(const ortmem_backend_ops *ops, void *self,
                                               ortmem_backend **out);

/* Destroys a backend. ORTMEM_E_BUSY (nothing changes) while regions, arenas or
 * wrapping backends still use it. Pooled granules are released first;
 * quarantined granules are deliberately leaked and reported with
 * ORTMEM_E_QUARANTINED (the handle is destroyed either way). */
ORTMEM_API ortmem_status ortmem_backend_destroy(ortmem_backend *backend);

ORTMEM_API const char *ortmem_backend_name(const ortmem_backend *backend);

/* The granule regions on this backend use (the recommended granularity). */
ORTMEM_API ortmem_status ortmem_backend_granule(ortmem_backend *backend, size_t *granule);

/* ---- Wrapping and extending backends ----------------------------------------
 * What a custom backend needs beyond ortmem_backend_create: forwarding to
 * another backend (the fault-injection backend wraps one; so may an engine's
 * tracing or throttling wrapper), and reaching its own state through the
 * handle for functions of its own (options, counters). */

/* Fills calls with a vtable that calls into backend the way a region does:
 * each call is counted in backend's ledger (calls[op], failures[op]), a
 * failure's detail is prefixed with backend's name and operation, and events
 * are tracked on backend. Call every slot with backend itself as self.
 * calls->name is backend's name; granularity reports backend's minimum and
 * recommended granule (not counted); optional slots are NULL where backend
 * lacks them, the three event slots all or none; destroy is NULL (a wrapper
 * never destroys what it wraps). The slots are valid while backend lives:
 * create the wrapper with ortmem_backend_create_wrapper, which keeps it alive. */
ORTMEM_API ortmem_status ortmem_backend_forwarding_ops(ortmem_backend *backend,
                                                       ortmem_backend_ops *calls);

/* As ortmem_backend_create, for a backend that forwards to inner: inner stays
 * alive until the wrapper is destroyed (ortmem_backend_destroy of inner
 * answers ORTMEM_E_BUSY until then). On failure nothing was created and self
 * is still the caller's. */
ORTMEM_API ortmem_status ortmem_backend_create_wrapper(ortmem_backend *inner,
                                                       const ortmem_backend_ops *ops, void *self,
                                                       ortmem_backend **out);

/* Runs fn(self, ops, arg) and returns its status, where self and ops are what
 * backend was created with (ops as copied then; ops->name never NULL). fn
 * recognises its own backends by a slot (ops->reserve == my_reserve) and
 * answers ORTMEM_E_HANDLE for others. The backend stays pinned while fn runs:
 * a concurrent ortmem_backend_destroy waits for fn to return, so fn must not
 * destroy it. ORTMEM_E_INVALID or ORTMEM_E_HANDLE, without calling fn, for a
 * NULL, foreign or destroyed backend. */
ORTMEM_API ortmem_status ortmem_backend_visit(
    ortmem_backend *backend,
    ortmem_status (*fn)(void *self, const ortmem_backend_ops *ops, void *arg), void *arg);

/* ---- Streams and events -----------------------------------------------------
 * Stream-ordered work through the backend's optional slots, counted in the
 * ledger like every other call (ORTMEM_OP_COPY_ASYNC ... EVENT_DESTROY).
 * ORTMEM_E_UNSUPPORTED when the backend lacks the slot. stream: the engine's
 * stream (a CUstream cast to an integer on CUDA), 0 = the default stream. The
 * CPU backend works synchronously and its events complete at once. Events
 * are tracked per backend handle: querying or destroying a value this backend
 * did not hand out (or already destroyed) is ORTMEM_E_NOT_FOUND and never
 * reaches the driver; events still live at ortmem_backend_destroy are
 * destroyed then. Thread-safe. */
ORTMEM_API ortmem_status ortmem_backend_copy_async(ortmem_backend *backend, void *dst,
                                                   const void *src, size_t len, uint64_t stream);
ORTMEM_API ortmem_status ortmem_backend_memset_async(ortmem_backend *backend, void *dst, int value,
                                                     size_t len, uint64_t stream);
/* *event receives a new event after the work enqueued on stream so far. */
ORTMEM_API ortmem_status ortmem_backend_event_record(ortmem_backend *backend, uint64_t stream,
                                                     uint64_t *event);
/* ORTMEM_OK when the event completed, ORTMEM_E_BUSY while pending (not counted
 * as a failure). */
ORTMEM_API ortmem_status ortmem_backend_event_query(ortmem_backend *backend, uint64_t event);
ORTMEM_API ortmem_status ortmem_backend_event_destroy(ortmem_backend *backend, uint64_t event);

/* ---- CPU backend ------------------------------------------------------------
 * VA from mmap(PROT_NONE, MAP_NORESERVE); physical granules are pre-allocated
 * extents of one memfd (or their own memfd when exportable); release punches a
 * hole so memory returns to the OS; access is mprotect. */
typedef struct ortmem_cpu_options {
    size_t struct_size;
    size_t granule; /* bytes; power of two >= page size; 0 = 2 MiB */
    int numa_node;  /* hwloc NUMA node to allocate granules on; -1 = no binding */
    int populate;   /* non-zero: page tables filled at set-access (MADV_POPULATE_WRITE,
                         Linux 5.14+; ORTMEM_E_UNSUPPORTED at create where missing) */
} ortmem_cpu_options;

#define ORTMEM_CPU_OPTIONS_INIT                                                                    \
    {                                                                                              \
        sizeof(ortmem_cpu_options), 0, -1, 0                                                       \
    }

/* options may be NULL for the defaults. */
ORTMEM_API ortmem_status ortmem_cpu_backend_create(const ortmem_cpu_options *options,
                                                   ortmem_backend **out);

/* ---- CUDA backend -----------------------------------------------------------
 * The CUDA driver's virtual memory management on one device. libcuda.so.1 is
 * opened at run time (dlopen) and every entry point is resolved through
 * cuGetProcAddress, so ortmem builds and runs where there is no GPU, no driver
 * and no CUDA headers; creation then fails with ORTMEM_E_UNAVAILABLE and a
 * detail naming why (built without CUDA headers, the dlopen error, cuInit's
 * error name). The device's primary context is retained at creation and bound
 * around every driver call on the calling thread (the thread's previous
 * context is restored afterwards), so any thread may use the backend.
 *
 * Primitives: cuMemGetAllocationGranularity (MINIMUM and RECOMMENDED),
 * cuMemAddressReserve/Free, cuMemCreate (pinned, on the device; handle type
 * POSIX_FILE_DESCRIPTOR when exportable), cuMemRelease, cuMemMap, cuMemUnmap,
 * cuMemSetAccess (READ, READ_WRITE), cuMemExportToShareableHandle,
 * cuMemImportFromShareableHandle, cuMemcpy (between any addresses, host
 * memory included, then cuStreamSynchronize of the legacy default stream so
 * that the copy has landed when it returns), cuMemcpyAsync, cuMemsetD8Async and
 * events (cuEventCreate with DISABLE_TIMING, cuEventRecord, cuEventQuery,
 * cuEventDestroy). A driver error becomes ORTMEM_E_BACKEND (ORTMEM_E_NOMEM
 * for CUDA_ERROR_OUT_OF_MEMORY) with cuGetErrorName, cuGetErrorString and the
 * numbers in the detail.
 *
 * Access NONE is ORTMEM_E_UNSUPPORTED: a fresh mapping starts with no access,
 * but cuMemSetAccess cannot take access back once granted; revoking means
 * unmapping, which is what decommit does. Device memory is not host memory:
 * only the backend's copy primitives (or kernels) may touch it. */
typedef enum ortmem_cuda_export {
    ORTMEM_CUDA_EXPORT_ON_REQUEST = 0, /* POSIX fd handle type for ORTMEM_CREATE_EXPORTABLE only */
    ORTMEM_CUDA_EXPORT_ALWAYS,         /* every granule is created exportable */
    ORTMEM_CUDA_EXPORT_NEVER           /* exportable creation is ORTMEM_E_UNSUPPORTED */
} ortmem_cuda_export;

typedef enum ortmem_cuda_granularity {
    ORTMEM_CUDA_GRANULE_RECOMMENDED = 0, /* regions use CU_MEM_ALLOC_GRANULARITY_RECOMMENDED */
    ORTMEM_CUDA_GRANULE_MINIMUM          /* regions use CU_MEM_ALLOC_GRANULARITY_MINIMUM */
} ortmem_cuda_granularity;

/* cuGetProcAddress's CUDA 12+ signature in plain C types (CUresult and
 * CUdriverProcAddressQueryResult are int-sized enums). */
typedef int (*ortmem_cuda_get_proc_address_fn)(const char *symbol, void **pfn, int cuda_version,
                                               uint64_t flags, int *symbol_status);

typedef struct ortmem_cuda_options {
    size_t struct_size;
    int ordinal;                         /* CUDA device ordinal (cuDeviceGet) */
    ortmem_cuda_export exportable;       /* when granules get the POSIX fd handle type */
    ortmem_cuda_granularity granularity; /* which driver granularity regions use */
    size_t granule; /* bytes; 0 = per granularity; else a power of two >= the minimum */
    /* NULL: dlopen libcuda.so.1 and dlsym cuGetProcAddress_v2. Otherwise the
     * resolver to use instead (a driver the engine loaded itself, or a test
     * double); every entry point is still resolved through it. */
    ortmem_cuda_get_proc_address_fn get_proc_address;
} ortmem_cuda_options;

#define ORTMEM_CUDA_OPTIONS_INIT                                                                   \
    {                                                                                              \
        sizeof(ortmem_cuda_options), 0, ORTMEM_CUDA_EXPORT_ON_REQUEST,                             \
            ORTMEM_CUDA_GRANULE_RECOMMENDED, 0, NULL                                               \
    }

/* options may be NULL for the defaults (device 0). ORTMEM_E_UNAVAILABLE (with
 * the reason) where the driver, a device or the headers at build time are
 * missing; ORTMEM_E_RANGE for an ordinal the driver does not have. */
ORTMEM_API ortmem_status ortmem_cuda_backend_create(const ortmem_cuda_options *options,
                                                    ortmem_backend **out);

/* ---- Fault-injection backend ------------------------------------------------
 * Wraps another backend and fails chosen calls before they reach it, so every
 * failure path above it can be driven. An injected failure returns
 * ORTMEM_E_BACKEND and the inner backend is not called. Optional slots
 * (export, import, copy, the stream and event slots) exist on the wrapper
 * exactly when the inner backend has them. */
typedef struct ortmem_fault_options {
    size_t struct_size;
    ortmem_backend_op op; /* which operation is counted and failed; ORTMEM_OP_ANY = all */
    uint64_t fail_at;     /* fail the Nth counted call (1-based); 0 = never */
    double probability;   /* in addition, fail each counted call with this probability */
    uint64_t seed;        /* seed for probability (deterministic) */
    /* Non-zero: every counted call from the fail_at-th on fails, until the
     * wrapper is re-armed (needs fail_at >= 1). 0: only the fail_at-th fails. */
    int persistent;
} ortmem_fault_options;

#define ORTMEM_FAULT_OPTIONS_INIT                                                                  \
    {                                                                                              \
        sizeof(ortmem_fault_options), ORTMEM_OP_ANY, 0, 0.0, 1, 0                                  \
    }

/* The wrapper keeps inner alive: inner cannot be destroyed before it. */
ORTMEM_API ortmem_status ortmem_fault_backend_create(ortmem_backend *inner,
                                                     const ortmem_fault_options *options,
                                                     ortmem_backend **out);
/* Re-arms the wrapper with new options and zeroes its counted calls (this is
 * what ends a persistent failure). */
ORTMEM_API ortmem_status ortmem_fault_backend_arm(ortmem_backend *fault,
                                                  const ortmem_fault_options *options);
/* Calls counted so far (for the armed op) and failures injected so far. */
ORTMEM_API ortmem_status ortmem_fault_backend_counts(ortmem_backend *fault, uint64_t *calls,
                                                     uint64_t *injected);

/* ---- Extents ----------------------------------------------------------------
 * A physical extent is one backend handle of k granules (k >= 1): one
 * cuMemCreate on CUDA, one memfd extent on the CPU. The driver's commit cost is
 * paid per handle, not per byte (docs/memory/EXTENTS.md), so growing ranges
 * commit in extents. cuMemMap maps a handle whole, so an extent is mapped,
 * unmapped, shared and decommitted whole. The layout policy says how many
 * granules each new extent holds; every extent is a power of two of granules
 * no larger than the cap, so the pool can keep them by size. */
typedef enum ortmem_extent_growth {
    ORTMEM_EXTENT_GRANULE = 0, /* one extent per granule (the per-granule baseline) */
    ORTMEM_EXTENT_EXACT,       /* what is asked, in as few extents as the cap allows */
    ORTMEM_EXTENT_GEOMETRIC    /* a growing tail: each extent twice the one below it, up to
                                  the cap; an ask of at least that much is laid exactly */
} ortmem_extent_growth;

#define ORTMEM_EXTENT_CAP_DEFAULT ((size_t)32 << 20) /* GEOMETRIC's cap when cap_bytes is 0 */

typedef struct ortmem_extent_policy {
    size_t struct_size;
    ortmem_extent_growth growth;
    size_t cap_bytes; /* largest extent (rounded down to granule * 2^n); 0 = 32 MiB for
                         GEOMETRIC, unbounded for EXACT */
} ortmem_extent_policy;

#define ORTMEM_EXTENT_POLICY_INIT                                                                  \
    {                                                                                              \
        sizeof(ortmem_extent_policy), ORTMEM_EXTENT_GEOMETRIC, 0                                   \
    }

/* The largest extent policy allows, in granules (a power of two >= 1). */
ORTMEM_API ortmem_status ortmem_extent_cap_granules(const ortmem_extent_policy *policy,
                                                    size_t granule, uint64_t *granules);

/* Pure: the extents (sizes in granules, in address order) that policy lays
 * over need granules at a range's tail. below: granules of the extent mapped
 * just below the tail (0 = none, the range starts here); room >= need:
 * granules free from the tail to the end of the window the range may grow
 * into. The extents cover at least need granules and at most room. With
 * capacity too small: ORTMEM_E_RANGE and *count = the entries needed. */
ORTMEM_API ortmem_status ortmem_extent_layout(const ortmem_extent_policy *policy, size_t granule,
                                              uint64_t below, uint64_t need, uint64_t room,
                                              uint64_t *sizes, size_t capacity, size_t *count);

/* ---- Ledger -----------------------------------------------------------------
 * Counters saturate at UINT64_MAX instead of wrapping; each clamp is counted in
 * saturations. */
typedef struct ortmem_vmm_stats {
    size_t struct_size;
    uint64_t owned_bytes; /* physical granules alive, counted once (pool included) */
    uint64_t owned_peak_bytes;
    uint64_t mapped_bytes; /* bytes mapped, per mapping (aliases count again) */
    uint64_t mapped_peak_bytes;
    uint64_t owned_granules;
    uint64_t mapped_granules;
    uint64_t reserved_va_bytes;        /* VA reserved by live regions and arenas */
    uint64_t quarantined_bytes;        /* owned bytes of quarantined granules, never reused */
    uint64_t quarantined_mapped_bytes; /* mappings whose unmap failed */
    uint64_t quarantined_granules;
    uint64_t leaked_va_bytes; /* VA left reserved on purpose because granules stayed */
    uint64_t pool_bytes;      /* owned bytes kept by the pool, mapped nowhere */
    uint64_t pool_cap_bytes;
    uint64_t pool_hits;
    uint64_t pool_misses;
    uint64_t calls[ORTMEM_OP_COUNT]; /* backend calls made through this handle */
    uint64_t failures[ORTMEM_OP_COUNT];
    uint64_t saturations;
    /* Extents (one backend handle of k granules each): owned_granules above
     * counts k per extent, these count each extent once. */
    uint64_t owned_extents;       /* extents alive (pool included) */
    uint64_t mapped_extents;      /* extent mappings (an alias counts again) */
    uint64_t quarantined_extents; /* extents quarantined, all their granules with them */
} ortmem_vmm_stats;

/* stats->struct_size must be set by the caller. */
ORTMEM_API ortmem_status ortmem_backend_stats(ortmem_backend *backend, ortmem_vmm_stats *stats);

/* ---- Accounting seam -------------------------------------------------------
 * What a region or arena charges before it maps and refunds after it unmaps.
 * vmm knows no budgets: governance implements this (ortmem_holder_account).
 * owned: physical bytes, counted once; mapped: per mapping. */
typedef struct ortmem_account {
    size_t struct_size;
    void *self;
    /* Checks and holds capacity for bytes about to be created and mapped; a
     * refusal means nothing was created or mapped. */
    ortmem_status (*hold)(void *self, uint64_t owned_bytes, uint64_t mapped_bytes);
    /* Drops what is left of a hold. */
    void (*unhold)(void *self, uint64_t owned_bytes, uint64_t mapped_bytes);
    /* Charges bytes just created or mapped, out of the caller's hold. */
    void (*charge)(void *self, uint64_t owned_bytes, uint64_t mapped_bytes);
    /* Charges bytes that already exist and move in from another account (the
     * pool, a quarantine); never refused. */
    void (*adopt)(void *self, uint64_t owned_bytes, uint64_t mapped_bytes);
    /* Returns bytes released, unmapped or moved out. */
    void (*refund)(void *self, uint64_t owned_bytes, uint64_t mapped_bytes);
    /* Optional: the content the caller asked for changed by delta bytes. */
    void (*requested)(void *self, int64_t delta_bytes);
    /* Optional pair: vmm keeps a copy of the account (a region, an arena, a
     * granule it owns) between retain and unretain, so the implementation can
     * refuse to go away while copies remain. */
    void (*retain)(void *self);
    void (*unretain)(void *self);
    /* Optional: a hold of owned/mapped bytes was refused; make room
     * (ask holders to reclaim) and return the bytes reclaimed. vmm calls it
     * with none of its locks held and then tries once more, so the
     * implementation's callbacks may use any region or arena. */
    uint64_t (*relieve)(void *self, uint64_t owned_bytes, uint64_t mapped_bytes);
    /* Optional: moves owned/mapped bytes from this account to to_self, an
     * account with this same move, in one step, so the bytes never look free
     * on the way (a hold elsewhere could take them and the budget be passed).
     * Returns 0 when it cannot; vmm then refunds here and adopts there. */
    int (*move)(void *self, void *to_self, uint64_t owned_bytes, uint64_t mapped_bytes);
} ortmem_account;

/* Accounts for memory the backend itself keeps: granules in the pool, and
 * quarantined granules (with their stuck mappings). Either may be NULL; both
 * NULL clears. Bytes already pooled or quarantined move to the new accounts.
 * ORTMEM_E_STATE when accounts are set already. */
ORTMEM_API ortmem_status ortmem_backend_set_accounts(ortmem_backend *backend,
                                                     const ortmem_account *pool,
                                                     const ortmem_account *quarantine);

/* ---- Physical pool ----------------------------------------------------------
 * Extents that regions decommit are kept (still owned, pages allocated) up to a
 * byte cap and reused by the next commit on the same backend. Default cap 0.
 * Extents are kept by size: class c holds extents of exactly 2^c granules, up
 * to ORTMEM_POOL_MAX_EXTENT_DEFAULT (512 MiB); other sizes are released, never
 * pooled. A commit takes a pooled extent of exactly the size it lays (never a
 * split nor a composition); the cap, trim and pressure release oldest first
 * across classes. */
#define ORTMEM_POOL_CLASSES_MAX 24
#define ORTMEM_POOL_MAX_EXTENT_DEFAULT ((size_t)512 << 20)

ORTMEM_API ortmem_status ortmem_pool_set_cap(ortmem_backend *backend, size_t cap_bytes);
/* Releases pooled extents, oldest first, until at most keep_bytes stay;
 * reports bytes released. */
ORTMEM_API ortmem_status ortmem_pool_trim(ortmem_backend *backend, size_t keep_bytes,
                                          size_t *released_bytes);
/* Creates granules (1-granule extents) into the pool until it keeps bytes
 * (at most the cap). */
ORTMEM_API ortmem_status ortmem_pool_fill(ortmem_backend *backend, size_t bytes);
/* Creates count extents of extent_bytes each (granule * 2^c, at most the
 * largest class) into the pool. All or nothing: ORTMEM_E_RANGE when they do
 * not fit under the cap; on a failure the extents this call added are
 * released. */
ORTMEM_API ortmem_status ortmem_pool_fill_extents(ortmem_backend *backend, size_t extent_bytes,
                                                  size_t count);

typedef struct ortmem_pool_stats {
    size_t struct_size;
    uint32_t classes;                          /* in use: log2(max extent / granule) + 1 */
    uint64_t extents[ORTMEM_POOL_CLASSES_MAX]; /* pooled now; class c = 2^c granules */
    uint64_t hits[ORTMEM_POOL_CLASSES_MAX];    /* commits served from the class */
    uint64_t misses[ORTMEM_POOL_CLASSES_MAX];  /* commits the class could not serve */
    uint64_t unpoolable_releases;              /* extents of no class, released instead of pooled */
} ortmem_pool_stats;

/* stats->struct_size must be set by the caller. */
ORTMEM_API ortmem_status ortmem_pool_stats_get(ortmem_backend *backend, ortmem_pool_stats *stats);

/* ---- Regions ----------------------------------------------------------------*/
#define ORTMEM_REGION_EXPORTABLE 0x1u /* granules are created exportable */

typedef struct ortmem_region_options {
    size_t struct_size;
    size_t size;                   /* bytes of VA; rounded up to the granule */
    unsigned flags;                /* ORTMEM_REGION_* */
    const ortmem_account *account; /* copied; charged before every map; NULL = none */
    size_t alignment; /* of the base address: a power of two >= the granule; 0 = granule */
    /* How ortmem_region_commit(_ranges) lays extents over each maximal run of
     * unmapped granules (an exact ask: below 0, room = the run). Default
     * ORTMEM_EXTENT_GRANULE: one extent per granule. */
    ortmem_extent_policy extents;
} ortmem_region_options;

#define ORTMEM_REGION_OPTIONS_INIT                                                                 \
    {                                                                                              \
        sizeof(ortmem_region_options), 0, 0, NULL, 0,                                              \
        {                                                                                          \
            sizeof(ortmem_extent_policy), ORTMEM_EXTENT_GRANULE, 0                                 \
        }                                                                                          \
    }

ORTMEM_API ortmem_status ortmem_region_create(ortmem_backend *backend,
                                              const ortmem_region_options *options,
                                              ortmem_region **out);

/* Unmaps everything (one unmap per contiguous run) and drops its granules;
 * granules shared into other regions live on there. If an unmap or release
 * fails the granules are quarantined, the VA is left reserved if anything
 * stays mapped, and ORTMEM_E_QUARANTINED is returned; the handle is gone. */
ORTMEM_API ortmem_status ortmem_region_destroy(ortmem_region *region);

ORTMEM_API void *ortmem_region_base(ortmem_region *region);
ORTMEM_API size_t ortmem_region_size(ortmem_region *region);
ORTMEM_API size_t ortmem_region_granule(ortmem_region *region);

/* Extents in a region: a granule is mapped as part of an extent, one backend
 * handle of k granules (k a power of two) mapped whole at k consecutive
 * granules. An extent is committed, mapped, unmapped, shared, copied on write,
 * exported and decommitted WHOLE (docs/memory/EXTENTS.md). */

/* Maps every granule that [offset, offset+len) touches and is not mapped yet,
 * read-write, in the extents the region's policy (ortmem_region_options.
 * extents) lays over each maximal run of unmapped granules. All or nothing. A
 * freshly created extent reads as zeros; one served from the pool keeps the
 * bytes it held before (like reused CUDA physical memory). */
ORTMEM_API ortmem_status ortmem_region_commit(ortmem_region *region, size_t offset, size_t len);

typedef struct ortmem_range {
    size_t offset;
    size_t length;
} ortmem_range;

/* As ortmem_region_commit over several ranges at once: one hold, one
 * set-access per contiguous run of new extents, all or nothing. */
ORTMEM_API ortmem_status ortmem_region_commit_ranges(ortmem_region *region,
                                                     const ortmem_range *ranges, size_t count);

/* Commits each range as exactly one extent: granule-aligned, a power of two
 * of granules, every granule unmapped (ORTMEM_E_INVALID for a range that is
 * not one extent or overlaps another, ORTMEM_E_STATE for a granule mapped or
 * quarantined). One hold, one set-access per contiguous run; all or nothing. */
ORTMEM_API ortmem_status ortmem_region_commit_extents(ortmem_region *region,
                                                      const ortmem_range *extents, size_t count);

typedef struct ortmem_commit_range {
    size_t offset, length; /* bytes that must be mapped */
    size_t window_end;     /* the tail may grow up to here (exclusive); 0 = offset + length */
} ortmem_commit_range;

/* As ortmem_region_commit_ranges with growth windows: the unmapped run at the
 * tail of each range is laid by ortmem_extent_layout under policy (NULL = the
 * region's) with below = the extent mapped just below it and room up to the
 * window end or the next mapped or quarantined granule, so a growing range
 * commits extents that grow too; other unmapped runs are laid exactly. */
ORTMEM_API ortmem_status ortmem_region_commit_grow(ortmem_region *region,
                                                   const ortmem_commit_range *ranges, size_t count,
                                                   const ortmem_extent_policy *policy);

/* As ortmem_region_decommit over several ranges: every mapped extent lying
 * wholly inside one of them; one unmap per contiguous run; all or nothing. */
ORTMEM_API ortmem_status ortmem_region_decommit_ranges(ortmem_region *region,
                                                       const ortmem_range *ranges, size_t count);

/* Unmaps the mapped extents lying wholly inside [offset, offset+len); an
 * extent the range cuts stays mapped (as a granule the range covers only in
 * part). All or nothing; ORTMEM_E_QUARANTINED when unmaps succeeded but a
 * release failed. */
ORTMEM_API ortmem_status ortmem_region_decommit(ortmem_region *region, size_t offset, size_t len);

#define ORTMEM_DECOMMIT_STRICT 0x1u  /* a range that cuts a mapped extent: ORTMEM_E_RANGE */
#define ORTMEM_DECOMMIT_NO_POOL 0x2u /* extents go back to the backend, not the pool */

/* As ortmem_region_decommit_ranges with flags ORTMEM_DECOMMIT_*. STRICT: a
 * range that cuts a mapped extent refuses with ORTMEM_E_RANGE, the detail
 * naming the extent, and nothing changes. */
ORTMEM_API ortmem_status ortmem_region_decommit_ex(ortmem_region *region,
                                                   const ortmem_range *ranges, size_t count,
                                                   unsigned flags);

/* Maps src's extents of [src_offset, +len) into dst at dst_offset with access
 * (ORTMEM_ACCESS_READ is the usual alias); each gains one mapper. Offsets and
 * len must be granule-aligned and the source range a union of whole extents
 * (ORTMEM_E_RANGE naming the extent it cuts); every source granule must be
 * mapped and every destination granule unmapped. dst may be src if the ranges
 * do not overlap. */
ORTMEM_API ortmem_status ortmem_region_share(ortmem_region *dst, size_t dst_offset,
                                             ortmem_region *src, size_t src_offset, size_t len,
                                             ortmem_access access);

/* Replaces every shared extent (mapped elsewhere too) that [offset, +len)
 * touches with a private read-write copy of the whole extent at the same VA.
 * Needs the backend's copy primitive and readable granules. All or nothing. */
ORTMEM_API ortmem_status ortmem_region_cow(ortmem_region *region, size_t offset, size_t len);
/* As ortmem_region_cow over several ranges, all or nothing across them (one
 * reservation, one swap): a failure leaves every range as it was. */
ORTMEM_API ortmem_status ortmem_region_cow_ranges(ortmem_region *region, const ortmem_range *ranges,
                                                  size_t count);

/* Copies len bytes between mapped, readable (source) and writable
 * (destination) ranges of two regions of one backend, with the backend's copy
 * primitive (a device copy on a device backend). */
ORTMEM_API ortmem_status ortmem_region_copy(ortmem_region *dst, size_t dst_offset,
                                            ortmem_region *src, size_t src_offset, size_t len);

/* Copies len bytes with the backend's copy primitive between any addresses it
 * can reach (a host tier and device memory, for example); synchronous. */
ORTMEM_API ortmem_status ortmem_backend_copy(ortmem_backend *backend, void *dst, const void *src,
                                             size_t len);

/* Changes access over the mapped granules [offset, +len) (granule-aligned). */
ORTMEM_API ortmem_status ortmem_region_protect(ortmem_region *region, size_t offset, size_t len,
                                               ortmem_access access);

typedef enum ortmem_granule_state {
    ORTMEM_GRANULE_UNMAPPED = 0,
    ORTMEM_GRANULE_MAPPED,
    ORTMEM_GRANULE_QUARANTINED
} ortmem_granule_state;

typedef struct ortmem_granule_info {
    size_t struct_size;
    ortmem_granule_state state;
    ortmem_access access;
    uint32_t mappers;         /* mappings of this granule's extent (1 = private; an alias
                         inside one region counts again) */
    size_t extent_offset;     /* region offset of the extent's first byte (mapped or
                                 quarantined granules; 0 otherwise) */
    uint32_t extent_granules; /* granules in the extent; 0 when unmapped */
} ortmem_granule_info;

/* Describes the granule holding byte offset. */
ORTMEM_API ortmem_status ortmem_region_granule_info(ortmem_region *region, size_t offset,
                                                    ortmem_granule_info *info);

/* The mapping state of the granules [offset, offset+len) touches, for callers
 * that must notice later changes (graph signatures, include/ortmem/capture.h).
 * Every granule has a mapping epoch that starts at 0 and grows by one each
 * time its mapping changes: map (commit, share, import), unmap (decommit),
 * the copy-on-write swap, quarantine. Access changes (protect) and failed
 * calls that restored the mapping leave it alone. Each epoch only grows, so
 * two snapshots of one range with equal epoch_sum saw the same mappings
 * (barring 2^32 changes of one granule in between). */
typedef struct ortmem_range_state {
    size_t struct_size;
    uint64_t region_id;           /* unique per region in this process, never reused */
    uint64_t granules;            /* granules the range touches */
    uint64_t unmapped_granules;   /* of those, not mapped (unmapped or quarantined) */
    size_t first_unmapped_offset; /* region offset of the first one; SIZE_MAX when none */
    uint64_t epoch_sum;           /* sum of the touched granules' mapping epochs */
    int all_mapped;               /* non-zero when unmapped_granules is 0 */
} ortmem_range_state;

/* out->struct_size must be set by the caller. */
ORTMEM_API ortmem_status ortmem_region_range_state(ortmem_region *region, size_t offset, size_t len,
                                                   ortmem_range_state *out);

/* The account the region charges (a copy, not retained); ORTMEM_E_STATE when
 * the region has none. */
ORTMEM_API ortmem_status ortmem_region_account(ortmem_region *region, ortmem_account *account);

/* Moves the region's charge to account (copied and retained; the old one is
 * dropped): its mapped bytes, and the owned bytes of every extent this region
 * alone maps (one mapper) that the old account owns. Extents mapped elsewhere
 * too (a shared prefix, a fork's parent or child) keep their owner. A move,
 * never refused for budget; later commits charge account. */
ORTMEM_API ortmem_status ortmem_region_set_account(ortmem_region *region,
                                                   const ortmem_account *account);
/* *same = 1 when every granule of [a_offset, +len) in a and [b_offset, +len)
 * in b is mapped to the same extent at the same index, else 0. Offsets and
 * len granule-aligned, len > 0. */
ORTMEM_API ortmem_status ortmem_region_maps_same(ortmem_region *a, size_t a_offset,
                                                 ortmem_region *b, size_t b_offset, size_t len,
                                                 int *same);

/* Exports the physical extent whose first granule holds offset (region created
 * ORTMEM_REGION_EXPORTABLE; ORTMEM_E_RANGE for an offset past the extent's
 * first granule), the whole extent, as a new file descriptor the caller owns
 * and must close. */
ORTMEM_API ortmem_status ortmem_region_export(ortmem_region *region, size_t offset, int *fd);

/* Maps a granule imported from fd at the unmapped, granule-aligned offset. */
ORTMEM_API ortmem_status ortmem_region_import(ortmem_region *region, size_t offset, int fd,
                                              ortmem_access access);

/* Passes a file descriptor over a connected Unix socket (SCM_RIGHTS). */
ORTMEM_API ortmem_status ortmem_fd_send(int socket_fd, int fd);
ORTMEM_API ortmem_status ortmem_fd_recv(int socket_fd, int *fd);

/* ---- Arena ------------------------------------------------------------------
 * A malloc-like sub-allocator over one region. Block metadata lives outside
 * the managed memory (it may be device memory). Granules are committed when
 * the first allocation touches them, in physical extents (one backend handle
 * of 2^k granules, mapped and unmapped whole) laid by the arena's extent
 * policy: the tail grows geometrically, holes below it are laid exactly. An
 * extent is empty when no live allocation touches any of its granules; an
 * empty extent stays committed and cached for reuse up to the cache
 * watermark (counted in bytes); beyond it the least recently emptied extents
 * are decommitted, whole. ortmem_arena_reclaim (or ortmem_arena_pressure as a
 * holder's pressure callback) gives the cached extents back to the backend
 * under pressure; an alloc refused for budget drops the cache the same way and
 * tries once more, so it fails only where an uncached arena's would. */

/* cache_bytes default: min(capacity, ORTMEM_ARENA_CACHE_DEFAULT_MAX), resolved at create. */
#define ORTMEM_ARENA_CACHE_DEFAULT SIZE_MAX
#define ORTMEM_ARENA_CACHE_DEFAULT_MAX ((size_t)256 << 20)

typedef struct ortmem_arena_options {
    size_t struct_size;
    size_t capacity;               /* bytes of VA to reserve; rounded up to the granule */
    size_t cache_bytes;            /* bytes of empty extents kept committed (the watermark,
                                      rounded down to the granule); ORTMEM_ARENA_CACHE_DEFAULT
                                      (the default) = min(capacity, 256 MiB); 0 = decommit at
                                      once, which costs a create and release per extent crossing
                                      without a pool (docs/memory/MEASUREMENTS.md, arena) */
    size_t min_align;              /* smallest alignment handed out; 0 = 256 */
    const ortmem_account *account; /* copied; charged before every commit; NULL = none */
    /* How commits lay extents: the run at the committed tail by the policy
     * (below = the extent under it, room up to the next committed granule or
     * the capacity), a hole below the tail exactly (powers of two <= cap).
     * Default GEOMETRIC with an 8 MiB cap, which bounds what is committed past
     * the allocations by one extent; ORTMEM_EXTENT_GRANULE = one handle per
     * granule (the per-granule baseline), as is a zeroed policy (struct_size
     * 0, as for a region). */
    ortmem_extent_policy extents;
} ortmem_arena_options;

#define ORTMEM_ARENA_EXTENT_CAP_DEFAULT ((size_t)8 << 20) /* the default policy's cap */

#define ORTMEM_ARENA_OPTIONS_INIT                                                                  \
    {                                                                                              \
        sizeof(ortmem_arena_options), 0, ORTMEM_ARENA_CACHE_DEFAULT, 0, NULL,                      \
        {                                                                                          \
            sizeof(ortmem_extent_policy), ORTMEM_EXTENT_GEOMETRIC, ORTMEM_ARENA_EXTENT_CAP_DEFAULT \
        }                                                                                          \
    }

typedef struct ortmem_arena_stats {
    size_t struct_size;
    uint64_t allocated_bytes; /* sum of live allocation sizes as requested */
    uint64_t allocated_peak_bytes;
    uint64_t live_allocations;
    uint64_t committed_bytes; /* granules of the arena's region that are mapped (an
                                 extent's granules no allocation touches yet count) */
    uint64_t committed_peak_bytes;
    uint64_t cached_bytes; /* granules of empty extents kept committed */
    uint64_t allocs;
    uint64_t frees;
    uint64_t failed_allocs;     /* refused allocs of any cause, bad input included */
    uint64_t quarantined_bytes; /* granules the region quarantined: never handed out again */
    uint64_t cache_limit_bytes; /* the watermark cached_bytes is kept under (resolved) */
    uint64_t reclaimed_bytes;   /* cached bytes given back under pressure, in all: by
                                   ortmem_arena_reclaim, _pressure and allocs refused
                                   for budget */
    uint64_t extents_committed; /* extents mapped now (backend handles the arena holds) */
    /* Sleep and wake (ortmem_arena_sleep). */
    uint64_t asleep;        /* 1 while the arena sleeps, else 0 */
    uint64_t dormant_bytes; /* while asleep: the bytes of the extents wake commits again */
    uint64_t backup_bytes;  /* while asleep: host bytes holding the backed-up allocations */
    uint64_t sleeps;        /* sleeps that took effect */
    uint64_t wakes;         /* wakes that took effect */
} ortmem_arena_stats;

ORTMEM_API ortmem_status ortmem_arena_create(ortmem_backend *backend,
                                             const ortmem_arena_options *options,
                                             ortmem_arena **out);
/* ORTMEM_E_BUSY (nothing changes) while allocations are live, unless force is
 * non-zero, in which case they are dropped with the arena. */
ORTMEM_API ortmem_status ortmem_arena_destroy(ortmem_arena *arena, int force);
/* align: power of two, 0 = min_align. */
ORTMEM_API ortmem_status ortmem_arena_alloc(ortmem_arena *arena, size_t size, size_t align,
                                            void **ptr);
/* ORTMEM_E_NOT_FOUND for a pointer the arena did not hand out,
 * ORTMEM_E_DOUBLE_FREE for one already freed. */
ORTMEM_API ortmem_status ortmem_arena_free(ortmem_arena *arena, void *ptr);
ORTMEM_API ortmem_status ortmem_arena_stats_get(ortmem_arena *arena, ortmem_arena_stats *stats);
/* Decommits cached empty extents, least recently emptied first, until at
 * most keep_bytes stay cached (whole extents: it may leave fewer). Their
 * handles may go to the backend's pool as any decommit's. A failed decommit
 * stops the trim: extents decommitted before it stay decommitted, the rest
 * stay cached, and the status is returned. */
ORTMEM_API ortmem_status ortmem_arena_trim(ortmem_arena *arena, size_t keep_bytes);
/* Decommits cached empty extents, least recently emptied first, until
 * want_bytes (rounded up to the granule) are decommitted or the cache is
 * empty (whole extents: it may give back more); *reclaimed_bytes (may be
 * NULL) gets the bytes decommitted. Live allocations are never touched. The
 * extents go back to the backend (ORTMEM_DECOMMIT_NO_POOL), never to its
 * pool, so owned bytes drop by what is reclaimed. A run of extents whose
 * decommit fails counts nothing (one may be unmapped but quarantined, still
 * owned): those still mapped go back to the cache, first in line; the other
 * runs are reclaimed, and the first failure is returned with
 * *reclaimed_bytes set to what they gave back. */
ORTMEM_API ortmem_status ortmem_arena_reclaim(ortmem_arena *arena, uint64_t want_bytes,
                                              uint64_t *reclaimed_bytes);
/* ortmem_arena_reclaim in the shape of ortmem_pressure_fn (governance.h): pass
 * it with the arena as user to ortmem_holder_set_pressure for the holder whose
 * account the arena charges. Returns the bytes reclaimed; never fails (a
 * failed decommit is logged as a warning). */
ORTMEM_API uint64_t ortmem_arena_pressure(void *arena, uint64_t want_bytes);
/* ---- Arena sleep and wake ---------------------------------------------------
 * Sleep gives an idle arena's device memory back while every pointer it
 * handed out stays valid: every committed extent is decommitted straight to
 * the backend (never its pool), so its owned bytes are refunded to the
 * account (the authority's ledger drops by them), and the VA stays reserved.
 * With backup, the bytes of every live allocation are first copied to host
 * memory with the backend's copy primitive (synchronous). Wake commits the
 * extents that still hold live allocations again, whole, at the same
 * offsets, charged to the account like any commit, and copies the backup
 * back: every live allocation has the address and, when backed up, the bytes
 * it had. Without backup the bytes after wake are undefined: a freshly
 * created extent (zeros on the CPU backend; the CUDA driver promises
 * nothing), or one served from the backend's pool with what it last held.
 *
 * While asleep, alloc is refused with ORTMEM_E_STATE; free is allowed (pure
 * bookkeeping: it touches no byte, and an extent left with no live
 * allocation is not committed again); trim and reclaim find nothing cached;
 * destroy works as awake. Sleep and wake never run the device's work: the
 * caller makes sure no kernel or copy uses the arena's memory between the
 * start of sleep and the end of wake (synchronize first). */

typedef struct ortmem_arena_sleep_options {
    size_t struct_size;
    int backup; /* non-zero: copy the live allocations' bytes to host first */
    /* With backup: the caller's host buffer (pinned memory copies faster) of
     * backup_capacity bytes, at least ortmem_arena_backup_bytes, kept by the
     * arena until wake ends; NULL = the arena allocates one itself. */
    void *backup_buffer;
    size_t backup_capacity;
} ortmem_arena_sleep_options;

#define ORTMEM_ARENA_SLEEP_OPTIONS_INIT                                                            \
    {                                                                                              \
        sizeof(ortmem_arena_sleep_options), 0, NULL, 0                                             \
    }

/* The host bytes a backup takes now: the live allocations' bytes, each
 * rounded up to the arena's quantum. */
ORTMEM_API ortmem_status ortmem_arena_backup_bytes(ortmem_arena *arena, size_t *bytes);

/* Puts the arena to sleep (options NULL: no backup). ORTMEM_E_STATE when it
 * sleeps already; ORTMEM_E_UNSUPPORTED for a backup on a backend without a
 * copy primitive; ORTMEM_E_RANGE for a caller's buffer that is too small. A
 * failed backup copy or decommit changes nothing (the arena stays awake),
 * except where the backend failed in a way that unmapped some extents
 * anyway: the arena is then asleep, the detail says so and
 * ortmem_arena_stats.asleep is 1 (wake recommits them). ORTMEM_E_QUARANTINED:
 * asleep, but a release failed and that extent's bytes stay owned in the
 * backend's quarantine. */
ORTMEM_API ortmem_status ortmem_arena_sleep(ortmem_arena *arena,
                                            const ortmem_arena_sleep_options *options);

/* Wakes a sleeping arena. ORTMEM_E_STATE when it is awake. All or nothing: a
 * refusal for budget (ORTMEM_E_BUDGET, with the authority's numbers; a
 * holder's pressure is asked first, as for an alloc), a failed commit or a
 * failed restore copy leaves the arena asleep with its backup, and wake may
 * be called again. */
ORTMEM_API ortmem_status ortmem_arena_wake(ortmem_arena *arena);

/* The arena's region, for inspection (granule info, base). Committing,
 * decommitting or destroying it directly puts the arena out of step. */
ORTMEM_API ortmem_region *ortmem_arena_region(ortmem_arena *arena);

#ifdef __cplusplus
}
#endif

#endif /* ORTMEM_VMM_H */
