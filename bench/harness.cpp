// The harness helpers both benchmark binaries use (harness.hpp): skipping on a
// failed call, the backend ledger, page faults, backend call counters.
#include "harness.hpp"

#include <sys/resource.h>

#include <string>

namespace ortmem_bench
{

bool ok_or_skip(benchmark::State &state, ortmem_status status, const char *call)
{
    if (status == ORTMEM_OK)
        return true;
    std::string message =
        std::string(call) + " -> " + ortmem_status_str(status) + ": " + ortmem_last_error();
    state.SkipWithError(message.c_str());
    return false;
}

ortmem_vmm_stats backend_stats(ortmem_backend *backend)
{
    ortmem_vmm_stats stats{};
    stats.struct_size = sizeof stats;
    if (ortmem_backend_stats(backend, &stats) != ORTMEM_OK) {
        stats = ortmem_vmm_stats{};
        stats.struct_size = sizeof stats;
    }
    return stats;
}

uint64_t process_page_faults()
{
    struct rusage usage {
    };
    if (getrusage(RUSAGE_SELF, &usage) != 0)
        return 0;
    return static_cast<uint64_t>(usage.ru_minflt) + static_cast<uint64_t>(usage.ru_majflt);
}

void report_page_faults(benchmark::State &state, uint64_t before)
{
    double iterations = static_cast<double>(state.iterations());
    if (iterations > 0)
        state.counters["page_faults"] =
            static_cast<double>(process_page_faults() - before) / iterations;
}

void report_backend_calls(benchmark::State &state, const ortmem_vmm_stats &before,
                          const ortmem_vmm_stats &after, double per)
{
    auto delta = [per](uint64_t was, uint64_t now) { return static_cast<double>(now - was) / per; };
    state.counters["map_calls"] = delta(before.calls[ORTMEM_OP_MAP], after.calls[ORTMEM_OP_MAP]);
    state.counters["unmap_calls"] =
        delta(before.calls[ORTMEM_OP_UNMAP], after.calls[ORTMEM_OP_UNMAP]);
    state.counters["set_access_calls"] =
        delta(before.calls[ORTMEM_OP_SET_ACCESS], after.calls[ORTMEM_OP_SET_ACCESS]);
    state.counters["create_calls"] =
        delta(before.calls[ORTMEM_OP_CREATE], after.calls[ORTMEM_OP_CREATE]);
    state.counters["release_calls"] =
        delta(before.calls[ORTMEM_OP_RELEASE], after.calls[ORTMEM_OP_RELEASE]);
    state.counters["pool_hits"] = delta(before.pool_hits, after.pool_hits);
    state.counters["pool_misses"] = delta(before.pool_misses, after.pool_misses);
}

} // namespace ortmem_bench
