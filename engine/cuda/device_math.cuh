// Device arithmetic the forward pass's kernels share (kernels.cu,
// products.cu, attention.cu): half conversions, ggml's exp, the CPU's lane
// folds, warp and block reductions, a block's quantization. Each .cu that
// includes it gets its own copy (an unnamed namespace).
#ifndef ENGINE_CUDA_DEVICE_MATH_CUH
#define ENGINE_CUDA_DEVICE_MATH_CUH

#include <cuda_fp16.h>

#include "cuda/kernels.cuh"

namespace
{

// ---- programmatic dependent launch (sm_90) ----
//
// Every kernel of a step is launched so that it may start while the kernel
// before it on the stream is still running: each kernel lets the next one
// launch as soon as all its own blocks are running (so no waiting block can
// hold a slot an earlier grid still needs), and waits for the one before it
// to have finished, its writes visible, before it reads anything the step
// computes. Only the weights and the step's fixed tables are read before
// the wait. The launch gaps between a step's 185 kernels overlap the work.

__device__ __forceinline__ void let_next_kernel_launch()
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

__device__ __forceinline__ void wait_for_previous_kernel()
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

// Both, first thing in a kernel that reads nothing before the wait.
__device__ __forceinline__ void follow_previous_kernel()
{
    let_next_kernel_launch();
    wait_for_previous_kernel();
}

template <typename... Params, typename... Args>
cudaError_t launch_overlapped(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                              cudaStream_t s, Args... args)
{
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared;
    config.stream = s;
    config.attrs = &attribute;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

__device__ __forceinline__ float half_to_float(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ uint16_t float_to_half(float f)
{
    return __half_as_ushort(__float2half_rn(f)); // nearest, ties to even (as F16C)
}

// ggml's vectorised expf, lane for lane (engine/model/numerics.c eng_vexpf).
__device__ float vexpf(float x)
{
    const float r = 0x1.8p23f;
    const float z = __fmaf_rn(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = __fmaf_rn(-n, 0x1.7f7d1cp-20f, __fmaf_rn(-n, 0x1.62e4p-1f, x));
    const uint32_t e = __float_as_uint(z) << 23;
    const float k = __uint_as_float(e + __float_as_uint(1.0f));
    const float u = b * b;
    const float j = __fmaf_rn(__fmaf_rn(__fmaf_rn(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                        __fmaf_rn(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                              u, 0x1.ffffecp-1f * b);
    if (!(fabsf(n) > 126.0f))
        return __fmaf_rn(j, k, k);
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = __uint_as_float(g + 0x7f000000u);
    const float s2 = __uint_as_float(e - g);
    if (fabsf(n) > 192.0f)
        return s1 * s1;
    return __fmaf_rn(s2, j, s2) * s1;
}

// The CPU's eight-lane fold (extract + add, movehl + add, movehdup + add).
__device__ __forceinline__ float hsum8(const float a[8])
{
    const float r0 = a[4] + a[0], r1 = a[5] + a[1], r2 = a[6] + a[2], r3 = a[7] + a[3];
    return (r0 + r2) + (r1 + r3);
}

// ggml_vec_dot_f16's fold of 32 lanes.
__device__ __forceinline__ float reduce_decode(const float acc[32])
{
    float x[8];
    for (int l = 0; l < 8; l++)
        x[l] = (acc[l] + acc[16 + l]) + (acc[8 + l] + acc[24 + l]);
    float t[4];
    for (int l = 0; l < 4; l++)
        t[l] = x[l] + x[l + 4];
    return (t[0] + t[1]) + (t[2] + t[3]);
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ int warp_sum_int(int v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_double(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// A value over the block (blockDim.x a multiple of 32, <= 1024): each
// warp's value (already reduced over the warp) gathered, then folded in warp
// order, the first warp's first.
template <typename T, typename Fold> __device__ T block_fold(T warp_value, Fold fold)
{
    __shared__ T part[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __syncthreads();
    if (lane == 0)
        part[warp] = warp_value;
    __syncthreads();
    T total = part[0];
    for (int w = 1; w < (int)(blockDim.x / 32); w++)
        total = fold(total, part[w]);
    return total;
}

__device__ double block_sum_double(double v)
{
    return block_fold(warp_sum_double(v), [](double a, double b) { return a + b; });
}

__device__ float block_max(float v)
{
    return block_fold(warp_max(v), [](float a, float b) { return fmaxf(a, b); });
}

// One 32-value block quantized by one warp, lane i holding value i: the
// AVX2 routine's d = amax / 127 (a half), values times 127 / amax rounded to
// nearest even, saturated to int8; s = d * the sum of the rounded values.
__device__ void quantize_block_warp(float x, eng_gpu_act_block *out)
{
    const int lane = threadIdx.x % 32;
    const float amax = warp_max(fabsf(x));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int q = __float2int_rn(x * id);
    const int sum = warp_sum_int(q);
    q = q < -128 ? -128 : q > 127 ? 127 : q;
    out->qs[lane] = (int8_t)q;
    if (lane == 0) {
        out->d = float_to_half(d);
        out->s = float_to_half(d * (float)sum);
    }
}

} // namespace

#endif
