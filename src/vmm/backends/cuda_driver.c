/* CUDA backend: loading the driver and opening the device.
 *
 * libcuda.so.1 is opened at run time and every entry point is resolved through
 * cuGetProcAddress (CUDA 12+ signature, legacy default stream), so nothing here
 * links against the driver. Built with cuda.h (ORTMEM_HAVE_CUDA_H) this file
 * uses the header's types; built without it, ortmem_cuda_backend_create only
 * reports that the backend is unavailable. The primitives are in cuda.c. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ortmem/vmm.h>

#include "core/alloc.h"
#include "core/error.h"

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

#include <dlfcn.h>

#include "cuda_internal.h"

/* The ABI every entry point is resolved for: the CUDA 12.0 versions, which
 * every 12.x and 13.x driver still provides. */
#define CUDA_ABI_VERSION 12000

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

ortmem_status om_cuda_fail(const cuda_driver *d, ortmem_status status, CUresult r, const char *fmt,
                           ...)
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

/* ---- context binding ---- */

ortmem_status om_cuda_enter(cuda_backend *c, cuda_bind *bind, const char *what)
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
void om_cuda_leave(cuda_backend *c, const cuda_bind *bind)
{
    if (bind->swapped)
        (void)DRV(c, cuCtxSetCurrent)(bind->previous);
}

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
                return om_cuda_fail(d, ORTMEM_E_UNAVAILABLE, (CUresult)r,
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
        return om_cuda_fail(&c->d, ORTMEM_E_UNAVAILABLE, r, "cuda backend unavailable: cuInit(0)");
    (void)DRV(c, cuDriverGetVersion)(&c->driver_version);
    int count = 0;
    r = DRV(c, cuDeviceGetCount)(&count);
    if (r != CUDA_SUCCESS)
        return om_cuda_fail(&c->d, ORTMEM_E_UNAVAILABLE, r,
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
        st = ortmem_backend_create(om_cuda_ops, c, out);
    if (st != ORTMEM_OK)
        om_cuda_ops->destroy(c); /* releases what was opened, frees c */
    return st;
}

#endif /* ORTMEM_HAVE_CUDA_H */
