// gpu_arena_trace: the activation allocation trace through the arena on the
// device against cuMemAlloc/cuMemFree (and, through bench/torch_trace.py,
// PyTorch); gpu_bench.cpp lists the scenarios.
#include "activation_trace.hpp"
#include "gpu_driver.hpp"
#include "gpu_scenarios.hpp"
#include "harness.hpp"

#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace ortmem_bench
{

namespace
{

// Device memory in use by anyone, from cuMemGetInfo, relative to a start
// point; its peak says what an allocator really took from the device.
class DeviceUse
{
  public:
    DeviceUse()
    {
        size_t total = 0;
        if (DRV(cuMemGetInfo)(&free_at_start_, &total) != CUDA_SUCCESS)
            free_at_start_ = 0;
    }
    void sample()
    {
        size_t free = 0, total = 0;
        if (free_at_start_ && DRV(cuMemGetInfo)(&free, &total) == CUDA_SUCCESS &&
            free < free_at_start_)
            peak_ = std::max<uint64_t>(peak_, free_at_start_ - free);
    }
    uint64_t peak() const
    {
        return peak_;
    }

  private:
    size_t free_at_start_ = 0;
    uint64_t peak_ = 0;
};

// ---- Scenario c: the allocation trace ---------------------------------------------
// The trace ortmem-bench's arena_mixed_trace replays (bench/activation_trace.cpp).
// Its fingerprint is in the JSON context and the trace file, and
// ortmem-bench's trace_peak_live_bytes and trace_allocations counters match
// this one's.

std::string hex64_here(uint64_t value)
{
    char text[32];
    std::snprintf(text, sizeof text, "0x%016" PRIx64, value);
    return text;
}

// The trace as text, for bench/torch_trace.py: '#' comment lines, then one
// step per line, "a SLOT BYTES" (allocate) or "f SLOT" (free).
bool write_trace_file_here(const char *path)
{
    const Trace &trace = activation_trace();
    std::ofstream out(path);
    if (!out)
        return false;
    out << "# ortmem activation trace v1 (bench/arena_bench.cpp's arena_mixed_trace)\n"
        << "# seed " << hex64_here(kTraceSeed) << " steps " << trace.steps.size() << " slots "
        << trace.slot_count << " allocations " << trace.allocations << " peak_live_bytes "
        << trace.peak_live_bytes << " fingerprint " << hex64_here(trace_fingerprint(trace)) << "\n"
        << "# a SLOT BYTES = allocate BYTES into SLOT; f SLOT = free SLOT\n";
    for (const TraceStep &step : trace.steps) {
        if (step.size)
            out << "a " << step.slot << ' ' << step.size << '\n';
        else
            out << "f " << step.slot << '\n';
    }
    out.flush();
    return static_cast<bool>(out);
}

struct OrtmemArenaAllocator {
    ortmem_arena *arena = nullptr;
    ortmem_status status = ORTMEM_OK;
    const char *failed_call = "";

    void *allocate(size_t size)
    {
        void *ptr = nullptr;
        status = ortmem_arena_alloc(arena, size, 0, &ptr);
        failed_call = "ortmem_arena_alloc";
        return status == ORTMEM_OK ? ptr : nullptr;
    }
    bool deallocate(void *ptr)
    {
        status = ortmem_arena_free(arena, ptr);
        failed_call = "ortmem_arena_free";
        return status == ORTMEM_OK;
    }
    void skip(benchmark::State &state, const char *when)
    {
        (void)ok_or_skip(state, status, (std::string(failed_call) + " (" + when + ")").c_str());
    }
};

struct CuMemAllocAllocator {
    CUresult result = CUDA_SUCCESS;
    const char *failed_call = "";

    void *allocate(size_t size)
    {
        CUdeviceptr ptr = 0;
        result = DRV(cuMemAlloc)(&ptr, size);
        failed_call = "cuMemAlloc";
        return result == CUDA_SUCCESS ? reinterpret_cast<void *>(static_cast<uintptr_t>(ptr))
                                      : nullptr;
    }
    bool deallocate(void *ptr)
    {
        result = DRV(cuMemFree)(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr)));
        failed_call = "cuMemFree";
        return result == CUDA_SUCCESS;
    }
    void skip(benchmark::State &state, const char *when)
    {
        (void)cu_ok(state, result, (std::string(failed_call) + " (" + when + ")").c_str());
    }
};

// Replays the trace (the memory is not touched: it is device memory, and the
// allocator is what is measured); device_use, when given, is sampled after
// every step.
template <class Allocator>
bool replay(const Trace &trace, Allocator &allocator, std::vector<void *> &slots,
            DeviceUse *device_use)
{
    for (const TraceStep &step : trace.steps) {
        if (step.size) {
            void *ptr = allocator.allocate(step.size);
            if (!ptr)
                return false;
            slots[step.slot] = ptr;
        } else {
            if (!allocator.deallocate(slots[step.slot]))
                return false;
            slots[step.slot] = nullptr;
        }
        if (device_use)
            device_use->sample();
    }
    return true;
}

template <class Allocator> void free_leftovers(Allocator &allocator, std::vector<void *> &slots)
{
    for (void *&ptr : slots) {
        if (ptr)
            (void)allocator.deallocate(ptr);
        ptr = nullptr;
    }
}

// One untimed replay first (cold: it is where an allocator grows, so it is
// where device use peaks; sampled with cuMemGetInfo after every step), then
// the timed replays, warm.
template <class Allocator, class AfterWarmUp>
bool time_trace(benchmark::State &state, Allocator &allocator, AfterWarmUp &&after_warm_up)
{
    const Trace &trace = activation_trace();
    std::vector<void *> slots(trace.slot_count, nullptr);
    DeviceUse device_use;
    if (!replay(trace, allocator, slots, &device_use)) {
        allocator.skip(state, "warm-up replay");
        free_leftovers(allocator, slots);
        return false;
    }
    after_warm_up();
    for (auto _ : state) {
        if (!replay(trace, allocator, slots, nullptr)) {
            allocator.skip(state, "replay");
            free_leftovers(allocator, slots);
            return false;
        }
    }
    const double ops = static_cast<double>(trace.steps.size());
    state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(trace.steps.size()));
    state.counters["ops_per_second"] = benchmark::Counter(
        ops * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
    state.counters["ops_per_trace"] = ops;
    state.counters["trace_allocations"] = static_cast<double>(trace.allocations);
    state.counters["trace_peak_live_bytes"] = static_cast<double>(trace.peak_live_bytes);
    state.counters["device_used_peak_bytes"] = static_cast<double>(device_use.peak());
    return true;
}

struct ArenaVariant {
    size_t pool_cap_bytes;    // extents the backend keeps after decommit
    size_t arena_cache_bytes; // empty extents the arena keeps committed
    ortmem_extent_growth growth;
    bool default_row; // reports the cache limit and the whole-run counters
};

constexpr size_t kArenaCapacity = 4 * GiB; // VA only; room for fragmentation
constexpr size_t kGenerousCache = 1 * GiB; // far above the trace's peak

void ortmem_arena_trace(benchmark::State &state, ArenaVariant variant)
{
    if (!gpu_or_skip(state))
        return;
    BackendPtr backend;
    if (!create_backend(state, backend) ||
        !ok_or_skip(state, ortmem_pool_set_cap(backend.get(), variant.pool_cap_bytes),
                    "ortmem_pool_set_cap"))
        return;
    ortmem_arena_options options = ORTMEM_ARENA_OPTIONS_INIT;
    options.capacity = kArenaCapacity;
    options.cache_bytes = variant.arena_cache_bytes;
    options.extents.growth = variant.growth; // the cap stays the default's 8 MiB
    ortmem_arena *raw_arena = nullptr;
    if (!ok_or_skip(state, ortmem_arena_create(backend.get(), &options, &raw_arena),
                    "ortmem_arena_create"))
        return;
    ArenaPtr arena(raw_arena);
    OrtmemArenaAllocator allocator;
    allocator.arena = arena.get();
    ortmem_vmm_stats calls_before{};
    if (!time_trace(state, allocator, [&] { calls_before = backend_stats(backend.get()); }))
        return;
    ortmem_vmm_stats calls_after = backend_stats(backend.get());
    report_backend_calls(state, calls_before, calls_after, static_cast<double>(state.iterations()));
    ortmem_arena_stats arena_stats{};
    arena_stats.struct_size = sizeof arena_stats;
    if (ortmem_arena_stats_get(arena.get(), &arena_stats) == ORTMEM_OK) {
        state.counters["committed_peak_bytes"] =
            static_cast<double>(arena_stats.committed_peak_bytes);
        // Only the default rows: the older rows keep their counter sets.
        if (variant.default_row) {
            state.counters["cache_limit_bytes"] =
                static_cast<double>(arena_stats.cache_limit_bytes);
            state.counters["extents_committed_after"] =
                static_cast<double>(arena_stats.extents_committed);
        }
    }
    // Reserved = physical memory held: granules mapped, cached or pooled. On
    // the default row it must stay at or below baseline_torch_expandable's.
    state.counters["owned_peak_bytes"] = static_cast<double>(calls_after.owned_peak_bytes);
    if (variant.default_row) {
        // The whole run, warm-up included: the handles growing to the peak cost.
        state.counters["run_create_calls"] =
            static_cast<double>(calls_after.calls[ORTMEM_OP_CREATE]);
        state.counters["run_map_calls"] = static_cast<double>(calls_after.calls[ORTMEM_OP_MAP]);
    }
}

void cumemalloc_trace(benchmark::State &state)
{
    if (!gpu_or_skip(state))
        return;
    CuMemAllocAllocator allocator;
    if (!time_trace(state, allocator, [] {}))
        return;
    // What the trace asked for at its peak; the driver's own rounding and
    // sub-allocation show in device_used_peak_bytes.
    state.counters["owned_peak_bytes"] = static_cast<double>(activation_trace().peak_live_bytes);
}

void register_trace_benchmarks_here()
{
    const std::string scenario = "gpu_arena_trace/";
    // The older rows stay per granule, as they were measured.
    const std::pair<const char *, ArenaVariant> variants[] = {
        // uncached baseline: cache_bytes 0, said explicitly
        {"ortmem_arena", {0, 0, ORTMEM_EXTENT_GRANULE, false}},
        // What ORTMEM_ARENA_OPTIONS_INIT gives: cache up to min(capacity, 256 MiB),
        // geometric extents up to 8 MiB; the row to read against
        // baseline_torch_expandable.
        {"ortmem_arena_default", {0, ORTMEM_ARENA_CACHE_DEFAULT, ORTMEM_EXTENT_GEOMETRIC, true}},
        // The same with one handle per granule (the per-granule baseline).
        {"ortmem_arena_default_granule",
         {0, ORTMEM_ARENA_CACHE_DEFAULT, ORTMEM_EXTENT_GRANULE, true}},
        {"ortmem_arena_pooled", {kGenerousCache, 0, ORTMEM_EXTENT_GRANULE, false}},
        {"ortmem_arena_cached", {0, kGenerousCache, ORTMEM_EXTENT_GRANULE, false}},
    };
    for (const auto &[name, variant] : variants) {
        benchmark::RegisterBenchmark((scenario + name).c_str(), ortmem_arena_trace, variant)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime()
            ->MinTime(kMicroMinTime);
    }
    benchmark::RegisterBenchmark((scenario + "baseline_cuMemAlloc").c_str(), cumemalloc_trace)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime()
        ->MinTime(kMicroMinTime);
}

} // namespace

void register_trace_benchmarks()
{
    register_trace_benchmarks_here();
}

bool write_trace_file(const char *path)
{
    return write_trace_file_here(path);
}

std::string hex64(uint64_t value)
{
    return hex64_here(value);
}

} // namespace ortmem_bench
