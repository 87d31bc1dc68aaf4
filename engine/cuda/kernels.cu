// The forward pass's CUDA kernels (kernels.cuh says what each computes and
// how its rounding follows the CPU's).
#include "cuda/kernels.cuh"

#include <cuda_fp16.h>

#include "common/ggml_types.h"

namespace
{

constexpr int kThreads = 256;

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

// Sum of a double over the block (blockDim.x a multiple of 32, <= 1024).
__device__ double block_sum_double(double v)
{
    __shared__ double part[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum_double(v);
    __syncthreads();
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < (int)(blockDim.x / 32); w++)
        total += part[w];
    return total;
}

__device__ float block_max(float v)
{
    __shared__ float part[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    float m = part[0];
    for (int w = 1; w < (int)(blockDim.x / 32); w++)
        m = fmaxf(m, part[w]);
    return m;
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

// ---- embedding ----

__global__ void embed_kernel(eng_gpu_matrix embd, eng_gpu_rows rows, float *x)
{
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
__global__ void rms_norm_quant_kernel(const float *x, const float *w, uint32_t E, float eps,
                                      eng_gpu_act_block *act)
{
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

// ---- products ----
//
// Eight threads per row, thread k the CPU's lane k (values 4k..4k+3 of each
// block), each walking the row's blocks in order; a warp computes four
// rows, a block of 256 threads 32.

// Four unsigned-by-signed products, pairs saturated to 16 bits (vpmaddubsw),
// summed (vpmaddwd by ones).
__device__ __forceinline__ int quad_us(const uint8_t u[4], const int8_t s[4])
{
    int a = u[0] * s[0] + u[1] * s[1], b = u[2] * s[2] + u[3] * s[3];
    a = a < -32768 ? -32768 : a > 32767 ? 32767 : a;
    b = b < -32768 ? -32768 : b > 32767 ? 32767 : b;
    return a + b;
}

// Signed by signed as vpsignb leaves it: |x| against y with x's sign.
__device__ __forceinline__ int quad_ss(const int8_t x[4], const int8_t y[4])
{
    uint8_t ax[4];
    int8_t sy[4];
    for (int i = 0; i < 4; i++) {
        ax[i] = (uint8_t)(x[i] < 0 ? -(int)x[i] : x[i]);
        sy[i] = x[i] == 0 ? 0 : x[i] > 0 ? y[i] : (y[i] == -128 ? (int8_t)-128 : (int8_t)-y[i]);
    }
    return quad_us(ax, sy);
}

template <int NT>
__global__ void matvec_kernel(const eng_gpu_matrix *mats, float *const *ys, int count,
                              const eng_gpu_act_block *act, int32_t T, bool accumulate)
{
    const int group = threadIdx.x / 8, k = threadIdx.x % 8;
    uint32_t r = blockIdx.x * (blockDim.x / 8) + group;
    int m = 0;
    while (m < count && r >= mats[m].rows) {
        r -= mats[m].rows;
        m++;
    }
    const bool active = m < count;
    const eng_gpu_matrix w = active ? mats[m] : mats[0];
    float *y = active ? ys[m] : nullptr;
    const uint32_t blocks = w.cols / ENG_GPU_QK;
    const int kq = k & 3;
    const bool high = k >= 4;
    for (int32_t t0 = 0; t0 < T; t0 += NT) {
        float acc[NT], summs[NT];
        for (int j = 0; j < NT; j++)
            acc[j] = summs[j] = 0.0f;
        if (active) {
            if (w.type == ENG_TYPE_Q4_1) {
                const uint8_t *row = (const uint8_t *)w.data + (size_t)r * blocks * 20;
#pragma unroll 6
                for (uint32_t b = 0; b < blocks; b++) {
                    const uint8_t *block = row + (size_t)b * 20;
                    const uint16_t *dm = (const uint16_t *)block;
                    const float wd = half_to_float(dm[0]), wm = half_to_float(dm[1]);
                    const uint32_t packed = *(const uint32_t *)(block + 4 + 4 * kq);
                    uint8_t u[4];
                    for (int i = 0; i < 4; i++)
                        u[i] = (uint8_t)((packed >> (8 * i + (high ? 4 : 0))) & 0x0f);
#pragma unroll
                    for (int j = 0; j < NT; j++) {
                        if (t0 + j >= T)
                            break;
                        const eng_gpu_act_block *a = act + (size_t)(t0 + j) * blocks + b;
                        int8_t s[4];
                        *(uint32_t *)s = *(const uint32_t *)(a->qs + 4 * k);
                        const int lane = quad_us(u, s);
                        summs[j] = __fmaf_rn(wm, half_to_float(a->s), summs[j]);
                        acc[j] = __fmaf_rn(wd * half_to_float(a->d), (float)lane, acc[j]);
                    }
                }
            } else { // ENG_TYPE_Q8_0
                const uint8_t *row = (const uint8_t *)w.data + (size_t)r * blocks * 34;
#pragma unroll 6
                for (uint32_t b = 0; b < blocks; b++) {
                    const uint8_t *block = row + (size_t)b * 34;
                    const uint16_t *h = (const uint16_t *)block;
                    const float wd = half_to_float(h[0]);
                    int8_t x[4];
                    *(uint16_t *)x = h[1 + 2 * k];
                    *(uint16_t *)(x + 2) = h[2 + 2 * k];
#pragma unroll
                    for (int j = 0; j < NT; j++) {
                        if (t0 + j >= T)
                            break;
                        const eng_gpu_act_block *a = act + (size_t)(t0 + j) * blocks + b;
                        int8_t s[4];
                        *(uint32_t *)s = *(const uint32_t *)(a->qs + 4 * k);
                        const int lane = quad_ss(x, s);
                        acc[j] = __fmaf_rn(wd * half_to_float(a->d), (float)lane, acc[j]);
                    }
                }
            }
        }
        // The eight lanes folded as the CPU folds them; the minimum term last.
#pragma unroll
        for (int j = 0; j < NT; j++) {
            float lanes[8];
            for (int l = 0; l < 8; l++)
                lanes[l] = __shfl_sync(0xffffffffu, acc[j], (threadIdx.x & ~7) + l);
            if (active && k == 0 && t0 + j < T) {
                const float v = hsum8(lanes) + summs[j];
                float *dst = y + (size_t)(t0 + j) * w.rows + r;
                *dst = accumulate ? v + *dst : v;
            }
        }
    }
}

// One token (decode at batch 1): a warp per row. The warp's 32 threads
// first compute every (block, lane) integer sum of the row at once, four
// blocks per pass, so the row's loads are all in flight together; then
// eight threads walk their lane's chain of fused multiply-adds over the
// blocks from shared memory (the CPU's order), a ninth the minimum term's,
// and the eight are folded as the CPU folds them.
constexpr int kFastWarps = 4;               // warps (rows) per block of the one-token kernel
constexpr uint32_t kMatvec1MaxBlocks = 256; // cols up to 8,192 (44 KiB of shared memory)

__global__ void matvec1_kernel(const eng_gpu_matrix *mats, float *const *ys, int count,
                               const eng_gpu_act_block *act, bool accumulate, uint32_t max_blocks)
{
    extern __shared__ float smem[]; // per warp: lanes[max_blocks * 8], scale, wm, as [max_blocks]
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *lanes = smem + (size_t)warp * max_blocks * 11;
    float *scale = lanes + (size_t)max_blocks * 8, *wms = scale + max_blocks,
          *ass = wms + max_blocks;
    uint32_t r = blockIdx.x * kFastWarps + warp;
    int m = 0;
    while (m < count && r >= mats[m].rows) {
        r -= mats[m].rows;
        m++;
    }
    if (m >= count)
        return; // the whole warp: rows past the last matrix
    const eng_gpu_matrix w = mats[m];
    const uint32_t blocks = w.cols / ENG_GPU_QK;
    const int k = lane % 8;
    const bool q41 = w.type == ENG_TYPE_Q4_1;
#pragma unroll 4
    for (uint32_t b = lane / 8; b < blocks; b += 4) {
        const eng_gpu_act_block *a = act + b;
        int8_t s4[4];
        *(uint32_t *)s4 = *(const uint32_t *)(a->qs + 4 * k);
        const float ad = half_to_float(a->d);
        int sum;
        float wd;
        if (q41) {
            const uint8_t *block = (const uint8_t *)w.data + ((size_t)r * blocks + b) * 20;
            const uint16_t *dm = (const uint16_t *)block;
            wd = half_to_float(dm[0]);
            const uint32_t packed = *(const uint32_t *)(block + 4 + 4 * (k & 3));
            uint8_t u[4];
            for (int i = 0; i < 4; i++)
                u[i] = (uint8_t)((packed >> (8 * i + (k >= 4 ? 4 : 0))) & 0x0f);
            sum = quad_us(u, s4);
            if (k == 0) {
                wms[b] = half_to_float(dm[1]);
                ass[b] = half_to_float(a->s);
            }
        } else {
            const uint8_t *block = (const uint8_t *)w.data + ((size_t)r * blocks + b) * 34;
            const uint16_t *h = (const uint16_t *)block;
            wd = half_to_float(h[0]);
            int8_t x[4];
            *(uint16_t *)x = h[1 + 2 * k];
            *(uint16_t *)(x + 2) = h[2 + 2 * k];
            sum = quad_ss(x, s4);
        }
        lanes[b * 8 + k] = (float)sum;
        if (k == 0)
            scale[b] = wd * ad;
    }
    __syncwarp();
    float acc = 0.0f;
    if (lane < 8) {
        for (uint32_t b = 0; b < blocks; b++)
            acc = __fmaf_rn(scale[b], lanes[b * 8 + lane], acc);
    } else if (lane == 8 && q41) {
        for (uint32_t b = 0; b < blocks; b++)
            acc = __fmaf_rn(wms[b], ass[b], acc);
    }
    float l8[8];
    for (int l = 0; l < 8; l++)
        l8[l] = __shfl_sync(0xffffffffu, acc, l);
    const float summs = __shfl_sync(0xffffffffu, acc, 8);
    if (lane == 0) {
        const float v = hsum8(l8) + (q41 ? summs : 0.0f);
        float *dst = ys[m] + r;
        *dst = accumulate ? v + *dst : v;
    }
}

// ---- RoPE and the KV store ----

__global__ void rope_store_kernel(float *q, float *k, const float *v, const float *table,
                                  eng_gpu_rows rows, uint32_t n_head, uint32_t n_kv, uint32_t D,
                                  uint32_t n_rot, eng_gpu_kv kv, uint32_t layer)
{
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

// ---- attention ----
//
// One block per (row, query head). Scores one position per thread with the
// CPU's lane accumulators; softmax; the weighted sum with one thread per
// (dimension, lane) walking that lane's positions in order, then the lanes
// folded per dimension.

template <int LANES>
__device__ float dot_f16_lanes(const uint16_t *k, const uint16_t *q, uint32_t D)
{
    float acc[LANES];
    for (int l = 0; l < LANES; l++)
        acc[l] = 0.0f;
    const uint32_t whole = LANES == 32 ? D - D % 32 : D;
    // The key row in 16-byte loads (rows start 16-byte aligned: D is a
    // multiple of 8 and the strides are whole rows); the sums as before.
    for (uint32_t i0 = 0; i0 < whole; i0 += LANES) {
        uint16_t kh[LANES];
#pragma unroll
        for (int v = 0; v < LANES / 8; v++)
            *(uint4 *)(kh + 8 * v) = *(const uint4 *)(k + i0 + 8 * v);
#pragma unroll
        for (int l = 0; l < LANES; l++)
            acc[l] = __fmaf_rn(half_to_float(kh[l]), half_to_float(q[i0 + l]), acc[l]);
    }
    if (LANES == 8)
        return hsum8(acc);
    double sum = (double)reduce_decode(acc);
    for (uint32_t i = whole; i < D; i++)
        sum += (double)(half_to_float(k[i]) * half_to_float(q[i]));
    return (float)sum;
}

__global__ void attention_kernel(const float *q, eng_gpu_kv kv, uint32_t layer, eng_gpu_rows rows,
                                 uint32_t n_head, uint32_t n_kv, uint32_t D, uint32_t n_ctx,
                                 int kind, float *scores, uint16_t *weights, float *out,
                                 eng_gpu_act_block *act)
{
    extern __shared__ float shared[]; // LANES * D floats, then D halves of q
    const int t = blockIdx.x, head = blockIdx.y;
    const int32_t seq = rows.seq[t];
    const uint32_t visible = (uint32_t)rows.pos[t] + 1;
    const uint32_t kvh = head / (n_head / n_kv);
    const char *kb = (const char *)kv.k_base[layer * kv.sequences + seq] + kvh * kv.head_stride;
    const char *vb = (const char *)kv.v_base[layer * kv.sequences + seq] + kvh * kv.head_stride;
    const int lanes = kind == ENG_GPU_DOT_DECODE ? 32 : 8;
    float *acc = shared;
    uint16_t *q16 = (uint16_t *)(shared + 32 * D);
    float *sc = scores + ((size_t)t * n_head + head) * n_ctx;
    uint16_t *wt = weights + ((size_t)t * n_head + head) * n_ctx;
    const float *qr = q + ((size_t)t * n_head + head) * D;
    for (uint32_t d = threadIdx.x; d < D; d += blockDim.x)
        q16[d] = float_to_half(qr[d]);
    __syncthreads();
    const float scale = 1.0f / sqrtf((float)D);
    float local_max = -INFINITY;
    for (uint32_t p = threadIdx.x; p < visible; p += blockDim.x) {
        const uint16_t *k = (const uint16_t *)(kb + (size_t)p * kv.token_stride);
        const float s = (kind == ENG_GPU_DOT_DECODE ? dot_f16_lanes<32>(k, q16, D)
                                                    : dot_f16_lanes<8>(k, q16, D)) *
                        scale;
        sc[p] = s;
        local_max = fmaxf(local_max, s);
    }
    const float max = block_max(local_max);
    for (uint32_t p = threadIdx.x; p < visible; p += blockDim.x)
        sc[p] = vexpf(sc[p] - max);
    __syncthreads();
    // The sum in double over groups of eight, each group folded in float.
    double part = 0.0;
    for (uint32_t g = threadIdx.x; g * 8 < visible; g += blockDim.x) {
        float v[8];
        for (int l = 0; l < 8; l++)
            v[l] = g * 8 + l < visible ? sc[g * 8 + l] : 0.0f;
        float s4[4];
        for (int l = 0; l < 4; l++)
            s4[l] = v[l + 4] + v[l];
        part += (double)((s4[0] + s4[2]) + (s4[1] + s4[3]));
    }
    const double sum = block_sum_double(part);
    const float inv = (float)(1.0 / sum);
    for (uint32_t p = threadIdx.x; p < visible; p += blockDim.x)
        wt[p] = float_to_half(sc[p] * inv);
    __syncthreads();
    for (uint32_t item = threadIdx.x; item < (uint32_t)lanes * D; item += blockDim.x) {
        const uint32_t d = item % D, lane = item / D;
        float a = 0.0f;
        for (uint32_t j = lane; j < visible; j += lanes) {
            const uint16_t *row = (const uint16_t *)(vb + (size_t)j * kv.token_stride);
            a = __fmaf_rn(half_to_float(row[d]), half_to_float(wt[j]), a);
        }
        acc[lane * D + d] = a;
    }
    __syncthreads();
    float *o = out + ((size_t)t * n_head + head) * D;
    const uint32_t d = threadIdx.x; // blockDim.x >= D (at most ENG_ATTN_MAX_DIM)
    float value = 0.0f;
    if (d < D) {
        if (lanes == 32) {
            float l32[32];
            for (int l = 0; l < 32; l++)
                l32[l] = acc[l * D + d];
            value = reduce_decode(l32);
        } else {
            float l8[8];
            for (int l = 0; l < 8; l++)
                l8[l] = acc[l * D + d];
            value = hsum8(l8);
        }
        o[d] = value;
    }
    // The head's output quantized for the next product, a warp a block
    // (heads hold whole blocks when D is a multiple of 32).
    if (act && (threadIdx.x & ~31u) < D)
        quantize_block_warp(
            value,
            &act[((size_t)t * n_head * D + (size_t)head * D) / ENG_GPU_QK + threadIdx.x / 32]);
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
    embed_kernel<<<rows.count, kThreads, 0, s>>>(embd, rows, x);
    return cudaGetLastError();
}

cudaError_t eng_gpu_rms_norm_quant(cudaStream_t s, const float *x, const float *w, uint32_t E,
                                   float eps, int32_t T, eng_gpu_act_block *act)
{
    const uint32_t threads = E < 1024 ? (E + 31) / 32 * 32 : 1024;
    rms_norm_quant_kernel<<<T, threads, 0, s>>>(x, w, E, eps, act);
    return cudaGetLastError();
}

cudaError_t eng_gpu_quant(cudaStream_t s, const float *x, uint32_t n, int32_t T,
                          eng_gpu_act_block *act)
{
    const uint32_t warps = (uint32_t)T * (n / ENG_GPU_QK);
    quant_kernel<<<(warps + 7) / 8, kThreads, 0, s>>>(x, n, T, act);
    return cudaGetLastError();
}

cudaError_t eng_gpu_matvec(cudaStream_t s, const eng_gpu_matrix *mats_dev, uint32_t total_rows,
                           uint32_t max_cols, float *const *ys_dev, int count,
                           const eng_gpu_act_block *act, int32_t T, bool accumulate)
{
    if (T == 1 && max_cols / ENG_GPU_QK <= kMatvec1MaxBlocks) {
        const uint32_t max_blocks = max_cols / ENG_GPU_QK;
        const size_t shared = (size_t)kFastWarps * max_blocks * 11 * sizeof(float);
        const uint32_t grid = (total_rows + kFastWarps - 1) / kFastWarps;
        matvec1_kernel<<<grid, kFastWarps * 32, shared, s>>>(mats_dev, ys_dev, count, act,
                                                             accumulate, max_blocks);
        return cudaGetLastError();
    }
    // Small blocks (8 rows each) spread a layer's few hundred rows over
    // every SM.
    const uint32_t threads = 64, rows_per_block = threads / 8;
    const uint32_t grid = (total_rows + rows_per_block - 1) / rows_per_block;
    if (T == 1)
        matvec_kernel<1><<<grid, threads, 0, s>>>(mats_dev, ys_dev, count, act, T, accumulate);
    else
        matvec_kernel<8><<<grid, threads, 0, s>>>(mats_dev, ys_dev, count, act, T, accumulate);
    return cudaGetLastError();
}

cudaError_t eng_gpu_rope_store(cudaStream_t s, float *q, float *k, const float *v,
                               const float *rope_table, eng_gpu_rows rows, uint32_t n_head,
                               uint32_t n_kv, uint32_t head_dim, uint32_t n_rot,
                               const eng_gpu_kv &kv, uint32_t layer)
{
    rope_store_kernel<<<rows.count, kThreads, 0, s>>>(q, k, v, rope_table, rows, n_head, n_kv,
                                                      head_dim, n_rot, kv, layer);
    return cudaGetLastError();
}

cudaError_t eng_gpu_attention(cudaStream_t s, const float *q, const eng_gpu_kv &kv, uint32_t layer,
                              eng_gpu_rows rows, uint32_t n_head, uint32_t n_kv, uint32_t head_dim,
                              uint32_t n_ctx, eng_gpu_dot_kind kind, float *scores,
                              uint16_t *weights, float *out, eng_gpu_act_block *act)
{
    const size_t shared = 32 * head_dim * sizeof(float) + head_dim * sizeof(uint16_t);
    dim3 grid((unsigned)rows.count, n_head);
    attention_kernel<<<grid, kThreads, shared, s>>>(q, kv, layer, rows, n_head, n_kv, head_dim,
                                                    n_ctx, (int)kind, scores, weights, out,
                                                    head_dim % ENG_GPU_QK == 0 ? act : nullptr);
    return cudaGetLastError();
}

cudaError_t eng_gpu_swiglu_quant(cudaStream_t s, const float *gate, const float *up, uint32_t F,
                                 int32_t T, eng_gpu_act_block *act)
{
    const uint32_t warps = (uint32_t)T * (F / ENG_GPU_QK);
    swiglu_quant_kernel<<<(warps + 7) / 8, kThreads, 0, s>>>(gate, up, F, T, act);
    return cudaGetLastError();
}

cudaError_t eng_gpu_argmax(cudaStream_t s, const float *logits, uint32_t n_vocab, int32_t T,
                           float *part_v, int32_t *part_i, int32_t *next)
{
    argmax_part_kernel<<<dim3(kArgmaxParts, (unsigned)T), kThreads, 0, s>>>(logits, n_vocab, part_v,
                                                                            part_i);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    argmax_final_kernel<<<T, kArgmaxParts, 0, s>>>(part_v, part_i, next);
    return cudaGetLastError();
}
