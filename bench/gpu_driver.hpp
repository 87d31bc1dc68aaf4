// The raw CUDA driver for the GPU benchmarks: libcuda.so.1 opened with
// dlopen, every entry point resolved through cuGetProcAddress (as
// src/vmm/backends/cuda.c does), the benchmark device's primary context, and
// the helpers every GPU scenario starts with. cuda.h supplies the types only.
#ifndef ORTMEM_BENCH_GPU_DRIVER_HPP
#define ORTMEM_BENCH_GPU_DRIVER_HPP

#include "harness.hpp"

#include <cuda.h>

#include <chrono>
#include <string>

namespace ortmem_bench
{

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start)
{
    return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr size_t GiB = 1024 * MiB;
constexpr double kMicroMinTime = 0.2; // seconds per repetition of the short scenarios

// The ABI every entry point is resolved for: the CUDA 12.0 versions, which
// every 12.x and 13.x driver provides (what src/vmm/backends/cuda.c asks for).
// The signatures are written out, not taken from cuda.h's declarations, which
// may name newer versions.
constexpr int kCudaAbiVersion = 12000;

#define GPU_ENTRY_POINTS(X)                                                                        \
    X(cuGetErrorName, (CUresult, const char **))                                                   \
    X(cuInit, (unsigned int))                                                                      \
    X(cuDriverGetVersion, (int *))                                                                 \
    X(cuDeviceGetCount, (int *))                                                                   \
    X(cuDeviceGet, (CUdevice *, int))                                                              \
    X(cuDeviceGetName, (char *, int, CUdevice))                                                    \
    X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                                           \
    X(cuCtxSetCurrent, (CUcontext))                                                                \
    X(cuCtxSynchronize, (void))                                                                    \
    X(cuMemGetInfo, (size_t *, size_t *))                                                          \
    X(cuMemGetAllocationGranularity,                                                               \
      (size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags))                   \
    X(cuMemAddressReserve, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))       \
    X(cuMemAddressFree, (CUdeviceptr, size_t))                                                     \
    X(cuMemCreate,                                                                                 \
      (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long))   \
    X(cuMemRelease, (CUmemGenericAllocationHandle))                                                \
    X(cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))   \
    X(cuMemUnmap, (CUdeviceptr, size_t))                                                           \
    X(cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t))                      \
    X(cuMemAlloc, (CUdeviceptr *, size_t))                                                         \
    X(cuMemFree, (CUdeviceptr))                                                                    \
    X(cuMemHostRegister, (void *, size_t, unsigned int))                                           \
    X(cuMemHostUnregister, (void *))                                                               \
    X(cuMemcpyHtoDAsync, (CUdeviceptr, const void *, size_t, CUstream))                            \
    X(cuMemcpyDtoDAsync, (CUdeviceptr, CUdeviceptr, size_t, CUstream))                             \
    X(cuStreamCreate, (CUstream *, unsigned int))                                                  \
    X(cuStreamDestroy, (CUstream))                                                                 \
    X(cuStreamSynchronize, (CUstream))

// Fields are p_<base name>: cuda.h #defines several base names to versioned
// symbols (cuMemAlloc -> cuMemAlloc_v2); the prefix keeps the macros away.
struct Driver {
#define GPU_FIELD(name, params) CUresult(CUDAAPI *p_##name) params = nullptr;
    GPU_ENTRY_POINTS(GPU_FIELD)
#undef GPU_FIELD
};

// The device every scenario runs on, opened once at start-up. Its primary
// context is retained for the whole process and kept current on the main
// thread (where Google Benchmark runs single-threaded benchmarks), so neither
// the raw baselines nor ortmem's context binding pay for a context switch, and
// the context is never torn down between benchmarks.
struct Gpu {
    bool ready = false;
    std::string unavailable; // why not ready
    Driver d;
    int ordinal = 0;
    CUdevice device = 0;
    CUcontext ctx = nullptr;
    std::string name;
    int driver_version = 0;
    size_t granule = 0; // the driver's recommended granularity (pinned, device)
    size_t free_bytes = 0, total_bytes = 0;
};

extern Gpu g_gpu;

#define DRV(name) (g_gpu.d.p_##name)

std::string cu_error_name(CUresult r);
// Fills g_gpu, or leaves ready false with the reason.
void open_gpu();
bool cu_ok(benchmark::State &state, CUresult r, const char *call);
// Every benchmark starts here: skipped with the reason where there is no GPU.
bool gpu_or_skip(benchmark::State &state);
CUmemAllocationProp device_prop();
CUmemAccessDesc read_write_access();
// The CUDA backend on the benchmark device, default options (recommended
// granularity, granules exportable only on request, as the raw baselines).
bool create_backend(benchmark::State &state, BackendPtr &backend);

} // namespace ortmem_bench

#endif
