/* ortmem capture: the process-global capture gate and graph signatures.
 *
 * Every CUDA VMM call (create, map, set access, unmap, release) synchronizes
 * the device process-wide and invalidates a stream capture in progress on any
 * thread (docs/memory/CAPTURE.md). The gate keeps the two apart:
 *
 * - a driver call that synchronizes the device runs inside a shared section;
 *   ortmem's backends take one around each such call, and an engine takes one
 *   around its own (cudaMalloc, cuMemHostRegister, ...);
 * - a capture takes the gate exclusively: ortmem_capture_begin waits until no
 *   shared section is held, then holds the gate until ortmem_capture_end;
 * - writer preference: once a capture waits, new shared sections wait behind
 *   it, so a stream of driver calls cannot starve a capture;
 * - the capturing thread bypasses the gate: its own shared sections neither
 *   wait nor count (no self-deadlock; a driver call it makes still ends up in
 *   its own capture, which is the engine's bug to avoid);
 * - work that must not block while a capture runs is handed to
 *   ortmem_capture_defer and runs after the capture ends.
 *
 * A graph signature records what a captured graph depends on: VA ranges of
 * regions with their mapping epochs and KV bindings with their generations.
 * Checking it answers KEEP (every pointer the graph holds still reaches mapped
 * memory at the same VA) or INVALIDATE, with the reason in words.
 *
 * Thread safety: every function is thread-safe. The gate is one per process;
 * shared sections nest on one thread. No ortmem lock is held while a deferred
 * function runs. */
#ifndef ORTMEM_CAPTURE_H
#define ORTMEM_CAPTURE_H

#include <ortmem/core.h>
#include <ortmem/kv.h>
#include <ortmem/vmm.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- The capture gate -------------------------------------------------------*/

/* Takes the gate exclusively; call it right before cuStreamBeginCapture.
 * Waits until every shared section of other threads has left (and any capture
 * begun before it has ended). ORTMEM_E_STATE, without waiting, when the
 * calling thread already holds the capture (nested begin) or is inside a
 * shared section of its own (it would wait for itself).
 * Between begin and end, another thread's region or KV call may be waiting at
 * the gate while it holds that region's or sequence's lock: the capturing
 * thread must not call ortmem on objects other threads are changing (read
 * bindings before begin; record the graph signature after end). */
ORTMEM_API ortmem_status ortmem_capture_begin(void);

/* Releases the gate; call it right after cuStreamEndCapture. Then runs, on
 * the calling thread and in the order they were deferred, the functions
 * deferred while the capture was active or waiting; the gate is released
 * before the first one runs. ORTMEM_E_STATE when no capture is active (end
 * without begin) or the capture was begun by another thread (nothing changes
 * then). A shared section the capturing thread still holds becomes an
 * ordinary one that later captures wait for. */
ORTMEM_API ortmem_status ortmem_capture_end(void);

/* Non-zero while a capture holds the gate (on any thread). */
ORTMEM_API int ortmem_capture_active(void);

/* Runs fn(arg) now, on the calling thread, when no capture is active or
 * waiting. Otherwise queues it and returns at once; the thread that ends the
 * capture runs it after releasing the gate (ortmem_capture_end). The calling
 * thread is not special: a function deferred by the capturing thread itself
 * is queued too, because its driver calls would land inside the capture.
 * ORTMEM_E_INVALID for a NULL fn; ORTMEM_E_NOMEM when it cannot be queued
 * (fn has not run). */
ORTMEM_API ortmem_status ortmem_capture_defer(void (*fn)(void *arg), void *arg);

/* Enters a shared section around a driver call that synchronizes the device.
 * Waits while a capture is active or waiting, unless the calling thread holds
 * the capture (bypass) or a shared section already (nesting: sections of one
 * thread nest and only the outermost takes the gate). Never fails. */
ORTMEM_API void ortmem_capture_shared_enter(void);

/* As ortmem_capture_shared_enter, but never waits: ORTMEM_E_BUSY (nothing
 * entered) when a capture is active or waiting and the caller neither holds
 * it nor is inside a shared section already. */
ORTMEM_API ortmem_status ortmem_capture_shared_try_enter(void);

/* Leaves the innermost shared section of the calling thread. ORTMEM_E_STATE
 * when the thread holds none. */
ORTMEM_API ortmem_status ortmem_capture_shared_leave(void);

/* Counters since the process started (they saturate; clamps are counted) and
 * the gate's state now. */
typedef struct ortmem_capture_stats {
    size_t struct_size;
    uint64_t shared_entered;     /* outermost shared sections that took the gate */
    uint64_t shared_nested;      /* sections entered inside one the thread held already */
    uint64_t shared_bypassed;    /* outermost sections of the capturing thread (gate not taken) */
    uint64_t shared_waits;       /* shared sections that waited behind a capture */
    uint64_t shared_refused;     /* try_enter answered ORTMEM_E_BUSY */
    uint64_t captures;           /* captures begun */
    uint64_t capture_waits;      /* captures that waited for shared sections or a capture */
    uint64_t deferred_queued;    /* functions queued behind a capture */
    uint64_t deferred_run;       /* queued functions run by ortmem_capture_end */
    uint64_t deferred_immediate; /* functions run at once: no capture active or waiting */
    uint64_t saturations;
    /* State now. */
    uint64_t shared_active;    /* shared sections holding the gate */
    uint64_t shared_waiting;   /* threads waiting to enter one */
    uint64_t captures_waiting; /* threads waiting in ortmem_capture_begin */
    uint64_t deferred_pending; /* queued functions not run yet */
    int capture_active;
} ortmem_capture_stats;

/* stats->struct_size must be set by the caller. */
ORTMEM_API ortmem_status ortmem_capture_stats_get(ortmem_capture_stats *stats);

/* ---- Graph signatures -------------------------------------------------------*/
typedef struct ortmem_graph_signature ortmem_graph_signature;

typedef enum ortmem_graph_verdict {
    ORTMEM_GRAPH_KEEP = 0,   /* replay is safe: every recorded pointer is still valid */
    ORTMEM_GRAPH_INVALIDATE, /* re-capture (or recommit first): the reason says what moved */
    ORTMEM_GRAPH_VERDICT_COUNT
} ortmem_graph_verdict;

/* "keep", "invalidate"; NULL when out of range. */
ORTMEM_API const char *ortmem_graph_verdict_name(ortmem_graph_verdict verdict);

/* An empty signature: record what the graph uses right after capturing it. */
ORTMEM_API ortmem_status ortmem_graph_signature_create(ortmem_graph_signature **out);
ORTMEM_API ortmem_status ortmem_graph_signature_destroy(ortmem_graph_signature *signature);

/* Records that the graph uses region bytes [offset, offset+len), with the
 * mapping epoch of every granule the range touches (ortmem_region_range_state).
 * ORTMEM_E_STATE when a granule of the range is not mapped now: a captured
 * graph may reference mapped memory only. The signature keeps the region
 * pointer but no reference: a region destroyed later invalidates the graph. */
ORTMEM_API ortmem_status ortmem_graph_signature_add_range(ortmem_graph_signature *signature,
                                                          ortmem_region *region, size_t offset,
                                                          size_t len);

/* Records that the graph holds the pointers of binding (layer, value: 0 = K,
 * 1 = V) of seq: its base, strides, capacity and generation, as the engine
 * read them before capturing (binding NULL: read them now). The check reads
 * the binding again through ortmem_kv_seq_binding. */
ORTMEM_API ortmem_status ortmem_graph_signature_add_binding(ortmem_graph_signature *signature,
                                                            ortmem_kv_seq *seq, uint32_t layer,
                                                            int value,
                                                            const ortmem_kv_binding *binding);

/* Compares what the signature recorded with now. KEEP when every range is
 * still mapped at the same VA (remapped granules included: a graph follows
 * the VA, not the physical memory, DESIGN.md section 3) and every binding's
 * base, strides, capacity and generation are unchanged; INVALIDATE otherwise.
 * reason (may be NULL when capacity is 0) gets one line, truncated to
 * capacity: the first cause of an INVALIDATE (and how many more there are),
 * the remapped ranges of a KEEP, or "unchanged since capture". ORTMEM_OK
 * whenever a verdict was reached; the memory the graph writes into after a
 * remap is the new granule's, and its content is the engine's business. */
ORTMEM_API ortmem_status ortmem_graph_signature_check(ortmem_graph_signature *signature,
                                                      char *reason, size_t capacity,
                                                      ortmem_graph_verdict *verdict);

#ifdef __cplusplus
}
#endif

#endif /* ORTMEM_CAPTURE_H */
