/* ortmem-replay: replays an allocation trace against the public API.
 *
 * Three stages: trace.c parses and validates the whole trace (nothing runs if
 * a line is bad), run.c and its run_*.c (run.h) execute it while checking
 * every byte they can, report.c prints the result as a table or as one JSON
 * object. */
#ifndef ORTMEM_REPLAY_H
#define ORTMEM_REPLAY_H

#include <ortmem/ortmem.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- the parsed trace ---- */

typedef enum replay_kind {
    REPLAY_ALLOC = 0,
    REPLAY_FREE,
    REPLAY_REGION,
    REPLAY_COMMIT,
    REPLAY_DECOMMIT,
    REPLAY_SHARE,
    REPLAY_DESTROY,
    REPLAY_KIND_COUNT
} replay_kind;

/* "alloc", "free", ... as written in a trace. */
const char *replay_kind_name(replay_kind kind);

/* One line of work. Objects are numbered per creation (an ID reused after its
 * free or destroy names a new object), so the run never looks names up. */
typedef struct replay_op {
    uint8_t kind;    /* replay_kind */
    uint8_t access;  /* share: ortmem_access of the alias */
    uint32_t line;   /* 1-based line in the trace file */
    uint32_t object; /* the allocation or region acted on (share: destination) */
    uint32_t source; /* share: the source region */
    /* alloc: size, align; region: size; commit, decommit: offset, length;
     * share: destination offset, source offset, length. */
    uint64_t arg[3];
} replay_op;

typedef struct replay_object {
    size_t name;     /* offset of the NUL-terminated ID in replay_trace.names */
    uint32_t line;   /* the line that created it */
    uint16_t holder; /* index in replay_trace.holders: who is charged for it */
    bool is_region;
} replay_object;

/* At most this many holders, the default one included. */
#define REPLAY_MAX_HOLDERS 1024
/* ortmem copies a holder's name into 64 bytes. */
#define REPLAY_HOLDER_NAME_MAX 63
/* The holder that lines without a holder annotation charge. */
#define REPLAY_DEFAULT_HOLDER "trace"

/* A holder: declared by a `holder NAME ROLE [PRIORITY] [reclaimable]` line,
 * or the default one ("trace", role other) that untagged lines charge. */
typedef struct replay_holder {
    char name[REPLAY_HOLDER_NAME_MAX + 1];
    ortmem_role role;
    int priority;
    bool reclaimable; /* the replay answers pressure by decommitting its regions */
    uint32_t line;    /* the declaring line; for the default holder, the first line using it */
    bool declared;    /* false: the default holder, created by an untagged line */
    uint64_t regions, allocations; /* objects charged to it in the trace */
    /* For sizing its arena, as replay_trace's totals below. */
    uint64_t alloc_peak_bytes;
    uint64_t alloc_largest_bytes;
} replay_holder;

typedef struct replay_trace {
    replay_op *ops;
    size_t op_count;
    replay_object *objects;
    size_t object_count;
    char *names; /* every distinct ID once, NUL-terminated */
    size_t names_len;
    size_t kind_counts[REPLAY_KIND_COUNT];
    replay_holder *holders; /* in declaration order; the default one where first used */
    size_t holder_count;
    /* For sizing the arena: peak of live allocation bytes (each rounded up to
     * its alignment) and the largest single request plus its alignment. */
    uint64_t alloc_peak_bytes;
    uint64_t alloc_largest_bytes;
} replay_trace;

/* Reads and validates a whole trace. On failure writes one message per bad
 * line (at most max_errors, naming path and line) to err and returns false;
 * *trace is then empty. */
bool replay_trace_load(const char *path, FILE *err, size_t max_errors, replay_trace *trace);
void replay_trace_free(replay_trace *trace);

const char *replay_object_name(const replay_trace *trace, uint32_t object);

/* Writes the op as its trace line would read ("commit r3 0 2097152"). */
void replay_op_format(const replay_trace *trace, const replay_op *op, char *buf, size_t size);

/* ---- running it ---- */

typedef struct replay_config {
    size_t granule;  /* CPU backend granule; 0 = the backend's default */
    size_t pool_cap; /* ortmem_pool_set_cap */
    bool fault;      /* wrap the backend with the fault injector */
    ortmem_fault_options fault_options;
    size_t arena_capacity; /* 0 = derived from the trace */
    size_t arena_cache;    /* ortmem_arena_options.cache_bytes */
    bool budget_set;       /* --budget given */
    uint64_t budget;       /* the authority's limit on owned bytes */
    bool progress;         /* a line on stderr every 10% */
    FILE *timeline;        /* CSV rows of the ledger as the replay goes; NULL = none */
} replay_config;

/* A failed operation, as the report lists it. */
typedef struct replay_failure {
    uint32_t line;  /* 0 for teardown at the end of the replay */
    char what[160]; /* the op as written, or what teardown was doing */
    ortmem_status status;
    char detail[512]; /* ortmem_last_error() right after the failure */
} replay_failure;

/* The first failed ops are kept, and teardown's failures after them. */
#define REPLAY_FAILURES_KEPT 100
#define REPLAY_TEARDOWN_FAILURES_KEPT 20

/* The authority's limit without --budget: holders are still registered, so the
 * ledger by holder is always there, but nothing is ever refused. */
#define REPLAY_UNLIMITED_BYTES (UINT64_MAX / 2)

/* What the replay did for one holder. */
typedef struct replay_holder_result {
    size_t arena_capacity; /* VA of its arena; 0 when it allocates nothing */
    bool arena_created;
    /* Pressure (reclaimable holders): callbacks answered, granules the replay
     * decommitted for them, and owned bytes that came back. */
    uint64_t pressure_calls;
    uint64_t pressure_regions; /* regions decommitted from (once per call that did) */
    uint64_t pressure_decommitted_bytes;
    uint64_t pressure_reclaimed_bytes;
} replay_holder_result;

typedef struct replay_result {
    char backend_name[64];
    size_t granule;
    size_t arena_capacity; /* VA of every arena together */
    size_t arena_count;    /* arenas the trace needs: one per holder that allocates */
    uint64_t executed[REPLAY_KIND_COUNT];
    uint64_t failed[REPLAY_KIND_COUNT];  /* failed for a reason other than the budget */
    uint64_t refused[REPLAY_KIND_COUNT]; /* ORTMEM_E_BUDGET */
    uint64_t skipped[REPLAY_KIND_COUNT]; /* depended on a failed or refused op */
    uint64_t failed_ops, skipped_ops, teardown_failures;
    uint64_t budget_refusals;      /* ops refused with ORTMEM_E_BUDGET (not in failed_ops) */
    uint64_t pressure_failures;    /* decommits of a pressure callback that failed */
    replay_holder_result *holders; /* one per replay_trace.holders */
    /* The authority at trace end (before teardown): its report, its ledger as
     * ortmem_authority_format's table and JSON (malloc'd; NULL when it could
     * not be formatted). */
    bool authority_reported;
    ortmem_authority_report authority;
    char *ledger_table, *ledger_json;
    /* The same, captured when the authority's owned bytes last reached a new
     * peak: the steady state a serving trace ends long after. */
    uint64_t ledger_peak_owned;
    size_t ledger_peak_op; /* 1-based op index */
    char *peak_ledger_table, *peak_ledger_json;
    /* --budget (copied from the config): the authority's peak owned and the
     * backend's peak owned both stayed at or below it. */
    bool budget_set;
    uint64_t budget_bytes;
    bool within_budget;
    /* Correctness checks; each must stay 0. */
    uint64_t overlaps;    /* live allocations (or regions) whose bytes overlapped */
    uint64_t corruptions; /* pattern checks that failed */
    uint64_t misplaced;   /* allocations misaligned or outside the arena */
    /* What was checked. */
    uint64_t checked_allocations, checked_granules, checked_shares;
    uint64_t checked_bytes;
    /* The ledger of the backend regions and the arena ran on. */
    ortmem_vmm_stats at_trace_end; /* after the last op, before teardown */
    ortmem_vmm_stats final;        /* after teardown and an emptied pool */
    uint64_t live_allocations_at_end, live_regions_at_end;
    bool ledger_balanced;     /* final owned and mapped equal what is quarantined */
    replay_failure *failures; /* op failures (refusals included) first, then teardown's (line 0) */
    size_t failures_kept;
    double parse_seconds, run_seconds, teardown_seconds;
    /* Memory over time (--timeline, --plot): a row after every timeline_every
     * ops and after the last; the paths are set by main once written. */
    uint64_t timeline_rows;
    size_t timeline_every;
    bool timeline_failed; /* a stats call or a write failed: the CSV is incomplete */
    const char *timeline_path, *plot_path;
} replay_result;

/* Runs the trace. Returns false (with a message on err) only when the replay
 * could not start, e.g. the backend could not be created. */
bool replay_run(const replay_trace *trace, const replay_config *config, replay_result *result,
                FILE *err);
void replay_result_free(replay_result *result);

/* True when the replay proved nothing wrong: exit status 0. With a budget,
 * the budget must also have held. */
bool replay_result_clean(const replay_result *result);

/* ---- memory over time (timeline.c) ---- */

/* Rows a timeline holds at most: a K that keeps it under this is chosen. */
#define REPLAY_TIMELINE_MAX_ROWS 20000

/* K: a row after every K ops, ceil(op_count / REPLAY_TIMELINE_MAX_ROWS), at least 1. */
size_t replay_timeline_every(size_t op_count);
/* The CSV's header row. */
void replay_timeline_header(FILE *timeline);
/* One row: the op's 1-based index, its line and kind, and the ledger after it.
 * arena may be NULL (not created yet): its columns are then 0. */
void replay_timeline_row(FILE *timeline, size_t index, const replay_op *op,
                         const ortmem_vmm_stats *vmm, const ortmem_arena_stats *arena);

/* Draws the timeline (read from its start) as an SVG into svg_fd with gnuplot;
 * title names the trace. Returns false with a message on err. */
bool replay_plot_draw(FILE *timeline, int svg_fd, const char *title, FILE *err);

/* ---- reporting ---- */

void replay_report_text(FILE *out, const char *trace_path, const replay_trace *trace,
                        const replay_config *config, const replay_result *result);
void replay_report_json(FILE *out, const char *trace_path, const replay_trace *trace,
                        const replay_config *config, const replay_result *result);

#endif
