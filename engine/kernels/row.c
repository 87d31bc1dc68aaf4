/* One weight row as f32 (the embedding lookup), with llama.cpp's
 * dequantization arithmetic: d * q, d * q + m, d * scale * q. */
#include "kernels/kernels_internal.h"

#include <string.h>

static void row_q4_0(const eng_block_q4_0 *x, size_t nb, float *y)
{
    for (size_t b = 0; b < nb; b++, y += ENG_QK) {
        const float d = eng_f16_to_f32(x[b].d);
        for (int j = 0; j < ENG_QK / 2; j++) {
            y[j] = (float)((x[b].qs[j] & 0x0f) - 8) * d;
            y[j + ENG_QK / 2] = (float)((x[b].qs[j] >> 4) - 8) * d;
        }
    }
}

static void row_q4_1(const eng_block_q4_1 *x, size_t nb, float *y)
{
    for (size_t b = 0; b < nb; b++, y += ENG_QK) {
        const float d = eng_f16_to_f32(x[b].d), m = eng_f16_to_f32(x[b].m);
        for (int j = 0; j < ENG_QK / 2; j++) {
            y[j] = (float)(x[b].qs[j] & 0x0f) * d + m;
            y[j + ENG_QK / 2] = (float)(x[b].qs[j] >> 4) * d + m;
        }
    }
}

static uint32_t high_bits(const uint8_t qh[4])
{
    uint32_t v;
    memcpy(&v, qh, sizeof v);
    return v;
}

static void row_q5_0(const eng_block_q5_0 *x, size_t nb, float *y)
{
    for (size_t b = 0; b < nb; b++, y += ENG_QK) {
        const float d = eng_f16_to_f32(x[b].d);
        const uint32_t qh = high_bits(x[b].qh);
        for (int j = 0; j < ENG_QK / 2; j++) {
            const int lo = (x[b].qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
            const int hi = (x[b].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            y[j] = (float)(lo - 16) * d;
            y[j + ENG_QK / 2] = (float)(hi - 16) * d;
        }
    }
}

static void row_q5_1(const eng_block_q5_1 *x, size_t nb, float *y)
{
    for (size_t b = 0; b < nb; b++, y += ENG_QK) {
        const float d = eng_f16_to_f32(x[b].d), m = eng_f16_to_f32(x[b].m);
        const uint32_t qh = high_bits(x[b].qh);
        for (int j = 0; j < ENG_QK / 2; j++) {
            const int lo = (x[b].qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
            const int hi = (x[b].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            y[j] = (float)lo * d + m;
            y[j + ENG_QK / 2] = (float)hi * d + m;
        }
    }
}

static void row_q8_0(const eng_block_q8_0 *x, size_t nb, float *y)
{
    for (size_t b = 0; b < nb; b++, y += ENG_QK) {
        const float d = eng_f16_to_f32(x[b].d);
        for (int j = 0; j < ENG_QK; j++)
            y[j] = (float)x[b].qs[j] * d;
    }
}

static void scale_min_k4(int j, const uint8_t *q, uint8_t *scale, uint8_t *min)
{
    if (j < 4) {
        *scale = q[j] & 63;
        *min = q[j + 4] & 63;
    } else {
        *scale = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *min = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void row_q45_k(const void *blocks, size_t nb, float *y, bool five_bits)
{
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *scales, *ql, *qh = NULL;
        float d, dmin;
        if (five_bits) {
            const eng_block_q5_k *x = (const eng_block_q5_k *)blocks + b;
            scales = x->scales, ql = x->qs, qh = x->qh;
            d = eng_f16_to_f32(x->d), dmin = eng_f16_to_f32(x->dmin);
        } else {
            const eng_block_q4_k *x = (const eng_block_q4_k *)blocks + b;
            scales = x->scales, ql = x->qs;
            d = eng_f16_to_f32(x->d), dmin = eng_f16_to_f32(x->dmin);
        }
        for (int j = 0; j < 4; j++, ql += 32) {
            uint8_t sc, m;
            scale_min_k4(2 * j, scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            scale_min_k4(2 * j + 1, scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) {
                const int h1 = qh ? ((qh[l] >> (2 * j)) & 1) << 4 : 0;
                *y++ = d1 * (float)((ql[l] & 0x0f) + h1) - m1;
            }
            for (int l = 0; l < 32; l++) {
                const int h2 = qh ? ((qh[l] >> (2 * j + 1)) & 1) << 4 : 0;
                *y++ = d2 * (float)((ql[l] >> 4) + h2) - m2;
            }
        }
    }
}

static void row_q6_k(const eng_block_q6_k *x, size_t nb, float *y)
{
    for (size_t b = 0; b < nb; b++) {
        const float d = eng_f16_to_f32(x[b].d);
        const uint8_t *ql = x[b].ql, *qh = x[b].qh;
        const int8_t *sc = x[b].scales;
        for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

ortmem_status eng_matrix_row(const eng_matrix *w, size_t r, float *out, eng_error *err)
{
    if (!w || !out || !w->data)
        return eng_fail(err, ORTMEM_E_INVALID, "matrix row: NULL argument");
    const eng_type_traits t = eng_type_traits_of(w->type);
    if (!t.name)
        return eng_fail(err, ORTMEM_E_UNSUPPORTED, "matrix row: type id %u unknown",
                        (unsigned)w->type);
    if (w->cols % t.block_elems != 0)
        return eng_fail(err, ORTMEM_E_ALIGN,
                        "matrix row: %zu columns of %s are not whole blocks of %u values", w->cols,
                        t.name, t.block_elems);
    if (r >= w->rows)
        return eng_fail(err, ORTMEM_E_RANGE, "matrix row: row %zu of %zu", r, w->rows);
    const size_t nb = w->cols / t.block_elems;
    const uint8_t *row = (const uint8_t *)w->data + r * nb * t.block_bytes;
    switch (w->type) {
    case ENG_TYPE_F32: memcpy(out, row, w->cols * sizeof(float)); break;
    case ENG_TYPE_F16:
        for (size_t i = 0; i < w->cols; i++) {
            eng_f16 h;
            memcpy(&h, row + 2 * i, sizeof h);
            out[i] = eng_f16_to_f32(h);
        }
        break;
    case ENG_TYPE_BF16:
        for (size_t i = 0; i < w->cols; i++) {
            uint16_t h;
            memcpy(&h, row + 2 * i, sizeof h);
            out[i] = eng_bf16_to_f32(h);
        }
        break;
    case ENG_TYPE_Q4_0: row_q4_0((const void *)row, nb, out); break;
    case ENG_TYPE_Q4_1: row_q4_1((const void *)row, nb, out); break;
    case ENG_TYPE_Q5_0: row_q5_0((const void *)row, nb, out); break;
    case ENG_TYPE_Q5_1: row_q5_1((const void *)row, nb, out); break;
    case ENG_TYPE_Q8_0: row_q8_0((const void *)row, nb, out); break;
    case ENG_TYPE_Q4_K: row_q45_k(row, nb, out, false); break;
    case ENG_TYPE_Q5_K: row_q45_k(row, nb, out, true); break;
    case ENG_TYPE_Q6_K: row_q6_k((const void *)row, nb, out); break;
    default:
        return eng_fail(err, ORTMEM_E_UNSUPPORTED, "matrix row: type %s has no row conversion",
                        t.name);
    }
    return ORTMEM_OK;
}
