/* Weight-times-activation products: the activations are converted once per
 * call into the weight type's activation format (in the caller's scratch),
 * then row chunks are spread over the pool; each task computes its rows for
 * every token, so a weight row is read from memory once per call. */
#include "kernels/kernels_internal.h"

#include <stdlib.h>
#include <string.h>

/* Without dot_avx2.c (not an x86 build) the AVX2 names are never referenced;
 * eng_isa_hw_avx2() is false there, so eng_matmul never asks for them. */
#ifdef ENG_KERNELS_NO_AVX2
#define PICK(avx2_fn, scalar_fn) (scalar_fn)
#else
#define PICK(avx2_fn, scalar_fn) (avx2 ? (avx2_fn) : (scalar_fn))
#endif

bool eng_kernel_lookup(uint32_t type, eng_isa isa, eng_kernel *out)
{
    const bool avx2 = isa == ENG_ISA_AVX2;
    (void)avx2;
    eng_kernel k = {0};
    switch (type) {
    case ENG_TYPE_F32:
        k = (eng_kernel){ENG_TYPE_F32, NULL, PICK(eng_dot_f32_avx2, eng_dot_f32_scalar), NULL};
        break;
    case ENG_TYPE_F16:
        k = (eng_kernel){ENG_TYPE_F16, PICK(eng_quantize_f16_avx2, eng_quantize_f16_scalar),
                         PICK(eng_dot_f16_avx2, eng_dot_f16_scalar), NULL};
        break;
    case ENG_TYPE_BF16:
        k = (eng_kernel){ENG_TYPE_BF16, eng_quantize_bf16_scalar, eng_dot_bf16_scalar, NULL};
        break;
    case ENG_TYPE_Q4_0:
        k = (eng_kernel){ENG_TYPE_Q8_0, PICK(eng_quantize_q8_0_avx2, eng_quantize_q8_0_scalar),
                         PICK(eng_dot_q4_0_avx2, eng_dot_q4_0_scalar), NULL};
        break;
    case ENG_TYPE_Q4_1:
        k = (eng_kernel){ENG_TYPE_Q8_1, PICK(eng_quantize_q8_1_avx2, eng_quantize_q8_1_scalar),
                         PICK(eng_dot_q4_1_avx2, eng_dot_q4_1_scalar), NULL};
        break;
    case ENG_TYPE_Q5_0:
        k = (eng_kernel){ENG_TYPE_Q8_0, PICK(eng_quantize_q8_0_avx2, eng_quantize_q8_0_scalar),
                         PICK(eng_dot_q5_0_avx2, eng_dot_q5_0_scalar), NULL};
        break;
    case ENG_TYPE_Q5_1:
        k = (eng_kernel){ENG_TYPE_Q8_1, PICK(eng_quantize_q8_1_avx2, eng_quantize_q8_1_scalar),
                         PICK(eng_dot_q5_1_avx2, eng_dot_q5_1_scalar), NULL};
        break;
    case ENG_TYPE_Q8_0:
        k = (eng_kernel){ENG_TYPE_Q8_0, PICK(eng_quantize_q8_0_avx2, eng_quantize_q8_0_scalar),
                         PICK(eng_dot_q8_0_avx2, eng_dot_q8_0_scalar), NULL};
        break;
    case ENG_TYPE_Q4_K:
        k = (eng_kernel){ENG_TYPE_Q8_K, eng_quantize_q8_k_scalar,
                         PICK(eng_dot_q4_k_avx2, eng_dot_q4_k_scalar), NULL};
        break;
    case ENG_TYPE_Q5_K:
        k = (eng_kernel){ENG_TYPE_Q8_K, eng_quantize_q8_k_scalar,
                         PICK(eng_dot_q5_k_avx2, eng_dot_q5_k_scalar), NULL};
        break;
    case ENG_TYPE_Q6_K:
        k = (eng_kernel){ENG_TYPE_Q8_K, eng_quantize_q8_k_scalar,
                         PICK(eng_dot_q6_k_avx2, eng_dot_q6_k_scalar), NULL};
        break;
    default: return false;
    }
    if (type == ENG_TYPE_Q4_1)
        k.dot4 = PICK(eng_dot4_q4_1_avx2, NULL);
    if (type == ENG_TYPE_Q8_0)
        k.dot4 = PICK(eng_dot4_q8_0_avx2, NULL);
    *out = k;
    return true;
}

size_t eng_act_row_bytes(uint32_t act_type, size_t n)
{
    const eng_type_traits t = eng_type_traits_of(act_type);
    return t.block_elems ? n / t.block_elems * t.block_bytes : 0;
}

void eng_scratch_free(eng_scratch *scratch)
{
    if (!scratch)
        return;
    free(scratch->bytes);
    scratch->bytes = NULL;
    scratch->capacity = 0;
}

/* Rows per task: enough tasks for the pool to balance (several per thread),
 * few enough that handing them out stays cheap. */
static size_t rows_per_task(size_t rows, unsigned threads)
{
    if (threads <= 1)
        return rows ? rows : 1;
    const size_t target_tasks = (size_t)threads * 8;
    size_t chunk = (rows + target_tasks - 1) / target_tasks;
    if (chunk < 16)
        chunk = 16;
    return chunk;
}

typedef struct matmul_job {
    eng_kernel kernel;
    const uint8_t *w;
    size_t row_bytes, rows, cols;
    const float *x;
    const uint8_t *act;
    size_t act_row_bytes, n_tokens;
    float *y;
    size_t chunk;
} matmul_job;

static void quantize_task(void *ctx, size_t token)
{
    matmul_job *job = ctx;
    job->kernel.quantize(job->x + token * job->cols,
                         (uint8_t *)job->act + token * job->act_row_bytes, job->cols);
}

static void rows_task(void *ctx, size_t task)
{
    const matmul_job *job = ctx;
    const size_t first = task * job->chunk;
    const size_t end = first + job->chunk < job->rows ? first + job->chunk : job->rows;
    size_t r = first;
    if (job->kernel.dot4) { /* rows i, i + q, i + 2q, i + 3q together (see dot_avx2.c) */
        const size_t q = (end - first) / 4;
        for (size_t i = first; i < first + q; i++) {
            const uint8_t *rows = job->w + i * job->row_bytes;
            for (size_t t = 0; t < job->n_tokens; t++) {
                float out[4];
                job->kernel.dot4(job->cols, rows, q * job->row_bytes,
                                 job->act + t * job->act_row_bytes, out);
                float *yt = job->y + t * job->rows + i;
                for (int k = 0; k < 4; k++)
                    yt[(size_t)k * q] = out[k];
            }
        }
        r = first + 4 * q;
    }
    for (; r < end; r++) {
        const uint8_t *row = job->w + r * job->row_bytes;
        for (size_t t = 0; t < job->n_tokens; t++)
            job->y[t * job->rows + r] =
                job->kernel.dot(job->cols, row, job->act + t * job->act_row_bytes);
    }
}

ortmem_status eng_matmul(eng_pool *pool, eng_isa isa, const eng_matrix *w, const float *x,
                         size_t n_tokens, float *y, eng_scratch *scratch, eng_error *err)
{
    if (!w || !scratch || (n_tokens && (!x || !y || (!w->data && w->rows && w->cols))))
        return eng_fail(err, ORTMEM_E_INVALID,
                        "matmul: NULL argument (w %p, x %p, y %p, scratch %p)", (const void *)w,
                        (const void *)x, (void *)y, (void *)scratch);
    const eng_type_traits traits = eng_type_traits_of(w->type);
    eng_kernel kernel;
    if (!eng_kernel_lookup(w->type, isa, &kernel))
        return eng_fail(err, ORTMEM_E_UNSUPPORTED, "matmul: weight type %s (id %u) has no product",
                        traits.name ? traits.name : "unknown", (unsigned)w->type);
    if (isa != ENG_ISA_SCALAR && isa != ENG_ISA_AVX2)
        return eng_fail(err, ORTMEM_E_INVALID, "matmul: instruction set %d unknown", (int)isa);
    if (isa == ENG_ISA_AVX2 && !eng_isa_hw_avx2())
        return eng_fail(err, ORTMEM_E_UNSUPPORTED,
                        "matmul: AVX2+FMA+F16C asked for, this CPU or OS does not allow them");
    if (w->cols % traits.block_elems != 0)
        return eng_fail(err, ORTMEM_E_ALIGN,
                        "matmul: %zu columns of %s are not whole blocks of %u values", w->cols,
                        traits.name, traits.block_elems);
    const eng_type_traits act_traits = eng_type_traits_of(kernel.act_type);
    if (kernel.quantize && w->cols % act_traits.block_elems != 0)
        return eng_fail(err, ORTMEM_E_ALIGN,
                        "matmul: %zu columns are not whole %s activation blocks of %u values",
                        w->cols, act_traits.name, act_traits.block_elems);
    if (n_tokens == 0 || w->rows == 0)
        return ORTMEM_OK;

    matmul_job job = {
        .kernel = kernel,
        .w = w->data,
        .row_bytes = w->cols / traits.block_elems * traits.block_bytes,
        .rows = w->rows,
        .cols = w->cols,
        .x = x,
        .n_tokens = n_tokens,
        .y = y,
    };
    if (kernel.quantize) {
        job.act_row_bytes = eng_act_row_bytes(kernel.act_type, w->cols);
        if (n_tokens > SIZE_MAX / job.act_row_bytes)
            return eng_fail(err, ORTMEM_E_OVERFLOW, "matmul: %zu tokens of %zu activation bytes",
                            n_tokens, job.act_row_bytes);
        const size_t need = n_tokens * job.act_row_bytes;
        if (scratch->capacity < need) {
            void *grown = realloc(scratch->bytes, need);
            if (!grown)
                return eng_fail(err, ORTMEM_E_NOMEM,
                                "matmul: scratch cannot grow from %zu to %zu bytes",
                                scratch->capacity, need);
            scratch->bytes = grown;
            scratch->capacity = need;
        }
        job.act = scratch->bytes;
        if (n_tokens > 1)
            eng_pool_run(pool, quantize_task, &job, n_tokens);
        else
            quantize_task(&job, 0);
    } else {
        job.act = (const uint8_t *)x;
        job.act_row_bytes = w->cols * sizeof(float);
    }
    job.chunk = rows_per_task(w->rows, eng_pool_threads(pool));
    eng_pool_run(pool, rows_task, &job, (w->rows + job.chunk - 1) / job.chunk);
    return ORTMEM_OK;
}
