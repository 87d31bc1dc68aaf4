/* ortmem-ort: opening libonnxruntime at run time and ORT's statuses. */
#include <dlfcn.h>
#include <stdlib.h>

#include "ort_internal.h"

typedef const OrtApiBase *(*get_api_base_fn)(void);

struct ortmem_ort {
    void *library; /* never closed (ortmem_ort_close) */
    const OrtApi *api;
    const char *version;
};

ortmem_status ortmem_ort_open(const char *library_path, ortmem_ort **out)
{
    if (out == NULL)
        return ortmem_error_set(ORTMEM_E_INVALID, "ortmem_ort_open: out is NULL");
    const char *path = library_path != NULL ? library_path : "libonnxruntime.so";
    void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL)
        return ortmem_error_set(ORTMEM_E_UNAVAILABLE, "ortmem_ort_open: dlopen(%s): %s", path,
                                dlerror());
    get_api_base_fn get_base;
    *(void **)&get_base = dlsym(library, "OrtGetApiBase");
    if (get_base == NULL) {
        dlclose(library);
        return ortmem_error_set(ORTMEM_E_UNAVAILABLE, "ortmem_ort_open: %s has no OrtGetApiBase",
                                path);
    }
    const OrtApiBase *base = get_base();
    const char *version = base != NULL ? base->GetVersionString() : "?";
    const OrtApi *api = base != NULL ? base->GetApi(ORT_API_VERSION) : NULL;
    if (api == NULL) {
        dlclose(library);
        return ortmem_error_set(ORTMEM_E_UNAVAILABLE,
                                "ortmem_ort_open: ONNX Runtime %s (%s) does not serve API version "
                                "%d, which the adapter was built with",
                                version, path, ORT_API_VERSION);
    }
    ortmem_ort *ort = calloc(1, sizeof(*ort));
    if (ort == NULL) {
        dlclose(library);
        return ortmem_error_set(ORTMEM_E_NOMEM, "ortmem_ort_open: %zu bytes", sizeof(*ort));
    }
    ort->library = library;
    ort->api = api;
    ort->version = version;
    *out = ort;
    return ORTMEM_OK;
}

void ortmem_ort_close(ortmem_ort *ort)
{
    if (ort == NULL)
        return;
    /* The library stays loaded: ORT keeps process-wide state (its logging
     * manager, default allocators, thread pools) that unloading would strand,
     * and leak checkers can then name it in their stacks. */
    free(ort);
}

const OrtApi *ortmem_ort_api(const ortmem_ort *ort)
{
    return ort != NULL ? ort->api : NULL;
}

const char *ortmem_ort_version(const ortmem_ort *ort)
{
    return ort != NULL ? ort->version : "";
}

ortmem_status ortmem_ort_check(const ortmem_ort *ort, OrtStatus *status, const char *what)
{
    if (status == NULL)
        return ORTMEM_OK;
    const OrtApi *api = ort->api;
    ortmem_status st =
        ortmem_error_set(ORTMEM_E_BACKEND, "%s: ORT error code %d: %s", what,
                         (int)api->GetErrorCode(status), api->GetErrorMessage(status));
    api->ReleaseStatus(status);
    return st;
}

ortmem_status ort_device_of(const ortmem_ort *ort, const OrtMemoryInfo *info,
                            ortmem_device_kind *kind, int *ordinal)
{
    const char *name = NULL;
    ortmem_status st =
        ortmem_ort_check(ort, ort->api->MemoryInfoGetName(info, &name), "MemoryInfoGetName");
    if (st != ORTMEM_OK)
        return st;
    st = ortmem_ort_check(ort, ort->api->MemoryInfoGetId(info, ordinal), "MemoryInfoGetId");
    if (st != ORTMEM_OK)
        return st;
    if (strcmp(name, ORT_CPU_NAME) == 0)
        *kind = ORTMEM_DEVICE_CPU;
    else if (strcmp(name, ORT_CUDA_NAME) == 0)
        *kind = ORTMEM_DEVICE_CUDA;
    else
        return ortmem_error_set(ORTMEM_E_UNSUPPORTED,
                                "memory info '%s': the adapter knows \"%s\" and \"%s\"", name,
                                ORT_CPU_NAME, ORT_CUDA_NAME);
    return ORTMEM_OK;
}

ortmem_status ort_check_backend(ortmem_authority *authority, ortmem_device_kind kind,
                                const char *what)
{
    const char *backend = ortmem_backend_name(ortmem_authority_backend(authority));
    int is_cuda = backend != NULL && strstr(backend, "cuda") != NULL;
    if (is_cuda != (kind == ORTMEM_DEVICE_CUDA))
        return ortmem_error_set(ORTMEM_E_INVALID,
                                "%s: the memory info names %s memory but the authority's backend "
                                "is '%s'",
                                what, kind == ORTMEM_DEVICE_CUDA ? "CUDA" : "CPU",
                                backend != NULL ? backend : "?");
    return ORTMEM_OK;
}
