/* ortmem-ort: ONNX Runtime on ortmem memory (docs/adapters/ONNXRUNTIME.md).
 *
 * Three parts, on ortmem's public API only:
 *   the runtime  libonnxruntime opened at run time (dlopen, OrtGetApiBase),
 *                so the adapter builds without the library and a program
 *                picks the one it ships (a Python wheel's, a CUDA build);
 *   the allocator an OrtAllocator whose Alloc, Reserve and Free are an ortmem
 *                arena charged to a holder of an authority with a budget,
 *                registered with the ORT environment so that sessions made
 *                with "session.use_env_allocators" = "1" take it;
 *   the KV binder one sequence of an ortmem KV cache (stable strategy,
 *                sequence-major, float32) whose past and present key/value
 *                tensors are bound through an IoBinding: step t's present is
 *                written right where step t+1 reads its past, so the cache
 *                grows in place and commits only what live tokens touch.
 *
 * Every call returns an ortmem_status; on failure ortmem_last_error() names
 * what failed with the numbers (ORT's own message included where ORT failed).
 * A failed call changes nothing unless it says otherwise.
 *
 * The header version is ORT_API_VERSION of the onnxruntime_c_api.h the
 * adapter was built with; the runtime must serve that version (any later
 * ONNX Runtime does: the C API only grows). */
#ifndef ORTMEM_ORT_H
#define ORTMEM_ORT_H

#include <onnxruntime_c_api.h>
#include <ortmem/core.h>
#include <ortmem/governance.h>
#include <ortmem/kv.h>
#include <ortmem/vmm.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- The runtime ------------------------------------------------------------*/
typedef struct ortmem_ort ortmem_ort;

/* Opens library_path (dlopen; NULL = "libonnxruntime.so") and takes its
 * API table for ORT_API_VERSION. ORTMEM_E_UNAVAILABLE with the dlopen error
 * or the versions when it cannot. */
ortmem_status ortmem_ort_open(const char *library_path, ortmem_ort **out);
/* Frees the handle; every ORT object made through it must be released first.
 * libonnxruntime itself stays loaded for the life of the process (ORT's
 * process-wide state does not survive an unload). */
void ortmem_ort_close(ortmem_ort *ort);
const OrtApi *ortmem_ort_api(const ortmem_ort *ort);
/* The library's version string ("1.30.0"). */
const char *ortmem_ort_version(const ortmem_ort *ort);

/* Turns an OrtStatus into an ortmem status: NULL is ORTMEM_OK; otherwise the
 * status is released and ORTMEM_E_BACKEND returned with "what: ORT error
 * code N: message" as the detail. */
ortmem_status ortmem_ort_check(const ortmem_ort *ort, OrtStatus *status, const char *what);

/* ---- The allocator ----------------------------------------------------------*/
typedef struct ortmem_ort_allocator ortmem_ort_allocator;

typedef struct ortmem_ort_allocator_options {
    size_t struct_size;
    /* Where the memory comes from. NULL: the process registry's device that
     * the memory info names (ortmem_device_get: "Cpu" is ORTMEM_DEVICE_CPU,
     * "Cuda" ORTMEM_DEVICE_CUDA with the info's device id). Otherwise an
     * authority whose backend is on that device. */
    ortmem_authority *authority;
    const char *holder_name; /* NULL = "ort" */
    int priority;            /* of the holder */
    uint64_t capacity;       /* VA the arena reserves; 0 = 16 GiB */
    size_t cache_bytes;      /* the arena's cache watermark; ORTMEM_ARENA_CACHE_DEFAULT */
} ortmem_ort_allocator_options;

#define ORTMEM_ORT_ALLOCATOR_OPTIONS_INIT                                                          \
    {                                                                                              \
        sizeof(ortmem_ort_allocator_options), NULL, NULL, 0, 0, ORTMEM_ARENA_CACHE_DEFAULT         \
    }

/* An allocator for the device of memory_info (NULL = ORT's CPU memory:
 * "Cpu", device 0). Its holder (role workspace) is registered on the
 * authority and its arena charges it. */
ortmem_status ortmem_ort_allocator_create(ortmem_ort *ort, const OrtMemoryInfo *memory_info,
                                          const ortmem_ort_allocator_options *options,
                                          ortmem_ort_allocator **out);
/* The OrtAllocator to hand to ORT (valid until destroy). */
OrtAllocator *ortmem_ort_allocator_ort(ortmem_ort_allocator *allocator);
/* Its memory info ("Cpu" or "Cuda", OrtDeviceAllocator, OrtMemTypeDefault). */
const OrtMemoryInfo *ortmem_ort_allocator_memory_info(const ortmem_ort_allocator *allocator);
ortmem_holder *ortmem_ort_allocator_holder(ortmem_ort_allocator *allocator);

/* RegisterAllocator / UnregisterAllocator with env. Sessions created after
 * the register with "session.use_env_allocators" = "1" allocate through it. */
ortmem_status ortmem_ort_allocator_register(ortmem_ort_allocator *allocator, OrtEnv *env);
ortmem_status ortmem_ort_allocator_unregister(ortmem_ort_allocator *allocator, OrtEnv *env);

typedef struct ortmem_ort_allocator_stats {
    size_t struct_size;
    uint64_t allocs;   /* Alloc and Reserve calls that returned memory */
    uint64_t reserves; /* of which Reserve */
    uint64_t frees;
    uint64_t failed;          /* calls that returned NULL */
    uint64_t live;            /* blocks handed out and not freed */
    uint64_t live_bytes;      /* their requested sizes */
    uint64_t peak_bytes;      /* the most live_bytes has been */
    uint64_t committed_bytes; /* the arena's committed granules now */
} ortmem_ort_allocator_stats;

ortmem_status ortmem_ort_allocator_stats_get(ortmem_ort_allocator *allocator,
                                             ortmem_ort_allocator_stats *stats);

/* The last refusal of Alloc or Reserve (they can only return NULL to ORT):
 * "" when none, otherwise "Alloc of N bytes refused: STATUS: detail" with the
 * holder's requested, available and limit bytes for a budget refusal. Kept
 * per allocator (ORT may allocate from any thread); copied into buffer. */
void ortmem_ort_allocator_last_error(ortmem_ort_allocator *allocator, char *buffer,
                                     size_t capacity);

/* ORTMEM_E_BUSY (nothing changes) while blocks are live: release the ORT
 * objects holding them (sessions, values) and unregister first. Then the
 * arena is destroyed and the holder unregistered: the ledger is back where
 * it was before create. */
ortmem_status ortmem_ort_allocator_destroy(ortmem_ort_allocator *allocator);

/* ---- The KV binder ----------------------------------------------------------*/
typedef struct ortmem_ort_kv ortmem_ort_kv;

typedef struct ortmem_ort_kv_options {
    size_t struct_size;
    uint32_t layers, kv_heads, head_dim; /* the model's; float32 elements */
    uint64_t max_context;                /* tokens the sequence may reach (VA only) */
    /* printf formats of the model's names, with the layer as %u. */
    const char *past_key_format;      /* NULL = "past_key_%u" */
    const char *past_value_format;    /* NULL = "past_value_%u" */
    const char *present_key_format;   /* NULL = "present_key_%u" */
    const char *present_value_format; /* NULL = "present_value_%u" */
    ortmem_extent_policy extents;     /* the cache's growth policy [GEOMETRIC, 32 MiB cap] */
} ortmem_ort_kv_options;

#define ORTMEM_ORT_KV_OPTIONS_INIT                                                                 \
    {                                                                                              \
        sizeof(ortmem_ort_kv_options), 0, 0, 0, 0, NULL, NULL, NULL, NULL,                         \
        {                                                                                          \
            sizeof(ortmem_extent_policy), ORTMEM_EXTENT_GEOMETRIC, ORTMEM_EXTENT_CAP_DEFAULT       \
        }                                                                                          \
    }

/* A KV cache of one sequence (batch 1) on authority, tensors described with
 * memory_info (it must name the authority's device: "Cpu" for a CPU backend,
 * "Cuda" for a CUDA one). */
ortmem_status ortmem_ort_kv_create(ortmem_ort *ort, ortmem_authority *authority,
                                   const OrtMemoryInfo *memory_info,
                                   const ortmem_ort_kv_options *options, ortmem_ort_kv **out);

/* Prepares a step of new_tokens: commits room for them after the live
 * tokens (ORTMEM_E_BUDGET or ORTMEM_E_RANGE with the numbers, nothing
 * changed), then binds every layer's past_* to the live tokens [1, length,
 * heads, head_dim] and present_* to the new ones [1, new_tokens, heads,
 * head_dim] right after them. Once it returns OK the new tokens count as
 * live: a Run that fails is undone with ortmem_ort_kv_truncate. If binding
 * fails the commit is undone. */
ortmem_status ortmem_ort_kv_bind(ortmem_ort_kv *kv, OrtIoBinding *binding, uint64_t new_tokens);

/* Rewinds to length tokens (decommits what no live token touches). */
ortmem_status ortmem_ort_kv_truncate(ortmem_ort_kv *kv, uint64_t length);
ortmem_status ortmem_ort_kv_length(ortmem_ort_kv *kv, uint64_t *length);
/* Where layer's K (value 0) or V (value 1) lives: base, strides, capacity. */
ortmem_status ortmem_ort_kv_binding(ortmem_ort_kv *kv, uint32_t layer, int value,
                                    ortmem_kv_binding *binding);
ortmem_status ortmem_ort_kv_stats(ortmem_ort_kv *kv, ortmem_kv_stats *stats);
/* Bytes one token takes over all layers, K and V. */
uint64_t ortmem_ort_kv_bytes_per_token(const ortmem_ort_kv *kv);
/* Destroys the sequence and the cache: its holders own nothing afterwards. */
ortmem_status ortmem_ort_kv_destroy(ortmem_ort_kv *kv);

#ifdef __cplusplus
}
#endif

#endif /* ORTMEM_ORT_H */
