// The quantized products (kernels.cuh, eng_gpu_matvec): eight integer lanes
// per row as the CPU's AVX2 routine, each lane's fused multiply-adds in block
// order, the lanes folded in the CPU's order.
#include "cuda/kernels.cuh"

#include "common/ggml_types.h"
#include "cuda/device_math.cuh"

namespace
{

// The one-token product's prologue: every block of the product computes the
// normed, quantized row into shared memory itself (a norm over a few hundred
// values costs less than a kernel launch and its gap). The gate's SwiGLU is
// a kernel of its own: in every block of the down product (F values, 48
// blocks of 32 for SmolLM2) it took 18 us against 11 for both kernels.

// rms_norm_quant_kernel's arithmetic for one row with any number of warps:
// the squares summed per virtual warp of that kernel (its blockDim,
// E rounded up to warps, at most 1,024) in the same shuffle tree, the
// warps' sums added in order, so the scale is the standalone kernel's bit
// for bit. Up to 1,024 values (a warp's virtual warps are then its
// quantization blocks, at most four with eight warps), every value a thread
// reads is loaded at once, not round after round.
// 1 / sqrt(mean + eps), the mean the n warps' sums of squares added in
// order over E values.
__device__ float rms_scale(const double *part, uint32_t n, uint32_t E, float eps)
{
    double total = 0.0;
    for (uint32_t v = 0; v < n; v++)
        total += part[v];
    const float mean = (float)(total / (double)E);
    return 1.0f / sqrtf(mean + eps);
}

__device__ void rms_norm_quant_row(const float *x, const float *const *w_at, uint32_t E, float eps,
                                   eng_gpu_act_block *act)
{
    __shared__ double part[32];
    const uint32_t threads = E < 1024 ? (E + 31) / 32 * 32 : 1024, vwarps = threads / 32;
    const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const uint32_t blocks = E / ENG_GPU_QK;
    if (E <= 1024 && blocks <= 4 * warps) {
        const float *w = *w_at;
        float xv[4], wv[4];
#pragma unroll
        for (uint32_t i = 0; i < 4; i++) {
            const uint32_t b = warp + i * warps;
            xv[i] = b < blocks ? x[b * ENG_GPU_QK + lane] : 0.0f;
            wv[i] = b < blocks ? w[b * ENG_GPU_QK + lane] : 0.0f;
        }
#pragma unroll
        for (uint32_t i = 0; i < 4; i++) {
            const uint32_t b = warp + i * warps;
            if (b < blocks) { // the whole warp
                const double sum = warp_sum_double((double)(xv[i] * xv[i]));
                if (lane == 0)
                    part[b] = sum;
            }
        }
        __syncthreads();
        const float scale = rms_scale(part, blocks, E, eps);
#pragma unroll
        for (uint32_t i = 0; i < 4; i++) {
            const uint32_t b = warp + i * warps;
            if (b < blocks) {
                const float scaled = xv[i] * scale;
                quantize_block_warp(scaled * wv[i], &act[b]);
            }
        }
        return;
    }
    for (uint32_t vw = warp; vw < vwarps; vw += warps) {
        const uint32_t i = vw * 32 + lane;
        const float xi = i < E ? x[i] : 0.0f;
        double sum = i < E ? (double)(xi * xi) : 0.0;
        for (uint32_t j = i + threads; j < E; j += threads)
            sum += (double)(x[j] * x[j]);
        sum = warp_sum_double(sum);
        if (lane == 0)
            part[vw] = sum;
    }
    __syncthreads();
    const float scale = rms_scale(part, vwarps, E, eps);
    const float *w = *w_at;
    for (uint32_t b = warp; b < blocks; b += warps) {
        const uint32_t j = b * ENG_GPU_QK + lane;
        const float scaled = x[j] * scale;
        quantize_block_warp(scaled * w[j], &act[b]);
    }
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
    follow_previous_kernel();
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
// blocks per pass and eight passes unrolled, so the row's loads are in
// flight together (up to 1,024 columns: one round trip); then
// eight threads walk their lane's chain of fused multiply-adds over the
// blocks from shared memory (the CPU's order), a ninth the minimum term's,
// and the eight are folded as the CPU folds them.
// Warps (rows) per block of the one-token kernel: eight share a prologue's
// blocks (18 for SmolLM2's 576 values: three rounds a warp, not five).
constexpr int kFastWarps = 8;
constexpr uint32_t kMatvec1MaxBlocks = 128; // cols up to 4,096 (44 KiB of shared memory)
constexpr int kMaxProductMatrices = 3;      // q k v: the most one launch multiplies
constexpr uint32_t kMatvec1MaxRows = 16384;

// Floats of shared memory a prologue's activation blocks take.
__host__ __device__ constexpr size_t act_floats(uint32_t blocks)
{
    return blocks * sizeof(eng_gpu_act_block) / sizeof(float);
}

// Block b's weight words for lane k: Q4_1, the scales (d | m << 16) and the
// lane's packed nibbles; Q8_0, the scale and the lane's four values.
__device__ __forceinline__ void weight_words(const eng_gpu_matrix &w, uint32_t r, uint32_t blocks,
                                             uint32_t b, int k, bool q41, uint32_t *head,
                                             uint32_t *body)
{
    if (q41) {
        const uint8_t *block = (const uint8_t *)w.data + ((size_t)r * blocks + b) * 20;
        *head = *(const uint32_t *)block;
        *body = *(const uint32_t *)(block + 4 + 4 * (k & 3));
    } else {
        const uint16_t *h =
            (const uint16_t *)((const uint8_t *)w.data + ((size_t)r * blocks + b) * 34);
        *head = h[0];
        *body = (uint32_t)h[1 + 2 * k] | (uint32_t)h[2 + 2 * k] << 16;
    }
}

// Block b of the row against the activation block: lane k's integer sum and
// the block's scale into shared memory (the minimum term's too for Q4_1).
__device__ __forceinline__ void product_block(bool q41, uint32_t head, uint32_t body,
                                              const eng_gpu_act_block *a, int k, uint32_t b,
                                              float *lanes, float *scale, float *wms, float *ass)
{
    int8_t s4[4];
    *(uint32_t *)s4 = *(const uint32_t *)(a->qs + 4 * k);
    const float ad = half_to_float(a->d);
    int sum;
    const float wd = half_to_float((uint16_t)(head & 0xffffu));
    if (q41) {
        uint8_t u[4];
        for (int i = 0; i < 4; i++)
            u[i] = (uint8_t)((body >> (8 * i + (k >= 4 ? 4 : 0))) & 0x0f);
        sum = quad_us(u, s4);
        if (k == 0) {
            wms[b] = half_to_float((uint16_t)(head >> 16));
            ass[b] = half_to_float(a->s);
        }
    } else {
        int8_t x[4];
        *(uint32_t *)x = body;
        sum = quad_ss(x, s4);
    }
    lanes[b * 8 + k] = (float)sum;
    if (k == 0)
        scale[b] = wd * ad;
}

// Passes of a row's blocks whose weights are read before the wait for the
// kernel before (four blocks a pass: up to 32 blocks, 1,024 columns).
constexpr int kPrefetchPasses = 8;

__global__ void matvec1_kernel(const eng_gpu_matrix *mats, float *const *ys, int count,
                               const eng_gpu_act_block *act, bool accumulate, uint32_t max_blocks,
                               eng_gpu_prologue pro)
{
    let_next_kernel_launch();
    // The prologue's activation blocks, then per warp: lanes[max_blocks * 8],
    // scale, wm, as [max_blocks].
    extern __shared__ float smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *lanes = smem + (pro.kind != ENG_GPU_PROLOGUE_NONE ? act_floats(max_blocks) : 0) +
                   (size_t)warp * max_blocks * 11;
    float *scale = lanes + (size_t)max_blocks * 8, *wms = scale + max_blocks,
          *ass = wms + max_blocks;
    // Before the wait, what the step does not compute: the warp's matrix and
    // row (the matrices' row counts all at once, not one after the other),
    // and the row's first weights. Their latency hides under the kernel
    // before and the prologue.
    uint32_t r = blockIdx.x * kFastWarps + warp, counts[kMaxProductMatrices];
#pragma unroll
    for (int i = 0; i < kMaxProductMatrices; i++)
        counts[i] = i < count ? mats[i].rows : 0;
    int m = 0;
    while (m < count && r >= (m < kMaxProductMatrices ? counts[m] : mats[m].rows)) {
        r -= m < kMaxProductMatrices ? counts[m] : mats[m].rows;
        m++;
    }
    const bool active = m < count;
    const eng_gpu_matrix w = mats[active ? m : 0];
    float *const y = active ? ys[m] : nullptr;
    const uint32_t blocks = w.cols / ENG_GPU_QK;
    const int k = lane % 8;
    const bool q41 = w.type == ENG_TYPE_Q4_1;
    uint32_t head[kPrefetchPasses], body[kPrefetchPasses];
#pragma unroll
    for (int i = 0; i < kPrefetchPasses; i++) {
        const uint32_t b = lane / 8 + 4 * i;
        head[i] = body[i] = 0;
        if (active && b < blocks)
            weight_words(w, r, blocks, b, k, q41, &head[i], &body[i]);
    }
    wait_for_previous_kernel();
    const float prior = active && accumulate && lane == 0 ? y[r] : 0.0f;
    if (pro.kind == ENG_GPU_PROLOGUE_RMS) {
        eng_gpu_act_block *own = (eng_gpu_act_block *)smem;
        rms_norm_quant_row(pro.x, pro.norm, pro.n, pro.eps, own);
        __syncthreads();
        act = own;
    }
    if (!active)
        return; // the whole warp: rows past the last matrix
#pragma unroll
    for (int i = 0; i < kPrefetchPasses; i++) {
        const uint32_t b = lane / 8 + 4 * i;
        if (b < blocks)
            product_block(q41, head[i], body[i], act + b, k, b, lanes, scale, wms, ass);
    }
    for (uint32_t b = lane / 8 + 4 * kPrefetchPasses; b < blocks; b += 4) {
        uint32_t h, v;
        weight_words(w, r, blocks, b, k, q41, &h, &v);
        product_block(q41, h, v, act + b, k, b, lanes, scale, wms, ass);
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
        y[r] = accumulate ? v + prior : v;
    }
}
size_t matvec1_shared(uint32_t max_blocks, bool prologue)
{
    return ((prologue ? act_floats(max_blocks) : 0) + (size_t)kFastWarps * max_blocks * 11) *
           sizeof(float);
}

cudaError_t launch_matvec1(cudaStream_t s, const eng_gpu_matrix *mats_dev, uint32_t total_rows,
                           uint32_t max_cols, float *const *ys_dev, int count,
                           const eng_gpu_act_block *act, bool accumulate,
                           const eng_gpu_prologue &pro)
{
    const uint32_t max_blocks = max_cols / ENG_GPU_QK;
    const size_t shared = matvec1_shared(max_blocks, pro.kind != ENG_GPU_PROLOGUE_NONE);
    const uint32_t grid = (total_rows + kFastWarps - 1) / kFastWarps;
    return launch_overlapped(matvec1_kernel, dim3(grid), dim3(kFastWarps * 32), shared, s, mats_dev,
                             ys_dev, count, act, accumulate, max_blocks, pro);
}

} // namespace

bool eng_gpu_matvec_prologue_fits(uint32_t cols)
{
    return cols / ENG_GPU_QK <= kMatvec1MaxBlocks &&
           matvec1_shared(cols / ENG_GPU_QK, true) <= 48 * 1024;
}

cudaError_t eng_gpu_matvec_prologue(cudaStream_t s, const eng_gpu_matrix *mats_dev,
                                    uint32_t total_rows, uint32_t cols, float *const *ys_dev,
                                    int count, const eng_gpu_prologue &pro, bool accumulate)
{
    if (pro.kind == ENG_GPU_PROLOGUE_NONE || pro.n != cols || !eng_gpu_matvec_prologue_fits(cols))
        return cudaErrorInvalidValue;
    return launch_matvec1(s, mats_dev, total_rows, cols, ys_dev, count, nullptr, accumulate, pro);
}

cudaError_t eng_gpu_matvec(cudaStream_t s, const eng_gpu_matrix *mats_dev, uint32_t total_rows,
                           uint32_t max_cols, float *const *ys_dev, int count,
                           const eng_gpu_act_block *act, int32_t T, bool accumulate)
{
    // The one-token kernel for a layer's products; the output's 49,152
    // rows took it 57 us on the H200, eight threads a row 34 us.
    if (T == 1 && max_cols / ENG_GPU_QK <= kMatvec1MaxBlocks && total_rows <= kMatvec1MaxRows) {
        const eng_gpu_prologue none = {ENG_GPU_PROLOGUE_NONE, nullptr, nullptr, 0, 0.0f};
        return launch_matvec1(s, mats_dev, total_rows, max_cols, ys_dev, count, act, accumulate,
                              none);
    }
    // Small blocks (8 rows each) spread a layer's few hundred rows over
    // every SM.
    const uint32_t threads = 64, rows_per_block = threads / 8;
    const uint32_t grid = (total_rows + rows_per_block - 1) / rows_per_block;
    if (T == 1)
        return launch_overlapped(matvec_kernel<1>, dim3(grid), dim3(threads), 0, s, mats_dev,
                                 ys_dev, count, act, T, accumulate);
    else
        return launch_overlapped(matvec_kernel<8>, dim3(grid), dim3(threads), 0, s, mats_dev,
                                 ys_dev, count, act, T, accumulate);
}
