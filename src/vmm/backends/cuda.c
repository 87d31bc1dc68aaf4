/* CUDA backend: the driver's virtual memory management on one device.
 *
 * The primitives over the driver that cuda_driver.c loaded. Context: the
 * device's primary context is retained at creation. Each primitive binds it on
 * the calling thread for the driver calls it makes and restores whatever
 * context the thread had before, so the engine's own binding is left as it
 * was and any thread may call. Built only with cuda.h (src/meson.build). */
#include <fcntl.h>
#include <stdint.h>
#include <string.h>

#include <ortmem/vmm.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/gate.h"
#include "cuda_internal.h"

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

const ortmem_backend_ops *const om_cuda_ops = &cuda_ops;
