// gpu_kv_growth_*: a 7B-class KV cache grown from 1K to 128K tokens on the
// device (gpu_bench.cpp lists the scenarios).
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

void register_kv_benchmarks_here()
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

} // namespace

void register_kv_benchmarks()
{
    register_kv_benchmarks_here();
}

std::string kv_context()
{
    return std::string(kKvPreset) + ", " + std::to_string(kKvFirstTokens) + " to " +
           std::to_string(kv_max_tokens()) + " tokens by " + std::to_string(kKvAppendTokens);
}

} // namespace ortmem_bench
