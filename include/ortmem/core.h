/* ortmem core: status codes, error details, logging, trace recording.
 *
 * Every fallible call returns an ortmem_status. On failure the calling thread's
 * detail message (ortmem_last_error) names what failed with the numbers involved.
 * The library never aborts, exits or prints; it logs only through the callback
 * set with ortmem_set_log. */
#ifndef ORTMEM_CORE_H
#define ORTMEM_CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(ORTMEM_BUILDING) && defined(__GNUC__)
#define ORTMEM_API __attribute__((visibility("default")))
#else
#define ORTMEM_API
#endif

#if defined(__GNUC__)
#define ORTMEM_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define ORTMEM_PRINTF(fmt, args)
#endif

typedef enum ortmem_status {
    ORTMEM_OK = 0,
    ORTMEM_E_INVALID,     /* bad argument: NULL, zero size, unknown enum value */
    ORTMEM_E_OVERFLOW,    /* a size or offset computation would overflow */
    ORTMEM_E_RANGE,       /* offset or length outside the object */
    ORTMEM_E_ALIGN,       /* an offset or size that must be aligned is not */
    ORTMEM_E_HANDLE,      /* foreign, destroyed or wrong-kind handle */
    ORTMEM_E_STATE,       /* the object is not in a state that allows the call */
    ORTMEM_E_BUSY,        /* the object is still in use by others */
    ORTMEM_E_NOT_FOUND,   /* a pointer or key the object did not hand out */
    ORTMEM_E_DOUBLE_FREE, /* freed, dropped or destroyed twice */
    ORTMEM_E_NOMEM,       /* host bookkeeping or physical memory exhausted */
    ORTMEM_E_BACKEND,     /* a backend call failed; nothing changed */
    ORTMEM_E_UNSUPPORTED, /* an optional capability this backend lacks */
    ORTMEM_E_UNAVAILABLE, /* the backend cannot run on this machine */
    ORTMEM_E_QUARANTINED, /* took effect, but granules or VA were quarantined (see stats) */
    ORTMEM_E_IO,          /* a file or socket operation failed */
    ORTMEM_E_BUDGET,      /* refused: the authority's limit or allowance would be exceeded */
    ORTMEM_E_TIMEOUT,     /* a wait ended before what it waited for happened */
    ORTMEM_E_CANCELLED,   /* the request was withdrawn */
    ORTMEM_STATUS_COUNT
} ortmem_status;

/* Stable short name of a status ("ORTMEM_E_RANGE"); never NULL. Thread-safe. */
ORTMEM_API const char *ortmem_status_str(ortmem_status status);

/* Detail message of the calling thread's most recent failure; "" when none.
 * Valid until the thread's next ortmem call. Thread-safe (thread-local). */
ORTMEM_API const char *ortmem_last_error(void);

/* Sets the calling thread's detail message and returns status unchanged. For
 * custom backends, so their failures reach the caller with numbers. */
ORTMEM_API ortmem_status ortmem_error_set(ortmem_status status, const char *fmt, ...)
    ORTMEM_PRINTF(2, 3);

typedef enum ortmem_log_level {
    ORTMEM_LOG_DEBUG = 0,
    ORTMEM_LOG_INFO,
    ORTMEM_LOG_WARN,
    ORTMEM_LOG_ERROR
} ortmem_log_level;

typedef void (*ortmem_log_fn)(void *user, ortmem_log_level level, const char *message);

/* Installs the process-wide log callback (NULL silences the library, the
 * default). Messages below min_level are not formatted. Thread-safe. */
ORTMEM_API void ortmem_set_log(ortmem_log_fn fn, void *user, ortmem_log_level min_level);

/* Trace recording: every region and arena operation the library performs is
 * appended to a text trace that ortmem-replay can replay (tools/replay/README.md
 * has the format). Also switched on at load time by ORTMEM_TRACE=path. Recording is
 * process-wide and thread-safe; one line per operation. */
ORTMEM_API ortmem_status ortmem_trace_start(const char *path);
ORTMEM_API ortmem_status ortmem_trace_stop(void);

/* Host-allocation fault injection, for tests that prove every failed call
 * changes nothing. Every host allocation the library makes for its own
 * bookkeeping counts as one call; with fail_at = N > 0 the Nth call from now
 * fails (persistent = 0) or the Nth and every later call fails (persistent != 0),
 * and the call that needed it reports ORTMEM_E_NOMEM. fail_at = 0 disarms the
 * fault. Either form resets the counts. Process-wide; arm it while no other
 * thread is inside the library. */
ORTMEM_API void ortmem_alloc_fault(uint64_t fail_at, int persistent);

/* Host allocations counted since the last ortmem_alloc_fault, and how many of
 * them were failed. Either pointer may be NULL. Thread-safe. */
ORTMEM_API void ortmem_alloc_counts(uint64_t *calls, uint64_t *failed);

#ifdef __cplusplus
}
#endif

#endif /* ORTMEM_CORE_H */
