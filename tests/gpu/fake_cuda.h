/* A test double of the CUDA driver, reached through ortmem_cuda_options'
 * get_proc_address, so the CUDA backend's code runs on machines with no GPU.
 *
 * "Device memory" is host memory with the driver's rules: VA from
 * mmap(PROT_NONE), physical allocations are memfds, cuMemMap maps one with no
 * access, cuMemSetAccess is mprotect, cuMemUnmap puts PROT_NONE back. Every
 * memory call checks that the fake primary context is current on the calling
 * thread (CUDA_ERROR_INVALID_CONTEXT otherwise), so a missing context bind in
 * the backend fails here the way it fails on a GPU. Copies refuse to write
 * into a read-only mapping (CUDA_ERROR_ILLEGAL_ADDRESS) instead of faulting.
 * Counters say how often each call was made and what is still live.
 *
 * Header-only, for one translation unit per executable; no cuda.h needed
 * (the types mirror the driver ABI: CUresult, enums and CUdevice are int,
 * CUdeviceptr and allocation handles are unsigned long long, the rest are
 * pointers). Single-threaded state except the per-thread current context. */
#ifndef ORTMEM_TESTS_FAKE_CUDA_H
#define ORTMEM_TESTS_FAKE_CUDA_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
    FK_SUCCESS = 0,
    FK_INVALID_VALUE = 1,
    FK_OUT_OF_MEMORY = 2,
    FK_NO_DEVICE = 100,
    FK_INVALID_DEVICE = 101,
    FK_INVALID_CONTEXT = 201,
    FK_ILLEGAL_ADDRESS = 700,
    FK_NOT_READY = 600,
    FK_NOT_SUPPORTED = 801,
    FK_UNKNOWN = 999,
};

typedef struct fk_location {
    int type; /* 1 = device */
    int id;
} fk_location;

typedef struct fk_prop {
    int type;                 /* 1 = pinned */
    int requestedHandleTypes; /* 1 = POSIX fd */
    fk_location location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} fk_prop;

typedef struct fk_access_desc {
    fk_location location;
    int flags; /* 0 none, 1 read, 3 read-write */
} fk_access_desc;

/* Live allocations and events stay linked from globals, like a driver that
 * frees them at exit: the ones a test leaks on purpose (quarantine) are not
 * leaks to LeakSanitizer. */
typedef struct fk_alloc {
    int fd;
    size_t size;
    int handle_types;
    struct fk_alloc *prev, *next;
} fk_alloc;

typedef struct fk_event {
    uint64_t generation; /* pending while > fake.completed */
    struct fk_event *prev, *next;
} fk_event;

static fk_alloc *fk_allocs;
static fk_event *fk_events;

#define FK_LINK(head, x)                                                                           \
    do {                                                                                           \
        (x)->prev = NULL;                                                                          \
        (x)->next = (head);                                                                        \
        if (head)                                                                                  \
            (head)->prev = (x);                                                                    \
        (head) = (x);                                                                              \
    } while (0)

#define FK_UNLINK(head, x)                                                                         \
    do {                                                                                           \
        if ((x)->prev)                                                                             \
            (x)->prev->next = (x)->next;                                                           \
        else                                                                                       \
            (head) = (x)->next;                                                                    \
        if ((x)->next)                                                                             \
            (x)->next->prev = (x)->prev;                                                           \
    } while (0)

#define FK_MAX_RANGES 65536
#define FK_MAX_MAPPINGS 65536

/* A live cuMemMap: the driver maps a handle whole and unmaps whole mappings. */
typedef struct fk_mapping {
    uintptr_t va;
    size_t size;
} fk_mapping;

/* Access set over mapped ranges, so copies can refuse read-only targets. */
typedef struct fk_range {
    uintptr_t va;
    size_t size;
    int flags;
} fk_range;

static struct fk_state {
    /* configuration */
    int init_result;
    int device_count;
    int vmm_supported;
    int fd_supported;
    size_t granularity_min, granularity_rec;
    const char *missing_symbol; /* cuGetProcAddress answers NULL for it */
    const char *fail_call;      /* this entry point fails ... */
    int fail_code;              /* ... with this CUresult ... */
    int fail_after;             /* ... after this many successful calls of it */
    int hold_events;            /* events recorded now stay pending */
    /* observation */
    int primary_retains;
    unsigned long creates, releases, maps, unmaps, set_access_calls, reserves, frees;
    unsigned long copies, async_copies, memsets, events_created, events_destroyed;
    unsigned long imports, exports, ctx_sets, syncs;
    long live_allocs, live_events;
    int last_access_flags;
    int last_create_handle_types;
    uint64_t generation, completed;
    fk_range ranges[FK_MAX_RANGES];
    size_t range_count;
    fk_mapping mappings[FK_MAX_MAPPINGS];
    size_t mapping_count;
    unsigned long refused_partial_maps, refused_cut_unmaps;
    int fail_counter;
} fake;

static int fk_primary_object;  /* its address is the fake primary context */
static int fk_foreign_context; /* a context the engine might have current */
static _Thread_local void *fk_current;

static inline void fake_reset(void)
{
    memset(&fake, 0, sizeof fake);
    fake.device_count = 1;
    fake.vmm_supported = 1;
    fake.fd_supported = 1;
    fake.granularity_min = 64 * 1024;
    fake.granularity_rec = 128 * 1024;
    fk_current = NULL;
}

static inline void *fake_primary_context(void)
{
    return &fk_primary_object;
}

static inline void *fake_foreign_context(void)
{
    return &fk_foreign_context;
}

static inline void *fake_current_context(void)
{
    return fk_current;
}

static inline void fake_set_current_context(void *ctx)
{
    fk_current = ctx;
}

/* Completes every event recorded so far. */
static inline void fake_complete_events(void)
{
    fake.completed = fake.generation;
}

static int fk_should_fail(const char *call)
{
    if (!fake.fail_call || strcmp(fake.fail_call, call) != 0)
        return 0;
    if (fake.fail_counter++ < fake.fail_after)
        return 0;
    return 1;
}

#define FK_ENTER(call, needs_ctx)                                                                  \
    do {                                                                                           \
        if (fk_should_fail(call))                                                                  \
            return fake.fail_code;                                                                 \
        if ((needs_ctx) && fk_current != &fk_primary_object)                                       \
            return FK_INVALID_CONTEXT;                                                             \
    } while (0)

/* Records the access of [va, +size): 1 read, 3 read-write, 0 mapped or
 * unmapped without access, -1 no longer device memory. Newest wins. */
static void fk_range_set(uintptr_t va, size_t size, int flags)
{
    /* Drop ranges the new one covers, then add it. */
    size_t w = 0;
    for (size_t i = 0; i < fake.range_count; i++) {
        fk_range r = fake.ranges[i];
        if (r.va >= va && r.va + r.size <= va + size)
            continue;
        fake.ranges[w++] = r;
    }
    fake.range_count = w;
    if (fake.range_count < FK_MAX_RANGES)
        fake.ranges[fake.range_count++] = (fk_range){va, size, flags};
}

/* Whether [va, +size) cuts a live mapping (overlaps it without holding it
 * whole); with drop, removes the mappings it holds. */
static int fk_mappings_cut(uintptr_t va, size_t size, int drop)
{
    for (size_t i = 0; i < fake.mapping_count; i++) {
        fk_mapping m = fake.mappings[i];
        int overlaps = m.va < va + size && va < m.va + m.size;
        if (overlaps && (m.va < va || m.va + m.size > va + size))
            return 1;
    }
    if (!drop)
        return 0;
    size_t w = 0;
    for (size_t i = 0; i < fake.mapping_count; i++) {
        fk_mapping m = fake.mappings[i];
        if (m.va >= va && m.va + m.size <= va + size)
            continue;
        fake.mappings[w++] = m;
    }
    fake.mapping_count = w;
    return 0;
}

/* Flags of the newest range holding va; -1 (host memory) when none. */
static int fk_range_flags(uintptr_t va)
{
    for (size_t i = fake.range_count; i-- > 0;) {
        if (va >= fake.ranges[i].va && va < fake.ranges[i].va + fake.ranges[i].size)
            return fake.ranges[i].flags;
    }
    return -1; /* not device memory: host memory, always accessible */
}

static int fk_writable(uintptr_t dst, size_t size)
{
    for (size_t off = 0; off < size; off += 4096) {
        int f = fk_range_flags(dst + off);
        if (f == 0 || f == 1)
            return 0;
    }
    int f = fk_range_flags(dst + size - 1);
    return f != 0 && f != 1;
}

/* ---- entry points ---- */

static int fk_cuGetErrorName(int r, const char **s)
{
    switch (r) {
    case FK_SUCCESS: *s = "CUDA_SUCCESS"; return 0;
    case FK_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; return 0;
    case FK_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
    case FK_NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; return 0;
    case FK_INVALID_DEVICE: *s = "CUDA_ERROR_INVALID_DEVICE"; return 0;
    case FK_INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; return 0;
    case FK_ILLEGAL_ADDRESS: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; return 0;
    case FK_NOT_READY: *s = "CUDA_ERROR_NOT_READY"; return 0;
    case FK_NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; return 0;
    case FK_UNKNOWN: *s = "CUDA_ERROR_UNKNOWN"; return 0;
    default: *s = NULL; return FK_INVALID_VALUE;
    }
}

static int fk_cuGetErrorString(int r, const char **s)
{
    switch (r) {
    case FK_OUT_OF_MEMORY: *s = "out of memory"; return 0;
    case FK_NO_DEVICE: *s = "no CUDA-capable device is detected"; return 0;
    case FK_INVALID_CONTEXT: *s = "invalid device context"; return 0;
    default: *s = "fake driver error"; return 0;
    }
}

static int fk_cuInit(unsigned flags)
{
    (void)flags;
    if (fk_should_fail("cuInit"))
        return fake.fail_code;
    return fake.init_result;
}

static int fk_cuDriverGetVersion(int *v)
{
    *v = 13000;
    return 0;
}

static int fk_cuDeviceGetCount(int *n)
{
    FK_ENTER("cuDeviceGetCount", 0);
    *n = fake.device_count;
    return 0;
}

static int fk_cuDeviceGet(int *dev, int ordinal)
{
    FK_ENTER("cuDeviceGet", 0);
    if (ordinal < 0 || ordinal >= fake.device_count)
        return FK_INVALID_DEVICE;
    *dev = ordinal;
    return 0;
}

static int fk_cuDeviceGetName(char *name, int len, int dev)
{
    (void)dev;
    strncpy(name, "Fake GPU", (size_t)len);
    name[len - 1] = '\0';
    return 0;
}

static int fk_cuDeviceGetAttribute(int *v, int attr, int dev)
{
    (void)dev;
    FK_ENTER("cuDeviceGetAttribute", 0);
    *v = attr == 102 ? fake.vmm_supported : attr == 103 ? fake.fd_supported : 0;
    return 0;
}

static int fk_cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
    (void)dev;
    FK_ENTER("cuDevicePrimaryCtxRetain", 0);
    fake.primary_retains++;
    *ctx = &fk_primary_object;
    return 0;
}

static int fk_cuDevicePrimaryCtxRelease(int dev)
{
    (void)dev;
    fake.primary_retains--;
    return 0;
}

static int fk_cuCtxGetCurrent(void **ctx)
{
    *ctx = fk_current;
    return 0;
}

static int fk_cuCtxSetCurrent(void *ctx)
{
    FK_ENTER("cuCtxSetCurrent", 0);
    fake.ctx_sets++;
    fk_current = ctx;
    return 0;
}

static int fk_cuMemGetAllocationGranularity(size_t *g, const fk_prop *prop, int option)
{
    FK_ENTER("cuMemGetAllocationGranularity", 0);
    if (prop->type != 1 || prop->location.type != 1)
        return FK_INVALID_VALUE;
    *g = option == 1 ? fake.granularity_rec : fake.granularity_min;
    return 0;
}

static int fk_cuMemAddressReserve(unsigned long long *ptr, size_t size, size_t align,
                                  unsigned long long addr, unsigned long long flags)
{
    (void)addr;
    (void)flags;
    FK_ENTER("cuMemAddressReserve", 1);
    if (!size || size % fake.granularity_min)
        return FK_INVALID_VALUE;
    if (align < fake.granularity_min)
        align = fake.granularity_min;
    size_t span = size + align;
    void *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return FK_OUT_OF_MEMORY;
    uintptr_t start = (uintptr_t)p, aligned = (start + align - 1) & ~(uintptr_t)(align - 1);
    if (aligned > start)
        munmap(p, aligned - start);
    if (start + span > aligned + size)
        munmap((void *)(aligned + size), start + span - (aligned + size));
    fake.reserves++;
    *ptr = aligned;
    return 0;
}

static int fk_cuMemAddressFree(unsigned long long ptr, size_t size)
{
    FK_ENTER("cuMemAddressFree", 1);
    munmap((void *)(uintptr_t)ptr, size);
    fk_range_set((uintptr_t)ptr, size, -1);
    fake.frees++;
    return 0;
}

static int fk_cuMemCreate(unsigned long long *handle, size_t size, const fk_prop *prop,
                          unsigned long long flags)
{
    (void)flags;
    FK_ENTER("cuMemCreate", 1);
    if (!size || size % fake.granularity_min || prop->type != 1 || prop->location.type != 1)
        return FK_INVALID_VALUE;
    if ((prop->requestedHandleTypes & 1) && !fake.fd_supported)
        return FK_NOT_SUPPORTED;
    fk_alloc *a = calloc(1, sizeof *a);
    if (!a)
        return FK_OUT_OF_MEMORY;
    a->fd = memfd_create("fake-cuda", MFD_CLOEXEC);
    if (a->fd < 0 || ftruncate(a->fd, (off_t)size) != 0) {
        if (a->fd >= 0)
            close(a->fd);
        free(a);
        return FK_OUT_OF_MEMORY;
    }
    a->size = size;
    a->handle_types = prop->requestedHandleTypes;
    fake.last_create_handle_types = prop->requestedHandleTypes;
    fake.creates++;
    fake.live_allocs++;
    FK_LINK(fk_allocs, a);
    *handle = (unsigned long long)(uintptr_t)a;
    return 0;
}

static int fk_cuMemRelease(unsigned long long handle)
{
    FK_ENTER("cuMemRelease", 1);
    fk_alloc *a = (fk_alloc *)(uintptr_t)handle;
    FK_UNLINK(fk_allocs, a);
    close(a->fd);
    free(a);
    fake.releases++;
    fake.live_allocs--;
    return 0;
}

static int fk_cuMemMap(unsigned long long ptr, size_t size, size_t offset,
                       unsigned long long handle, unsigned long long flags)
{
    (void)flags;
    FK_ENTER("cuMemMap", 1);
    fk_alloc *a = (fk_alloc *)(uintptr_t)handle;
    /* As the driver: a handle is mapped whole, from offset 0. */
    if (offset != 0 || size != a->size) {
        fake.refused_partial_maps++;
        return FK_INVALID_VALUE;
    }
    if (fake.mapping_count == FK_MAX_MAPPINGS)
        return FK_OUT_OF_MEMORY;
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd, 0);
    if (p == MAP_FAILED)
        return FK_INVALID_VALUE;
    fake.mappings[fake.mapping_count++] = (fk_mapping){(uintptr_t)ptr, size};
    fk_range_set((uintptr_t)ptr, size, 0);
    fake.maps++;
    return 0;
}

static int fk_cuMemUnmap(unsigned long long ptr, size_t size)
{
    FK_ENTER("cuMemUnmap", 1);
    /* As the driver: an unmap covers whole mappings (several are fine). */
    if (fk_mappings_cut((uintptr_t)ptr, size, 0)) {
        fake.refused_cut_unmaps++;
        return FK_INVALID_VALUE;
    }
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED)
        return FK_INVALID_VALUE;
    (void)fk_mappings_cut((uintptr_t)ptr, size, 1);
    fk_range_set((uintptr_t)ptr, size, 0);
    fake.unmaps++;
    return 0;
}

static int fk_cuMemSetAccess(unsigned long long ptr, size_t size, const fk_access_desc *desc,
                             size_t count)
{
    FK_ENTER("cuMemSetAccess", 1);
    if (count != 1 || desc->location.type != 1 || desc->location.id != 0)
        return FK_INVALID_VALUE;
    int prot = desc->flags == 3 ? PROT_READ | PROT_WRITE : desc->flags == 1 ? PROT_READ : -1;
    if (prot < 0)
        return FK_INVALID_VALUE; /* the backend must never ask for PROT_NONE */
    if (mprotect((void *)(uintptr_t)ptr, size, prot) != 0)
        return FK_INVALID_VALUE;
    fk_range_set((uintptr_t)ptr, size, desc->flags);
    fake.last_access_flags = desc->flags;
    fake.set_access_calls++;
    return 0;
}

static int fk_cuMemGetAllocationPropertiesFromHandle(fk_prop *prop, unsigned long long handle)
{
    FK_ENTER("cuMemGetAllocationPropertiesFromHandle", 0);
    fk_alloc *a = (fk_alloc *)(uintptr_t)handle;
    memset(prop, 0, sizeof *prop);
    prop->type = 1;
    prop->location.type = 1;
    prop->requestedHandleTypes = a->handle_types;
    return 0;
}

static int fk_cuMemExportToShareableHandle(void *out, unsigned long long handle, int type,
                                           unsigned long long flags)
{
    (void)flags;
    FK_ENTER("cuMemExportToShareableHandle", 1);
    fk_alloc *a = (fk_alloc *)(uintptr_t)handle;
    if (type != 1 || !(a->handle_types & 1))
        return FK_INVALID_VALUE;
    int fd = dup(a->fd);
    if (fd < 0)
        return FK_OUT_OF_MEMORY;
    memcpy(out, &fd, sizeof fd);
    fake.exports++;
    return 0;
}

static int fk_cuMemImportFromShareableHandle(unsigned long long *handle, void *os, int type)
{
    FK_ENTER("cuMemImportFromShareableHandle", 1);
    int fd = (int)(intptr_t)os;
    struct stat st;
    if (type != 1 || fstat(fd, &st) != 0)
        return FK_INVALID_VALUE;
    fk_alloc *a = calloc(1, sizeof *a);
    if (!a)
        return FK_OUT_OF_MEMORY;
    a->fd = dup(fd);
    a->size = (size_t)st.st_size;
    a->handle_types = 1;
    fake.imports++;
    fake.live_allocs++;
    FK_LINK(fk_allocs, a);
    *handle = (unsigned long long)(uintptr_t)a;
    return 0;
}

static int fk_copy(unsigned long long dst, unsigned long long src, size_t n)
{
    if (!fk_writable((uintptr_t)dst, n))
        return FK_ILLEGAL_ADDRESS;
    int sf = fk_range_flags((uintptr_t)src);
    if (sf == 0)
        return FK_ILLEGAL_ADDRESS;
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return 0;
}

static int fk_cuMemcpy(unsigned long long dst, unsigned long long src, size_t n)
{
    FK_ENTER("cuMemcpy", 1);
    fake.copies++;
    return fk_copy(dst, src, n);
}

static int fk_cuMemcpyAsync(unsigned long long dst, unsigned long long src, size_t n, void *stream)
{
    (void)stream;
    FK_ENTER("cuMemcpyAsync", 1);
    fake.async_copies++;
    return fk_copy(dst, src, n);
}

static int fk_cuMemsetD8Async(unsigned long long dst, unsigned char v, size_t n, void *stream)
{
    (void)stream;
    FK_ENTER("cuMemsetD8Async", 1);
    if (!fk_writable((uintptr_t)dst, n))
        return FK_ILLEGAL_ADDRESS;
    memset((void *)(uintptr_t)dst, v, n);
    fake.memsets++;
    return 0;
}

static int fk_cuMemcpyHtoD(unsigned long long dst, const void *src, size_t n)
{
    FK_ENTER("cuMemcpyHtoD", 1);
    fake.copies++;
    return fk_copy(dst, (unsigned long long)(uintptr_t)src, n);
}

static int fk_cuMemcpyDtoH(void *dst, unsigned long long src, size_t n)
{
    FK_ENTER("cuMemcpyDtoH", 1);
    fake.copies++;
    return fk_copy((unsigned long long)(uintptr_t)dst, src, n);
}

static int fk_cuStreamSynchronize(void *stream)
{
    (void)stream;
    FK_ENTER("cuStreamSynchronize", 1);
    fake.syncs++;
    return 0;
}

static int fk_cuCtxSynchronize(void)
{
    FK_ENTER("cuCtxSynchronize", 1);
    return 0;
}

static int fk_cuEventCreate(void **ev, unsigned flags)
{
    FK_ENTER("cuEventCreate", 1);
    if (flags != 2) /* CU_EVENT_DISABLE_TIMING */
        return FK_INVALID_VALUE;
    fk_event *e = calloc(1, sizeof *e);
    if (!e)
        return FK_OUT_OF_MEMORY;
    fake.events_created++;
    fake.live_events++;
    FK_LINK(fk_events, e);
    *ev = e;
    return 0;
}

static int fk_cuEventRecord(void *ev, void *stream)
{
    (void)stream;
    FK_ENTER("cuEventRecord", 1);
    fk_event *e = ev;
    e->generation = fake.hold_events ? ++fake.generation : 0;
    return 0;
}

static int fk_cuEventQuery(void *ev)
{
    FK_ENTER("cuEventQuery", 1);
    fk_event *e = ev;
    return e->generation > fake.completed ? FK_NOT_READY : 0;
}

static int fk_cuEventDestroy(void *ev)
{
    FK_ENTER("cuEventDestroy", 1);
    fk_event *e = ev;
    FK_UNLINK(fk_events, e);
    free(e);
    fake.events_destroyed++;
    fake.live_events--;
    return 0;
}

/* The resolver handed to ortmem_cuda_options.get_proc_address. */
static inline int fake_get_proc_address(const char *symbol, void **pfn, int cuda_version,
                                        uint64_t flags, int *status)
{
    (void)flags;
    *pfn = NULL;
    if (status)
        *status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
    if (cuda_version < 12000)
        return FK_INVALID_VALUE;
    if (fake.missing_symbol && strcmp(symbol, fake.missing_symbol) == 0)
        return 0;
#define FK_SYM(name)                                                                               \
    if (strcmp(symbol, #name) == 0) {                                                              \
        void (*fn_)(void) = (void (*)(void))fk_##name;                                             \
        memcpy(pfn, &fn_, sizeof fn_);                                                             \
        if (status)                                                                                \
            *status = 0;                                                                           \
        return 0;                                                                                  \
    }
    FK_SYM(cuGetErrorName)
    FK_SYM(cuGetErrorString)
    FK_SYM(cuInit)
    FK_SYM(cuDriverGetVersion)
    FK_SYM(cuDeviceGetCount)
    FK_SYM(cuDeviceGet)
    FK_SYM(cuDeviceGetName)
    FK_SYM(cuDeviceGetAttribute)
    FK_SYM(cuDevicePrimaryCtxRetain)
    FK_SYM(cuDevicePrimaryCtxRelease)
    FK_SYM(cuCtxGetCurrent)
    FK_SYM(cuCtxSetCurrent)
    FK_SYM(cuMemGetAllocationGranularity)
    FK_SYM(cuMemAddressReserve)
    FK_SYM(cuMemAddressFree)
    FK_SYM(cuMemCreate)
    FK_SYM(cuMemRelease)
    FK_SYM(cuMemMap)
    FK_SYM(cuMemUnmap)
    FK_SYM(cuMemSetAccess)
    FK_SYM(cuMemGetAllocationPropertiesFromHandle)
    FK_SYM(cuMemExportToShareableHandle)
    FK_SYM(cuMemImportFromShareableHandle)
    FK_SYM(cuMemcpy)
    FK_SYM(cuMemcpyHtoD)
    FK_SYM(cuMemcpyDtoH)
    FK_SYM(cuCtxSynchronize)
    FK_SYM(cuStreamSynchronize)
    FK_SYM(cuMemcpyAsync)
    FK_SYM(cuMemsetD8Async)
    FK_SYM(cuEventCreate)
    FK_SYM(cuEventRecord)
    FK_SYM(cuEventQuery)
    FK_SYM(cuEventDestroy)
#undef FK_SYM
    return 0;
}

#endif
