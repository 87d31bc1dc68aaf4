/* The engine's failures: an ortmem_status and a message with the numbers.
 * Every engine call that can fail takes an eng_error * (may be NULL) and
 * returns the status it records; a failed call changes nothing it was given. */
#ifndef ENGINE_COMMON_STATUS_H
#define ENGINE_COMMON_STATUS_H

#include <stdarg.h>
#include <ortmem/core.h>

typedef struct eng_error {
    ortmem_status status;
    char message[512];
} eng_error;

/* Records status and the printf-style message into err (when not NULL) and
 * returns status. */
ortmem_status eng_fail(eng_error *err, ortmem_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
ortmem_status eng_vfail(eng_error *err, ortmem_status status, const char *fmt, va_list args);

/* Prefixes err's message with "what: " (context as a failure travels up). */
ortmem_status eng_wrap(eng_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records an ortmem call's failure: status and ortmem_last_error()'s detail,
 * prefixed with what the engine was doing. */
ortmem_status eng_from_ortmem(eng_error *err, ortmem_status status, const char *what);

#endif
