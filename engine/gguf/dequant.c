#include "gguf/dequant.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Each function converts nb blocks. The arithmetic follows the file format's
 * definition in the same order of operations (scale products first, then the
 * quant), so results are bit-identical to ggml's reference dequantization. */

static float half(const uint8_t *p)
{
    return eng_f16_to_f32((eng_f16)(p[0] | (p[1] << 8)));
}

static void dq_f32(const uint8_t *src, float *dst, size_t n)
{
    memcpy(dst, src, n * sizeof(float));
}

static void dq_f16(const uint8_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = half(src + 2 * i);
}

static void dq_bf16(const uint8_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = eng_bf16_to_f32((uint16_t)(src[2 * i] | (src[2 * i + 1] << 8)));
}

/* The 32-element formats: value j of a block takes the low nibble of qs[j],
 * value j + 16 the high nibble; the 5-bit ones add bit j (j + 16) of qh. */

static void dq_q4_0(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t b = 0; b < nb; b++, src += sizeof(eng_block_q4_0), dst += ENG_QK) {
        float d = half(src);
        const uint8_t *qs = src + 2;
        for (int j = 0; j < ENG_QK / 2; j++) {
            dst[j] = d * (float)((qs[j] & 0x0f) - 8);
            dst[j + ENG_QK / 2] = d * (float)((qs[j] >> 4) - 8);
        }
    }
}

static void dq_q4_1(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t b = 0; b < nb; b++, src += sizeof(eng_block_q4_1), dst += ENG_QK) {
        float d = half(src), m = half(src + 2);
        const uint8_t *qs = src + 4;
        for (int j = 0; j < ENG_QK / 2; j++) {
            dst[j] = d * (float)(qs[j] & 0x0f) + m;
            dst[j + ENG_QK / 2] = d * (float)(qs[j] >> 4) + m;
        }
    }
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void dq_q5_0(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t b = 0; b < nb; b++, src += sizeof(eng_block_q5_0), dst += ENG_QK) {
        float d = half(src);
        uint32_t qh = le32(src + 2);
        const uint8_t *qs = src + 6;
        for (int j = 0; j < ENG_QK / 2; j++) {
            int lo = (qs[j] & 0x0f) | (int)((qh >> j) & 1u) << 4;
            int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1u) << 4;
            dst[j] = d * (float)(lo - 16);
            dst[j + ENG_QK / 2] = d * (float)(hi - 16);
        }
    }
}

static void dq_q5_1(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t b = 0; b < nb; b++, src += sizeof(eng_block_q5_1), dst += ENG_QK) {
        float d = half(src), m = half(src + 2);
        uint32_t qh = le32(src + 4);
        const uint8_t *qs = src + 8;
        for (int j = 0; j < ENG_QK / 2; j++) {
            int lo = (qs[j] & 0x0f) | (int)((qh >> j) & 1u) << 4;
            int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1u) << 4;
            dst[j] = d * (float)lo + m;
            dst[j + ENG_QK / 2] = d * (float)hi + m;
        }
    }
}

static void dq_q8_0(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t b = 0; b < nb; b++, src += sizeof(eng_block_q8_0), dst += ENG_QK) {
        float d = half(src);
        for (int j = 0; j < ENG_QK; j++)
            dst[j] = d * (float)(int8_t)src[2 + j];
    }
}

/* The K formats: super-blocks of 256 values in sub-blocks of 16 or 32. */

static void dq_q2_k(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t b = 0; b < nb; b++, src += sizeof(eng_block_q2_k), dst += ENG_QK_K) {
        const uint8_t *scales = src, *qs = src + ENG_QK_K / 16;
        float d = half(src + 80), dmin = half(src + 82);
        /* Each half of 128 values reads 32 bytes of qs four times, two bits
         * a time; each 16 values have their own 4-bit scale and min. */
        for (int v = 0; v < ENG_QK_K; v++) {
            int half_idx = v / 128, shift = 2 * ((v % 128) / 32), l = v % 32;
            int sub = v / 16;
            float dl = d * (float)(scales[sub] & 0x0f);
            float ml = dmin * (float)(scales[sub] >> 4);
            int q = (qs[32 * half_idx + l] >> shift) & 3;
            dst[v] = dl * (float)q - ml;
        }
    }
}

/* Q3_K's sixteen 6-bit scales: low 4 bits in bytes 0..7 (low nibbles for
 * scales 0..7, high nibbles for 8..15), high 2 bits in bytes 8..11. */
static int q3_k_scale(const uint8_t *sc, int s)
{
    int low = s < 8 ? sc[s] & 0x0f : sc[s - 8] >> 4;
    int high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    return (low | high << 4) - 32;
}

static void dq_q3_k(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t b = 0; b < nb; b++, src += sizeof(eng_block_q3_k), dst += ENG_QK_K) {
        const uint8_t *hmask = src, *qs = src + 32, *sc = src + 96;
        float d = half(src + 108);
        for (int v = 0; v < ENG_QK_K; v++) {
            int half_idx = v / 128, shift = 2 * ((v % 128) / 32), l = v % 32;
            int group = v / 32; /* 0..7: the bit of hmask */
            float dl = d * (float)q3_k_scale(sc, v / 16);
            int low = (qs[32 * half_idx + l] >> shift) & 3;
            int q = low - (((hmask[l] >> group) & 1) ? 0 : 4);
            dst[v] = dl * (float)q;
        }
    }
}

static void dq_q4_k(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t b = 0; b < nb; b++, src += sizeof(eng_block_q4_k), dst += ENG_QK_K) {
        float d = half(src), dmin = half(src + 2);
        const uint8_t *sc = src + 4, *qs = src + 16;
        uint8_t scales[8], mins[8];
        eng_k_scales(sc, scales, mins);
        for (int sub = 0; sub < 8; sub++) {
            int scale = scales[sub], min = mins[sub];
            float dl = d * (float)scale, ml = dmin * (float)min;
            const uint8_t *q = qs + 32 * (sub / 2);
            int shift = 4 * (sub % 2);
            for (int l = 0; l < 32; l++)
                dst[32 * sub + l] = dl * (float)((q[l] >> shift) & 0x0f) - ml;
        }
    }
}

static void dq_q5_k(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t b = 0; b < nb; b++, src += sizeof(eng_block_q5_k), dst += ENG_QK_K) {
        float d = half(src), dmin = half(src + 2);
        const uint8_t *sc = src + 4, *qh = src + 16, *qs = src + 48;
        uint8_t scales[8], mins[8];
        eng_k_scales(sc, scales, mins);
        for (int sub = 0; sub < 8; sub++) {
            int scale = scales[sub], min = mins[sub];
            float dl = d * (float)scale, ml = dmin * (float)min;
            const uint8_t *q = qs + 32 * (sub / 2);
            int shift = 4 * (sub % 2);
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 0x0f) | ((qh[l] >> sub) & 1) << 4;
                dst[32 * sub + l] = dl * (float)v - ml;
            }
        }
    }
}

static void dq_q6_k(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t b = 0; b < nb; b++, src += sizeof(eng_block_q6_k), dst += ENG_QK_K) {
        const uint8_t *ql = src, *qh = src + 128;
        const int8_t *sc = (const int8_t *)(src + 192);
        float d = half(src + 208);
        /* Each half of 128 values: 64 bytes of ql (low nibbles for the first
         * 64 values, high for the next), 32 bytes of qh (2 bits per group of 32). */
        for (int v = 0; v < ENG_QK_K; v++) {
            int half_idx = v / 128, w = v % 128, l = w % 64, group = w / 32;
            int low = (ql[64 * half_idx + l] >> (4 * (w / 64))) & 0x0f;
            int high = (qh[32 * half_idx + w % 32] >> (2 * group)) & 3;
            int q = (low | high << 4) - 32;
            dst[v] = d * (float)sc[v / 16] * (float)q;
        }
    }
}

ortmem_status eng_dequantize(uint32_t type, const void *src, float *dst, size_t n, eng_error *err)
{
    eng_type_traits tr = eng_type_traits_of(type);
    void (*convert)(const uint8_t *, float *, size_t) = NULL;
    bool per_value = false;
    switch (type) {
    case ENG_TYPE_F32: convert = dq_f32, per_value = true; break;
    case ENG_TYPE_F16: convert = dq_f16, per_value = true; break;
    case ENG_TYPE_BF16: convert = dq_bf16, per_value = true; break;
    case ENG_TYPE_Q4_0: convert = dq_q4_0; break;
    case ENG_TYPE_Q4_1: convert = dq_q4_1; break;
    case ENG_TYPE_Q5_0: convert = dq_q5_0; break;
    case ENG_TYPE_Q5_1: convert = dq_q5_1; break;
    case ENG_TYPE_Q8_0: convert = dq_q8_0; break;
    case ENG_TYPE_Q2_K: convert = dq_q2_k; break;
    case ENG_TYPE_Q3_K: convert = dq_q3_k; break;
    case ENG_TYPE_Q4_K: convert = dq_q4_k; break;
    case ENG_TYPE_Q5_K: convert = dq_q5_k; break;
    case ENG_TYPE_Q6_K: convert = dq_q6_k; break;
    default: break;
    }
    if (!convert)
        return eng_fail(err, ORTMEM_E_UNSUPPORTED, "dequantize: type %u (%s) has no conversion",
                        type, tr.name ? tr.name : "unknown");
    if (n % tr.block_elems)
        return eng_fail(err, ORTMEM_E_ALIGN,
                        "dequantize %s: %zu values is not a whole number of %u-value blocks",
                        tr.name, n, tr.block_elems);
    if (n == 0)
        return ORTMEM_OK;
    if (!src || !dst)
        return eng_fail(err, ORTMEM_E_INVALID, "dequantize %s: src %p, dst %p", tr.name, src,
                        (void *)dst);
    convert(src, dst, per_value ? n : n / tr.block_elems);
    return ORTMEM_OK;
}
