// Shared pieces of the ortmem benchmark harness: owning handles, first-touch
// helpers, status checks and the ledger counters every scenario reports.
// Public API only (<ortmem/ortmem.h>).
#ifndef ORTMEM_BENCH_HARNESS_HPP
#define ORTMEM_BENCH_HARNESS_HPP

#include <benchmark/benchmark.h>
#include <ortmem/ortmem.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ortmem_bench
{

constexpr size_t KiB = 1024;
constexpr size_t MiB = 1024 * KiB;
// The issue asks for one written byte per 4 KiB page, whatever the page size.
constexpr size_t kTouchStride = 4 * KiB;

struct BackendDeleter {
    void operator()(ortmem_backend *backend) const
    {
        (void)ortmem_backend_destroy(backend);
    }
};
struct RegionDeleter {
    void operator()(ortmem_region *region) const
    {
        (void)ortmem_region_destroy(region);
    }
};
struct ArenaDeleter {
    // force: a benchmark that stopped half-way may leave allocations live.
    void operator()(ortmem_arena *arena) const
    {
        (void)ortmem_arena_destroy(arena, 1);
    }
};
using BackendPtr = std::unique_ptr<ortmem_backend, BackendDeleter>;
using RegionPtr = std::unique_ptr<ortmem_region, RegionDeleter>;
using ArenaPtr = std::unique_ptr<ortmem_arena, ArenaDeleter>;
struct AuthorityDeleter {
    void operator()(ortmem_authority *authority) const
    {
        (void)ortmem_authority_destroy(authority);
    }
};
struct KvCacheDeleter {
    void operator()(ortmem_kv_cache *cache) const
    {
        (void)ortmem_kv_cache_destroy(cache);
    }
};
using AuthorityPtr = std::unique_ptr<ortmem_authority, AuthorityDeleter>;
using KvCachePtr = std::unique_ptr<ortmem_kv_cache, KvCacheDeleter>;

// Writes one byte every kTouchStride bytes, so every page is faulted in the
// way a kernel writing its output would fault it.
inline void touch_every_page(void *base, size_t bytes)
{
    auto *bytes_ptr = static_cast<volatile unsigned char *>(base);
    for (size_t offset = 0; offset < bytes; offset += kTouchStride)
        bytes_ptr[offset] = 1;
}

// Writes the first byte only: the allocator scenarios measure the allocator,
// not the caller's use of the memory.
inline void touch_first_byte(void *ptr)
{
    *static_cast<volatile unsigned char *>(ptr) = 1;
}

// On failure marks the benchmark skipped with the call, status and detail
// (Google Benchmark then reports error_occurred in the JSON) and returns false.
bool ok_or_skip(benchmark::State &state, ortmem_status status, const char *call);

// The backend's ledger; zeroed (struct_size set) when the call fails.
ortmem_vmm_stats backend_stats(ortmem_backend *backend);

// Backend calls made between two snapshots, divided by `per` (iterations), as
// user counters: map_calls, unmap_calls, set_access_calls, create_calls,
// release_calls, pool_hits, pool_misses.
void report_backend_calls(benchmark::State &state, const ortmem_vmm_stats &before,
                          const ortmem_vmm_stats &after, double per);

// Minor + major page faults of the process so far (getrusage). Not exact for
// every allocator (jemalloc purges on a timer), hence reported, not asserted.
uint64_t process_page_faults();

// Page faults since `before`, per iteration, as the user counter page_faults:
// it says how much of a variant's time is first touch.
void report_page_faults(benchmark::State &state, uint64_t before);

void register_granule_benchmarks();
void register_arena_benchmarks();
void register_governance_benchmarks();
// bench/kv_bench.cpp: stable KV growth over extents against one extent per granule.
void register_kv_cpu_benchmarks();

// Handle of libjemalloc.so.2 opened RTLD_LOCAL | RTLD_DEEPBIND, or NULL with
// the reason in jemalloc_missing_reason(). Opened once, at start-up.
void *jemalloc_handle();
const std::string &jemalloc_missing_reason();

} // namespace ortmem_bench

#endif // ORTMEM_BENCH_HARNESS_HPP
