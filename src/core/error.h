/* Internal error helpers: set the thread-local detail and return the status. */
#ifndef ORTMEM_SRC_CORE_ERROR_H
#define ORTMEM_SRC_CORE_ERROR_H

#include <ortmem/core.h>

/* Longest detail kept, terminator included. */
#define OM_DETAIL_MAX 512

/* Clears the calling thread's detail (called at the start of public entries). */
void om_error_clear(void);

/* Prefixes the current detail with context ("region commit: " + detail). */
ortmem_status om_error_wrap(ortmem_status status, const char *fmt, ...) ORTMEM_PRINTF(2, 3);

/* A copy of the calling thread's detail, kept across cleanup calls that
 * overwrite it, so the failure reported is the first one. */
typedef struct om_error_saved {
    char detail[OM_DETAIL_MAX];
} om_error_saved;

/* Copies the calling thread's detail into saved. */
void om_error_save(om_error_saved *saved);

/* Makes saved the calling thread's detail again and returns status. */
ortmem_status om_error_restore(const om_error_saved *saved, ortmem_status status);

#define OM_ERR(status, ...) ortmem_error_set((status), __VA_ARGS__)

#endif
