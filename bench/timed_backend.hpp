// A backend wrapper that times each physical call it forwards (create, map,
// set-access, unmap, release): how much of a commit is the driver's and how
// much is ortmem's own bookkeeping.
#ifndef ORTMEM_BENCH_TIMED_BACKEND_HPP
#define ORTMEM_BENCH_TIMED_BACKEND_HPP

#include "harness.hpp"

namespace ortmem_bench
{

struct CallTimes {
    double create = 0, map = 0, set_access = 0, unmap = 0, release = 0; // seconds
    double commit_side() const
    {
        return create + map + set_access;
    }
    double decommit_side() const
    {
        return unmap + release;
    }
};

// Wraps inner; *times (which must outlive the wrapper) accumulates the time
// spent inside inner's calls. The wrapper is destroyed as any backend.
bool create_timed_backend(benchmark::State &state, ortmem_backend *inner, CallTimes *times,
                          BackendPtr &out);

} // namespace ortmem_bench

#endif
