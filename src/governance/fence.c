/* Fences: a signalled fence completes when signalled (the CPU backend's
 * kind); a query fence asks the engine (which tracks its own streams) through
 * a callback; an event fence asks the backend whether an event recorded on a
 * stream completed, so a retirement waits for that stream and never for the
 * whole device. */
#include <stdio.h>

#include "core/alloc.h"
#include "governance/fence.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/handle.h"

struct ortmem_fence {
    om_handle hdr;
    atomic_bool signalled;
    ortmem_fence_query_fn query;
    void *user;
    _Atomic uint64_t pending; /* retirements waiting on it */
    ortmem_backend *backend;  /* event fences: the backend that recorded the event */
    uint64_t event;
};

static int om_event_done(void *user)
{
    ortmem_fence *f = user;
    return ortmem_backend_event_query(f->backend, f->event) == ORTMEM_OK;
}

static ortmem_status om_fence_new(ortmem_fence_query_fn query, void *user, ortmem_fence **out)
{
    if (!out)
        return OM_ERR(ORTMEM_E_INVALID, "fence create: out is NULL");
    ortmem_fence *f = om_calloc(1, sizeof *f);
    if (!f)
        return OM_ERR(ORTMEM_E_NOMEM, "fence create: bookkeeping");
    f->query = query;
    f->user = user;
    ortmem_status st = om_handle_register(&f->hdr, OM_KIND_FENCE);
    if (st != ORTMEM_OK) {
        om_free(f);
        return st;
    }
    *out = f;
    return ORTMEM_OK;
}

ortmem_status ortmem_fence_create(ortmem_fence **out)
{
    om_error_clear();
    return om_fence_new(NULL, NULL, out);
}

ortmem_status ortmem_fence_create_query(ortmem_fence_query_fn query, void *user, ortmem_fence **out)
{
    om_error_clear();
    if (!query)
        return OM_ERR(ORTMEM_E_INVALID, "fence create: query is NULL");
    return om_fence_new(query, user, out);
}

ortmem_status ortmem_fence_create_event(ortmem_backend *backend, uint64_t stream,
                                        ortmem_fence **out)
{
    om_error_clear();
    if (!out)
        return OM_ERR(ORTMEM_E_INVALID, "fence create: out is NULL");
    uint64_t event = 0;
    ortmem_status st = ortmem_backend_event_record(backend, stream, &event);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "fence create (event on stream 0x%llx)",
                             (unsigned long long)stream);
    ortmem_fence *f = NULL;
    st = om_fence_new(om_event_done, NULL, &f);
    if (st != ORTMEM_OK) {
        /* Destroying the event clears the thread's detail: keep the fence's. */
        char detail[256];
        snprintf(detail, sizeof detail, "%s", ortmem_last_error());
        (void)ortmem_backend_event_destroy(backend, event);
        return OM_ERR(st, "%s", detail);
    }
    f->user = f;
    f->backend = backend;
    f->event = event;
    *out = f;
    return ORTMEM_OK;
}

ortmem_status ortmem_fence_signal(ortmem_fence *f)
{
    om_error_clear();
    ortmem_status st = om_handle_pin(f, OM_KIND_FENCE, "fence signal");
    if (st != ORTMEM_OK)
        return st;
    if (f->query)
        st = OM_ERR(ORTMEM_E_STATE, "fence signal: a query fence completes when its query says so");
    else
        atomic_store(&f->signalled, true);
    om_handle_unpin(&f->hdr);
    return st;
}

bool om_fence_complete(ortmem_fence *f)
{
    if (atomic_load(&f->signalled))
        return true;
    if (f->query && f->query(f->user)) {
        atomic_store(&f->signalled, true); /* a completed fence stays complete */
        return true;
    }
    return false;
}

ortmem_status ortmem_fence_query(ortmem_fence *f)
{
    om_error_clear();
    ortmem_status st = om_handle_pin(f, OM_KIND_FENCE, "fence query");
    if (st != ORTMEM_OK)
        return st;
    bool done = om_fence_complete(f);
    om_handle_unpin(&f->hdr);
    return done ? ORTMEM_OK : ORTMEM_E_BUSY;
}

void om_fence_pin(ortmem_fence *f)
{
    atomic_fetch_add(&f->pending, 1);
}

void om_fence_unpin(ortmem_fence *f)
{
    atomic_fetch_sub(&f->pending, 1);
}

ortmem_status ortmem_fence_destroy(ortmem_fence *f)
{
    om_error_clear();
    ortmem_status st = om_handle_pin(f, OM_KIND_FENCE, "fence destroy");
    if (st != ORTMEM_OK)
        return st;
    uint64_t pending = atomic_load(&f->pending);
    if (pending) {
        om_handle_unpin(&f->hdr);
        return OM_ERR(ORTMEM_E_BUSY, "fence destroy: %llu retirements still wait on it",
                      (unsigned long long)pending);
    }
    st = om_handle_retire(&f->hdr, "fence destroy");
    if (st != ORTMEM_OK) {
        om_handle_unpin(&f->hdr);
        return st;
    }
    /* A retirement may have been tied to it while the pins drained. */
    if ((pending = atomic_load(&f->pending)) != 0) {
        om_handle_revive(&f->hdr);
        om_handle_unpin(&f->hdr);
        return OM_ERR(ORTMEM_E_BUSY, "fence destroy: %llu retirements still wait on it",
                      (unsigned long long)pending);
    }
    if (f->backend)
        (void)ortmem_backend_event_destroy(f->backend, f->event);
    om_free(f);
    om_handle_end_destroy();
    return ORTMEM_OK;
}
