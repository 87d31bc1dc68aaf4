// Scenario 1: commit, touch and decommit one granule of a region on the CPU
// backend, pooled and unpooled, with and without populate, against anonymous
// mmap + touch + munmap of the same size. Every variant writes one byte per
// 4 KiB page: the first-touch cost is most of what a CPU granule costs.
// Scenario extent_1gib: 1 GiB committed and decommitted (unpooled, untouched)
// as one extent against the same bytes as one extent per granule.
#include "harness.hpp"

#include <sys/mman.h>

#include <string>

namespace ortmem_bench
{

namespace
{

struct GranuleVariant {
    const char *name;
    bool pooled;  // pool cap of one granule: decommit keeps it, commit reuses it
    int populate; // ortmem_cpu_options.populate
};

void report_touch_counters(benchmark::State &state, size_t granule)
{
    state.counters["granule_bytes"] = static_cast<double>(granule);
    state.counters["touched_pages"] = static_cast<double>(granule / kTouchStride);
}

void granule_commit_touch_decommit(benchmark::State &state, GranuleVariant variant)
{
    ortmem_cpu_options options = ORTMEM_CPU_OPTIONS_INIT;
    options.populate = variant.populate;
    ortmem_backend *raw_backend = nullptr;
    if (!ok_or_skip(state, ortmem_cpu_backend_create(&options, &raw_backend),
                    "ortmem_cpu_backend_create"))
        return;
    BackendPtr backend(raw_backend);
    size_t granule = 0;
    if (!ok_or_skip(state, ortmem_backend_granule(backend.get(), &granule),
                    "ortmem_backend_granule"))
        return;
    if (!ok_or_skip(state, ortmem_pool_set_cap(backend.get(), variant.pooled ? granule : 0),
                    "ortmem_pool_set_cap"))
        return;
    ortmem_region_options region_options = ORTMEM_REGION_OPTIONS_INIT;
    region_options.size = granule;
    ortmem_region *raw_region = nullptr;
    if (!ok_or_skip(state, ortmem_region_create(backend.get(), &region_options, &raw_region),
                    "ortmem_region_create"))
        return;
    RegionPtr region(raw_region);
    void *base = ortmem_region_base(region.get());

    // One untimed round first, so the pooled variant measures reuse only and
    // the per-iteration counters below are exact.
    if (!ok_or_skip(state, ortmem_region_commit(region.get(), 0, granule),
                    "ortmem_region_commit (warm-up)"))
        return;
    touch_every_page(base, granule);
    if (!ok_or_skip(state, ortmem_region_decommit(region.get(), 0, granule),
                    "ortmem_region_decommit (warm-up)"))
        return;

    ortmem_vmm_stats before = backend_stats(backend.get());
    uint64_t faults_before = process_page_faults();
    for (auto _ : state) {
        if (!ok_or_skip(state, ortmem_region_commit(region.get(), 0, granule),
                        "ortmem_region_commit"))
            break;
        touch_every_page(base, granule);
        if (!ok_or_skip(state, ortmem_region_decommit(region.get(), 0, granule),
                        "ortmem_region_decommit"))
            break;
    }
    report_page_faults(state, faults_before);
    ortmem_vmm_stats after = backend_stats(backend.get());
    report_backend_calls(state, before, after, static_cast<double>(state.iterations()));
    report_touch_counters(state, granule);
    state.counters["mapped_peak_bytes"] = static_cast<double>(after.mapped_peak_bytes);
    state.counters["owned_bytes_after"] = static_cast<double>(after.owned_bytes);
}

// The baseline: private anonymous memory, as malloc of a large block gets it.
void mmap_touch_munmap(benchmark::State &state, int extra_flags)
{
    const size_t granule = 2 * MiB; // the CPU backend's default granule
    uint64_t faults_before = process_page_faults();
    for (auto _ : state) {
        void *block = mmap(nullptr, granule, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
        if (block == MAP_FAILED) {
            state.SkipWithError("mmap of 2 MiB failed");
            break;
        }
        touch_every_page(block, granule);
        munmap(block, granule);
    }
    report_page_faults(state, faults_before);
    report_touch_counters(state, granule);
}

// 1 GiB of one region, committed and decommitted whole each iteration with no
// pool: growth EXACT lays one extent (one create, one map, one set-access),
// GRANULE one extent per 2 MiB granule (512 of each, one set-access).
void extent_commit_decommit(benchmark::State &state, ortmem_extent_growth growth)
{
    ortmem_cpu_options options = ORTMEM_CPU_OPTIONS_INIT;
    ortmem_backend *raw_backend = nullptr;
    if (!ok_or_skip(state, ortmem_cpu_backend_create(&options, &raw_backend),
                    "ortmem_cpu_backend_create"))
        return;
    BackendPtr backend(raw_backend);
    size_t granule = 0;
    if (!ok_or_skip(state, ortmem_backend_granule(backend.get(), &granule),
                    "ortmem_backend_granule"))
        return;
    const size_t bytes = size_t(1) << 30;
    ortmem_region_options region_options = ORTMEM_REGION_OPTIONS_INIT;
    region_options.size = bytes;
    region_options.extents.growth = growth;
    ortmem_region *raw_region = nullptr;
    if (!ok_or_skip(state, ortmem_region_create(backend.get(), &region_options, &raw_region),
                    "ortmem_region_create"))
        return;
    RegionPtr region(raw_region);
    ortmem_vmm_stats before = backend_stats(backend.get());
    for (auto _ : state) {
        if (!ok_or_skip(state, ortmem_region_commit(region.get(), 0, bytes),
                        "ortmem_region_commit") ||
            !ok_or_skip(state, ortmem_region_decommit(region.get(), 0, bytes),
                        "ortmem_region_decommit"))
            break;
    }
    if (state.error_occurred())
        return;
    ortmem_vmm_stats after = backend_stats(backend.get());
    report_backend_calls(state, before, after, static_cast<double>(state.iterations()));
    state.counters["granules"] = static_cast<double>(bytes / granule);
    state.counters["granule_bytes"] = static_cast<double>(granule);
}

void register_variant(const std::string &scenario, GranuleVariant variant)
{
    std::string name = scenario + "/" + variant.name;
    benchmark::RegisterBenchmark(name.c_str(), granule_commit_touch_decommit, variant)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
}

void register_baseline(const std::string &scenario, const char *variant, int extra_flags)
{
    std::string name = scenario + "/" + variant;
    benchmark::RegisterBenchmark(name.c_str(), mmap_touch_munmap, extra_flags)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
}

} // namespace

void register_granule_benchmarks()
{
    const std::string plain = "granule_commit_touch";
    register_variant(plain, {"ortmem_pooled", true, 0});
    register_variant(plain, {"ortmem_unpooled", false, 0});
    register_baseline(plain, "baseline_mmap", 0);

    // populate = 1 moves the page faults into commit (MADV_POPULATE_WRITE);
    // MAP_POPULATE is the matching baseline, plain mmap the reference.
    const std::string populated = "granule_commit_touch_populate";
    register_variant(populated, {"ortmem_pooled", true, 1});
    register_variant(populated, {"ortmem_unpooled", false, 1});
    register_baseline(populated, "baseline_mmap", 0);
    register_baseline(populated, "baseline_mmap_populate", MAP_POPULATE);

    // The ratio one extent / per granule is the handle count's share of the cost.
    const std::string extent = "extent_1gib";
    benchmark::RegisterBenchmark((extent + "/ortmem_one_extent").c_str(), extent_commit_decommit,
                                 ORTMEM_EXTENT_EXACT)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((extent + "/baseline_ortmem_512_granules").c_str(),
                                 extent_commit_decommit, ORTMEM_EXTENT_GRANULE)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
}

} // namespace ortmem_bench
