/* The tests' own plain reference: weights and activations dequantized in
 * double, written from the block layouts alone (no engine code). */
#ifndef TESTS_ENGINE_KERNELS_REFERENCE_H
#define TESTS_ENGINE_KERNELS_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "common/ggml_types.h"

/* Row r's n values of weight type type, as doubles. */
void ref_dequant_row(uint32_t type, const void *row, size_t n, double *out);

/* Deterministic random numbers (xorshift64*). */
typedef struct ref_rng {
    uint64_t state;
} ref_rng;
uint64_t ref_next(ref_rng *rng);
double ref_uniform(ref_rng *rng, double lo, double hi);

/* rows x n weights of type, well formed (finite scales of sensible size),
 * into a buffer the caller frees. */
void *ref_random_matrix(uint32_t type, size_t rows, size_t n, ref_rng *rng);

#endif
