/* CUDA backend: the driver's virtual memory management on one device.
 *
 * libcuda.so.1 is opened at run time and every entry point is resolved through
 * cuGetProcAddress (CUDA 12+ signature, legacy default stream), so nothing here
 * links against the driver. Built with cuda.h (ORTMEM_HAVE_CUDA_H) this file
 * uses the header's types; built without it, ortmem_cuda_backend_create only
 * reports that the backend is unavailable.
 *
 * Context: the device's primary context is retained at creation. Each
 * primitive binds it on the calling thread for the driver calls it makes and
 * restores whatever context the thread had before, so the engine's own
 * binding is left as it was and any thread may call. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ortmem/vmm.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/gate.h"

/* Validates and fills the options (shared by both builds). */
static ortmem_status cuda_options(const ortmem_cuda_options *options, ortmem_cuda_options *out)
{
    ortmem_cuda_options opt = ORTMEM_CUDA_OPTIONS_INIT;
    if (options) {
        if (options->struct_size == 0 || options->struct_size > sizeof opt)
            return OM_ERR(ORTMEM_E_INVALID,
                          "cuda backend create: options struct_size %zu (this library knows %zu)",
                          options->struct_size, sizeof opt);
        memcpy(&opt, options, options->struct_size);
    }
    if (opt.ordinal < 0)
        return OM_ERR(ORTMEM_E_INVALID, "cuda backend create: device ordinal %d is negative",
                      opt.ordinal);
    if ((unsigned)opt.exportable > ORTMEM_CUDA_EXPORT_NEVER)
        return OM_ERR(ORTMEM_E_INVALID, "cuda backend create: unknown export mode %d",
                      (int)opt.exportable);
    if ((unsigned)opt.granularity > ORTMEM_CUDA_GRANULE_MINIMUM)
        return OM_ERR(ORTMEM_E_INVALID, "cuda backend create: unknown granularity choice %d",
                      (int)opt.granularity);
    if (opt.granule & (opt.granule - 1))
        return OM_ERR(ORTMEM_E_INVALID, "cuda backend create: granule %zu is not a power of two",
                      opt.granule);
    *out = opt;
    return ORTMEM_OK;
}

#ifndef ORTMEM_HAVE_CUDA_H

ortmem_status ortmem_cuda_backend_create(const ortmem_cuda_options *options, ortmem_backend **out)
{
    om_error_clear();
    if (!out)
        return OM_ERR(ORTMEM_E_INVALID, "cuda backend create: out is NULL");
    ortmem_cuda_options opt = ORTMEM_CUDA_OPTIONS_INIT;
    ortmem_status st = cuda_options(options, &opt);
    if (st != ORTMEM_OK)
        return st;
    return OM_ERR(ORTMEM_E_UNAVAILABLE,
                  "cuda backend unavailable: ortmem was built without CUDA headers (cuda.h was "
                  "not found at configure time; install the CUDA toolkit and reconfigure with "
                  "-Dcuda=enabled)");
}

#else /* ORTMEM_HAVE_CUDA_H */

#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>

/* The ABI every entry point is resolved for: the CUDA 12.0 versions, which
 * every 12.x and 13.x driver still provides. */
#define CUDA_ABI_VERSION 12000

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

/* Name and description of a CUresult; never NULL. */
static void cuda_error_text(const cuda_driver *d, CUresult r, const char **name, const char **text)
{
    *name = NULL;
    *text = NULL;
    if (d->p_cuGetErrorName)
        (void)d->p_cuGetErrorName(r, name);
    if (d->p_cuGetErrorString)
        (void)d->p_cuGetErrorString(r, text);
    if (!*name)
        *name = "CUDA_ERROR_UNKNOWN_CODE";
    if (!*text)
        *text = "no description";
}

/* Turns a failed driver call into a status whose detail names the call (what,
 * printf-style, with its numbers), the error name and text, and the code. */
static ortmem_status cuda_fail_d(const cuda_driver *d, ortmem_status status, CUresult r,
                                 const char *fmt, ...) ORTMEM_PRINTF(4, 5);

static ortmem_status cuda_fail_d(const cuda_driver *d, ortmem_status status, CUresult r,
                                 const char *fmt, ...)
{
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const char *name, *text;
    cuda_error_text(d, r, &name, &text);
    return OM_ERR(status, "%s failed: %s (%s; CUresult %d)", what, name, text, (int)r);
}

static ortmem_status cuda_status_of(CUresult r)
{
    return r == CUDA_ERROR_OUT_OF_MEMORY ? ORTMEM_E_NOMEM : ORTMEM_E_BACKEND;
}

#define CUDA_FAIL(c, r, ...) cuda_fail_d(&(c)->d, cuda_status_of(r), (r), __VA_ARGS__)

/* ---- context binding ---- */

typedef struct cuda_bind {
    CUcontext previous;
    bool swapped;
} cuda_bind;

/* Makes the primary context current on this thread for the calls that follow. */
static ortmem_status cuda_enter(cuda_backend *c, cuda_bind *bind, const char *what)
{
    bind->previous = NULL;
    bind->swapped = false;
    CUresult r = DRV(c, cuCtxGetCurrent)(&bind->previous);
    if (r != CUDA_SUCCESS)
        return CUDA_FAIL(c, r, "%s: cuCtxGetCurrent", what);
    if (bind->previous == c->ctx)
        return ORTMEM_OK;
    r = DRV(c, cuCtxSetCurrent)(c->ctx);
    if (r != CUDA_SUCCESS)
        return CUDA_FAIL(c, r, "%s: cuCtxSetCurrent (primary context of device %d)", what,
                         c->ordinal);
    bind->swapped = true;
    return ORTMEM_OK;
}

/* Restores the thread's previous context (the call's own status stands). */
static void cuda_leave(cuda_backend *c, const cuda_bind *bind)
{
    if (bind->swapped)
        (void)DRV(c, cuCtxSetCurrent)(bind->previous);
}

#define CUDA_ENTER(c, what)                                                                        \
    cuda_bind bind_;                                                                               \
    do {                                                                                           \
        ortmem_status enter_st_ = cuda_enter((c), &bind_, (what));                                 \
        if (enter_st_ != ORTMEM_OK)                                                                \
            return enter_st_;                                                                      \
    } while (0)

#define CUDA_LEAVE(c) cuda_leave((c), &bind_)

static CUmemAllocationProp cuda_prop(const cuda_backend *c, bool exportable)
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

/* ---- primitives ---- */

static ortmem_status cuda_granularity(void *self, size_t *minimum, size_t *recommended)
{
    cuda_backend *c = self;
    *minimum = c->minimum;
    *recommended = c->granule;
    return ORTMEM_OK;
}

static ortmem_status cuda_reserve(void *self, size_t size, size_t alignment, uintptr_t *va)
{
    cuda_backend *c = self;
    CUDA_ENTER(c, "cuda reserve");
    CUdeviceptr ptr = 0;
    CUresult r = DRV(c, cuMemAddressReserve)(&ptr, size, alignment, 0, 0);
    CUDA_LEAVE(c);
    if (r != CUDA_SUCCESS)
        return CUDA_FAIL(c, r, "cuMemAddressReserve of %zu bytes aligned to %zu", size, alignment);
    *va = (uintptr_t)ptr;
    return ORTMEM_OK;
}

static ortmem_status cuda_unreserve(void *self, uintptr_t va, size_t size)
{
    cuda_backend *c = self;
    CUDA_ENTER(c, "cuda unreserve");
    CUresult r = DRV(c, cuMemAddressFree)((CUdeviceptr)va, size);
    CUDA_LEAVE(c);
    if (r != CUDA_SUCCESS)
        return CUDA_FAIL(c, r, "cuMemAddressFree of %zu bytes at 0x%llx", size,
                         (unsigned long long)va);
    return ORTMEM_OK;
}

static ortmem_status cuda_create(void *self, size_t size, unsigned flags, uint64_t *handle)
{
    cuda_backend *c = self;
    bool asked = (flags & ORTMEM_CREATE_EXPORTABLE) != 0;
    if (asked && c->export_mode == ORTMEM_CUDA_EXPORT_NEVER)
        return OM_ERR(ORTMEM_E_UNSUPPORTED,
                      "cuda create: an exportable granule was asked for, but the backend was "
                      "created with ORTMEM_CUDA_EXPORT_NEVER");
    bool exportable = asked || c->export_mode == ORTMEM_CUDA_EXPORT_ALWAYS;
    if (exportable && !c->fd_supported)
        return OM_ERR(ORTMEM_E_UNSUPPORTED,
                      "cuda create: device %d does not support POSIX file-descriptor handles "
                      "(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is 0)",
                      c->ordinal);
    if (!size || size % c->minimum)
        return OM_ERR(ORTMEM_E_ALIGN,
                      "cuda create: %zu bytes is not a multiple of the minimum granularity %zu",
                      size, c->minimum);
    CUmemAllocationProp prop = cuda_prop(c, exportable);
    CUDA_ENTER(c, "cuda create");
    CUmemGenericAllocationHandle h = 0;
    om_capture_shared_enter(); /* synchronises the device: never inside a capture */
    CUresult r = DRV(c, cuMemCreate)(&h, size, &prop, 0);
    om_capture_shared_leave();
    CUDA_LEAVE(c);
    if (r != CUDA_SUCCESS)
        return CUDA_FAIL(c, r, "cuMemCreate of %zu bytes on device %d%s", size, c->ordinal,
                         exportable ? " (POSIX fd handle type)" : "");
    *handle = (uint64_t)h;
    return ORTMEM_OK;
}

static ortmem_status cuda_release(void *self, uint64_t handle)
{
    cuda_backend *c = self;
    CUDA_ENTER(c, "cuda release");
    om_capture_shared_enter();
    CUresult r = DRV(c, cuMemRelease)((CUmemGenericAllocationHandle)handle);
    om_capture_shared_leave();
    CUDA_LEAVE(c);
    if (r != CUDA_SUCCESS)
        return CUDA_FAIL(c, r, "cuMemRelease of handle 0x%llx", (unsigned long long)handle);
    return ORTMEM_OK;
}

static ortmem_status cuda_map(void *self, uintptr_t va, size_t size, uint64_t handle,
                              size_t handle_offset)
{
    cuda_backend *c = self;
    CUDA_ENTER(c, "cuda map");
    om_capture_shared_enter();
    CUresult r = DRV(c, cuMemMap)((CUdeviceptr)va, size, handle_offset,
                                  (CUmemGenericAllocationHandle)handle, 0);
    om_capture_shared_leave();
    CUDA_LEAVE(c);
    if (r != CUDA_SUCCESS)
        return CUDA_FAIL(c, r, "cuMemMap of %zu bytes of handle 0x%llx (offset %zu) at 0x%llx",
                         size, (unsigned long long)handle, handle_offset, (unsigned long long)va);
    return ORTMEM_OK;
}

static ortmem_status cuda_unmap(void *self, uintptr_t va, size_t size)
{
    cuda_backend *c = self;
    CUDA_ENTER(c, "cuda unmap");
    om_capture_shared_enter();
    CUresult r = DRV(c, cuMemUnmap)((CUdeviceptr)va, size);
    om_capture_shared_leave();
    CUDA_LEAVE(c);
    if (r != CUDA_SUCCESS)
        return CUDA_FAIL(c, r, "cuMemUnmap of %zu bytes at 0x%llx", size, (unsigned long long)va);
    return ORTMEM_OK;
}

static ortmem_status cuda_set_access(void *self, uintptr_t va, size_t size, ortmem_access access)
{
    cuda_backend *c = self;
    CUmemAccessDesc desc;
    memset(&desc, 0, sizeof desc);
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = c->ordinal;
    switch (access) {
    case ORTMEM_ACCESS_READ: desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READ; break;
    case ORTMEM_ACCESS_READ_WRITE: desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE; break;
    case ORTMEM_ACCESS_NONE:
        /* A mapping starts with no access, but access once granted cannot be
         * taken back with cuMemSetAccess; only an unmap revokes it. Answering
         * success here would leave the range readable while the caller
         * believes it is not. */
        return OM_ERR(ORTMEM_E_UNSUPPORTED,
                      "cuda set_access: access NONE over %zu bytes at 0x%llx is not supported "
                      "(cuMemSetAccess cannot revoke access; decommit the range instead)",
                      size, (unsigned long long)va);
    default: return OM_ERR(ORTMEM_E_INVALID, "cuda set_access: unknown access %d", (int)access);
    }
    CUDA_ENTER(c, "cuda set_access");
    om_capture_shared_enter();
    CUresult r = DRV(c, cuMemSetAccess)((CUdeviceptr)va, size, &desc, 1);
    om_capture_shared_leave();
    CUDA_LEAVE(c);
    if (r != CUDA_SUCCESS)
        return CUDA_FAIL(c, r, "cuMemSetAccess(%s) of %zu bytes at 0x%llx for device %d",
                         access == ORTMEM_ACCESS_READ ? "PROT_READ" : "PROT_READWRITE", size,
                         (unsigned long long)va, c->ordinal);
    return ORTMEM_OK;
}

static ortmem_status cuda_export(void *self, uint64_t handle, int *fd)
{
    cuda_backend *c = self;
    CUDA_ENTER(c, "cuda export");
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    CUresult r =
        DRV(c, cuMemGetAllocationPropertiesFromHandle)(&prop, (CUmemGenericAllocationHandle)handle);
    if (r != CUDA_SUCCESS) {
        CUDA_LEAVE(c);
        return CUDA_FAIL(c, r, "cuMemGetAllocationPropertiesFromHandle of handle 0x%llx",
                         (unsigned long long)handle);
    }
    if (!(prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        CUDA_LEAVE(c);
        return OM_ERR(ORTMEM_E_UNSUPPORTED,
                      "cuda export: granule 0x%llx was not created exportable "
                      "(ORTMEM_CREATE_EXPORTABLE)",
                      (unsigned long long)handle);
    }
    int out = -1;
    r = DRV(c, cuMemExportToShareableHandle)(&out, (CUmemGenericAllocationHandle)handle,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    CUDA_LEAVE(c);
    if (r != CUDA_SUCCESS)
        return CUDA_FAIL(c, r, "cuMemExportToShareableHandle(POSIX fd) of handle 0x%llx",
                         (unsigned long long)handle);
    /* Like the CPU backend's descriptors: not inherited across exec. */
    int fdflags = fcntl(out, F_GETFD);
    if (fdflags >= 0)
        (void)fcntl(out, F_SETFD, fdflags | FD_CLOEXEC);
    *fd = out;
    return ORTMEM_OK;
}

static ortmem_status cuda_import(void *self, int fd, size_t size, uint64_t *handle)
{
    cuda_backend *c = self;
    CUDA_ENTER(c, "cuda import");
    CUmemGenericAllocationHandle h = 0;
    /* The driver reads the descriptor and leaves it open: the caller keeps it. */
    CUresult r = DRV(c, cuMemImportFromShareableHandle)(&h, (void *)(intptr_t)fd,
                                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUDA_LEAVE(c);
    if (r != CUDA_SUCCESS)
        return CUDA_FAIL(c, r, "cuMemImportFromShareableHandle(POSIX fd %d) for %zu bytes", fd,
                         size);
    *handle = (uint64_t)h;
    return ORTMEM_OK;
}

static ortmem_status cuda_copy(void *self, uintptr_t dst, uintptr_t src, size_t size)
{
    cuda_backend *c = self;
    CUDA_ENTER(c, "cuda copy");
    CUresult r = DRV(c, cuMemcpy)((CUdeviceptr)dst, (CUdeviceptr)src, size);
    /* cuMemcpy returns before a device-to-device copy (and the DMA of a
     * staged pageable host-to-device copy) has landed; the seam promises a
     * finished copy, and a fault in it must surface here, not later. */
    CUresult s = r == CUDA_SUCCESS ? DRV(c, cuStreamSynchronize)(NULL) : CUDA_SUCCESS;
    CUDA_LEAVE(c);
    if (r != CUDA_SUCCESS)
        return CUDA_FAIL(c, r, "cuMemcpy of %zu bytes from 0x%llx to 0x%llx", size,
                         (unsigned long long)src, (unsigned long long)dst);
    if (s != CUDA_SUCCESS)
        return CUDA_FAIL(c, s,
                         "cuStreamSynchronize(legacy default stream) after cuMemcpy of %zu bytes "
                         "from 0x%llx to 0x%llx",
                         size, (unsigned long long)src, (unsigned long long)dst);
    return ORTMEM_OK;
}

static ortmem_status cuda_copy_async(void *self, uintptr_t dst, uintptr_t src, size_t size,
                                     uint64_t stream)
{
    cuda_backend *c = self;
    CUDA_ENTER(c, "cuda copy_async");
    CUresult r = DRV(c, cuMemcpyAsync)((CUdeviceptr)dst, (CUdeviceptr)src, size,
                                       (CUstream)(uintptr_t)stream);
    CUDA_LEAVE(c);
    if (r != CUDA_SUCCESS)
        return CUDA_FAIL(c, r, "cuMemcpyAsync of %zu bytes from 0x%llx to 0x%llx on stream 0x%llx",
                         size, (unsigned long long)src, (unsigned long long)dst,
                         (unsigned long long)stream);
    return ORTMEM_OK;
}

static ortmem_status cuda_memset_async(void *self, uintptr_t dst, int value, size_t size,
                                       uint64_t stream)
{
    cuda_backend *c = self;
    CUDA_ENTER(c, "cuda memset_async");
    CUresult r = DRV(c, cuMemsetD8Async)((CUdeviceptr)dst, (unsigned char)value, size,
                                         (CUstream)(uintptr_t)stream);
    CUDA_LEAVE(c);
    if (r != CUDA_SUCCESS)
        return CUDA_FAIL(c, r, "cuMemsetD8Async(0x%02x) of %zu bytes at 0x%llx on stream 0x%llx",
                         (unsigned)(unsigned char)value, size, (unsigned long long)dst,
                         (unsigned long long)stream);
    return ORTMEM_OK;
}

static ortmem_status cuda_event_record(void *self, uint64_t stream, uint64_t *event)
{
    cuda_backend *c = self;
    CUDA_ENTER(c, "cuda event_record");
    CUevent ev = NULL;
    CUresult r = DRV(c, cuEventCreate)(&ev, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) {
        CUDA_LEAVE(c);
        return CUDA_FAIL(c, r, "cuEventCreate(CU_EVENT_DISABLE_TIMING)");
    }
    r = DRV(c, cuEventRecord)(ev, (CUstream)(uintptr_t)stream);
    if (r != CUDA_SUCCESS) {
        (void)DRV(c, cuEventDestroy)(ev);
        CUDA_LEAVE(c);
        return CUDA_FAIL(c, r, "cuEventRecord on stream 0x%llx", (unsigned long long)stream);
    }
    CUDA_LEAVE(c);
    *event = (uint64_t)(uintptr_t)ev;
    return ORTMEM_OK;
}

static ortmem_status cuda_event_query(void *self, uint64_t event)
{
    cuda_backend *c = self;
    CUDA_ENTER(c, "cuda event_query");
    CUresult r = DRV(c, cuEventQuery)((CUevent)(uintptr_t)event);
    CUDA_LEAVE(c);
    if (r == CUDA_SUCCESS)
        return ORTMEM_OK;
    if (r == CUDA_ERROR_NOT_READY)
        return OM_ERR(ORTMEM_E_BUSY, "cuda event 0x%llx is pending", (unsigned long long)event);
    return CUDA_FAIL(c, r, "cuEventQuery of event 0x%llx", (unsigned long long)event);
}

static ortmem_status cuda_event_destroy(void *self, uint64_t event)
{
    cuda_backend *c = self;
    CUDA_ENTER(c, "cuda event_destroy");
    CUresult r = DRV(c, cuEventDestroy)((CUevent)(uintptr_t)event);
    CUDA_LEAVE(c);
    if (r != CUDA_SUCCESS)
        return CUDA_FAIL(c, r, "cuEventDestroy of event 0x%llx", (unsigned long long)event);
    return ORTMEM_OK;
}

static void cuda_destroy(void *self)
{
    cuda_backend *c = self;
    if (c->ctx)
        (void)DRV(c, cuDevicePrimaryCtxRelease)(c->device);
    om_free(c);
}

static const ortmem_backend_ops cuda_ops = {
    .struct_size = sizeof(ortmem_backend_ops),
    .name = "cuda",
    .granularity = cuda_granularity,
    .reserve = cuda_reserve,
    .unreserve = cuda_unreserve,
    .create = cuda_create,
    .release = cuda_release,
    .map = cuda_map,
    .unmap = cuda_unmap,
    .set_access = cuda_set_access,
    .export_fd = cuda_export,
    .import_fd = cuda_import,
    .copy = cuda_copy,
    .destroy = cuda_destroy,
    .copy_async = cuda_copy_async,
    .memset_async = cuda_memset_async,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_destroy = cuda_event_destroy,
};

/* ---- loading ---- */

_Static_assert(sizeof(void *) == sizeof(ortmem_cuda_get_proc_address_fn),
               "function and object pointers must have one size (POSIX)");

/* Finds the resolver: the caller's, or libcuda.so.1's cuGetProcAddress_v2.
 * The library stays loaded for the life of the process (the driver is not
 * meant to be unloaded). */
static ortmem_status cuda_resolver(const ortmem_cuda_options *opt,
                                   ortmem_cuda_get_proc_address_fn *out)
{
    if (opt->get_proc_address) {
        *out = opt->get_proc_address;
        return ORTMEM_OK;
    }
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        return OM_ERR(ORTMEM_E_UNAVAILABLE,
                      "cuda backend unavailable: the CUDA driver could not be loaded: "
                      "dlopen(\"libcuda.so.1\") failed: %s",
                      why ? why : "no reason given");
    }
    (void)dlerror();
    void *sym = dlsym(lib, "cuGetProcAddress_v2");
    if (!sym) {
        const char *why = dlerror();
        return OM_ERR(ORTMEM_E_UNAVAILABLE,
                      "cuda backend unavailable: libcuda.so.1 has no cuGetProcAddress_v2 (a "
                      "driver older than CUDA 12.0): %s",
                      why ? why : "symbol not found");
    }
    memcpy(out, &sym, sizeof *out);
    return ORTMEM_OK;
}

static ortmem_status cuda_resolve(ortmem_cuda_get_proc_address_fn gpa, cuda_driver *d)
{
    memset(d, 0, sizeof *d);
    /* The error-text entry points first, so the others' failures can use them. */
    struct entry {
        const char *name;
        void *slot;
    } entries[] = {
#define CUDA_ENTRY(name, params) {#name, &d->p_##name},
        CUDA_ENTRY_POINTS(CUDA_ENTRY)
#undef CUDA_ENTRY
    };
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        void *fn = NULL;
        int symbol_status = 0;
        int r = gpa(entries[i].name, &fn, CUDA_ABI_VERSION, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                    &symbol_status);
        if (r != CUDA_SUCCESS || !fn) {
            if (r != CUDA_SUCCESS)
                return cuda_fail_d(d, ORTMEM_E_UNAVAILABLE, (CUresult)r,
                                   "cuda backend unavailable: cuGetProcAddress(\"%s\", %d)",
                                   entries[i].name, CUDA_ABI_VERSION);
            return OM_ERR(ORTMEM_E_UNAVAILABLE,
                          "cuda backend unavailable: the driver has no %s for CUDA %d "
                          "(cuGetProcAddress symbolStatus %d: %s)",
                          entries[i].name, CUDA_ABI_VERSION, symbol_status,
                          symbol_status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                              ? "version not sufficient"
                              : "symbol not found");
        }
        /* Each slot is a function pointer of the entry's own type. */
        memcpy(entries[i].slot, &fn, sizeof fn);
    }
    return ORTMEM_OK;
}

/* Initialises the driver, opens the device and retains its primary context. */
static ortmem_status cuda_open(cuda_backend *c, const ortmem_cuda_options *opt)
{
    CUresult r = DRV(c, cuInit)(0);
    if (r != CUDA_SUCCESS)
        return cuda_fail_d(&c->d, ORTMEM_E_UNAVAILABLE, r, "cuda backend unavailable: cuInit(0)");
    (void)DRV(c, cuDriverGetVersion)(&c->driver_version);
    int count = 0;
    r = DRV(c, cuDeviceGetCount)(&count);
    if (r != CUDA_SUCCESS)
        return cuda_fail_d(&c->d, ORTMEM_E_UNAVAILABLE, r,
                           "cuda backend unavailable: cuDeviceGetCount");
    if (count == 0)
        return OM_ERR(ORTMEM_E_UNAVAILABLE,
                      "cuda backend unavailable: the driver (version %d) reports no devices",
                      c->driver_version);
    if (opt->ordinal >= count)
        return OM_ERR(ORTMEM_E_RANGE,
                      "cuda backend create: device ordinal %d, but the driver has %d", opt->ordinal,
                      count);
    r = DRV(c, cuDeviceGet)(&c->device, opt->ordinal);
    if (r != CUDA_SUCCESS)
        return CUDA_FAIL(c, r, "cuda backend create: cuDeviceGet(%d)", opt->ordinal);
    if (DRV(c, cuDeviceGetName)(c->device_name, (int)sizeof c->device_name, c->device) !=
        CUDA_SUCCESS)
        snprintf(c->device_name, sizeof c->device_name, "device %d", opt->ordinal);
    int vmm = 0, fd = 0;
    r = DRV(c, cuDeviceGetAttribute)(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                     c->device);
    if (r != CUDA_SUCCESS)
        return CUDA_FAIL(c, r,
                         "cuda backend create: cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_"
                         "SUPPORTED) of device %d",
                         opt->ordinal);
    if (!vmm)
        return OM_ERR(ORTMEM_E_UNAVAILABLE,
                      "cuda backend unavailable: device %d (%s) does not support virtual memory "
                      "management",
                      opt->ordinal, c->device_name);
    r = DRV(c, cuDeviceGetAttribute)(
        &fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, c->device);
    c->fd_supported = r == CUDA_SUCCESS && fd != 0;
    if (opt->exportable == ORTMEM_CUDA_EXPORT_ALWAYS && !c->fd_supported)
        return OM_ERR(ORTMEM_E_UNSUPPORTED,
                      "cuda backend create: ORTMEM_CUDA_EXPORT_ALWAYS, but device %d (%s) "
                      "cannot export POSIX file descriptors",
                      opt->ordinal, c->device_name);
    r = DRV(c, cuDevicePrimaryCtxRetain)(&c->ctx, c->device);
    if (r != CUDA_SUCCESS) {
        c->ctx = NULL;
        return CUDA_FAIL(c, r, "cuda backend create: cuDevicePrimaryCtxRetain of device %d",
                         opt->ordinal);
    }
    return ORTMEM_OK;
}

/* Granularity: the largest over the handle types granules may be created
 * with, so that every granule size the seam sees is valid for both. */
static ortmem_status cuda_query_granularity(cuda_backend *c, const ortmem_cuda_options *opt)
{
    size_t minimum = 0, recommended = 0;
    for (int exportable = 0; exportable < 2; exportable++) {
        if (exportable && (!c->fd_supported || opt->exportable == ORTMEM_CUDA_EXPORT_NEVER))
            continue;
        CUmemAllocationProp prop = cuda_prop(c, exportable != 0);
        static const CUmemAllocationGranularity_flags which[2] = {
            CU_MEM_ALLOC_GRANULARITY_MINIMUM, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED};
        for (int k = 0; k < 2; k++) {
            size_t g = 0;
            CUDA_ENTER(c, "cuda backend create");
            CUresult r = DRV(c, cuMemGetAllocationGranularity)(&g, &prop, which[k]);
            CUDA_LEAVE(c);
            if (r != CUDA_SUCCESS)
                return CUDA_FAIL(c, r, "cuMemGetAllocationGranularity(%s%s) of device %d",
                                 k ? "RECOMMENDED" : "MINIMUM",
                                 exportable ? ", POSIX fd handle type" : "", c->ordinal);
            size_t *into = k ? &recommended : &minimum;
            if (g > *into)
                *into = g;
        }
    }
    if (!minimum || (minimum & (minimum - 1)) || !recommended || (recommended & (recommended - 1)))
        return OM_ERR(ORTMEM_E_BACKEND,
                      "cuda backend create: the driver reports granularity minimum %zu / "
                      "recommended %zu, not powers of two",
                      minimum, recommended);
    if (recommended < minimum)
        recommended = minimum;
    size_t granule = opt->granularity == ORTMEM_CUDA_GRANULE_MINIMUM ? minimum : recommended;
    if (opt->granule) {
        if (opt->granule < minimum)
            return OM_ERR(ORTMEM_E_INVALID,
                          "cuda backend create: granule %zu is below the driver's minimum "
                          "granularity %zu",
                          opt->granule, minimum);
        granule = opt->granule;
    }
    c->minimum = minimum;
    c->granule = granule;
    return ORTMEM_OK;
}

ortmem_status ortmem_cuda_backend_create(const ortmem_cuda_options *options, ortmem_backend **out)
{
    om_error_clear();
    if (!out)
        return OM_ERR(ORTMEM_E_INVALID, "cuda backend create: out is NULL");
    ortmem_cuda_options opt = ORTMEM_CUDA_OPTIONS_INIT;
    ortmem_status st = cuda_options(options, &opt);
    if (st != ORTMEM_OK)
        return st;
    ortmem_cuda_get_proc_address_fn gpa = NULL;
    st = cuda_resolver(&opt, &gpa);
    if (st != ORTMEM_OK)
        return st;
    cuda_backend *c = om_calloc(1, sizeof *c);
    if (!c)
        return OM_ERR(ORTMEM_E_NOMEM, "cuda backend create: bookkeeping");
    c->ordinal = opt.ordinal;
    c->export_mode = opt.exportable;
    st = cuda_resolve(gpa, &c->d);
    if (st == ORTMEM_OK)
        st = cuda_open(c, &opt);
    if (st == ORTMEM_OK)
        st = cuda_query_granularity(c, &opt);
    if (st == ORTMEM_OK)
        st = ortmem_backend_create(&cuda_ops, c, out);
    if (st != ORTMEM_OK)
        cuda_destroy(c);
    return st;
}

#endif /* ORTMEM_HAVE_CUDA_H */
