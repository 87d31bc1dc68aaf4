/* ortmem gate: the process-global capture gate.
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
 * The gate sits at the core level: it needs nothing but core.h, and the vmm
 * backends take it. Graph signatures, which need regions and KV bindings, are
 * in capture.h (which includes this header).
 *
 * Thread safety: every function is thread-safe. The gate is one per process;
 * shared sections nest on one thread. No ortmem lock is held while a deferred
 * function runs. */
#ifndef ORTMEM_GATE_H
#define ORTMEM_GATE_H

#include <ortmem/core.h>

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

/* Leaves the gate; call it right after cuStreamEndCapture. Then runs, on
 * the calling thread and in the order they were deferred, the functions
 * deferred while the capture was active or waiting; the gate is left
 * before the first one runs. ORTMEM_E_STATE when no capture is active (end
 * without begin) or the capture was begun by another thread (nothing changes
 * then). A shared section the capturing thread still holds becomes an
 * ordinary one that later captures wait for. */
ORTMEM_API ortmem_status ortmem_capture_end(void);

/* Non-zero while a capture holds the gate (on any thread). */
ORTMEM_API int ortmem_capture_active(void);

/* Runs fn(arg) now, on the calling thread, when no capture is active or
 * waiting. Otherwise queues it and returns at once; the thread that ends the
 * capture runs it after leaving the gate (ortmem_capture_end). The calling
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

#ifdef __cplusplus
}
#endif

#endif /* ORTMEM_GATE_H */
