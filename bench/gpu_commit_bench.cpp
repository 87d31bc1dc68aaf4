// gpu_granule_commit, gpu_run64_commit, gpu_extent_1gib: commit and decommit
// through ortmem against the raw driver calls it wraps (gpu_bench.cpp lists
// the scenarios).
#include "gpu_driver.hpp"
#include "gpu_scenarios.hpp"
#include "harness.hpp"
#include "timed_backend.hpp"

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

double per_granule_us(double seconds, benchmark::State &state, size_t granules)
{
    double iterations = static_cast<double>(state.iterations());
    return iterations > 0 ? seconds * 1e6 / iterations / static_cast<double>(granules) : 0;
}

// ---- Scenarios a: commit and decommit of granules -------------------------------

// Commit then decommit `granules` granules of one region in one call each;
// pooled: the pool keeps them (cap = the run), so no create or release.
// growth: how the region lays extents over the run (ORTMEM_EXTENT_GRANULE: one
// handle per granule; ORTMEM_EXTENT_EXACT: one handle for the whole run).
void ortmem_commit_cycle(benchmark::State &state, size_t granules, bool pooled,
                         ortmem_extent_growth growth = ORTMEM_EXTENT_GRANULE)
{
    if (!gpu_or_skip(state))
        return;
    // The region runs on a wrapper that times the driver's calls: the rest
    // of a commit is ortmem's own work.
    BackendPtr cuda, backend;
    CallTimes driver;
    if (!create_backend(state, cuda) || !create_timed_backend(state, cuda.get(), &driver, backend))
        return;
    size_t granule = 0;
    if (!ok_or_skip(state, ortmem_backend_granule(backend.get(), &granule),
                    "ortmem_backend_granule") ||
        !ok_or_skip(state, ortmem_pool_set_cap(backend.get(), pooled ? granules * granule : 0),
                    "ortmem_pool_set_cap"))
        return;
    const size_t bytes = granules * granule;
    ortmem_region_options options = ORTMEM_REGION_OPTIONS_INIT;
    options.size = bytes;
    options.extents.growth = growth;
    ortmem_region *raw_region = nullptr;
    if (!ok_or_skip(state, ortmem_region_create(backend.get(), &options, &raw_region),
                    "ortmem_region_create"))
        return;
    RegionPtr region(raw_region);
    // Warm-up: the first commit creates the granules; pooled, they stay.
    if (!ok_or_skip(state, ortmem_region_commit(region.get(), 0, bytes), "warm-up commit") ||
        !ok_or_skip(state, ortmem_region_decommit(region.get(), 0, bytes), "warm-up decommit"))
        return;
    ortmem_vmm_stats before = backend_stats(backend.get());
    driver = CallTimes{};
    double commit_s = 0, decommit_s = 0;
    for (auto _ : state) {
        Clock::time_point t0 = Clock::now();
        if (!ok_or_skip(state, ortmem_region_commit(region.get(), 0, bytes),
                        "ortmem_region_commit"))
            break;
        Clock::time_point t1 = Clock::now();
        if (!ok_or_skip(state, ortmem_region_decommit(region.get(), 0, bytes),
                        "ortmem_region_decommit"))
            break;
        commit_s += std::chrono::duration<double>(t1 - t0).count();
        decommit_s += seconds_since(t1);
    }
    if (state.error_occurred())
        return;
    ortmem_vmm_stats after = backend_stats(backend.get());
    report_backend_calls(state, before, after, static_cast<double>(state.iterations()));
    state.counters["granules"] = static_cast<double>(granules);
    state.counters["granule_bytes"] = static_cast<double>(granule);
    state.counters["commit_us_per_granule"] = per_granule_us(commit_s, state, granules);
    state.counters["decommit_us_per_granule"] = per_granule_us(decommit_s, state, granules);
    state.counters["extents"] = static_cast<double>(after.owned_extents);
    state.counters["driver_commit_us_per_granule"] =
        per_granule_us(driver.commit_side(), state, granules);
    state.counters["own_commit_us_per_granule"] =
        per_granule_us(commit_s - driver.commit_side(), state, granules);
    state.counters["driver_decommit_us_per_granule"] =
        per_granule_us(driver.decommit_side(), state, granules);
    if (granule == 2 * MiB)
        state.counters["commit_us_per_2mib"] = per_granule_us(commit_s, state, granules);
}

// How a raw baseline commits and decommits its granules.
struct RawMode {
    bool create;         // cuMemCreate/cuMemRelease every cycle (else handles made once)
    bool access_batched; // one cuMemSetAccess over the run (else one per granule)
    bool unmap_batched;  // one cuMemUnmap over the run (else one per granule)
};

// A reserved VA run of granules with their handles; whatever is still mapped
// or created when it goes away is unmapped and released.
class RawRun
{
  public:
    RawRun(size_t granule, size_t count)
        : granule_(granule), count_(count), handles_(count, 0), mapped_(count, false)
    {
    }
    ~RawRun()
    {
        for (size_t i = 0; i < count_; i++)
            if (mapped_[i])
                (void)DRV(cuMemUnmap)(va_ + i * granule_, granule_);
        for (CUmemGenericAllocationHandle handle : handles_)
            if (handle)
                (void)DRV(cuMemRelease)(handle);
        if (va_)
            (void)DRV(cuMemAddressFree)(va_, granule_ * count_);
    }
    RawRun(const RawRun &) = delete;
    RawRun &operator=(const RawRun &) = delete;

    bool reserve(benchmark::State &state)
    {
        return cu_ok(state, DRV(cuMemAddressReserve)(&va_, granule_ * count_, granule_, 0, 0),
                     "cuMemAddressReserve");
    }

    bool create_all(benchmark::State &state)
    {
        CUmemAllocationProp prop = device_prop();
        for (size_t i = 0; i < count_; i++)
            if (!cu_ok(state, DRV(cuMemCreate)(&handles_[i], granule_, &prop, 0), "cuMemCreate"))
                return false;
        return true;
    }

    // One commit+decommit cycle; adds each phase's time to `phases`.
    struct Phases {
        double create = 0, map = 0, set_access = 0, unmap = 0, release = 0;
    };
    bool cycle(benchmark::State &state, RawMode mode, Phases &phases)
    {
        const CUmemAllocationProp prop = device_prop();
        const CUmemAccessDesc access = read_write_access();
        Clock::time_point t;
        CUresult r;
        if (mode.create) {
            for (size_t i = 0; i < count_; i++) {
                t = Clock::now();
                r = DRV(cuMemCreate)(&handles_[i], granule_, &prop, 0);
                phases.create += seconds_since(t);
                if (!cu_ok(state, r, "cuMemCreate"))
                    return false;
            }
        }
        for (size_t i = 0; i < count_; i++) {
            t = Clock::now();
            r = DRV(cuMemMap)(va_ + i * granule_, granule_, 0, handles_[i], 0);
            phases.map += seconds_since(t);
            if (!cu_ok(state, r, "cuMemMap"))
                return false;
            mapped_[i] = true;
            if (!mode.access_batched) {
                t = Clock::now();
                r = DRV(cuMemSetAccess)(va_ + i * granule_, granule_, &access, 1);
                phases.set_access += seconds_since(t);
                if (!cu_ok(state, r, "cuMemSetAccess (one granule)"))
                    return false;
            }
        }
        if (mode.access_batched) {
            t = Clock::now();
            r = DRV(cuMemSetAccess)(va_, granule_ * count_, &access, 1);
            phases.set_access += seconds_since(t);
            if (!cu_ok(state, r, "cuMemSetAccess (the run)"))
                return false;
        }
        if (mode.unmap_batched) {
            t = Clock::now();
            r = DRV(cuMemUnmap)(va_, granule_ * count_);
            phases.unmap += seconds_since(t);
            if (!cu_ok(state, r, "cuMemUnmap (the run)"))
                return false;
            std::fill(mapped_.begin(), mapped_.end(), false);
        } else {
            for (size_t i = 0; i < count_; i++) {
                t = Clock::now();
                r = DRV(cuMemUnmap)(va_ + i * granule_, granule_);
                phases.unmap += seconds_since(t);
                if (!cu_ok(state, r, "cuMemUnmap (one granule)"))
                    return false;
                mapped_[i] = false;
            }
        }
        if (mode.create) {
            for (size_t i = 0; i < count_; i++) {
                t = Clock::now();
                r = DRV(cuMemRelease)(handles_[i]);
                phases.release += seconds_since(t);
                if (!cu_ok(state, r, "cuMemRelease"))
                    return false;
                handles_[i] = 0;
            }
        }
        return true;
    }

  private:
    size_t granule_, count_;
    CUdeviceptr va_ = 0;
    std::vector<CUmemGenericAllocationHandle> handles_;
    std::vector<bool> mapped_;
};

void raw_commit_cycle(benchmark::State &state, size_t granules, RawMode mode)
{
    if (!gpu_or_skip(state))
        return;
    RawRun run(g_gpu.granule, granules);
    if (!run.reserve(state) || (!mode.create && !run.create_all(state)))
        return;
    RawRun::Phases warm_up, phases;
    if (!run.cycle(state, mode, warm_up))
        return;
    for (auto _ : state) {
        if (!run.cycle(state, mode, phases))
            break;
    }
    if (state.error_occurred())
        return;
    auto us = [&](double seconds) { return per_granule_us(seconds, state, granules); };
    state.counters["granules"] = static_cast<double>(granules);
    state.counters["granule_bytes"] = static_cast<double>(g_gpu.granule);
    state.counters["commit_us_per_granule"] = us(phases.create + phases.map + phases.set_access);
    state.counters["decommit_us_per_granule"] = us(phases.unmap + phases.release);
    if (mode.create)
        state.counters["create_us_per_granule"] = us(phases.create);
    state.counters["map_us_per_granule"] = us(phases.map);
    state.counters["set_access_us_per_granule"] = us(phases.set_access);
    state.counters["unmap_us_per_granule"] = us(phases.unmap);
    if (mode.create)
        state.counters["release_us_per_granule"] = us(phases.release);
    double n = static_cast<double>(granules);
    state.counters["map_calls"] = n;
    state.counters["set_access_calls"] = mode.access_batched ? 1 : n;
    state.counters["unmap_calls"] = mode.unmap_batched ? 1 : n;
    state.counters["create_calls"] = mode.create ? n : 0;
    state.counters["release_calls"] = mode.create ? n : 0;
}

// The raw floor for one extent: cuMemCreate of the whole run as one handle,
// one cuMemMap, one cuMemSetAccess, one cuMemUnmap, one cuMemRelease.
void raw_one_handle_cycle(benchmark::State &state, size_t granules)
{
    if (!gpu_or_skip(state))
        return;
    const size_t bytes = granules * g_gpu.granule;
    CUdeviceptr va = 0;
    if (!cu_ok(state, DRV(cuMemAddressReserve)(&va, bytes, g_gpu.granule, 0, 0),
               "cuMemAddressReserve"))
        return;
    const CUmemAllocationProp prop = device_prop();
    const CUmemAccessDesc access = read_write_access();
    double commit_s = 0, decommit_s = 0;
    // Each call's own time too: a 1 GiB handle's cost, call by call.
    double phase_s[5] = {0, 0, 0, 0, 0}; // create, map, set-access, unmap, release
    // One cycle; times it into commit_s, decommit_s and phase_s when timed.
    auto cycle = [&](bool timed) {
        CUmemGenericAllocationHandle handle = 0;
        Clock::time_point t[6];
        t[0] = Clock::now();
        bool done = cu_ok(state, DRV(cuMemCreate)(&handle, bytes, &prop, 0), "cuMemCreate");
        t[1] = Clock::now();
        bool mapped = done && cu_ok(state, DRV(cuMemMap)(va, bytes, 0, handle, 0), "cuMemMap");
        t[2] = Clock::now();
        done = mapped && cu_ok(state, DRV(cuMemSetAccess)(va, bytes, &access, 1), "cuMemSetAccess");
        t[3] = Clock::now();
        if (mapped)
            done = cu_ok(state, DRV(cuMemUnmap)(va, bytes), "cuMemUnmap") && done;
        t[4] = Clock::now();
        if (handle)
            done = cu_ok(state, DRV(cuMemRelease)(handle), "cuMemRelease") && done;
        t[5] = Clock::now();
        if (done && timed) {
            commit_s += std::chrono::duration<double>(t[3] - t[0]).count();
            decommit_s += std::chrono::duration<double>(t[5] - t[3]).count();
            for (int i = 0; i < 5; i++)
                phase_s[i] += std::chrono::duration<double>(t[i + 1] - t[i]).count();
        }
        return done;
    };
    if (cycle(false)) { // the warm-up, untimed
        for (auto _ : state) {
            if (!cycle(true))
                break;
        }
    }
    (void)DRV(cuMemAddressFree)(va, bytes);
    if (state.error_occurred())
        return;
    state.counters["granules"] = static_cast<double>(granules);
    state.counters["granule_bytes"] = static_cast<double>(g_gpu.granule);
    state.counters["commit_us_per_granule"] = per_granule_us(commit_s, state, granules);
    state.counters["decommit_us_per_granule"] = per_granule_us(decommit_s, state, granules);
    if (g_gpu.granule == 2 * MiB)
        state.counters["commit_us_per_2mib"] = per_granule_us(commit_s, state, granules);
    for (const char *calls :
         {"create_calls", "map_calls", "set_access_calls", "unmap_calls", "release_calls"})
        state.counters[calls] = 1;
    const char *phases[5] = {"create_us", "map_us", "set_access_us", "unmap_us", "release_us"};
    for (int i = 0; i < 5; i++)
        state.counters[phases[i]] = phase_s[i] * 1e6 / static_cast<double>(state.iterations());
}

constexpr size_t kRunGranules = 64;

void register_commit_benchmarks_here()
{
    struct Scenario {
        const char *name;
        size_t granules;
    };
    struct Raw {
        const char *name;
        RawMode mode;
        bool single_granule_too; // per-granule and batched differ only for runs
    };
    const Raw raws[] = {
        // The unpooled raw sequence an engine without ortmem would run.
        {"baseline_raw_create_map_access", {true, false, false}, true},
        // Pre-created handles, one set-access per granule.
        {"baseline_raw_access_per_granule", {false, false, true}, false},
        // The floor: pre-created handles, map each, one set-access, one unmap.
        {"baseline_raw_access_batched", {false, true, true}, true},
    };
    for (const Scenario &scenario :
         {Scenario{"gpu_granule_commit/", 1}, Scenario{"gpu_run64_commit/", kRunGranules}}) {
        const std::string prefix = scenario.name;
        const size_t granules = scenario.granules;
        for (bool pooled : {true, false}) {
            benchmark::RegisterBenchmark(
                (prefix + (pooled ? "ortmem_pooled" : "ortmem_unpooled")).c_str(),
                [granules, pooled](benchmark::State &state) {
                    ortmem_commit_cycle(state, granules, pooled);
                })
                ->Unit(benchmark::kMicrosecond)
                ->UseRealTime()
                ->MinTime(kMicroMinTime);
        }
        for (const Raw &raw : raws) {
            if (granules == 1 && !raw.single_granule_too)
                continue;
            RawMode mode = raw.mode;
            benchmark::RegisterBenchmark((prefix + raw.name).c_str(),
                                         [granules, mode](benchmark::State &state) {
                                             raw_commit_cycle(state, granules, mode);
                                         })
                ->Unit(benchmark::kMicrosecond)
                ->UseRealTime()
                ->MinTime(kMicroMinTime);
        }
    }

    // 1 GiB committed as one extent (one handle) against the same 1 GiB as
    // one handle per granule through ortmem, and the raw driver's one handle.
    // Unpooled: every cycle creates and releases.
    // Without a GPU every scenario skips; 512 (2 MiB granules) names the run.
    const size_t granules_1gib = (size_t(1) << 30) / (g_gpu.granule ? g_gpu.granule : 2 * MiB);
    {
        const std::string prefix = "gpu_extent_1gib/";
        struct Layout {
            const char *name;
            ortmem_extent_growth growth;
        };
        for (const Layout &layout :
             {Layout{"ortmem_one_extent", ORTMEM_EXTENT_EXACT},
              Layout{"baseline_ortmem_per_granule", ORTMEM_EXTENT_GRANULE}}) {
            ortmem_extent_growth growth = layout.growth;
            benchmark::RegisterBenchmark((prefix + layout.name).c_str(),
                                         [granules_1gib, growth](benchmark::State &state) {
                                             ortmem_commit_cycle(state, granules_1gib, false,
                                                                 growth);
                                         })
                ->Unit(benchmark::kMicrosecond)
                ->UseRealTime()
                ->MinTime(kMicroMinTime);
        }
        benchmark::RegisterBenchmark((prefix + "baseline_raw_one_handle").c_str(),
                                     [granules_1gib](benchmark::State &state) {
                                         raw_one_handle_cycle(state, granules_1gib);
                                     })
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime()
            ->MinTime(kMicroMinTime);
    }
}

} // namespace

void register_commit_benchmarks()
{
    register_commit_benchmarks_here();
}

} // namespace ortmem_bench
