/* Stable-VA slots: the VA of every slot is reserved once, with the region,
 * and never moves; only its extents come and go. */
#include "offload/slots.h"

#include <sched.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"

typedef struct om_slot {
    size_t offset, len; /* granule-aligned */
    om_slot_state state;
    ortmem_fence *fence;    /* RETIRING */
    uint64_t reader_event;  /* recorded on the compute stream at the last reader's release */
    uint64_t reader_stream; /* that compute stream */
    bool reader_pending;    /* reader_event is live: a refill waits for it first */
    bool reader_unordered;  /* recording it failed: the refill records one itself */
} om_slot;

struct om_slots {
    ortmem_authority *authority;
    ortmem_backend *backend;
    ortmem_region *region;
    size_t granule;
    uint32_t count;
    uint32_t retiring;
    uint64_t stall_ns; /* time spent waiting on copies and last readers */
    om_slot *slot;
};

static uint64_t om_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t om_slots_stall_ns(const om_slots *s)
{
    return s->stall_ns;
}

ortmem_status om_slots_create(ortmem_authority *authority, const ortmem_account *account,
                              const uint64_t *bytes, uint32_t count, om_slots **out)
{
    ortmem_backend *b = ortmem_authority_backend(authority);
    size_t granule = 0;
    ortmem_status st = ortmem_backend_granule(b, &granule);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "weight slots");
    om_slots *s = om_calloc(1, sizeof *s);
    om_slot *slot = s ? om_calloc(count, sizeof *slot) : NULL;
    if (!slot) {
        om_free(s);
        return OM_ERR(ORTMEM_E_NOMEM, "weight slots: bookkeeping for %u slots", count);
    }
    size_t offset = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint64_t len = (bytes[i] + granule - 1) / granule * granule;
        if (bytes[i] > SIZE_MAX - granule || len > SIZE_MAX - offset) {
            om_free(slot);
            om_free(s);
            return OM_ERR(ORTMEM_E_OVERFLOW, "weight slots: slot %u of %llu bytes after %zu", i,
                          (unsigned long long)bytes[i], offset);
        }
        slot[i].offset = offset;
        slot[i].len = (size_t)len;
        offset += (size_t)len;
    }
    ortmem_region_options ro = ORTMEM_REGION_OPTIONS_INIT;
    ro.size = offset;
    ro.account = account;
    ro.extents.growth = ORTMEM_EXTENT_EXACT;
    st = ortmem_region_create(b, &ro, &s->region);
    if (st != ORTMEM_OK) {
        om_free(slot);
        om_free(s);
        return om_error_wrap(st, "weight slots: reserving %zu bytes for %u slots", offset, count);
    }
    s->authority = authority;
    s->backend = b;
    s->granule = granule;
    s->count = count;
    s->slot = slot;
    *out = s;
    return ORTMEM_OK;
}

ortmem_region *om_slots_region(const om_slots *s, uint32_t i, size_t *offset)
{
    *offset = s->slot[i].offset;
    return s->region;
}

void *om_slots_ptr(const om_slots *s, uint32_t i)
{
    return (char *)ortmem_region_base(s->region) + s->slot[i].offset;
}

uint64_t om_slots_bytes(const om_slots *s, uint32_t i)
{
    return s->slot[i].len;
}

om_slot_state om_slots_state(const om_slots *s, uint32_t i)
{
    return s->slot[i].state;
}

size_t om_slots_granule(const om_slots *s)
{
    return s->granule;
}

uint32_t om_slots_retiring(const om_slots *s)
{
    return s->retiring;
}

/* Copies and waits for the copy's event; the compute stream may use the
 * bytes once this returns. */
static ortmem_status om_slots_copy(om_slots *s, uint32_t i, const void *host, uint64_t len,
                                   uint64_t stream, bool *stalled)
{
    *stalled = false;
    ortmem_status st =
        ortmem_backend_copy_async(s->backend, om_slots_ptr(s, i), host, (size_t)len, stream);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "slot %u: copying %llu bytes in", i, (unsigned long long)len);
    uint64_t event = 0;
    st = ortmem_backend_event_record(s->backend, stream, &event);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "slot %u: recording the copy's event", i);
    uint64_t waited_since = 0;
    while ((st = ortmem_backend_event_query(s->backend, event)) == ORTMEM_E_BUSY) {
        if (!*stalled)
            waited_since = om_monotonic_ns();
        *stalled = true;
        sched_yield();
    }
    if (*stalled)
        s->stall_ns += om_monotonic_ns() - waited_since;
    if (st != ORTMEM_OK) {
        om_error_saved saved;
        om_error_save(&saved);
        (void)ortmem_backend_event_destroy(s->backend, event);
        (void)om_error_restore(&saved, st);
        return om_error_wrap(st, "slot %u: waiting for the copy's event", i);
    }
    /* A failed destroy leaves an event the backend still tracks (and destroys
     * with itself); the bytes have landed, so the fill stands. */
    (void)ortmem_backend_event_destroy(s->backend, event);
    return ORTMEM_OK;
}

/* Drops a reader event (a later fence on the same stream covers it, or
 * nothing reads the slot any more). */
static void om_slots_drop_reader(om_slots *s, om_slot *sl)
{
    sl->reader_unordered = false;
    if (!sl->reader_pending)
        return;
    /* A failed destroy leaves an event the backend destroys with itself. */
    (void)ortmem_backend_event_destroy(s->backend, sl->reader_event);
    sl->reader_pending = false;
}

void om_slots_readers_done(om_slots *s, uint32_t i, uint64_t compute_stream)
{
    om_slot *sl = &s->slot[i];
    /* Any new event comes later on the same stream: it covers the old one. */
    om_slots_drop_reader(s, sl);
    sl->reader_stream = compute_stream;
    om_error_saved saved;
    om_error_save(&saved);
    uint64_t event = 0;
    if (ortmem_backend_event_record(s->backend, compute_stream, &event) == ORTMEM_OK) {
        sl->reader_event = event;
        sl->reader_pending = true;
        sl->reader_unordered = false;
    } else
        sl->reader_unordered = true;
    (void)om_error_restore(&saved, ORTMEM_OK);
}

/* Waits until the compute stream has passed the slot's last reader. */
static ortmem_status om_slots_wait_readers(om_slots *s, uint32_t i, bool *stalled)
{
    om_slot *sl = &s->slot[i];
    if (sl->reader_unordered) {
        /* An event recorded now still comes after the readers' work. */
        uint64_t event = 0;
        ortmem_status st = ortmem_backend_event_record(s->backend, sl->reader_stream, &event);
        if (st != ORTMEM_OK)
            return om_error_wrap(st,
                                 "slot %u: recording an event after its last reader on "
                                 "stream %llu",
                                 i, (unsigned long long)sl->reader_stream);
        sl->reader_event = event;
        sl->reader_pending = true;
        sl->reader_unordered = false;
    }
    if (!sl->reader_pending)
        return ORTMEM_OK;
    ortmem_status st;
    uint64_t waited_since = 0;
    bool waited = false;
    while ((st = ortmem_backend_event_query(s->backend, sl->reader_event)) == ORTMEM_E_BUSY) {
        if (!waited)
            waited_since = om_monotonic_ns();
        waited = *stalled = true;
        sched_yield();
    }
    if (waited)
        s->stall_ns += om_monotonic_ns() - waited_since;
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "slot %u: waiting for its last reader's event", i);
    om_slots_drop_reader(s, sl);
    return ORTMEM_OK;
}

ortmem_status om_slots_fill(om_slots *s, uint32_t i, const void *host, uint64_t len,
                            uint64_t copy_stream, bool *stalled)
{
    om_slot *sl = &s->slot[i];
    if (sl->state != OM_SLOT_EMPTY)
        return OM_ERR(ORTMEM_E_STATE, "slot %u: fill of a slot in state %d", i, (int)sl->state);
    ortmem_commit_range r = {sl->offset, sl->len, sl->offset + sl->len};
    ortmem_extent_policy exact = {sizeof exact, ORTMEM_EXTENT_EXACT, 0};
    ortmem_status st = ortmem_region_commit_grow(s->region, &r, 1, &exact);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "slot %u: committing %zu bytes", i, sl->len);
    st = om_slots_copy(s, i, host, len, copy_stream, stalled);
    if (st == ORTMEM_OK) {
        sl->state = OM_SLOT_FILLED;
        return ORTMEM_OK;
    }
    om_error_saved saved;
    om_error_save(&saved);
    ortmem_status undo = ortmem_region_decommit(s->region, sl->offset, sl->len);
    if (undo == ORTMEM_E_QUARANTINED)
        sl->state = OM_SLOT_QUARANTINED;
    else if (undo != ORTMEM_OK)
        sl->state = OM_SLOT_FILLED; /* mapped still, the bytes not all there: refill first */
    (void)om_error_restore(&saved, st);
    if (undo == ORTMEM_E_QUARANTINED)
        return om_error_wrap(ORTMEM_E_QUARANTINED, "slot %u: undoing the commit quarantined", i);
    if (sl->state == OM_SLOT_FILLED)
        return om_error_wrap(st, "slot %u: the commit could not be undone (it stays mapped)", i);
    return st;
}

ortmem_status om_slots_refill(om_slots *s, uint32_t i, const void *host, uint64_t len,
                              uint64_t copy_stream, bool *stalled)
{
    if (s->slot[i].state != OM_SLOT_FILLED)
        return OM_ERR(ORTMEM_E_STATE, "slot %u: refill of a slot in state %d", i,
                      (int)s->slot[i].state);
    bool waited = false;
    ortmem_status st = om_slots_wait_readers(s, i, &waited);
    if (st == ORTMEM_OK)
        st = om_slots_copy(s, i, host, len, copy_stream, stalled);
    else
        *stalled = false;
    *stalled = *stalled || waited;
    return st;
}

ortmem_status om_slots_retire(om_slots *s, uint32_t i, uint64_t compute_stream)
{
    om_slot *sl = &s->slot[i];
    if (sl->state != OM_SLOT_FILLED)
        return OM_ERR(ORTMEM_E_STATE, "slot %u: eviction of a slot in state %d", i, (int)sl->state);
    ortmem_fence *f = NULL;
    ortmem_status st = ortmem_fence_create_event(s->backend, compute_stream, &f);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "slot %u: eviction's fence", i);
    st = ortmem_region_decommit_after(s->region, sl->offset, sl->len, f);
    if (st != ORTMEM_OK) {
        om_error_saved saved;
        om_error_save(&saved);
        (void)ortmem_fence_destroy(f);
        (void)om_error_restore(&saved, st);
        return om_error_wrap(st, "slot %u: eviction", i);
    }
    om_slots_drop_reader(s, sl); /* the fence comes later on the same stream */
    sl->fence = f;
    sl->state = OM_SLOT_RETIRING;
    s->retiring++;
    return ORTMEM_OK;
}

void om_slots_collect(om_slots *s, void (*done)(void *ctx, uint32_t slot, om_slot_state state),
                      void *ctx)
{
    if (!s->retiring)
        return;
    /* Other holders' retirements are carried out too; their failures are
     * theirs to see in their own polls. */
    (void)ortmem_authority_poll(s->authority, NULL);
    for (uint32_t i = 0; i < s->count && s->retiring; i++) {
        om_slot *sl = &s->slot[i];
        if (sl->state != OM_SLOT_RETIRING || ortmem_fence_destroy(sl->fence) != ORTMEM_OK)
            continue;
        sl->fence = NULL;
        s->retiring--;
        ortmem_range_state rs;
        memset(&rs, 0, sizeof rs);
        rs.struct_size = sizeof rs;
        if (ortmem_region_range_state(s->region, sl->offset, sl->len, &rs) != ORTMEM_OK)
            sl->state = OM_SLOT_QUARANTINED;
        else if (rs.all_mapped)
            sl->state = OM_SLOT_FILLED; /* dropped undone: the bytes are still there */
        else if (rs.unmapped_granules == rs.granules) {
            ortmem_granule_info gi;
            memset(&gi, 0, sizeof gi);
            gi.struct_size = sizeof gi;
            bool quarantined = false;
            for (size_t off = sl->offset; off < sl->offset + sl->len; off += s->granule)
                if (ortmem_region_granule_info(s->region, off, &gi) == ORTMEM_OK &&
                    gi.state == ORTMEM_GRANULE_QUARANTINED)
                    quarantined = true;
            sl->state = quarantined ? OM_SLOT_QUARANTINED : OM_SLOT_EMPTY;
        } else
            sl->state = OM_SLOT_QUARANTINED;
        if (done)
            done(ctx, i, sl->state);
    }
}

ortmem_status om_slots_destroy(om_slots *s)
{
    /* Pending retirements name the region: let them finish first. */
    if (s->retiring) {
        (void)ortmem_authority_drain(s->authority, 1000, NULL);
        om_slots_collect(s, NULL, NULL);
    }
    if (s->retiring)
        return OM_ERR(ORTMEM_E_BUSY, "weight slots: %u evictions still pending after 1 s",
                      s->retiring);
    for (uint32_t i = 0; i < s->count; i++)
        om_slots_drop_reader(s, &s->slot[i]);
    ortmem_status st = ortmem_region_destroy(s->region);
    om_free(s->slot);
    om_free(s);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "weight slots: destroying the region");
    return ORTMEM_OK;
}
