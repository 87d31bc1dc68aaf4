/* Fault-injection backend: forwards every primitive to an inner backend but
 * fails chosen calls first, so each failure path above it can be driven. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "vmm/backend.h"

typedef struct fault_backend {
    ortmem_backend *inner;
    pthread_mutex_t lock;
    ortmem_fault_options options;
    uint64_t calls;
    uint64_t injected;
    uint64_t rng;
    char name[64];
} fault_backend;

static uint64_t fault_next_random(fault_backend *f)
{
    /* splitmix64: deterministic for a seed. */
    uint64_t z = (f->rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Returns ORTMEM_E_BACKEND when this call of op is to fail. */
static ortmem_status fault_check(fault_backend *f, ortmem_backend_op op)
{
    pthread_mutex_lock(&f->lock);
    ortmem_status st = ORTMEM_OK;
    if (f->options.op == ORTMEM_OP_ANY || f->options.op == op) {
        uint64_t n = ++f->calls;
        /* Persistent: every call from fail_at on, like a device that broke. */
        bool stuck = f->options.persistent && f->options.fail_at && n >= f->options.fail_at;
        bool fail = stuck || (f->options.fail_at && n == f->options.fail_at);
        if (!fail && f->options.probability > 0.0) {
            double u = (double)(fault_next_random(f) >> 11) * (1.0 / 9007199254740992.0);
            fail = u < f->options.probability;
        }
        if (fail) {
            f->injected++;
            st = OM_ERR(ORTMEM_E_BACKEND, "fault injected into %s (counted call %llu%s)",
                        ortmem_backend_op_name(op), (unsigned long long)n,
                        stuck ? ", failing persistently until re-armed" : "");
        }
    }
    pthread_mutex_unlock(&f->lock);
    return st;
}

#define FAULT_CHECK(f, op)                                                                         \
    do {                                                                                           \
        ortmem_status fault_st_ = fault_check((f), (op));                                          \
        if (fault_st_ != ORTMEM_OK)                                                                \
            return fault_st_;                                                                      \
    } while (0)

static ortmem_status fault_granularity(void *self, size_t *minimum, size_t *recommended)
{
    fault_backend *f = self;
    *minimum = f->inner->granule_min;
    *recommended = f->inner->granule;
    return ORTMEM_OK;
}

static ortmem_status fault_reserve(void *self, size_t size, size_t align, uintptr_t *va)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_RESERVE);
    return om_backend_reserve(f->inner, size, align, va);
}

static ortmem_status fault_unreserve(void *self, uintptr_t va, size_t size)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_UNRESERVE);
    return om_backend_unreserve(f->inner, va, size);
}

static ortmem_status fault_create(void *self, size_t size, unsigned flags, uint64_t *handle)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_CREATE);
    return om_backend_create_granule(f->inner, size, flags, handle);
}

static ortmem_status fault_release(void *self, uint64_t handle)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_RELEASE);
    return om_backend_release_granule(f->inner, handle);
}

static ortmem_status fault_map(void *self, uintptr_t va, size_t size, uint64_t handle,
                               size_t handle_offset)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_MAP);
    return om_backend_map(f->inner, va, size, handle, handle_offset);
}

static ortmem_status fault_unmap(void *self, uintptr_t va, size_t size)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_UNMAP);
    return om_backend_unmap(f->inner, va, size);
}

static ortmem_status fault_set_access(void *self, uintptr_t va, size_t size, ortmem_access access)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_SET_ACCESS);
    return om_backend_set_access(f->inner, va, size, access);
}

static ortmem_status fault_export(void *self, uint64_t handle, int *fd)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_EXPORT);
    return om_backend_export(f->inner, handle, fd);
}

static ortmem_status fault_import(void *self, int fd, size_t size, uint64_t *handle)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_IMPORT);
    return om_backend_import(f->inner, fd, size, handle);
}

static ortmem_status fault_copy(void *self, uintptr_t dst, uintptr_t src, size_t size)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_COPY);
    return om_backend_copy(f->inner, dst, src, size);
}

static ortmem_status fault_copy_async(void *self, uintptr_t dst, uintptr_t src, size_t size,
                                      uint64_t stream)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_COPY_ASYNC);
    return om_backend_copy_async(f->inner, dst, src, size, stream);
}

static ortmem_status fault_memset_async(void *self, uintptr_t dst, int value, size_t size,
                                        uint64_t stream)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_MEMSET_ASYNC);
    return om_backend_memset_async(f->inner, dst, value, size, stream);
}

static ortmem_status fault_event_record(void *self, uint64_t stream, uint64_t *event)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_EVENT_RECORD);
    return om_backend_event_record(f->inner, stream, event);
}

static ortmem_status fault_event_query(void *self, uint64_t event)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_EVENT_QUERY);
    return om_backend_event_query(f->inner, event);
}

static ortmem_status fault_event_release(void *self, uint64_t event)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_EVENT_RELEASE);
    return om_backend_event_release(f->inner, event);
}

static void fault_destroy(void *self)
{
    fault_backend *f = self;
    pthread_mutex_destroy(&f->lock);
    om_free(f);
}

static ortmem_status fault_validate(const ortmem_fault_options *options, ortmem_fault_options *out,
                                    const char *what)
{
    ortmem_fault_options opt = ORTMEM_FAULT_OPTIONS_INIT;
    if (options) {
        if (options->struct_size == 0 || options->struct_size > sizeof opt)
            return OM_ERR(ORTMEM_E_INVALID, "%s: options struct_size %zu (this library knows %zu)",
                          what, options->struct_size, sizeof opt);
        memcpy(&opt, options, options->struct_size);
    }
    if ((unsigned)opt.op > ORTMEM_OP_ANY)
        return OM_ERR(ORTMEM_E_INVALID, "%s: unknown operation %d", what, (int)opt.op);
    if (!(opt.probability >= 0.0 && opt.probability <= 1.0))
        return OM_ERR(ORTMEM_E_INVALID, "%s: probability %g outside [0, 1]", what, opt.probability);
    if (opt.persistent && !opt.fail_at)
        return OM_ERR(ORTMEM_E_INVALID,
                      "%s: persistent failure needs fail_at >= 1 (the first call to fail)", what);
    *out = opt;
    return ORTMEM_OK;
}

static bool fault_is_fault_backend(const ortmem_backend *b);

ortmem_status ortmem_fault_backend_create(ortmem_backend *inner,
                                          const ortmem_fault_options *options, ortmem_backend **out)
{
    om_error_clear();
    if (!out)
        return OM_ERR(ORTMEM_E_INVALID, "fault backend create: out is NULL");
    ortmem_fault_options opt;
    ortmem_status st = fault_validate(options, &opt, "fault backend create");
    if (st != ORTMEM_OK)
        return st;
    st = om_backend_pin(inner, "fault backend create");
    if (st != ORTMEM_OK)
        return st;
    fault_backend *f = om_calloc(1, sizeof *f);
    if (!f) {
        om_backend_unpin(inner);
        return OM_ERR(ORTMEM_E_NOMEM, "fault backend create: bookkeeping");
    }
    f->inner = inner;
    f->options = opt;
    f->rng = opt.seed;
    pthread_mutex_init(&f->lock, NULL);
    snprintf(f->name, sizeof f->name, "fault(%s)", inner->ops.name);
    ortmem_backend_ops ops = {
        .struct_size = sizeof ops,
        .name = f->name,
        .granularity = fault_granularity,
        .reserve = fault_reserve,
        .unreserve = fault_unreserve,
        .create = fault_create,
        .release = fault_release,
        .map = fault_map,
        .unmap = fault_unmap,
        .set_access = fault_set_access,
        .export_fd = inner->ops.export_fd ? fault_export : NULL,
        .import_fd = inner->ops.import_fd ? fault_import : NULL,
        .copy = inner->ops.copy ? fault_copy : NULL,
        .destroy = fault_destroy,
        .copy_async = inner->ops.copy_async ? fault_copy_async : NULL,
        .memset_async = inner->ops.memset_async ? fault_memset_async : NULL,
        .event_record = om_backend_has_events(inner) ? fault_event_record : NULL,
        .event_query = om_backend_has_events(inner) ? fault_event_query : NULL,
        .event_release = om_backend_has_events(inner) ? fault_event_release : NULL,
    };
    ortmem_backend *b;
    st = ortmem_backend_create(&ops, f, &b);
    if (st != ORTMEM_OK) {
        fault_destroy(f);
        om_backend_unpin(inner);
        return st;
    }
    b->inner = inner;
    om_backend_use(inner);
    om_backend_unpin(inner);
    *out = b;
    return ORTMEM_OK;
}

static bool fault_is_fault_backend(const ortmem_backend *b)
{
    return b->ops.reserve == fault_reserve;
}

static ortmem_status fault_pin(ortmem_backend *b, const char *what, fault_backend **f)
{
    ortmem_status st = om_backend_pin(b, what);
    if (st != ORTMEM_OK)
        return st;
    if (!fault_is_fault_backend(b)) {
        om_backend_unpin(b);
        return OM_ERR(ORTMEM_E_HANDLE, "%s: backend '%s' is not a fault-injection backend", what,
                      b->ops.name);
    }
    *f = b->self;
    return ORTMEM_OK;
}

ortmem_status ortmem_fault_backend_arm(ortmem_backend *b, const ortmem_fault_options *options)
{
    om_error_clear();
    ortmem_fault_options opt;
    ortmem_status st = fault_validate(options, &opt, "fault backend arm");
    if (st != ORTMEM_OK)
        return st;
    fault_backend *f = NULL;
    st = fault_pin(b, "fault backend arm", &f);
    if (st != ORTMEM_OK)
        return st;
    pthread_mutex_lock(&f->lock);
    f->options = opt;
    f->calls = 0;
    f->injected = 0;
    f->rng = opt.seed;
    pthread_mutex_unlock(&f->lock);
    om_backend_unpin(b);
    return ORTMEM_OK;
}

ortmem_status ortmem_fault_backend_counts(ortmem_backend *b, uint64_t *calls, uint64_t *injected)
{
    om_error_clear();
    fault_backend *f = NULL;
    ortmem_status st = fault_pin(b, "fault backend counts", &f);
    if (st != ORTMEM_OK)
        return st;
    pthread_mutex_lock(&f->lock);
    if (calls)
        *calls = f->calls;
    if (injected)
        *injected = f->injected;
    pthread_mutex_unlock(&f->lock);
    om_backend_unpin(b);
    return ORTMEM_OK;
}
