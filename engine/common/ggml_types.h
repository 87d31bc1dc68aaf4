/* Tensor element types as GGUF numbers them (ggml's type ids) and the block
 * layouts of the quantized ones, shared by the GGUF reader, dequantization
 * and the kernels. A block holds block_elems values in block_bytes bytes;
 * the layouts are the file format, so they are fixed here once. */
#ifndef ENGINE_COMMON_GGML_TYPES_H
#define ENGINE_COMMON_GGML_TYPES_H

#include <stdint.h>
#include <string.h>

/* The layouts are checked at compile time in C and in C++ (engine/cuda). */
#ifdef __cplusplus
#define ENG_STATIC_ASSERT static_assert
#else
#define ENG_STATIC_ASSERT _Static_assert
#endif

typedef enum eng_ggml_type {
    ENG_TYPE_F32 = 0,
    ENG_TYPE_F16 = 1,
    ENG_TYPE_Q4_0 = 2,
    ENG_TYPE_Q4_1 = 3,
    ENG_TYPE_Q5_0 = 6,
    ENG_TYPE_Q5_1 = 7,
    ENG_TYPE_Q8_0 = 8,
    ENG_TYPE_Q8_1 = 9,
    ENG_TYPE_Q2_K = 10,
    ENG_TYPE_Q3_K = 11,
    ENG_TYPE_Q4_K = 12,
    ENG_TYPE_Q5_K = 13,
    ENG_TYPE_Q6_K = 14,
    ENG_TYPE_Q8_K = 15,
    ENG_TYPE_BF16 = 30,
    ENG_TYPE_COUNT_MAX = 64 /* ids at or above are unknown */
} eng_ggml_type;

#define ENG_QK 32    /* values per block of the 32-element formats */
#define ENG_QK_K 256 /* values per super-block of the K formats */

typedef uint16_t eng_f16; /* IEEE half, bit pattern */

typedef struct {
    eng_f16 d;
    uint8_t qs[ENG_QK / 2];
} eng_block_q4_0;

typedef struct {
    eng_f16 d, m;
    uint8_t qs[ENG_QK / 2];
} eng_block_q4_1;

typedef struct {
    eng_f16 d;
    uint8_t qh[4];
    uint8_t qs[ENG_QK / 2];
} eng_block_q5_0;

typedef struct {
    eng_f16 d, m;
    uint8_t qh[4];
    uint8_t qs[ENG_QK / 2];
} eng_block_q5_1;

typedef struct {
    eng_f16 d;
    int8_t qs[ENG_QK];
} eng_block_q8_0;

typedef struct {
    eng_f16 d, s; /* s = d * sum(qs) */
    int8_t qs[ENG_QK];
} eng_block_q8_1;

typedef struct {
    uint8_t scales[ENG_QK_K / 16];
    uint8_t qs[ENG_QK_K / 4];
    eng_f16 d, dmin;
} eng_block_q2_k;

typedef struct {
    uint8_t hmask[ENG_QK_K / 8];
    uint8_t qs[ENG_QK_K / 4];
    uint8_t scales[12];
    eng_f16 d;
} eng_block_q3_k;

typedef struct {
    eng_f16 d, dmin;
    uint8_t scales[12];
    uint8_t qs[ENG_QK_K / 2];
} eng_block_q4_k;

typedef struct {
    eng_f16 d, dmin;
    uint8_t scales[12];
    uint8_t qh[ENG_QK_K / 8];
    uint8_t qs[ENG_QK_K / 2];
} eng_block_q5_k;

typedef struct {
    uint8_t ql[ENG_QK_K / 2];
    uint8_t qh[ENG_QK_K / 4];
    int8_t scales[ENG_QK_K / 16];
    eng_f16 d;
} eng_block_q6_k;

typedef struct {
    float d;
    int8_t qs[ENG_QK_K];
    int16_t bsums[ENG_QK_K / 16];
} eng_block_q8_k;

ENG_STATIC_ASSERT(sizeof(eng_block_q4_0) == 18, "q4_0 block");
ENG_STATIC_ASSERT(sizeof(eng_block_q4_1) == 20, "q4_1 block");
ENG_STATIC_ASSERT(sizeof(eng_block_q5_0) == 22, "q5_0 block");
ENG_STATIC_ASSERT(sizeof(eng_block_q5_1) == 24, "q5_1 block");
ENG_STATIC_ASSERT(sizeof(eng_block_q8_0) == 34, "q8_0 block");
ENG_STATIC_ASSERT(sizeof(eng_block_q8_1) == 36, "q8_1 block");
ENG_STATIC_ASSERT(sizeof(eng_block_q2_k) == 84, "q2_k block");
ENG_STATIC_ASSERT(sizeof(eng_block_q3_k) == 110, "q3_k block");
ENG_STATIC_ASSERT(sizeof(eng_block_q4_k) == 144, "q4_k block");
ENG_STATIC_ASSERT(sizeof(eng_block_q5_k) == 176, "q5_k block");
ENG_STATIC_ASSERT(sizeof(eng_block_q6_k) == 210, "q6_k block");
ENG_STATIC_ASSERT(sizeof(eng_block_q8_k) == 292, "q8_k block");

/* The eight 6-bit scales and minimums a Q4_K or Q5_K super-block packs in
 * its 12 scale bytes. */
static inline void eng_k_scales(const uint8_t packed[12], uint8_t scale[8], uint8_t min[8])
{
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            scale[j] = packed[j] & 63;
            min[j] = packed[j + 4] & 63;
        } else {
            scale[j] = (uint8_t)((packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4));
            min[j] = (uint8_t)((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
        }
    }
}

/* Elements per block, bytes per block and the name ("Q4_1") of a type the
 * engine knows; 0 / NULL for any other id. */
typedef struct eng_type_traits {
    const char *name;
    uint32_t block_elems;
    uint32_t block_bytes;
} eng_type_traits;

static inline eng_type_traits eng_type_traits_of(uint32_t type)
{
    switch (type) {
    case ENG_TYPE_F32: return (eng_type_traits){"F32", 1, 4};
    case ENG_TYPE_F16: return (eng_type_traits){"F16", 1, 2};
    case ENG_TYPE_BF16: return (eng_type_traits){"BF16", 1, 2};
    case ENG_TYPE_Q4_0: return (eng_type_traits){"Q4_0", ENG_QK, sizeof(eng_block_q4_0)};
    case ENG_TYPE_Q4_1: return (eng_type_traits){"Q4_1", ENG_QK, sizeof(eng_block_q4_1)};
    case ENG_TYPE_Q5_0: return (eng_type_traits){"Q5_0", ENG_QK, sizeof(eng_block_q5_0)};
    case ENG_TYPE_Q5_1: return (eng_type_traits){"Q5_1", ENG_QK, sizeof(eng_block_q5_1)};
    case ENG_TYPE_Q8_0: return (eng_type_traits){"Q8_0", ENG_QK, sizeof(eng_block_q8_0)};
    case ENG_TYPE_Q8_1: return (eng_type_traits){"Q8_1", ENG_QK, sizeof(eng_block_q8_1)};
    case ENG_TYPE_Q2_K: return (eng_type_traits){"Q2_K", ENG_QK_K, sizeof(eng_block_q2_k)};
    case ENG_TYPE_Q3_K: return (eng_type_traits){"Q3_K", ENG_QK_K, sizeof(eng_block_q3_k)};
    case ENG_TYPE_Q4_K: return (eng_type_traits){"Q4_K", ENG_QK_K, sizeof(eng_block_q4_k)};
    case ENG_TYPE_Q5_K: return (eng_type_traits){"Q5_K", ENG_QK_K, sizeof(eng_block_q5_k)};
    case ENG_TYPE_Q6_K: return (eng_type_traits){"Q6_K", ENG_QK_K, sizeof(eng_block_q6_k)};
    case ENG_TYPE_Q8_K: return (eng_type_traits){"Q8_K", ENG_QK_K, sizeof(eng_block_q8_k)};
    default: return (eng_type_traits){NULL, 0, 0};
    }
}

/* Half <-> single precision, exact both ways where representable; the
 * narrowing rounds to nearest even (as F16C's vcvtps2ph with mode 0 does). */
static inline float eng_f16_to_f32(eng_f16 h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        int shift = 0;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            shift++;
        }
        bits = sign | ((uint32_t)(113 - shift) << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline eng_f16 eng_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t abs = x & 0x7fffffffu;
    if (abs > 0x7f800000u) /* NaN: keep it quiet */
        return (eng_f16)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
    if (abs >= 0x477ff000u) /* rounds to or beyond 65520: infinity */
        return (eng_f16)(sign | 0x7c00u);
    if (abs < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (abs < 0x33000000u)
            return (eng_f16)sign;
        uint32_t exp = abs >> 23;
        uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - exp; /* 14..24 */
        uint32_t half = mant >> shift;
        uint32_t rest = mant & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1u);
        if (rest > mid || (rest == mid && (half & 1u)))
            half++;
        return (eng_f16)(sign | half);
    }
    uint32_t half = ((abs >> 13) - (112u << 10));
    uint32_t rest = abs & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
        half++;
    return (eng_f16)(sign | half);
}

static inline float eng_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

#endif
