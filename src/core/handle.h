/* Handle registry: every opaque handle the library gives out is registered, so
 * a foreign, destroyed or wrong-kind pointer is answered with ORTMEM_E_HANDLE
 * instead of being dereferenced. A caller pins a handle for the duration of a
 * call; destroy unregisters first and then waits for the pinned calls to end. */
#ifndef ORTMEM_SRC_CORE_HANDLE_H
#define ORTMEM_SRC_CORE_HANDLE_H

#include <stdbool.h>
#include <ortmem/core.h>

typedef enum om_kind {
    OM_KIND_BACKEND = 1,
    OM_KIND_REGION,
    OM_KIND_ARENA,
    OM_KIND_AUTHORITY,
    OM_KIND_HOLDER,
    OM_KIND_LEASE,
    OM_KIND_GRANT,
    OM_KIND_TICKET,
    OM_KIND_FENCE,
    OM_KIND_KV_CACHE,
    OM_KIND_KV_SEQ,
    OM_KIND_GRAPH_SIGNATURE,
} om_kind;

/* First member of every handle struct. */
typedef struct om_handle {
    om_kind kind;
    unsigned pins; /* calls in flight; guarded by the registry lock */
    bool live;
} om_handle;

ortmem_status om_handle_register(om_handle *h, om_kind kind);

/* Pins a live handle of the given kind; what names the call for the detail. */
ortmem_status om_handle_pin(const void *ptr, om_kind kind, const char *what);
void om_handle_unpin(om_handle *h);
/* Ends a destroy call whose handle memory is gone: its pin went with it. */
void om_handle_end_destroy(void);

/* Makes a pinned handle unreachable for new calls, then waits until the
 * caller's pin is the only one left. The caller still holds its pin.
 * ORTMEM_E_HANDLE when another call is already retiring it (two retires
 * would wait for each other forever). */
ortmem_status om_handle_retire(om_handle *h, const char *what);
/* Undoes om_handle_retire (a destroy that turned out to be refused). */
void om_handle_revive(om_handle *h);

#endif
