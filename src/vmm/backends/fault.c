/* Fault-injection backend: forwards every primitive to an inner backend but
 * fails chosen calls first, so each failure path above it can be driven. It
 * is built like any custom wrapper, on the public seam alone: the inner
 * backend's forwarding vtable (its ledger counts what reaches it) and
 * ortmem_backend_visit for arm and counts. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ortmem/vmm.h>

#include "core/alloc.h"
#include "core/error.h"

typedef struct fault_backend {
    ortmem_backend *inner;
    ortmem_backend_ops inner_calls; /* counted calls into inner; self = inner */
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
    return f->inner_calls.granularity(f->inner, minimum, recommended);
}

static ortmem_status fault_reserve(void *self, size_t size, size_t align, uintptr_t *va)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_RESERVE);
    return f->inner_calls.reserve(f->inner, size, align, va);
}

static ortmem_status fault_unreserve(void *self, uintptr_t va, size_t size)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_UNRESERVE);
    return f->inner_calls.unreserve(f->inner, va, size);
}

static ortmem_status fault_create(void *self, size_t size, unsigned flags, uint64_t *handle)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_CREATE);
    return f->inner_calls.create(f->inner, size, flags, handle);
}

static ortmem_status fault_release(void *self, uint64_t handle)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_RELEASE);
    return f->inner_calls.release(f->inner, handle);
}

static ortmem_status fault_map(void *self, uintptr_t va, size_t size, uint64_t handle,
                               size_t handle_offset)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_MAP);
    return f->inner_calls.map(f->inner, va, size, handle, handle_offset);
}

static ortmem_status fault_unmap(void *self, uintptr_t va, size_t size)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_UNMAP);
    return f->inner_calls.unmap(f->inner, va, size);
}

static ortmem_status fault_set_access(void *self, uintptr_t va, size_t size, ortmem_access access)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_SET_ACCESS);
    return f->inner_calls.set_access(f->inner, va, size, access);
}

static ortmem_status fault_export(void *self, uint64_t handle, int *fd)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_EXPORT);
    return f->inner_calls.export_fd(f->inner, handle, fd);
}

static ortmem_status fault_import(void *self, int fd, size_t size, uint64_t *handle)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_IMPORT);
    return f->inner_calls.import_fd(f->inner, fd, size, handle);
}

static ortmem_status fault_copy(void *self, uintptr_t dst, uintptr_t src, size_t size)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_COPY);
    return f->inner_calls.copy(f->inner, dst, src, size);
}

static ortmem_status fault_copy_async(void *self, uintptr_t dst, uintptr_t src, size_t size,
                                      uint64_t stream)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_COPY_ASYNC);
    return f->inner_calls.copy_async(f->inner, dst, src, size, stream);
}

static ortmem_status fault_memset_async(void *self, uintptr_t dst, int value, size_t size,
                                        uint64_t stream)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_MEMSET_ASYNC);
    return f->inner_calls.memset_async(f->inner, dst, value, size, stream);
}

static ortmem_status fault_event_record(void *self, uint64_t stream, uint64_t *event)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_EVENT_RECORD);
    return f->inner_calls.event_record(f->inner, stream, event);
}

static ortmem_status fault_event_query(void *self, uint64_t event)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_EVENT_QUERY);
    return f->inner_calls.event_query(f->inner, event);
}

static ortmem_status fault_event_destroy(void *self, uint64_t event)
{
    fault_backend *f = self;
    FAULT_CHECK(f, ORTMEM_OP_EVENT_DESTROY);
    return f->inner_calls.event_destroy(f->inner, event);
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
    ortmem_backend_ops inner_calls;
    st = ortmem_backend_forwarding_ops(inner, &inner_calls);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "fault backend create");
    fault_backend *f = om_calloc(1, sizeof *f);
    if (!f)
        return OM_ERR(ORTMEM_E_NOMEM, "fault backend create: bookkeeping");
    f->inner = inner;
    f->inner_calls = inner_calls;
    f->options = opt;
    f->rng = opt.seed;
    pthread_mutex_init(&f->lock, NULL);
    snprintf(f->name, sizeof f->name, "fault(%s)", inner_calls.name);
    /* Optional slots exist exactly where the inner backend has them. */
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
        .export_fd = inner_calls.export_fd ? fault_export : NULL,
        .import_fd = inner_calls.import_fd ? fault_import : NULL,
        .copy = inner_calls.copy ? fault_copy : NULL,
        .destroy = fault_destroy,
        .copy_async = inner_calls.copy_async ? fault_copy_async : NULL,
        .memset_async = inner_calls.memset_async ? fault_memset_async : NULL,
        .event_record = inner_calls.event_record ? fault_event_record : NULL,
        .event_query = inner_calls.event_query ? fault_event_query : NULL,
        .event_destroy = inner_calls.event_destroy ? fault_event_destroy : NULL,
    };
    st = ortmem_backend_create_wrapper(inner, &ops, f, out);
    if (st != ORTMEM_OK)
        fault_destroy(f);
    return st;
}

/* One call of arm or counts, run by ortmem_backend_visit with the backend pinned. */
typedef struct fault_call {
    const char *what;
    bool reached; /* the visit ran: the handle was a live backend */
    const ortmem_fault_options *arm;
    uint64_t *calls, *injected;
} fault_call;

static ortmem_status fault_visit(void *self, const ortmem_backend_ops *ops, void *arg)
{
    fault_call *call = arg;
    call->reached = true;
    if (ops->reserve != fault_reserve)
        return OM_ERR(ORTMEM_E_HANDLE, "%s: backend '%s' is not a fault-injection backend",
                      call->what, ops->name);
    fault_backend *f = self;
    pthread_mutex_lock(&f->lock);
    if (call->arm) {
        f->options = *call->arm;
        f->calls = 0;
        f->injected = 0;
        f->rng = call->arm->seed;
    }
    if (call->calls)
        *call->calls = f->calls;
    if (call->injected)
        *call->injected = f->injected;
    pthread_mutex_unlock(&f->lock);
    return ORTMEM_OK;
}

static ortmem_status fault_run(ortmem_backend *b, fault_call *call)
{
    ortmem_status st = ortmem_backend_visit(b, fault_visit, call);
    if (st != ORTMEM_OK && !call->reached)
        return om_error_wrap(st, "%s", call->what);
    return st;
}

ortmem_status ortmem_fault_backend_arm(ortmem_backend *b, const ortmem_fault_options *options)
{
    om_error_clear();
    ortmem_fault_options opt;
    ortmem_status st = fault_validate(options, &opt, "fault backend arm");
    if (st != ORTMEM_OK)
        return st;
    fault_call call = {.what = "fault backend arm", .arm = &opt};
    return fault_run(b, &call);
}

ortmem_status ortmem_fault_backend_counts(ortmem_backend *b, uint64_t *calls, uint64_t *injected)
{
    om_error_clear();
    fault_call call = {.what = "fault backend counts", .calls = calls, .injected = injected};
    return fault_run(b, &call);
}
