#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "reference.h"

static bool cpu_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}

/* ---- Instruction set ---- */

Test(kernels_isa, detects_the_cpu_once)
{
    unsetenv("ORTMEM_ENGINE_ISA");
    const eng_isa isa = eng_isa_detect();
    cr_assert_eq(isa, cpu_has_avx2() ? ENG_ISA_AVX2 : ENG_ISA_SCALAR, "detected %s",
                 eng_isa_name(isa));
    setenv("ORTMEM_ENGINE_ISA", "scalar", 1); /* too late: the answer is cached */
    cr_assert_eq(eng_isa_detect(), isa);
    cr_assert_str_eq(eng_isa_name(ENG_ISA_SCALAR), "scalar");
    cr_assert_str_eq(eng_isa_name(ENG_ISA_AVX2), "avx2");
}

Test(kernels_isa, override_forces_scalar)
{
    setenv("ORTMEM_ENGINE_ISA", "scalar", 1);
    cr_assert_eq(eng_isa_detect(), ENG_ISA_SCALAR);
    /* The hardware answer is kept apart: AVX2 products stay callable. */
    cr_assert_eq(eng_isa_hw_avx2(), cpu_has_avx2());
}

/* ---- Activation quantization: the same bytes from both instruction sets ---- */

static void fill_edge_blocks(float *x, size_t n, ref_rng *rng)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)ref_uniform(rng, -3, 3);
    /* Block 0 all zero; block 1 exact halves (ties round to even with
     * id = 1); block 2 one outlier; block 3 tiny values (subnormal scale);
     * block 4 huge values; block 5 one value only. */
    memset(x, 0, 32 * sizeof *x);
    for (int i = 0; i < 32; i++)
        x[32 + i] = (float)(i - 16) + 0.5f;
    x[32 + 7] = 127.0f;
    x[64 + 5] = 1000.0f;
    for (int i = 0; i < 32; i++)
        x[96 + i] = (float)ref_uniform(rng, -1e-6, 1e-6);
    for (int i = 0; i < 32; i++)
        x[128 + i] = (float)ref_uniform(rng, -3e38, 3e38);
    memset(x + 160, 0, 32 * sizeof *x);
    x[160 + 31] = -2.5f;
}

static void check_same_bytes(eng_quantize_fn scalar, eng_quantize_fn avx2, size_t block_bytes,
                             const float *x, size_t n, const char *what)
{
    const size_t bytes = n / 32 * block_bytes;
    uint8_t *a = calloc(1, bytes), *b = calloc(1, bytes);
    scalar(x, a, n);
    avx2(x, b, n);
    for (size_t i = 0; i < bytes; i++)
        cr_assert_eq(a[i], b[i], "%s: byte %zu (block %zu) scalar %#x avx2 %#x", what, i,
                     i / block_bytes, a[i], b[i]);
    free(a);
    free(b);
}

Test(kernels_quantize, scalar_and_avx2_give_the_same_bytes)
{
    if (!cpu_has_avx2())
        cr_skip_test("no AVX2 here");
    ref_rng rng = {0x5eed};
    const size_t n = 32 * 64;
    float *x = malloc(n * sizeof *x);
    for (int round = 0; round < 20; round++) {
        fill_edge_blocks(x, n, &rng);
        check_same_bytes(eng_quantize_q8_0_scalar, eng_quantize_q8_0_avx2, sizeof(eng_block_q8_0),
                         x, n, "q8_0");
        check_same_bytes(eng_quantize_q8_1_scalar, eng_quantize_q8_1_avx2, sizeof(eng_block_q8_1),
                         x, n, "q8_1");
        check_same_bytes(eng_quantize_f16_scalar, eng_quantize_f16_avx2, 64, x, n, "f16");
    }
    /* Infinities and NaN follow x86's conversion rules on both paths. */
    x[3] = INFINITY;
    x[40] = NAN;
    x[70] = -INFINITY;
    check_same_bytes(eng_quantize_q8_0_scalar, eng_quantize_q8_0_avx2, sizeof(eng_block_q8_0), x, n,
                     "q8_0 non-finite");
    check_same_bytes(eng_quantize_q8_1_scalar, eng_quantize_q8_1_avx2, sizeof(eng_block_q8_1), x, n,
                     "q8_1 non-finite");
    free(x);
}

/* The numbers llama.cpp's routine gives: d = amax / 127, values scaled by
 * 127 / amax and rounded half to even, s = d * sum. */
Test(kernels_quantize, q8_1_scale_rounding_and_sum)
{
    float x[32];
    for (int i = 0; i < 32; i++)
        x[i] = (float)(i - 16) + 0.5f; /* -15.5 .. 15.5 */
    x[7] = 127.0f;                     /* amax 127: id = 1, the halves are ties */
    eng_block_q8_1 q;
    eng_quantize_q8_1_scalar(x, &q, 32);
    cr_assert_eq(q.d, eng_f32_to_f16(1.0f));
    cr_assert_eq(q.qs[0], -16, "-15.5 rounds to even -16, got %d", q.qs[0]);
    cr_assert_eq(q.qs[1], -14, "-14.5 rounds to even -14, got %d", q.qs[1]);
    cr_assert_eq(q.qs[7], 127);
    int sum = 0;
    for (int i = 0; i < 32; i++)
        sum += q.qs[i];
    cr_assert_eq(q.s, eng_f32_to_f16((float)sum));
}

static float from_bits(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* The values are multiplied by 127 / amax, not by 1 / d: for this block
 * the two differ in the last bit and the second value rounds to 0 with the
 * first (llama.cpp's answer) but to 1 with the second. */
Test(kernels_quantize, scales_by_127_over_amax_not_one_over_d)
{
    float x[32] = {0};
    x[0] = from_bits(0x40747f5bu); /* 3.82027316 */
    x[1] = from_bits(0x3c766c34u); /* 0.0150404461 */
    eng_block_q8_0 q0[2];
    eng_block_q8_1 q1[2];
    eng_quantize_q8_0_scalar(x, &q0[0], 32);
    eng_quantize_q8_1_scalar(x, &q1[0], 32);
    cr_assert_eq(q0[0].qs[1], 0, "scalar q8_0 gives %d", q0[0].qs[1]);
    cr_assert_eq(q1[0].qs[1], 0, "scalar q8_1 gives %d", q1[0].qs[1]);
    if (cpu_has_avx2()) {
        eng_quantize_q8_0_avx2(x, &q0[1], 32);
        eng_quantize_q8_1_avx2(x, &q1[1], 32);
        cr_assert_eq(q0[1].qs[1], 0, "avx2 q8_0 gives %d", q0[1].qs[1]);
        cr_assert_eq(q1[1].qs[1], 0, "avx2 q8_1 gives %d", q1[1].qs[1]);
    }
}

/* BF16 activations round as llama.cpp's conversion does: to nearest, ties
 * to even, NaN kept (and made quiet). */
Test(kernels_quantize, bf16_rounds_to_nearest_even)
{
    const uint32_t in[] = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0xbf800000u,
                           0x7f800001u, 0x7f800000u, 0x00000000u};
    const uint16_t want[] = {0x3f80, 0x3f82, 0x3f81, 0xbf80, 0x7fc0, 0x7f80, 0x0000};
    float x[7];
    uint16_t out[7];
    for (int i = 0; i < 7; i++)
        x[i] = from_bits(in[i]);
    eng_quantize_bf16_scalar(x, out, 7);
    for (int i = 0; i < 7; i++)
        cr_assert_eq(out[i], want[i], "%#x -> %#x, want %#x", in[i], out[i], want[i]);
}

Test(kernels_quantize, q8_k_maps_the_signed_extreme_to_minus_127)
{
    float x[256];
    for (int i = 0; i < 256; i++)
        x[i] = (float)(i % 7) * 0.25f;
    x[100] = 3.0f; /* the largest magnitude, positive: scale -127 / 3 */
    eng_block_q8_k q;
    eng_quantize_q8_k_scalar(x, &q, 256);
    cr_assert_eq(q.qs[100], -127);
    cr_assert_float_eq(q.d, -3.0f / 127.0f, 1e-9f);
    for (int g = 0; g < 16; g++) {
        int sum = 0;
        for (int i = 0; i < 16; i++)
            sum += q.qs[16 * g + i];
        cr_assert_eq(q.bsums[g], sum, "group %d", g);
    }
    memset(x, 0, sizeof x);
    eng_quantize_q8_k_scalar(x, &q, 256);
    cr_assert_eq(q.d, 0.0f);
}

/* ---- Products ---- */

/* The exact value the kernels compute up to float rounding: dequantized
 * weights times the dequantized activations the kernel used, with Q8_1's
 * stored sum s in the minimum term. */
static double model_dot(uint32_t type, const double *w, const void *wrow, uint32_t act_type,
                        const void *act, const float *x, size_t n, double *magnitude)
{
    double sum = 0.0, mag = 0.0;
    const eng_type_traits wt = eng_type_traits_of(type);
    for (size_t i = 0; i < n; i++) {
        double a;
        switch (act_type) {
        case ENG_TYPE_F32: a = x[i]; break;
        case ENG_TYPE_F16: a = eng_f16_to_f32(((const eng_f16 *)act)[i]); break;
        case ENG_TYPE_BF16: a = eng_bf16_to_f32(((const uint16_t *)act)[i]); break;
        case ENG_TYPE_Q8_0: {
            const eng_block_q8_0 *b = (const eng_block_q8_0 *)act + i / 32;
            a = (double)eng_f16_to_f32(b->d) * b->qs[i % 32];
            break;
        }
        case ENG_TYPE_Q8_1: {
            const eng_block_q8_1 *b = (const eng_block_q8_1 *)act + i / 32;
            a = (double)eng_f16_to_f32(b->d) * b->qs[i % 32];
            break;
        }
        case ENG_TYPE_Q8_K: {
            const eng_block_q8_k *b = (const eng_block_q8_k *)act + i / 256;
            a = (double)b->d * b->qs[i % 256];
            break;
        }
        default: cr_assert_fail("activation type %u", act_type);
        }
        sum += w[i] * a;
        mag += fabs(w[i] * a);
    }
    if (act_type == ENG_TYPE_Q8_1) { /* m * s instead of m * d * sum(q) */
        for (size_t b = 0; b < n / 32; b++) {
            const eng_block_q8_1 *ab = (const eng_block_q8_1 *)act + b;
            eng_f16 m;
            memcpy(&m, (const uint8_t *)wrow + b * wt.block_bytes + 2, 2);
            int qsum = 0;
            for (int i = 0; i < 32; i++)
                qsum += ab->qs[i];
            const double exact = (double)eng_f16_to_f32(ab->d) * qsum;
            sum += (double)eng_f16_to_f32(m) * ((double)eng_f16_to_f32(ab->s) - exact);
            mag += fabs((double)eng_f16_to_f32(m) * eng_f16_to_f32(ab->s));
        }
    }
    *magnitude = mag;
    return sum;
}

/* How far quantizing x can move sum w * x: per value the rounding of the
 * format, plus for Q8_1 the half-precision sum s. */
static double act_error_bound(uint32_t act_type, const double *w, const void *wrow, uint32_t type,
                              const float *x, size_t n)
{
    double bound = 0.0;
    const size_t block = act_type == ENG_TYPE_Q8_K ? 256 : 32;
    for (size_t b0 = 0; b0 < n; b0 += block) {
        double amax = 0.0;
        for (size_t i = b0; i < b0 + block && i < n; i++)
            amax = fmax(amax, fabs(x[i]));
        for (size_t i = b0; i < b0 + block && i < n; i++) {
            double e;
            switch (act_type) {
            case ENG_TYPE_F32: e = 0.0; break;
            case ENG_TYPE_F16: e = fabs(x[i]) * 0x1p-11; break;
            case ENG_TYPE_BF16: e = fabs(x[i]) * 0x1p-8; break;
            case ENG_TYPE_Q8_K: e = amax / 127.0 * 0.5; break;
            default: e = amax / 127.0 * 0.5 + amax * 0x1p-10; break;
            }
            bound += fabs(w[i]) * e;
        }
        if (act_type == ENG_TYPE_Q8_1) {
            eng_f16 m;
            const eng_type_traits wt = eng_type_traits_of(type);
            memcpy(&m, (const uint8_t *)wrow + b0 / 32 * wt.block_bytes + 2, 2);
            bound += fabs(eng_f16_to_f32(m)) * 32 * amax * 0x1p-9;
        }
    }
    return bound * 1.05;
}

static void check_type(uint32_t type, size_t rows, size_t cols, size_t n_tokens)
{
    const eng_type_traits t = eng_type_traits_of(type);
    ref_rng rng = {0x1234 + type * 7919 + cols};
    uint8_t *w = ref_random_matrix(type, rows, cols, &rng);
    float *x = malloc(n_tokens * cols * sizeof *x);
    for (size_t i = 0; i < n_tokens * cols; i++)
        x[i] = (float)ref_uniform(&rng, -1.5, 1.5);
    x[cols / 2] = 6.0f; /* an outlier, as activations have */
    const eng_matrix m = {type, w, rows, cols};
    eng_pool *pool = NULL;
    cr_assert_eq(eng_pool_create(2, &pool, NULL), ORTMEM_OK);

    eng_kernel k;
    cr_assert(eng_kernel_lookup(type, ENG_ISA_SCALAR, &k));
    const size_t act_bytes = k.quantize ? eng_act_row_bytes(k.act_type, cols) : 0;
    float *y_scalar = malloc(n_tokens * rows * sizeof(float));
    eng_scratch s_scalar = {0}, s_avx2 = {0};
    eng_error err = {0};
    cr_assert_eq(eng_matmul(pool, ENG_ISA_SCALAR, &m, x, n_tokens, y_scalar, &s_scalar, &err),
                 ORTMEM_OK, "%s", err.message);

    if (cpu_has_avx2()) {
        float *y_avx2 = malloc(n_tokens * rows * sizeof(float));
        cr_assert_eq(eng_matmul(pool, ENG_ISA_AVX2, &m, x, n_tokens, y_avx2, &s_avx2, &err),
                     ORTMEM_OK, "%s", err.message);
        if (act_bytes)
            cr_assert_eq(memcmp(s_scalar.bytes, s_avx2.bytes, n_tokens * act_bytes), 0,
                         "%s: activations differ between scalar and avx2", t.name);
        for (size_t i = 0; i < n_tokens * rows; i++)
            cr_assert_eq(memcmp(&y_scalar[i], &y_avx2[i], sizeof(float)), 0,
                         "%s: y[%zu] scalar %.9g avx2 %.9g", t.name, i, y_scalar[i], y_avx2[i]);
        free(y_avx2);
    }

    const size_t row_bytes = cols / t.block_elems * t.block_bytes;
    double *wd = malloc(cols * sizeof *wd);
    for (size_t tok = 0; tok < n_tokens; tok++) {
        const float *xt = x + tok * cols;
        const void *act = act_bytes ? (const uint8_t *)s_scalar.bytes + tok * act_bytes : NULL;
        for (size_t r = 0; r < rows; r++) {
            const uint8_t *wrow = w + r * row_bytes;
            ref_dequant_row(type, wrow, cols, wd);
            const float got = y_scalar[tok * rows + r];
            /* 1. What the kernel should compute from what it quantized. */
            double mag;
            const double model = model_dot(type, wd, wrow, k.act_type, act, xt, cols, &mag);
            cr_assert_leq(fabs(got - model), 1e-5 * mag + 1e-30,
                          "%s row %zu token %zu: %.9g, model %.9g (magnitude %.3g)", t.name, r, tok,
                          got, model, mag);
            /* 2. The plain product of x, within the activations' rounding. */
            double exact = 0.0, plain_mag = 0.0;
            for (size_t i = 0; i < cols; i++) {
                exact += wd[i] * xt[i];
                plain_mag += fabs(wd[i] * xt[i]);
            }
            const double bound =
                act_error_bound(k.act_type, wd, wrow, type, xt, cols) + 2e-5 * plain_mag;
            cr_assert_leq(fabs(got - exact), bound,
                          "%s row %zu token %zu: %.9g, exact %.9g, bound %.3g", t.name, r, tok, got,
                          exact, bound);
        }
    }
    free(wd);
    eng_scratch_free(&s_scalar);
    eng_scratch_free(&s_avx2);
    eng_pool_destroy(pool);
    free(y_scalar);
    free(x);
    free(w);
}

Test(kernels_matmul, q4_1)
{
    check_type(ENG_TYPE_Q4_1, 67, 576, 1);
    check_type(ENG_TYPE_Q4_1, 29, 1536, 3);
}

Test(kernels_matmul, q8_0)
{
    check_type(ENG_TYPE_Q8_0, 67, 576, 1);
    check_type(ENG_TYPE_Q8_0, 29, 544, 4);
}

Test(kernels_matmul, q4_0)
{
    check_type(ENG_TYPE_Q4_0, 53, 576, 2);
}

Test(kernels_matmul, q5_0)
{
    check_type(ENG_TYPE_Q5_0, 53, 576, 2);
}

Test(kernels_matmul, q5_1)
{
    check_type(ENG_TYPE_Q5_1, 53, 576, 2);
}

Test(kernels_matmul, f32)
{
    check_type(ENG_TYPE_F32, 41, 100, 2);
    check_type(ENG_TYPE_F32, 17, 576, 1);
}

Test(kernels_matmul, f16)
{
    check_type(ENG_TYPE_F16, 41, 100, 2);
    check_type(ENG_TYPE_F16, 17, 576, 1);
}

Test(kernels_matmul, bf16)
{
    check_type(ENG_TYPE_BF16, 41, 100, 2);
}

Test(kernels_matmul, q4_k)
{
    check_type(ENG_TYPE_Q4_K, 37, 768, 2);
}

Test(kernels_matmul, q5_k)
{
    check_type(ENG_TYPE_Q5_K, 37, 768, 2);
}

Test(kernels_matmul, q6_k)
{
    check_type(ENG_TYPE_Q6_K, 37, 768, 2);
}

/* ---- The reference engine's numbers ----
 * Results of llama.cpp 0.3.36's x86 AVX2 routines (its activation
 * quantizers and ggml_vec_dot_* for each type) on the inputs golden_inputs
 * makes, recorded once from that library: the products must reproduce them
 * bit for bit on both instruction sets, one row at a time and four at a
 * time, or decoded tokens can drift from llama.cpp's at near ties. */
typedef struct golden_case {
    uint32_t type;
    size_t n;
    uint32_t bits[4];
} golden_case;

static const golden_case golden[] = {
    {ENG_TYPE_Q4_0, 576, {0x3f7eaad6u, 0x41814608u, 0x42ce5327u, 0xc1082722u}},
    {ENG_TYPE_Q4_1, 576, {0x4067d05cu, 0x421c0d7au, 0xc10a88ceu, 0x41c64a58u}},
    {ENG_TYPE_Q5_0, 576, {0x4142f4c8u, 0x41268844u, 0x4242fdb6u, 0x401e81e6u}},
    {ENG_TYPE_Q5_1, 576, {0x42101facu, 0x42b1f994u, 0xc02bd30cu, 0xc2be11e2u}},
    {ENG_TYPE_Q8_0, 576, {0xc25b771bu, 0x4319dc5au, 0xc38b709cu, 0xc3f8c94bu}},
    {ENG_TYPE_Q4_K, 768, {0x4316a0edu, 0x435c7b39u, 0xc260fdf0u, 0x4226c8a3u}},
    {ENG_TYPE_Q5_K, 768, {0x42acd99fu, 0x40673f22u, 0x3f9d6b00u, 0xc29999afu}},
    {ENG_TYPE_Q6_K, 768, {0x4351f533u, 0xc18c91b8u, 0x4389e62cu, 0xc2f49c10u}},
    {ENG_TYPE_F16, 1000, {0x41c952dbu, 0x421fb332u, 0xc13ac6d2u, 0x431c83dbu}},
    {ENG_TYPE_F32, 1000, {0xc1c842d6u, 0xc201c3deu, 0xc2ad6cf6u, 0xc2520521u}},
    {ENG_TYPE_F32, 103, {0x430025c6u, 0xc1eb6d7eu, 0xc0f08b3fu, 0xc257c9eeu}},
    {ENG_TYPE_BF16, 1000, {0xc0c82d30u, 0xc0c897a8u, 0xc2cc2e9bu, 0x4322541eu}},
    {ENG_TYPE_F16, 1016, {0xc2872cf8u, 0xc14950c7u, 0x4293a0c2u, 0x41c010a4u}},
    {ENG_TYPE_F32, 1016, {0xc358be67u, 0x41118bbau, 0x4301df83u, 0xc31d0ccfu}},
    {ENG_TYPE_BF16, 1016, {0xc22abab9u, 0x42a16bdbu, 0x3e9aec00u, 0xc315fa5au}},
};

static void golden_inputs(const golden_case *c, int trial, uint8_t **w, float **x)
{
    ref_rng rng = {1000 + 17 * c->type + (uint64_t)trial};
    *w = ref_random_matrix(c->type, 1, c->n, &rng);
    *x = malloc(c->n * sizeof **x);
    const double scale = ref_uniform(&rng, 0.01, 10);
    for (size_t i = 0; i < c->n; i++)
        (*x)[i] = (float)(ref_uniform(&rng, -1, 1) * scale);
    (*x)[(size_t)trial * 7 % c->n] *= 30;
}

Test(kernels_matmul, reproduces_llama_cpp_bit_for_bit)
{
    eng_pool *pool = NULL;
    cr_assert_eq(eng_pool_create(2, &pool, NULL), ORTMEM_OK);
    for (size_t ci = 0; ci < sizeof golden / sizeof golden[0]; ci++) {
        const golden_case *c = &golden[ci];
        const eng_type_traits t = eng_type_traits_of(c->type);
        const size_t row_bytes = c->n / t.block_elems * t.block_bytes, rows = 9;
        for (int trial = 0; trial < 4; trial++) {
            uint8_t *w1, *w = malloc(rows * row_bytes);
            float *x, y[9];
            golden_inputs(c, trial, &w1, &x);
            for (size_t r = 0; r < rows; r++) /* nine copies: four-row groups and a single */
                memcpy(w + r * row_bytes, w1, row_bytes);
            const eng_matrix m = {c->type, w, rows, c->n};
            for (int isa = ENG_ISA_SCALAR; isa <= (cpu_has_avx2() ? ENG_ISA_AVX2 : ENG_ISA_SCALAR);
                 isa++) {
                eng_scratch scratch = {0};
                eng_error err = {0};
                cr_assert_eq(eng_matmul(pool, (eng_isa)isa, &m, x, 1, y, &scratch, &err), ORTMEM_OK,
                             "%s", err.message);
                for (size_t r = 0; r < rows; r++) {
                    uint32_t bits;
                    memcpy(&bits, &y[r], sizeof bits);
                    cr_assert_eq(bits, c->bits[trial],
                                 "%s n %zu trial %d %s row %zu: %#x (%.9g), llama.cpp %#x", t.name,
                                 c->n, trial, eng_isa_name((eng_isa)isa), r, bits, y[r],
                                 c->bits[trial]);
                }
                eng_scratch_free(&scratch);
            }
            free(w1);
            free(w);
            free(x);
        }
    }
    eng_pool_destroy(pool);
}

/* ---- Refusals: a failed call changes nothing ---- */

Test(kernels_matmul, refusals_name_the_numbers_and_change_nothing)
{
    uint8_t w[20 * 4] = {0};
    float x[64] = {0}, y[4] = {1, 2, 3, 4};
    eng_scratch scratch = {0};
    eng_error err = {0};
    eng_matrix m = {ENG_TYPE_Q4_1, w, 2, 40};
    cr_assert_eq(eng_matmul(NULL, ENG_ISA_SCALAR, &m, x, 1, y, &scratch, &err), ORTMEM_E_ALIGN);
    cr_assert(strstr(err.message, "40 columns") && strstr(err.message, "Q4_1"), "%s", err.message);
    m = (eng_matrix){ENG_TYPE_Q2_K, w, 1, 256};
    cr_assert_eq(eng_matmul(NULL, ENG_ISA_SCALAR, &m, x, 1, y, &scratch, &err),
                 ORTMEM_E_UNSUPPORTED);
    cr_assert(strstr(err.message, "Q2_K"), "%s", err.message);
    m = (eng_matrix){63, w, 1, 32};
    cr_assert_eq(eng_matmul(NULL, ENG_ISA_SCALAR, &m, x, 1, y, &scratch, &err),
                 ORTMEM_E_UNSUPPORTED);
    cr_assert(strstr(err.message, "63"), "%s", err.message);
    m = (eng_matrix){ENG_TYPE_Q8_0, w, 2, 32};
    cr_assert_eq(eng_matmul(NULL, (eng_isa)7, &m, x, 1, y, &scratch, &err), ORTMEM_E_INVALID);
    cr_assert_eq(eng_matmul(NULL, ENG_ISA_SCALAR, &m, x, 1, y, NULL, &err), ORTMEM_E_INVALID);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(y[i], (float)(i + 1), "y[%d] written by a refused call", i);
    cr_assert_null(scratch.bytes);
    cr_assert_eq(scratch.capacity, 0u);
}

Test(kernels_matmul, scratch_grows_once_and_is_reused)
{
    ref_rng rng = {99};
    uint8_t *w = ref_random_matrix(ENG_TYPE_Q8_0, 8, 64, &rng);
    float x[3 * 64], y[3 * 8];
    for (int i = 0; i < 3 * 64; i++)
        x[i] = (float)ref_uniform(&rng, -1, 1);
    const eng_matrix m = {ENG_TYPE_Q8_0, w, 8, 64};
    eng_scratch scratch = {0};
    cr_assert_eq(eng_matmul(NULL, ENG_ISA_SCALAR, &m, x, 3, y, &scratch, NULL), ORTMEM_OK);
    cr_assert_eq(scratch.capacity, 3 * 2 * sizeof(eng_block_q8_0));
    void *first = scratch.bytes;
    cr_assert_eq(eng_matmul(NULL, ENG_ISA_SCALAR, &m, x, 1, y, &scratch, NULL), ORTMEM_OK);
    cr_assert_eq(scratch.bytes, first, "a smaller call reuses the buffer");
    cr_assert_eq(scratch.capacity, 3 * 2 * sizeof(eng_block_q8_0), "and keeps its size");
    eng_scratch_free(&scratch);
    cr_assert_null(scratch.bytes);
    free(w);
}

/* ---- Rows as f32 ---- */

Test(kernels_row, every_type_matches_the_reference)
{
    const uint32_t types[] = {ENG_TYPE_F32,  ENG_TYPE_F16,  ENG_TYPE_BF16, ENG_TYPE_Q4_0,
                              ENG_TYPE_Q4_1, ENG_TYPE_Q5_0, ENG_TYPE_Q5_1, ENG_TYPE_Q8_0,
                              ENG_TYPE_Q4_K, ENG_TYPE_Q5_K, ENG_TYPE_Q6_K};
    const size_t rows = 3, cols = 512;
    float out[512];
    double ref[512];
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const eng_type_traits t = eng_type_traits_of(types[ti]);
        ref_rng rng = {7 + ti};
        uint8_t *w = ref_random_matrix(types[ti], rows, cols, &rng);
        const eng_matrix m = {types[ti], w, rows, cols};
        eng_error err = {0};
        cr_assert_eq(eng_matrix_row(&m, 2, out, &err), ORTMEM_OK, "%s: %s", t.name, err.message);
        ref_dequant_row(types[ti], w + 2 * (cols / t.block_elems) * t.block_bytes, cols, ref);
        for (size_t i = 0; i < cols; i++)
            cr_assert_leq(fabs(out[i] - ref[i]), 1e-6 * fabs(ref[i]) + 1e-9,
                          "%s value %zu: %.9g, reference %.9g", t.name, i, out[i], ref[i]);
        cr_assert_eq(eng_matrix_row(&m, 3, out, &err), ORTMEM_E_RANGE);
        cr_assert(strstr(err.message, "row 3 of 3"), "%s", err.message);
        free(w);
    }
}
