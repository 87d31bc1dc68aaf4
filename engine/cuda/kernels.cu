// The forward pass's small kernels: the embedding, RMSNorm, quantization,
// SwiGLU, RoPE with the KV store, argmax (kernels.cuh says what each computes
// and how its rounding follows the CPU's; the products are products.cu's,
// attention attention.cu's).
#include "cuda/kernels.cuh"

#include "common/ggml_types.h"
#include "cuda/device_math.cuh"

namespace
{

constexpr int kThreads = 256;

// ---- embedding ----

__global__ void embed_kernel(eng_gpu_matrix embd, eng_gpu_rows rows, float *x)
{
    follow_previous_kernel();
    const int t = blockIdx.x;
    const int32_t token = rows.tokens[t];
    const uint32_t blocks = embd.cols / ENG_GPU_QK;
    const uint8_t *row = (const uint8_t *)embd.data + (size_t)token * blocks * 34;
    for (uint32_t i = threadIdx.x; i < embd.cols; i += blockDim.x) {
        const uint8_t *block = row + (size_t)(i / ENG_GPU_QK) * 34;
        const float d = half_to_float((uint16_t)(block[0] | (block[1] << 8)));
        x[(size_t)t * embd.cols + i] = (float)(int8_t)block[2 + i % ENG_GPU_QK] * d;
    }
}

// ---- RMSNorm, quantization, SwiGLU ----

// One block per row, one warp per 32-value block (blockDim = E rounded up to
// warps): the squares summed in double, the row scaled, each warp quantizing
// its own block.
__global__ void rms_norm_quant_kernel(const float *x, const float *const *w_at, uint32_t E,
                                      float eps, eng_gpu_act_block *act)
{
    follow_previous_kernel();
    const float *w = *w_at;
    const int t = blockIdx.x;
    const uint32_t i = threadIdx.x;
    const float *xr = x + (size_t)t * E;
    const float xi = i < E ? xr[i] : 0.0f;
    double sum = i < E ? (double)(xi * xi) : 0.0;
    for (uint32_t j = i + blockDim.x; j < E; j += blockDim.x)
        sum += (double)(xr[j] * xr[j]);
    sum = block_sum_double(sum);
    const float mean = (float)(sum / (double)E);
    const float scale = 1.0f / sqrtf(mean + eps);
    eng_gpu_act_block *row = act + (size_t)t * (E / ENG_GPU_QK);
    for (uint32_t j = i; j - threadIdx.x < E; j += blockDim.x) {
        const float scaled = (j < E ? xr[j] : 0.0f) * scale;
        const float y = scaled * (j < E ? w[j] : 0.0f);
        if (j - threadIdx.x + (threadIdx.x & ~31u) < E) // the warp's block is in the row
            quantize_block_warp(y, &row[j / ENG_GPU_QK]);
    }
}

// Warp per 32-value block: block b of row t is warp (b % blocks) of the grid.
__global__ void quant_kernel(const float *x, uint32_t n, int32_t T, eng_gpu_act_block *act)
{
    follow_previous_kernel();
    const uint32_t blocks = n / ENG_GPU_QK;
    const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (warp >= (uint32_t)T * blocks)
        return;
    const uint32_t t = warp / blocks, b = warp % blocks;
    quantize_block_warp(x[(size_t)t * n + b * ENG_GPU_QK + lane], &act[(size_t)t * blocks + b]);
}

__global__ void swiglu_quant_kernel(const float *gate, const float *up, uint32_t F, int32_t T,
                                    eng_gpu_act_block *act)
{
    follow_previous_kernel();
    const uint32_t blocks = F / ENG_GPU_QK;
    const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (warp >= (uint32_t)T * blocks)
        return;
    const uint32_t t = warp / blocks, b = warp % blocks;
    const size_t at = (size_t)t * F + b * ENG_GPU_QK + lane;
    const float x = gate[at];
    const float silu = x / (1.0f + vexpf(0.0f - x));
    quantize_block_warp(silu * up[at], &act[(size_t)t * blocks + b]);
}

// The one-token product's prologue: every block of the product computes the
// normed, quantized row into shared memory itself (a norm over a few hundred
// values costs less than a kernel launch and its gap). The gate's SwiGLU is
// a kernel of its own: in every block of the down product (F values, 48
// blocks of 32 for SmolLM2) it took 18 us against 11 for both kernels.

// ---- RoPE and the KV store ----

__global__ void rope_store_kernel(float *q, float *k, const float *v, const float *table,
                                  eng_gpu_rows rows, uint32_t n_head, uint32_t n_kv, uint32_t D,
                                  uint32_t n_rot, eng_gpu_kv kv, uint32_t layer)
{
    follow_previous_kernel();
    const int t = blockIdx.x;
    const int32_t pos = rows.pos[t], seq = rows.seq[t];
    const float *cs = table + (size_t)pos * D;
    const uint32_t pairs = n_rot / 2;
    // q: n_head heads of D, rotated in place
    for (uint32_t i = threadIdx.x; i < n_head * pairs; i += blockDim.x) {
        float *x = q + (size_t)t * n_head * D + (i / pairs) * D + 2 * (i % pairs);
        const float x0 = x[0], x1 = x[1], c = cs[2 * (i % pairs)], s = cs[2 * (i % pairs) + 1];
        x[0] = __fmaf_rn(x0, c, -(x1 * s));
        x[1] = __fmaf_rn(x0, s, x1 * c);
    }
    for (uint32_t i = threadIdx.x; i < n_kv * pairs; i += blockDim.x) {
        float *x = k + (size_t)t * n_kv * D + (i / pairs) * D + 2 * (i % pairs);
        const float x0 = x[0], x1 = x[1], c = cs[2 * (i % pairs)], s = cs[2 * (i % pairs) + 1];
        x[0] = __fmaf_rn(x0, c, -(x1 * s));
        x[1] = __fmaf_rn(x0, s, x1 * c);
    }
    __syncthreads();
    char *kb = (char *)kv.k_base[layer * kv.sequences + seq];
    char *vb = (char *)kv.v_base[layer * kv.sequences + seq];
    for (uint32_t i = threadIdx.x; i < n_kv * D; i += blockDim.x) {
        const uint32_t h = i / D, d = i % D;
        const size_t at = h * kv.head_stride + (size_t)pos * kv.token_stride;
        ((uint16_t *)(kb + at))[d] = float_to_half(k[(size_t)t * n_kv * D + i]);
        ((uint16_t *)(vb + at))[d] = float_to_half(v[(size_t)t * n_kv * D + i]);
    }
}

// ---- argmax ----

// Two stages: kArgmaxParts blocks per row each leave their best (value,
// id), then one warp per row picks among them; ties go to the lower id.
constexpr int kArgmaxParts = ENG_GPU_ARGMAX_PARTS;

__device__ __forceinline__ void better(float &v, int32_t &id, float ov, int32_t oid)
{
    if (ov > v || (ov == v && oid < id)) {
        v = ov;
        id = oid;
    }
}

__device__ __forceinline__ void warp_best(float &v, int32_t &id)
{
    for (int o = 16; o > 0; o >>= 1)
        better(v, id, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, id, o));
}

__global__ void argmax_part_kernel(const float *logits, uint32_t n, float *part_v, int32_t *part_i)
{
    follow_previous_kernel();
    __shared__ float wv[32];
    __shared__ int32_t wi[32];
    const int t = blockIdx.y, part = blockIdx.x;
    const uint32_t per = (n + kArgmaxParts - 1) / kArgmaxParts;
    const uint32_t lo = part * per, hi = lo + per < n ? lo + per : n;
    const float *row = logits + (size_t)t * n;
    float v = -INFINITY;
    int32_t id = 0x7fffffff;
    for (uint32_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
        better(v, id, row[i], (int32_t)i);
    warp_best(v, id);
    if (threadIdx.x % 32 == 0) {
        wv[threadIdx.x / 32] = v;
        wi[threadIdx.x / 32] = id;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        const bool in = threadIdx.x < blockDim.x / 32;
        v = in ? wv[threadIdx.x] : -INFINITY;
        id = in ? wi[threadIdx.x] : 0x7fffffff;
        warp_best(v, id);
        if (threadIdx.x == 0) {
            part_v[t * kArgmaxParts + part] = v;
            part_i[t * kArgmaxParts + part] = id;
        }
    }
}

__global__ void argmax_final_kernel(const float *part_v, const int32_t *part_i, int32_t *next)
{
    follow_previous_kernel();
    const int t = blockIdx.x;
    float v = part_v[t * kArgmaxParts + threadIdx.x];
    int32_t id = part_i[t * kArgmaxParts + threadIdx.x];
    warp_best(v, id);
    if (threadIdx.x == 0)
        next[t] = id == 0x7fffffff ? 0 : id;
}

} // namespace

cudaError_t eng_gpu_embed(cudaStream_t s, const eng_gpu_matrix &embd, eng_gpu_rows rows, float *x)
{
    return launch_overlapped(embed_kernel, dim3(rows.count), dim3(kThreads), 0, s, embd, rows, x);
}

cudaError_t eng_gpu_rms_norm_quant(cudaStream_t s, const float *x, const float *const *w_at,
                                   uint32_t E, float eps, int32_t T, eng_gpu_act_block *act)
{
    const uint32_t threads = E < 1024 ? (E + 31) / 32 * 32 : 1024;
    return launch_overlapped(rms_norm_quant_kernel, dim3(T), dim3(threads), 0, s, x, w_at, E, eps,
                             act);
}

cudaError_t eng_gpu_quant(cudaStream_t s, const float *x, uint32_t n, int32_t T,
                          eng_gpu_act_block *act)
{
    const uint32_t warps = (uint32_t)T * (n / ENG_GPU_QK);
    return launch_overlapped(quant_kernel, dim3((warps + 7) / 8), dim3(kThreads), 0, s, x, n, T,
                             act);
}

cudaError_t eng_gpu_rope_store(cudaStream_t s, float *q, float *k, const float *v,
                               const float *rope_table, eng_gpu_rows rows, uint32_t n_head,
                               uint32_t n_kv, uint32_t head_dim, uint32_t n_rot,
                               const eng_gpu_kv &kv, uint32_t layer)
{
    return launch_overlapped(rope_store_kernel, dim3(rows.count), dim3(kThreads), 0, s, q, k, v,
                             rope_table, rows, n_head, n_kv, head_dim, n_rot, kv, layer);
}

cudaError_t eng_gpu_swiglu_quant(cudaStream_t s, const float *gate, const float *up, uint32_t F,
                                 int32_t T, eng_gpu_act_block *act)
{
    const uint32_t warps = (uint32_t)T * (F / ENG_GPU_QK);
    return launch_overlapped(swiglu_quant_kernel, dim3((warps + 7) / 8), dim3(kThreads), 0, s, gate,
                             up, F, T, act);
}

cudaError_t eng_gpu_argmax(cudaStream_t s, const float *logits, uint32_t n_vocab, int32_t T,
                           float *part_v, int32_t *part_i, int32_t *next)
{
    const cudaError_t e = launch_overlapped(argmax_part_kernel, dim3(kArgmaxParts, (unsigned)T),
                                            dim3(kThreads), 0, s, logits, n_vocab, part_v, part_i);
    if (e != cudaSuccess)
        return e;
    return launch_overlapped(argmax_final_kernel, dim3(T), dim3(kArgmaxParts), 0, s, part_v, part_i,
                             next);
}
