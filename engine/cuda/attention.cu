// Attention over the KV bindings (kernels.cuh, eng_gpu_attention): the
// CPU's F16 lane accumulators, ggml's exp, the value sums per (dimension,
// lane) in position order.
#include "cuda/kernels.cuh"

#include "common/ggml_types.h"
#include "cuda/device_math.cuh"

namespace
{

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

// Element d of a head rotated by RoPE (adjacent pairs, cs the position's
// cos/sin row), as rope_store_kernel rotates it.
__device__ __forceinline__ float rope_at(const float *x, const float *cs, uint32_t d,
                                         uint32_t n_rot)
{
    if (d >= n_rot)
        return x[d];
    const uint32_t p = d / 2;
    const float x0 = x[2 * p], x1 = x[2 * p + 1], c = cs[2 * p], s = cs[2 * p + 1];
    return d % 2 == 0 ? __fmaf_rn(x0, c, -(x1 * s)) : __fmaf_rn(x0, s, x1 * c);
}

// 512 threads: twice the old 256's walkers over the positions and the
// (dimension, lane) value sums, which grow with the context (72 registers
// a thread rule out 1,024).
constexpr int kAttentionThreads = 512;

__global__ void __launch_bounds__(kAttentionThreads)
    attention_kernel(const float *q, eng_gpu_kv kv, uint32_t layer, eng_gpu_rows rows,
                     uint32_t n_head, uint32_t n_kv, uint32_t D, uint32_t n_ctx, int kind,
                     float *scores, uint16_t *weights, float *out, eng_gpu_act_block *act,
                     eng_gpu_new_kv fresh)
{
    follow_previous_kernel();
    // LANES * D floats, then D halves each of q and (fresh) the row's own
    // key and value.
    extern __shared__ float shared[];
    const int t = blockIdx.x, head = blockIdx.y;
    const int32_t seq = rows.seq[t];
    const uint32_t visible = (uint32_t)rows.pos[t] + 1;
    const uint32_t kvh = head / (n_head / n_kv);
    char *kb = (char *)kv.k_base[layer * kv.sequences + seq] + kvh * kv.head_stride;
    char *vb = (char *)kv.v_base[layer * kv.sequences + seq] + kvh * kv.head_stride;
    const int lanes = kind == ENG_GPU_DOT_DECODE ? 32 : 8;
    float *acc = shared;
    uint16_t *q16 = (uint16_t *)(shared + 32 * D);
    uint16_t *k16 = q16 + D, *v16 = k16 + D;
    float *sc = scores + ((size_t)t * n_head + head) * n_ctx;
    uint16_t *wt = weights + ((size_t)t * n_head + head) * n_ctx;
    const float *qr = q + ((size_t)t * n_head + head) * D;
    // fresh: the row's own position is read from k16/v16, which this
    // kernel rotates and rounds itself; the first head of each KV group
    // stores them (no other block reads that position from the cache).
    const uint32_t own = fresh.k ? visible - 1 : 0xffffffffu;
    if (fresh.k) {
        const float *cs = fresh.rope + (size_t)rows.pos[t] * D;
        const float *kr = fresh.k + ((size_t)t * n_kv + kvh) * D;
        const float *vr = fresh.v + ((size_t)t * n_kv + kvh) * D;
        for (uint32_t d = threadIdx.x; d < D; d += blockDim.x) {
            q16[d] = float_to_half(rope_at(qr, cs, d, fresh.n_rot));
            k16[d] = float_to_half(rope_at(kr, cs, d, fresh.n_rot));
            v16[d] = float_to_half(vr[d]);
        }
        __syncthreads();
        if (head % (n_head / n_kv) == 0)
            for (uint32_t d = threadIdx.x; d < D; d += blockDim.x) {
                ((uint16_t *)(kb + (size_t)own * kv.token_stride))[d] = k16[d];
                ((uint16_t *)(vb + (size_t)own * kv.token_stride))[d] = v16[d];
            }
    } else {
        for (uint32_t d = threadIdx.x; d < D; d += blockDim.x)
            q16[d] = float_to_half(qr[d]);
        __syncthreads();
    }
    const float scale = 1.0f / sqrtf((float)D);
    float local_max = -INFINITY;
    for (uint32_t p = threadIdx.x; p < visible; p += blockDim.x) {
        const uint16_t *k = p == own ? k16 : (const uint16_t *)(kb + (size_t)p * kv.token_stride);
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
        // Unrolled so a stretch of the chain's loads is in flight at once
        // (the fused multiply-adds stay in position order).
#pragma unroll 8
        for (uint32_t j = lane; j < visible; j += lanes) {
            const uint16_t *row =
                j == own ? v16 : (const uint16_t *)(vb + (size_t)j * kv.token_stride);
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

} // namespace

cudaError_t eng_gpu_attention(cudaStream_t s, const float *q, const eng_gpu_kv &kv, uint32_t layer,
                              eng_gpu_rows rows, uint32_t n_head, uint32_t n_kv, uint32_t head_dim,
                              uint32_t n_ctx, eng_gpu_dot_kind kind, float *scores,
                              uint16_t *weights, float *out, eng_gpu_act_block *act,
                              const eng_gpu_new_kv &fresh)
{
    if (fresh.k && kind != ENG_GPU_DOT_DECODE)
        return cudaErrorInvalidValue; // rows of one sequence read each other's keys
    const size_t shared = 32 * head_dim * sizeof(float) + 3 * head_dim * sizeof(uint16_t);
    dim3 grid((unsigned)rows.count, n_head);
    return launch_overlapped(attention_kernel, dim3(grid), dim3(kAttentionThreads), shared, s, q,
                             kv, layer, rows, n_head, n_kv, head_dim, n_ctx, (int)kind, scores,
                             weights, out, head_dim % ENG_GPU_QK == 0 ? act : nullptr, fresh);
}
