// Scenarios kv_growth_cpu_{head,seq,token}: one stable KV sequence of the
// qwen2.5-0.5b preset (layout chosen) grown from 1K to 32K tokens in appends
// of 1,024 on the CPU backend (2 MiB granules, no pool, no touch), then
// destroyed: growth over geometric extents (the cache's default) against one
// extent per granule (ORTMEM_EXTENT_GRANULE). The CPU backend's create is a
// memfd fallocate whose cost is mostly per byte, so the ratio here is the
// handle count's share on the CPU; gpu_kv_growth_batch1_* in ortmem-gpu-bench
// is where the per-handle driver cost shows.
#include "harness.hpp"

#include <memory>
#include <string>

namespace ortmem_bench
{

namespace
{

constexpr const char *kKvPreset = "qwen2.5-0.5b"; // 24 layers, 2 KV heads, head_dim 64, fp16
constexpr uint64_t kKvMaxTokens = 32768;
constexpr uint64_t kKvAppendTokens = 1024;

struct KvGrowthVariant {
    ortmem_kv_layout layout;
    ortmem_extent_growth growth;
};

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

// One sequence created, grown to kKvMaxTokens, destroyed; at_end holds the
// stats just before the destroy. False (skipped with the reason) on a refusal.
bool grow_once(benchmark::State &state, ortmem_kv_cache *cache, ortmem_kv_stats &at_end)
{
    ortmem_kv_seq *seq = nullptr;
    if (!ok_or_skip(state, ortmem_kv_seq_create(cache, &seq), "ortmem_kv_seq_create"))
        return false;
    for (uint64_t length = 0; length < kKvMaxTokens; length += kKvAppendTokens) {
        if (!ok_or_skip(state, ortmem_kv_seq_append(seq, kKvAppendTokens),
                        "ortmem_kv_seq_append")) {
            (void)ortmem_kv_seq_destroy(seq);
            return false;
        }
    }
    at_end = kv_stats(cache);
    return ok_or_skip(state, ortmem_kv_seq_destroy(seq), "ortmem_kv_seq_destroy");
}

void kv_growth_cpu(benchmark::State &state, KvGrowthVariant variant)
{
    ortmem_cpu_options cpu_options = ORTMEM_CPU_OPTIONS_INIT;
    ortmem_backend *raw_backend = nullptr;
    if (!ok_or_skip(state, ortmem_cpu_backend_create(&cpu_options, &raw_backend),
                    "ortmem_cpu_backend_create"))
        return;
    BackendPtr backend(raw_backend);
    ortmem_authority_options authority_options = ORTMEM_AUTHORITY_OPTIONS_INIT;
    authority_options.limit_bytes = uint64_t(4) << 30;
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
    options.geometry.layout = variant.layout;
    size_t granule = 0;
    if (!ok_or_skip(state, ortmem_backend_granule(backend.get(), &granule),
                    "ortmem_backend_granule"))
        return;
    options.geometry.granule = granule; // the model below needs it
    options.strategy = ORTMEM_KV_STABLE;
    options.max_context = kKvMaxTokens;
    options.max_sequences = 1;
    options.extents.growth = variant.growth;
    ortmem_kv_cache *raw_cache = nullptr;
    if (!ok_or_skip(state, ortmem_kv_cache_create(authority.get(), &options, &raw_cache),
                    "ortmem_kv_cache_create"))
        return;
    KvCachePtr cache(raw_cache);
    ortmem_kv_stats at_end{};
    // One untimed growth first, so every iteration is measured warm.
    if (!grow_once(state, cache.get(), at_end))
        return;
    ortmem_vmm_stats before = backend_stats(backend.get());
    for (auto _ : state) {
        if (!grow_once(state, cache.get(), at_end))
            break;
    }
    if (state.error_occurred())
        return;
    ortmem_vmm_stats after = backend_stats(backend.get());
    report_backend_calls(state, before, after, static_cast<double>(state.iterations()));
    state.counters["appends"] = static_cast<double>(kKvMaxTokens / kKvAppendTokens);
    state.counters["committed_bytes_final"] = static_cast<double>(at_end.committed_bytes);
    state.counters["live_bytes_final"] = static_cast<double>(at_end.live_bytes);
    state.counters["overcommit_bytes_final"] = static_cast<double>(at_end.overcommit_bytes);
    state.counters["overcommit_bound_bytes"] = static_cast<double>(at_end.overcommit_bound_bytes);
    ortmem_kv_growth_cost cost{};
    cost.struct_size = sizeof cost;
    if (ortmem_kv_growth_evaluate(&options.geometry, &options.extents, kKvMaxTokens,
                                  kKvAppendTokens, kKvAppendTokens, kKvMaxTokens,
                                  &cost) == ORTMEM_OK) {
        state.counters["overcommit_max_bytes_model"] =
            static_cast<double>(cost.overcommit_max_bytes);
        state.counters["create_calls_model"] = static_cast<double>(cost.calls_create);
    }
}

} // namespace

void register_kv_cpu_benchmarks()
{
    const struct {
        const char *scenario;
        ortmem_kv_layout layout;
    } layouts[] = {
        {"kv_growth_cpu_head", ORTMEM_KV_HEAD_MAJOR},
        {"kv_growth_cpu_seq", ORTMEM_KV_SEQ_MAJOR},
        {"kv_growth_cpu_token", ORTMEM_KV_TOKEN_MAJOR},
    };
    for (const auto &layout : layouts) {
        for (ortmem_extent_growth growth : {ORTMEM_EXTENT_GEOMETRIC, ORTMEM_EXTENT_GRANULE}) {
            std::string name = std::string(layout.scenario) + "/" +
                               (growth == ORTMEM_EXTENT_GEOMETRIC ? "ortmem_stable_geometric"
                                                                  : "baseline_stable_per_granule");
            benchmark::RegisterBenchmark(name.c_str(), kv_growth_cpu,
                                         KvGrowthVariant{layout.layout, growth})
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
        }
    }
}

} // namespace ortmem_bench
