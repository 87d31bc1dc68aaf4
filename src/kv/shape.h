/* Internal to src/kv: checked arithmetic and the per-geometry constants that
 * the geometry (geometry.c) and the growth model (growth_model.c) share. */
#ifndef ORTMEM_KV_SHAPE_H
#define ORTMEM_KV_SHAPE_H

#include <stdbool.h>
#include <stdint.h>

#include <ortmem/kv.h>

/* ---- checked arithmetic ---- */

static inline bool om_mul(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

static inline bool om_add(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

static inline uint64_t om_round_up(uint64_t v, uint64_t g, bool *ok)
{
    uint64_t r;
    if (!om_add(v, g - 1, &r)) {
        *ok = false;
        return 0;
    }
    return r & ~(g - 1);
}

/* Per-geometry constants. */
typedef struct om_shape {
    uint64_t head_bytes; /* D * e */
    uint64_t bpt;        /* 2 L H D e */
    uint64_t fragments;
    uint64_t contig;   /* bytes per token of one fragment */
    uint64_t bindings; /* 2L (head- and seq-major) */
} om_shape;

static inline om_shape om_shape_of(const ortmem_kv_geometry *g)
{
    om_shape s;
    s.head_bytes = (uint64_t)g->head_dim * ortmem_kv_dtype_bits(g->dtype) / 8;
    s.bindings = 2ULL * g->layers;
    s.bpt = s.bindings * g->kv_heads * s.head_bytes;
    switch (g->layout) {
    case ORTMEM_KV_HEAD_MAJOR:
        s.fragments = s.bindings * g->kv_heads;
        s.contig = s.head_bytes;
        break;
    case ORTMEM_KV_SEQ_MAJOR:
        s.fragments = s.bindings;
        s.contig = g->kv_heads * s.head_bytes;
        break;
    default:
        s.fragments = 1;
        s.contig = s.bpt;
        break;
    }
    return s;
}

/* Offset and length of fragment f in a sequence of capacity cap: bindings on
 * granule boundaries (stable), or packed one after another (a bucket). */
bool om_fragment_in(const ortmem_kv_geometry *g, const om_shape *s, uint64_t cap, uint64_t f,
                    bool packed, uint64_t *offset, uint64_t *length);
bool om_fragment_at(const ortmem_kv_geometry *g, const om_shape *s, uint64_t cap, uint64_t f,
                    uint64_t *offset, uint64_t *length);

#endif
