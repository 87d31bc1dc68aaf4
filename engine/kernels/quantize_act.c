/* Activation quantization, scalar. Q8_0 and Q8_1 reproduce what the AVX2
 * routines in dot_avx2.c compute (llama.cpp's x86 path): the block's largest
 * magnitude through the same max tree, d = amax / 127 stored as a half,
 * values multiplied by 127 / amax (not 1 / d), rounded to nearest even,
 * converted with x86's out-of-range rule and packed with saturation. Q8_K
 * has no SIMD form in llama.cpp; this is its one definition. */
#include "kernels/kernels_internal.h"

#include <math.h>
#include <string.h>

/* x86 maxps: the first operand when it is greater, else the second (so a
 * NaN in either yields the second). */
static inline float x86_max(float a, float b)
{
    return a > b ? a : b;
}

/* The largest |x| of 32 values, reduced in the AVX2 routine's order. */
static float block_amax(const float *x)
{
    float lane[8];
    for (int k = 0; k < 8; k++)
        lane[k] = fabsf(x[k]);
    for (int j = 1; j < 4; j++)
        for (int k = 0; k < 8; k++)
            lane[k] = x86_max(lane[k], fabsf(x[8 * j + k]));
    float quad[4];
    for (int k = 0; k < 4; k++)
        quad[k] = x86_max(lane[k + 4], lane[k]);
    return x86_max(x86_max(quad[0], quad[2]), x86_max(quad[1], quad[3]));
}

/* Round to nearest even, then cvtps2dq: NaN and out-of-range give INT32_MIN. */
static inline int32_t round_to_i32(float v)
{
    float r;
    if (fabsf(v) < 4194304.0f) { /* below 2^22 adding 1.5 * 2^23 rounds to an integer */
        r = (v + 12582912.0f) - 12582912.0f;
    } else {
        r = nearbyintf(v);
    }
    if (!(r >= -2147483648.0f && r < 2147483648.0f))
        return INT32_MIN;
    return (int32_t)r;
}

static inline int8_t saturate_i8(int32_t v)
{
    return (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
}

/* Shared by Q8_0 and Q8_1: the scale and the 32 rounded values. */
static float quantize_block32(const float *x, int32_t q[ENG_QK])
{
    const float amax = block_amax(x);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < ENG_QK; i++)
        q[i] = round_to_i32(x[i] * id);
    return d;
}

void eng_quantize_q8_0_scalar(const float *x, void *out, size_t n)
{
    eng_block_q8_0 *blocks = out;
    for (size_t b = 0; b < n / ENG_QK; b++, x += ENG_QK) {
        int32_t q[ENG_QK];
        const float d = quantize_block32(x, q);
        blocks[b].d = eng_f32_to_f16(d);
        for (int i = 0; i < ENG_QK; i++)
            blocks[b].qs[i] = saturate_i8(q[i]);
    }
}

void eng_quantize_q8_1_scalar(const float *x, void *out, size_t n)
{
    eng_block_q8_1 *blocks = out;
    for (size_t b = 0; b < n / ENG_QK; b++, x += ENG_QK) {
        int32_t q[ENG_QK];
        const float d = quantize_block32(x, q);
        uint32_t sum = 0; /* the SIMD sum wraps; so does this one */
        for (int i = 0; i < ENG_QK; i++)
            sum += (uint32_t)q[i];
        blocks[b].d = eng_f32_to_f16(d);
        blocks[b].s = eng_f32_to_f16(d * (float)(int32_t)sum);
        for (int i = 0; i < ENG_QK; i++)
            blocks[b].qs[i] = saturate_i8(q[i]);
    }
}

/* llama.cpp's nearest-integer trick: exact round-half-even below 2^22. */
static inline int nearest_int(float v)
{
    const float f = v + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

void eng_quantize_q8_k_scalar(const float *x, void *out, size_t n)
{
    eng_block_q8_k *blocks = out;
    for (size_t b = 0; b < n / ENG_QK_K; b++, x += ENG_QK_K) {
        eng_block_q8_k *y = &blocks[b];
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < ENG_QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(y, 0, sizeof *y);
            continue;
        }
        /* Scaled by -127 / max (the signed extreme maps to -127). */
        const float iscale = -127.0f / max;
        for (int j = 0; j < ENG_QK_K; j++) {
            const int v = nearest_int(iscale * x[j]);
            y->qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < ENG_QK_K / 16; g++) {
            int sum = 0;
            for (int i = 0; i < 16; i++)
                sum += y->qs[g * 16 + i];
            y->bsums[g] = (int16_t)sum;
        }
        y->d = 1.0f / iscale;
    }
}

void eng_quantize_f16_scalar(const float *x, void *out, size_t n)
{
    eng_f16 *h = out;
    for (size_t i = 0; i < n; i++)
        h[i] = eng_f32_to_f16(x[i]);
}

/* llama.cpp's rounding to bfloat16: nearest even, NaN kept quiet. */
void eng_quantize_bf16_scalar(const float *x, void *out, size_t n)
{
    uint16_t *h = out;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        if ((u & 0x7fffffffu) > 0x7f800000u)
            h[i] = (uint16_t)((u >> 16) | 64u);
        else
            h[i] = (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
    }
}
