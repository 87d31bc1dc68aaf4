/* The one door for the library's own host allocations (bookkeeping, never
 * device or mapped memory), so tests can fail any of them (ortmem_alloc_fault). */
#ifndef ORTMEM_SRC_CORE_ALLOC_H
#define ORTMEM_SRC_CORE_ALLOC_H

#include <stddef.h>

/* malloc/calloc/realloc that fail (NULL, nothing allocated or freed) when the
 * injected fault says so; om_free accepts NULL. */
void *om_malloc(size_t size);
void *om_calloc(size_t count, size_t size);
void *om_realloc(void *ptr, size_t size);
void om_free(void *ptr);

#endif
