/* Replay operations: one function per kind of trace line. Each calls the
 * library, keeps the model of what it made live, and answers DONE, FAILED,
 * REFUSED (the budget) or SKIPPED (it depended on a failed op). */
#include "run.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_DEFAULT_MIN_ALIGN 256

/* ---- operations ---- */

static outcome failure_of(ortmem_status st)
{
    return st == ORTMEM_E_BUDGET ? REFUSED : FAILED;
}

holder_run *holder_of(runner *rn, uint32_t object)
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

outcome op_alloc(runner *rn, const replay_op *op)
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

outcome op_free(runner *rn, const replay_op *op)
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

outcome op_region(runner *rn, const replay_op *op)
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

outcome op_commit(runner *rn, const replay_op *op)
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

outcome op_decommit(runner *rn, const replay_op *op)
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

outcome op_share(runner *rn, const replay_op *op)
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

void forget_region(runner *rn, uint32_t object)
{
    object_run *r = &rn->objects[object];
    interval_remove(&rn->regions, (uintptr_t)r->ptr, object);
    free(r->model);
    r->model = NULL;
    r->region = NULL;
    r->state = OBJECT_GONE;
}

outcome op_destroy(runner *rn, const replay_op *op)
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
