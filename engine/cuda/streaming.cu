// Pinned host memory and streams for a model's streamed layers (gpu.h,
// "Layers streamed under a device budget").
#include <new>

#include "cuda/context_impl.h"

namespace
{

ortmem_status host_register(void *, void *ptr, size_t bytes)
{
    return cudaHostRegister(ptr, bytes, cudaHostRegisterDefault) == cudaSuccess ? ORTMEM_OK
                                                                                : ORTMEM_E_BACKEND;
}

void host_unregister(void *, void *ptr, size_t)
{
    cudaHostUnregister(ptr);
}

void streaming_free(eng_gpu_streaming *s)
{
    if (s->staging)
        ortmem_staging_destroy(s->staging);
    if (s->copy)
        cudaStreamDestroy(s->copy);
    if (s->compute)
        cudaStreamDestroy(s->compute);
    delete s;
}

} // namespace

extern "C" {

ortmem_status eng_gpu_streaming_create(eng_gpu_streaming **out, eng_error *err)
{
    if (!out)
        return eng_fail(err, ORTMEM_E_INVALID, "streaming: no result pointer");
    eng_gpu_streaming *s = new (std::nothrow) eng_gpu_streaming();
    if (!s)
        return eng_fail(err, ORTMEM_E_NOMEM, "streaming: no memory");
    cudaError_t e = cudaStreamCreateWithFlags(&s->copy, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&s->compute, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        streaming_free(s);
        return eng_gpu_cuda_fail(err, e, "the streaming's streams");
    }
    ortmem_staging_options so = ORTMEM_STAGING_OPTIONS_INIT;
    so.host_register = host_register;
    so.host_unregister = host_unregister;
    ortmem_status st = ortmem_staging_create(&so, &s->staging);
    if (st != ORTMEM_OK) {
        s->staging = nullptr;
        streaming_free(s);
        return eng_from_ortmem(err, st, "the pinned staging for streamed layers");
    }
    *out = s;
    return ORTMEM_OK;
}

void eng_gpu_streaming_model_options(const eng_gpu_streaming *s, eng_model_options *mo)
{
    mo->staging = s->staging;
    mo->copy_stream = (uint64_t)(uintptr_t)s->copy;
    mo->compute_stream = (uint64_t)(uintptr_t)s->compute;
    mo->ring_slots = 2;
}

ortmem_status eng_gpu_streaming_bandwidth(eng_gpu_streaming *s, size_t bytes, double *gb_per_s,
                                          eng_error *err)
{
    void *host = nullptr, *device = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    float best_ms = 0.0f;
    cudaError_t e = cudaMallocHost(&host, bytes);
    if (e == cudaSuccess)
        e = cudaMalloc(&device, bytes);
    if (e == cudaSuccess)
        e = cudaEventCreate(&start);
    if (e == cudaSuccess)
        e = cudaEventCreate(&stop);
    for (int i = 0; i < 8 && e == cudaSuccess; i++) {
        float ms = 0.0f;
        if ((e = cudaEventRecord(start, s->copy)) == cudaSuccess &&
            (e = cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, s->copy)) ==
                cudaSuccess &&
            (e = cudaEventRecord(stop, s->copy)) == cudaSuccess &&
            (e = cudaEventSynchronize(stop)) == cudaSuccess &&
            (e = cudaEventElapsedTime(&ms, start, stop)) == cudaSuccess)
            best_ms = i == 0 || ms < best_ms ? ms : best_ms;
    }
    if (stop)
        cudaEventDestroy(stop);
    if (start)
        cudaEventDestroy(start);
    cudaFree(device);
    cudaFreeHost(host);
    if (e != cudaSuccess)
        return eng_gpu_cuda_fail(err, e, "measuring the pinned copy bandwidth");
    *gb_per_s = best_ms > 0.0f ? (double)bytes / (best_ms * 1e-3) / 1e9 : 0.0;
    return ORTMEM_OK;
}

ortmem_status eng_gpu_streaming_destroy(eng_gpu_streaming *s, eng_error *err)
{
    if (!s)
        return ORTMEM_OK;
    if (s->in_use)
        return eng_fail(err, ORTMEM_E_BUSY, "streaming: a GPU context still computes on it");
    ortmem_staging_stats ss = {};
    ss.struct_size = sizeof ss;
    if (ortmem_staging_stats_get(s->staging, &ss) == ORTMEM_OK && ss.allocations)
        return eng_fail(err, ORTMEM_E_BUSY,
                        "streaming: %llu pinned allocations are live (destroy the model first)",
                        (unsigned long long)ss.allocations);
    streaming_free(s);
    return ORTMEM_OK;
}

} // extern "C"
