/* The growth model: what growing one sequence costs in extents and driver
 * calls under an extent policy (pure; docs/memory/KV_GEOMETRY.md "Growth over
 * extents"). The cache lays the same extents (src/kv/growth.c). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "kv/kv.h"
#include "kv/shape.h"
#include <ortmem/kv.h>

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
