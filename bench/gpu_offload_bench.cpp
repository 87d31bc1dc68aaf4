// Weight offload on the device: the residency cache's host-to-device traffic
// against the raw driver copying the same bytes from the same pinned memory,
// in the same run.
//
//   gpu_offload_stream   1 GiB of weights (32 tensors of 32 MiB in pinned
//                        staging) moved to the device once per iteration:
//                        through the cache's ring (every acquire a refill of a
//                        mapped slot), paged into the tensors' own slots
//                        (commit + copy, evicted again between iterations,
//                        untimed; with the pool keeping the extents or not), vs raw cuMemcpyHtoDAsync per tensor with a
//                        synchronize each (what an acquire does) and all
//                        copies then one synchronize
//   gpu_offload_decode   a decode-shaped loop over 1 GiB of weights (64
//                        tensors of 16 MiB) with a 512 MiB budget, scan-
//                        resistant: each step acquires every tensor in order,
//                        reads it on the compute stream (a device-to-device
//                        copy stands for the kernel) and releases it; the
//                        stall time the cache reports against the streamed
//                        bytes over the bandwidth the raw copy measured
#include "gpu_driver.hpp"
#include "gpu_scenarios.hpp"
#include "harness.hpp"

#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace ortmem_bench
{

namespace
{

struct StagingDeleter {
    void operator()(ortmem_staging *staging) const
    {
        (void)ortmem_staging_destroy(staging);
    }
};
struct CatalogDeleter {
    void operator()(ortmem_weight_catalog *catalog) const
    {
        (void)ortmem_weight_catalog_destroy(catalog);
    }
};
struct CacheDeleter {
    void operator()(ortmem_residency_cache *cache) const
    {
        (void)ortmem_residency_cache_destroy(cache);
    }
};
struct StreamDeleter {
    void operator()(CUstream_st *stream) const
    {
        (void)DRV(cuStreamDestroy)(stream);
    }
};
using StagingPtr = std::unique_ptr<ortmem_staging, StagingDeleter>;
using CatalogPtr = std::unique_ptr<ortmem_weight_catalog, CatalogDeleter>;
using CachePtr = std::unique_ptr<ortmem_residency_cache, CacheDeleter>;
using StreamPtr = std::unique_ptr<CUstream_st, StreamDeleter>;

ortmem_status register_host(void *, void *ptr, size_t bytes)
{
    CUresult r = DRV(cuMemHostRegister)(ptr, bytes, 0);
    return r == CUDA_SUCCESS
               ? ORTMEM_OK
               : ortmem_error_set(ORTMEM_E_BACKEND, "cuMemHostRegister(%zu bytes) -> %s", bytes,
                                  cu_error_name(r).c_str());
}

void unregister_host(void *, void *ptr, size_t)
{
    (void)DRV(cuMemHostUnregister)(ptr);
}

uint64_t stream_id(CUstream stream)
{
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(stream));
}

// Weights in pinned staging, the streams, and (make_cache) a residency cache
// over them; members go in reverse order.
struct OffloadSetup {
    size_t tensors = 0, tensor_bytes = 0;
    BackendPtr backend;
    AuthorityPtr authority;
    StagingPtr staging;
    std::vector<std::string> names;
    CatalogPtr catalog;
    StreamPtr copy, compute;
    CachePtr cache;

    bool open(benchmark::State &state, size_t count, size_t bytes)
    {
        tensors = count;
        tensor_bytes = bytes;
        if (!gpu_or_skip(state) || !create_backend(state, backend))
            return false;
        ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
        ao.limit_bytes = 8 * GiB;
        ortmem_authority *a = nullptr;
        if (!ok_or_skip(state, ortmem_authority_create(backend.get(), &ao, &a),
                        "ortmem_authority_create"))
            return false;
        authority.reset(a);
        ortmem_staging_options so = ORTMEM_STAGING_OPTIONS_INIT;
        so.chunk_bytes = 256 * MiB;
        so.host_register = register_host;
        so.host_unregister = unregister_host;
        ortmem_staging *s = nullptr;
        if (!ok_or_skip(state, ortmem_staging_create(&so, &s), "ortmem_staging_create"))
            return false;
        staging.reset(s);
        std::vector<ortmem_weight_tensor> table(count);
        names.resize(count);
        for (size_t i = 0; i < count; i++) {
            names[i] = "blk." + std::to_string(i) + ".weight";
            table[i] = {
                names[i].c_str(),        0, bytes, static_cast<uint32_t>(i), ORTMEM_WEIGHT_MLP,
                static_cast<uint32_t>(i)};
        }
        ortmem_weight_catalog *c = nullptr;
        if (!ok_or_skip(state,
                        ortmem_weight_catalog_create_host(staging.get(), table.data(), count, &c),
                        "ortmem_weight_catalog_create_host"))
            return false;
        catalog.reset(c);
        for (uint32_t i = 0; i < count; i++) {
            void *host = nullptr;
            if (!ok_or_skip(state, ortmem_weight_catalog_host(c, i, &host),
                            "ortmem_weight_catalog_host"))
                return false;
            std::memset(host, static_cast<int>(i + 1), bytes);
        }
        CUstream raw = nullptr;
        if (!cu_ok(state, DRV(cuStreamCreate)(&raw, CU_STREAM_NON_BLOCKING), "cuStreamCreate"))
            return false;
        copy.reset(raw);
        if (!cu_ok(state, DRV(cuStreamCreate)(&raw, CU_STREAM_NON_BLOCKING), "cuStreamCreate"))
            return false;
        compute.reset(raw);
        return true;
    }

    bool make_cache(benchmark::State &state, ortmem_residency_policy policy, uint64_t budget,
                    uint32_t ring_slots)
    {
        ortmem_residency_options o = ORTMEM_RESIDENCY_OPTIONS_INIT;
        o.policy = policy;
        o.budget_bytes = budget;
        o.ring_slots = ring_slots;
        o.copy_stream = stream_id(copy.get());
        o.compute_stream = stream_id(compute.get());
        ortmem_residency_cache *c = nullptr;
        if (!ok_or_skip(state,
                        ortmem_residency_cache_create(authority.get(), catalog.get(), &o, &c),
                        "ortmem_residency_cache_create"))
            return false;
        cache.reset(c);
        return true;
    }

    void *host(uint32_t i) const
    {
        void *p = nullptr;
        (void)ortmem_weight_catalog_host(catalog.get(), i, &p);
        return p;
    }

    ortmem_residency_stats stats() const
    {
        ortmem_residency_stats s{};
        s.struct_size = sizeof s;
        (void)ortmem_residency_stats_get(cache.get(), &s);
        return s;
    }

    double total_bytes() const
    {
        return static_cast<double>(tensors) * static_cast<double>(tensor_bytes);
    }
};

constexpr size_t kStreamTensors = 32, kStreamTensorBytes = 32 * MiB;

void report_bandwidth(benchmark::State &state, const OffloadSetup &setup, double seconds)
{
    double iterations = static_cast<double>(state.iterations());
    state.counters["bytes_per_iteration"] = setup.total_bytes();
    if (seconds > 0)
        state.counters["GBps"] = setup.total_bytes() * iterations / seconds / 1e9;
}

// Every acquire but the stable subset's streams: the budget holds the ring
// and one resident slot, so 31 of the 32 tensors pass through the ring. The
// bandwidth counts the bytes the cache copied.
void ortmem_ring_stream(benchmark::State &state)
{
    OffloadSetup setup;
    if (!setup.open(state, kStreamTensors, kStreamTensorBytes) ||
        !setup.make_cache(state, ORTMEM_RESIDENCY_SCAN_RESISTANT, 3 * kStreamTensorBytes, 2))
        return;
    auto pass = [&]() {
        for (uint32_t i = 0; i < kStreamTensors; i++) {
            void *p = nullptr;
            if (!ok_or_skip(state, ortmem_residency_acquire(setup.cache.get(), i, &p),
                            "ortmem_residency_acquire") ||
                !ok_or_skip(state, ortmem_residency_release(setup.cache.get(), i),
                            "ortmem_residency_release"))
                return false;
        }
        return true;
    };
    if (!pass()) // the warm-up maps the ring and pages the stable subset in
        return;
    ortmem_residency_stats before = setup.stats();
    double timed = 0;
    for (auto _ : state) {
        Clock::time_point t0 = Clock::now();
        if (!pass())
            return;
        timed += seconds_since(t0);
    }
    ortmem_residency_stats after = setup.stats();
    double moved = static_cast<double>(after.bytes_moved - before.bytes_moved);
    double iterations = static_cast<double>(state.iterations());
    state.counters["bytes_per_iteration"] = moved / iterations;
    if (timed > 0)
        state.counters["GBps"] = moved / timed / 1e9;
    state.counters["streamed_per_iteration"] =
        static_cast<double>(after.streamed - before.streamed) / iterations;
}

// Every acquire pages the tensor into its own slot (one extent, one copy);
// the evictions between iterations are not timed. pooled: the backend's pool
// keeps the evicted extents, so a page-in maps one instead of creating it.
void ortmem_page_in(benchmark::State &state, bool pooled)
{
    OffloadSetup setup;
    if (!setup.open(state, kStreamTensors, kStreamTensorBytes) ||
        !ok_or_skip(state, ortmem_pool_set_cap(setup.backend.get(), pooled ? 2 * GiB : 0),
                    "ortmem_pool_set_cap") ||
        !setup.make_cache(state, ORTMEM_RESIDENCY_LRU, 2 * GiB, 1))
        return;
    ortmem_vmm_stats before = backend_stats(setup.backend.get());
    double timed = 0;
    for (auto _ : state) {
        Clock::time_point t0 = Clock::now();
        for (uint32_t i = 0; i < kStreamTensors; i++) {
            void *p = nullptr;
            if (!ok_or_skip(state, ortmem_residency_acquire(setup.cache.get(), i, &p),
                            "ortmem_residency_acquire") ||
                !ok_or_skip(state, ortmem_residency_release(setup.cache.get(), i),
                            "ortmem_residency_release"))
                return;
        }
        timed += seconds_since(t0);
        state.PauseTiming();
        for (uint32_t i = 0; i < kStreamTensors; i++)
            if (!ok_or_skip(state, ortmem_residency_evict(setup.cache.get(), i),
                            "ortmem_residency_evict"))
                return;
        if (!ok_or_skip(state, ortmem_authority_drain(setup.authority.get(), 5000, nullptr),
                        "ortmem_authority_drain"))
            return;
        state.ResumeTiming();
    }
    ortmem_vmm_stats after = backend_stats(setup.backend.get());
    report_backend_calls(state, before, after, static_cast<double>(state.iterations()));
    ortmem_residency_stats s = setup.stats();
    report_bandwidth(state, setup, timed);
    state.counters["page_ins_per_iteration"] =
        static_cast<double>(s.page_ins) / static_cast<double>(state.iterations());
}

// The same bytes from the same pinned memory into one device buffer.
void raw_htod(benchmark::State &state, bool sync_each)
{
    OffloadSetup setup;
    if (!setup.open(state, kStreamTensors, kStreamTensorBytes))
        return;
    CUdeviceptr device = 0;
    if (!cu_ok(state, DRV(cuMemAlloc)(&device, kStreamTensorBytes), "cuMemAlloc"))
        return;
    CUstream stream = setup.copy.get();
    double timed = 0;
    for (auto _ : state) {
        Clock::time_point t0 = Clock::now();
        for (uint32_t i = 0; i < kStreamTensors; i++) {
            if (!cu_ok(state,
                       DRV(cuMemcpyHtoDAsync)(device, setup.host(i), kStreamTensorBytes, stream),
                       "cuMemcpyHtoDAsync") ||
                (sync_each &&
                 !cu_ok(state, DRV(cuStreamSynchronize)(stream), "cuStreamSynchronize")))
                break;
        }
        if (!sync_each && !cu_ok(state, DRV(cuStreamSynchronize)(stream), "cuStreamSynchronize"))
            break;
        timed += seconds_since(t0);
    }
    (void)DRV(cuMemFree)(device);
    report_bandwidth(state, setup, timed);
}

constexpr size_t kDecodeTensors = 64, kDecodeTensorBytes = 16 * MiB;
constexpr uint64_t kDecodeBudget = 512 * MiB;

// Decode steps over twice the budget; "compute" reads each acquired tensor.
void ortmem_decode_loop(benchmark::State &state)
{
    OffloadSetup setup;
    if (!setup.open(state, kDecodeTensors, kDecodeTensorBytes) ||
        !setup.make_cache(state, ORTMEM_RESIDENCY_SCAN_RESISTANT, kDecodeBudget, 2))
        return;
    CUdeviceptr scratch = 0;
    if (!cu_ok(state, DRV(cuMemAlloc)(&scratch, kDecodeTensorBytes), "cuMemAlloc"))
        return;
    CUstream compute = setup.compute.get();
    auto step = [&]() {
        for (uint32_t i = 0; i < kDecodeTensors; i++) {
            void *p = nullptr;
            if (!ok_or_skip(state, ortmem_residency_acquire(setup.cache.get(), i, &p),
                            "ortmem_residency_acquire") ||
                !cu_ok(state,
                       DRV(cuMemcpyDtoDAsync)(scratch, reinterpret_cast<CUdeviceptr>(p),
                                              kDecodeTensorBytes, compute),
                       "cuMemcpyDtoDAsync") ||
                !ok_or_skip(state, ortmem_residency_release(setup.cache.get(), i),
                            "ortmem_residency_release"))
                return false;
        }
        return cu_ok(state, DRV(cuStreamSynchronize)(compute), "cuStreamSynchronize");
    };
    // Warm-up: the first step pages the stable subset in.
    if (!step()) {
        (void)DRV(cuMemFree)(scratch);
        return;
    }
    ortmem_residency_stats before = setup.stats();
    double timed = 0;
    for (auto _ : state) {
        Clock::time_point t0 = Clock::now();
        if (!step())
            break;
        timed += seconds_since(t0);
    }
    (void)DRV(cuMemFree)(scratch);
    if (state.error_occurred())
        return;
    ortmem_residency_stats after = setup.stats();
    double steps = static_cast<double>(state.iterations());
    double streamed = static_cast<double>(after.miss_bytes - before.miss_bytes) / steps;
    double stall_s = static_cast<double>(after.stall_ns - before.stall_ns) / 1e9 / steps;
    state.counters["hit_bytes_per_step"] =
        static_cast<double>(after.hit_bytes - before.hit_bytes) / steps;
    state.counters["streamed_bytes_per_step"] = streamed;
    state.counters["stall_ms_per_step"] = stall_s * 1e3;
    state.counters["step_ms"] = timed / steps * 1e3;
    state.counters["evictions_per_step"] =
        static_cast<double>(after.evictions - before.evictions) / steps;
    if (stall_s > 0)
        state.counters["stall_GBps"] = streamed / stall_s / 1e9;
    state.counters["resident_bytes"] = static_cast<double>(after.resident_bytes);
}

// The bandwidth the decode loop's stalls are judged against: its streamed
// bytes per step (everything past the resident subset) copied raw, one
// tensor at a time with a synchronize each.
void raw_decode_copies(benchmark::State &state)
{
    OffloadSetup setup;
    if (!setup.open(state, kDecodeTensors, kDecodeTensorBytes))
        return;
    CUdeviceptr device = 0;
    if (!cu_ok(state, DRV(cuMemAlloc)(&device, kDecodeTensorBytes), "cuMemAlloc"))
        return;
    CUstream stream = setup.copy.get();
    double timed = 0;
    for (auto _ : state) {
        Clock::time_point t0 = Clock::now();
        for (uint32_t i = 0; i < kDecodeTensors; i++)
            if (!cu_ok(state,
                       DRV(cuMemcpyHtoDAsync)(device, setup.host(i), kDecodeTensorBytes, stream),
                       "cuMemcpyHtoDAsync") ||
                !cu_ok(state, DRV(cuStreamSynchronize)(stream), "cuStreamSynchronize"))
                break;
        timed += seconds_since(t0);
    }
    (void)DRV(cuMemFree)(device);
    report_bandwidth(state, setup, timed);
}

} // namespace

void register_offload_benchmarks()
{
    struct Variant {
        const char *name;
        void (*fn)(benchmark::State &);
    };
    const Variant stream[] = {
        {"gpu_offload_stream/ortmem_ring_stream", ortmem_ring_stream},
        {"gpu_offload_stream/ortmem_page_in",
         [](benchmark::State &state) { ortmem_page_in(state, false); }},
        {"gpu_offload_stream/ortmem_page_in_pooled",
         [](benchmark::State &state) { ortmem_page_in(state, true); }},
        {"gpu_offload_stream/baseline_raw_htod_sync_each",
         [](benchmark::State &state) { raw_htod(state, true); }},
        {"gpu_offload_stream/baseline_raw_htod_one_sync",
         [](benchmark::State &state) { raw_htod(state, false); }},
        {"gpu_offload_decode/ortmem_decode_loop", ortmem_decode_loop},
        {"gpu_offload_decode/baseline_raw_htod_all_weights", raw_decode_copies},
    };
    for (const Variant &v : stream)
        benchmark::RegisterBenchmark(v.name, v.fn)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->MinTime(0.5);
}

} // namespace ortmem_bench
