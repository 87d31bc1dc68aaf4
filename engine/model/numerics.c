#include "model/numerics.h"

#include "kernels/kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ENG_AVX2_PATH 1
#endif

/* Functions with fused multiply-adds in their loops are built twice, with
 * and without FMA instructions, and picked at load time: the results are
 * the same bits (fmaf is exact either way), only the speed differs. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ENG_FMA_CLONES __attribute__((target_clones("fma", "default")))
#else
#define ENG_FMA_CLONES
#endif

static float bits_to_f32(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t f32_to_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* Every half's float, built once: attention converts each key and value
 * element it reads, and the table does it without branches. */
static float half_table[1 << 16];
static pthread_once_t half_table_once = PTHREAD_ONCE_INIT;

/* The attention products' AVX2 path: the same lanes, fused adds and
 * reductions as the scalar code, eight lanes per instruction. Off where
 * the CPU lacks AVX2, FMA or F16C, or ORTMEM_ENGINE_ISA=scalar (as the
 * kernels read it). */
static bool use_avx2;

static void half_table_fill(void)
{
    for (uint32_t h = 0; h < (1u << 16); h++)
        half_table[h] = eng_f16_to_f32((eng_f16)h);
#ifdef ENG_AVX2_PATH
    /* The kernels' detection: clang has no __builtin_cpu_supports("f16c"). */
    use_avx2 = eng_isa_detect() == ENG_ISA_AVX2;
#endif
}

void eng_numerics_init(void)
{
    pthread_once(&half_table_once, half_table_fill);
}

static inline float half(eng_f16 h)
{
    return half_table[h];
}

void eng_rms_norm(const float *x, const float *w, size_t n, float eps, float *y)
{
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (size_t i = 0; i < n; i++) {
        float scaled = x[i] * scale;
        y[i] = scaled * w[i];
    }
}

void eng_rope_table(int64_t pos, float base, uint32_t n_rot, uint32_t head_dim, float *cs)
{
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    for (uint32_t i = 0; i + 1 < head_dim; i += 2) {
        cs[i] = cosf(theta);
        cs[i + 1] = sinf(theta);
        theta *= theta_scale;
    }
}

/* ggml's build contracts the rotation into fused operations: the first of
 * a pair x0*c - (x1*s) with x1*s rounded, the second x0*s + (x1*c) with
 * x1*c rounded (checked against its tensors, every value of several
 * layers bit for bit). */
ENG_FMA_CLONES void eng_rope_apply(float *x, const float *cs, uint32_t n_rot)
{
    for (uint32_t i = 0; i + 1 < n_rot; i += 2) {
        const float x0 = x[i], x1 = x[i + 1];
        const float c = cs[i], s = cs[i + 1];
        x[i] = fmaf(x0, c, -(x1 * s));
        x[i + 1] = fmaf(x0, s, x1 * c);
    }
}

/* exp(x) = 2^n * (1 + p(b)) with n = round(x / ln 2) and b the reduced
 * argument, the polynomial and the out-of-range handling as ggml's AVX2
 * expf (0x1.8p23 rounds by addition; |n| > 126 and > 192 take the scaled
 * paths). */
ENG_FMA_CLONES float eng_vexpf(float x)
{
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const uint32_t e = f32_to_bits(z) << 23;
    const float k = bits_to_f32(e + f32_to_bits(1.0f));
    const float u = b * b;
    const float j = fmaf(
        fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
        u, 0x1.ffffecp-1f * b);
    if (!(fabsf(n) > 126.0f))
        return fmaf(j, k, k);
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = bits_to_f32(g + 0x7f000000u);
    const float s2 = bits_to_f32(e - g);
    if (fabsf(n) > 192.0f)
        return s1 * s1;
    return fmaf(s2, j, s2) * s1;
}

/* The horizontal add of 8 lanes as ggml writes it for AVX: the halves
 * added lane by lane, then (0+2) + (1+3). */
static float hsum8_halves(const float v[8])
{
    float s[4];
    for (int l = 0; l < 4; l++)
        s[l] = v[l + 4] + v[l];
    return (s[0] + s[2]) + (s[1] + s[3]);
}

#ifdef ENG_AVX2_PATH
#define ENG_AVX2 __attribute__((target("avx2,fma,f16c")))

/* eng_vexpf on eight lanes: every lane's operations are the scalar one's. */
ENG_AVX2 static inline __m256 vexpf_avx2(__m256 x)
{
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 k =
        _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
    const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 big = _mm256_cmp_ps(abs_n, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(
            _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
            _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
    const __m256 fast = _mm256_fmadd_ps(j, k, k);
    if (!_mm256_movemask_ps(big))
        return fast;
    const __m256i g =
        _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                         _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256 huge = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256 scaled = _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1);
    return _mm256_blendv_ps(_mm256_blendv_ps(fast, scaled, big), _mm256_mul_ps(s1, s1), huge);
}

ENG_AVX2 static size_t vexpf_row_avx2(float *x, size_t n)
{
    size_t whole = n - n % 8;
    for (size_t i = 0; i < whole; i += 8)
        _mm256_storeu_ps(x + i, vexpf_avx2(_mm256_loadu_ps(x + i)));
    return whole;
}

ENG_AVX2 static size_t swiglu_avx2(const float *x, const float *g, size_t n, float *y)
{
    size_t whole = n - n % 8;
    for (size_t i = 0; i < whole; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i);
        const __m256 e = vexpf_avx2(_mm256_sub_ps(_mm256_setzero_ps(), xv));
        const __m256 silu = _mm256_div_ps(xv, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(silu, _mm256_loadu_ps(g + i)));
    }
    return whole;
}

ENG_AVX2 static size_t halves_avx2(const float *x, eng_f16 *y, size_t n)
{
    size_t whole = n - n % 8;
    for (size_t i = 0; i < whole; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    return whole;
}
#endif

void eng_vexpf_row(float *x, size_t n)
{
    size_t done = 0;
#ifdef ENG_AVX2_PATH
    if (use_avx2)
        done = vexpf_row_avx2(x, n);
#endif
    for (size_t i = done; i < n; i++)
        x[i] = eng_vexpf(x[i]);
}

void eng_halves_from_floats(const float *x, eng_f16 *y, size_t n)
{
    size_t done = 0;
#ifdef ENG_AVX2_PATH
    if (use_avx2)
        done = halves_avx2(x, y, n);
#endif
    for (size_t i = done; i < n; i++)
        y[i] = eng_f32_to_f16(x[i]);
}

void eng_swiglu(const float *x, const float *g, size_t n, float *y)
{
    size_t done = 0;
#ifdef ENG_AVX2_PATH
    if (use_avx2)
        done = swiglu_avx2(x, g, n, y);
#endif
    for (size_t i = done; i < n; i++) {
        const float neg = 0.0f - x[i];
        const float silu = x[i] / (1.0f + eng_vexpf(neg));
        y[i] = silu * g[i];
    }
}

void eng_softmax(float *scores, size_t n)
{
    float max = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (scores[i] > max)
            max = scores[i];
    for (size_t i = 0; i < n; i++)
        scores[i] = scores[i] - max;
    eng_vexpf_row(scores, n);
    double sum = 0.0;
    for (size_t i0 = 0; i0 < n; i0 += 8) {
        float v[8] = {0};
        for (size_t l = 0; l < 8 && i0 + l < n; l++)
            v[l] = scores[i0 + l];
        sum += (double)hsum8_halves(v);
    }
    const float inv = (float)(1.0 / sum);
    for (size_t i = 0; i < n; i++)
        scores[i] *= inv;
}

/* ggml_vec_dot_f16's reduction: 4 accumulators of 8 lanes folded
 * (0+2, 1+3, then 0+1), the halves added, then two pairwise adds. */
static float reduce_decode(const float acc[32])
{
    float x[8];
    for (int l = 0; l < 8; l++) {
        float a = acc[l] + acc[16 + l];
        float b = acc[8 + l] + acc[24 + l];
        x[l] = a + b;
    }
    float t[4];
    for (int l = 0; l < 4; l++)
        t[l] = x[l] + x[l + 4];
    return (t[0] + t[1]) + (t[2] + t[3]);
}

#ifdef ENG_AVX2_PATH
ENG_AVX2 static inline __m256 load_halves(const eng_f16 *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

/* eng_dot_f16 for contiguous a. */
ENG_AVX2 static float dot_f16_avx2(eng_dot_kind kind, const eng_f16 *a, const eng_f16 *b, size_t n)
{
    if (kind == ENG_DOT_DECODE) {
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                         _mm256_setzero_ps()};
        size_t whole = n - n % 32;
        for (size_t i = 0; i < whole; i += 32)
            for (int g = 0; g < 4; g++)
                acc[g] =
                    _mm256_fmadd_ps(load_halves(a + i + 8 * g), load_halves(b + i + 8 * g), acc[g]);
        /* reduce_decode's association, in registers */
        const __m256 x =
            _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
        const __m128 t = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
        const __m128 t1 = _mm_hadd_ps(t, t);
        double sum = (double)_mm_cvtss_f32(_mm_hadd_ps(t1, t1));
        for (size_t i = whole; i < n; i++)
            sum += (double)(half(a[i]) * half(b[i]));
        return (float)sum;
    }
    __m256 acc = _mm256_setzero_ps();
    size_t whole = n - n % 8;
    for (size_t i = 0; i < whole; i += 8)
        acc = _mm256_fmadd_ps(load_halves(a + i), load_halves(b + i), acc);
    if (whole < n) {
        float lanes[8];
        _mm256_storeu_ps(lanes, acc);
        for (size_t i = whole; i < n; i++)
            lanes[i % 8] = fmaf(half(a[i]), half(b[i]), lanes[i % 8]);
        return hsum8_halves(lanes);
    }
    /* hsum8_halves's association, in registers */
    __m128 h = _mm_add_ps(_mm256_extractf128_ps(acc, 1), _mm256_castps256_ps128(acc));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* eng_dot_f16_rows for dim a multiple of 8 (at most ENG_ATTN_MAX_DIM):
 * each position's row in eight-value vectors into its lane's accumulators. */
ENG_AVX2 static void dot_f16_rows_avx2(eng_dot_kind kind, const eng_f16 *v, size_t v_stride,
                                       const eng_f16 *w, size_t n, size_t dim, float *out)
{
    __m256 acc[32][ENG_ATTN_MAX_DIM / 8];
    const size_t lanes = kind == ENG_DOT_DECODE ? 32 : 8, vecs = dim / 8;
    for (size_t l = 0; l < lanes; l++)
        for (size_t k = 0; k < vecs; k++)
            acc[l][k] = _mm256_setzero_ps();
    for (size_t j = 0; j < n; j++) {
        const __m256 wj = _mm256_set1_ps(half(w[j]));
        const eng_f16 *row = v + j * v_stride;
        __m256 *lane = acc[j % lanes];
        for (size_t k = 0; k < vecs; k++)
            lane[k] = _mm256_fmadd_ps(load_halves(row + 8 * k), wj, lane[k]);
    }
    /* The lanes' reductions (reduce_decode, hsum8_halves) for eight values
     * of d at once: lane l's vector holds their lane-l sums. */
    for (size_t k = 0; k < vecs; k++) {
        __m256 r;
        if (kind == ENG_DOT_DECODE) {
            __m256 x[8];
            for (int l = 0; l < 8; l++)
                x[l] = _mm256_add_ps(_mm256_add_ps(acc[l][k], acc[16 + l][k]),
                                     _mm256_add_ps(acc[8 + l][k], acc[24 + l][k]));
            __m256 t[4];
            for (int l = 0; l < 4; l++)
                t[l] = _mm256_add_ps(x[l], x[l + 4]);
            r = _mm256_add_ps(_mm256_add_ps(t[0], t[1]), _mm256_add_ps(t[2], t[3]));
        } else {
            __m256 h[4];
            for (int l = 0; l < 4; l++)
                h[l] = _mm256_add_ps(acc[l + 4][k], acc[l][k]);
            r = _mm256_add_ps(_mm256_add_ps(h[0], h[2]), _mm256_add_ps(h[1], h[3]));
        }
        _mm256_storeu_ps(out + 8 * k, r);
    }
}
#endif

ENG_FMA_CLONES float eng_dot_f16(eng_dot_kind kind, const eng_f16 *a, size_t a_stride,
                                 const eng_f16 *b, size_t n)
{
#ifdef ENG_AVX2_PATH
    if (use_avx2 && a_stride == 1)
        return dot_f16_avx2(kind, a, b, n);
#endif
    if (kind == ENG_DOT_DECODE) {
        float acc[32] = {0};
        size_t whole = n - n % 32;
        for (size_t i = 0; i < whole; i++)
            acc[i % 32] = fmaf(half(a[i * a_stride]), half(b[i]), acc[i % 32]);
        double sum = (double)reduce_decode(acc);
        for (size_t i = whole; i < n; i++) /* leftovers: products added in double */
            sum += (double)(half(a[i * a_stride]) * half(b[i]));
        return (float)sum;
    }
    float acc[8] = {0};
    for (size_t i = 0; i < n; i++)
        acc[i % 8] = fmaf(half(a[i * a_stride]), half(b[i]), acc[i % 8]);
    return hsum8_halves(acc);
}

ENG_FMA_CLONES void eng_dot_f16_rows(eng_dot_kind kind, const eng_f16 *v, size_t v_stride,
                                     const eng_f16 *w, size_t n, size_t dim, float *out)
{
    /* Positions past n have zero weight in llama.cpp's padded cache: a fused
     * add of 0 * v leaves a lane as it was, so lanes see positions [0, n)
     * only and the sums come out the same. */
#ifdef ENG_AVX2_PATH
    if (use_avx2 && dim % 8 == 0 && dim <= ENG_ATTN_MAX_DIM) {
        dot_f16_rows_avx2(kind, v, v_stride, w, n, dim, out);
        return;
    }
#endif
    enum { MAX_DIM = ENG_ATTN_MAX_DIM };
    float acc[MAX_DIM][32];
    const size_t lanes = kind == ENG_DOT_DECODE ? 32 : 8;
    if (dim > MAX_DIM)
        dim = MAX_DIM; /* the model checks head_dim at load */
    for (size_t d = 0; d < dim; d++)
        memset(acc[d], 0, lanes * sizeof(float));
    for (size_t j = 0; j < n; j++) {
        const float wj = half(w[j]);
        const eng_f16 *row = v + j * v_stride;
        const size_t lane = j % lanes;
        for (size_t d = 0; d < dim; d++)
            acc[d][lane] = fmaf(half(row[d]), wj, acc[d][lane]);
    }
    for (size_t d = 0; d < dim; d++)
        out[d] = kind == ENG_DOT_DECODE ? reduce_decode(acc[d]) : hsum8_halves(acc[d]);
}
