/* Internal view of an authority and its holders, shared by the governance
 * files. Everything here is guarded by the authority's lock unless noted.
 *
 * Capacity: a holder's footprint is max(owned + held_owned, leased); the
 * authority's used bytes are the sum of footprints and never exceed the limit
 * through a hold (adoptions of memory that already exists may). */
#ifndef ORTMEM_SRC_GOVERNANCE_AUTHORITY_H
#define ORTMEM_SRC_GOVERNANCE_AUTHORITY_H

#include <pthread.h>
#include <stdbool.h>
#include <ortmem/governance.h>

#include "core/handle.h"

typedef struct om_retirement om_retirement;

struct ortmem_holder {
    om_handle hdr;
    ortmem_authority *authority;
    char name[64];
    ortmem_role role;
    int priority;
    ortmem_pressure_fn on_pressure;
    void *user;
    bool builtin; /* the pool and quarantine holders */
    uint64_t owned, owned_peak, mapped, requested;
    uint64_t held_owned, held_mapped;
    uint64_t leased;
    uint64_t footprint; /* max(owned + held_owned, leased), kept in step */
    uint64_t retained;  /* account copies held by vmm (regions, arenas, granules) */
    uint64_t grants_open, tickets_waiting, retirements_pending, leases_held;
    unsigned in_pressure; /* its pressure callback is running */
    bool quiesced;        /* its owner is going: no pressure pass picks it */
};

struct ortmem_lease {
    om_handle hdr;
    ortmem_authority *authority;
    ortmem_holder *holder; /* dangling once dropped: the holder may be gone */
    char holder_name[64];  /* for the double-free detail */
    uint64_t bytes;
    bool dropped; /* kept until the authority goes, so a second drop is a double free */
    ortmem_lease *next;
};

struct ortmem_grant {
    om_handle hdr;
    ortmem_holder *holder;
    uint64_t bytes;
};

struct ortmem_authority {
    om_handle hdr;
    pthread_mutex_t lock;
    pthread_cond_t changed; /* capacity freed or a ticket decided */
    ortmem_backend *backend;
    uint64_t id; /* stable lock order across authorities */
    uint64_t limit;
    uint64_t mapped_allowance;
    double aging_per_second;
    uint64_t used;        /* sum of holder footprints */
    uint64_t mapped_used; /* sum of mapped + held_mapped */
    uint64_t owned_total, owned_peak, mapped_total;
    uint64_t refusals, pressure_calls, pressure_reclaimed;
    ortmem_holder **holders;
    size_t holder_count, holder_capacity;
    ortmem_holder *pool_holder;
    ortmem_holder *quarantine_holder;
    ortmem_lease *leases;
    ortmem_ticket *tickets; /* queue, in arrival order */
    uint64_t ticket_seq;
    om_retirement *retirements; /* pending fence-ordered decommits and frees */
    uint64_t retirement_count;
};

/* Pins an authority handle (registry) for a public call. */
ortmem_status om_authority_pin(ortmem_authority *a, const char *what);
void om_authority_unpin(ortmem_authority *a);
/* Pins a holder and returns its authority, both live. */
ortmem_status om_holder_pin(ortmem_holder *h, const char *what);
void om_holder_unpin(ortmem_holder *h);

/* Recomputes h's footprint and the authority totals after h changed. */
void om_holder_restate(ortmem_authority *a, ortmem_holder *h);

/* Would holder h fit owned_bytes more (and mapped_bytes more)? */
bool om_fits_locked(const ortmem_authority *a, const ortmem_holder *h, uint64_t owned_bytes,
                    uint64_t mapped_bytes);

/* Bytes missing for h to fit owned_bytes (or mapped_bytes of allowance). */
uint64_t om_shortfall_locked(const ortmem_authority *a, const ortmem_holder *h,
                             uint64_t owned_bytes, uint64_t mapped_bytes);

/* Takes a hold for h, asking reclaimable holders to reclaim when short (unless
 * pressure is false or the thread is inside a pressure callback). Takes and
 * unlocks the lock itself; refusals are ORTMEM_E_BUDGET with the numbers. */
ortmem_status om_take_hold(ortmem_authority *a, ortmem_holder *h, uint64_t owned_bytes,
                           uint64_t mapped_bytes, bool pressure, const char *what);
/* Caller holds the lock. */
void om_unhold_locked(ortmem_authority *a, ortmem_holder *h, uint64_t owned_bytes,
                      uint64_t mapped_bytes);

/* Asks reclaimable holders (lowest priority first, skipping exclude) to
 * reclaim until want_bytes came back or everyone was asked once. Called
 * without the lock. Returns the bytes the callbacks reported. */
uint64_t om_apply_pressure(ortmem_authority *a, const ortmem_holder *exclude, uint64_t want_bytes);

/* The refusal detail: requested, available, limit, largest holders. */
ortmem_status om_refuse_locked(ortmem_authority *a, const ortmem_holder *h, uint64_t owned_bytes,
                               uint64_t mapped_bytes, const char *what);

/* Capacity was freed: serve waiting tickets and wake waiters. */
void om_capacity_freed_locked(ortmem_authority *a);

/* Tickets (ticket.c). */
void om_tickets_serve_locked(ortmem_authority *a);

/* Grants (grant.c): a grant handle over an already taken hold. */
ortmem_status om_grant_new(ortmem_holder *h, uint64_t bytes, ortmem_grant **out);

/* Whether the calling thread is inside a pressure callback. */
bool om_in_pressure_callback(void);
/* For an owner about to free what h's pressure callback names (its user):
 * no new pressure pass picks h, and a running one has finished when this
 * returns OK. ORTMEM_E_BUSY (nothing changed) when a pass is running and the
 * caller is itself inside a pressure callback (it could be that very pass).
 * om_holder_unquiesce undoes it when the owner stays after all. */
ortmem_status om_holder_quiesce(ortmem_holder *h, const char *what);
void om_holder_unquiesce(ortmem_holder *h);

#endif
