/* ortmem governance: one accounting authority per device.
 *
 * An authority holds the budget (a limit on owned, physical bytes, granule
 * rounding included) and a ledger by holder and role. Every region and arena
 * created with a holder's account (ortmem_holder_account) charges the
 * authority before it maps and refunds after it unmaps. Holders choose their
 * victims under pressure; the authority never picks one.
 *
 * Roles: mechanism (backend, region) maps; accounting (authority) charges and
 * refuses; policy (holders) reclaims; ordering (fences, retirement)
 * decides when a free is safe; process (process manager) registers devices.
 *
 * Thread safety: every function is thread-safe. No ortmem lock is held while a
 * pressure callback, a fence query or the log callback runs, so each of them
 * may call back into ortmem. Lock order: docs/memory/GOVERNANCE.md. */
#ifndef ORTMEM_GOVERNANCE_H
#define ORTMEM_GOVERNANCE_H

#include <ortmem/core.h>
#include <ortmem/vmm.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ortmem_authority ortmem_authority;
typedef struct ortmem_holder ortmem_holder;
typedef struct ortmem_lease ortmem_lease;
typedef struct ortmem_grant ortmem_grant;
typedef struct ortmem_ticket ortmem_ticket;
typedef struct ortmem_fence ortmem_fence;

typedef enum ortmem_role {
    ORTMEM_ROLE_WEIGHTS = 0,
    ORTMEM_ROLE_KV,
    ORTMEM_ROLE_WORKSPACE,
    ORTMEM_ROLE_OTHER,
    ORTMEM_ROLE_COUNT
} ortmem_role;

/* "weights", "kv", "workspace", "other"; NULL when out of range. */
ORTMEM_API const char *ortmem_role_name(ortmem_role role);
ORTMEM_API ortmem_status ortmem_role_parse(const char *name, ortmem_role *role);

/* ---- Authority -------------------------------------------------------------*/
typedef struct ortmem_authority_options {
    size_t struct_size;
    uint64_t limit_bytes;            /* owned (physical) bytes; > 0 */
    uint64_t mapped_allowance_bytes; /* mapped bytes (aliases count again); 0 = unchecked */
    double aging_per_second;         /* ticket priority gained per second waited; 0 = 1.0 */
} ortmem_authority_options;

#define ORTMEM_AUTHORITY_OPTIONS_INIT                                                              \
    {                                                                                              \
        sizeof(ortmem_authority_options), 0, 0, 0.0                                                \
    }

/* One authority per backend (device): a second one is ORTMEM_E_STATE. Granules
 * the backend's pool holds are charged to the authority's "pool" holder, which
 * is reclaimable at the lowest priority (pressure trims the pool first). */
ORTMEM_API ortmem_status ortmem_authority_create(ortmem_backend *backend,
                                                 const ortmem_authority_options *options,
                                                 ortmem_authority **out);

/* ORTMEM_E_BUSY (nothing changes) while a holder other than the built-in ones
 * is charged, a grant is open, a ticket waits or a retirement is
 * pending. Registered holders and leases become stale handles. */
ORTMEM_API ortmem_status ortmem_authority_destroy(ortmem_authority *authority);

ORTMEM_API ortmem_backend *ortmem_authority_backend(ortmem_authority *authority);

/* Outcome of a limit change. */
typedef struct ortmem_limit_outcome {
    size_t struct_size;
    uint64_t old_limit_bytes;
    uint64_t new_limit_bytes;
    uint64_t reclaimed_bytes; /* reclaimed by holders under pressure for this change */
    uint64_t charged_bytes;   /* owned + claimed after the change */
    int within_limit;         /* non-zero: charged_bytes <= new_limit_bytes */
} ortmem_limit_outcome;

/* Changes the limit at run time. Lowering is two-phase: holders are asked to
 * reclaim the excess (lowest priority first), then the new limit is applied
 * whether or not it is met yet; until it is, growth is refused. Raising wakes
 * waiting tickets. outcome may be NULL. */
ORTMEM_API ortmem_status ortmem_authority_set_limit(ortmem_authority *authority,
                                                    uint64_t limit_bytes,
                                                    ortmem_limit_outcome *outcome);

/* ---- Holders ---------------------------------------------------------------*/

/* Asked to reclaim about want_bytes; returns what it reclaimed (0 is legal).
 * Called without any ortmem lock held; it may decommit, free or call any other
 * ortmem function (a prepare made from inside a pressure callback does not ask
 * for pressure again: it takes what is available or is refused). */
typedef uint64_t (*ortmem_pressure_fn)(void *user, uint64_t want_bytes);

typedef struct ortmem_holder_options {
    size_t struct_size;
    const char *name; /* copied; "" or NULL = "unnamed" */
    ortmem_role role;
    int priority;                   /* higher is more important; pressure asks the lowest first */
    ortmem_pressure_fn on_pressure; /* NULL: not reclaimable */
    void *user;
} ortmem_holder_options;

#define ORTMEM_HOLDER_OPTIONS_INIT                                                                 \
    {                                                                                              \
        sizeof(ortmem_holder_options), NULL, ORTMEM_ROLE_OTHER, 0, NULL, NULL                      \
    }

ORTMEM_API ortmem_status ortmem_holder_register(ortmem_authority *authority,
                                                const ortmem_holder_options *options,
                                                ortmem_holder **out);

/* Makes a holder reclaimable after registration, for a callback whose user
 * exists only once the holder does (an arena created on the holder's account:
 * ortmem_arena_pressure with the arena). Once only: ORTMEM_E_STATE when the
 * holder has a pressure callback already (from its options or an earlier
 * call); ORTMEM_E_INVALID for a NULL fn. */
ORTMEM_API ortmem_status ortmem_holder_set_pressure(ortmem_holder *holder, ortmem_pressure_fn fn,
                                                    void *user);

/* ORTMEM_E_BUSY (nothing changes) while the holder owns or maps bytes, holds a
 * lease, or has an open grant, a waiting ticket or a pending retirement. */
ORTMEM_API ortmem_status ortmem_holder_unregister(ortmem_holder *holder);

/* The account to pass in ortmem_region_options.account or
 * ortmem_arena_options.account: every commit of that region or arena is then
 * charged to this holder before it maps. */
ORTMEM_API ortmem_status ortmem_holder_account(ortmem_holder *holder, ortmem_account *account);

/* ---- Leases: standing claims -----------------------------------------------
 * A lease claims budget for a holder: while it stands, the holder's
 * footprint is max(owned + held by its grants, leased), so its growth up to
 * the lease never competes with anyone. Dropped exactly once. */
ORTMEM_API ortmem_status ortmem_lease_acquire(ortmem_holder *holder, uint64_t bytes,
                                              ortmem_lease **out);
/* ORTMEM_E_DOUBLE_FREE when dropped twice; ORTMEM_E_HANDLE after the
 * authority was destroyed. */
ORTMEM_API ortmem_status ortmem_lease_drop(ortmem_lease *lease);

/* ---- Growth grants ---------------------------------------------------------
 * prepare takes a hold on the budget: unclaimed budget first, then reclaimable
 * holders (lowest priority first, the requester never) are asked to reclaim.
 * A refusal is ORTMEM_E_BUDGET, changes nothing, and its detail names the
 * requested, available and limit bytes and the largest holders. charge charges
 * what was really used (<= prepared) and unholds the rest; abort rolls
 * the hold back. A grant handle is gone after charge or abort. Grants
 * are for memory the engine maps itself; regions and arenas with an account
 * charge through the same path on their own. */
ORTMEM_API ortmem_status ortmem_grant_prepare(ortmem_holder *holder, uint64_t bytes,
                                              ortmem_grant **out);
ORTMEM_API ortmem_status ortmem_grant_charge(ortmem_grant *grant, uint64_t actual_bytes);
ORTMEM_API ortmem_status ortmem_grant_abort(ortmem_grant *grant);

/* All-or-nothing prepare over several holders, possibly of several
 * authorities: locks are taken in stable authority-id order and everything is
 * unheld again on any refusal. grants[i] answers holders[i]. */
ORTMEM_API ortmem_status ortmem_grant_prepare_many(size_t count, ortmem_holder *const *holders,
                                                   const uint64_t *bytes, ortmem_grant **grants);

/* Returns bytes a holder charged through grants (memory it freed itself). */
ORTMEM_API ortmem_status ortmem_holder_refund(ortmem_holder *holder, uint64_t bytes);

/* ---- Tickets: waiting for capacity -----------------------------------------
 * A request that cannot be satisfied now waits in a queue ordered by effective
 * priority (priority + aging_per_second * seconds waited), then arrival. The
 * capacity is charged to the ticket (as a prepared grant) before its waiter is
 * woken, so nobody can steal it; the head of the queue is served first and a
 * smaller request behind it waits its turn. */
ORTMEM_API ortmem_status ortmem_ticket_submit(ortmem_holder *holder, uint64_t bytes, int priority,
                                              ortmem_ticket **out);
/* Waits up to timeout_ms (negative: forever; 0: poll). ORTMEM_OK with *grant
 * set (the ticket is consumed), ORTMEM_E_TIMEOUT (the ticket still waits),
 * ORTMEM_E_CANCELLED (the ticket is consumed). */
ORTMEM_API ortmem_status ortmem_ticket_wait(ortmem_ticket *ticket, int64_t timeout_ms,
                                            ortmem_grant **grant);
/* Withdraws a waiting ticket; a waiter in ortmem_ticket_wait returns
 * ORTMEM_E_CANCELLED. If the ticket was granted meanwhile, the grant is
 * aborted: exactly one of grant or cancel wins, never both. */
ORTMEM_API ortmem_status ortmem_ticket_cancel(ortmem_ticket *ticket);

/* ---- Fences and retirement -------------------------------------------
 * A fence says when work that still uses memory has finished. A retirement tied
 * to a fence keeps the memory mapped and charged until the fence completes;
 * ortmem_authority_poll and _drain carry it out then. */
typedef int (*ortmem_fence_query_fn)(void *user); /* non-zero: complete */

/* A fence completed by ortmem_fence_signal (the CPU backend's kind). */
ORTMEM_API ortmem_status ortmem_fence_create(ortmem_fence **out);
/* A fence completed when query(user) says so, for engines that track their
 * own streams. query runs without any ortmem lock held. */
ORTMEM_API ortmem_status ortmem_fence_create_query(ortmem_fence_query_fn query, void *user,
                                                   ortmem_fence **out);
/* A fence completed when the work enqueued on stream so far has finished: an
 * event recorded now through the backend (ortmem_backend_event_record). A
 * retirement tied to it waits for that stream only, never for the whole device.
 * The backend must outlive the fence. */
ORTMEM_API ortmem_status ortmem_fence_create_event(ortmem_backend *backend, uint64_t stream,
                                                   ortmem_fence **out);
ORTMEM_API ortmem_status ortmem_fence_signal(ortmem_fence *fence);
/* ORTMEM_OK when complete, ORTMEM_E_BUSY when not yet. */
ORTMEM_API ortmem_status ortmem_fence_query(ortmem_fence *fence);
/* ORTMEM_E_BUSY while retirements still wait on it. */
ORTMEM_API ortmem_status ortmem_fence_destroy(ortmem_fence *fence);

/* Decommits [offset, +len) of a region with an account once fence completes. */
ORTMEM_API ortmem_status ortmem_region_decommit_after(ortmem_region *region, size_t offset,
                                                      size_t len, ortmem_fence *fence);
/* Frees an arena allocation once fence completes. */
ORTMEM_API ortmem_status ortmem_arena_free_after(ortmem_arena *arena, void *ptr,
                                                 ortmem_fence *fence);

typedef struct ortmem_retire_report {
    size_t struct_size;
    uint64_t completed;   /* unmapped and refunded */
    uint64_t quarantined; /* accounting applied, memory retained (see vmm stats) */
    uint64_t failed;      /* nothing changed: the memory is still mapped and charged */
    uint64_t pending;     /* still waiting on their fences */
    uint64_t decommitted_bytes;
} ortmem_retire_report;

/* Carries out the retirements whose fences completed; never blocks. */
ORTMEM_API ortmem_status ortmem_authority_poll(ortmem_authority *authority,
                                               ortmem_retire_report *report);
/* Polls until nothing is pending or timeout_ms passed (ORTMEM_E_TIMEOUT). */
ORTMEM_API ortmem_status ortmem_authority_drain(ortmem_authority *authority, int64_t timeout_ms,
                                                ortmem_retire_report *report);

/* ---- Ledger report ---------------------------------------------------------*/
typedef struct ortmem_holder_report {
    char name[64];
    ortmem_role role;
    int priority;
    uint64_t owned_bytes;
    uint64_t owned_peak_bytes;
    uint64_t mapped_bytes;
    uint64_t requested_bytes; /* content asked for, before granule rounding */
    uint64_t overhead_bytes;  /* owned - requested when owned > requested, else 0 */
    uint64_t held_bytes;      /* open grants and tickets granted but not taken */
    uint64_t leased_bytes;
} ortmem_holder_report;

typedef struct ortmem_authority_report {
    size_t struct_size;
    uint64_t limit_bytes;
    uint64_t mapped_allowance_bytes;
    uint64_t owned_bytes; /* charged to holders, pool included */
    uint64_t owned_peak_bytes;
    uint64_t mapped_bytes;
    uint64_t claimed_bytes;   /* open grants, granted tickets, unused lease capacity */
    uint64_t available_bytes; /* limit - owned - claimed, floored at 0 */
    uint64_t refusals;        /* prepares and commits refused for budget */
    uint64_t pressure_calls;
    uint64_t pressure_reclaimed_bytes;
    uint64_t tickets_waiting;
    uint64_t retirements_pending;
    uint64_t by_role_owned[ORTMEM_ROLE_COUNT];
    uint64_t by_role_mapped[ORTMEM_ROLE_COUNT];
    uint64_t by_role_requested[ORTMEM_ROLE_COUNT];
    size_t holder_count; /* holders registered (built-in ones included) */
} ortmem_authority_report;

/* One holder's line of the ledger. */
ORTMEM_API ortmem_status ortmem_holder_report_get(ortmem_holder *holder,
                                                  ortmem_holder_report *report);

/* Fills report; holders (may be NULL) receives up to holder_capacity holders,
 * largest owned first. */
ORTMEM_API ortmem_status ortmem_authority_report_get(ortmem_authority *authority,
                                                     ortmem_authority_report *report,
                                                     ortmem_holder_report *holders,
                                                     size_t holder_capacity);

typedef enum ortmem_report_format {
    ORTMEM_REPORT_TABLE = 0,
    ORTMEM_REPORT_JSON
} ortmem_report_format;

/* Writes the ledger as a text table or a JSON object into buffer (always
 * NUL-terminated when capacity > 0). *needed receives the full length; a short
 * buffer is ORTMEM_E_RANGE with the text cut. */
ORTMEM_API ortmem_status ortmem_authority_format(ortmem_authority *authority,
                                                 ortmem_report_format format, char *buffer,
                                                 size_t capacity, size_t *needed);

/* ---- Process manager -------------------------------------------------------
 * A process-wide registry of devices, each a backend with its authority,
 * created on first use and torn down explicitly. A device id is a value with
 * a generation: an id kept across a teardown is detected as stale. */
typedef enum ortmem_device_kind { ORTMEM_DEVICE_CPU = 0, ORTMEM_DEVICE_CUDA } ortmem_device_kind;

typedef struct ortmem_device_id {
    uint32_t slot;
    uint32_t generation;
} ortmem_device_id;

typedef struct ortmem_device_options {
    size_t struct_size;
    uint64_t limit_bytes; /* the authority's limit; 0 = 16 GiB (CPU and CUDA devices alike) */
    size_t granule;       /* 0 = the backend's default */
} ortmem_device_options;

#define ORTMEM_DEVICE_OPTIONS_INIT                                                                 \
    {                                                                                              \
        sizeof(ortmem_device_options), 0, 0                                                        \
    }

/* Returns the device (kind, ordinal), creating its backend and authority on
 * first use with options (ignored afterwards; NULL = defaults). A CUDA device
 * without a driver or GPU is ORTMEM_E_UNAVAILABLE, with the reason. */
ORTMEM_API ortmem_status ortmem_device_get(ortmem_device_kind kind, int ordinal,
                                           const ortmem_device_options *options,
                                           ortmem_device_id *id);
/* ORTMEM_E_HANDLE for a stale or unknown id. */
ORTMEM_API ortmem_status ortmem_device_backend(ortmem_device_id id, ortmem_backend **backend);
ORTMEM_API ortmem_status ortmem_device_authority(ortmem_device_id id, ortmem_authority **authority);
/* Destroys every device's authority and backend; ids issued before are stale.
 * A device still in use (ORTMEM_E_BUSY) stays registered and usable, while the
 * idle ones are gone. While it runs, ortmem_device_get of a device not yet
 * registered is ORTMEM_E_BUSY. */
ORTMEM_API ortmem_status ortmem_process_teardown(void);

#ifdef __cplusplus
}
#endif

#endif /* ORTMEM_GOVERNANCE_H */
