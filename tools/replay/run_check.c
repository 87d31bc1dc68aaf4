/* Replay checks. Every byte the trace makes live gets a known pattern and is
 * checked before it goes away: allocations by their ID, committed granules by
 * their region and offset (an alias must show its source's bytes). The model
 * of each region's granules is what the replay expects; after a failed call
 * it is re-read from the library, because "nothing changed" is a claim under
 * test too. Also here: live address ranges (overlaps) and the failure records. */
#include "run.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

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
void pattern_fill(unsigned char *p, size_t len, uint64_t key, uint64_t offset)
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
uint64_t object_key(const replay_trace *t, uint32_t object)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const char *s = replay_object_name(t, object); *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return mix64(h ^ mix64((uint64_t)object + 1));
}

/* ---- bookkeeping of what went wrong ---- */

/* Overlaps, corruptions and misplacements go to stderr as they happen (the
 * first few), so a broken run points at its first broken byte. */
void finding(runner *rn, const char *fmt, ...)
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

void record_failure(runner *rn, uint32_t line, const char *what, ortmem_status status)
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

void record_op_failure(runner *rn, const replay_op *op, ortmem_status status)
{
    char what[160];
    replay_op_format(rn->trace, op, what, sizeof what);
    record_failure(rn, op->line, what, status);
}

void record_teardown_failure(runner *rn, const char *what, ortmem_status status)
{
    rn->result->teardown_failures++;
    record_failure(rn, 0, what, status);
}

/* ---- overlap detection: live address ranges kept sorted ---- */

const char *describe(runner *rn, uint32_t object, char *buf, size_t size)
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
uint64_t interval_insert(runner *rn, interval_set *set, uintptr_t start, uintptr_t end,
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

void interval_remove(interval_set *set, uintptr_t start, uint32_t object)
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

bool granule_readable(const granule_model *g)
{
    return g->state == GRANULE_MAPPED && g->known && g->access != ORTMEM_ACCESS_NONE;
}

/* Checks granule index g of region r against its pattern; when was the moment
 * ("before decommit at line 40"). */
void check_granule(runner *rn, uint32_t object, size_t g, const char *when, uint32_t line)
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
void resync(runner *rn, uint32_t object, size_t g0, size_t g1)
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

void check_allocation(runner *rn, uint32_t object, const char *when, uint32_t line)
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

void check_region(runner *rn, uint32_t object, const char *when, uint32_t line)
{
    object_run *r = &rn->objects[object];
    for (size_t g = 0; g < r->granules; g++)
        check_granule(rn, object, g, when, line);
}
