/* Stable-VA slots: one region with a granule-aligned slot per tensor (and
 * the ring's slots after them); the VA is reserved once, page-in commits a
 * slot's extents and copies into it, eviction decommits after a fence. */
#ifndef ORTMEM_OFFLOAD_SLOTS_H
#define ORTMEM_OFFLOAD_SLOTS_H

#include <ortmem/offload.h>

#include <stdbool.h>

typedef struct om_slots om_slots;

typedef enum om_slot_state {
    OM_SLOT_EMPTY = 0,   /* nothing mapped */
    OM_SLOT_FILLED,      /* mapped, the bytes landed */
    OM_SLOT_RETIRING,    /* a fence-ordered decommit is pending */
    OM_SLOT_QUARANTINED, /* a decommit quarantined granules: never used again */
} om_slot_state;

/* slots = tensor slots then ring slots; bytes[i] > 0 for each (content bytes:
 * each slot is rounded up to the granule). account: the weights holder's. */
ortmem_status om_slots_create(ortmem_authority *authority, const ortmem_account *account,
                              const uint64_t *bytes, uint32_t slots, om_slots **out);
/* Decommits what is mapped (waiting for pending retirements first) and
 * unreserves. ORTMEM_E_QUARANTINED when granules were quarantined. */
ortmem_status om_slots_destroy(om_slots *s);

void *om_slots_ptr(const om_slots *s, uint32_t slot);
/* The region every slot lies in, and slot's offset in it. */
ortmem_region *om_slots_region(const om_slots *s, uint32_t slot, size_t *offset);
uint64_t om_slots_bytes(const om_slots *s, uint32_t slot); /* granule-rounded */
om_slot_state om_slots_state(const om_slots *s, uint32_t slot);
size_t om_slots_granule(const om_slots *s);

/* Commits an EMPTY slot (exact extents) and copies len bytes from host on
 * copy_stream, then waits for the copy's event (*stalled: it was pending).
 * On failure the slot is EMPTY again (or QUARANTINED when undoing the commit
 * quarantined granules). */
ortmem_status om_slots_fill(om_slots *s, uint32_t slot, const void *host, uint64_t len,
                            uint64_t copy_stream, bool *stalled);
/* Records an event on compute_stream after the work that reads the slot (its
 * last reader released it); the next refill waits for it. Never fails: when
 * the record fails, the refill records one on that stream itself (later, so
 * it still comes after the readers). */
void om_slots_readers_done(om_slots *s, uint32_t slot, uint64_t compute_stream);
/* Copies into a FILLED slot again (ring slots), once the event of its last
 * readers (om_slots_readers_done) has completed (*stalled: it or the copy was
 * pending). */
ortmem_status om_slots_refill(om_slots *s, uint32_t slot, const void *host, uint64_t len,
                              uint64_t copy_stream, bool *stalled);
/* FILLED -> RETIRING: a decommit once the work enqueued on compute_stream so
 * far has finished, through the authority's retire queue. Nothing changes on
 * failure. */
ortmem_status om_slots_retire(om_slots *s, uint32_t slot, uint64_t compute_stream);
/* Polls the retire queue and moves finished RETIRING slots on (EMPTY, or
 * QUARANTINED, or FILLED again when the decommit was dropped undone). Calls
 * done(ctx, slot, state) for each slot that left RETIRING. */
void om_slots_collect(om_slots *s, void (*done)(void *ctx, uint32_t slot, om_slot_state state),
                      void *ctx);
/* Slots RETIRING now. */
uint32_t om_slots_retiring(const om_slots *s);
/* Nanoseconds spent waiting for copies to land and for ring slots' last
 * readers, since creation. */
uint64_t om_slots_stall_ns(const om_slots *s);

#endif
