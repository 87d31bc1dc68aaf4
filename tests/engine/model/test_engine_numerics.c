/* The forward pass's arithmetic (engine/model/numerics.h) against values
 * llama.cpp computed (golden_ops.h): every output bit for bit, in both the
 * batch and the decode form of attention. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "golden_ops.h"
#include "model/numerics.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static float f32_of(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static void floats(const uint32_t *bits, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = f32_of(bits[i]);
}

static void same_bits(const char *what, const float *ours, const uint32_t *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t got;
        memcpy(&got, &ours[i], sizeof got);
        cr_assert_eq(got, want[i], "%s[%zu]: ours %.9g (0x%08x), llama.cpp %.9g (0x%08x)", what, i,
                     (double)ours[i], got, (double)f32_of(want[i]), want[i]);
    }
}

TestSuite(engine_numerics, .init = eng_numerics_init);

Test(engine_numerics, rms_norm)
{
    float x[576], w[576], y[576];
    floats(golden_norm_x, 576, x);
    floats(golden_norm_w, 576, w);
    eng_rms_norm(x, w, 576, 1e-5f, y);
    same_bits("norm", y, golden_norm_y, 576);
}

Test(engine_numerics, rope_mode_0)
{
    float cs[64], x[64];
    floats(golden_rope3_in, 64, x);
    eng_rope_table(3, 100000.0f, 64, 64, cs);
    eng_rope_apply(x, cs, 64);
    same_bits("rope at 3", x, golden_rope3_out, 64);
    floats(golden_rope5_in, 64, x);
    eng_rope_table(5, 100000.0f, 64, 64, cs);
    eng_rope_apply(x, cs, 64);
    same_bits("rope at 5", x, golden_rope5_out, 64);
}

/* One query head: scores against the visible keys, softmax of the scaled
 * scores, the weighted values; visible positions 5 (batch, the prompt's last
 * token) and 6 (decode). */
static void attention(eng_dot_kind kind, const uint16_t *q, size_t visible, const uint32_t *kq,
                      const uint32_t *soft, const uint32_t *kqv)
{
    float scores[8], out[64];
    for (size_t p = 0; p < visible; p++)
        scores[p] = eng_dot_f16(kind, golden_keys + p * 64, 1, q, 64);
    same_bits(kind == ENG_DOT_BATCH ? "kq (batch)" : "kq (decode)", scores, kq, visible);
    for (size_t p = 0; p < visible; p++)
        scores[p] *= 0.125f;
    eng_softmax(scores, visible);
    same_bits("softmax", scores, soft, visible);
    uint16_t weights[8];
    for (size_t p = 0; p < visible; p++)
        weights[p] = eng_f32_to_f16(scores[p]);
    eng_dot_f16_rows(kind, golden_values, 64, weights, visible, 64, out);
    same_bits(kind == ENG_DOT_BATCH ? "kqv (batch)" : "kqv (decode)", out, kqv, 64);
}

Test(engine_numerics, attention_batch)
{
    attention(ENG_DOT_BATCH, golden_q_batch, COUNT(golden_kq_batch), golden_kq_batch,
              golden_soft_batch, golden_kqv_batch);
}

Test(engine_numerics, attention_decode)
{
    attention(ENG_DOT_DECODE, golden_q_decode, COUNT(golden_kq_decode), golden_kq_decode,
              golden_soft_decode, golden_kqv_decode);
}

Test(engine_numerics, swiglu)
{
    float g[64], u[64], y[64];
    floats(golden_gate, 64, g);
    floats(golden_up, 64, u);
    eng_swiglu(g, u, 64, y);
    same_bits("swiglu", y, golden_swiglu, 64);
}

/* The vectorised exp stays within 2 ulp of libm's over the range softmax
 * feeds it, and its far ranges give 0 and infinity. */
Test(engine_numerics, vexpf_tracks_expf)
{
    for (float x = -87.0f; x <= 0.0f; x += 0.01171875f) {
        float a = eng_vexpf(x), b = expf(x);
        cr_assert_leq(fabsf(a - b), 2.5f * (nextafterf(b, INFINITY) - b), "exp(%g): %g vs %g",
                      (double)x, (double)a, (double)b);
    }
    cr_assert_eq(eng_vexpf(-200.0f), 0.0f);
    cr_assert(isinf(eng_vexpf(200.0f)));
}

/* The rows' exp and halves (eight lanes at a time on the AVX2 path) give the
 * scalar functions' bits for every float in a sweep of the whole range,
 * infinities, zeros and NaN included, and densely over [-200, 200] (where
 * exp's scaled paths start, |x| above 126 and 192 times ln 2). */
Test(engine_numerics, rows_match_the_scalar_functions)
{
    enum { N = 4096, DENSE = 40 };
    static float x[N], e[N];
    static eng_f16 h[N];
    for (uint64_t round = 0; round < 256 + DENSE; round++) {
        for (size_t i = 0; i < N; i++) {
            uint32_t bits = (uint32_t)(round * N * 4093 + i * 977);
            memcpy(&x[i], &bits, sizeof bits);
            if (round >= 256) /* dense: steps of 400 / (DENSE * N) */
                x[i] = -200.0f + 400.0f * (float)((round - 256) * N + i) / (float)(DENSE * N);
        }
        x[0] = INFINITY, x[1] = -INFINITY, x[2] = 0.0f, x[3] = -0.0f, x[4] = NAN;
        memcpy(e, x, sizeof e);
        eng_vexpf_row(e, N);
        eng_halves_from_floats(x, h, N);
        for (size_t i = 0; i < N; i++) {
            float want = eng_vexpf(x[i]);
            cr_assert(memcmp(&e[i], &want, sizeof want) == 0 || (isnan(e[i]) && isnan(want)),
                      "exp(%a): row %a, scalar %a", (double)x[i], (double)e[i], (double)want);
            eng_f16 hw = eng_f32_to_f16(x[i]);
            cr_assert(h[i] == hw || (isnan(x[i]) && (h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff)),
                      "half(%a): row 0x%04x, scalar 0x%04x", (double)x[i], h[i], hw);
        }
    }
}
