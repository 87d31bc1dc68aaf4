/* libortmem_torch: ortmem as PyTorch's CUDA allocator (docs/adapters/PYTORCH.md).
 *
 * The two functions torch.cuda.memory.CUDAPluggableAllocator loads, and a
 * small control API the Python package (adapters/pytorch/ortmem_torch) calls
 * through ctypes. No CUDA header is needed: a cudaStream_t is an opaque
 * pointer here (the CUstream it is, 0 = the legacy default stream).
 *
 * Per device: one ortmem backend (CUDA on that ordinal, or the CPU backend
 * for tests without a GPU) with one authority holding the budget, and per tag
 * one holder (its role: "weights", "kv", "workspace" or "other") and one
 * arena on its account. An allocation goes to the arena of the calling
 * thread's tag (ortmem_torch_set_tag; "other" by default); a free finds the
 * arena by address. Frees on a CUDA device are stream-ordered: they are
 * batched behind one event on the freeing stream and carried out by the
 * authority's deferred release queue once the stream's work so far is done
 * (ortmem_arena_free_after), so memory is never reused or decommitted under a
 * kernel that still reads it.
 *
 * Every function is thread-safe. A failure is an ortmem_status (an int here)
 * and a message ortmem_torch_last_error returns. */
#ifndef ORTMEM_TORCH_H
#define ORTMEM_TORCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h> /* ssize_t */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ORTMEM_TORCH_API __attribute__((visibility("default")))
#else
#define ORTMEM_TORCH_API
#endif

/* ---- The pluggable allocator's two symbols ----------------------------------
 * torch.cuda.memory.CUDAPluggableAllocator(path, "ortmem_torch_alloc",
 * "ortmem_torch_free"). alloc returns NULL on failure (size <= 0 too) and
 * records the reason (ortmem_torch_last_error, ortmem_torch_failures); it
 * initialises the library with the defaults when ortmem_torch_init was not
 * called. free ignores NULL; a pointer it does not know is recorded as a
 * failure and left alone. */
ORTMEM_TORCH_API void *ortmem_torch_alloc(ssize_t size, int device, void *stream);
ORTMEM_TORCH_API void ortmem_torch_free(void *ptr, ssize_t size, int device, void *stream);

/* ---- Control ----------------------------------------------------------------*/
typedef enum ortmem_torch_backend {
    ORTMEM_TORCH_BACKEND_CUDA = 0, /* the CUDA driver's VMM, device = CUDA ordinal */
    ORTMEM_TORCH_BACKEND_CPU = 1   /* host memory, for tests without a GPU */
} ortmem_torch_backend;

#define ORTMEM_TORCH_MAX_DEVICES 64
#define ORTMEM_TORCH_TAGS 4 /* weights, kv, workspace, other (ortmem_role order) */

typedef struct ortmem_torch_options {
    size_t struct_size;
    ortmem_torch_backend backend;
    uint64_t budget_bytes;  /* per device: the authority's limit; 0 = 2^50 (no budget) */
    uint64_t arena_bytes;   /* VA reserved per device and tag; 0 = 64 GiB (CUDA), 1 GiB (CPU) */
    uint64_t cache_bytes;   /* per arena: empty extents kept committed; UINT64_MAX = ortmem's
                               default (256 MiB) */
    uint64_t granule_bytes; /* 0 = the backend's (2 MiB); the CPU tests use 64 KiB */
    /* Frees behind their stream's event: -1 = on CUDA only (the default; the
     * CPU backend has no stream running ahead), 1 = always (tests the queue
     * on the CPU backend), 0 = never (the caller synchronizes itself). */
    int ordered_frees;
} ortmem_torch_options;

#define ORTMEM_TORCH_OPTIONS_INIT                                                                  \
    {                                                                                              \
        sizeof(ortmem_torch_options), ORTMEM_TORCH_BACKEND_CUDA, 0, 0, UINT64_MAX, 0, -1           \
    }

/* Fixes the options (NULL = the defaults). ORTMEM_E_STATE (6) once a device
 * exists (after the first alloc or an earlier init), unless the options are
 * the same. */
ORTMEM_TORCH_API int ortmem_torch_init(const ortmem_torch_options *options);
/* Destroys every device. ORTMEM_E_BUSY (7), nothing changed, while
 * allocations live; pending frees are waited for first. */
ORTMEM_TORCH_API int ortmem_torch_shutdown(void);

/* The calling thread's tag for its next allocations: "weights", "kv",
 * "workspace" or "other"; NULL or "" = "other". ORTMEM_E_INVALID (1) for
 * another name. */
ORTMEM_TORCH_API int ortmem_torch_set_tag(const char *tag);
ORTMEM_TORCH_API const char *ortmem_torch_get_tag(void);

/* Changes device's budget (creating the device if needed); lowering it below
 * what is owned refuses growth until frees bring it under. */
ORTMEM_TORCH_API int ortmem_torch_set_budget(int device, uint64_t bytes);

typedef struct ortmem_torch_stats {
    size_t struct_size;
    /* The tag's arena (all tags summed for tag NULL). */
    uint64_t allocated_bytes; /* live allocations, as requested */
    uint64_t allocated_peak_bytes;
    uint64_t live_allocations;
    uint64_t reserved_bytes; /* committed (mapped) device memory */
    uint64_t reserved_peak_bytes;
    uint64_t cached_bytes; /* committed, no allocation on it */
    uint64_t allocs, frees, failed_allocs;
    uint64_t pending_frees; /* waiting on their stream's event (the device's) */
    uint64_t asleep;        /* the tag's arena sleeps (tags summed: how many sleep) */
    uint64_t backup_bytes;  /* host bytes of sleeping arenas' backups */
    /* The device's authority (the ledger). */
    uint64_t owned_bytes; /* the tag's holder (all holders for tag NULL) */
    uint64_t limit_bytes;
    uint64_t available_bytes;
    uint64_t device_owned_bytes; /* the backend's ledger: physical bytes alive */
} ortmem_torch_stats;

/* out->struct_size must be set. ORTMEM_E_NOT_FOUND (8) for a device never used. */
ORTMEM_TORCH_API int ortmem_torch_stats_get(int device, const char *tag, ortmem_torch_stats *out);

/* Puts the tag's arena on device to sleep: pending frees are waited for,
 * then every granule is decommitted (the VA kept) and the bytes go back to
 * the authority; backup non-zero copies the live bytes to host first. The
 * caller synchronizes the device before (torch.cuda.synchronize()). Allocs in
 * the tag fail while it sleeps. */
ORTMEM_TORCH_API int ortmem_torch_sleep(int device, const char *tag, int backup);
/* Recommits at the same addresses (charged to the budget; a refusal changes
 * nothing) and restores the backup. */
ORTMEM_TORCH_API int ortmem_torch_wake(int device, const char *tag);

/* Waits for device's pending frees (all devices for -1) and releases them. */
ORTMEM_TORCH_API int ortmem_torch_flush(int device);

/* The last failure in this process (any thread), with the ledger's numbers
 * for a budget refusal; "" when none. The returned text stays valid until the
 * next failure in the calling thread. */
ORTMEM_TORCH_API const char *ortmem_torch_last_error(void);
/* Failed allocations so far in this process. */
ORTMEM_TORCH_API uint64_t ortmem_torch_failures(void);

#ifdef __cplusplus
}
#endif

#endif /* ORTMEM_TORCH_H */
