/* Host-allocation failure sweep: every scripted workload below runs once
 * unarmed to count its host allocations N, then for every k in 1..N twice
 * more, with allocation k failed once and with allocation k and every later
 * one failed (ortmem_alloc_fault). Each call is checked as it returns: it
 * succeeded, or it failed with ORTMEM_E_NOMEM (or a status the workload names
 * for that call) and a detail, while the ledger (backend stats, authority and
 * holder reports, region mapping epochs, arena and KV stats, sequence
 * bindings, the capture gate) and every byte pattern written so far are as
 * they were before the call. After a single failure the call is retried and
 * the workload runs to its end, which must reach the same bytes as the
 * unarmed run; after a persistent failure the workload stops. Either way the
 * tear-down, disarmed, must succeed (the ASan build checks for leaks). The
 * snapshots themselves run disarmed and are not counted. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.h"

#define G ((size_t)TEST_GRANULE)
#define SLOTS 6
#define PATTERNS 16

/* ---- the objects a workload holds, by slot ---- */

typedef struct pattern {
    volatile void *ptr;
    size_t len;
    uint64_t seed;
} pattern;

typedef struct env {
    ortmem_backend *backend[SLOTS]; /* destroyed from the last slot down */
    ortmem_authority *authority[SLOTS];
    ortmem_holder *holder[SLOTS];
    ortmem_region *region[SLOTS];
    ortmem_arena *arena[SLOTS];
    ortmem_lease *lease[SLOTS];
    ortmem_grant *grant[SLOTS];
    ortmem_ticket *ticket[SLOTS];
    ortmem_fence *fence[SLOTS];
    ortmem_kv_cache *cache[SLOTS];
    ortmem_kv_seq *seq[SLOTS];
    ortmem_graph_signature *signature[SLOTS];
    uint64_t event[SLOTS]; /* events of backend[0]; 0 = none */
    int fd[SLOTS];         /* -1 = none */
    int device_used;       /* the process manager holds devices */
    int capturing;         /* a capture is active */
    pattern data[PATTERNS];
    int done; /* the workload reached its end */
} env;

/* What is compared before and after a failed call. */
typedef struct ledger {
    ortmem_status backend_st[SLOTS];
    ortmem_vmm_stats backend[SLOTS];
    ortmem_status authority_st[SLOTS];
    ortmem_authority_report authority[SLOTS];
    ortmem_status holder_st[SLOTS];
    ortmem_holder_report holder[SLOTS];
    ortmem_status region_st[SLOTS];
    ortmem_range_state region[SLOTS];
    void *region_base[SLOTS];
    ortmem_status arena_st[SLOTS];
    ortmem_arena_stats arena[SLOTS];
    ortmem_status cache_st[SLOTS];
    ortmem_kv_stats cache[SLOTS];
    ortmem_status seq_st[SLOTS];
    uint64_t seq_length[SLOTS];
    ortmem_kv_binding seq_binding[SLOTS];
    ortmem_status fence_st[SLOTS];
    ortmem_capture_stats gate;
} ledger;

typedef struct sweep {
    const char *workload;
    uint64_t fail_at; /* 0: unarmed */
    int persistent;
    uint64_t calls;    /* allocations counted while the workload ran */
    uint64_t injected; /* of those, failed */
    uint64_t failed_calls;
    char detail[512]; /* of the last failed call */
    ledger before, after;
} sweep;

typedef void (*workload_fn)(sweep *w, env *e);

/* ---- arming around the snapshots ---- */

static void sweep_pause(sweep *w)
{
    uint64_t calls = 0, failed = 0;
    ortmem_alloc_counts(&calls, &failed);
    ortmem_alloc_fault(0, 0);
    w->calls += calls;
    w->injected += failed;
}

static void sweep_resume(sweep *w)
{
    if (!w->fail_at)
        ortmem_alloc_fault(0, 0);
    else if (w->calls < w->fail_at)
        ortmem_alloc_fault(w->fail_at - w->calls, w->persistent);
    else
        ortmem_alloc_fault(w->persistent ? 1 : 0, w->persistent);
}

/* ---- snapshots ---- */

static void snapshot(const env *e, ledger *l)
{
    memset(l, 0, sizeof *l);
    for (int i = 0; i < SLOTS; i++) {
        if (e->backend[i]) {
            l->backend[i].struct_size = sizeof l->backend[i];
            l->backend_st[i] = ortmem_backend_stats(e->backend[i], &l->backend[i]);
        }
        if (e->authority[i]) {
            l->authority[i].struct_size = sizeof l->authority[i];
            l->authority_st[i] =
                ortmem_authority_report_get(e->authority[i], &l->authority[i], NULL, 0);
        }
        if (e->holder[i])
            l->holder_st[i] = ortmem_holder_report_get(e->holder[i], &l->holder[i]);
        if (e->region[i]) {
            l->region[i].struct_size = sizeof l->region[i];
            l->region_st[i] = ortmem_region_range_state(
                e->region[i], 0, ortmem_region_size(e->region[i]), &l->region[i]);
            l->region_base[i] = ortmem_region_base(e->region[i]);
        }
        if (e->arena[i]) {
            l->arena[i].struct_size = sizeof l->arena[i];
            l->arena_st[i] = ortmem_arena_stats_get(e->arena[i], &l->arena[i]);
        }
        if (e->cache[i]) {
            l->cache[i].struct_size = sizeof l->cache[i];
            l->cache_st[i] = ortmem_kv_cache_stats(e->cache[i], &l->cache[i]);
        }
        if (e->seq[i]) {
            l->seq_st[i] = ortmem_kv_seq_length(e->seq[i], &l->seq_length[i]);
            l->seq_binding[i].struct_size = sizeof l->seq_binding[i];
            if (l->seq_st[i] == ORTMEM_OK)
                l->seq_st[i] = ortmem_kv_seq_binding(e->seq[i], 0, 0, &l->seq_binding[i]);
        }
        if (e->fence[i])
            l->fence_st[i] = ortmem_fence_query(e->fence[i]);
    }
    l->gate.struct_size = sizeof l->gate;
    OK(ortmem_capture_stats_get(&l->gate));
}

#define SAME(field)                                                                                \
    cr_assert_eq(a->field, b->field,                                                               \
                 "%s (fail_at %llu%s): '%s' failed (line %d) and changed " #field                  \
                 ": %llu -> %llu (%s)",                                                            \
                 w->workload, (unsigned long long)w->fail_at, w->persistent ? " on" : "", call,    \
                 line, (unsigned long long)a->field, (unsigned long long)b->field, w->detail)

/* The bytes a failed call must not change; counters of calls made (backend
 * calls, refusals, peaks, failed allocs) may move. */
static void compare_ledgers(const sweep *w, const char *call, int line)
{
    const ledger *a = &w->before, *b = &w->after;
    for (int i = 0; i < SLOTS; i++) {
        SAME(backend_st[i]);
        SAME(backend[i].owned_bytes);
        SAME(backend[i].mapped_bytes);
        SAME(backend[i].owned_granules);
        SAME(backend[i].mapped_granules);
        SAME(backend[i].reserved_va_bytes);
        SAME(backend[i].quarantined_bytes);
        SAME(backend[i].quarantined_mapped_bytes);
        SAME(backend[i].quarantined_granules);
        SAME(backend[i].leaked_va_bytes);
        SAME(backend[i].pool_bytes);
        SAME(backend[i].pool_cap_bytes);
        SAME(authority_st[i]);
        SAME(authority[i].limit_bytes);
        SAME(authority[i].owned_bytes);
        SAME(authority[i].mapped_bytes);
        SAME(authority[i].claimed_bytes);
        SAME(authority[i].available_bytes);
        SAME(authority[i].tickets_waiting);
        SAME(authority[i].retirements_pending);
        SAME(authority[i].holder_count);
        for (int r = 0; r < ORTMEM_ROLE_COUNT; r++) {
            SAME(authority[i].by_role_owned[r]);
            SAME(authority[i].by_role_mapped[r]);
            SAME(authority[i].by_role_requested[r]);
        }
        SAME(holder_st[i]);
        SAME(holder[i].owned_bytes);
        SAME(holder[i].mapped_bytes);
        SAME(holder[i].requested_bytes);
        SAME(holder[i].held_bytes);
        SAME(holder[i].leased_bytes);
        SAME(region_st[i]);
        SAME(region[i].region_id);
        SAME(region[i].granules);
        SAME(region[i].unmapped_granules);
        SAME(region[i].epoch_sum);
        SAME(region_base[i]);
        SAME(arena_st[i]);
        SAME(arena[i].allocated_bytes);
        SAME(arena[i].live_allocations);
        SAME(arena[i].committed_bytes);
        SAME(arena[i].cached_bytes);
        SAME(arena[i].quarantined_bytes);
        SAME(cache_st[i]);
        SAME(cache[i].sequences);
        SAME(cache[i].live_tokens);
        SAME(cache[i].live_bytes);
        SAME(cache[i].committed_bytes);
        SAME(cache[i].mapped_bytes);
        SAME(cache[i].reserved_va_bytes);
        SAME(cache[i].committed_granules);
        SAME(cache[i].shared_granules);
        SAME(cache[i].prefix_entries);
        SAME(cache[i].zero_tail_mapped_bytes);
        SAME(seq_st[i]);
        SAME(seq_length[i]);
        SAME(seq_binding[i].base);
        SAME(seq_binding[i].capacity);
        SAME(seq_binding[i].generation);
        SAME(fence_st[i]);
    }
    SAME(gate.capture_active);
    SAME(gate.deferred_pending);
    SAME(gate.shared_active);
}

static void check_patterns(const sweep *w, const env *e, const char *call, int line)
{
    for (int i = 0; i < PATTERNS; i++) {
        const pattern *p = &e->data[i];
        if (p->ptr)
            cr_assert(check_pattern(p->ptr, p->len, p->seed),
                      "%s (fail_at %llu%s): after '%s' (line %d) pattern %d (%zu bytes) changed",
                      w->workload, (unsigned long long)w->fail_at, w->persistent ? " on" : "", call,
                      line, i, p->len);
    }
}

/* ---- known rollback bugs ----
 * A failed call whose detail carries one of these signatures hit a known bug.
 * The sweep finds such runs first in a forked probe (which may leak: it exits
 * without tear-down) and leaves them out; known_bug_runs at the end of this
 * file sweeps them anyway (skip it while a bug is listed). Remove an entry
 * once its bug is fixed. */
typedef struct known_bug {
    const char *signature; /* a substring of the failed call's detail */
    const char *where;
} known_bug;

static const known_bug known_bugs[] = {
    {NULL, "none known now; list a bug above this entry"},
};
#define KNOWN_BUGS (sizeof known_bugs / sizeof known_bugs[0])

static int probe_mode;    /* in a forked probe: no checks, only note known bugs */
static int probe_fd;      /* where the probe writes 1 + the index of the bug it hit, or 0 */
static int include_known; /* the skipped tests: sweep known-bug runs too */
static uint64_t left_out; /* runs left out of the current sweep */

/* In a coverage build (SWEEP_COVERAGE, from tests/meson.build) the probe
 * leaves through exit, so its counts are written and the sites only probes
 * reach count as reached; elsewhere through _exit: no leak check of the
 * damage a known bug did. */
static void probe_exit(unsigned char hit)
{
    int status = write(probe_fd, &hit, 1) == 1 ? 0 : 1;
#ifdef SWEEP_COVERAGE
    exit(status);
#else
    _exit(status);
#endif
}

static int known_bug_of(const char *detail)
{
    for (size_t i = 0; i < KNOWN_BUGS; i++)
        if (known_bugs[i].signature && strstr(detail, known_bugs[i].signature))
            return (int)i + 1;
    return 0;
}

/* ---- one call ---- */

static void step_before(sweep *w, env *e)
{
    sweep_pause(w);
    snapshot(e, &w->before);
    sweep_resume(w);
}

/* Judges a call's status; true: retry it (a single failure was injected into
 * it, so the same call must now succeed). */
static int step_after(sweep *w, env *e, const char *call, int line, ortmem_status st,
                      ortmem_status also_allowed, int *retried)
{
    uint64_t injected_before = w->injected;
    char detail[512];
    snprintf(detail, sizeof detail, "%s", ortmem_last_error());
    sweep_pause(w);
    if (getenv("SWEEP_DEBUG") && st != ORTMEM_OK) /* every failed call, probes included */
        fprintf(stderr, "%s k=%llu p=%d probe=%d calls=%llu: %s -> %s: %s\n", w->workload,
                (unsigned long long)w->fail_at, w->persistent, probe_mode,
                (unsigned long long)w->calls, call, ortmem_status_str(st), detail);
    if (st == ORTMEM_OK) {
        sweep_resume(w);
        return 0;
    }
    if (probe_mode) {
        unsigned char hit = (unsigned char)known_bug_of(detail);
        if (hit) /* the state is damaged from here on: report and leave */
            probe_exit(hit);
        sweep_resume(w);
        if (w->persistent || *retried || w->injected == injected_before)
            return 0;
        *retried = 1;
        return 1;
    }
    cr_assert(w->injected > injected_before,
              "%s (fail_at %llu%s): '%s' (line %d) failed with %s without an injected "
              "allocation failure: %s",
              w->workload, (unsigned long long)w->fail_at, w->persistent ? " on" : "", call, line,
              ortmem_status_str(st), detail);
    cr_assert(st == ORTMEM_E_NOMEM || st == also_allowed,
              "%s (fail_at %llu%s): '%s' (line %d) returned %s, not ORTMEM_E_NOMEM: %s",
              w->workload, (unsigned long long)w->fail_at, w->persistent ? " on" : "", call, line,
              ortmem_status_str(st), detail);
    cr_assert(detail[0] != '\0', "%s (fail_at %llu%s): '%s' (line %d) returned %s without a detail",
              w->workload, (unsigned long long)w->fail_at, w->persistent ? " on" : "", call, line,
              ortmem_status_str(st));
    w->failed_calls++;
    snprintf(w->detail, sizeof w->detail, "%s", detail);
    snapshot(e, &w->after);
    /* A call documented to report a failure after it took effect (a truncate
     * whose zero tail could not be mapped again) says so in its detail; a
     * poll carries out each release alone and names the ones that failed. */
    if (!strstr(detail, "took effect") && !strstr(detail, "retirements failed and changed nothing"))
        compare_ledgers(w, call, line);
    check_patterns(w, e, call, line);
    sweep_resume(w);
    if (w->persistent || *retried)
        return 0;
    *retried = 1;
    return 1;
}

/* Runs call, judges it, retries it after a single failure; a call that still
 * fails ends the workload (persistent failures). */
#define STEP_ALLOW(call, also_allowed)                                                             \
    do {                                                                                           \
        ortmem_status step_st_;                                                                    \
        int step_retried_ = 0;                                                                     \
        do {                                                                                       \
            step_before(w, e);                                                                     \
            step_st_ = (call);                                                                     \
        } while (step_after(w, e, #call, __LINE__, step_st_, (also_allowed), &step_retried_));     \
        if (step_st_ != ORTMEM_OK)                                                                 \
            return;                                                                                \
    } while (0)

#define STEP(call) STEP_ALLOW(call, ORTMEM_E_NOMEM)

/* A check on the workload's own state, disarmed so it neither counts nor fails. */
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        sweep_pause(w);                                                                            \
        int check_ok_ = (cond);                                                                    \
        if (!probe_mode)                                                                           \
            cr_assert(check_ok_, "%s (fail_at %llu%s): line %d: %s", w->workload,                  \
                      (unsigned long long)w->fail_at, w->persistent ? " on" : "", __LINE__,        \
                      #cond);                                                                      \
        sweep_resume(w);                                                                           \
    } while (0)

#define DONE() (e->done = 1)

static void put_pattern(env *e, int slot, volatile void *ptr, size_t len, uint64_t seed)
{
    fill_pattern(ptr, len, seed);
    e->data[slot] = (pattern){ptr, len, seed};
}

static void drop_pattern(env *e, int slot)
{
    e->data[slot] = (pattern){NULL, 0, 0};
}

/* ---- tear-down, disarmed ---- */

static int query_flag; /* completes the query fences */

static void teardown(env *e)
{
    if (e->capturing)
        OK(ortmem_capture_end());
    for (int i = 0; i < SLOTS; i++) {
        if (e->signature[i])
            OK(ortmem_graph_signature_destroy(e->signature[i]));
        if (e->ticket[i])
            OK(ortmem_ticket_cancel(e->ticket[i]));
        if (e->grant[i])
            OK(ortmem_grant_abort(e->grant[i]));
        if (e->fd[i] >= 0)
            close(e->fd[i]);
        if (e->event[i])
            OK(ortmem_backend_event_destroy(e->backend[0], e->event[i]));
    }
    for (int i = 0; i < SLOTS; i++) {
        if (e->authority[i]) {
            ortmem_retire_report r = {sizeof r, 0, 0, 0, 0, 0};
            query_flag = 1;
            for (int f = 0; f < SLOTS; f++)
                if (e->fence[f])
                    (void)ortmem_fence_signal(e->fence[f]);
            OK(ortmem_authority_drain(e->authority[i], 1000, &r));
            cr_assert_eq(r.pending, 0);
        }
    }
    for (int i = SLOTS - 1; i >= 0; i--)
        if (e->seq[i])
            OK(ortmem_kv_seq_destroy(e->seq[i]));
    for (int i = SLOTS - 1; i >= 0; i--)
        if (e->cache[i])
            OK(ortmem_kv_cache_destroy(e->cache[i]));
    for (int i = SLOTS - 1; i >= 0; i--) {
        if (e->arena[i])
            OK(ortmem_arena_destroy(e->arena[i], 1));
        if (e->region[i])
            OK(ortmem_region_destroy(e->region[i]));
        if (e->lease[i])
            OK(ortmem_lease_drop(e->lease[i]));
        if (e->fence[i])
            OK(ortmem_fence_destroy(e->fence[i]));
    }
    for (int i = SLOTS - 1; i >= 0; i--)
        if (e->holder[i])
            OK(ortmem_holder_unregister(e->holder[i]));
    for (int i = SLOTS - 1; i >= 0; i--) {
        if (e->authority[i]) {
            ortmem_authority_report r = {.struct_size = sizeof r};
            OK(ortmem_authority_report_get(e->authority[i], &r, NULL, 0));
            /* The pool holder may keep what the pool still holds. */
            cr_assert_eq(r.claimed_bytes, 0, "authority %d keeps %llu bytes reserved", i,
                         (unsigned long long)r.claimed_bytes);
            OK(ortmem_authority_destroy(e->authority[i]));
        }
    }
    for (int i = SLOTS - 1; i >= 0; i--) {
        if (e->backend[i]) {
            ortmem_vmm_stats s = stats_of(e->backend[i]);
            cr_assert_eq(s.mapped_bytes, 0, "backend %d still maps %llu bytes", i,
                         (unsigned long long)s.mapped_bytes);
            cr_assert_eq(s.reserved_va_bytes, 0, "backend %d still reserves %llu bytes of VA", i,
                         (unsigned long long)s.reserved_va_bytes);
            cr_assert_eq(s.quarantined_bytes, 0);
            cr_assert_eq(s.owned_bytes, s.pool_bytes, "backend %d owns %llu bytes outside its pool",
                         i, (unsigned long long)(s.owned_bytes - s.pool_bytes));
            OK(ortmem_backend_destroy(e->backend[i]));
        }
    }
    if (e->device_used)
        OK(ortmem_process_teardown());
}

static void env_init(env *e)
{
    memset(e, 0, sizeof *e);
    for (int i = 0; i < SLOTS; i++)
        e->fd[i] = -1;
}

/* ---- the driver ---- */

typedef struct sweep_totals {
    uint64_t allocations; /* N of the unarmed run */
    uint64_t runs, injected, failed_calls;
} sweep_totals;

static ledger final_of_count_run;

static void run_once(sweep *w, workload_fn fn, ledger *final)
{
    env e;
    env_init(&e);
    sweep_resume(w);
    fn(w, &e);
    sweep_pause(w);
    if (!w->fail_at || !w->persistent || !w->injected)
        cr_assert(e.done, "%s (fail_at %llu%s): the workload stopped early", w->workload,
                  (unsigned long long)w->fail_at, w->persistent ? " on" : "");
    if (final)
        snapshot(&e, final);
    teardown(&e);
}

/* Runs the workload armed in a forked child that only notes whether a failed
 * call hit a known bug, and exits without tear-down. */
static int probe_known_bug(const char *name, workload_fn fn, uint64_t k, int persistent)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        probe_mode = 1;
        probe_fd = fds[1];
        sweep w = {.workload = name, .fail_at = k, .persistent = persistent};
        env e;
        env_init(&e);
        sweep_resume(&w);
        fn(&w, &e);
        ortmem_alloc_fault(0, 0);
        probe_exit(0);
    }
    close(fds[1]);
    unsigned char hit = 0;
    if (read(fds[0], &hit, 1) != 1)
        hit = 0; /* the probe crashed: the checked run shows how */
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return hit;
}

/* Counts the workload's allocations, then fails each (every stride-th) once
 * and from there on. Prints one line the coverage script reads. */
static sweep_totals sweep_workload(const char *name, workload_fn fn, uint64_t stride)
{
    sweep_totals t = {0, 0, 0, 0};
    left_out = 0;
    sweep sw = {.workload = name};
    sweep *w = &sw;
    run_once(w, fn, NULL); /* warm-up: lazily grown process-wide tables */
    memset(w, 0, sizeof *w);
    w->workload = name;
    run_once(w, fn, &final_of_count_run);
    t.allocations = w->calls;
    cr_assert_gt(t.allocations, 0, "%s allocates nothing", name);
    for (uint64_t k = 1; k <= t.allocations; k += stride) {
        for (int persistent = 0; persistent < 2; persistent++) {
            if (!include_known && probe_known_bug(name, fn, k, persistent)) {
                left_out++;
                continue;
            }
            memset(w, 0, sizeof *w);
            w->workload = name;
            w->fail_at = k;
            w->persistent = persistent;
            ledger final;
            run_once(w, fn, persistent ? NULL : &final);
            t.runs++;
            t.injected += w->injected;
            t.failed_calls += w->failed_calls;
            if (!persistent && w->injected) {
                /* Retried after the failure, the workload ends where the
                 * unarmed run ended. */
                const ledger *a = &final_of_count_run, *b = &final;
                const char *call = "(end of workload)";
                int line = 0;
                for (int i = 0; i < SLOTS; i++) {
                    SAME(backend[i].owned_bytes);
                    SAME(backend[i].mapped_bytes);
                    SAME(authority[i].owned_bytes);
                    SAME(authority[i].mapped_bytes);
                    SAME(arena[i].allocated_bytes);
                    SAME(cache[i].live_tokens);
                    SAME(cache[i].committed_bytes);
                }
            }
        }
    }
    fprintf(stderr,
            "alloc_faults: workload %s: %llu allocations, stride %llu, %llu runs, %llu failures "
            "injected, %llu failed calls, all survived; %llu runs left out (known bugs)\n",
            name, (unsigned long long)t.allocations, (unsigned long long)stride,
            (unsigned long long)t.runs, (unsigned long long)t.injected,
            (unsigned long long)t.failed_calls, (unsigned long long)left_out);
    return t;
}

/* ---- workloads ---- */

static ortmem_status cpu_create(size_t granule, ortmem_backend **out)
{
    ortmem_cpu_options o = ORTMEM_CPU_OPTIONS_INIT;
    o.granule = granule;
    return ortmem_cpu_backend_create(&o, out);
}

#define STEP_CPU(slot) STEP(cpu_create(G, &e->backend[slot]))

static ortmem_status region_create(ortmem_backend *b, size_t size, unsigned flags,
                                   const ortmem_account *account, ortmem_region **out)
{
    ortmem_region_options o = ORTMEM_REGION_OPTIONS_INIT;
    o.size = size;
    o.flags = flags;
    o.account = account;
    return ortmem_region_create(b, &o, out);
}

static void wl_backends(sweep *w, env *e)
{
    STEP_CPU(0);
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    STEP(ortmem_fault_backend_create(e->backend[0], &fo, &e->backend[1]));
    fo.op = ORTMEM_OP_MAP;
    fo.fail_at = 1000;
    STEP(ortmem_fault_backend_arm(e->backend[1], &fo));
    size_t granule = 0;
    STEP(ortmem_backend_granule(e->backend[1], &granule));
    CHECK(granule == G);
    /* A region on the wrapper reaches the inner backend's granule bookkeeping. */
    STEP(region_create(e->backend[1], 4 * G, 0, NULL, &e->region[0]));
    STEP(ortmem_region_commit(e->region[0], 0, 2 * G));
    put_pattern(e, 0, ortmem_region_base(e->region[0]), 2 * G, 1);
    STEP(ortmem_region_destroy(e->region[0]));
    e->region[0] = NULL;
    drop_pattern(e, 0);
    STEP(ortmem_backend_destroy(e->backend[1]));
    e->backend[1] = NULL;
    DONE();
}

static void wl_region(sweep *w, env *e)
{
    STEP_CPU(0);
    STEP(region_create(e->backend[0], 16 * G, 0, NULL, &e->region[0]));
    STEP(region_create(e->backend[0], 16 * G, 0, NULL, &e->region[1]));
    uint8_t *a = ortmem_region_base(e->region[0]);
    uint8_t *b = ortmem_region_base(e->region[1]);
    STEP(ortmem_region_commit(e->region[0], 0, 3 * G));
    put_pattern(e, 0, a, 3 * G, 10);
    ortmem_range ranges[] = {{5 * G, G}, {8 * G, 2 * G}};
    STEP(ortmem_region_commit_ranges(e->region[0], ranges, 2));
    put_pattern(e, 1, a + 5 * G, G, 11);
    put_pattern(e, 2, a + 8 * G, 2 * G, 12);
    /* Share [0, 2G) of region 0 into region 1, read-only, then copy it on write. */
    STEP(ortmem_region_share(e->region[1], 0, e->region[0], 0, 2 * G, ORTMEM_ACCESS_READ));
    CHECK(check_pattern(b, 2 * G, 10));
    STEP(ortmem_region_protect(e->region[1], 0, 2 * G, ORTMEM_ACCESS_READ_WRITE));
    STEP(ortmem_region_cow(e->region[1], 0, 2 * G));
    put_pattern(e, 3, b, 2 * G, 13);
    CHECK(check_pattern(a, 2 * G, 10));
    STEP(ortmem_region_commit(e->region[1], 4 * G, 2 * G));
    STEP(ortmem_region_copy(e->region[1], 4 * G, e->region[0], 8 * G, 2 * G));
    CHECK(check_pattern(b + 4 * G, 2 * G, 12));
    e->data[4] = (pattern){b + 4 * G, 2 * G, 12};
    ortmem_range drop[] = {{5 * G, G}, {9 * G, G}};
    drop_pattern(e, 1);
    drop_pattern(e, 2);
    STEP(ortmem_region_decommit_ranges(e->region[0], drop, 2));
    put_pattern(e, 2, a + 8 * G, G, 14);
    drop_pattern(e, 0);
    STEP(ortmem_region_decommit(e->region[0], 0, 2 * G));
    put_pattern(e, 0, a + 2 * G, G, 15);
    drop_pattern(e, 3);
    drop_pattern(e, 4);
    STEP(ortmem_region_destroy(e->region[1]));
    e->region[1] = NULL;
    DONE();
}

static void wl_share_export(sweep *w, env *e)
{
    STEP_CPU(0);
    STEP(region_create(e->backend[0], 4 * G, ORTMEM_REGION_EXPORTABLE, NULL, &e->region[0]));
    STEP(region_create(e->backend[0], 4 * G, 0, NULL, &e->region[1]));
    uint8_t *a = ortmem_region_base(e->region[0]);
    STEP(ortmem_region_commit(e->region[0], 0, 2 * G));
    put_pattern(e, 0, a, 2 * G, 20);
    STEP(ortmem_region_export(e->region[0], G, &e->fd[0]));
    int sv[2];
    int paired = socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    CHECK(paired == 0);
    e->fd[1] = sv[0];
    e->fd[2] = sv[1];
    STEP(ortmem_fd_send(e->fd[1], e->fd[0]));
    STEP(ortmem_fd_recv(e->fd[2], &e->fd[3]));
    STEP(ortmem_region_import(e->region[1], 2 * G, e->fd[3], ORTMEM_ACCESS_READ));
    CHECK(memcmp((uint8_t *)ortmem_region_base(e->region[1]) + 2 * G, a + G, G) == 0);
    STEP(ortmem_region_decommit(e->region[1], 2 * G, G));
    DONE();
}

static void wl_pool(sweep *w, env *e)
{
    STEP_CPU(0);
    STEP(ortmem_pool_set_cap(e->backend[0], 8 * G));
    STEP(ortmem_pool_fill(e->backend[0], 6 * G));
    STEP(region_create(e->backend[0], 8 * G, 0, NULL, &e->region[0]));
    STEP(ortmem_region_commit(e->region[0], 0, 4 * G)); /* pool hits */
    put_pattern(e, 0, ortmem_region_base(e->region[0]), 4 * G, 30);
    drop_pattern(e, 0);
    STEP(ortmem_region_decommit(e->region[0], 0, 4 * G)); /* back to the pool */
    size_t released = 0;
    STEP(ortmem_pool_trim(e->backend[0], 2 * G, &released));
    STEP(ortmem_region_commit(e->region[0], 0, 5 * G));
    STEP(ortmem_region_destroy(e->region[0]));
    e->region[0] = NULL;
    STEP(ortmem_pool_trim(e->backend[0], 0, &released));
    DONE();
}

/* Extents: whole-extent commits, a geometric growth window, a share, a
 * copy on write of a whole extent and strict decommits. */
static void wl_extents(sweep *w, env *e)
{
    STEP_CPU(0);
    STEP(region_create(e->backend[0], 32 * G, 0, NULL, &e->region[0]));
    STEP(region_create(e->backend[0], 32 * G, 0, NULL, &e->region[1]));
    uint8_t *a = ortmem_region_base(e->region[0]);
    uint8_t *b = ortmem_region_base(e->region[1]);
    ortmem_range ext[] = {{0, 4 * G}, {4 * G, 2 * G}};
    STEP(ortmem_region_commit_extents(e->region[0], ext, 2));
    put_pattern(e, 0, a, 6 * G, 40);
    ortmem_extent_policy geo = {sizeof geo, ORTMEM_EXTENT_GEOMETRIC, 8 * G};
    ortmem_commit_range grow[] = {{6 * G, G + 1, 24 * G}};
    STEP(ortmem_region_commit_grow(e->region[0], grow, 1, &geo));
    ortmem_commit_range more[] = {{6 * G, 5 * G, 24 * G}};
    STEP(ortmem_region_commit_grow(e->region[0], more, 1, &geo));
    put_pattern(e, 1, a + 6 * G, 5 * G, 41);
    STEP(ortmem_region_share(e->region[1], 0, e->region[0], 0, 4 * G, ORTMEM_ACCESS_READ_WRITE));
    CHECK(check_pattern(b, 4 * G, 40));
    STEP(ortmem_region_cow(e->region[1], G, 1));
    put_pattern(e, 2, b, 4 * G, 42);
    CHECK(check_pattern(a, 4 * G, 40));
    ortmem_range cut[] = {{0, 2 * G}}, whole[] = {{4 * G, 2 * G}};
    CHECK(ortmem_region_decommit_ex(e->region[0], cut, 1, ORTMEM_DECOMMIT_STRICT) ==
          ORTMEM_E_RANGE);
    STEP(ortmem_region_decommit_ex(e->region[0], whole, 1, ORTMEM_DECOMMIT_STRICT));
    DONE();
}

/* Pool classes: fill of one class, commits that take their own size, trim. */
static void wl_pool_classes(sweep *w, env *e)
{
    STEP_CPU(0);
    STEP(ortmem_pool_set_cap(e->backend[0], 16 * G));
    STEP(ortmem_pool_fill_extents(e->backend[0], 4 * G, 2));
    STEP(ortmem_pool_fill_extents(e->backend[0], 2 * G, 1));
    STEP(region_create(e->backend[0], 16 * G, 0, NULL, &e->region[0]));
    ortmem_range ext[] = {{0, 4 * G}, {4 * G, 2 * G}, {8 * G, 8 * G}};
    STEP(ortmem_region_commit_extents(e->region[0], ext, 3));
    put_pattern(e, 0, ortmem_region_base(e->region[0]), 6 * G, 50);
    drop_pattern(e, 0);
    ortmem_range back[] = {{0, 16 * G}};
    STEP(ortmem_region_decommit_ex(e->region[0], back, 1, 0));
    size_t released = 0;
    STEP(ortmem_pool_trim(e->backend[0], 4 * G, &released));
    ortmem_pool_stats ps;
    memset(&ps, 0, sizeof ps);
    ps.struct_size = sizeof ps;
    STEP(ortmem_pool_stats_get(e->backend[0], &ps));
    STEP(ortmem_region_destroy(e->region[0]));
    e->region[0] = NULL;
    DONE();
}

static void wl_arena(sweep *w, env *e)
{
    STEP_CPU(0);
    ortmem_arena_options o = ORTMEM_ARENA_OPTIONS_INIT;
    o.capacity = 32 * G;
    o.cache_bytes = 2 * G;
    STEP(ortmem_arena_create(e->backend[0], &o, &e->arena[0]));
    static const size_t sizes[] = {1000, 70000, 256, 3 * G + 5, 4096, 100, G, 12345};
    void *p[8] = {0};
    for (int i = 0; i < 8; i++) {
        STEP(ortmem_arena_alloc(e->arena[0], sizes[i], 0, &p[i]));
        put_pattern(e, i, p[i], sizes[i], 40 + (uint64_t)i);
    }
    for (int i = 0; i < 8; i += 2) {
        drop_pattern(e, i);
        STEP(ortmem_arena_free(e->arena[0], p[i]));
    }
    void *q = NULL;
    STEP(ortmem_arena_alloc(e->arena[0], 2 * G, 4096, &q));
    put_pattern(e, 8, q, 2 * G, 48);
    STEP(ortmem_arena_trim(e->arena[0], 0));
    for (int i = 1; i < 8; i += 2) {
        drop_pattern(e, i);
        STEP(ortmem_arena_free(e->arena[0], p[i]));
    }
    drop_pattern(e, 8);
    STEP(ortmem_arena_free(e->arena[0], q));
    STEP(ortmem_arena_destroy(e->arena[0], 0));
    e->arena[0] = NULL;
    DONE();
}

static ortmem_status authority_create(ortmem_backend *b, uint64_t limit, ortmem_authority **out)
{
    ortmem_authority_options o = ORTMEM_AUTHORITY_OPTIONS_INIT;
    o.limit_bytes = limit;
    return ortmem_authority_create(b, &o, out);
}

/* What the reclaimable holder gives back, and the sweep to tell: a call that
 * fails after pressure released memory must leave the ledger as the release
 * left it. */
static ortmem_region *pressure_region;
static sweep *pressure_sweep;
static env *pressure_env;

static uint64_t give_back(void *user, uint64_t want)
{
    (void)user;
    (void)want;
    if (!pressure_region || ortmem_region_decommit(pressure_region, 0, 2 * G) != ORTMEM_OK)
        return 0;
    sweep_pause(pressure_sweep);
    if (!probe_mode)
        snapshot(pressure_env, &pressure_sweep->before);
    sweep_resume(pressure_sweep);
    return 2 * G;
}

static ortmem_status holder_register(ortmem_authority *a, const char *name, int priority,
                                     ortmem_pressure_fn fn, ortmem_holder **out)
{
    ortmem_holder_options o = ORTMEM_HOLDER_OPTIONS_INIT;
    o.name = name;
    o.priority = priority;
    o.on_pressure = fn;
    return ortmem_holder_register(a, &o, out);
}

static void wl_governance(sweep *w, env *e)
{
    STEP_CPU(0);
    STEP_CPU(1);
    STEP(authority_create(e->backend[0], 16 * G, &e->authority[0]));
    STEP(authority_create(e->backend[1], 16 * G, &e->authority[1]));
    /* Enough holders to grow the authority's list. */
    STEP(holder_register(e->authority[0], "engine", 10, NULL, &e->holder[0]));
    STEP(holder_register(e->authority[0], "cache", 0, give_back, &e->holder[1]));
    STEP(holder_register(e->authority[0], "spare-a", 1, NULL, &e->holder[2]));
    STEP(holder_register(e->authority[0], "spare-b", 1, NULL, &e->holder[3]));
    STEP(holder_register(e->authority[1], "other", 0, NULL, &e->holder[4]));
    ortmem_account acct;
    STEP(ortmem_holder_account(e->holder[1], &acct));
    STEP(region_create(e->backend[0], 8 * G, 0, &acct, &e->region[0]));
    STEP(ortmem_region_commit(e->region[0], 0, 4 * G));
    put_pattern(e, 0, ortmem_region_base(e->region[0]), 4 * G, 50);
    STEP(ortmem_lease_acquire(e->holder[0], 2 * G, &e->lease[0]));
    STEP(ortmem_grant_prepare(e->holder[0], 3 * G, &e->grant[0]));
    STEP(ortmem_grant_charge(e->grant[0], 2 * G));
    e->grant[0] = NULL;
    STEP(ortmem_holder_refund(e->holder[0], 2 * G));
    ortmem_holder *many[] = {e->holder[2], e->holder[4]};
    const uint64_t bytes[] = {G, G};
    ortmem_grant *got[2] = {NULL, NULL};
    STEP(ortmem_grant_prepare_many(2, many, bytes, got));
    e->grant[1] = got[0];
    e->grant[2] = got[1];
    STEP(ortmem_grant_abort(e->grant[1]));
    e->grant[1] = NULL;
    STEP(ortmem_grant_abort(e->grant[2]));
    e->grant[2] = NULL;
    /* Pressure: 12 G asked with 4 G owned by the cache, 1 G free beyond the lease. */
    pressure_region = e->region[0];
    pressure_sweep = w;
    pressure_env = e;
    drop_pattern(e, 0);
    /* A pressure callback whose decommit finds no memory releases nothing:
     * the prepare is then refused for budget. */
    STEP_ALLOW(ortmem_grant_prepare(e->holder[3], 11 * G, &e->grant[3]), ORTMEM_E_BUDGET);
    pressure_region = NULL;
    STEP(ortmem_grant_abort(e->grant[3]));
    e->grant[3] = NULL;
    DONE();
}

static void wl_tickets(sweep *w, env *e)
{
    STEP_CPU(0);
    STEP(authority_create(e->backend[0], 4 * G, &e->authority[0]));
    STEP(holder_register(e->authority[0], "a", 0, NULL, &e->holder[0]));
    STEP(holder_register(e->authority[0], "b", 0, NULL, &e->holder[1]));
    STEP(ortmem_grant_prepare(e->holder[0], 3 * G, &e->grant[0]));
    STEP(ortmem_ticket_submit(e->holder[1], 2 * G, 0, &e->ticket[0]));
    STEP(ortmem_ticket_submit(e->holder[1], G, 5, &e->ticket[1]));
    ortmem_limit_outcome out = {.struct_size = sizeof out};
    STEP(ortmem_authority_set_limit(e->authority[0], 8 * G, &out));
    /* The raised limit grants both tickets (the grant's bookkeeping may be
     * refused; the ticket then keeps waiting and the wait serves it again). */
    ortmem_grant *g = NULL;
    STEP(ortmem_ticket_wait(e->ticket[1], 0, &g));
    e->ticket[1] = NULL;
    e->grant[1] = g;
    STEP(ortmem_ticket_wait(e->ticket[0], 0, &g));
    e->ticket[0] = NULL;
    e->grant[2] = g;
    STEP(ortmem_grant_charge(e->grant[2], 2 * G));
    e->grant[2] = NULL;
    STEP(ortmem_holder_refund(e->holder[1], 2 * G));
    STEP(ortmem_ticket_submit(e->holder[0], 6 * G, 0, &e->ticket[2]));
    STEP(ortmem_ticket_cancel(e->ticket[2]));
    e->ticket[2] = NULL;
    STEP(ortmem_authority_set_limit(e->authority[0], 6 * G, &out));
    DONE();
}

static void wl_report(sweep *w, env *e)
{
    STEP_CPU(0);
    STEP(authority_create(e->backend[0], 16 * G, &e->authority[0]));
    STEP(holder_register(e->authority[0], "weights", 3, NULL, &e->holder[0]));
    STEP(holder_register(e->authority[0], "kv", 2, NULL, &e->holder[1]));
    ortmem_account acct;
    STEP(ortmem_holder_account(e->holder[0], &acct));
    STEP(region_create(e->backend[0], 4 * G, 0, &acct, &e->region[0]));
    STEP(ortmem_region_commit(e->region[0], 0, 3 * G));
    ortmem_authority_report r = {.struct_size = sizeof r};
    ortmem_holder_report hr[4];
    STEP(ortmem_authority_report_get(e->authority[0], &r, hr, 4));
    CHECK(r.owned_bytes == 3 * G);
    char buf[4096];
    size_t needed = 0;
    STEP(ortmem_authority_format(e->authority[0], ORTMEM_REPORT_TABLE, buf, sizeof buf, &needed));
    STEP(ortmem_authority_format(e->authority[0], ORTMEM_REPORT_JSON, buf, sizeof buf, &needed));
    CHECK(strstr(buf, "weights") != NULL);
    STEP(ortmem_holder_unregister(e->holder[1]));
    e->holder[1] = NULL;
    DONE();
}

static int query_done(void *user)
{
    return *(int *)user;
}

/* A release that fails in a poll stays pending and the next poll or the
 * drain carries it out, so a retried run ends where the unarmed one did. */
static void wl_deferred(sweep *w, env *e)
{
    STEP_CPU(0);
    STEP(authority_create(e->backend[0], 32 * G, &e->authority[0]));
    STEP(holder_register(e->authority[0], "engine", 0, NULL, &e->holder[0]));
    ortmem_account acct;
    STEP(ortmem_holder_account(e->holder[0], &acct));
    STEP(region_create(e->backend[0], 8 * G, 0, &acct, &e->region[0]));
    ortmem_arena_options ao = ORTMEM_ARENA_OPTIONS_INIT;
    ao.capacity = 8 * G;
    ao.account = &acct;
    STEP(ortmem_arena_create(e->backend[0], &ao, &e->arena[0]));
    STEP(ortmem_region_commit(e->region[0], 0, 4 * G));
    void *p = NULL, *q = NULL;
    STEP(ortmem_arena_alloc(e->arena[0], G, 0, &p));
    STEP(ortmem_arena_alloc(e->arena[0], G, 0, &q));
    STEP(ortmem_fence_create(&e->fence[0]));
    query_flag = 0;
    STEP(ortmem_fence_create_query(query_done, &query_flag, &e->fence[1]));
    STEP(ortmem_fence_create_event(e->backend[0], 0, &e->fence[2]));
    STEP(ortmem_region_decommit_after(e->region[0], 0, 2 * G, e->fence[0]));
    STEP(ortmem_region_decommit_after(e->region[0], 2 * G, G, e->fence[1]));
    STEP(ortmem_arena_free_after(e->arena[0], p, e->fence[2]));
    STEP(ortmem_arena_free_after(e->arena[0], q, e->fence[0]));
    ortmem_retire_report rr = {sizeof rr, 0, 0, 0, 0, 0};
    STEP(ortmem_authority_poll(e->authority[0], &rr));
    CHECK(rr.pending == 3); /* the event fence completes at once */
    STEP(ortmem_fence_signal(e->fence[0]));
    STEP(ortmem_authority_poll(e->authority[0], &rr));
    CHECK(rr.pending == 1);
    query_flag = 1;
    STEP(ortmem_authority_drain(e->authority[0], 1000, &rr));
    CHECK(rr.pending == 0);
    for (int i = 0; i < 3; i++) {
        STEP(ortmem_fence_destroy(e->fence[i]));
        e->fence[i] = NULL;
    }
    DONE();
}

static void wl_process(sweep *w, env *e)
{
    ortmem_device_options o = ORTMEM_DEVICE_OPTIONS_INIT;
    o.limit_bytes = 64 * G;
    o.granule = G;
    ortmem_device_id id;
    e->device_used = 1;
    STEP(ortmem_device_get(ORTMEM_DEVICE_CPU, 0, &o, &id));
    ortmem_device_id again;
    STEP(ortmem_device_get(ORTMEM_DEVICE_CPU, 0, &o, &again));
    CHECK(again.slot == id.slot && again.generation == id.generation);
    ortmem_authority *a = NULL;
    STEP(ortmem_device_authority(id, &a));
    STEP(holder_register(a, "engine", 0, NULL, &e->holder[0]));
    STEP(ortmem_holder_unregister(e->holder[0]));
    e->holder[0] = NULL;
    STEP(ortmem_process_teardown());
    e->device_used = 0;
    DONE();
}

/* A token-major geometry: one fragment, 64 tokens per 64 KiB granule. */
static ortmem_kv_cache_options kv_options(ortmem_kv_strategy strategy)
{
    ortmem_kv_cache_options o = ORTMEM_KV_CACHE_OPTIONS_INIT;
    o.geometry.layers = 2;
    o.geometry.kv_heads = 2;
    o.geometry.head_dim = 64;
    o.geometry.dtype = ORTMEM_KV_F16;
    o.geometry.layout = ORTMEM_KV_TOKEN_MAJOR;
    o.geometry.granule = G;
    o.strategy = strategy;
    o.max_context = 1024;
    o.min_bucket = 64;
    /* A run must end where the unarmed run ended; a host allocation refused
     * at a sequence's finish decommits its range instead of keeping it warm,
     * which is a different (valid) end. Warm ranges under faults:
     * tests/test_kv_warm.c. */
    o.warm_max_bytes = 0;
    return o;
}

/* The first byte of every token of (layer 0, K). */
static void kv_put(sweep *w, env *e, int slot, ortmem_kv_seq *s, uint64_t from, uint64_t to,
                   uint64_t seed)
{
    sweep_pause(w);
    ortmem_kv_binding b = {.struct_size = sizeof b};
    if (ortmem_kv_seq_binding(s, 0, 0, &b) != ORTMEM_OK) {
        cr_assert(probe_mode, "kv binding: %s", ortmem_last_error());
        sweep_resume(w);
        return;
    }
    volatile uint8_t *base = b.base;
    for (uint64_t t = from; t < to; t++)
        base[t * b.token_stride] = pattern_byte(seed, t);
    (void)e;
    (void)slot;
    sweep_resume(w);
}

static void kv_check(sweep *w, ortmem_kv_seq *s, uint64_t from, uint64_t to, uint64_t seed)
{
    if (probe_mode)
        return;
    sweep_pause(w);
    ortmem_kv_binding b = {.struct_size = sizeof b};
    OK(ortmem_kv_seq_binding(s, 0, 0, &b));
    const volatile uint8_t *base = b.base;
    for (uint64_t t = from; t < to; t++)
        cr_assert_eq(base[t * b.token_stride], pattern_byte(seed, t),
                     "%s (fail_at %llu%s): token %llu lost its byte", w->workload,
                     (unsigned long long)w->fail_at, w->persistent ? " on" : "",
                     (unsigned long long)t);
    sweep_resume(w);
}

static void wl_kv_stable(sweep *w, env *e)
{
    STEP_CPU(0);
    STEP_CPU(1); /* the host tier */
    STEP(authority_create(e->backend[0], 256 * G, &e->authority[0]));
    ortmem_kv_cache_options o = kv_options(ORTMEM_KV_STABLE);
    o.host_backend = e->backend[1];
    STEP(ortmem_kv_cache_create(e->authority[0], &o, &e->cache[0]));
    STEP(ortmem_kv_seq_create(e->cache[0], &e->seq[0]));
    STEP(ortmem_kv_seq_append(e->seq[0], 100));
    kv_put(w, e, 0, e->seq[0], 0, 100, 60);
    STEP(ortmem_kv_seq_append(e->seq[0], 100));
    kv_put(w, e, 0, e->seq[0], 100, 200, 61);
    STEP(ortmem_kv_seq_fork(e->seq[0], &e->seq[1]));
    kv_check(w, e->seq[1], 0, 100, 60);
    STEP(ortmem_kv_seq_append(e->seq[1], 50)); /* copies the shared partial granule */
    kv_put(w, e, 1, e->seq[1], 200, 250, 62);
    STEP(ortmem_kv_seq_truncate(e->seq[0], 70));
    kv_check(w, e->seq[0], 0, 70, 60);
    STEP(ortmem_kv_seq_swap_out(e->seq[1]));
    STEP(ortmem_kv_seq_swap_in(e->seq[1]));
    kv_check(w, e->seq[1], 0, 100, 60);
    kv_check(w, e->seq[1], 200, 250, 62);
    STEP(ortmem_kv_seq_append(e->seq[0], 300));
    ortmem_kv_stats st = {.struct_size = sizeof st};
    STEP(ortmem_kv_cache_stats(e->cache[0], &st));
    CHECK(st.sequences == 2 && st.live_tokens == 370 + 250);
    STEP(ortmem_kv_seq_destroy(e->seq[1]));
    e->seq[1] = NULL;
    DONE();
}

/* The zero tail on its own, swapped out and in: the undo of a failed append or
 * swap-in maps the tail back or decommits, which must not need memory. */
static void wl_kv_zero_tail(sweep *w, env *e)
{
    STEP_CPU(0);
    STEP_CPU(1); /* the host tier */
    STEP(authority_create(e->backend[0], 256 * G, &e->authority[0]));
    ortmem_kv_cache_options o = kv_options(ORTMEM_KV_STABLE);
    o.zero_tail = 1;
    o.max_context = 256;
    o.host_backend = e->backend[1];
    STEP(ortmem_kv_cache_create(e->authority[0], &o, &e->cache[0]));
    STEP(ortmem_kv_seq_create(e->cache[0], &e->seq[0]));
    STEP(ortmem_kv_seq_append(e->seq[0], 100));
    kv_put(w, e, 0, e->seq[0], 0, 100, 90);
    STEP(ortmem_kv_seq_truncate(e->seq[0], 30));
    kv_check(w, e->seq[0], 0, 30, 90);
    STEP(ortmem_kv_seq_swap_out(e->seq[0]));
    STEP(ortmem_kv_seq_swap_in(e->seq[0]));
    kv_check(w, e->seq[0], 0, 30, 90);
    STEP(ortmem_kv_seq_append(e->seq[0], 10));
    DONE();
}

static void wl_kv_bucket(sweep *w, env *e)
{
    STEP_CPU(0);
    STEP(authority_create(e->backend[0], 256 * G, &e->authority[0]));
    ortmem_kv_cache_options o = kv_options(ORTMEM_KV_BUCKET);
    STEP(ortmem_kv_cache_create(e->authority[0], &o, &e->cache[0]));
    STEP(ortmem_kv_seq_create(e->cache[0], &e->seq[0]));
    STEP(ortmem_kv_seq_append(e->seq[0], 60));
    kv_put(w, e, 0, e->seq[0], 0, 60, 70);
    STEP(ortmem_kv_seq_append(e->seq[0], 100)); /* grows to the next bucket */
    kv_check(w, e->seq[0], 0, 60, 70);
    STEP(ortmem_kv_seq_fork(e->seq[0], &e->seq[1]));
    STEP(ortmem_kv_seq_truncate(e->seq[1], 10));
    STEP(ortmem_kv_seq_append(e->seq[0], 400));
    kv_check(w, e->seq[0], 0, 60, 70);
    kv_check(w, e->seq[1], 0, 10, 70);
    DONE();
}

static void wl_kv_prefix(sweep *w, env *e)
{
    STEP_CPU(0);
    STEP(authority_create(e->backend[0], 256 * G, &e->authority[0]));
    ortmem_kv_cache_options o = kv_options(ORTMEM_KV_STABLE);
    o.prefix_cache = 1;
    STEP(ortmem_kv_cache_create(e->authority[0], &o, &e->cache[0]));
    int32_t prompt[300];
    for (int i = 0; i < 300; i++)
        prompt[i] = i * 7 + 1;
    uint64_t reused = 0;
    STEP(ortmem_kv_seq_create_with_prompt(e->cache[0], prompt, 300, &e->seq[0], &reused));
    CHECK(reused == 0);
    STEP(ortmem_kv_seq_append(e->seq[0], 300));
    kv_put(w, e, 0, e->seq[0], 0, 300, 80);
    STEP(ortmem_kv_seq_publish(e->seq[0], prompt, 300));
    STEP(ortmem_kv_seq_create_with_prompt(e->cache[0], prompt, 300, &e->seq[1], &reused));
    CHECK(reused == 256);
    kv_check(w, e->seq[1], 0, 256, 80);
    STEP(ortmem_kv_seq_append(e->seq[1], 10));
    STEP(ortmem_kv_seq_destroy(e->seq[0]));
    e->seq[0] = NULL;
    STEP(ortmem_kv_seq_destroy(e->seq[1]));
    e->seq[1] = NULL;
    DONE();
}

static void noop(void *arg)
{
    ++*(int *)arg;
}

static void wl_capture(sweep *w, env *e)
{
    STEP_CPU(0);
    STEP(authority_create(e->backend[0], 64 * G, &e->authority[0]));
    STEP(region_create(e->backend[0], 8 * G, 0, NULL, &e->region[0]));
    STEP(ortmem_region_commit(e->region[0], 0, 4 * G));
    ortmem_kv_cache_options o = kv_options(ORTMEM_KV_STABLE);
    o.graph_capture = 1;
    STEP(ortmem_kv_cache_create(e->authority[0], &o, &e->cache[0]));
    STEP(ortmem_kv_seq_create(e->cache[0], &e->seq[0]));
    STEP(ortmem_kv_seq_append(e->seq[0], 64));
    STEP(ortmem_graph_signature_create(&e->signature[0]));
    for (size_t i = 0; i < 4; i++) /* enough entries to grow the array */
        STEP(ortmem_graph_signature_add_range(e->signature[0], e->region[0], i * G, G));
    for (uint32_t layer = 0; layer < 2; layer++)
        for (int value = 0; value < 2; value++)
            STEP(
                ortmem_graph_signature_add_binding(e->signature[0], e->seq[0], layer, value, NULL));
    char reason[256];
    ortmem_graph_verdict v = ORTMEM_GRAPH_INVALIDATE;
    STEP(ortmem_graph_signature_check(e->signature[0], reason, sizeof reason, &v));
    CHECK(v == ORTMEM_GRAPH_KEEP);
    STEP(ortmem_region_decommit(e->region[0], 3 * G, G));
    STEP(ortmem_graph_signature_check(e->signature[0], reason, sizeof reason, &v));
    CHECK(v == ORTMEM_GRAPH_INVALIDATE);
    STEP(ortmem_graph_signature_destroy(e->signature[0]));
    e->signature[0] = NULL;
    /* A function deferred behind a capture is queued, or refused and not run. */
    static int ran;
    ran = 0;
    STEP(ortmem_capture_begin());
    e->capturing = 1;
    STEP(ortmem_capture_defer(noop, &ran));
    CHECK(ran == 0);
    STEP(ortmem_capture_end());
    e->capturing = 0;
    CHECK(ran == 1);
    DONE();
}

static void wl_streams(sweep *w, env *e)
{
    STEP_CPU(0);
    STEP(region_create(e->backend[0], 4 * G, 0, NULL, &e->region[0]));
    STEP(ortmem_region_commit(e->region[0], 0, 2 * G));
    uint8_t *a = ortmem_region_base(e->region[0]);
    STEP(ortmem_backend_memset_async(e->backend[0], a, 0x5a, G, 0));
    STEP(ortmem_backend_copy_async(e->backend[0], a + G, a, G, 0));
    /* Enough live events to grow the backend's event table. */
    for (int i = 0; i < SLOTS; i++)
        STEP(ortmem_backend_event_record(e->backend[0], 0, &e->event[i]));
    STEP(ortmem_backend_event_query(e->backend[0], e->event[0]));
    for (int i = 0; i < SLOTS; i += 2) {
        STEP(ortmem_backend_event_destroy(e->backend[0], e->event[i]));
        e->event[i] = 0;
    }
    CHECK(a[G + 7] == 0x5a);
    DONE();
}

/* ---- the tests: one per workload ---- */

#define SWEEP_TEST(name, stride)                                                                   \
    Test(alloc_faults, name, .timeout = 120)                                                       \
    {                                                                                              \
        sweep_workload(#name, wl_##name, stride);                                                  \
    }

SWEEP_TEST(backends, 1)
SWEEP_TEST(region, 1)
SWEEP_TEST(share_export, 1)
SWEEP_TEST(pool, 1)
SWEEP_TEST(extents, 1)
SWEEP_TEST(pool_classes, 1)
SWEEP_TEST(arena, 1)
SWEEP_TEST(governance, 1)
SWEEP_TEST(tickets, 1)
SWEEP_TEST(report, 1)
SWEEP_TEST(deferred, 1)
SWEEP_TEST(process, 1)
SWEEP_TEST(kv_stable, 1)
SWEEP_TEST(kv_zero_tail, 1)
SWEEP_TEST(kv_bucket, 1)
SWEEP_TEST(kv_prefix, 1)
SWEEP_TEST(capture, 1)
SWEEP_TEST(streams, 1)

/* The runs the sweeps above would leave out for a known bug, swept anyway:
 * the workloads the region and KV rollback bugs were found in. */
Test(alloc_faults, known_bug_runs)
{
    include_known = 1;
    sweep_workload("region", wl_region, 1);
    sweep_workload("pool", wl_pool, 1);
    sweep_workload("kv_stable", wl_kv_stable, 1);
    sweep_workload("kv_zero_tail", wl_kv_zero_tail, 1);
}

/* A fresh CPU backend's first releases: a release must not need memory
 * (src/vmm/backends/cpu.c sets the hole slot aside when it carves the extent),
 * or a rollback or destroy would quarantine the granule. */
static void wl_cold_release(sweep *w, env *e)
{
    STEP(cpu_create(G, &e->backend[0]));
    STEP(region_create(e->backend[0], 4 * G, 0, NULL, &e->region[0]));
    STEP(ortmem_region_commit(e->region[0], 0, 3 * G));
    STEP(ortmem_region_decommit(e->region[0], 0, 3 * G));
    DONE();
}

Test(alloc_faults, cpu_release_needs_no_allocation)
{
    include_known = 1;
    sweep_workload("cold_release", wl_cold_release, 1);
}

/* A decommit undoes many a failed call (a swap-in's rollback decommits what it
 * committed) and a destroy must finish: neither may need host memory. */
Test(alloc_faults, decommit_and_destroy_need_no_allocation)
{
    ortmem_backend *b = NULL;
    OK(cpu_create(G, &b));
    ortmem_region *r = NULL;
    OK(region_create(b, 8 * G, 0, NULL, &r));
    OK(ortmem_region_commit(r, 0, 8 * G));
    ortmem_range ranges[] = {{0, G}, {3 * G, 2 * G}};
    ortmem_alloc_fault(1, 1);
    ortmem_status decommitted = ortmem_region_decommit_ranges(r, ranges, 2);
    char detail[256];
    snprintf(detail, sizeof detail, "%s", ortmem_last_error());
    ortmem_status destroyed = ortmem_region_destroy(r);
    uint64_t calls = 0, failed = 0;
    ortmem_alloc_counts(&calls, &failed);
    ortmem_alloc_fault(0, 0);
    cr_assert_eq(decommitted, ORTMEM_OK, "decommit without memory: %s (%s)",
                 ortmem_status_str(decommitted), detail);
    cr_assert_eq(destroyed, ORTMEM_OK, "destroy without memory: %s (%s)",
                 ortmem_status_str(destroyed), ortmem_last_error());
    cr_assert_eq(failed, 0, "%llu of %llu allocations were needed and failed",
                 (unsigned long long)failed, (unsigned long long)calls);
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.mapped_bytes, 0);
    cr_assert_eq(s.reserved_va_bytes, 0);
    cr_assert_eq(s.quarantined_granules, 0);
    cr_assert_eq(s.owned_bytes, s.pool_bytes);
    OK(ortmem_backend_destroy(b));
}
