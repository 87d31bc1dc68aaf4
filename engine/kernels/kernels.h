/* CPU kernels: weight-times-activation products for the file's types, with
 * the instruction set chosen at run time (AVX2+FMA when the CPU and the OS
 * both allow it, else scalar), spread over a thread pool.
 *
 * Numerics follow llama.cpp's CPU backend built for AVX2 (the reference the
 * engine's tokens are compared with): activations are quantized per 32-value
 * block to the weight type's activation format (Q8_1 for Q4_1/Q5_1, Q8_0 for
 * Q4_0/Q5_0/Q8_0, Q8_K for the K formats, F16 for F16 weights) and the dot
 * products are integer within a block, scaled and summed in f32. */
#ifndef ENGINE_KERNELS_KERNELS_H
#define ENGINE_KERNELS_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ggml_types.h"
#include "common/status.h"

/* ---- Instruction sets ---- */
typedef enum eng_isa {
    ENG_ISA_SCALAR = 0,
    ENG_ISA_AVX2 = 1, /* AVX2 + FMA + F16C */
} eng_isa;

/* What this machine executes (cpuid and the OS's enabled state through
 * xgetbv), detected once; ORTMEM_ENGINE_ISA=scalar forces the fallback. */
eng_isa eng_isa_detect(void);
const char *eng_isa_name(eng_isa isa);

/* ---- Thread pool ----
 * threads workers (the caller's thread is one of them); eng_pool_run calls
 * fn(ctx, task) for every task in [0, tasks) across them and returns when all
 * are done. One run at a time per pool. */
typedef struct eng_pool eng_pool;
typedef void (*eng_task_fn)(void *ctx, size_t task);
ortmem_status eng_pool_create(unsigned threads, eng_pool **out, eng_error *err);
void eng_pool_destroy(eng_pool *pool);
unsigned eng_pool_threads(const eng_pool *pool);
void eng_pool_run(eng_pool *pool, eng_task_fn fn, void *ctx, size_t tasks);

/* ---- Products ----
 * A weight matrix as the file stores it: rows of cols values (cols = ne[0],
 * rows = ne[1]), each row cols/block_elems blocks of the type. */
typedef struct eng_matrix {
    uint32_t type;
    const void *data;
    size_t rows, cols;
} eng_matrix;

/* Scratch the products quantize activations into; grows as needed. */
typedef struct eng_scratch {
    void *bytes;
    size_t capacity;
} eng_scratch;
void eng_scratch_free(eng_scratch *scratch);

/* y[t][r] = sum_c w[r][c] * x[t][c] for t < n_tokens (x: n_tokens rows of
 * w->cols floats, y: n_tokens rows of w->rows floats). ORTMEM_E_UNSUPPORTED
 * naming the type, ORTMEM_E_ALIGN when cols is not a whole number of blocks,
 * ORTMEM_E_NOMEM when scratch cannot grow. */
ortmem_status eng_matmul(eng_pool *pool, eng_isa isa, const eng_matrix *w, const float *x,
                         size_t n_tokens, float *y, eng_scratch *scratch, eng_error *err);

/* Row r of w as f32 (embedding lookup). */
ortmem_status eng_matrix_row(const eng_matrix *w, size_t r, float *out, eng_error *err);

#endif
