/* ortmem-replay's run, private to run*.c: what the run keeps about each
 * object and holder, and the pieces its files share.
 *
 *   run.c            the run: ops in order, their outcomes counted, the timeline
 *   run_ops.c        one function per operation kind
 *   run_check.c      patterns, overlap and region-model checks, failure records
 *   run_authority.c  the authority and its holders, pressure, ledger captures
 *   run_setup.c      the backends (cpu, fault injection, pool cap) and teardown */
#ifndef ORTMEM_REPLAY_RUN_H
#define ORTMEM_REPLAY_RUN_H

#include "replay.h"

#define NO_OBJECT UINT32_MAX
/* Holder h's arena region in the overlap set: above every object number
 * (trace.c keeps them below UINT32_MAX - 1 - REPLAY_MAX_HOLDERS). */
#define ARENA_OBJECT(h) (UINT32_MAX - 1 - (uint32_t)(h))
#define IS_ARENA_OBJECT(o) ((o) != NO_OBJECT && (o) >= UINT32_MAX - REPLAY_MAX_HOLDERS)
#define ARENA_HOLDER(o) ((uint16_t)(UINT32_MAX - 1 - (o)))

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

/* REFUSED: the authority said no (ORTMEM_E_BUDGET); counted apart from FAILED. */
typedef enum outcome { DONE, FAILED, REFUSED, SKIPPED } outcome;

/* ---- checks and records (run_check.c) ---- */

void pattern_fill(unsigned char *p, size_t len, uint64_t key, uint64_t offset);
uint64_t object_key(const replay_trace *t, uint32_t object);
void finding(runner *rn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void record_failure(runner *rn, uint32_t line, const char *what, ortmem_status status);
void record_op_failure(runner *rn, const replay_op *op, ortmem_status status);
void record_teardown_failure(runner *rn, const char *what, ortmem_status status);
const char *describe(runner *rn, uint32_t object, char *buf, size_t size);
uint64_t interval_insert(runner *rn, interval_set *set, uintptr_t start, uintptr_t end,
                         uint32_t object);
void interval_remove(interval_set *set, uintptr_t start, uint32_t object);
bool granule_readable(const granule_model *g);
void check_granule(runner *rn, uint32_t object, size_t g, const char *when, uint32_t line);
void resync(runner *rn, uint32_t object, size_t g0, size_t g1);
void check_allocation(runner *rn, uint32_t object, const char *when, uint32_t line);
void check_region(runner *rn, uint32_t object, const char *when, uint32_t line);

/* ---- operations (run_ops.c) ---- */

outcome op_alloc(runner *rn, const replay_op *op);
outcome op_free(runner *rn, const replay_op *op);
outcome op_region(runner *rn, const replay_op *op);
outcome op_commit(runner *rn, const replay_op *op);
outcome op_decommit(runner *rn, const replay_op *op);
outcome op_share(runner *rn, const replay_op *op);
outcome op_destroy(runner *rn, const replay_op *op);
holder_run *holder_of(runner *rn, uint32_t object);
void forget_region(runner *rn, uint32_t object);

/* ---- the authority (run_authority.c) ---- */

bool open_authority(runner *rn);
void close_authority(runner *rn, bool record);
void capture_peak_ledger(runner *rn, size_t op_index);
void report_ledger(runner *rn);

/* ---- setup and teardown (run_setup.c) ---- */

bool open_backend(runner *rn);
bool stats_of(runner *rn, ortmem_vmm_stats *stats);
void teardown(runner *rn);

#endif
