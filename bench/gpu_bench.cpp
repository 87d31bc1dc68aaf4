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
//   gpu_offload_*        weight offload
//
// Each family lives in its own file: gpu_commit_bench.cpp, gpu_kv_bench.cpp,
// gpu_trace_bench.cpp, gpu_offload_bench.cpp; the driver in gpu_driver.cpp.
//
// The raw baselines open libcuda.so.1 with dlopen and resolve every entry point
// through cuGetProcAddress, as src/vmm/backends/cuda.c does, so the binary
// builds and starts without a driver; every scenario then skips with the
// reason. cuda.h supplies the types only.
#include "activation_trace.hpp"
#include "gpu_driver.hpp"
#include "gpu_scenarios.hpp"
#include "harness.hpp"

#include <cuda.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace ortmem_bench
{

namespace
{

void add_context()
{
    const Trace &trace = activation_trace();
    benchmark::AddCustomContext("trace_fingerprint", hex64(trace_fingerprint(trace)));
    benchmark::AddCustomContext("trace_steps", std::to_string(trace.steps.size()));
    benchmark::AddCustomContext("kv_preset", kv_context());
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
