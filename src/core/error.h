/* Internal error helpers: set the thread-local detail and return the status. */
#ifndef ORTMEM_SRC_CORE_ERROR_H
#define ORTMEM_SRC_CORE_ERROR_H

#include <ortmem/core.h>

/* Clears the calling thread's detail (called at the start of public entries). */
void om_error_clear(void);

/* Prefixes the current detail with context ("region commit: " + detail). */
ortmem_status om_error_wrap(ortmem_status status, const char *fmt, ...) ORTMEM_PRINTF(2, 3);

#define OM_ERR(status, ...) ortmem_error_set((status), __VA_ARGS__)

#endif
