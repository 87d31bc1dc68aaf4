/* Graph signatures: what a captured graph depends on, and the keep/invalidate
 * decision with its reason (docs/memory/CAPTURE.md).
 *
 * A range entry holds the region pointer (no reference: the handle registry
 * answers a destroyed region), the region's process-unique id (a new region
 * at a recycled address is not mistaken for the old one), the VA it had and
 * the granules' epoch sum at capture. A binding entry holds the sequence,
 * (layer, K|V) and the binding as the graph saw it.
 *
 * Layering: signatures read regions and KV bindings through the public
 * vmm and kv API only; the gate (gate.c) depends on core alone. */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ortmem/capture.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/handle.h"

typedef struct om_sig_range {
    ortmem_region *region;
    char slot[80]; /* "slot of tensor 'NAME'" for a residency slot, else "" */
    size_t offset, len;
    uint64_t region_id;
    uintptr_t base; /* the region's base at capture */
    uint64_t granules;
    uint64_t epoch_sum;
} om_sig_range;

typedef struct om_sig_binding {
    ortmem_kv_seq *seq;
    uint32_t layer;
    int value;
    ortmem_kv_binding seen;
} om_sig_binding;

struct ortmem_graph_signature {
    om_handle hdr;
    pthread_mutex_t lock;
    om_sig_range *ranges;
    size_t range_count, range_cap;
    om_sig_binding *bindings;
    size_t binding_count, binding_cap;
};

static const char *const om_verdict_names[ORTMEM_GRAPH_VERDICT_COUNT] = {"keep", "invalidate"};

const char *ortmem_graph_verdict_name(ortmem_graph_verdict v)
{
    return (unsigned)v < ORTMEM_GRAPH_VERDICT_COUNT ? om_verdict_names[v] : NULL;
}

static ortmem_status pin_sig(ortmem_graph_signature *s, const char *what)
{
    ortmem_status st = om_handle_pin(s, OM_KIND_GRAPH_SIGNATURE, what);
    if (st != ORTMEM_OK)
        return st;
    pthread_mutex_lock(&s->lock);
    return ORTMEM_OK;
}

static void unpin_sig(ortmem_graph_signature *s)
{
    pthread_mutex_unlock(&s->lock);
    om_handle_unpin(&s->hdr);
}

ortmem_status ortmem_graph_signature_create(ortmem_graph_signature **out)
{
    om_error_clear();
    if (!out)
        return OM_ERR(ORTMEM_E_INVALID, "graph signature create: out is NULL");
    ortmem_graph_signature *s = om_calloc(1, sizeof *s);
    if (!s)
        return OM_ERR(ORTMEM_E_NOMEM, "graph signature create: %zu bytes", sizeof *s);
    pthread_mutex_init(&s->lock, NULL);
    ortmem_status st = om_handle_register(&s->hdr, OM_KIND_GRAPH_SIGNATURE);
    if (st != ORTMEM_OK) {
        pthread_mutex_destroy(&s->lock);
        om_free(s);
        return st;
    }
    *out = s;
    return ORTMEM_OK;
}

ortmem_status ortmem_graph_signature_destroy(ortmem_graph_signature *s)
{
    om_error_clear();
    ortmem_status st = om_handle_pin(s, OM_KIND_GRAPH_SIGNATURE, "graph signature destroy");
    if (st != ORTMEM_OK)
        return st;
    st = om_handle_retire(&s->hdr, "graph signature destroy");
    if (st != ORTMEM_OK) {
        om_handle_unpin(&s->hdr);
        return st;
    }
    pthread_mutex_destroy(&s->lock);
    om_free(s->ranges);
    om_free(s->bindings);
    om_free(s);
    om_handle_end_destroy();
    return ORTMEM_OK;
}

/* The array with room for one more entry of size bytes (moved by realloc when
 * it grows, *cap updated), or NULL when it cannot grow (array unchanged). */
static void *grow(void *array, size_t *cap, size_t count, size_t size)
{
    if (count < *cap)
        return array;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *fresh = om_realloc(array, ncap * size);
    if (fresh)
        *cap = ncap;
    return fresh;
}

static ortmem_status add_range(ortmem_graph_signature *s, ortmem_region *region, size_t offset,
                               size_t len, const char *slot)
{
    ortmem_range_state rs = {.struct_size = sizeof rs};
    ortmem_status st = ortmem_region_range_state(region, offset, len, &rs);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "graph signature add range");
    if (!rs.all_mapped)
        return OM_ERR(ORTMEM_E_STATE,
                      "graph signature add range: region r%" PRIu64 " [%zu, +%zu): %" PRIu64
                      " of %" PRIu64 " granules unmapped, the first at offset %zu; a captured "
                      "graph may reference mapped memory only",
                      rs.region_id, offset, len, rs.unmapped_granules, rs.granules,
                      rs.first_unmapped_offset);
    uintptr_t base = (uintptr_t)ortmem_region_base(region);
    st = pin_sig(s, "graph signature add range");
    if (st != ORTMEM_OK)
        return st;
    om_sig_range *ranges = grow(s->ranges, &s->range_cap, s->range_count, sizeof *ranges);
    if (!ranges) {
        st = OM_ERR(ORTMEM_E_NOMEM, "graph signature add range: %zu entries", s->range_count + 1);
    } else {
        s->ranges = ranges;
        om_sig_range *e = &s->ranges[s->range_count++];
        *e = (om_sig_range){region, "", offset, len, rs.region_id, base, rs.granules, rs.epoch_sum};
        if (slot)
            snprintf(e->slot, sizeof e->slot, "slot of tensor '%s'", slot);
    }
    unpin_sig(s);
    return st;
}

ortmem_status ortmem_graph_signature_add_range(ortmem_graph_signature *s, ortmem_region *region,
                                               size_t offset, size_t len)
{
    om_error_clear();
    return add_range(s, region, offset, len, NULL);
}

ortmem_status ortmem_graph_signature_add_slot(ortmem_graph_signature *s,
                                              ortmem_residency_cache *cache, uint32_t tensor)
{
    om_error_clear();
    ortmem_region *region = NULL;
    size_t offset = 0, len = 0;
    const char *name = NULL;
    ortmem_status st = ortmem_residency_slot_range(cache, tensor, &region, &offset, &len, &name);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "graph signature add slot");
    st = add_range(s, region, offset, len, name);
    if (st != ORTMEM_OK)
        return om_error_wrap(st,
                             "graph signature add slot of tensor '%s' (not resident: acquire or "
                             "pin it before capturing)",
                             name);
    return ORTMEM_OK;
}

ortmem_status ortmem_graph_signature_add_binding(ortmem_graph_signature *s, ortmem_kv_seq *seq,
                                                 uint32_t layer, int value,
                                                 const ortmem_kv_binding *binding)
{
    om_error_clear();
    if (value != 0 && value != 1)
        return OM_ERR(ORTMEM_E_INVALID, "graph signature add binding: value %d (0 = K, 1 = V)",
                      value);
    ortmem_kv_binding seen = {.struct_size = sizeof seen};
    if (binding) {
        ortmem_status st = om_struct_check("graph signature add binding", "binding",
                                           &binding->struct_size, sizeof seen, SIZE_MAX);
        if (st != ORTMEM_OK)
            return st;
        memcpy(&seen, binding, sizeof seen);
        /* The sequence and (layer, value) must exist; the answer is not kept. */
        ortmem_kv_binding now = {.struct_size = sizeof now};
        st = ortmem_kv_seq_binding(seq, layer, value, &now);
        if (st != ORTMEM_OK)
            return om_error_wrap(st, "graph signature add binding");
    } else {
        ortmem_status st = ortmem_kv_seq_binding(seq, layer, value, &seen);
        if (st != ORTMEM_OK)
            return om_error_wrap(st, "graph signature add binding");
    }
    if (!seen.base)
        return OM_ERR(ORTMEM_E_STATE,
                      "graph signature add binding: layer %u %c has no base (no memory yet, or "
                      "swapped out); a captured graph cannot hold it",
                      layer, value ? 'V' : 'K');
    ortmem_status st = pin_sig(s, "graph signature add binding");
    if (st != ORTMEM_OK)
        return st;
    om_sig_binding *bindings =
        grow(s->bindings, &s->binding_cap, s->binding_count, sizeof *bindings);
    if (!bindings) {
        st = OM_ERR(ORTMEM_E_NOMEM, "graph signature add binding: %zu entries",
                    s->binding_count + 1);
    } else {
        s->bindings = bindings;
        s->bindings[s->binding_count++] = (om_sig_binding){seq, layer, value, seen};
    }
    unpin_sig(s);
    return st;
}

/* The verdict under construction: the first invalidating cause, how many
 * there are, and the remapped ranges. */
typedef struct om_judgement {
    char first[384];
    uint64_t causes;
    char remaps[384];
    uint64_t remapped, changes;
} om_judgement;

static void invalidate(om_judgement *j, const char *fmt, ...) ORTMEM_PRINTF(2, 3);

static void invalidate(om_judgement *j, const char *fmt, ...)
{
    if (j->causes++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->first, sizeof j->first, fmt, ap);
        va_end(ap);
    }
}

static void check_range(om_judgement *j, const om_sig_range *e)
{
    ortmem_range_state rs = {.struct_size = sizeof rs};
    ortmem_status st = ortmem_region_range_state(e->region, e->offset, e->len, &rs);
    om_error_saved failure = {""};
    if (st != ORTMEM_OK)
        om_error_save(&failure);
    /* A smaller region at the recycled address? */
    if (st == ORTMEM_E_RANGE && ortmem_region_range_state(e->region, 0, 1, &rs) == ORTMEM_OK &&
        rs.region_id != e->region_id)
        st = ORTMEM_OK;
    if (st == ORTMEM_E_HANDLE || (st == ORTMEM_OK && rs.region_id != e->region_id)) {
        invalidate(j,
                   "region r%" PRIu64 " destroyed: the graph's range [%zu, +%zu) at %p is "
                   "gone",
                   e->region_id, e->offset, e->len, (void *)(e->base + e->offset));
        return;
    }
    if (st != ORTMEM_OK) {
        invalidate(j, "region r%" PRIu64 " [%zu, +%zu) cannot be read: %s", e->region_id, e->offset,
                   e->len, failure.detail);
        return;
    }
    if (!rs.all_mapped) {
        ortmem_granule_info info = {.struct_size = sizeof info};
        bool quarantined =
            ortmem_region_granule_info(e->region, rs.first_unmapped_offset, &info) == ORTMEM_OK &&
            info.state == ORTMEM_GRANULE_QUARANTINED;
        invalidate(j,
                   "%s%sregion r%" PRIu64 " granule at offset %zu is %s (%" PRIu64 " of %" PRIu64
                   " granules of [%zu, +%zu) not mapped)",
                   e->slot, e->slot[0] ? ": " : "", e->region_id, rs.first_unmapped_offset,
                   quarantined ? "quarantined after a failed backend call"
                               : "unmapped (evicted since capture)",
                   rs.unmapped_granules, rs.granules, e->offset, e->len);
        return;
    }
    if (rs.epoch_sum != e->epoch_sum) {
        uint64_t changes = rs.epoch_sum - e->epoch_sum;
        if (j->remapped++ == 0)
            snprintf(j->remaps, sizeof j->remaps,
                     "region r%" PRIu64 " [%zu, +%zu) remapped since capture (%" PRIu64
                     " mapping change%s at the same VA)",
                     e->region_id, e->offset, e->len, changes, changes == 1 ? "" : "s");
        j->changes += changes;
    }
}

static void check_binding(om_judgement *j, const om_sig_binding *e)
{
    char kv = e->value ? 'V' : 'K';
    ortmem_kv_binding now = {.struct_size = sizeof now};
    ortmem_status st = ortmem_kv_seq_binding(e->seq, e->layer, e->value, &now);
    const ortmem_kv_binding *was = &e->seen;
    if (st == ORTMEM_E_HANDLE) {
        invalidate(j, "binding layer %u %c: sequence destroyed (base was %p)", e->layer, kv,
                   was->base);
        return;
    }
    if (st != ORTMEM_OK) {
        invalidate(j, "binding layer %u %c cannot be read: %s", e->layer, kv, ortmem_last_error());
        return;
    }
    if (now.generation != was->generation) {
        invalidate(j,
                   "binding layer %u %c generation %" PRIu64 " -> %" PRIu64
                   ": bucket growth moved the pointer (%p -> %p)",
                   e->layer, kv, was->generation, now.generation, was->base, now.base);
        return;
    }
    if (!now.base) {
        invalidate(j, "binding layer %u %c: the sequence is swapped out (base %p is unmapped)",
                   e->layer, kv, was->base);
        return;
    }
    if (now.base != was->base)
        invalidate(j, "binding layer %u %c: base %p -> %p at the same generation %" PRIu64,
                   e->layer, kv, was->base, now.base, now.generation);
    else if (now.token_stride != was->token_stride || now.head_stride != was->head_stride)
        invalidate(j,
                   "binding layer %u %c: strides (token %" PRIu64 ", head %" PRIu64
                   ") -> (token %" PRIu64 ", head %" PRIu64 ")",
                   e->layer, kv, was->token_stride, was->head_stride, now.token_stride,
                   now.head_stride);
    else if (now.capacity != was->capacity)
        invalidate(j, "binding layer %u %c: capacity %" PRIu64 " -> %" PRIu64 " tokens", e->layer,
                   kv, was->capacity, now.capacity);
}

ortmem_status ortmem_graph_signature_check(ortmem_graph_signature *s, char *reason, size_t capacity,
                                           ortmem_graph_verdict *verdict)
{
    om_error_clear();
    if (!verdict)
        return OM_ERR(ORTMEM_E_INVALID, "graph signature check: verdict is NULL");
    if (!reason && capacity)
        return OM_ERR(ORTMEM_E_INVALID,
                      "graph signature check: reason is NULL with a capacity of %zu", capacity);
    ortmem_status st = pin_sig(s, "graph signature check");
    if (st != ORTMEM_OK)
        return st;
    om_judgement *j = om_calloc(1, sizeof *j);
    if (!j) {
        unpin_sig(s);
        return OM_ERR(ORTMEM_E_NOMEM, "graph signature check: %zu bytes", sizeof *j);
    }
    for (size_t i = 0; i < s->range_count; i++)
        check_range(j, &s->ranges[i]);
    for (size_t i = 0; i < s->binding_count; i++)
        check_binding(j, &s->bindings[i]);
    size_t ranges = s->range_count, bindings = s->binding_count;
    unpin_sig(s);
    *verdict = j->causes ? ORTMEM_GRAPH_INVALIDATE : ORTMEM_GRAPH_KEEP;
    if (capacity) {
        if (j->causes > 1)
            snprintf(reason, capacity, "%s (and %" PRIu64 " more cause%s)", j->first, j->causes - 1,
                     j->causes == 2 ? "" : "s");
        else if (j->causes)
            snprintf(reason, capacity, "%s", j->first);
        else if (j->remapped > 1)
            snprintf(reason, capacity,
                     "%s, and %" PRIu64 " more range%s (%" PRIu64
                     " changes in all): kept, a captured graph follows the VA",
                     j->remaps, j->remapped - 1, j->remapped == 2 ? "" : "s", j->changes);
        else if (j->remapped)
            snprintf(reason, capacity, "%s: kept, a captured graph follows the VA", j->remaps);
        else
            snprintf(reason, capacity, "unchanged since capture (%zu range%s, %zu binding%s)",
                     ranges, ranges == 1 ? "" : "s", bindings, bindings == 1 ? "" : "s");
    }
    om_free(j);
    om_error_clear();
    return ORTMEM_OK;
}
