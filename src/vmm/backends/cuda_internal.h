/* The CUDA backend's private parts, shared by its two files: cuda_driver.c
 * loads the driver and opens the device, cuda.c holds the primitives. Only
 * for builds with cuda.h (ORTMEM_HAVE_CUDA_H). */
#ifndef ORTMEM_VMM_BACKENDS_CUDA_INTERNAL_H
#define ORTMEM_VMM_BACKENDS_CUDA_INTERNAL_H

#include <stdbool.h>
#include <string.h>

#include <cuda.h>

#include <ortmem/vmm.h>

#include "core/error.h"

/* name, return type, parameters: each resolved by its base name. */
#define CUDA_ENTRY_POINTS(X)                                                                       \
    X(cuGetErrorName, (CUresult, const char **))                                                   \
    X(cuGetErrorString, (CUresult, const char **))                                                 \
    X(cuInit, (unsigned int))                                                                      \
    X(cuDriverGetVersion, (int *))                                                                 \
    X(cuDeviceGetCount, (int *))                                                                   \
    X(cuDeviceGet, (CUdevice *, int))                                                              \
    X(cuDeviceGetName, (char *, int, CUdevice))                                                    \
    X(cuDeviceGetAttribute, (int *, CUdevice_attribute, CUdevice))                                 \
    X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                                           \
    X(cuDevicePrimaryCtxRelease, (CUdevice))                                                       \
    X(cuCtxGetCurrent, (CUcontext *))                                                              \
    X(cuCtxSetCurrent, (CUcontext))                                                                \
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
    X(cuMemGetAllocationPropertiesFromHandle,                                                      \
      (CUmemAllocationProp *, CUmemGenericAllocationHandle))                                       \
    X(cuMemExportToShareableHandle,                                                                \
      (void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long))       \
    X(cuMemImportFromShareableHandle,                                                              \
      (CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType))                         \
    X(cuMemcpy, (CUdeviceptr, CUdeviceptr, size_t))                                                \
    X(cuMemcpyAsync, (CUdeviceptr, CUdeviceptr, size_t, CUstream))                                 \
    X(cuStreamSynchronize, (CUstream))                                                             \
    X(cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream))                             \
    X(cuEventCreate, (CUevent *, unsigned int))                                                    \
    X(cuEventRecord, (CUevent, CUstream))                                                          \
    X(cuEventQuery, (CUevent))                                                                     \
    X(cuEventDestroy, (CUevent))

/* Fields are named p_<base name>: cuda.h #defines several base names to their
 * versioned symbols (cuEventDestroy -> cuEventDestroy_v2), and the prefix
 * keeps those macros out of the way. */
typedef struct cuda_driver {
#define CUDA_FIELD(name, params) CUresult(CUDAAPI *p_##name) params;
    CUDA_ENTRY_POINTS(CUDA_FIELD)
#undef CUDA_FIELD
} cuda_driver;

#define DRV(c, name) ((c)->d.p_##name)

typedef struct cuda_backend {
    cuda_driver d;
    int ordinal;
    CUdevice device;
    CUcontext ctx; /* the retained primary context */
    ortmem_cuda_export export_mode;
    bool fd_supported; /* CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED */
    size_t minimum;
    size_t granule;
    int driver_version;
    char device_name[128];
} cuda_backend;

/* Turns a failed driver call into a status whose detail names the call (what,
 * printf-style, with its numbers), the error name and text, and the code. */
ortmem_status om_cuda_fail(const cuda_driver *d, ortmem_status status, CUresult r, const char *fmt,
                           ...) ORTMEM_PRINTF(4, 5);

static inline ortmem_status cuda_status_of(CUresult r)
{
    return r == CUDA_ERROR_OUT_OF_MEMORY ? ORTMEM_E_NOMEM : ORTMEM_E_BACKEND;
}

#define CUDA_FAIL(c, r, ...) om_cuda_fail(&(c)->d, cuda_status_of(r), (r), __VA_ARGS__)

/* ---- context binding ---- */

typedef struct cuda_bind {
    CUcontext previous;
    bool swapped;
} cuda_bind;

/* Makes the primary context current on this thread for the calls that follow. */
ortmem_status om_cuda_enter(cuda_backend *c, cuda_bind *bind, const char *what);
/* Restores the thread's previous context (the call's own status stands). */
void om_cuda_leave(cuda_backend *c, const cuda_bind *bind);

#define CUDA_ENTER(c, what)                                                                        \
    cuda_bind bind_;                                                                               \
    do {                                                                                           \
        ortmem_status enter_st_ = om_cuda_enter((c), &bind_, (what));                              \
        if (enter_st_ != ORTMEM_OK)                                                                \
            return enter_st_;                                                                      \
    } while (0)

#define CUDA_LEAVE(c) om_cuda_leave((c), &bind_)

static inline CUmemAllocationProp cuda_prop(const cuda_backend *c, bool exportable)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = c->ordinal;
    prop.requestedHandleTypes =
        exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
    return prop;
}

/* The primitives' table (cuda.c), for ortmem_cuda_backend_create. */
extern const ortmem_backend_ops *const om_cuda_ops;

#endif
