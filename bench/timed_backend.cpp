#include "timed_backend.hpp"

#include <chrono>

namespace ortmem_bench
{

namespace
{

struct Timed {
    ortmem_backend *inner;
    ortmem_backend_ops calls;
    CallTimes *times;
};

using Clock = std::chrono::steady_clock;

template <class F> ortmem_status timed(double &into, F &&call)
{
    Clock::time_point t0 = Clock::now();
    ortmem_status st = call();
    into += std::chrono::duration<double>(Clock::now() - t0).count();
    return st;
}

Timed *of(void *self)
{
    return static_cast<Timed *>(self);
}

ortmem_status t_granularity(void *self, size_t *minimum, size_t *recommended)
{
    return of(self)->calls.granularity(of(self)->inner, minimum, recommended);
}
ortmem_status t_reserve(void *self, size_t size, size_t alignment, uintptr_t *va)
{
    return of(self)->calls.reserve(of(self)->inner, size, alignment, va);
}
ortmem_status t_unreserve(void *self, uintptr_t va, size_t size)
{
    return of(self)->calls.unreserve(of(self)->inner, va, size);
}
ortmem_status t_create(void *self, size_t size, unsigned flags, uint64_t *handle)
{
    Timed *t = of(self);
    return timed(t->times->create, [&] { return t->calls.create(t->inner, size, flags, handle); });
}
ortmem_status t_release(void *self, uint64_t handle)
{
    Timed *t = of(self);
    return timed(t->times->release, [&] { return t->calls.release(t->inner, handle); });
}
ortmem_status t_map(void *self, uintptr_t va, size_t size, uint64_t handle, size_t offset)
{
    Timed *t = of(self);
    return timed(t->times->map, [&] { return t->calls.map(t->inner, va, size, handle, offset); });
}
ortmem_status t_unmap(void *self, uintptr_t va, size_t size)
{
    Timed *t = of(self);
    return timed(t->times->unmap, [&] { return t->calls.unmap(t->inner, va, size); });
}
ortmem_status t_set_access(void *self, uintptr_t va, size_t size, ortmem_access access)
{
    Timed *t = of(self);
    return timed(t->times->set_access,
                 [&] { return t->calls.set_access(t->inner, va, size, access); });
}
void t_destroy(void *self)
{
    delete of(self);
}

} // namespace

bool create_timed_backend(benchmark::State &state, ortmem_backend *inner, CallTimes *times,
                          BackendPtr &out)
{
    Timed *t = new Timed{inner, {}, times};
    t->calls.struct_size = sizeof t->calls;
    if (!ok_or_skip(state, ortmem_backend_forwarding_ops(inner, &t->calls),
                    "ortmem_backend_forwarding_ops")) {
        delete t;
        return false;
    }
    ortmem_backend_ops ops{};
    ops.struct_size = sizeof ops;
    ops.name = "timed";
    ops.granularity = t_granularity;
    ops.reserve = t_reserve;
    ops.unreserve = t_unreserve;
    ops.create = t_create;
    ops.release = t_release;
    ops.map = t_map;
    ops.unmap = t_unmap;
    ops.set_access = t_set_access;
    ops.destroy = t_destroy;
    ortmem_backend *wrapper = nullptr;
    if (!ok_or_skip(state, ortmem_backend_create_wrapper(inner, &ops, t, &wrapper),
                    "ortmem_backend_create_wrapper")) {
        delete t;
        return false;
    }
    out.reset(wrapper);
    return true;
}

} // namespace ortmem_bench
