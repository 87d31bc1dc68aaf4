// Scenario 2: the ortmem arena against glibc malloc and jemalloc on one
// deterministic trace of mixed sizes (256 B to 4 MiB) with interleaved frees,
// shaped like the activations of an inference step. Every variant replays the
// same trace and writes the first byte of each allocation.
#include "activation_trace.hpp"
#include "harness.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace ortmem_bench
{

namespace
{

// Replays the trace; false at the first allocation or free the allocator
// refuses (the allocator keeps the reason).
template <class Allocator>
bool replay(const Trace &trace, Allocator &allocator, std::vector<void *> &slots)
{
    for (const TraceStep &step : trace.steps) {
        if (step.size) {
            void *ptr = allocator.allocate(step.size);
            if (!ptr)
                return false;
            touch_first_byte(ptr);
            slots[step.slot] = ptr;
        } else {
            if (!allocator.deallocate(slots[step.slot]))
                return false;
            slots[step.slot] = nullptr;
        }
    }
    return true;
}

// Frees what a failed replay left behind.
template <class Allocator> void free_leftovers(Allocator &allocator, std::vector<void *> &slots)
{
    for (void *&ptr : slots) {
        if (ptr)
            (void)allocator.deallocate(ptr);
        ptr = nullptr;
    }
}

void report_trace_counters(benchmark::State &state, const Trace &trace)
{
    state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(trace.steps.size()));
    state.counters["trace_allocations"] = static_cast<double>(trace.allocations);
    state.counters["trace_peak_live_bytes"] = static_cast<double>(trace.peak_live_bytes);
}

// Times the trace with one untimed replay first, so every allocator is
// measured warm (heap grown, granules pooled or cached where configured).
// after_warm_up runs between the two, untimed (ledger snapshots).
template <class Allocator, class AfterWarmUp>
bool time_trace(benchmark::State &state, Allocator &allocator, AfterWarmUp &&after_warm_up)
{
    const Trace &trace = activation_trace();
    std::vector<void *> slots(trace.slot_count, nullptr);
    if (!replay(trace, allocator, slots)) {
        allocator.skip(state, "warm-up replay");
        free_leftovers(allocator, slots);
        return false;
    }
    after_warm_up();
    uint64_t faults_before = process_page_faults();
    for (auto _ : state) {
        if (!replay(trace, allocator, slots)) {
            allocator.skip(state, "replay");
            free_leftovers(allocator, slots);
            return false;
        }
    }
    report_page_faults(state, faults_before);
    report_trace_counters(state, trace);
    return true;
}

template <class Allocator> bool time_trace(benchmark::State &state, Allocator &allocator)
{
    return time_trace(state, allocator, [] {});
}

struct GlibcMalloc {
    void *allocate(size_t size)
    {
        return std::malloc(size);
    }
    bool deallocate(void *ptr)
    {
        std::free(ptr);
        return true;
    }
    void skip(benchmark::State &state, const char *when)
    {
        state.SkipWithError((std::string("glibc malloc returned NULL during ") + when).c_str());
    }
};

struct Jemalloc {
    using mallocx_fn = void *(*)(size_t, int);
    using dallocx_fn = void (*)(void *, int);
    mallocx_fn mallocx = nullptr;
    dallocx_fn dallocx = nullptr;

    void *allocate(size_t size)
    {
        return mallocx(size, 0);
    }
    bool deallocate(void *ptr)
    {
        dallocx(ptr, 0);
        return true;
    }
    void skip(benchmark::State &state, const char *when)
    {
        state.SkipWithError((std::string("jemalloc mallocx returned NULL during ") + when).c_str());
    }
};

struct OrtmemArena {
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
        std::string call = std::string(failed_call) + " (" + when + ")";
        (void)ok_or_skip(state, status, call.c_str());
    }
};

void glibc_malloc_trace(benchmark::State &state)
{
    GlibcMalloc allocator;
    (void)time_trace(state, allocator);
}

void jemalloc_trace(benchmark::State &state)
{
    void *handle = jemalloc_handle();
    if (!handle) {
        state.SkipWithError(("jemalloc baseline skipped: " + jemalloc_missing_reason()).c_str());
        return;
    }
    Jemalloc allocator;
    allocator.mallocx = reinterpret_cast<Jemalloc::mallocx_fn>(dlsym(handle, "mallocx"));
    allocator.dallocx = reinterpret_cast<Jemalloc::dallocx_fn>(dlsym(handle, "dallocx"));
    if (!allocator.mallocx || !allocator.dallocx) {
        state.SkipWithError("jemalloc baseline skipped: libjemalloc.so.2 lacks mallocx/dallocx");
        return;
    }
    (void)time_trace(state, allocator);
}

struct ArenaVariant {
    const char *name;
    size_t pool_cap_bytes;    // extents the backend keeps after decommit
    size_t arena_cache_bytes; // empty extents the arena keeps committed
    ortmem_extent_growth growth;
    bool default_row; // reports the cache limit and the whole-run counters
};

constexpr size_t kArenaCapacity = 4096 * MiB; // VA only; room for fragmentation
constexpr size_t kGenerousCache = 1024 * MiB; // far above the trace's peak

void ortmem_arena_trace(benchmark::State &state, ArenaVariant variant)
{
    ortmem_backend *raw_backend = nullptr;
    if (!ok_or_skip(state, ortmem_cpu_backend_create(nullptr, &raw_backend),
                    "ortmem_cpu_backend_create"))
        return;
    BackendPtr backend(raw_backend);
    if (!ok_or_skip(state, ortmem_pool_set_cap(backend.get(), variant.pool_cap_bytes),
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

    OrtmemArena allocator;
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
        state.counters["allocated_peak_bytes"] =
            static_cast<double>(arena_stats.allocated_peak_bytes);
        state.counters["cached_bytes_after"] = static_cast<double>(arena_stats.cached_bytes);
        state.counters["live_allocations_after"] =
            static_cast<double>(arena_stats.live_allocations);
        // Only the default rows: the older rows keep their counter sets.
        if (variant.default_row) {
            state.counters["cache_limit_bytes"] =
                static_cast<double>(arena_stats.cache_limit_bytes);
            state.counters["extents_committed_after"] =
                static_cast<double>(arena_stats.extents_committed);
        }
    }
    state.counters["owned_peak_bytes"] = static_cast<double>(calls_after.owned_peak_bytes);
    if (variant.default_row) {
        // The whole run, warm-up included: what growing to the peak cost.
        state.counters["run_create_calls"] =
            static_cast<double>(calls_after.calls[ORTMEM_OP_CREATE]);
        state.counters["run_map_calls"] = static_cast<double>(calls_after.calls[ORTMEM_OP_MAP]);
    }
}

} // namespace

void register_arena_benchmarks()
{
    const std::string scenario = "arena_mixed_trace/";
    // ortmem_arena is the uncached baseline (cache_bytes 0, said explicitly
    // now that the default caches); ortmem_arena_default is what
    // ORTMEM_ARENA_OPTIONS_INIT gives: a cache up to min(capacity, 256 MiB)
    // and geometric extents up to 8 MiB; ortmem_arena_default_granule is the
    // same with one handle per granule (the per-granule baseline). The older
    // rows stay per granule, as they were measured.
    const ArenaVariant variants[] = {
        {"ortmem_arena", 0, 0, ORTMEM_EXTENT_GRANULE, false},
        {"ortmem_arena_default", 0, ORTMEM_ARENA_CACHE_DEFAULT, ORTMEM_EXTENT_GEOMETRIC, true},
        {"ortmem_arena_default_granule", 0, ORTMEM_ARENA_CACHE_DEFAULT, ORTMEM_EXTENT_GRANULE,
         true},
        {"ortmem_arena_pooled", kGenerousCache, 0, ORTMEM_EXTENT_GRANULE, false},
        {"ortmem_arena_cached", 0, kGenerousCache, ORTMEM_EXTENT_GRANULE, false},
    };
    for (const ArenaVariant &variant : variants) {
        benchmark::RegisterBenchmark((scenario + variant.name).c_str(), ortmem_arena_trace, variant)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
    }
    benchmark::RegisterBenchmark((scenario + "baseline_glibc_malloc").c_str(), glibc_malloc_trace)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((scenario + "baseline_jemalloc").c_str(), jemalloc_trace)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
}

} // namespace ortmem_bench
