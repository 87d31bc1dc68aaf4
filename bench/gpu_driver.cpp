#include "gpu_driver.hpp"

#include <dlfcn.h>

#include <cstring>

namespace ortmem_bench
{

Gpu g_gpu;

std::string cu_error_name(CUresult r)
{
    const char *name = nullptr;
    if (DRV(cuGetErrorName))
        (void)DRV(cuGetErrorName)(r, &name);
    return std::string(name ? name : "CUDA_ERROR_UNKNOWN_CODE") + " (CUresult " +
           std::to_string(static_cast<int>(r)) + ")";
}

// Fills g_gpu, or leaves ready false with the reason.
void open_gpu()
{
    Gpu &gpu = g_gpu;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        gpu.unavailable = std::string("dlopen(\"libcuda.so.1\") failed: ") +
                          (why ? why : "no reason given") + " (no NVIDIA driver on this machine)";
        return;
    }
    void *sym = dlsym(lib, "cuGetProcAddress_v2");
    if (!sym) {
        gpu.unavailable = "libcuda.so.1 has no cuGetProcAddress_v2 (a driver older than CUDA 12.0)";
        return;
    }
    auto get_proc_address = reinterpret_cast<ortmem_cuda_get_proc_address_fn>(sym);
    struct Entry {
        const char *name;
        void *slot; // a function pointer field of gpu.d
    };
    const Entry entries[] = {
#define GPU_ENTRY(name, params) {#name, &gpu.d.p_##name},
        GPU_ENTRY_POINTS(GPU_ENTRY)
#undef GPU_ENTRY
    };
    static_assert(sizeof(void *) == sizeof(gpu.d.p_cuInit), "POSIX: one pointer size");
    for (const Entry &entry : entries) {
        void *fn = nullptr;
        int symbol_status = 0;
        int r = get_proc_address(entry.name, &fn, kCudaAbiVersion, CU_GET_PROC_ADDRESS_DEFAULT,
                                 &symbol_status);
        // Each field has the entry's own function pointer type.
        std::memcpy(entry.slot, &fn, sizeof fn);
        if (r != CUDA_SUCCESS || !fn) {
            gpu.unavailable = std::string("cuGetProcAddress(\"") + entry.name + "\", " +
                              std::to_string(kCudaAbiVersion) + ") failed: CUresult " +
                              std::to_string(r) + ", symbolStatus " + std::to_string(symbol_status);
            return;
        }
    }
    CUresult r = DRV(cuInit)(0);
    if (r != CUDA_SUCCESS) {
        gpu.unavailable = "cuInit(0) -> " + cu_error_name(r);
        return;
    }
    (void)DRV(cuDriverGetVersion)(&gpu.driver_version);
    int count = 0;
    r = DRV(cuDeviceGetCount)(&count);
    if (r != CUDA_SUCCESS || count == 0) {
        gpu.unavailable = r != CUDA_SUCCESS ? "cuDeviceGetCount -> " + cu_error_name(r)
                                            : std::string("the driver reports no CUDA device");
        return;
    }
    if ((r = DRV(cuDeviceGet)(&gpu.device, gpu.ordinal)) != CUDA_SUCCESS) {
        gpu.unavailable = "cuDeviceGet(" + std::to_string(gpu.ordinal) + ") -> " + cu_error_name(r);
        return;
    }
    char name[256] = "";
    if (DRV(cuDeviceGetName)(name, static_cast<int>(sizeof name), gpu.device) == CUDA_SUCCESS)
        gpu.name = name;
    if ((r = DRV(cuDevicePrimaryCtxRetain)(&gpu.ctx, gpu.device)) != CUDA_SUCCESS ||
        (r = DRV(cuCtxSetCurrent)(gpu.ctx)) != CUDA_SUCCESS) {
        gpu.unavailable =
            "primary context of device " + std::to_string(gpu.ordinal) + " -> " + cu_error_name(r);
        return;
    }
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = gpu.ordinal;
    r = DRV(cuMemGetAllocationGranularity)(&gpu.granule, &prop,
                                           CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    if (r != CUDA_SUCCESS || gpu.granule == 0) {
        gpu.unavailable = "cuMemGetAllocationGranularity(RECOMMENDED) -> " + cu_error_name(r);
        return;
    }
    (void)DRV(cuMemGetInfo)(&gpu.free_bytes, &gpu.total_bytes);
    gpu.ready = true;
}

bool cu_ok(benchmark::State &state, CUresult r, const char *call)
{
    if (r == CUDA_SUCCESS)
        return true;
    state.SkipWithError((std::string(call) + " -> " + cu_error_name(r)).c_str());
    return false;
}

// Every benchmark starts here: skipped with the reason where there is no GPU.
bool gpu_or_skip(benchmark::State &state)
{
    if (!g_gpu.ready) {
        state.SkipWithError(("GPU unavailable: " + g_gpu.unavailable).c_str());
        return false;
    }
    return cu_ok(state, DRV(cuCtxSetCurrent)(g_gpu.ctx), "cuCtxSetCurrent(primary context)");
}

CUmemAllocationProp device_prop()
{
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = g_gpu.ordinal;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    return prop;
}

CUmemAccessDesc read_write_access()
{
    CUmemAccessDesc desc{};
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = g_gpu.ordinal;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return desc;
}

// The CUDA backend on the benchmark device, default options (recommended
// granularity, granules exportable only on request, as the raw baselines).
bool create_backend(benchmark::State &state, BackendPtr &backend)
{
    ortmem_cuda_options options = ORTMEM_CUDA_OPTIONS_INIT;
    options.ordinal = g_gpu.ordinal;
    ortmem_backend *raw = nullptr;
    if (!ok_or_skip(state, ortmem_cuda_backend_create(&options, &raw),
                    "ortmem_cuda_backend_create"))
        return false;
    backend.reset(raw);
    return true;
}

} // namespace ortmem_bench
