#include "reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t ref_next(ref_rng *rng)
{
    uint64_t x = rng->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng->state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

double ref_uniform(ref_rng *rng, double lo, double hi)
{
    return lo + (hi - lo) * (double)(ref_next(rng) >> 11) / 9007199254740992.0;
}

static double h2d(eng_f16 h)
{
    /* Half to double by the format's definition. */
    const int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
    double v = exp == 0 ? ldexp(mant, -24) : ldexp(1024 + mant, exp - 25);
    return sign ? -v : v;
}

static void k_scale_min(int j, const uint8_t *q, int *scale, int *min)
{
    if (j < 4) {
        *scale = q[j] & 63;
        *min = q[j + 4] & 63;
    } else {
        *scale = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

void ref_dequant_row(uint32_t type, const void *row, size_t n, double *out)
{
    const uint8_t *p = row;
    switch (type) {
    case ENG_TYPE_F32:
        for (size_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, p + 4 * i, 4);
            out[i] = f;
        }
        return;
    case ENG_TYPE_F16:
        for (size_t i = 0; i < n; i++) {
            eng_f16 h;
            memcpy(&h, p + 2 * i, 2);
            out[i] = h2d(h);
        }
        return;
    case ENG_TYPE_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            uint32_t bits = (uint32_t)h << 16;
            float f;
            memcpy(&f, &bits, 4);
            out[i] = f;
        }
        return;
    default: break;
    }
    const eng_type_traits t = eng_type_traits_of(type);
    for (size_t b = 0; b < n / t.block_elems; b++, p += t.block_bytes) {
        double *y = out + b * t.block_elems;
        switch (type) {
        case ENG_TYPE_Q4_0: {
            const eng_block_q4_0 *x = (const void *)p;
            for (int i = 0; i < 32; i++)
                y[i] = h2d(x->d) * (((i < 16 ? x->qs[i] : x->qs[i - 16] >> 4) & 15) - 8);
            break;
        }
        case ENG_TYPE_Q4_1: {
            const eng_block_q4_1 *x = (const void *)p;
            for (int i = 0; i < 32; i++)
                y[i] = h2d(x->d) * ((i < 16 ? x->qs[i] : x->qs[i - 16] >> 4) & 15) + h2d(x->m);
            break;
        }
        case ENG_TYPE_Q5_0:
        case ENG_TYPE_Q5_1: {
            const int has_min = type == ENG_TYPE_Q5_1;
            const uint8_t *qh =
                has_min ? ((const eng_block_q5_1 *)p)->qh : ((const eng_block_q5_0 *)p)->qh;
            const uint8_t *qs =
                has_min ? ((const eng_block_q5_1 *)p)->qs : ((const eng_block_q5_0 *)p)->qs;
            eng_f16 d, m = 0;
            memcpy(&d, p, 2);
            if (has_min)
                memcpy(&m, p + 2, 2);
            for (int i = 0; i < 32; i++) {
                const int nib = (i < 16 ? qs[i] : qs[i - 16] >> 4) & 15;
                const int q = nib | (((qh[i / 8] >> (i % 8)) & 1) << 4);
                y[i] = has_min ? h2d(d) * q + h2d(m) : h2d(d) * (q - 16);
            }
            break;
        }
        case ENG_TYPE_Q8_0: {
            const eng_block_q8_0 *x = (const void *)p;
            for (int i = 0; i < 32; i++)
                y[i] = h2d(x->d) * x->qs[i];
            break;
        }
        case ENG_TYPE_Q4_K:
        case ENG_TYPE_Q5_K: {
            const int five = type == ENG_TYPE_Q5_K;
            const eng_block_q4_k *x4 = (const void *)p;
            const eng_block_q5_k *x5 = (const void *)p;
            const uint8_t *scales = five ? x5->scales : x4->scales;
            const uint8_t *qs = five ? x5->qs : x4->qs;
            const double d = h2d(five ? x5->d : x4->d), dmin = h2d(five ? x5->dmin : x4->dmin);
            for (int i = 0; i < 256; i++) {
                const int sub = i / 32, chunk = i / 64, l = i % 32;
                const int byte = qs[chunk * 32 + l];
                int q = (sub % 2 == 0) ? (byte & 15) : (byte >> 4);
                if (five)
                    q += ((x5->qh[l] >> sub) & 1) << 4;
                int sc, mn;
                k_scale_min(sub, scales, &sc, &mn);
                y[i] = d * sc * q - dmin * mn;
            }
            break;
        }
        case ENG_TYPE_Q6_K: {
            const eng_block_q6_k *x = (const void *)p;
            for (int i = 0; i < 256; i++) {
                const int half = i / 128, j = i % 128, quarter = j / 32, l = j % 32;
                const uint8_t *ql = x->ql + 64 * half, *qh = x->qh + 32 * half;
                const int lowb = (quarter == 0   ? ql[l] & 15
                                  : quarter == 1 ? ql[l + 32] & 15
                                  : quarter == 2 ? ql[l] >> 4
                                                 : ql[l + 32] >> 4);
                const int high = (qh[l] >> (2 * quarter)) & 3;
                const int q = (lowb | (high << 4)) - 32;
                y[i] = h2d(x->d) * x->scales[8 * half + quarter * 2 + l / 16] * q;
            }
            break;
        }
        default: abort();
        }
    }
}

static eng_f16 random_half(ref_rng *rng, double lo, double hi)
{
    return eng_f32_to_f16((float)ref_uniform(rng, lo, hi));
}

void *ref_random_matrix(uint32_t type, size_t rows, size_t n, ref_rng *rng)
{
    const eng_type_traits t = eng_type_traits_of(type);
    const size_t blocks = rows * (n / t.block_elems);
    uint8_t *data = malloc(blocks * t.block_bytes);
    for (size_t i = 0; i < blocks * t.block_bytes; i++)
        data[i] = (uint8_t)ref_next(rng);
    for (size_t b = 0; b < blocks; b++) {
        uint8_t *p = data + b * t.block_bytes;
        eng_f16 d = random_half(rng, -0.05, 0.05), m = random_half(rng, -0.2, 0.0);
        switch (type) {
        case ENG_TYPE_F32: {
            float f = (float)ref_uniform(rng, -1, 1);
            memcpy(p, &f, 4);
            break;
        }
        case ENG_TYPE_F16:
            d = random_half(rng, -1, 1);
            memcpy(p, &d, 2);
            break;
        case ENG_TYPE_BF16: {
            float f = (float)ref_uniform(rng, -1, 1);
            uint32_t bits;
            memcpy(&bits, &f, 4);
            uint16_t h = (uint16_t)(bits >> 16);
            memcpy(p, &h, 2);
            break;
        }
        case ENG_TYPE_Q4_0:
        case ENG_TYPE_Q5_0:
        case ENG_TYPE_Q8_0: memcpy(p, &d, 2); break;
        case ENG_TYPE_Q4_1:
        case ENG_TYPE_Q5_1:
            memcpy(p, &d, 2);
            memcpy(p + 2, &m, 2);
            break;
        case ENG_TYPE_Q4_K:
        case ENG_TYPE_Q5_K: {
            eng_f16 kd = random_half(rng, 0.0, 0.004), kmin = random_half(rng, 0.0, 0.004);
            memcpy(p, &kd, 2);
            memcpy(p + 2, &kmin, 2);
            break;
        }
        case ENG_TYPE_Q6_K: {
            eng_f16 kd = random_half(rng, -0.002, 0.002);
            memcpy(p + offsetof(eng_block_q6_k, d), &kd, 2);
            break;
        }
        default: abort();
        }
    }
    return data;
}
