/* Streams and events through a backend: counted, with the live events tracked. */
#include "vmm/backend.h"

#include "core/error.h"

bool om_backend_has_events(const ortmem_backend *b)
{
    return b->ops.event_record && b->ops.event_query && b->ops.event_destroy;
}

ortmem_status om_backend_copy_async(ortmem_backend *b, uintptr_t dst, uintptr_t src, size_t size,
                                    uint64_t stream)
{
    if (!b->ops.copy_async)
        return OM_ERR(ORTMEM_E_UNSUPPORTED, "backend '%s' has no async copy primitive",
                      b->ops.name);
    return om_backend_counted(b, ORTMEM_OP_COPY_ASYNC,
                              b->ops.copy_async(b->self, dst, src, size, stream));
}

ortmem_status om_backend_memset_async(ortmem_backend *b, uintptr_t dst, int value, size_t size,
                                      uint64_t stream)
{
    if (!b->ops.memset_async)
        return OM_ERR(ORTMEM_E_UNSUPPORTED, "backend '%s' has no async memset primitive",
                      b->ops.name);
    return om_backend_counted(b, ORTMEM_OP_MEMSET_ASYNC,
                              b->ops.memset_async(b->self, dst, value, size, stream));
}

ortmem_status om_backend_event_record(ortmem_backend *b, uint64_t stream, uint64_t *event)
{
    if (!om_backend_has_events(b))
        return OM_ERR(ORTMEM_E_UNSUPPORTED, "backend '%s' has no events", b->ops.name);
    uint64_t ev = 0;
    ortmem_status st =
        om_backend_counted(b, ORTMEM_OP_EVENT_RECORD, b->ops.event_record(b->self, stream, &ev));
    if (st != ORTMEM_OK)
        return st;
    pthread_mutex_lock(&b->events.lock);
    bool tracked = om_hashset_insert(&b->events.live, ev);
    pthread_mutex_unlock(&b->events.lock);
    if (!tracked) {
        (void)b->ops.event_destroy(b->self, ev);
        return OM_ERR(ORTMEM_E_NOMEM,
                      "backend '%s' event record: no memory to track one more live event",
                      b->ops.name);
    }
    *event = ev;
    return ORTMEM_OK;
}

ortmem_status om_backend_event_query(ortmem_backend *b, uint64_t event)
{
    if (!om_backend_has_events(b))
        return OM_ERR(ORTMEM_E_UNSUPPORTED, "backend '%s' has no events", b->ops.name);
    /* The lock stays held over the query so that a destroy racing with it
     * cannot free the event under the driver's feet. */
    pthread_mutex_lock(&b->events.lock);
    if (!om_hashset_contains(&b->events.live, event)) {
        pthread_mutex_unlock(&b->events.lock);
        return OM_ERR(ORTMEM_E_NOT_FOUND,
                      "backend '%s' event query: event 0x%llx is not live on this backend "
                      "(never recorded here, or destroyed)",
                      b->ops.name, (unsigned long long)event);
    }
    ortmem_status st = b->ops.event_query(b->self, event);
    pthread_mutex_unlock(&b->events.lock);
    if (st == ORTMEM_E_BUSY) {
        /* Pending is an answer, not a failure. */
        om_ledger_count(&b->ledger.calls[ORTMEM_OP_EVENT_QUERY], 1, b);
        return OM_ERR(ORTMEM_E_BUSY, "backend '%s' event 0x%llx is pending", b->ops.name,
                      (unsigned long long)event);
    }
    return om_backend_counted(b, ORTMEM_OP_EVENT_QUERY, st);
}

ortmem_status om_backend_event_destroy(ortmem_backend *b, uint64_t event)
{
    if (!om_backend_has_events(b))
        return OM_ERR(ORTMEM_E_UNSUPPORTED, "backend '%s' has no events", b->ops.name);
    pthread_mutex_lock(&b->events.lock);
    bool was_live = om_hashset_remove(&b->events.live, event);
    pthread_mutex_unlock(&b->events.lock);
    if (!was_live)
        return OM_ERR(ORTMEM_E_NOT_FOUND,
                      "backend '%s' event destroy: event 0x%llx is not live on this backend "
                      "(never recorded here, or destroyed already)",
                      b->ops.name, (unsigned long long)event);
    ortmem_status st =
        om_backend_counted(b, ORTMEM_OP_EVENT_DESTROY, b->ops.event_destroy(b->self, event));
    if (st != ORTMEM_OK) {
        /* Still live: the caller may try again, and destroy destroys it. */
        pthread_mutex_lock(&b->events.lock);
        bool tracked = om_hashset_insert(&b->events.live, event);
        pthread_mutex_unlock(&b->events.lock);
        if (!tracked)
            return om_error_wrap(st, "(the event is no longer tracked: out of memory)");
    }
    return st;
}

ortmem_status ortmem_backend_copy_async(ortmem_backend *b, void *dst, const void *src, size_t len,
                                        uint64_t stream)
{
    om_error_clear();
    if (!dst || !src || !len)
        return OM_ERR(ORTMEM_E_INVALID, "backend copy async: NULL address or zero length");
    ortmem_status st = om_backend_pin(b, "backend copy async");
    if (st != ORTMEM_OK)
        return st;
    st = om_backend_copy_async(b, (uintptr_t)dst, (uintptr_t)src, len, stream);
    om_backend_unpin(b);
    return st;
}

ortmem_status ortmem_backend_memset_async(ortmem_backend *b, void *dst, int value, size_t len,
                                          uint64_t stream)
{
    om_error_clear();
    if (!dst || !len)
        return OM_ERR(ORTMEM_E_INVALID, "backend memset async: NULL address or zero length");
    ortmem_status st = om_backend_pin(b, "backend memset async");
    if (st != ORTMEM_OK)
        return st;
    st = om_backend_memset_async(b, (uintptr_t)dst, value, len, stream);
    om_backend_unpin(b);
    return st;
}

ortmem_status ortmem_backend_event_record(ortmem_backend *b, uint64_t stream, uint64_t *event)
{
    om_error_clear();
    if (!event)
        return OM_ERR(ORTMEM_E_INVALID, "backend event record: output is NULL");
    ortmem_status st = om_backend_pin(b, "backend event record");
    if (st != ORTMEM_OK)
        return st;
    st = om_backend_event_record(b, stream, event);
    om_backend_unpin(b);
    return st;
}

ortmem_status ortmem_backend_event_query(ortmem_backend *b, uint64_t event)
{
    om_error_clear();
    ortmem_status st = om_backend_pin(b, "backend event query");
    if (st != ORTMEM_OK)
        return st;
    st = om_backend_event_query(b, event);
    om_backend_unpin(b);
    return st;
}

ortmem_status ortmem_backend_event_destroy(ortmem_backend *b, uint64_t event)
{
    om_error_clear();
    ortmem_status st = om_backend_pin(b, "backend event destroy");
    if (st != ORTMEM_OK)
        return st;
    st = om_backend_event_destroy(b, event);
    om_backend_unpin(b);
    return st;
}
