/* Waiting for the cache's stream: one event recorded after the work enqueued
 * on it so far, queried until it completes. Only that stream is waited for,
 * never the whole device, so other streams keep running. */
#include <sched.h>

#include "kv/kv.h"

ortmem_status om_kv_stream_wait(ortmem_backend *backend, uint64_t stream)
{
    uint64_t event = 0;
    ortmem_status st = ortmem_backend_event_record(backend, stream, &event);
    if (st != ORTMEM_OK)
        return st;
    while ((st = ortmem_backend_event_query(backend, event)) == ORTMEM_E_BUSY)
        sched_yield();
    ortmem_status destroyed = ortmem_backend_event_destroy(backend, event);
    return st == ORTMEM_OK ? destroyed : st;
}
