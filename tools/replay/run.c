/* Replay execution. Every byte the trace makes live gets a known pattern and is
 * checked before it goes away: allocations by their ID, committed granules by
 * their region and offset (an alias must show its source's bytes). The model
 * of each region's granules is what the replay expects; after a failed call
 * it is re-read from the library, because "nothing changed" is a claim under
 * test too. */
#include "replay.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NO_OBJECT UINT32_MAX
/* Holder h's arena region in the overlap set: above every object number
 * (trace.c keeps them below UINT32_MAX - 1 - REPLAY_MAX_HOLDERS). */
#define ARENA_OBJECT(h) (UINT32_MAX - 1 - (uint32_t)(h))
#define IS_ARENA_OBJECT(o) ((o) != NO_OBJECT && (o) >= UINT32_MAX - REPLAY_MAX_HOLDERS)
#define ARENA_HOLDER(o) ((uint16_t)(UINT32_MAX - 1 - (o)))
#define ARENA_DEFAULT_MIN_ALIGN 256

typedef enum object_state {
    OBJECT_PENDING = 0, /* its creating line has not run yet */
    OBJECT_LIVE,
    OBJECT_GONE,   /* freed or destroyed */
    OBJECT_FAILED, /* creation failed or was skipped: later ops on it are skipped */
    OBJECT_STUCK   /* free or destroy failed: still held, teardown retries */
} object_state;

typedef enum granule_state { GRANULE_UNMAPPED = 0, GRANULE_MAPPED, GRANULE_POISONED } granule_state;

/* What the replay expects one granule of a region to hold. */
typedef struct granule_model {
    uint64_t key;    /* pattern key of the region whose commit filled it */
    uint64_t origin; /* its offset inside that region */
    uint8_t state;   /* granule_state */
    uint8_t access;  /* ortmem_access */
    bool known;      /* false when the library mapped it without the replay knowing why */
} granule_model;

typedef struct object_run {
    uint8_t state;      /* object_state */
    bool degraded;      /* region: an op on it failed, so its model may hold surprises */
    uint64_t key;       /* pattern key (allocation seed or region key) */
    unsigned char *ptr; /* allocation address or region base */
    size_t size;        /* allocation size or region size */
    ortmem_region *region;
    size_t granule, granules;
    granule_model *model;
} object_run;

typedef struct interval {
    uintptr_t start, end;
    uint32_t object;
} interval;

typedef struct interval_set {
    interval *items;
    size_t count, capacity;
} interval_set;

struct runner;

/* A holder as the run sees it: its ortmem holder, the account its regions and
 * its arena charge, and its arena (created by its first alloc). */
typedef struct holder_run {
    struct runner *rn; /* for the pressure callback */
    uint16_t index;
    ortmem_holder *holder;
    ortmem_account account;
    ortmem_arena *arena;
    uintptr_t arena_start, arena_end;
} holder_run;

typedef struct runner {
    const replay_trace *trace;
    const replay_config *config;
    replay_result *result;
    FILE *err;
    ortmem_backend *cpu, *top; /* top: where regions and the arenas live (the fault wrapper) */
    ortmem_authority *authority;
    holder_run *holders; /* one per trace holder */
    object_run *objects;
    interval_set allocations, regions;
    uint64_t findings;     /* overlap, corruption and placement messages written so far */
    uint32_t current_line; /* the op running, for failures inside a pressure callback */
} runner;

/* ---- patterns ---- */

/* Word i of the pattern with this key. Distinct for every i (v is a bijection
 * of i and so is the xor-shift), never all zeros in practice, so a fresh
 * page, a stale granule or a shifted mapping all fail the check. */
static inline uint64_t pattern_word(uint64_t key, uint64_t index)
{
    uint64_t v = key + index * 0x9e3779b97f4a7c15ULL;
    return v ^ (v >> 29);
}

/* p is 8-byte aligned (arena allocations and granules are far more aligned),
 * so the words are accessed directly; offset is a multiple of 8. */
static void pattern_fill(unsigned char *p, size_t len, uint64_t key, uint64_t offset)
{
    uint64_t first = offset / 8;
    size_t words = len / 8;
    uint64_t *w = (uint64_t *)(void *)p;
    for (size_t i = 0; i < words; i++)
        w[i] = pattern_word(key, first + i);
    if (len % 8) {
        uint64_t last = pattern_word(key, first + words);
        memcpy(p + words * 8, &last, len % 8);
    }
}

/* Returns the offset of the first wrong byte, or len when all match. */
static size_t pattern_check(const unsigned char *p, size_t len, uint64_t key, uint64_t offset)
{
    uint64_t first = offset / 8;
    size_t words = len / 8;
    const uint64_t *w = (const uint64_t *)(const void *)p;
    for (size_t i = 0; i < words; i++) {
        if (w[i] != pattern_word(key, first + i)) {
            uint64_t want = pattern_word(key, first + i);
            const unsigned char *a = p + i * 8, *b = (const unsigned char *)&want;
            size_t k = 0;
            while (a[k] == b[k])
                k++;
            return i * 8 + k;
        }
    }
    if (len % 8) {
        uint64_t last = pattern_word(key, first + words);
        const unsigned char *b = (const unsigned char *)&last;
        for (size_t k = 0; k < len % 8; k++) {
            if (p[words * 8 + k] != b[k])
                return words * 8 + k;
        }
    }
    return len;
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A key from the ID and the object number, so an ID reused after its free
 * gets different bytes and stale data cannot pass for fresh. */
static uint64_t object_key(const replay_trace *t, uint32_t object)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const char *s = replay_object_name(t, object); *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return mix64(h ^ mix64((uint64_t)object + 1));
}

/* ---- bookkeeping of what went wrong ---- */

static void finding(runner *rn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Overlaps, corruptions and misplacements go to stderr as they happen (the
 * first few), so a broken run points at its first broken byte. */
static void finding(runner *rn, const char *fmt, ...)
{
    if (++rn->findings > 20)
        return;
    fputs("ortmem-replay: ", rn->err);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(rn->err, fmt, ap);
    va_end(ap);
    fputc('\n', rn->err);
}

/* Copies src into dst, cut to fit: a long detail is still worth its start. */
static void copy_truncated(char *dst, size_t size, const char *src)
{
    size_t len = strnlen(src, size - 1);
    memcpy(dst, src, len);
    dst[len] = '\0';
}

static void record_failure(runner *rn, uint32_t line, const char *what, ortmem_status status)
{
    replay_result *res = rn->result;
    size_t room =
        line ? REPLAY_FAILURES_KEPT : REPLAY_FAILURES_KEPT + REPLAY_TEARDOWN_FAILURES_KEPT;
    if (res->failures_kept >= room)
        return;
    replay_failure *f = &res->failures[res->failures_kept++];
    f->line = line;
    f->status = status;
    copy_truncated(f->what, sizeof f->what, what);
    copy_truncated(f->detail, sizeof f->detail, ortmem_last_error());
}

static void record_op_failure(runner *rn, const replay_op *op, ortmem_status status)
{
    char what[160];
    replay_op_format(rn->trace, op, what, sizeof what);
    record_failure(rn, op->line, what, status);
}

static void record_teardown_failure(runner *rn, const char *what, ortmem_status status)
{
    rn->result->teardown_failures++;
    record_failure(rn, 0, what, status);
}

/* ---- overlap detection: live address ranges kept sorted ---- */

static const char *describe(runner *rn, uint32_t object, char *buf, size_t size)
{
    if (IS_ARENA_OBJECT(object))
        snprintf(buf, size, "the arena region of holder '%s'",
                 rn->trace->holders[ARENA_HOLDER(object)].name);
    else
        snprintf(buf, size, "%s '%s' (line %" PRIu32 ")",
                 rn->trace->objects[object].is_region ? "region" : "allocation",
                 replay_object_name(rn->trace, object), rn->trace->objects[object].line);
    return buf;
}

/* Inserts [start, end) and returns how many live ranges it overlaps. */
static uint64_t interval_insert(runner *rn, interval_set *set, uintptr_t start, uintptr_t end,
                                uint32_t object)
{
    if (set->count == set->capacity) {
        size_t ncap = set->capacity ? set->capacity * 2 : 256;
        interval *grown = realloc(set->items, ncap * sizeof *grown);
        if (!grown) {
            fprintf(rn->err, "ortmem-replay: out of memory tracking live ranges\n");
            exit(2);
        }
        set->items = grown;
        set->capacity = ncap;
    }
    size_t lo = 0, hi = set->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (set->items[mid].start < start)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint64_t overlaps = 0;
    char a[160], b[160];
    for (size_t i = lo; i-- > 0;) {
        if (set->items[i].end <= start)
            break; /* ranges in a valid set do not overlap, so nothing further left does */
        overlaps++;
        finding(rn, "overlap: %s and %s share bytes", describe(rn, object, a, sizeof a),
                describe(rn, set->items[i].object, b, sizeof b));
    }
    for (size_t i = lo; i < set->count && set->items[i].start < end; i++) {
        overlaps++;
        finding(rn, "overlap: %s and %s share bytes", describe(rn, object, a, sizeof a),
                describe(rn, set->items[i].object, b, sizeof b));
    }
    memmove(&set->items[lo + 1], &set->items[lo], (set->count - lo) * sizeof *set->items);
    set->items[lo] = (interval){start, end, object};
    set->count++;
    return overlaps;
}

static void interval_remove(interval_set *set, uintptr_t start, uint32_t object)
{
    size_t lo = 0, hi = set->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (set->items[mid].start < start)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < set->count && set->items[i].start == start; i++) {
        if (set->items[i].object == object) {
            memmove(&set->items[i], &set->items[i + 1], (set->count - i - 1) * sizeof *set->items);
            set->count--;
            return;
        }
    }
}

/* ---- region model ---- */

static bool granule_readable(const granule_model *g)
{
    return g->state == GRANULE_MAPPED && g->known && g->access != ORTMEM_ACCESS_NONE;
}

/* Checks granule index g of region r against its pattern; when was the moment
 * ("before decommit at line 40"). */
static void check_granule(runner *rn, uint32_t object, size_t g, const char *when, uint32_t line)
{
    object_run *r = &rn->objects[object];
    const granule_model *m = &r->model[g];
    if (!granule_readable(m))
        return;
    rn->result->checked_granules++;
    rn->result->checked_bytes += r->granule;
    size_t bad = pattern_check(r->ptr + g * r->granule, r->granule, m->key, m->origin);
    if (bad == r->granule)
        return;
    rn->result->corruptions++;
    char who[160];
    finding(rn,
            "corruption: %s, granule at offset %zu differs from its pattern at byte %zu "
            "(%s, line %" PRIu32 ")",
            describe(rn, object, who, sizeof who), g * r->granule, bad, when, line);
}

/* Re-reads granules [g0, g1) from the library after a failed call. */
static void resync(runner *rn, uint32_t object, size_t g0, size_t g1)
{
    object_run *r = &rn->objects[object];
    for (size_t g = g0; g < g1 && g < r->granules; g++) {
        granule_model *m = &r->model[g];
        ortmem_granule_info info;
        memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        if (ortmem_region_granule_info(r->region, g * r->granule, &info) != ORTMEM_OK) {
            m->known = false;
            continue;
        }
        if (info.state == ORTMEM_GRANULE_UNMAPPED) {
            m->state = GRANULE_UNMAPPED;
        } else if (info.state == ORTMEM_GRANULE_QUARANTINED) {
            m->state = GRANULE_POISONED;
        } else {
            if (m->state != GRANULE_MAPPED)
                m->known = false;
            m->state = GRANULE_MAPPED;
            m->access = (uint8_t)info.access;
        }
    }
}

/* ---- operations ---- */

/* REFUSED: the authority said no (ORTMEM_E_BUDGET); counted apart from FAILED. */
typedef enum outcome { DONE, FAILED, REFUSED, SKIPPED } outcome;

static outcome failure_of(ortmem_status st)
{
    return st == ORTMEM_E_BUDGET ? REFUSED : FAILED;
}

static holder_run *holder_of(runner *rn, uint32_t object)
{
    return &rn->holders[rn->trace->objects[object].holder];
}

static ortmem_status ensure_arena(runner *rn, holder_run *h)
{
    if (h->arena)
        return ORTMEM_OK;
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    opt.capacity = rn->result->holders[h->index].arena_capacity;
    opt.cache_bytes = rn->config->arena_cache;
    opt.account = &h->account;
    ortmem_arena *arena = NULL;
    ortmem_status st = ortmem_arena_create(rn->top, &opt, &arena);
    if (st != ORTMEM_OK)
        return st;
    h->arena = arena;
    rn->result->holders[h->index].arena_created = true;
    ortmem_region *region = ortmem_arena_region(arena);
    unsigned char *base = region ? ortmem_region_base(region) : NULL;
    if (base) {
        h->arena_start = (uintptr_t)base;
        h->arena_end = h->arena_start + ortmem_region_size(region);
        rn->result->overlaps +=
            interval_insert(rn, &rn->regions, h->arena_start, h->arena_end, ARENA_OBJECT(h->index));
    }
    return ORTMEM_OK;
}

static outcome op_alloc(runner *rn, const replay_op *op)
{
    object_run *a = &rn->objects[op->object];
    holder_run *h = holder_of(rn, op->object);
    ortmem_status st = ensure_arena(rn, h);
    void *ptr = NULL;
    if (st == ORTMEM_OK)
        st = ortmem_arena_alloc(h->arena, (size_t)op->arg[0], (size_t)op->arg[1], &ptr);
    if (st != ORTMEM_OK) {
        record_op_failure(rn, op, st);
        a->state = OBJECT_FAILED;
        return failure_of(st);
    }
    a->state = OBJECT_LIVE;
    a->ptr = ptr;
    a->size = (size_t)op->arg[0];
    a->key = object_key(rn->trace, op->object);
    uintptr_t start = (uintptr_t)ptr, end = start + a->size;
    uint64_t align = op->arg[1] > ARENA_DEFAULT_MIN_ALIGN ? op->arg[1] : ARENA_DEFAULT_MIN_ALIGN;
    char who[160];
    if (start % align) {
        rn->result->misplaced++;
        finding(rn, "misaligned: %s at %p is not aligned to %" PRIu64,
                describe(rn, op->object, who, sizeof who), ptr, align);
    }
    if (h->arena_end && (start < h->arena_start || end > h->arena_end || end < start)) {
        rn->result->misplaced++;
        finding(rn, "misplaced: %s [%p, +%zu) lies outside its holder's arena region",
                describe(rn, op->object, who, sizeof who), ptr, a->size);
    }
    rn->result->overlaps += interval_insert(rn, &rn->allocations, start, end, op->object);
    pattern_fill(a->ptr, a->size, a->key, 0);
    return DONE;
}

static void check_allocation(runner *rn, uint32_t object, const char *when, uint32_t line)
{
    object_run *a = &rn->objects[object];
    rn->result->checked_allocations++;
    rn->result->checked_bytes += a->size;
    size_t bad = pattern_check(a->ptr, a->size, a->key, 0);
    if (bad == a->size)
        return;
    rn->result->corruptions++;
    char who[160];
    finding(rn, "corruption: %s differs from its pattern at byte %zu of %zu (%s, line %" PRIu32 ")",
            describe(rn, object, who, sizeof who), bad, a->size, when, line);
}

static outcome op_free(runner *rn, const replay_op *op)
{
    object_run *a = &rn->objects[op->object];
    if (a->state != OBJECT_LIVE)
        return SKIPPED;
    check_allocation(rn, op->object, "before free", op->line);
    ortmem_status st = ortmem_arena_free(holder_of(rn, op->object)->arena, a->ptr);
    if (st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED) {
        /* QUARANTINED: the free took effect but a granule was quarantined. */
        interval_remove(&rn->allocations, (uintptr_t)a->ptr, op->object);
        a->state = OBJECT_GONE;
    } else {
        a->state = OBJECT_STUCK;
    }
    if (st != ORTMEM_OK) {
        record_op_failure(rn, op, st);
        return failure_of(st);
    }
    return DONE;
}

static outcome op_region(runner *rn, const replay_op *op)
{
    object_run *r = &rn->objects[op->object];
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    opt.size = (size_t)op->arg[0];
    opt.account = &holder_of(rn, op->object)->account;
    ortmem_region *region = NULL;
    ortmem_status st = ortmem_region_create(rn->top, &opt, &region);
    if (st != ORTMEM_OK) {
        record_op_failure(rn, op, st);
        r->state = OBJECT_FAILED;
        return failure_of(st);
    }
    r->region = region;
    r->ptr = ortmem_region_base(region);
    r->size = ortmem_region_size(region);
    r->granule = ortmem_region_granule(region);
    r->granules = r->granule ? r->size / r->granule : 0;
    r->key = object_key(rn->trace, op->object);
    r->model = calloc(r->granules ? r->granules : 1, sizeof *r->model);
    if (!r->model) {
        fprintf(rn->err, "ortmem-replay: out of memory modelling %zu granules\n", r->granules);
        exit(2);
    }
    r->state = OBJECT_LIVE;
    rn->result->overlaps += interval_insert(rn, &rn->regions, (uintptr_t)r->ptr,
                                            (uintptr_t)r->ptr + r->size, op->object);
    return DONE;
}

/* The granule range [g0, g1) of byte range [offset, +len); false when the
 * range lies outside the region (the library then refuses it). Touched: every
 * granule the range touches; otherwise only those wholly inside. */
static bool granule_range(const object_run *r, uint64_t offset, uint64_t len, bool touched,
                          size_t *g0, size_t *g1)
{
    if (offset > r->size || len > r->size - offset || r->granule == 0)
        return false;
    if (touched) {
        *g0 = (size_t)offset / r->granule;
        *g1 = (size_t)(offset + len - 1) / r->granule + 1;
    } else {
        *g0 = (size_t)(offset + r->granule - 1) / r->granule;
        *g1 = (size_t)(offset + len) / r->granule;
        if (*g1 < *g0)
            *g1 = *g0;
    }
    return true;
}

static outcome op_commit(runner *rn, const replay_op *op)
{
    object_run *r = &rn->objects[op->object];
    if (r->state != OBJECT_LIVE)
        return SKIPPED;
    size_t g0 = 0, g1 = 0;
    bool in_range = granule_range(r, op->arg[0], op->arg[1], true, &g0, &g1);
    if (in_range && r->degraded) {
        /* A granule quarantined by an earlier failure refuses the commit. */
        for (size_t g = g0; g < g1; g++) {
            if (r->model[g].state == GRANULE_POISONED)
                return SKIPPED;
        }
    }
    ortmem_status st = ortmem_region_commit(r->region, (size_t)op->arg[0], (size_t)op->arg[1]);
    if (st != ORTMEM_OK) {
        record_op_failure(rn, op, st);
        r->degraded = true;
        if (in_range)
            resync(rn, op->object, g0, g1);
        return failure_of(st);
    }
    for (size_t g = g0; g < g1; g++) {
        granule_model *m = &r->model[g];
        if (m->state != GRANULE_UNMAPPED)
            continue;
        *m = (granule_model){r->key, (uint64_t)g * r->granule, GRANULE_MAPPED,
                             ORTMEM_ACCESS_READ_WRITE, true};
        pattern_fill(r->ptr + g * r->granule, r->granule, m->key, m->origin);
    }
    return DONE;
}

static outcome op_decommit(runner *rn, const replay_op *op)
{
    object_run *r = &rn->objects[op->object];
    if (r->state != OBJECT_LIVE)
        return SKIPPED;
    size_t g0 = 0, g1 = 0;
    bool in_range = granule_range(r, op->arg[0], op->arg[1], false, &g0, &g1);
    for (size_t g = g0; in_range && g < g1; g++)
        check_granule(rn, op->object, g, "before decommit", op->line);
    ortmem_status st = ortmem_region_decommit(r->region, (size_t)op->arg[0], (size_t)op->arg[1]);
    if (st != ORTMEM_OK) {
        record_op_failure(rn, op, st);
        r->degraded = true;
        if (in_range)
            resync(rn, op->object, g0, g1);
        return failure_of(st);
    }
    for (size_t g = g0; in_range && g < g1; g++) {
        if (r->model[g].state == GRANULE_MAPPED)
            r->model[g].state = GRANULE_UNMAPPED;
    }
    return DONE;
}

static outcome op_share(runner *rn, const replay_op *op)
{
    object_run *dst = &rn->objects[op->object], *src = &rn->objects[op->source];
    if (dst->state != OBJECT_LIVE || src->state != OBJECT_LIVE)
        return SKIPPED;
    uint64_t dst_off = op->arg[0], src_off = op->arg[1], len = op->arg[2];
    size_t d0 = 0, d1 = 0, s0 = 0, s1 = 0;
    /* The model is used only for a well-formed share; anything else is left to
     * the library to refuse. */
    bool modelled = granule_range(dst, dst_off, len, true, &d0, &d1) &&
                    granule_range(src, src_off, len, true, &s0, &s1) &&
                    dst->granule == src->granule && dst_off % dst->granule == 0 &&
                    src_off % src->granule == 0 && len % dst->granule == 0;
    if (modelled && (dst->degraded || src->degraded)) {
        /* An earlier failure left the source unmapped or the destination
         * mapped: this share depends on it. */
        for (size_t k = 0; k < d1 - d0; k++) {
            if (src->model[s0 + k].state != GRANULE_MAPPED ||
                dst->model[d0 + k].state != GRANULE_UNMAPPED)
                return SKIPPED;
        }
    }
    ortmem_status st = ortmem_region_share(dst->region, (size_t)dst_off, src->region,
                                           (size_t)src_off, (size_t)len, (ortmem_access)op->access);
    if (st != ORTMEM_OK) {
        record_op_failure(rn, op, st);
        dst->degraded = true;
        if (modelled)
            resync(rn, op->object, d0, d1);
        return failure_of(st);
    }
    if (!modelled)
        return DONE;
    for (size_t k = 0; k < d1 - d0; k++) {
        granule_model *m = &dst->model[d0 + k];
        const granule_model *s = &src->model[s0 + k];
        *m = *s;
        m->access = op->access;
        if (!granule_readable(m) || !granule_readable(s))
            continue;
        /* The alias must show exactly the source's bytes. */
        rn->result->checked_shares++;
        const unsigned char *seen = dst->ptr + (d0 + k) * dst->granule;
        const unsigned char *source = src->ptr + (s0 + k) * src->granule;
        if (memcmp(seen, source, dst->granule) != 0) {
            rn->result->corruptions++;
            char who[160];
            finding(rn,
                    "corruption: %s, alias at offset %zu does not show its source's bytes "
                    "(share, line %" PRIu32 ")",
                    describe(rn, op->object, who, sizeof who), (d0 + k) * dst->granule, op->line);
        }
        check_granule(rn, op->object, d0 + k, "after share", op->line);
    }
    return DONE;
}

static void check_region(runner *rn, uint32_t object, const char *when, uint32_t line)
{
    object_run *r = &rn->objects[object];
    for (size_t g = 0; g < r->granules; g++)
        check_granule(rn, object, g, when, line);
}

static void forget_region(runner *rn, uint32_t object)
{
    object_run *r = &rn->objects[object];
    interval_remove(&rn->regions, (uintptr_t)r->ptr, object);
    free(r->model);
    r->model = NULL;
    r->region = NULL;
    r->state = OBJECT_GONE;
}

static outcome op_destroy(runner *rn, const replay_op *op)
{
    object_run *r = &rn->objects[op->object];
    if (r->state != OBJECT_LIVE)
        return SKIPPED;
    check_region(rn, op->object, "before destroy", op->line);
    ortmem_status st = ortmem_region_destroy(r->region);
    if (st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED)
        forget_region(rn, op->object); /* the handle is gone either way */
    else
        r->state = OBJECT_STUCK;
    if (st != ORTMEM_OK) {
        record_op_failure(rn, op, st);
        return failure_of(st);
    }
    return DONE;
}

/* ---- pressure: what a reclaimable holder gives back ----
 *
 * Asked for want bytes, a reclaimable holder decommits its regions' committed
 * granules, the most recently created region first, one region's committed
 * runs at a time, until the backend's owned bytes fell by want or it ran out
 * of regions. A granule that another region still maps (a prefix shared into
 * a sequence) is left alone: unmapping it here would release nothing while
 * the other mapping lives. The model follows every decommit, and a region
 * that lost granules this way is "degraded", so a later share from it is
 * skipped rather than failed, as after a failed op. */

static uint64_t owned_now(runner *rn)
{
    ortmem_vmm_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    return ortmem_backend_stats(rn->top, &s) == ORTMEM_OK ? s.owned_bytes : 0;
}

/* Whether granule g of a region is mapped by it alone. */
static bool granule_private(object_run *r, size_t g)
{
    ortmem_granule_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    return ortmem_region_granule_info(r->region, g * r->granule, &info) == ORTMEM_OK &&
           info.state == ORTMEM_GRANULE_MAPPED && info.mappers == 1;
}

/* Decommits the private mapped granules [g0, g1) of region object as one
 * call; false (listed as a failure under the op that asked) when it failed. */
static bool pressure_decommit_run(runner *rn, holder_run *h, uint32_t object, size_t g0, size_t g1)
{
    object_run *r = &rn->objects[object];
    for (size_t g = g0; g < g1; g++)
        check_granule(rn, object, g, "before a decommit under pressure", rn->current_line);
    size_t offset = g0 * r->granule, len = (g1 - g0) * r->granule;
    ortmem_status st = ortmem_region_decommit(r->region, offset, len);
    r->degraded = true;
    if (st != ORTMEM_OK) {
        char what[160];
        snprintf(what, sizeof what, "pressure on holder '%s': decommit %s %zu %zu",
                 rn->trace->holders[h->index].name, replay_object_name(rn->trace, object), offset,
                 len);
        rn->result->pressure_failures++;
        record_failure(rn, rn->current_line, what, st);
        resync(rn, object, g0, g1);
        return false;
    }
    rn->result->holders[h->index].pressure_decommitted_bytes += len;
    for (size_t g = g0; g < g1; g++)
        r->model[g].state = GRANULE_UNMAPPED;
    return true;
}

static uint64_t on_pressure(void *user, uint64_t want_bytes)
{
    holder_run *h = user;
    runner *rn = h->rn;
    replay_holder_result *hr = &rn->result->holders[h->index];
    hr->pressure_calls++;
    uint64_t before = owned_now(rn), reclaimed = 0;
    for (uint32_t object = (uint32_t)rn->trace->object_count;
         object-- > 0 && reclaimed < want_bytes;) {
        const replay_object *o = &rn->trace->objects[object];
        object_run *r = &rn->objects[object];
        if (!o->is_region || o->holder != h->index || r->state != OBJECT_LIVE)
            continue;
        bool touched = false;
        for (size_t g = 0; g < r->granules;) {
            if (r->model[g].state != GRANULE_MAPPED || !granule_private(r, g)) {
                g++;
                continue;
            }
            size_t end = g + 1;
            while (end < r->granules && r->model[end].state == GRANULE_MAPPED &&
                   granule_private(r, end))
                end++;
            touched |= pressure_decommit_run(rn, h, object, g, end);
            g = end;
        }
        if (touched)
            hr->pressure_regions++;
        uint64_t now = owned_now(rn);
        reclaimed = before > now ? before - now : 0;
    }
    hr->pressure_reclaimed_bytes += reclaimed;
    return reclaimed;
}

/* ---- the run ---- */

static double seconds_since(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

static bool stats_of(runner *rn, ortmem_vmm_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    stats->struct_size = sizeof *stats;
    ortmem_status st = ortmem_backend_stats(rn->top, stats);
    if (st != ORTMEM_OK) {
        record_teardown_failure(rn, "backend stats", st);
        return false;
    }
    return true;
}

/* The timeline row after op number index (1-based). A failed stats call
 * stops the timeline: a row with made-up numbers would be worse than none.
 * The arena columns add up every holder's arena. */
static void timeline_row(runner *rn, size_t index, const replay_op *op)
{
    replay_result *res = rn->result;
    if (res->timeline_failed)
        return;
    ortmem_vmm_stats vmm;
    memset(&vmm, 0, sizeof vmm);
    vmm.struct_size = sizeof vmm;
    ortmem_arena_stats total;
    memset(&total, 0, sizeof total);
    total.struct_size = sizeof total;
    bool any_arena = false;
    ortmem_status st = ortmem_backend_stats(rn->top, &vmm);
    for (size_t i = 0; st == ORTMEM_OK && i < rn->trace->holder_count; i++) {
        if (!rn->holders[i].arena)
            continue;
        ortmem_arena_stats arena;
        memset(&arena, 0, sizeof arena);
        arena.struct_size = sizeof arena;
        st = ortmem_arena_stats_get(rn->holders[i].arena, &arena);
        total.allocated_bytes += arena.allocated_bytes;
        total.committed_bytes += arena.committed_bytes;
        any_arena = true;
    }
    if (st != ORTMEM_OK) {
        fprintf(rn->err, "ortmem-replay: timeline stopped at line %" PRIu32 ": %s: %s\n", op->line,
                ortmem_status_str(st), ortmem_last_error());
        res->timeline_failed = true;
        return;
    }
    replay_timeline_row(rn->config->timeline, index, op, &vmm, any_arena ? &total : NULL);
    res->timeline_rows++;
}

static void destroy_backends(runner *rn)
{
    if (rn->top != rn->cpu)
        (void)ortmem_backend_destroy(rn->top);
    (void)ortmem_backend_destroy(rn->cpu);
}

/* The authority on the replay's backend and one holder per trace holder.
 * Without --budget its limit is REPLAY_UNLIMITED_BYTES: nothing is refused,
 * but the ledger by holder is kept all the same. */
static bool open_authority(runner *rn)
{
    ortmem_authority_options opt = ORTMEM_AUTHORITY_OPTIONS_INIT;
    opt.limit_bytes = rn->config->budget_set ? rn->config->budget : REPLAY_UNLIMITED_BYTES;
    ortmem_status st = ortmem_authority_create(rn->top, &opt, &rn->authority);
    if (st != ORTMEM_OK) {
        fprintf(rn->err, "ortmem-replay: authority: %s: %s\n", ortmem_status_str(st),
                ortmem_last_error());
        rn->authority = NULL;
        return false;
    }
    for (size_t i = 0; i < rn->trace->holder_count; i++) {
        const replay_holder *th = &rn->trace->holders[i];
        holder_run *h = &rn->holders[i];
        h->rn = rn;
        h->index = (uint16_t)i;
        ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
        ho.name = th->name;
        ho.role = th->role;
        ho.priority = th->priority;
        if (th->reclaimable) {
            ho.on_pressure = on_pressure;
            ho.user = h;
        }
        st = ortmem_holder_register(rn->authority, &ho, &h->holder);
        if (st == ORTMEM_OK)
            st = ortmem_holder_account(h->holder, &h->account);
        if (st != ORTMEM_OK) {
            fprintf(rn->err, "ortmem-replay: holder '%s': %s: %s\n", th->name,
                    ortmem_status_str(st), ortmem_last_error());
            return false;
        }
    }
    return true;
}

static void close_authority(runner *rn, bool record)
{
    if (!rn->authority)
        return;
    char what[200];
    for (size_t i = 0; i < rn->trace->holder_count; i++) {
        if (!rn->holders[i].holder)
            continue;
        ortmem_status st = ortmem_holder_unregister(rn->holders[i].holder);
        if (st != ORTMEM_OK && record) {
            snprintf(what, sizeof what, "teardown: unregister holder '%s'",
                     rn->trace->holders[i].name);
            record_teardown_failure(rn, what, st);
        }
        rn->holders[i].holder = NULL;
    }
    ortmem_status st = ortmem_authority_destroy(rn->authority);
    if (st != ORTMEM_OK && record)
        record_teardown_failure(rn, "teardown: destroy the authority", st);
    rn->authority = NULL;
}

static bool open_backend(runner *rn)
{
    ortmem_cpu_options cpu = ORTMEM_CPU_OPTIONS_INIT;
    cpu.granule = rn->config->granule;
    ortmem_status st = ortmem_cpu_backend_create(&cpu, &rn->cpu);
    if (st != ORTMEM_OK) {
        fprintf(rn->err, "ortmem-replay: cpu backend: %s: %s\n", ortmem_status_str(st),
                ortmem_last_error());
        return false;
    }
    rn->top = rn->cpu;
    if (rn->config->fault) {
        st = ortmem_fault_backend_create(rn->cpu, &rn->config->fault_options, &rn->top);
        if (st != ORTMEM_OK) {
            fprintf(rn->err, "ortmem-replay: fault backend: %s: %s\n", ortmem_status_str(st),
                    ortmem_last_error());
            (void)ortmem_backend_destroy(rn->cpu);
            return false;
        }
    }
    if (rn->config->pool_cap) {
        st = ortmem_pool_set_cap(rn->top, rn->config->pool_cap);
        if (st != ORTMEM_OK) {
            fprintf(rn->err, "ortmem-replay: pool cap: %s: %s\n", ortmem_status_str(st),
                    ortmem_last_error());
            destroy_backends(rn);
            return false;
        }
    }
    if (!open_authority(rn)) {
        close_authority(rn, false);
        destroy_backends(rn);
        return false;
    }
    snprintf(rn->result->backend_name, sizeof rn->result->backend_name, "%s",
             ortmem_backend_name(rn->top));
    (void)ortmem_backend_granule(rn->top, &rn->result->granule);
    return true;
}

static size_t round_up(uint64_t v, size_t to)
{
    if (v > SIZE_MAX - to)
        return SIZE_MAX / to * to;
    return (size_t)((v + to - 1) / to * to);
}

/* Enough VA that fragmentation never starves a holder's arena: four times its
 * peak of live bytes plus two of its largest request, at least 256 MiB. VA is
 * reserved, not committed, so generosity costs nothing but page tables. */
static size_t arena_capacity_for(const replay_holder *h, size_t granule)
{
    const uint64_t floor = (uint64_t)256 << 20;
    uint64_t want = h->alloc_peak_bytes > UINT64_MAX / 8 ? UINT64_MAX / 2 : h->alloc_peak_bytes * 4;
    uint64_t largest =
        h->alloc_largest_bytes > UINT64_MAX / 8 ? UINT64_MAX / 4 : h->alloc_largest_bytes * 2;
    want = want > UINT64_MAX - largest ? UINT64_MAX / 2 : want + largest;
    if (want < floor)
        want = floor;
    return round_up(want, granule ? granule : ((size_t)2 << 20));
}

/* The ledger as ortmem_authority_format writes it, malloc'd; NULL on failure.
 * The JSON loses its trailing newline so it embeds as a value. */
static char *format_ledger(runner *rn, ortmem_report_format format)
{
    size_t needed = 0;
    ortmem_status st = ortmem_authority_format(rn->authority, format, NULL, 0, &needed);
    char *text = NULL;
    for (int attempt = 0; attempt < 3 && (st == ORTMEM_OK || st == ORTMEM_E_RANGE); attempt++) {
        char *grown = realloc(text, needed ? needed : 1);
        if (!grown)
            break;
        text = grown;
        size_t capacity = needed ? needed : 1;
        st = ortmem_authority_format(rn->authority, format, text, capacity, &needed);
        if (st == ORTMEM_OK) {
            size_t len = strlen(text);
            if (format == ORTMEM_REPORT_JSON)
                while (len && (text[len - 1] == '\n' || text[len - 1] == ' '))
                    text[--len] = '\0';
            return text;
        }
    }
    record_teardown_failure(
        rn, format == ORTMEM_REPORT_JSON ? "ledger report (JSON)" : "ledger report (table)", st);
    free(text);
    return NULL;
}

/* Captures the ledger when the authority's owned bytes reach a new peak. */
static void capture_peak_ledger(runner *rn, size_t op_index)
{
    replay_result *res = rn->result;
    ortmem_authority_report now = {.struct_size = sizeof now};
    if (ortmem_authority_report_get(rn->authority, &now, NULL, 0) != ORTMEM_OK ||
        now.owned_bytes <= res->ledger_peak_owned)
        return;
    char *table = format_ledger(rn, ORTMEM_REPORT_TABLE);
    char *json = format_ledger(rn, ORTMEM_REPORT_JSON);
    if (!table || !json) {
        free(table);
        free(json);
        return;
    }
    free(res->peak_ledger_table);
    free(res->peak_ledger_json);
    res->peak_ledger_table = table;
    res->peak_ledger_json = json;
    res->ledger_peak_owned = now.owned_bytes;
    res->ledger_peak_op = op_index;
}

/* The authority's ledger at trace end, before teardown changes it. */
static void report_ledger(runner *rn)
{
    replay_result *res = rn->result;
    memset(&res->authority, 0, sizeof res->authority);
    res->authority.struct_size = sizeof res->authority;
    ortmem_status st = ortmem_authority_report_get(rn->authority, &res->authority, NULL, 0);
    if (st == ORTMEM_OK)
        res->authority_reported = true;
    else
        record_teardown_failure(rn, "ledger report", st);
    res->ledger_table = format_ledger(rn, ORTMEM_REPORT_TABLE);
    res->ledger_json = format_ledger(rn, ORTMEM_REPORT_JSON);
}

static void teardown(runner *rn)
{
    const replay_trace *t = rn->trace;
    char what[200];
    for (uint32_t i = 0; i < t->object_count; i++) {
        object_run *o = &rn->objects[i];
        if (t->objects[i].is_region || (o->state != OBJECT_LIVE && o->state != OBJECT_STUCK))
            continue;
        rn->result->live_allocations_at_end++;
        check_allocation(rn, i, "live at the end", t->objects[i].line);
        ortmem_status st = ortmem_arena_free(holder_of(rn, i)->arena, o->ptr);
        if (st != ORTMEM_OK) {
            snprintf(what, sizeof what, "teardown: free %s (allocated at line %" PRIu32 ")",
                     replay_object_name(t, i), t->objects[i].line);
            record_teardown_failure(rn, what, st);
        }
        interval_remove(&rn->allocations, (uintptr_t)o->ptr, i);
        o->state = OBJECT_GONE;
    }
    for (size_t h = 0; h < t->holder_count; h++) {
        if (!rn->holders[h].arena)
            continue;
        /* force: allocations whose free failed go with the arena. */
        ortmem_status st = ortmem_arena_destroy(rn->holders[h].arena, 1);
        if (st != ORTMEM_OK) {
            snprintf(what, sizeof what, "teardown: destroy the arena of holder '%s'",
                     t->holders[h].name);
            record_teardown_failure(rn, what, st);
        }
        rn->holders[h].arena = NULL;
    }
    for (uint32_t i = 0; i < t->object_count; i++) {
        object_run *o = &rn->objects[i];
        if (!t->objects[i].is_region || (o->state != OBJECT_LIVE && o->state != OBJECT_STUCK))
            continue;
        rn->result->live_regions_at_end++;
        check_region(rn, i, "live at the end", t->objects[i].line);
        ortmem_status st = ortmem_region_destroy(o->region);
        if (st != ORTMEM_OK) {
            snprintf(what, sizeof what, "teardown: destroy %s (created at line %" PRIu32 ")",
                     replay_object_name(t, i), t->objects[i].line);
            record_teardown_failure(rn, what, st);
        }
        forget_region(rn, i);
    }
    /* Pooled granules are owned but belong to no object: empty the pool so the
     * ledger can be held against the quarantine alone. */
    size_t released = 0;
    ortmem_status st = ortmem_pool_trim(rn->top, 0, &released);
    if (st != ORTMEM_OK)
        record_teardown_failure(rn, "teardown: empty the pool", st);
    ortmem_vmm_stats *fin = &rn->result->final;
    if (stats_of(rn, fin))
        rn->result->ledger_balanced = fin->owned_bytes == fin->quarantined_bytes &&
                                      fin->mapped_bytes == fin->quarantined_mapped_bytes;
    /* The budget held when neither the authority nor the backend ever owned
     * more than it (teardown only gives back, so the peaks are the run's). */
    replay_result *res = rn->result;
    if (res->budget_set) {
        ortmem_authority_report rep;
        memset(&rep, 0, sizeof rep);
        rep.struct_size = sizeof rep;
        st = ortmem_authority_report_get(rn->authority, &rep, NULL, 0);
        if (st != ORTMEM_OK)
            record_teardown_failure(rn, "teardown: authority report", st);
        res->within_budget = st == ORTMEM_OK && rep.owned_peak_bytes <= res->budget_bytes &&
                             fin->owned_peak_bytes <= res->budget_bytes;
    }
    /* Holders, then the authority, then the backend it answers for. */
    close_authority(rn, true);
    /* Destroying a backend with quarantined granules reports them again
     * (ORTMEM_E_QUARANTINED); the ledger above already holds that. */
    if (rn->top != rn->cpu) {
        st = ortmem_backend_destroy(rn->top);
        if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED)
            record_teardown_failure(rn, "teardown: destroy the fault backend", st);
    }
    st = ortmem_backend_destroy(rn->cpu);
    if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED)
        record_teardown_failure(rn, "teardown: destroy the cpu backend", st);
}

bool replay_run(const replay_trace *trace, const replay_config *config, replay_result *result,
                FILE *err)
{
    double parse_seconds = result->parse_seconds;
    memset(result, 0, sizeof *result);
    result->parse_seconds = parse_seconds;
    result->budget_set = config->budget_set;
    result->budget_bytes = config->budget_set ? config->budget : 0;
    result->failures =
        calloc(REPLAY_FAILURES_KEPT + REPLAY_TEARDOWN_FAILURES_KEPT, sizeof *result->failures);
    size_t holders = trace->holder_count ? trace->holder_count : 1;
    result->holders = calloc(holders, sizeof *result->holders);
    runner rn = {.trace = trace, .config = config, .result = result, .err = err};
    rn.objects = calloc(trace->object_count ? trace->object_count : 1, sizeof *rn.objects);
    rn.holders = calloc(holders, sizeof *rn.holders);
    if (!result->failures || !result->holders || !rn.objects || !rn.holders) {
        fprintf(err, "ortmem-replay: out of memory for %zu objects\n", trace->object_count);
        free(rn.objects);
        free(rn.holders);
        replay_result_free(result);
        return false;
    }
    if (!open_backend(&rn)) {
        free(rn.objects);
        free(rn.holders);
        replay_result_free(result);
        return false;
    }
    for (size_t h = 0; h < trace->holder_count; h++) {
        if (trace->holders[h].allocations == 0)
            continue;
        size_t capacity = config->arena_capacity
                              ? config->arena_capacity
                              : arena_capacity_for(&trace->holders[h], result->granule);
        result->holders[h].arena_capacity = capacity;
        result->arena_capacity += capacity;
        result->arena_count++;
    }
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    size_t next_progress = 1;
    result->timeline_every = replay_timeline_every(trace->op_count);
    for (size_t i = 0; i < trace->op_count; i++) {
        const replay_op *op = &trace->ops[i];
        rn.current_line = op->line;
        outcome out = SKIPPED;
        switch ((replay_kind)op->kind) {
        case REPLAY_ALLOC: out = op_alloc(&rn, op); break;
        case REPLAY_FREE: out = op_free(&rn, op); break;
        case REPLAY_REGION: out = op_region(&rn, op); break;
        case REPLAY_COMMIT: out = op_commit(&rn, op); break;
        case REPLAY_DECOMMIT: out = op_decommit(&rn, op); break;
        case REPLAY_SHARE: out = op_share(&rn, op); break;
        case REPLAY_DESTROY: out = op_destroy(&rn, op); break;
        case REPLAY_KIND_COUNT: break;
        }
        if (out == SKIPPED) {
            result->skipped[op->kind]++;
            result->skipped_ops++;
        } else {
            result->executed[op->kind]++;
            if (out == FAILED) {
                result->failed[op->kind]++;
                result->failed_ops++;
            } else if (out == REFUSED) {
                result->refused[op->kind]++;
                result->budget_refusals++;
            }
        }
        capture_peak_ledger(&rn, i + 1);
        /* Every K ops, and the last so the timeline ends where the report's
         * "at trace end" does. */
        if (config->timeline && ((i + 1) % result->timeline_every == 0 || i + 1 == trace->op_count))
            timeline_row(&rn, i + 1, op);
        if (config->progress && (i + 1) * 10 >= next_progress * trace->op_count) {
            while ((i + 1) * 10 >= next_progress * trace->op_count && next_progress <= 10)
                next_progress++;
            fprintf(stderr, "ortmem-replay: %3zu%% (%zu of %zu ops, %.2f s)\n",
                    (i + 1) * 100 / trace->op_count, i + 1, trace->op_count, seconds_since(&start));
        }
    }
    rn.current_line = 0;
    result->run_seconds = seconds_since(&start);
    (void)stats_of(&rn, &result->at_trace_end);
    report_ledger(&rn);
    clock_gettime(CLOCK_MONOTONIC, &start);
    teardown(&rn);
    result->teardown_seconds = seconds_since(&start);
    free(rn.objects);
    free(rn.holders);
    free(rn.allocations.items);
    free(rn.regions.items);
    return true;
}

void replay_result_free(replay_result *result)
{
    free(result->failures);
    result->failures = NULL;
    result->failures_kept = 0;
    free(result->holders);
    result->holders = NULL;
    free(result->ledger_table);
    free(result->ledger_json);
    result->ledger_table = result->ledger_json = NULL;
    free(result->peak_ledger_table);
    free(result->peak_ledger_json);
    result->peak_ledger_table = result->peak_ledger_json = NULL;
}

bool replay_result_clean(const replay_result *result)
{
    return result->overlaps == 0 && result->corruptions == 0 && result->misplaced == 0 &&
           result->ledger_balanced && (!result->budget_set || result->within_budget);
}
