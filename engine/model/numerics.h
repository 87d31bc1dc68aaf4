/* The forward pass's element-wise and attention arithmetic, each written to
 * give the bits llama.cpp's CPU backend (AVX2 + FMA + F16C build) gives:
 * the same operations in the same order, sums in the same association and
 * precision. Scalar code; fmaf is the fused multiply-add the vector code
 * uses, so the results do not depend on the instruction set. */
#ifndef ENGINE_MODEL_NUMERICS_H
#define ENGINE_MODEL_NUMERICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ggml_types.h"

/* y = x / sqrt(mean(x^2) + eps) * w over n values (the squares summed in
 * double, the scale in float, then x*scale*w). y may be x. */
void eng_rms_norm(const float *x, const float *w, size_t n, float eps, float *y);

/* The cos/sin table of one position for RoPE mode 0: pairs (2i, 2i+1),
 * theta_i = pos * base^(-2i/n_rot) formed by repeated multiplication as
 * ggml does; cs holds head_dim floats (cos, sin per pair). */
void eng_rope_table(int64_t pos, float base, uint32_t n_rot, uint32_t head_dim, float *cs);
/* Rotates the first n_rot values of one head in place with the table. */
void eng_rope_apply(float *x, const float *cs, uint32_t n_rot);

/* exp(x) as ggml's vectorised expf computes it (a polynomial, not libm). */
float eng_vexpf(float x);
/* x[i] = eng_vexpf(x[i]) for i < n (eight at a time where AVX2 is used). */
void eng_vexpf_row(float *x, size_t n);
/* y[i] = the half nearest x[i] (ties to even), as eng_f32_to_f16. */
void eng_halves_from_floats(const float *x, eng_f16 *y, size_t n);
/* silu(x) * g, through eng_vexpf, over n values (n a multiple of 8, as
 * the vector loop covers every value then). */
void eng_swiglu(const float *x, const float *g, size_t n, float *y);

/* Softmax over the first n of scores (the visible positions), in place:
 * max-subtracted, exponentials through eng_vexpf, the sum in double over
 * 8-value groups each added as ggml's horizontal add does, then scaled by
 * the float of 1/sum. */
void eng_softmax(float *scores, size_t n);

/* Builds the half-to-float table the products below read; once per
 * process, before the first of them (thread-safe). */
void eng_numerics_init(void);

/* The two ways llama.cpp forms an F16 dot product in attention:
 * decode (one token: ggml_vec_dot_f16, 4 x 8 accumulators) and batch
 * (several tokens: the tiled GEMM, one 8-lane accumulator). Each sums
 * x[i]*y[i] for i < n, products fused into f32 lanes chosen by i. */
typedef enum eng_dot_kind { ENG_DOT_DECODE = 0, ENG_DOT_BATCH = 1 } eng_dot_kind;

/* sum over i < n of a[i*a_stride] * b[i] (halfs; a_stride in elements). */
float eng_dot_f16(eng_dot_kind kind, const eng_f16 *a, size_t a_stride, const eng_f16 *b, size_t n);

/* The largest head dimension eng_dot_f16_rows handles. */
#define ENG_ATTN_MAX_DIM 256

/* out[d] = sum over j < n of v(j)[d] * w[j] for d < dim, v(j) = v + j*v_stride
 * (halfs), with the same lane rules (lanes chosen by j). */
void eng_dot_f16_rows(eng_dot_kind kind, const eng_f16 *v, size_t v_stride, const eng_f16 *w,
                      size_t n, size_t dim, float *out);

#endif
