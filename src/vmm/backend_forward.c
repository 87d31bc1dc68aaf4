/* Wrapping and extending backends: the forwarding vtable and wrappers. */
#include "vmm/backend.h"

#include "core/error.h"

/* The forwarding vtable's slots: self is the wrapped backend, kept alive by
 * its wrapper (ortmem_backend_create_wrapper), so no pin is taken. */
static ortmem_status om_fwd_granularity(void *self, size_t *minimum, size_t *recommended)
{
    ortmem_backend *b = self;
    *minimum = b->granule_min;
    *recommended = b->granule;
    return ORTMEM_OK;
}

static ortmem_status om_fwd_reserve(void *self, size_t size, size_t align, uintptr_t *va)
{
    return om_backend_reserve(self, size, align, va);
}

static ortmem_status om_fwd_unreserve(void *self, uintptr_t va, size_t size)
{
    return om_backend_unreserve(self, va, size);
}

static ortmem_status om_fwd_create(void *self, size_t size, unsigned flags, uint64_t *handle)
{
    return om_backend_create_granule(self, size, flags, handle);
}

static ortmem_status om_fwd_release(void *self, uint64_t handle)
{
    return om_backend_release_granule(self, handle);
}

static ortmem_status om_fwd_map(void *self, uintptr_t va, size_t size, uint64_t handle,
                                size_t handle_offset)
{
    return om_backend_map(self, va, size, handle, handle_offset);
}

static ortmem_status om_fwd_unmap(void *self, uintptr_t va, size_t size)
{
    return om_backend_unmap(self, va, size);
}

static ortmem_status om_fwd_set_access(void *self, uintptr_t va, size_t size, ortmem_access access)
{
    return om_backend_set_access(self, va, size, access);
}

static ortmem_status om_fwd_export(void *self, uint64_t handle, int *fd)
{
    return om_backend_export(self, handle, fd);
}

static ortmem_status om_fwd_import(void *self, int fd, size_t size, uint64_t *handle)
{
    return om_backend_import(self, fd, size, handle);
}

static ortmem_status om_fwd_copy(void *self, uintptr_t dst, uintptr_t src, size_t size)
{
    return om_backend_copy(self, dst, src, size);
}

static ortmem_status om_fwd_copy_async(void *self, uintptr_t dst, uintptr_t src, size_t size,
                                       uint64_t stream)
{
    return om_backend_copy_async(self, dst, src, size, stream);
}

static ortmem_status om_fwd_memset_async(void *self, uintptr_t dst, int value, size_t size,
                                         uint64_t stream)
{
    return om_backend_memset_async(self, dst, value, size, stream);
}

static ortmem_status om_fwd_event_record(void *self, uint64_t stream, uint64_t *event)
{
    return om_backend_event_record(self, stream, event);
}

static ortmem_status om_fwd_event_query(void *self, uint64_t event)
{
    return om_backend_event_query(self, event);
}

static ortmem_status om_fwd_event_destroy(void *self, uint64_t event)
{
    return om_backend_event_destroy(self, event);
}

ortmem_status ortmem_backend_forwarding_ops(ortmem_backend *b, ortmem_backend_ops *calls)
{
    om_error_clear();
    if (!calls)
        return OM_ERR(ORTMEM_E_INVALID, "backend forwarding ops: output is NULL");
    ortmem_status st = om_backend_pin(b, "backend forwarding ops");
    if (st != ORTMEM_OK)
        return st;
    bool events = om_backend_has_events(b);
    *calls = (ortmem_backend_ops){
        .struct_size = sizeof *calls,
        .name = b->ops.name,
        .granularity = om_fwd_granularity,
        .reserve = om_fwd_reserve,
        .unreserve = om_fwd_unreserve,
        .create = om_fwd_create,
        .release = om_fwd_release,
        .map = om_fwd_map,
        .unmap = om_fwd_unmap,
        .set_access = om_fwd_set_access,
        .export_fd = b->ops.export_fd ? om_fwd_export : NULL,
        .import_fd = b->ops.import_fd ? om_fwd_import : NULL,
        .copy = b->ops.copy ? om_fwd_copy : NULL,
        .destroy = NULL,
        .copy_async = b->ops.copy_async ? om_fwd_copy_async : NULL,
        .memset_async = b->ops.memset_async ? om_fwd_memset_async : NULL,
        .event_record = events ? om_fwd_event_record : NULL,
        .event_query = events ? om_fwd_event_query : NULL,
        .event_destroy = events ? om_fwd_event_destroy : NULL,
    };
    om_backend_unpin(b);
    return ORTMEM_OK;
}

ortmem_status ortmem_backend_create_wrapper(ortmem_backend *inner, const ortmem_backend_ops *ops,
                                            void *self, ortmem_backend **out)
{
    om_error_clear();
    ortmem_status st = om_backend_pin(inner, "backend create wrapper");
    if (st != ORTMEM_OK)
        return st;
    ortmem_backend *b = NULL;
    st = ortmem_backend_create(ops, self, &b);
    if (st == ORTMEM_OK) {
        b->inner = inner;
        om_backend_use(inner);
        *out = b;
    }
    om_backend_unpin(inner);
    return st;
}

ortmem_status ortmem_backend_visit(ortmem_backend *b,
                                   ortmem_status (*fn)(void *self, const ortmem_backend_ops *ops,
                                                       void *arg),
                                   void *arg)
{
    om_error_clear();
    if (!fn)
        return OM_ERR(ORTMEM_E_INVALID, "backend visit: fn is NULL");
    ortmem_status st = om_backend_pin(b, "backend visit");
    if (st != ORTMEM_OK)
        return st;
    st = fn(b->self, &b->ops, arg);
    om_backend_unpin(b);
    return st;
}
