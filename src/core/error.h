/* Internal error helpers: set the thread-local detail and return the status. */
#ifndef ORTMEM_SRC_CORE_ERROR_H
#define ORTMEM_SRC_CORE_ERROR_H

#include <stddef.h>

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

/* ---- versioned caller structs ----
 * Option, output and vtable structs begin with size_t struct_size, the size
 * the caller was compiled against; the library reads or writes only that much. */

/* The struct_size that covers type's field and everything before it. */
#define OM_SIZE_THROUGH(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/* ORTMEM_OK when the struct exists (struct_size not NULL) and
 * need <= *struct_size <= know; know SIZE_MAX means any larger size is fine
 * (only the known part is read). Otherwise ORTMEM_E_INVALID, with a detail
 * naming the call (what), the argument (name) and the numbers. */
ortmem_status om_struct_check(const char *what, const char *name, const size_t *struct_size,
                              size_t need, size_t know);

/* The common case: ptr not NULL, its struct_size set (not 0) and no larger
 * than the struct this library knows. ptr is evaluated more than once. */
#define OM_STRUCT_CHECK(what, name, ptr)                                                           \
    om_struct_check((what), (name), (ptr) ? &(ptr)->struct_size : NULL, 1, sizeof *(ptr))

#define OM_ERR(status, ...) ortmem_error_set((status), __VA_ARGS__)

#endif
