/* KV geometry: pure arithmetic over layers, heads, head size, element type,
 * granule and layout (DESIGN.md section 6; docs/memory/KV_GEOMETRY.md). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "kv/shape.h"
#include <ortmem/kv.h>

static const char *const om_dtype_names[ORTMEM_KV_DTYPE_COUNT] = {"f32", "f16",  "bf16",
                                                                  "fp8", "int8", "int4"};
static const unsigned om_dtype_bits[ORTMEM_KV_DTYPE_COUNT] = {32, 16, 16, 8, 8, 4};
static const char *const om_layout_names[ORTMEM_KV_LAYOUT_COUNT] = {"head-major", "seq-major",
                                                                    "token-major"};

const char *ortmem_kv_dtype_name(ortmem_kv_dtype dtype)
{
    return (unsigned)dtype < ORTMEM_KV_DTYPE_COUNT ? om_dtype_names[dtype] : NULL;
}

const char *ortmem_kv_layout_name(ortmem_kv_layout layout)
{
    return (unsigned)layout < ORTMEM_KV_LAYOUT_COUNT ? om_layout_names[layout] : NULL;
}

unsigned ortmem_kv_dtype_bits(ortmem_kv_dtype dtype)
{
    return (unsigned)dtype < ORTMEM_KV_DTYPE_COUNT ? om_dtype_bits[dtype] : 0;
}

ortmem_status ortmem_kv_dtype_parse(const char *name, ortmem_kv_dtype *dtype)
{
    for (unsigned i = 0; name && dtype && i < ORTMEM_KV_DTYPE_COUNT; i++) {
        if (strcmp(name, om_dtype_names[i]) == 0) {
            *dtype = (ortmem_kv_dtype)i;
            return ORTMEM_OK;
        }
    }
    return OM_ERR(ORTMEM_E_INVALID, "unknown dtype '%s' (f32, f16, bf16, fp8, int8, int4)",
                  name ? name : "(null)");
}

ortmem_status ortmem_kv_layout_parse(const char *name, ortmem_kv_layout *layout)
{
    for (unsigned i = 0; name && layout && i < ORTMEM_KV_LAYOUT_COUNT; i++) {
        if (strcmp(name, om_layout_names[i]) == 0) {
            *layout = (ortmem_kv_layout)i;
            return ORTMEM_OK;
        }
    }
    return OM_ERR(ORTMEM_E_INVALID, "unknown layout '%s' (head-major, seq-major, token-major)",
                  name ? name : "(null)");
}

/* ---- presets ---- */

typedef struct om_preset {
    const char *name;
    uint32_t layers, kv_heads, head_dim;
} om_preset;

static const om_preset om_presets[] = {
    {"qwen2.5-0.5b", 24, 2, 64}, {"qwen2.5-7b", 28, 4, 128},  {"qwen14b", 48, 8, 128},
    {"llama-3-8b", 32, 8, 128},  {"smollm2-135m", 30, 3, 64},
};
#define OM_PRESET_COUNT (sizeof om_presets / sizeof om_presets[0])

const char *const *ortmem_kv_preset_names(void)
{
    static const char *names[OM_PRESET_COUNT + 1];
    for (size_t i = 0; i < OM_PRESET_COUNT; i++)
        names[i] = om_presets[i].name;
    names[OM_PRESET_COUNT] = NULL;
    return names;
}

ortmem_status ortmem_kv_preset(const char *name, ortmem_kv_geometry *g)
{
    if (!name || !g)
        return OM_ERR(ORTMEM_E_INVALID, "kv preset: name or output is NULL");
    for (size_t i = 0; i < OM_PRESET_COUNT; i++) {
        if (strcmp(name, om_presets[i].name) == 0) {
            *g = (ortmem_kv_geometry)ORTMEM_KV_GEOMETRY_INIT;
            g->layers = om_presets[i].layers;
            g->kv_heads = om_presets[i].kv_heads;
            g->head_dim = om_presets[i].head_dim;
            return ORTMEM_OK;
        }
    }
    return OM_ERR(ORTMEM_E_INVALID,
                  "kv preset: unknown model '%s' (qwen2.5-0.5b, qwen2.5-7b, qwen14b, llama-3-8b, "
                  "smollm2-135m)",
                  name);
}

ortmem_status ortmem_kv_geometry_check(const ortmem_kv_geometry *g)
{
    ortmem_status st = OM_STRUCT_CHECK("kv geometry", "geometry", g);
    if (st != ORTMEM_OK)
        return st;
    if (!g->layers || !g->kv_heads || !g->head_dim)
        return OM_ERR(ORTMEM_E_INVALID,
                      "kv geometry: layers %u, kv heads %u, head dim %u must all be positive",
                      g->layers, g->kv_heads, g->head_dim);
    if ((unsigned)g->dtype >= ORTMEM_KV_DTYPE_COUNT)
        return OM_ERR(ORTMEM_E_INVALID, "kv geometry: unknown dtype %d", (int)g->dtype);
    if ((unsigned)g->layout >= ORTMEM_KV_LAYOUT_COUNT)
        return OM_ERR(ORTMEM_E_INVALID, "kv geometry: unknown layout %d", (int)g->layout);
    if (!g->granule || (g->granule & (g->granule - 1)))
        return OM_ERR(ORTMEM_E_INVALID, "kv geometry: granule %llu is not a power of two",
                      (unsigned long long)g->granule);
    uint64_t head_bits = (uint64_t)g->head_dim * om_dtype_bits[g->dtype];
    if (head_bits % 8)
        return OM_ERR(ORTMEM_E_INVALID,
                      "kv geometry: a head row of %u %s elements is %llu bits, not whole bytes",
                      g->head_dim, om_dtype_names[g->dtype], (unsigned long long)head_bits);
    uint64_t bpt, rows;
    if (!om_mul(2ULL * g->layers, g->kv_heads, &rows) || !om_mul(rows, head_bits / 8, &bpt))
        return OM_ERR(ORTMEM_E_OVERFLOW, "kv geometry: bytes per token overflow");
    /* Evaluations walk the fragments (up to one per head row): bounded so
     * that a nonsense geometry is refused, not walked for minutes. */
    if (rows > ORTMEM_KV_HEAD_ROWS_MAX)
        return OM_ERR(ORTMEM_E_RANGE,
                      "kv geometry: 2 x %u layers x %u kv heads = %llu head rows per token, more "
                      "than the %llu a geometry may have",
                      g->layers, g->kv_heads, (unsigned long long)rows,
                      (unsigned long long)ORTMEM_KV_HEAD_ROWS_MAX);
    return ORTMEM_OK;
}

/* Offset and length of fragment f in a sequence of capacity cap: bindings on
 * granule boundaries (stable), or packed one after another (a bucket, which
 * is committed whole, so alignment would only add granules). */
bool om_fragment_in(const ortmem_kv_geometry *g, const om_shape *s, uint64_t cap, uint64_t f,
                    bool packed, uint64_t *offset, uint64_t *length)
{
    bool ok = true;
    uint64_t binding_bytes, stride;
    if (g->layout == ORTMEM_KV_TOKEN_MAJOR) {
        *offset = 0;
        return om_mul(cap, s->bpt, length);
    }
    if (!om_mul(cap, g->kv_heads * s->head_bytes, &binding_bytes))
        return false;
    stride = packed ? binding_bytes : om_round_up(binding_bytes, g->granule, &ok);
    if (!ok)
        return false;
    uint64_t binding = g->layout == ORTMEM_KV_HEAD_MAJOR ? f / g->kv_heads : f;
    uint64_t head = g->layout == ORTMEM_KV_HEAD_MAJOR ? f % g->kv_heads : 0;
    uint64_t base, within;
    if (!om_mul(binding, stride, &base) || !om_mul(head, cap * s->head_bytes, &within) ||
        !om_add(base, within, offset))
        return false;
    *length = g->layout == ORTMEM_KV_HEAD_MAJOR ? cap * s->head_bytes : binding_bytes;
    return true;
}

bool om_fragment_at(const ortmem_kv_geometry *g, const om_shape *s, uint64_t cap, uint64_t f,
                    uint64_t *offset, uint64_t *length)
{
    return om_fragment_in(g, s, cap, f, false, offset, length);
}

ortmem_status ortmem_kv_fragment_packed(const ortmem_kv_geometry *g, uint64_t capacity,
                                        uint64_t fragment, uint64_t *offset, uint64_t *length)
{
    ortmem_status st = ortmem_kv_geometry_check(g);
    if (st != ORTMEM_OK)
        return st;
    if (!offset || !length)
        return OM_ERR(ORTMEM_E_INVALID, "kv fragment: output is NULL");
    om_shape s = om_shape_of(g);
    if (fragment >= s.fragments)
        return OM_ERR(ORTMEM_E_RANGE, "kv fragment: %llu of %llu fragments",
                      (unsigned long long)fragment, (unsigned long long)s.fragments);
    if (!om_fragment_in(g, &s, capacity, fragment, true, offset, length))
        return OM_ERR(ORTMEM_E_OVERFLOW, "kv fragment: capacity %llu overflows",
                      (unsigned long long)capacity);
    return ORTMEM_OK;
}

ortmem_status ortmem_kv_fragment(const ortmem_kv_geometry *g, uint64_t capacity, uint64_t fragment,
                                 uint64_t *offset, uint64_t *length)
{
    ortmem_status st = ortmem_kv_geometry_check(g);
    if (st != ORTMEM_OK)
        return st;
    if (!offset || !length)
        return OM_ERR(ORTMEM_E_INVALID, "kv fragment: output is NULL");
    om_shape s = om_shape_of(g);
    if (fragment >= s.fragments)
        return OM_ERR(ORTMEM_E_RANGE, "kv fragment: %llu of %llu fragments",
                      (unsigned long long)fragment, (unsigned long long)s.fragments);
    if (!om_fragment_at(g, &s, capacity, fragment, offset, length))
        return OM_ERR(ORTMEM_E_OVERFLOW, "kv fragment: capacity %llu overflows",
                      (unsigned long long)capacity);
    return ORTMEM_OK;
}

/* Granules holding a live byte when every fragment holds n tokens. */
static bool om_committed_granules(const ortmem_kv_geometry *g, const om_shape *s, uint64_t n,
                                  uint64_t cap, uint64_t *granules)
{
    uint64_t count = 0, next_free = 0; /* first granule not counted yet */
    uint64_t live;
    if (!om_mul(n, s->contig, &live))
        return false;
    for (uint64_t f = 0; n && f < s->fragments; f++) {
        uint64_t off, len;
        if (!om_fragment_at(g, s, cap, f, &off, &len))
            return false;
        uint64_t first = off / g->granule, last = (off + live - 1) / g->granule;
        if (first < next_free)
            first = next_free;
        if (last >= first)
            count += last - first + 1;
        if (last + 1 > next_free)
            next_free = last + 1;
    }
    *granules = count;
    return true;
}

uint64_t ortmem_kv_bucket(uint64_t tokens, uint64_t min_bucket, uint64_t hard_max)
{
    if (hard_max == 0)
        return 0;
    uint64_t p = 1;
    while (p < tokens && p <= UINT64_MAX / 2)
        p <<= 1;
    if (p < min_bucket)
        p = min_bucket;
    return p < hard_max ? p : hard_max;
}

ortmem_status ortmem_kv_evaluate(const ortmem_kv_geometry *g, uint64_t tokens, uint64_t capacity,
                                 uint64_t batch, uint64_t prefix, uint64_t min_bucket,
                                 ortmem_kv_eval *eval)
{
    ortmem_status st = ortmem_kv_geometry_check(g);
    if (st != ORTMEM_OK)
        return st;
    st = OM_STRUCT_CHECK("kv evaluate", "eval", eval);
    if (st != ORTMEM_OK)
        return st;
    if (capacity == 0 || batch == 0)
        return OM_ERR(ORTMEM_E_INVALID,
                      "kv evaluate: capacity %llu and batch %llu must be positive",
                      (unsigned long long)capacity, (unsigned long long)batch);
    if (tokens > capacity)
        return OM_ERR(ORTMEM_E_RANGE, "kv evaluate: %llu tokens above the capacity %llu",
                      (unsigned long long)tokens, (unsigned long long)capacity);
    if (prefix > tokens)
        return OM_ERR(ORTMEM_E_RANGE, "kv evaluate: prefix %llu above the %llu tokens",
                      (unsigned long long)prefix, (unsigned long long)tokens);
    om_shape s = om_shape_of(g);
    ortmem_kv_eval e;
    memset(&e, 0, sizeof e);
    e.struct_size = eval->struct_size;
    e.bytes_per_token = s.bpt;
    e.fragments = s.fragments;
    e.contiguous_bytes_per_token = s.contig;
    bool ok = om_mul(s.fragments, g->granule, &e.floor_bytes);
    e.crossover_tokens = g->granule / s.contig + (g->granule % s.contig != 0);
    uint64_t granules = 0, bucket_granules = 0, /* bucket_granules: its bytes */ last_off = 0,
             last_len = 0;
    e.bucket_tokens = ortmem_kv_bucket(tokens, min_bucket ? min_bucket : 256, capacity);
    ok = ok && om_committed_granules(g, &s, tokens, capacity, &granules) &&
         om_mul(e.bucket_tokens, s.bpt, &bucket_granules) &&
         om_fragment_at(g, &s, capacity, s.fragments - 1, &last_off, &last_len) &&
         om_mul(granules, g->granule, &e.committed_bytes) &&
         om_mul(e.committed_bytes, batch, &e.committed_bytes) &&
         om_mul(tokens, s.bpt, &e.live_bytes) && om_mul(e.live_bytes, batch, &e.live_bytes) &&
         om_mul(e.bucket_tokens, s.bpt, &e.bucket_bytes) &&
         om_mul(e.bucket_bytes, batch, &e.bucket_bytes) &&
         (e.bucket_committed_bytes = om_round_up(bucket_granules, g->granule, &ok), ok) &&
         om_mul(e.bucket_committed_bytes, batch, &e.bucket_committed_bytes);
    uint64_t last_end = 0;
    if (ok && (ok = om_add(last_off, last_len, &last_end)))
        e.sequence_reserved_bytes = om_round_up(last_end, g->granule, &ok);
    uint64_t prefix_bytes = prefix * s.contig; /* prefix <= capacity: no overflow past live */
    e.shareable = prefix && prefix_bytes >= g->granule;
    uint64_t per_fragment = e.shareable ? prefix_bytes / g->granule : 0;
    e.share_granules = s.fragments * per_fragment;
    e.share_copy_bytes = s.fragments * (prefix_bytes - per_fragment * g->granule);
    if (!ok)
        return OM_ERR(ORTMEM_E_OVERFLOW,
                      "kv evaluate: %llu tokens at capacity %llu for batch %llu overflow 64 bits",
                      (unsigned long long)tokens, (unsigned long long)capacity,
                      (unsigned long long)batch);
    memcpy(eval, &e, eval->struct_size);
    return ORTMEM_OK;
}

ortmem_status ortmem_kv_capacity(const ortmem_kv_geometry *g, uint64_t budget_bytes,
                                 uint64_t tokens, uint64_t capacity, uint64_t prefix,
                                 uint64_t *without_prefix, uint64_t *with_prefix)
{
    if (!without_prefix || !with_prefix)
        return OM_ERR(ORTMEM_E_INVALID, "kv capacity: output is NULL");
    ortmem_kv_eval e = {.struct_size = sizeof e};
    ortmem_status st = ortmem_kv_evaluate(g, tokens, capacity, 1, prefix, 0, &e);
    if (st != ORTMEM_OK)
        return st;
    if (e.committed_bytes == 0)
        return OM_ERR(ORTMEM_E_INVALID, "kv capacity: %llu tokens commit nothing",
                      (unsigned long long)tokens);
    *without_prefix = budget_bytes / e.committed_bytes;
    /* The shared full granules are owned once; each sequence pays the rest. */
    uint64_t shared = e.share_granules * g->granule;
    uint64_t each = e.committed_bytes - shared;
    if (budget_bytes < shared)
        *with_prefix = 0;
    else if (each == 0)
        *with_prefix = UINT64_MAX;
    else
        *with_prefix = (budget_bytes - shared) / each;
    return ORTMEM_OK;
}
