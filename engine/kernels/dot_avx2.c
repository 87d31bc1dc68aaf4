/* AVX2 + FMA + F16C routines. This file alone is compiled with those
 * extensions (meson.build), so the library still loads and runs on a CPU
 * without them; matmul.c calls in here only when eng_isa says AVX2. The
 * operation order is llama.cpp's x86 one (see dot_scalar.c for the scalar
 * twin of every routine). */
#include "kernels/kernels_internal.h"

#include <immintrin.h>
#include <string.h>

/* ---- Helpers ---- */

static inline float hsum_ps(__m256 v)
{
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

static inline int32_t hsum_epi32(__m256i v)
{
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(r);
}

static inline float half_to_float(eng_f16 h)
{
    return _cvtsh_ss(h);
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles, then high nibbles. */
static inline __m256i unpack_nibbles(const uint8_t *qs)
{
    const __m128i packed = _mm_loadu_si128((const __m128i *)qs);
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

/* Bit i of four little-endian bytes -> byte i all ones or zero. */
static inline __m256i bits_to_bytes(const uint8_t *bits)
{
    uint32_t word;
    memcpy(&word, bits, sizeof word);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)word),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    const __m256i select = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
}

/* Unsigned x signed bytes, four products per 32-bit lane, as floats. */
static inline __m256 lanes_us(__m256i u, __m256i s)
{
    const __m256i pairs = _mm256_maddubs_epi16(u, s);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), pairs));
}

/* Signed x signed bytes through the sign trick. */
static inline __m256 lanes_ss(__m256i x, __m256i y)
{
    return lanes_us(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* ---- Activation quantization ---- */

/* Scale and rounded values of one 32-value block; returns d. */
static inline float quantize_block32(const float *x, __m256i q[4])
{
    __m256 v[4];
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int j = 0; j < 4; j++)
        v[j] = _mm256_loadu_ps(x + 8 * j);
    __m256 amax = _mm256_andnot_ps(sign, v[0]);
    for (int j = 1; j < 4; j++)
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[j]));
    __m128 m = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float max = _mm_cvtss_f32(m);
    const float d = max / 127.0f;
    const __m256 id = _mm256_set1_ps(max != 0.0f ? 127.0f / max : 0.0f);
    for (int j = 0; j < 4; j++)
        q[j] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[j], id),
                                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return d;
}

static inline void store_packed(const __m256i q[4], int8_t *out)
{
    const __m256i w01 = _mm256_packs_epi32(q[0], q[1]);
    const __m256i w23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i bytes = _mm256_packs_epi16(w01, w23);
    /* The packs work per 128-bit half; put the dwords back in order. */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256((__m256i *)out, _mm256_permutevar8x32_epi32(bytes, order));
}

void eng_quantize_q8_0_avx2(const float *x, void *out, size_t n)
{
    eng_block_q8_0 *blocks = out;
    for (size_t b = 0; b < n / ENG_QK; b++, x += ENG_QK) {
        __m256i q[4];
        const float d = quantize_block32(x, q);
        blocks[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        store_packed(q, blocks[b].qs);
    }
}

void eng_quantize_q8_1_avx2(const float *x, void *out, size_t n)
{
    eng_block_q8_1 *blocks = out;
    for (size_t b = 0; b < n / ENG_QK; b++, x += ENG_QK) {
        __m256i q[4];
        const float d = quantize_block32(x, q);
        const int32_t sum = hsum_epi32(
            _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
        blocks[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        blocks[b].s = _cvtss_sh(d * (float)sum, _MM_FROUND_TO_NEAREST_INT);
        store_packed(q, blocks[b].qs);
    }
}

void eng_quantize_f16_avx2(const float *x, void *out, size_t n)
{
    eng_f16 *h = out;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        h[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

/* ---- 32-value formats ---- */

float eng_dot_q4_0_avx2(size_t n, const void *w, const void *act)
{
    const eng_block_q4_0 *x = w;
    const eng_block_q8_0 *y = act;
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < n / ENG_QK; b++) {
        const __m256 d = _mm256_set1_ps(half_to_float(x[b].d) * half_to_float(y[b].d));
        const __m256i q = _mm256_sub_epi8(unpack_nibbles(x[b].qs), _mm256_set1_epi8(8));
        const __m256 p = lanes_ss(q, _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc = _mm256_fmadd_ps(d, p, acc);
    }
    return hsum_ps(acc);
}

float eng_dot_q4_1_avx2(size_t n, const void *w, const void *act)
{
    const eng_block_q4_1 *x = w;
    const eng_block_q8_1 *y = act;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f;
    for (size_t b = 0; b < n / ENG_QK; b++) {
        summs = __builtin_fmaf(half_to_float(x[b].m), half_to_float(y[b].s), summs);
        const __m256 d = _mm256_set1_ps(half_to_float(x[b].d) * half_to_float(y[b].d));
        const __m256 p =
            lanes_us(unpack_nibbles(x[b].qs), _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc = _mm256_fmadd_ps(d, p, acc);
    }
    return hsum_ps(acc) + summs;
}

float eng_dot_q5_0_avx2(size_t n, const void *w, const void *act)
{
    const eng_block_q5_0 *x = w;
    const eng_block_q8_0 *y = act;
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < n / ENG_QK; b++) {
        const __m256 d = _mm256_set1_ps(half_to_float(x[b].d) * half_to_float(y[b].d));
        /* Without the fifth bit a value is its nibble - 16: set the top bits. */
        const __m256i low_top =
            _mm256_andnot_si256(bits_to_bytes(x[b].qh), _mm256_set1_epi8((char)0xf0));
        const __m256i q = _mm256_or_si256(unpack_nibbles(x[b].qs), low_top);
        const __m256 p = lanes_ss(q, _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc = _mm256_fmadd_ps(d, p, acc);
    }
    return hsum_ps(acc);
}

float eng_dot_q5_1_avx2(size_t n, const void *w, const void *act)
{
    const eng_block_q5_1 *x = w;
    const eng_block_q8_1 *y = act;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f;
    for (size_t b = 0; b < n / ENG_QK; b++) {
        summs = __builtin_fmaf(half_to_float(x[b].m), half_to_float(y[b].s), summs);
        const __m256i fifth = _mm256_and_si256(bits_to_bytes(x[b].qh), _mm256_set1_epi8(0x10));
        const __m256i q = _mm256_or_si256(unpack_nibbles(x[b].qs), fifth);
        const __m256 p = lanes_us(q, _mm256_loadu_si256((const __m256i *)y[b].qs));
        const __m256 d = _mm256_set1_ps(half_to_float(x[b].d) * half_to_float(y[b].d));
        acc = _mm256_fmadd_ps(p, d, acc);
    }
    return hsum_ps(acc) + summs;
}

float eng_dot_q8_0_avx2(size_t n, const void *w, const void *act)
{
    const eng_block_q8_0 *x = w;
    const eng_block_q8_0 *y = act;
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < n / ENG_QK; b++) {
        const __m256 d = _mm256_set1_ps(half_to_float(x[b].d) * half_to_float(y[b].d));
        const __m256 p = lanes_ss(_mm256_loadu_si256((const __m256i *)x[b].qs),
                                  _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc = _mm256_fmadd_ps(d, p, acc);
    }
    return hsum_ps(acc);
}

/* ---- Four rows at a time ----
 * One row's sum is a chain of dependent fused multiply-adds, one per block;
 * the chain's latency, not memory, bounds a single row. Four rows advanced
 * together share the activation loads and overlap their chains; each row's
 * operations and their order are exactly those of the one-row routine.
 * The caller spaces the four rows a quarter of its chunk apart: four
 * sequential streams in different pages, which the hardware prefetcher
 * follows (four adjacent rows read side by side it does not, and the
 * products then ran at a quarter of the one-row speed from memory). */

static inline void step_q4_1(const eng_block_q4_1 *x, __m256i qy, float dy, float sy, __m256 *acc,
                             float *summs)
{
    *summs = __builtin_fmaf(half_to_float(x->m), sy, *summs);
    const __m256 d = _mm256_set1_ps(half_to_float(x->d) * dy);
    *acc = _mm256_fmadd_ps(d, lanes_us(unpack_nibbles(x->qs), qy), *acc);
}

void eng_dot4_q4_1_avx2(size_t n, const void *w, size_t stride, const void *act, float out[4])
{
    const uint8_t *base = w;
    const eng_block_q4_1 *x0 = (const void *)base, *x1 = (const void *)(base + stride),
                         *x2 = (const void *)(base + 2 * stride),
                         *x3 = (const void *)(base + 3 * stride);
    const eng_block_q8_1 *y = act;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    float m0 = 0.0f, m1 = 0.0f, m2 = 0.0f, m3 = 0.0f;
    for (size_t b = 0; b < n / ENG_QK; b++) {
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const float dy = half_to_float(y[b].d), sy = half_to_float(y[b].s);
        step_q4_1(&x0[b], qy, dy, sy, &a0, &m0);
        step_q4_1(&x1[b], qy, dy, sy, &a1, &m1);
        step_q4_1(&x2[b], qy, dy, sy, &a2, &m2);
        step_q4_1(&x3[b], qy, dy, sy, &a3, &m3);
    }
    out[0] = hsum_ps(a0) + m0;
    out[1] = hsum_ps(a1) + m1;
    out[2] = hsum_ps(a2) + m2;
    out[3] = hsum_ps(a3) + m3;
}

static inline void step_q8_0(const eng_block_q8_0 *x, __m256i qy, float dy, __m256 *acc)
{
    const __m256 d = _mm256_set1_ps(half_to_float(x->d) * dy);
    *acc = _mm256_fmadd_ps(d, lanes_ss(_mm256_loadu_si256((const __m256i *)x->qs), qy), *acc);
}

void eng_dot4_q8_0_avx2(size_t n, const void *w, size_t stride, const void *act, float out[4])
{
    const uint8_t *base = w;
    const eng_block_q8_0 *x0 = (const void *)base, *x1 = (const void *)(base + stride),
                         *x2 = (const void *)(base + 2 * stride),
                         *x3 = (const void *)(base + 3 * stride);
    const eng_block_q8_0 *y = act;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t b = 0; b < n / ENG_QK; b++) {
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const float dy = half_to_float(y[b].d);
        step_q8_0(&x0[b], qy, dy, &a0);
        step_q8_0(&x1[b], qy, dy, &a1);
        step_q8_0(&x2[b], qy, dy, &a2);
        step_q8_0(&x3[b], qy, dy, &a3);
    }
    out[0] = hsum_ps(a0);
    out[1] = hsum_ps(a1);
    out[2] = hsum_ps(a2);
    out[3] = hsum_ps(a3);
}

/* ---- K formats (x Q8_K), as llama.cpp's AVX2 routines sum them ---- */

/* Q4_K and Q5_K: eight integer lanes per super-block (each 32-value
 * sub-block scaled by its 6-bit scale), the minimums through the
 * activations' pair sums: four float lanes for Q4_K, one fused sum for Q5_K. */
static float dot_k_min(size_t n, const void *w, const void *act, bool five_bits)
{
    const eng_block_q8_k *y = act;
    const __m256i low4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    float summs = 0.0f;
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
        const float d = y[b].d * half_to_float(d16);
        const float dmin = -y[b].d * half_to_float(dmin16);
        uint8_t scale[8], min[8];
        eng_k_scales(packed, scale, min);
        const __m128i pair_sums =
            _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y[b].bsums),
                           _mm_loadu_si128((const __m128i *)(y[b].bsums + 8)));
        const __m128i prod =
            _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)min)), pair_sums);
        if (five_bits) {
            __m128i t = _mm_add_epi32(prod, _mm_unpackhi_epi64(prod, prod));
            t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1)));
            summs = __builtin_fmaf(dmin, (float)_mm_cvtsi128_si32(t), summs);
        } else {
            acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
        }
        const __m256i high = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
            __m256i lo = _mm256_and_si256(bits, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), low4);
            if (qh) {
                const __m256i bit_lo = _mm256_and_si256(_mm256_srli_epi16(high, 2 * j), one);
                const __m256i bit_hi = _mm256_and_si256(_mm256_srli_epi16(high, 2 * j + 1), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(bit_lo, 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(bit_hi, 4));
            }
            const __m256i q8l = _mm256_loadu_si256((const __m256i *)(y[b].qs + 64 * j));
            const __m256i q8h = _mm256_loadu_si256((const __m256i *)(y[b].qs + 64 * j + 32));
            const __m256i pl =
                _mm256_madd_epi16(_mm256_set1_epi16(scale[2 * j]), _mm256_maddubs_epi16(lo, q8l));
            const __m256i ph = _mm256_madd_epi16(_mm256_set1_epi16(scale[2 * j + 1]),
                                                 _mm256_maddubs_epi16(hi, q8h));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    if (five_bits)
        return hsum_ps(acc) + summs;
    acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
    return hsum_ps(acc) + _mm_cvtss_f32(acc_m);
}

float eng_dot_q4_k_avx2(size_t n, const void *w, const void *act)
{
    return dot_k_min(n, w, act, false);
}

float eng_dot_q5_k_avx2(size_t n, const void *w, const void *act)
{
    return dot_k_min(n, w, act, true);
}

/* Q6_K: unsigned 6-bit values in eight lanes (scaled per 16 values), the
 * offset of 32 taken off per lane through the activations' group sums. */
float eng_dot_q6_k_avx2(size_t n, const void *w, const void *act)
{
    const eng_block_q6_k *x = w;
    const eng_block_q8_k *y = act;
    const __m256i low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < n / ENG_QK_K; b++) {
        const int8_t *sc = x[b].scales;
        __m256i sumi = _mm256_setzero_si256();
        for (int half = 0; half < 2; half++) {
            const uint8_t *ql = x[b].ql + 64 * half, *qh = x[b].qh + 32 * half;
            const __m256i b1 = _mm256_loadu_si256((const __m256i *)ql);
            const __m256i b2 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            const __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
            __m256i u[4];
            u[0] = _mm256_and_si256(b1, low4);
            u[1] = _mm256_and_si256(b2, low4);
            u[2] = _mm256_and_si256(_mm256_srli_epi16(b1, 4), low4);
            u[3] = _mm256_and_si256(_mm256_srli_epi16(b2, 4), low4);
            for (int q = 0; q < 4; q++) {
                const __m256i top = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * q), low2);
                const __m256i values = _mm256_or_si256(u[q], _mm256_slli_epi16(top, 4));
                const __m256i q8 =
                    _mm256_loadu_si256((const __m256i *)(y[b].qs + 128 * half + 32 * q));
                const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(sc[8 * half + 2 * q + 1]),
                                                        _mm_set1_epi16(sc[8 * half + 2 * q]));
                sumi = _mm256_add_epi32(
                    sumi, _mm256_madd_epi16(scales, _mm256_maddubs_epi16(values, q8)));
            }
        }
        const __m256i offset =
            _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[b].bsums),
                              _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc)));
        sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(offset, 5));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * half_to_float(x[b].d)),
                              _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

/* ---- Float formats ---- */

static inline float reduce_4(__m256 sum[4])
{
    sum[0] = _mm256_add_ps(sum[0], sum[2]);
    sum[1] = _mm256_add_ps(sum[1], sum[3]);
    sum[0] = _mm256_add_ps(sum[0], sum[1]);
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(sum[0]), _mm256_extractf128_ps(sum[0], 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

float eng_dot_f32_avx2(size_t n, const void *w, const void *act)
{
    const float *x = w, *y = act;
    __m256 sum[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    const size_t whole = n & ~(size_t)31;
    for (size_t i = 0; i < whole; i += 32)
        for (int j = 0; j < 4; j++)
            sum[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * j), _mm256_loadu_ps(y + i + 8 * j),
                                     sum[j]);
    return eng_f32_tail(reduce_4(sum), x, y, whole, n);
}

float eng_dot_f16_avx2(size_t n, const void *w, const void *act)
{
    const eng_f16 *x = w, *y = act;
    __m256 sum[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    const size_t whole = n & ~(size_t)31;
    for (size_t i = 0; i < whole; i += 32)
        for (int j = 0; j < 4; j++) {
            const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8 * j)));
            const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i + 8 * j)));
            sum[j] = _mm256_fmadd_ps(a, b, sum[j]);
        }
    double total = reduce_4(sum);
    for (size_t i = whole; i < n; i++)
        total += (double)(half_to_float(x[i]) * half_to_float(y[i]));
    return (float)total;
}
