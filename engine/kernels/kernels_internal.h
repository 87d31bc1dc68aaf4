/* What the kernels' translation units share: the activation quantizers and
 * the per-row dot products of each instruction set, and the table that pairs
 * a weight type with its activation format. Not part of the engine's
 * interface (tests include it to compare the two instruction sets).
 *
 * Every scalar routine reproduces the AVX2 one bit for bit: the same 8-lane
 * float accumulators with fused multiply-adds in the same order, the same
 * horizontal sum, the same rounding, so tokens do not depend on the CPU. */
#ifndef ENGINE_KERNELS_KERNELS_INTERNAL_H
#define ENGINE_KERNELS_KERNELS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* Converts n values (a whole number of the format's blocks) of one row. */
typedef void (*eng_quantize_fn)(const float *x, void *out, size_t n);
/* One weight row times one activation row of n values. */
typedef float (*eng_dot_fn)(size_t n, const void *w, const void *act);
/* Four rows, stride bytes apart, times one activation row; each result
 * bit-identical to the one-row routine's. */
typedef void (*eng_dot4_fn)(size_t n, const void *w, size_t stride, const void *act, float out[4]);

typedef struct eng_kernel {
    uint32_t act_type; /* the activations' format (ENG_TYPE_F32: x as given) */
    eng_quantize_fn quantize;
    eng_dot_fn dot;
    eng_dot4_fn dot4; /* NULL: rows go one at a time */
} eng_kernel;

/* The kernel for weight type and isa; false for a type without products. */
bool eng_kernel_lookup(uint32_t type, eng_isa isa, eng_kernel *out);

/* Bytes of one row of n values in an activation format. */
size_t eng_act_row_bytes(uint32_t act_type, size_t n);

/* True when the CPU and the OS allow AVX2+FMA+F16C (ignores the override). */
bool eng_isa_hw_avx2(void);

/* ---- Activation formats: scalar ---- */
void eng_quantize_q8_0_scalar(const float *x, void *out, size_t n);
void eng_quantize_q8_1_scalar(const float *x, void *out, size_t n);
void eng_quantize_q8_k_scalar(const float *x, void *out, size_t n);
void eng_quantize_f16_scalar(const float *x, void *out, size_t n);
void eng_quantize_bf16_scalar(const float *x, void *out, size_t n);

/* ---- Dot products: scalar ---- */
float eng_dot_q4_0_scalar(size_t n, const void *w, const void *act);
float eng_dot_q4_1_scalar(size_t n, const void *w, const void *act);
float eng_dot_q5_0_scalar(size_t n, const void *w, const void *act);
float eng_dot_q5_1_scalar(size_t n, const void *w, const void *act);
float eng_dot_q8_0_scalar(size_t n, const void *w, const void *act);
float eng_dot_f32_scalar(size_t n, const void *w, const void *act);
float eng_dot_f16_scalar(size_t n, const void *w, const void *act);
float eng_dot_bf16_scalar(size_t n, const void *w, const void *act);
float eng_dot_q4_k_scalar(size_t n, const void *w, const void *act);
float eng_dot_q5_k_scalar(size_t n, const void *w, const void *act);
float eng_dot_q6_k_scalar(size_t n, const void *w, const void *act);

/* The F32 product's tail (values past the last whole 32), shared by both. */
float eng_f32_tail(float total, const float *x, const float *y, size_t i, size_t n);

/* ---- AVX2+FMA+F16C (dot_avx2.c, compiled for those extensions only) ---- */
void eng_quantize_q8_0_avx2(const float *x, void *out, size_t n);
void eng_quantize_q8_1_avx2(const float *x, void *out, size_t n);
void eng_quantize_f16_avx2(const float *x, void *out, size_t n);
float eng_dot_q4_0_avx2(size_t n, const void *w, const void *act);
float eng_dot_q4_1_avx2(size_t n, const void *w, const void *act);
float eng_dot_q5_0_avx2(size_t n, const void *w, const void *act);
float eng_dot_q5_1_avx2(size_t n, const void *w, const void *act);
float eng_dot_q8_0_avx2(size_t n, const void *w, const void *act);
void eng_dot4_q4_1_avx2(size_t n, const void *w, size_t stride, const void *act, float out[4]);
void eng_dot4_q8_0_avx2(size_t n, const void *w, size_t stride, const void *act, float out[4]);
float eng_dot_q4_k_avx2(size_t n, const void *w, const void *act);
float eng_dot_q5_k_avx2(size_t n, const void *w, const void *act);
float eng_dot_q6_k_avx2(size_t n, const void *w, const void *act);
float eng_dot_f32_avx2(size_t n, const void *w, const void *act);
float eng_dot_f16_avx2(size_t n, const void *w, const void *act);

#endif
