/* Dequantization to f32 of every type in common/ggml_types.h except Q8_1
 * and Q8_K (activation formats: ORTMEM_E_UNSUPPORTED): the reference the kernels are tested against and
 * what the engine uses for embeddings and norms. */
#ifndef ENGINE_GGUF_DEQUANT_H
#define ENGINE_GGUF_DEQUANT_H

#include <stddef.h>

#include "common/ggml_types.h"
#include "common/status.h"

/* n values (a multiple of the type's block) from src to dst.
 * ORTMEM_E_UNSUPPORTED naming the type for one it cannot convert,
 * ORTMEM_E_ALIGN when n is not a whole number of blocks. */
ortmem_status eng_dequantize(uint32_t type, const void *src, float *dst, size_t n, eng_error *err);

#endif
