/* Dot products, scalar. For the 32-value formats, F32 and F16 each routine
 * reproduces its AVX2 twin in dot_avx2.c exactly: a block's 32 products are
 * summed four at a time into eight integer lanes (lane k holds values
 * 4k..4k+3, as vpmaddubsw + vpmaddwd leave them), each lane is scaled into
 * its own float accumulator with a fused multiply-add, and the eight lanes
 * are summed at the end in the order of an extract/movehl/movehdup
 * reduction. The Q4_1/Q5_1 minimum term is a separate fused sum added last.
 * BF16 exists only here (both instruction sets use it). */
#include "kernels/kernels_internal.h"

#include <math.h>
#include <string.h>

/* ---- Emulation of the AVX2 integer steps ---- */

static inline int32_t saturate_i16(int32_t v)
{
    return v < -32768 ? -32768 : v > 32767 ? 32767 : v;
}

/* vpmaddubsw then vpmaddwd by ones: four unsigned x signed products, pairs
 * saturated to 16 bits. */
static inline int32_t quad_us(const uint8_t *u, const int8_t *s)
{
    return saturate_i16(u[0] * s[0] + u[1] * s[1]) + saturate_i16(u[2] * s[2] + u[3] * s[3]);
}

/* Signed x signed through vpsignb: |x| (128 for -128) against y negated
 * where x is negative (-(-128) stays -128) and zeroed where x is zero. */
static inline void sign_split(int8_t x, int8_t y, uint8_t *ax, int8_t *sy)
{
    *ax = (uint8_t)(x < 0 ? -(int)x : x);
    *sy = x == 0 ? 0 : x > 0 ? y : (y == -128 ? (int8_t)-128 : (int8_t)-y);
}

static void lanes_us(const uint8_t u[ENG_QK], const int8_t s[ENG_QK], int32_t lanes[8])
{
    for (int k = 0; k < 8; k++)
        lanes[k] = quad_us(u + 4 * k, s + 4 * k);
}

static void lanes_ss(const int8_t x[ENG_QK], const int8_t y[ENG_QK], int32_t lanes[8])
{
    uint8_t ax[ENG_QK];
    int8_t sy[ENG_QK];
    for (int i = 0; i < ENG_QK; i++)
        sign_split(x[i], y[i], &ax[i], &sy[i]);
    lanes_us(ax, sy, lanes);
}

static inline void lanes_fma(float acc[8], float d, const int32_t lanes[8])
{
    for (int k = 0; k < 8; k++)
        acc[k] = fmaf(d, (float)lanes[k], acc[k]);
}

/* extractf128 + addps, movehl + addps, movehdup + addss. */
static inline float hsum8(const float a[8])
{
    const float r0 = a[4] + a[0], r1 = a[5] + a[1], r2 = a[6] + a[2], r3 = a[7] + a[3];
    return (r0 + r2) + (r1 + r3);
}

/* Element i of a 32-value nibble block: low nibbles first, then high. */
static inline void unpack_nibbles(const uint8_t qs[ENG_QK / 2], uint8_t out[ENG_QK])
{
    for (int j = 0; j < ENG_QK / 2; j++) {
        out[j] = qs[j] & 0x0f;
        out[j + ENG_QK / 2] = qs[j] >> 4;
    }
}

static inline uint32_t load_u32(const uint8_t b[4])
{
    uint32_t v;
    memcpy(&v, b, sizeof v);
    return v;
}

/* ---- 32-value formats ---- */

float eng_dot_q4_0_scalar(size_t n, const void *w, const void *act)
{
    const eng_block_q4_0 *x = w;
    const eng_block_q8_0 *y = act;
    float acc[8] = {0};
    for (size_t b = 0; b < n / ENG_QK; b++) {
        uint8_t u[ENG_QK];
        int8_t q[ENG_QK];
        int32_t lanes[8];
        unpack_nibbles(x[b].qs, u);
        for (int i = 0; i < ENG_QK; i++)
            q[i] = (int8_t)(u[i] - 8);
        lanes_ss(q, y[b].qs, lanes);
        lanes_fma(acc, eng_f16_to_f32(x[b].d) * eng_f16_to_f32(y[b].d), lanes);
    }
    return hsum8(acc);
}

float eng_dot_q4_1_scalar(size_t n, const void *w, const void *act)
{
    const eng_block_q4_1 *x = w;
    const eng_block_q8_1 *y = act;
    float acc[8] = {0};
    float summs = 0.0f;
    for (size_t b = 0; b < n / ENG_QK; b++) {
        uint8_t u[ENG_QK];
        int32_t lanes[8];
        summs = fmaf(eng_f16_to_f32(x[b].m), eng_f16_to_f32(y[b].s), summs);
        unpack_nibbles(x[b].qs, u);
        lanes_us(u, y[b].qs, lanes);
        lanes_fma(acc, eng_f16_to_f32(x[b].d) * eng_f16_to_f32(y[b].d), lanes);
    }
    return hsum8(acc) + summs;
}

float eng_dot_q5_0_scalar(size_t n, const void *w, const void *act)
{
    const eng_block_q5_0 *x = w;
    const eng_block_q8_0 *y = act;
    float acc[8] = {0};
    for (size_t b = 0; b < n / ENG_QK; b++) {
        uint8_t u[ENG_QK];
        int8_t q[ENG_QK];
        int32_t lanes[8];
        const uint32_t high = load_u32(x[b].qh);
        unpack_nibbles(x[b].qs, u);
        for (int i = 0; i < ENG_QK; i++)
            q[i] = (int8_t)((u[i] | (((high >> i) & 1u) << 4)) - 16);
        lanes_ss(q, y[b].qs, lanes);
        lanes_fma(acc, eng_f16_to_f32(x[b].d) * eng_f16_to_f32(y[b].d), lanes);
    }
    return hsum8(acc);
}

float eng_dot_q5_1_scalar(size_t n, const void *w, const void *act)
{
    const eng_block_q5_1 *x = w;
    const eng_block_q8_1 *y = act;
    float acc[8] = {0};
    float summs = 0.0f;
    for (size_t b = 0; b < n / ENG_QK; b++) {
        uint8_t u[ENG_QK];
        int32_t lanes[8];
        const uint32_t high = load_u32(x[b].qh);
        summs = fmaf(eng_f16_to_f32(x[b].m), eng_f16_to_f32(y[b].s), summs);
        unpack_nibbles(x[b].qs, u);
        for (int i = 0; i < ENG_QK; i++)
            u[i] = (uint8_t)(u[i] | (((high >> i) & 1u) << 4));
        lanes_us(u, y[b].qs, lanes);
        lanes_fma(acc, eng_f16_to_f32(x[b].d) * eng_f16_to_f32(y[b].d), lanes);
    }
    return hsum8(acc) + summs;
}

float eng_dot_q8_0_scalar(size_t n, const void *w, const void *act)
{
    const eng_block_q8_0 *x = w;
    const eng_block_q8_0 *y = act;
    float acc[8] = {0};
    for (size_t b = 0; b < n / ENG_QK; b++) {
        int32_t lanes[8];
        lanes_ss(x[b].qs, y[b].qs, lanes);
        lanes_fma(acc, eng_f16_to_f32(x[b].d) * eng_f16_to_f32(y[b].d), lanes);
    }
    return hsum8(acc);
}

/* ---- Float formats ----
 * Four 8-lane accumulators over steps of 32, reduced pairwise, then two
 * horizontal adds; the tail (n % 32) is added one product at a time. */

static float reduce_4x8(float sum[4][8])
{
    for (int k = 0; k < 8; k++) {
        sum[0][k] += sum[2][k];
        sum[1][k] += sum[3][k];
    }
    for (int k = 0; k < 8; k++)
        sum[0][k] += sum[1][k];
    float t0[4];
    for (int k = 0; k < 4; k++)
        t0[k] = sum[0][k] + sum[0][k + 4];
    return (t0[0] + t0[1]) + (t0[2] + t0[3]);
}

/* llama.cpp's tail after the last whole step of 32, as its compiler laid it
 * out: groups of eight, then one of four, rounded products added in order;
 * the last one to three products fused. */
float eng_f32_tail(float total, const float *x, const float *y, size_t i, size_t n)
{
    for (; n - i >= 8; i += 8)
        for (size_t k = i; k < i + 8; k++)
            total += x[k] * y[k];
    if (n - i >= 4) {
        for (size_t k = i; k < i + 4; k++)
            total += x[k] * y[k];
        i += 4;
    }
    for (; i < n; i++)
        total = fmaf(x[i], y[i], total);
    return total;
}

float eng_dot_f32_scalar(size_t n, const void *w, const void *act)
{
    const float *x = w, *y = act;
    float sum[4][8] = {{0}};
    const size_t whole = n & ~(size_t)31;
    for (size_t i = 0; i < whole; i += 32)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 8; k++)
                sum[j][k] = fmaf(x[i + 8 * j + k], y[i + 8 * j + k], sum[j][k]);
    return eng_f32_tail(reduce_4x8(sum), x, y, whole, n);
}

float eng_dot_f16_scalar(size_t n, const void *w, const void *act)
{
    const eng_f16 *x = w, *y = act;
    float sum[4][8] = {{0}};
    const size_t whole = n & ~(size_t)31;
    for (size_t i = 0; i < whole; i += 32)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 8; k++) {
                const size_t e = i + 8 * (size_t)j + (size_t)k;
                sum[j][k] = fmaf(eng_f16_to_f32(x[e]), eng_f16_to_f32(y[e]), sum[j][k]);
            }
    double total = reduce_4x8(sum);
    for (size_t i = whole; i < n; i++)
        total += (double)(eng_f16_to_f32(x[i]) * eng_f16_to_f32(y[i]));
    return (float)total;
}

/* llama.cpp's AVX2 BF16 product: four accumulators (c1 + c3) + (c2 + c4),
 * an extract/movehl/movehdup sum, the tail in double. */
float eng_dot_bf16_scalar(size_t n, const void *w, const void *act)
{
    const uint16_t *x = w, *y = act;
    float c[4][8] = {{0}};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 8; k++) {
                const size_t e = i + 8 * (size_t)j + (size_t)k;
                c[j][k] = fmaf(eng_bf16_to_f32(x[e]), eng_bf16_to_f32(y[e]), c[j][k]);
            }
    float lanes[8];
    for (int k = 0; k < 8; k++)
        lanes[k] = (c[0][k] + c[2][k]) + (c[1][k] + c[3][k]);
    double total = hsum8(lanes);
    for (; i < n; i++)
        total += (double)(eng_bf16_to_f32(x[i]) * eng_bf16_to_f32(y[i]));
    return (float)total;
}

/* ---- K formats (x Q8_K) ---- */

/* Q4_K and Q5_K as llama.cpp's AVX2 routines sum them: eight integer lanes
 * per super-block (scaled per 32-value sub-block) into eight float lanes;
 * the minimum terms into four float lanes (Q4_K) or one fused sum (Q5_K). */
static float dot_k_min_lanes(size_t n, const void *w, const void *act, bool five_bits)
{
    const eng_block_q8_k *y = act;
    float acc[8] = {0}, acc_m[4] = {0}, summs = 0.0f;
    for (size_t b = 0; b < n / ENG_QK_K; b++) {
        const uint8_t *packed, *qs, *qh = NULL;
        eng_f16 d16, dmin16;
        if (five_bits) {
            const eng_block_q5_k *x = (const eng_block_q5_k *)w + b;
            packed = x->scales, qs = x->qs, qh = x->qh, d16 = x->d, dmin16 = x->dmin;
        } else {
            const eng_block_q4_k *x = (const eng_block_q4_k *)w + b;
            packed = x->scales, qs = x->qs, d16 = x->d, dmin16 = x->dmin;
        }
        const float d = y[b].d * eng_f16_to_f32(d16);
        const float dmin = -y[b].d * eng_f16_to_f32(dmin16);
        uint8_t scale[8], min[8];
        eng_k_scales(packed, scale, min);
        int32_t prod[4];
        for (int m = 0; m < 4; m++) {
            const int16_t s0 = (int16_t)(y[b].bsums[4 * m] + y[b].bsums[4 * m + 1]);
            const int16_t s1 = (int16_t)(y[b].bsums[4 * m + 2] + y[b].bsums[4 * m + 3]);
            prod[m] = min[2 * m] * s0 + min[2 * m + 1] * s1;
        }
        if (five_bits) {
            summs = fmaf(dmin, (float)(prod[0] + prod[1] + prod[2] + prod[3]), summs);
        } else {
            for (int m = 0; m < 4; m++)
                acc_m[m] = fmaf(dmin, (float)prod[m], acc_m[m]);
        }
        int32_t lanes[8] = {0};
        for (int j = 0; j < 4; j++) { /* 64 values: 32 low nibbles, 32 high */
            const int8_t *q8 = y[b].qs + 64 * j;
            uint8_t lo[32], hi[32];
            for (int l = 0; l < 32; l++) {
                lo[l] = qs[32 * j + l] & 0x0f;
                hi[l] = qs[32 * j + l] >> 4;
                if (qh) {
                    lo[l] = (uint8_t)(lo[l] | (((qh[l] >> (2 * j)) & 1) << 4));
                    hi[l] = (uint8_t)(hi[l] | (((qh[l] >> (2 * j + 1)) & 1) << 4));
                }
            }
            for (int k = 0; k < 8; k++)
                lanes[k] += scale[2 * j] * quad_us(lo + 4 * k, q8 + 4 * k) +
                            scale[2 * j + 1] * quad_us(hi + 4 * k, q8 + 32 + 4 * k);
        }
        lanes_fma(acc, d, lanes);
    }
    if (five_bits)
        return hsum8(acc) + summs;
    const float m = (acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]);
    return hsum8(acc) + m;
}

float eng_dot_q4_k_scalar(size_t n, const void *w, const void *act)
{
    return dot_k_min_lanes(n, w, act, false);
}

float eng_dot_q5_k_scalar(size_t n, const void *w, const void *act)
{
    return dot_k_min_lanes(n, w, act, true);
}

/* Q6_K as llama.cpp's AVX2 routine sums it: unsigned 6-bit values against
 * the activations in eight lanes (scaled per 16 values), the offset of 32
 * taken off per lane through the activations' group sums. */
float eng_dot_q6_k_scalar(size_t n, const void *w, const void *act)
{
    const eng_block_q6_k *x = w;
    const eng_block_q8_k *y = act;
    float acc[8] = {0};
    for (size_t b = 0; b < n / ENG_QK_K; b++) {
        const int8_t *sc = x[b].scales;
        int32_t lanes[8] = {0};
        for (int half = 0; half < 2; half++) { /* 128 values each */
            const uint8_t *ql = x[b].ql + 64 * half, *qh = x[b].qh + 32 * half;
            for (int quarter = 0; quarter < 4; quarter++) {
                uint8_t u[32];
                for (int l = 0; l < 32; l++) {
                    const uint8_t low = quarter % 2 == 0 ? ql[l] : ql[l + 32];
                    const int nib = quarter < 2 ? low & 0x0f : low >> 4;
                    u[l] = (uint8_t)(nib | (((qh[l] >> (2 * quarter)) & 3) << 4));
                }
                const int8_t *q8 = y[b].qs + 128 * half + 32 * quarter;
                for (int k = 0; k < 8; k++)
                    lanes[k] += sc[8 * half + 2 * quarter + k / 4] * quad_us(u + 4 * k, q8 + 4 * k);
            }
        }
        for (int k = 0; k < 8; k++)
            lanes[k] -=
                32 * (y[b].bsums[2 * k] * sc[2 * k] + y[b].bsums[2 * k + 1] * sc[2 * k + 1]);
        lanes_fma(acc, y[b].d * eng_f16_to_f32(x[b].d), lanes);
    }
    return hsum8(acc);
}
