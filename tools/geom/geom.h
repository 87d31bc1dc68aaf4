/* ortmem-geom: KV-cache memory geometry from the command line. Public headers
 * only; the arithmetic is ortmem_kv_evaluate's (include/ortmem/kv.h). See
 * docs/memory/KV_GEOMETRY.md. */
#ifndef ORTMEM_TOOLS_GEOM_H
#define ORTMEM_TOOLS_GEOM_H

#include <ortmem/ortmem.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* What one run evaluates: the geometry (its layout is the one --layout named)
 * and the point. */
typedef struct geom_input {
    ortmem_kv_geometry geometry;
    const char *source; /* preset name, config path, or NULL for flags alone */
    uint64_t tokens, capacity, batch, prefix, min_bucket;
} geom_input;

/* ---- config.c: a Hugging Face config.json ---- */

typedef struct geom_config {
    uint32_t layers, kv_heads, head_dim;
    char dtype[32]; /* torch_dtype (or dtype), "" when absent */
} geom_config;

/* Reads the geometry fields of a config.json. On failure err holds one line
 * (no newline) that says what is missing or wrong. */
bool geom_config_read(const char *path, geom_config *config, char *err, size_t err_size);

/* torch dtype name ("float16", "bfloat16", "float32", "float8_e4m3fn", ...)
 * -> KV dtype; false when it has none. */
bool geom_torch_dtype(const char *name, ortmem_kv_dtype *dtype);

/* ---- sweep.c: the plot through gnuplot ---- */

/* Committed bytes against tokens 1 .. capacity for every layout (stable and
 * bucket growth) with the crossovers marked, as an SVG written to svg_fd.
 * Returns 0, or the exit status after writing one line to err: 2 when the
 * geometry cannot be evaluated at some point, 1 when gnuplot failed. */
int geom_plot_draw(const geom_input *input, int svg_fd, FILE *err);

#endif /* ORTMEM_TOOLS_GEOM_H */
