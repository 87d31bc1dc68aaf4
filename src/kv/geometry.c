/* KV geometry: pure arithmetic over layers, heads, head size, element type,
 * granule and layout (DESIGN.md section 6; docs/memory/KV_GEOMETRY.md). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
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

/* ---- checked arithmetic ---- */

static bool om_mul(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

static bool om_add(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

static uint64_t om_round_up(uint64_t v, uint64_t g, bool *ok)
{
    uint64_t r;
    if (!om_add(v, g - 1, &r)) {
        *ok = false;
        return 0;
    }
    return r & ~(g - 1);
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
    return ORTMEM_OK;
}

/* Per-geometry constants. */
typedef struct om_shape {
    uint64_t head_bytes; /* D * e */
    uint64_t bpt;        /* 2 L H D e */
    uint64_t fragments;
    uint64_t contig;   /* bytes per token of one fragment */
    uint64_t bindings; /* 2L (head- and seq-major) */
} om_shape;

static om_shape om_shape_of(const ortmem_kv_geometry *g)
{
    om_shape s;
    s.head_bytes = (uint64_t)g->head_dim * om_dtype_bits[g->dtype] / 8;
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
 * granule boundaries (stable), or packed one after another (a bucket, which
 * is committed whole, so alignment would only add granules). */
static bool om_fragment_in(const ortmem_kv_geometry *g, const om_shape *s, uint64_t cap, uint64_t f,
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

static bool om_fragment_at(const ortmem_kv_geometry *g, const om_shape *s, uint64_t cap, uint64_t f,
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

/* ---- growth over extents ---- */

/* One fragment's granule window and what the model laid in it. */
typedef struct om_grow_frag {
    uint64_t off, window_first, window_end; /* bytes; granules [first, end) */
    uint64_t tail;                          /* granule after the last extent laid here */
    uint64_t last_extent;                   /* granules of that extent; 0 = none laid yet */
} om_grow_frag;

typedef struct om_grow_extent {
    uint64_t first, granules;
} om_grow_extent;

typedef struct om_grow {
    const ortmem_extent_policy *policy;
    uint64_t g, cap;      /* granule bytes; the policy's largest extent, granules */
    uint64_t *committed;  /* bitmap over the sequence's granules */
    om_grow_extent *laid; /* every extent, in the order laid */
    size_t laid_count, laid_capacity;
    uint64_t laid_granules, largest_granules; /* over every extent laid */
} om_grow;

static bool om_bit(const uint64_t *map, uint64_t k)
{
    return (map[k / 64] >> (k % 64)) & 1u;
}

static int om_extent_cmp(const void *a, const void *b)
{
    const om_grow_extent *x = a, *y = b;
    return x->first < y->first ? -1 : x->first > y->first;
}

/* Contiguous runs among extents (sorted in place by address). */
static uint64_t om_runs(om_grow_extent *e, size_t n)
{
    if (n > 1) /* e is NULL before anything is laid */
        qsort(e, n, sizeof *e, om_extent_cmp);
    uint64_t runs = 0;
    for (size_t i = 0; i < n; i++)
        runs += i == 0 || e[i - 1].first + e[i - 1].granules != e[i].first;
    return runs;
}

static ortmem_status om_lay(om_grow *m, om_grow_frag *f, uint64_t first, uint64_t granules)
{
    if (m->laid_count == m->laid_capacity) {
        size_t want = m->laid_capacity ? m->laid_capacity * 2 : 256;
        om_grow_extent *more = om_realloc(m->laid, want * sizeof *more);
        if (!more)
            return OM_ERR(ORTMEM_E_NOMEM, "kv growth: a list of %zu extents", want);
        m->laid = more;
        m->laid_capacity = want;
    }
    m->laid[m->laid_count++] = (om_grow_extent){first, granules};
    m->laid_granules += granules;
    if (granules > m->largest_granules)
        m->largest_granules = granules;
    for (uint64_t k = first; k < first + granules; k++)
        m->committed[k / 64] |= (uint64_t)1 << (k % 64);
    f->tail = first + granules;
    f->last_extent = granules;
    return ORTMEM_OK;
}

/* Commits what fragment f needs for live bytes [off, live_end): every
 * uncommitted run of the granules they touch, laid by the policy. */
static ortmem_status om_grow_fragment(om_grow *m, om_grow_frag *f, uint64_t live_end)
{
    uint64_t last = (live_end - 1) / m->g;
    uint64_t k = f->last_extent ? f->tail : f->window_first;
    while (k <= last) {
        if (om_bit(m->committed, k)) {
            k++;
            continue;
        }
        uint64_t need = 0, room = 0;
        while (k + need <= last && !om_bit(m->committed, k + need))
            need++;
        uint64_t below = f->last_extent && f->tail == k ? f->last_extent : 0;
        /* The layout looks at room only to see whether a geometric tail's next
         * extent fits: scanning further would only cost time. */
        uint64_t next = below == 0 ? 1 : (below >= m->cap / 2 ? m->cap : below * 2);
        uint64_t enough = m->policy->growth == ORTMEM_EXTENT_GEOMETRIC && next > need ? next : need;
        room = need;
        while (k + room < f->window_end && room < enough && !om_bit(m->committed, k + room))
            room++;
        uint64_t sizes[64];
        size_t count = 0;
        ortmem_status st = ortmem_extent_layout(m->policy, (size_t)m->g, below, need, room, sizes,
                                                sizeof sizes / sizeof sizes[0], &count);
        uint64_t *many = NULL;
        if (st == ORTMEM_E_RANGE && count > sizeof sizes / sizeof sizes[0]) {
            many = om_calloc(count, sizeof *many);
            if (!many)
                return OM_ERR(ORTMEM_E_NOMEM, "kv growth: %zu extent sizes", count);
            st = ortmem_extent_layout(m->policy, (size_t)m->g, below, need, room, many, count,
                                      &count);
        }
        const uint64_t *laid = many ? many : sizes;
        for (size_t i = 0; st == ORTMEM_OK && i < count; i++) {
            st = om_lay(m, f, k, laid[i]);
            k += laid[i];
        }
        om_free(many);
        if (st != ORTMEM_OK)
            return om_error_wrap(st, "kv growth");
    }
    return ORTMEM_OK;
}

/* Per fragment: the largest extent that fits its window, plus a granule when
 * its base is not on one (the first granule's bytes below it are not its own). */
static bool om_bound_of(const om_grow_frag *f, uint64_t frags, uint64_t cap, uint64_t g,
                        uint64_t *bound, uint64_t *unaligned)
{
    uint64_t granules = 0;
    *unaligned = 0;
    for (uint64_t i = 0; i < frags; i++) {
        uint64_t window = f[i].window_end - f[i].window_first;
        bool off_granule = f[i].off % g != 0;
        *unaligned += off_granule;
        if (!om_add(granules, (window < cap ? window : cap) + off_granule, &granules))
            return false;
    }
    return om_mul(granules, g, bound);
}

/* The fragments' windows for capacity cap; NULL with the status set. */
static om_grow_frag *om_grow_windows(const ortmem_kv_geometry *g, const om_shape *s, uint64_t cap,
                                     uint64_t *granules, ortmem_status *st)
{
    if (s->fragments > SIZE_MAX / sizeof(om_grow_frag)) {
        *st = OM_ERR(ORTMEM_E_NOMEM, "kv growth: %llu fragments", (unsigned long long)s->fragments);
        return NULL;
    }
    om_grow_frag *f = om_calloc((size_t)s->fragments, sizeof *f);
    if (!f) {
        *st = OM_ERR(ORTMEM_E_NOMEM, "kv growth: %llu fragments", (unsigned long long)s->fragments);
        return NULL;
    }
    *granules = 0;
    for (uint64_t i = 0; i < s->fragments; i++) {
        uint64_t off, len, end;
        bool ok = true;
        if (!om_fragment_at(g, s, cap, i, &off, &len) || !om_add(off, len, &end) ||
            (end = om_round_up(end, g->granule, &ok), !ok)) {
            om_free(f);
            *st = OM_ERR(ORTMEM_E_OVERFLOW, "kv growth: capacity %llu overflows",
                         (unsigned long long)cap);
            return NULL;
        }
        f[i] = (om_grow_frag){off, off / g->granule, end / g->granule, 0, 0};
        if (f[i].window_end > *granules)
            *granules = f[i].window_end;
    }
    *st = ORTMEM_OK;
    return f;
}

static ortmem_status om_growth_check(const ortmem_kv_geometry *g,
                                     const ortmem_extent_policy *policy, uint64_t capacity,
                                     uint64_t *cap_granules)
{
    ortmem_status st = ortmem_kv_geometry_check(g);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "kv growth");
    if (g->granule > SIZE_MAX)
        return OM_ERR(ORTMEM_E_INVALID, "kv growth: granule %llu does not fit a size_t",
                      (unsigned long long)g->granule);
    st = ortmem_extent_cap_granules(policy, (size_t)g->granule, cap_granules);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "kv growth");
    if (capacity == 0)
        return OM_ERR(ORTMEM_E_INVALID, "kv growth: capacity is 0");
    return ORTMEM_OK;
}

ortmem_status om_kv_overcommit_bound(const ortmem_kv_geometry *g,
                                     const ortmem_extent_policy *policy, uint64_t capacity,
                                     uint64_t *bound_bytes)
{
    uint64_t cap = 0, granules = 0, unaligned = 0;
    ortmem_status st = om_growth_check(g, policy, capacity, &cap);
    if (st != ORTMEM_OK)
        return st;
    om_shape s = om_shape_of(g);
    om_grow_frag *f = om_grow_windows(g, &s, capacity, &granules, &st);
    if (!f)
        return st;
    bool ok = om_bound_of(f, s.fragments, cap, g->granule, bound_bytes, &unaligned);
    om_free(f);
    return ok ? ORTMEM_OK
              : OM_ERR(ORTMEM_E_OVERFLOW, "kv growth: the bound at capacity %llu overflows",
                       (unsigned long long)capacity);
}

#define OM_GROWTH_MAX_STEPS ((uint64_t)1 << 30) /* fragment-appends one evaluation simulates */

ortmem_status ortmem_kv_growth_evaluate(const ortmem_kv_geometry *g,
                                        const ortmem_extent_policy *policy, uint64_t capacity,
                                        uint64_t first_tokens, uint64_t step_tokens,
                                        uint64_t tokens, ortmem_kv_growth_cost *cost)
{
    om_error_clear();
    uint64_t cap = 0;
    ortmem_status st = om_growth_check(g, policy, capacity, &cap);
    if (st != ORTMEM_OK)
        return st;
    st = OM_STRUCT_CHECK("kv growth", "cost", cost);
    if (st != ORTMEM_OK)
        return st;
    if (tokens > capacity)
        return OM_ERR(ORTMEM_E_RANGE, "kv growth: %llu tokens above the capacity %llu",
                      (unsigned long long)tokens, (unsigned long long)capacity);
    if (tokens && (first_tokens == 0 || step_tokens == 0))
        return OM_ERR(ORTMEM_E_INVALID,
                      "kv growth: first append %llu and step %llu tokens must be positive",
                      (unsigned long long)first_tokens, (unsigned long long)step_tokens);
    om_shape s = om_shape_of(g);
    uint64_t first = first_tokens < tokens ? first_tokens : tokens;
    uint64_t appends =
        tokens ? 1 + (tokens - first) / step_tokens + ((tokens - first) % step_tokens != 0) : 0;
    uint64_t steps;
    if (!om_mul(appends, s.fragments, &steps) || steps > OM_GROWTH_MAX_STEPS)
        return OM_ERR(ORTMEM_E_RANGE,
                      "kv growth: %llu appends over %llu fragments is more than %llu steps to "
                      "simulate; use larger appends",
                      (unsigned long long)appends, (unsigned long long)s.fragments,
                      (unsigned long long)OM_GROWTH_MAX_STEPS);
    uint64_t live_max;
    if (!om_mul(capacity, s.bpt, &live_max))
        return OM_ERR(ORTMEM_E_OVERFLOW, "kv growth: capacity %llu overflows",
                      (unsigned long long)capacity);
    uint64_t granules = 0;
    om_grow_frag *frags = om_grow_windows(g, &s, capacity, &granules, &st);
    if (!frags)
        return st;
    ortmem_kv_growth_cost c;
    memset(&c, 0, sizeof c);
    c.appends = appends;
    bool ok = om_bound_of(frags, s.fragments, cap, g->granule, &c.overcommit_bound_bytes,
                          &c.unaligned_fragments) &&
              om_mul(granules, g->granule, &c.committed_bytes); /* fits: the sequence's VA */
    if (!ok) {
        om_free(frags);
        return OM_ERR(ORTMEM_E_OVERFLOW, "kv growth: the bound at capacity %llu overflows",
                      (unsigned long long)capacity);
    }
    c.committed_bytes = 0;
    om_grow m = {.policy = policy, .g = g->granule, .cap = cap};
    m.committed = granules / 64 + 1 <= SIZE_MAX / sizeof(uint64_t)
                      ? om_calloc((size_t)(granules / 64 + 1), sizeof(uint64_t))
                      : NULL;
    if (!m.committed)
        st = OM_ERR(ORTMEM_E_NOMEM, "kv growth: a map of %llu granules",
                    (unsigned long long)granules);
    uint64_t length = 0;
    for (uint64_t a = 0; st == ORTMEM_OK && a < appends; a++) {
        uint64_t to =
            a == 0 ? first : (tokens - length < step_tokens ? tokens : length + step_tokens);
        size_t before = m.laid_count;
        for (uint64_t i = 0; st == ORTMEM_OK && i < s.fragments; i++)
            st = om_grow_fragment(&m, &frags[i], frags[i].off + to * s.contig);
        if (st != ORTMEM_OK)
            break;
        c.calls_set_access += om_runs(m.laid + before, m.laid_count - before);
        c.committed_bytes = m.laid_granules * g->granule; /* <= the sequence's VA */
        c.largest_extent_bytes = m.largest_granules * g->granule;
        length = to;
        uint64_t live = length * s.bpt; /* <= live_max */
        if (c.committed_bytes - live > c.overcommit_max_bytes)
            c.overcommit_max_bytes = c.committed_bytes - live;
    }
    if (st == ORTMEM_OK) {
        c.extents = m.laid_count;
        c.calls_create = c.calls_map = c.calls_release = m.laid_count;
        c.calls_unmap = om_runs(m.laid, m.laid_count);
        c.live_bytes = tokens * s.bpt;
        c.struct_size = cost->struct_size;
        memcpy(cost, &c, cost->struct_size < sizeof c ? cost->struct_size : sizeof c);
    }
    om_free(m.laid);
    om_free(m.committed);
    om_free(frags);
    return st;
}
