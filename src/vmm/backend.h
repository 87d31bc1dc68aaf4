/* Internal view of a backend handle: the vtable, its ledger, its pool and its
 * quarantine. Calls into the vtable go through om_backend_* so every call is
 * counted and every failure carries the backend's name. */
#ifndef ORTMEM_SRC_VMM_BACKEND_H
#define ORTMEM_SRC_VMM_BACKEND_H

#include <pthread.h>
#include <stdbool.h>
#include <ortmem/vmm.h>

#include "core/counter.h"
#include "core/handle.h"
#include "core/hashset.h"
#include "vmm/account.h"

typedef struct om_ledger {
    om_counter owned, owned_peak, mapped, mapped_peak;
    om_counter owned_granules, mapped_granules, reserved;
    om_counter quarantined, quarantined_mapped, quarantined_granules, leaked_va;
    om_counter pool_hits, pool_misses;
    om_counter owned_extents, mapped_extents, quarantined_extents;
    om_counter calls[ORTMEM_OP_COUNT];
    om_counter failures[ORTMEM_OP_COUNT];
    om_counter saturations;
} om_ledger;

#define OM_PHYS_EXPORTABLE 0x1u
#define OM_PHYS_IMPORTED 0x2u

/* One physical extent: one backend handle of granules granules (k >= 1),
 * size = k * granule, always mapped whole. mappers counts the region mappings
 * of the whole extent (one per (region, extent) mapping, not per slot); owner
 * is the account its owned bytes are charged to (copied: it outlives regions). */
typedef struct om_phys {
    uint64_t handle;
    size_t size;
    uint32_t granules;
    _Atomic unsigned mappers;
    unsigned flags;
    bool quarantined; /* quarantined: never released nor reused */
    om_account owner;
} om_phys;

/* Pooled extents, oldest first. Extents are kept by size: class c holds
 * extents of exactly 2^c granules, up to max_class; a take serves only its
 * own class (a handle is never split nor composed), trim goes oldest first
 * across classes. */
typedef struct om_pool {
    om_phys **items; /* the pooled ones are items[head, count), oldest first */
    size_t head, count, capacity_items;
    size_t cap_bytes;
    size_t bytes;
    unsigned max_class; /* log2 of the largest pooled extent's granules */
    uint64_t class_count[ORTMEM_POOL_CLASSES_MAX];
    uint64_t hits[ORTMEM_POOL_CLASSES_MAX], misses[ORTMEM_POOL_CLASSES_MAX];
    uint64_t unpoolable_releases; /* extents of no class (size), released instead */
} om_pool;

/* The events a backend handed out and nobody destroyed yet (backend.c), so
 * that a foreign or destroyed event never reaches the driver. */
typedef struct om_event_set {
    om_hashset live;
    pthread_mutex_t lock;
} om_event_set;

struct ortmem_backend {
    om_handle hdr;
    ortmem_backend_ops ops;
    void *self;
    size_t granule_min;
    size_t granule;
    ortmem_backend *inner; /* wrapped backend kept alive (fault injection) */
    pthread_mutex_t lock;  /* users, pool, quarantine */
    uint64_t users;        /* regions, arenas and wrappers using this backend */
    om_pool pool;
    om_phys **quarantine;
    size_t quarantine_count, quarantine_capacity;
    om_account pool_account;       /* charged for pooled granules */
    om_account quarantine_account; /* charged for quarantined granules and mappings */
    om_ledger ledger;
    om_event_set events;
};

/* Pins a backend handle (see core/handle.h). */
ortmem_status om_backend_pin(ortmem_backend *b, const char *what);
void om_backend_unpin(ortmem_backend *b);
/* Registers one more user (region, arena, wrapper); the backend stays alive. */
void om_backend_use(ortmem_backend *b);
void om_backend_unuse(ortmem_backend *b);
/* How many users b has now (a snapshot taken under b's lock, b pinned for the
 * read), for a caller deciding whether b can go; what names the call. */
ortmem_status om_backend_user_count(ortmem_backend *b, const char *what, uint64_t *users);

/* Counted vtable calls. */
/* Counts one call of op and its failure; a failure is wrapped with the backend and op names. */
ortmem_status om_backend_counted(ortmem_backend *b, ortmem_backend_op op, ortmem_status st);
ortmem_status om_backend_reserve(ortmem_backend *b, size_t size, size_t align, uintptr_t *va);
ortmem_status om_backend_unreserve(ortmem_backend *b, uintptr_t va, size_t size);
ortmem_status om_backend_create_granule(ortmem_backend *b, size_t size, unsigned flags,
                                        uint64_t *handle);
ortmem_status om_backend_release_granule(ortmem_backend *b, uint64_t handle);
ortmem_status om_backend_map(ortmem_backend *b, uintptr_t va, size_t size, uint64_t handle,
                             size_t handle_offset);
ortmem_status om_backend_unmap(ortmem_backend *b, uintptr_t va, size_t size);
ortmem_status om_backend_set_access(ortmem_backend *b, uintptr_t va, size_t size,
                                    ortmem_access access);
ortmem_status om_backend_export(ortmem_backend *b, uint64_t handle, int *fd);
ortmem_status om_backend_import(ortmem_backend *b, int fd, size_t size, uint64_t *handle);
ortmem_status om_backend_copy(ortmem_backend *b, uintptr_t dst, uintptr_t src, size_t size);
bool om_backend_can_copy(const ortmem_backend *b);
/* Stream-ordered slots; ORTMEM_E_UNSUPPORTED (not counted) when missing.
 * Events are tracked: query and destroy of a value not live here is
 * ORTMEM_E_NOT_FOUND; a pending query is ORTMEM_E_BUSY (counted, no failure). */
ortmem_status om_backend_copy_async(ortmem_backend *b, uintptr_t dst, uintptr_t src, size_t size,
                                    uint64_t stream);
ortmem_status om_backend_memset_async(ortmem_backend *b, uintptr_t dst, int value, size_t size,
                                      uint64_t stream);
ortmem_status om_backend_event_record(ortmem_backend *b, uint64_t stream, uint64_t *event);
ortmem_status om_backend_event_query(ortmem_backend *b, uint64_t event);
ortmem_status om_backend_event_destroy(ortmem_backend *b, uint64_t event);
/* All three event slots present. */
bool om_backend_has_events(const ortmem_backend *b);

/* Ledger movements (ledger.c): owned per extent (bytes of one extent),
 * mapped per mapping (bytes of extents whole extents). */
void om_ledger_owned_add(ortmem_backend *b, size_t bytes);
void om_ledger_owned_sub(ortmem_backend *b, size_t bytes);
void om_ledger_mapped_add(ortmem_backend *b, size_t bytes, size_t extents);
void om_ledger_mapped_sub(ortmem_backend *b, size_t bytes, size_t extents);
void om_ledger_count(om_counter *counter, uint64_t n, ortmem_backend *b);

/* Physical extents (physical.c). */
/* om_phys_drop / om_phys_discard flags: release instead of pooling. */
#define OM_DROP_NO_POOL 0x1u
/* A pooled extent of granules granules for a new mapping, its charge moved
 * from the pool to owner; NULL when the pool has none of that size or flags
 * make it unpoolable. */
om_phys *om_phys_take_pooled(ortmem_backend *b, unsigned flags, const om_account *owner,
                             uint32_t granules);
/* Creates an extent of granules granules and charges owner for it (out of
 * owner's hold). */
ortmem_status om_phys_create(ortmem_backend *b, unsigned flags, const om_account *owner,
                             uint32_t granules, om_phys **out);
/* A granule imported from fd, charged to owner. */
ortmem_status om_phys_import(ortmem_backend *b, int fd, const om_account *owner, om_phys **out);
/* Drops one mapper; the last one returns the extent to the pool (unless
 * OM_DROP_NO_POOL) or releases it. A failed release quarantines it and
 * returns ORTMEM_E_QUARANTINED. */
ortmem_status om_phys_drop(ortmem_backend *b, om_phys *p, unsigned drop_flags);
/* Gives back an extent that was acquired but never mapped. */
ortmem_status om_phys_discard(ortmem_backend *b, om_phys *p, unsigned drop_flags);
/* Moves the granule's owner copy (retaining the new account first). */
void om_phys_set_owner(om_phys *p, const om_account *owner);
/* Quarantines a granule: it stays owned and is reported, never reused; its charge
 * moves to the quarantine account. */
void om_phys_quarantine(ortmem_backend *b, om_phys *p);
/* A mapping that could not be unmapped: its mapped charge moves from the
 * mapping region's account to the quarantine account. */
void om_quarantine_mapping(ortmem_backend *b, const om_account *from, size_t bytes);
/* Releases one granule to the backend, or quarantines it on failure. */
ortmem_status om_phys_release(ortmem_backend *b, om_phys *p);

/* Pool (pool.c); the caller holds b->lock. */
/* The newest pooled extent of exactly granules granules, or NULL (a miss of
 * its class is counted). */
om_phys *om_pool_take_locked(ortmem_backend *b, uint32_t granules);
/* Counts a miss of granules' class (a take that was not tried). */
void om_pool_count_miss_locked(ortmem_backend *b, uint32_t granules);
bool om_pool_put_locked(ortmem_backend *b, om_phys *p);
/* Sets the pool defaults at backend creation. */
void om_pool_init(ortmem_backend *b);
void om_pool_teardown(ortmem_backend *b);

#endif
