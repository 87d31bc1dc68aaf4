/* Shared by the GPU suite's C programs: the CUDA backend under test and a few
 * raw driver entry points for checks that must bypass ortmem.
 *
 * Both come from the real driver (libcuda.so.1 through cuGetProcAddress,
 * opened at run time like the backend does), or, with ORTMEM_GPU_FAKE=1 in
 * the environment, from the test double in fake_cuda.h, so the suite's own
 * logic can be exercised on a machine without a GPU. */
#ifndef ORTMEM_TESTS_GPU_SUPPORT_H
#define ORTMEM_TESTS_GPU_SUPPORT_H

#include <dlfcn.h>
#include <ortmem/ortmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"

static inline int gpu_faked(void)
{
    const char *v = getenv("ORTMEM_GPU_FAKE");
    return v && v[0] == '1';
}

/* The resolver to hand the backend: NULL (the real driver) or the fake. */
static inline ortmem_cuda_get_proc_address_fn gpu_resolver(void)
{
    if (gpu_faked()) {
        static int reset;
        if (!reset) {
            fake_reset();
            reset = 1;
        }
        return fake_get_proc_address;
    }
    return NULL;
}

/* Creates the CUDA backend on device 0 with o (get_proc_address is filled). */
static inline ortmem_status gpu_backend_create(ortmem_cuda_options o, ortmem_backend **out)
{
    o.get_proc_address = gpu_resolver();
    return ortmem_cuda_backend_create(&o, out);
}

/* Raw driver entry points, in plain C types (the driver ABI). */
typedef struct gpu_raw {
    int (*cuGetErrorName)(int, const char **);
    int (*cuDevicePrimaryCtxRetain)(void **, int);
    int (*cuDevicePrimaryCtxRelease)(int);
    int (*cuCtxSetCurrent)(void *);
    int (*cuCtxSynchronize)(void);
    int (*cuMemcpyHtoD)(unsigned long long, const void *, size_t);
    int (*cuMemcpyDtoH)(void *, unsigned long long, size_t);
    int (*cuMemSetAccess)(unsigned long long, size_t, const fk_access_desc *, size_t);
    void *ctx;
} gpu_raw;

/* Resolves the raw entry points and makes device 0's primary context current
 * on the calling thread. Returns 0, or -1 with why filled. */
static inline int gpu_raw_open(gpu_raw *raw, char *why, size_t why_len)
{
    memset(raw, 0, sizeof *raw);
    ortmem_cuda_get_proc_address_fn gpa = gpu_resolver();
    if (!gpa) {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            snprintf(why, why_len, "dlopen(libcuda.so.1): %s", dlerror());
            return -1;
        }
        void *sym = dlsym(lib, "cuGetProcAddress_v2");
        if (!sym) {
            snprintf(why, why_len, "no cuGetProcAddress_v2 in libcuda.so.1");
            return -1;
        }
        memcpy(&gpa, &sym, sizeof gpa);
    }
    struct {
        const char *name;
        void *slot;
    } entries[] = {
        {"cuGetErrorName", &raw->cuGetErrorName},
        {"cuDevicePrimaryCtxRetain", &raw->cuDevicePrimaryCtxRetain},
        {"cuDevicePrimaryCtxRelease", &raw->cuDevicePrimaryCtxRelease},
        {"cuCtxSetCurrent", &raw->cuCtxSetCurrent},
        {"cuCtxSynchronize", &raw->cuCtxSynchronize},
        {"cuMemcpyHtoD", &raw->cuMemcpyHtoD},
        {"cuMemcpyDtoH", &raw->cuMemcpyDtoH},
        {"cuMemSetAccess", &raw->cuMemSetAccess},
    };
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        void *fn = NULL;
        int status = 0;
        int r = gpa(entries[i].name, &fn, 12000, 1 /* legacy stream */, &status);
        if (r != 0 || !fn) {
            snprintf(why, why_len, "cuGetProcAddress(%s) -> %d (symbol status %d)", entries[i].name,
                     r, status);
            return -1;
        }
        memcpy(entries[i].slot, &fn, sizeof fn);
    }
    int r = raw->cuDevicePrimaryCtxRetain(&raw->ctx, 0);
    if (r == 0)
        r = raw->cuCtxSetCurrent(raw->ctx);
    if (r != 0) {
        snprintf(why, why_len, "primary context of device 0: CUresult %d", r);
        return -1;
    }
    return 0;
}

static inline const char *gpu_raw_error(const gpu_raw *raw, int r)
{
    const char *name = NULL;
    if (raw->cuGetErrorName)
        raw->cuGetErrorName(r, &name);
    return name ? name : "unknown CUresult";
}

#endif
