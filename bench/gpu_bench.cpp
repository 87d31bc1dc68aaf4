// ortmem-gpu-bench: the CUDA backend against the raw driver calls it wraps and
// the allocator engines use on the device, each scenario's variants and
// baselines measured side by side in one run (bench/README.md, "GPU
// benchmarks"; scripts/gpu-bench.sh runs it on the GPU machine):
//
//   gpu_granule_commit   commit+decommit of one granule through ortmem (pooled,
//                        unpooled) vs raw cuMemCreate+cuMemMap+cuMemSetAccess /
//                        cuMemUnmap+cuMemRelease, and vs the raw map+set-access
//                        floor over a pre-created handle
//   gpu_run64_commit     64 granules in one commit (one set-access for the run)
//                        vs raw per-granule and batched set-access
//   gpu_extent_1gib      1 GiB committed as one extent (one handle) vs one
//                        handle per granule through ortmem, and vs the raw
//                        driver's one handle (create+map+set-access+unmap+release)
//   gpu_kv_growth_*      a 7B-class KV cache grown from 1K to 128K tokens,
//                        stable (commit on demand) vs bucket (copy); per
//                        layout, stable over geometric extents vs one handle
//                        per granule
//   gpu_arena_trace      the arena_mixed_trace trace through the arena on the
//                        device vs cuMemAlloc/cuMemFree per allocation
//   gpu_offload_*        weight offload (gpu_offload_bench.cpp)
//
// The raw baselines open libcuda.so.1 with dlopen and resolve every entry point
// through cuGetProcAddress, as src/vmm/backends/cuda.c does, so the binary
// builds and starts without a driver; every scenario then skips with the
// reason. cuda.h supplies the types only.
#include "activation_trace.hpp"
#include "gpu_driver.hpp"
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
constexpr double kMicroMinTime = 0.2; // seconds per repetition

void register_commit_benchmarks()
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

// ---- Scenario b: KV growth ------------------------------------------------------

constexpr const char *kKvPreset = "qwen2.5-7b"; // 28 layers, 4 KV heads, head_dim 128, fp16
constexpr uint64_t kKvFirstTokens = 1024;       // grown from 1K ...
constexpr uint64_t kKvMaxTokens = 131072;       // ... to 128K
constexpr uint64_t kKvAppendTokens = 1024;      // tokens per append

// ORTMEM_GPU_BENCH_KV_TOKENS overrides the final length (a multiple of 1024,
// for a quick look; the recorded tables use 128K).
uint64_t kv_max_tokens()
{
    const char *value = std::getenv("ORTMEM_GPU_BENCH_KV_TOKENS");
    if (!value || !*value)
        return kKvMaxTokens;
    unsigned long long tokens = std::strtoull(value, nullptr, 10);
    tokens -= tokens % kKvAppendTokens;
    return tokens >= kKvFirstTokens ? tokens : kKvMaxTokens;
}

ortmem_kv_stats kv_stats(ortmem_kv_cache *cache)
{
    ortmem_kv_stats stats{};
    stats.struct_size = sizeof stats;
    if (ortmem_kv_cache_stats(cache, &stats) != ORTMEM_OK) {
        stats = ortmem_kv_stats{};
        stats.struct_size = sizeof stats;
    }
    return stats;
}

struct KvVariant {
    unsigned batch;
    ortmem_kv_strategy strategy;
    bool pooled; // pool cap unbounded and warmed by one untimed growth
    // Stable growth's extent policy: GEOMETRIC (the default, 32 MiB cap) or
    // GRANULE (one handle per granule, the baseline).
    ortmem_extent_growth growth = ORTMEM_EXTENT_GEOMETRIC;
    // The preset's layout (head-major) unless set.
    bool set_layout = false;
    ortmem_kv_layout layout = ORTMEM_KV_HEAD_MAJOR;
};

struct Growth {
    double seconds = 0;       // sequences created, grown to the end, device synchronised
    double worst_step_s = 0;  // the slowest step (one append to every sequence)
    double teardown_s = 0;    // the sequences destroyed
    ortmem_kv_stats at_end{}; // just before the teardown
};

// Creates `batch` sequences, grows them in lockstep to max_tokens, destroys
// them. False (benchmark skipped with the reason) at the first refusal.
bool grow_once(benchmark::State &state, ortmem_kv_cache *cache, unsigned batch, uint64_t max_tokens,
               Growth &growth)
{
    std::vector<ortmem_kv_seq *> seqs;
    auto destroy_all = [&seqs] {
        for (ortmem_kv_seq *seq : seqs)
            (void)ortmem_kv_seq_destroy(seq);
        seqs.clear();
    };
    Clock::time_point start = Clock::now();
    for (unsigned i = 0; i < batch; i++) {
        ortmem_kv_seq *seq = nullptr;
        if (!ok_or_skip(state, ortmem_kv_seq_create(cache, &seq), "ortmem_kv_seq_create")) {
            destroy_all();
            return false;
        }
        seqs.push_back(seq);
    }
    for (uint64_t length = 0; length < max_tokens; length += kKvAppendTokens) {
        Clock::time_point step = Clock::now();
        for (ortmem_kv_seq *seq : seqs) {
            if (!ok_or_skip(
                    state, ortmem_kv_seq_append(seq, kKvAppendTokens),
                    ("ortmem_kv_seq_append at " + std::to_string(length) + " tokens").c_str())) {
                destroy_all();
                return false;
            }
        }
        growth.worst_step_s = std::max(growth.worst_step_s, seconds_since(step));
    }
    // Bucket growth waits for its own stream only; whatever else is still in
    // flight belongs to the growth too.
    if (!cu_ok(state, DRV(cuCtxSynchronize)(), "cuCtxSynchronize")) {
        destroy_all();
        return false;
    }
    growth.seconds = seconds_since(start);
    growth.at_end = kv_stats(cache);
    Clock::time_point teardown = Clock::now();
    ortmem_status first_failure = ORTMEM_OK;
    std::string detail;
    for (ortmem_kv_seq *seq : seqs) {
        ortmem_status status = ortmem_kv_seq_destroy(seq);
        if (status != ORTMEM_OK && first_failure == ORTMEM_OK) {
            first_failure = status;
            detail = ortmem_last_error();
        }
    }
    seqs.clear();
    growth.teardown_s = seconds_since(teardown);
    if (first_failure != ORTMEM_OK) {
        state.SkipWithError((std::string("ortmem_kv_seq_destroy -> ") +
                             ortmem_status_str(first_failure) + ": " + detail)
                                .c_str());
        return false;
    }
    return true;
}

void kv_growth(benchmark::State &state, KvVariant variant)
{
    if (!gpu_or_skip(state))
        return;
    const uint64_t max_tokens = kv_max_tokens();
    size_t free_bytes = 0, total_bytes = 0;
    if (!cu_ok(state, DRV(cuMemGetInfo)(&free_bytes, &total_bytes), "cuMemGetInfo"))
        return;
    BackendPtr backend;
    if (!create_backend(state, backend))
        return;
    // Pooled: every granule released goes to the pool and comes back.
    if (!ok_or_skip(state, ortmem_pool_set_cap(backend.get(), variant.pooled ? free_bytes : 0),
                    "ortmem_pool_set_cap"))
        return;
    // The budget is what the device has free: a refusal means the device is full.
    ortmem_authority_options authority_options = ORTMEM_AUTHORITY_OPTIONS_INIT;
    authority_options.limit_bytes = free_bytes;
    ortmem_authority *raw_authority = nullptr;
    if (!ok_or_skip(state,
                    ortmem_authority_create(backend.get(), &authority_options, &raw_authority),
                    "ortmem_authority_create"))
        return;
    AuthorityPtr authority(raw_authority);
    ortmem_kv_cache_options options = ORTMEM_KV_CACHE_OPTIONS_INIT;
    // Growth from cold: a finished sequence's range must not stay warm for
    // the next iteration's (that would measure warm reuse, not growth).
    options.warm_max_bytes = 0;
    if (!ok_or_skip(state, ortmem_kv_preset(kKvPreset, &options.geometry), "ortmem_kv_preset"))
        return;
    options.strategy = variant.strategy;
    options.max_context = max_tokens;
    options.max_sequences = variant.batch;
    options.extents.growth = variant.growth;
    if (variant.set_layout)
        options.geometry.layout = variant.layout;
    size_t granule = 0;
    if (!ok_or_skip(state, ortmem_backend_granule(backend.get(), &granule),
                    "ortmem_backend_granule"))
        return;
    options.geometry.granule = granule; // the growth model below needs it
    ortmem_kv_cache *raw_cache = nullptr;
    if (!ok_or_skip(state, ortmem_kv_cache_create(authority.get(), &options, &raw_cache),
                    "ortmem_kv_cache_create"))
        return;
    KvCachePtr cache(raw_cache);
    Growth growth;
    if (variant.pooled && !grow_once(state, cache.get(), variant.batch, max_tokens, growth))
        return;

    ortmem_vmm_stats calls_before = backend_stats(backend.get());
    ortmem_kv_stats kv_before = kv_stats(cache.get());
    double worst_step_s = 0, teardown_s = 0;
    for (auto _ : state) {
        growth = Growth{};
        if (!grow_once(state, cache.get(), variant.batch, max_tokens, growth))
            break;
        state.SetIterationTime(growth.seconds);
        worst_step_s = std::max(worst_step_s, growth.worst_step_s);
        teardown_s += growth.teardown_s;
    }
    if (state.error_occurred())
        return;
    const double iterations = static_cast<double>(state.iterations());
    ortmem_vmm_stats calls_after = backend_stats(backend.get());
    ortmem_kv_stats kv_after = kv_stats(cache.get());
    report_backend_calls(state, calls_before, calls_after, iterations);
    // Growth copies on the cache's stream; synchronous copies are counted too.
    const uint64_t copies_after =
        calls_after.calls[ORTMEM_OP_COPY] + calls_after.calls[ORTMEM_OP_COPY_ASYNC];
    const uint64_t copies_before =
        calls_before.calls[ORTMEM_OP_COPY] + calls_before.calls[ORTMEM_OP_COPY_ASYNC];
    state.counters["copy_calls"] = static_cast<double>(copies_after - copies_before) / iterations;
    state.counters["batch"] = static_cast<double>(variant.batch);
    state.counters["final_tokens"] = static_cast<double>(max_tokens);
    state.counters["appends_per_sequence"] = static_cast<double>(max_tokens / kKvAppendTokens);
    state.counters["worst_step_ms"] = worst_step_s * 1e3;
    state.counters["teardown_ms"] = teardown_s * 1e3 / iterations;
    state.counters["owned_peak_bytes"] = static_cast<double>(calls_after.owned_peak_bytes);
    state.counters["committed_bytes_final"] = static_cast<double>(growth.at_end.committed_bytes);
    state.counters["live_bytes_final"] = static_cast<double>(growth.at_end.live_bytes);
    state.counters["reserved_va_bytes_final"] =
        static_cast<double>(growth.at_end.reserved_va_bytes);
    state.counters["growth_copied_bytes"] =
        static_cast<double>(kv_after.growth_copied_bytes - kv_before.growth_copied_bytes) /
        iterations;
    state.counters["generations_bumped"] =
        static_cast<double>(kv_after.generations_bumped - kv_before.generations_bumped) /
        iterations;
    // Over-commit: measured at the end of the growth (committed - live of
    // the sequences plus the zero granule, none here) against the cache's
    // bound; the largest over the growth is the model's
    // (ortmem_kv_growth_evaluate: stats after every append would be timed).
    state.counters["overcommit_bytes_final"] = static_cast<double>(growth.at_end.overcommit_bytes);
    state.counters["overcommit_bound_bytes"] =
        static_cast<double>(growth.at_end.overcommit_bound_bytes);
    if (variant.strategy == ORTMEM_KV_STABLE) {
        ortmem_kv_growth_cost cost{};
        cost.struct_size = sizeof cost;
        ortmem_extent_policy policy = options.extents;
        if (ortmem_kv_growth_evaluate(&options.geometry, &policy, max_tokens, kKvAppendTokens,
                                      kKvAppendTokens, max_tokens, &cost) == ORTMEM_OK) {
            state.counters["overcommit_max_bytes_model"] =
                static_cast<double>(cost.overcommit_max_bytes);
            state.counters["extents_model"] = static_cast<double>(cost.extents);
        }
    }
}

void register_kv_benchmarks()
{
    struct Scenario {
        const char *name;
        unsigned batch;
        bool pooled;
    };
    const Scenario scenarios[] = {
        {"gpu_kv_growth_batch1/", 1, false},
        {"gpu_kv_growth_batch8/", 8, false},
        {"gpu_kv_growth_batch1_pooled/", 1, true},
    };
    for (const Scenario &scenario : scenarios) {
        for (ortmem_kv_strategy strategy : {ORTMEM_KV_STABLE, ORTMEM_KV_BUCKET}) {
            // Bucket growth (copy) is what an engine without VMM does: the baseline.
            std::string variant =
                strategy == ORTMEM_KV_STABLE ? "ortmem_stable" : "baseline_bucket";
            KvVariant kv{scenario.batch, strategy, scenario.pooled};
            benchmark::RegisterBenchmark((std::string(scenario.name) + variant).c_str(), kv_growth,
                                         kv)
                ->Unit(benchmark::kMillisecond)
                ->UseManualTime()
                ->Iterations(1);
        }
    }
    // Stable growth per extent policy, per layout (the preset's geometry with
    // the layout chosen): one sequence, 1K -> 128K, unpooled, so every extent
    // is a cuMemCreate. The fragments per layout (224 x 32 MiB head-major,
    // 56 x 128 MiB seq-major, one of 7 GiB token-major) set how far the
    // geometric tail grows before the cap (docs/memory/KV_GEOMETRY.md).
    const struct {
        const char *name;
        ortmem_kv_layout layout;
    } layouts[] = {
        {"gpu_kv_growth_batch1_head/", ORTMEM_KV_HEAD_MAJOR},
        {"gpu_kv_growth_batch1_seq/", ORTMEM_KV_SEQ_MAJOR},
        {"gpu_kv_growth_batch1_token/", ORTMEM_KV_TOKEN_MAJOR},
    };
    for (const auto &layout : layouts) {
        for (ortmem_extent_growth growth : {ORTMEM_EXTENT_GEOMETRIC, ORTMEM_EXTENT_GRANULE}) {
            std::string variant = growth == ORTMEM_EXTENT_GEOMETRIC ? "ortmem_stable_geometric"
                                                                    : "baseline_stable_per_granule";
            KvVariant kv{1, ORTMEM_KV_STABLE, false, growth, true, layout.layout};
            benchmark::RegisterBenchmark((std::string(layout.name) + variant).c_str(), kv_growth,
                                         kv)
                ->Unit(benchmark::kMillisecond)
                ->UseManualTime()
                ->Iterations(1);
        }
    }
}

// ---- Scenario c: the allocation trace ---------------------------------------------
// The trace ortmem-bench's arena_mixed_trace replays (bench/activation_trace.cpp).
// Its fingerprint is in the JSON context and the trace file, and
// ortmem-bench's trace_peak_live_bytes and trace_allocations counters match
// this one's.

std::string hex64(uint64_t value)
{
    char text[32];
    std::snprintf(text, sizeof text, "0x%016" PRIx64, value);
    return text;
}

// The trace as text, for bench/torch_trace.py: '#' comment lines, then one
// step per line, "a SLOT BYTES" (allocate) or "f SLOT" (free).
bool write_trace_file(const char *path)
{
    const Trace &trace = activation_trace();
    std::ofstream out(path);
    if (!out)
        return false;
    out << "# ortmem activation trace v1 (bench/arena_bench.cpp's arena_mixed_trace)\n"
        << "# seed " << hex64(kTraceSeed) << " steps " << trace.steps.size() << " slots "
        << trace.slot_count << " allocations " << trace.allocations << " peak_live_bytes "
        << trace.peak_live_bytes << " fingerprint " << hex64(trace_fingerprint(trace)) << "\n"
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

void register_trace_benchmarks()
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

void add_context()
{
    const Trace &trace = activation_trace();
    benchmark::AddCustomContext("trace_fingerprint", hex64(trace_fingerprint(trace)));
    benchmark::AddCustomContext("trace_steps", std::to_string(trace.steps.size()));
    benchmark::AddCustomContext("kv_preset", std::string(kKvPreset) + ", " +
                                                 std::to_string(kKvFirstTokens) + " to " +
                                                 std::to_string(kv_max_tokens()) + " tokens by " +
                                                 std::to_string(kKvAppendTokens));
    benchmark::AddCustomContext("cuda_header_version", std::to_string(CUDA_VERSION));
    if (!g_gpu.ready) {
        benchmark::AddCustomContext("gpu", "unavailable: " + g_gpu.unavailable);
        return;
    }
    benchmark::AddCustomContext("gpu",
                                g_gpu.name + " (device " + std::to_string(g_gpu.ordinal) + ")");
    benchmark::AddCustomContext("cuda_driver_version", std::to_string(g_gpu.driver_version));
    benchmark::AddCustomContext("granule_bytes", std::to_string(g_gpu.granule));
    benchmark::AddCustomContext("device_total_bytes", std::to_string(g_gpu.total_bytes));
    benchmark::AddCustomContext("device_free_bytes_at_start", std::to_string(g_gpu.free_bytes));
}

constexpr const char kWriteTraceFlag[] = "--ortmem_write_trace=";

} // namespace

} // namespace ortmem_bench

int main(int argc, char **argv)
{
    using namespace ortmem_bench;
    // --ortmem_write_trace=PATH: write the trace file for bench/torch_trace.py
    // and exit (no GPU needed).
    for (int i = 1; i < argc; i++) {
        if (std::strncmp(argv[i], kWriteTraceFlag, sizeof kWriteTraceFlag - 1) == 0) {
            const char *path = argv[i] + sizeof kWriteTraceFlag - 1;
            if (!write_trace_file(path)) {
                std::fprintf(stderr, "ortmem-gpu-bench: cannot write the trace to %s: %s\n", path,
                             std::strerror(errno));
                return 1;
            }
            const Trace &trace = activation_trace();
            std::printf("ortmem-gpu-bench: wrote %zu steps to %s (fingerprint %s)\n",
                        trace.steps.size(), path, hex64(trace_fingerprint(trace)).c_str());
            return 0;
        }
    }

    open_gpu();
    if (!g_gpu.ready)
        std::fprintf(stderr, "ortmem-gpu-bench: GPU unavailable: %s; every scenario is skipped\n",
                     g_gpu.unavailable.c_str());

    // Defaults first so that the same flags given on the command line win:
    // repetitions of ortmem and its baselines run in one shuffled sequence.
    std::vector<char *> args;
    args.push_back(argv[0]);
    static char interleave[] = "--benchmark_enable_random_interleaving=true";
    static char repetitions[] = "--benchmark_repetitions=5";
    args.push_back(interleave);
    args.push_back(repetitions);
    for (int i = 1; i < argc; i++)
        args.push_back(argv[i]);
    int arg_count = static_cast<int>(args.size());
    args.push_back(nullptr);

    benchmark::Initialize(&arg_count, args.data());
    if (benchmark::ReportUnrecognizedArguments(arg_count, args.data()))
        return 1;
    add_context();
    register_commit_benchmarks();
    register_kv_benchmarks();
    register_trace_benchmarks();
    register_offload_benchmarks();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
