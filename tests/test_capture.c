/* The capture gate and graph signatures (include/ortmem/capture.h), and the
 * per-granule mapping epoch they read (ortmem_region_range_state).
 *
 * Gate tests prove ordering with threads, the gate's own state counters and a
 * sequence stamp, never with sleeps: a thread is known to be waiting when the
 * gate counts it as waiting. Signature tests run on the CPU backend (64 KiB
 * granules) with a small KV cache. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "support.h"

#define G ((size_t)TEST_GRANULE)

static ortmem_capture_stats gate_stats(void)
{
    ortmem_capture_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    OK(ortmem_capture_stats_get(&s));
    return s;
}

/* Spins (yielding) until the gate reports what the test waits for. */
#define WAIT_UNTIL(cond)                                                                           \
    do {                                                                                           \
        while (!(cond))                                                                            \
            sched_yield();                                                                         \
    } while (0)

static _Atomic int stamp_clock;

/* ---- gate: single-thread rules ---- */

Test(capture_gate, begin_and_end_take_and_leave_the_gate, .timeout = 30)
{
    ortmem_capture_stats s0 = gate_stats();
    cr_assert_eq(ortmem_capture_active(), 0);
    OK(ortmem_capture_begin());
    cr_assert_neq(ortmem_capture_active(), 0);
    ortmem_capture_stats s1 = gate_stats();
    cr_assert_eq(s1.captures, s0.captures + 1);
    cr_assert_eq(s1.capture_waits, s0.capture_waits, "nothing held the gate: no wait");
    cr_assert_eq(s1.capture_active, 1);
    OK(ortmem_capture_end());
    cr_assert_eq(ortmem_capture_active(), 0);
    cr_assert_eq(gate_stats().capture_active, 0);
}

Test(capture_gate, nested_begin_on_one_thread_is_e_state_and_keeps_the_capture, .timeout = 30)
{
    OK(ortmem_capture_begin());
    EXPECT_STATUS(ortmem_capture_begin(), ORTMEM_E_STATE);
    cr_assert(strstr(ortmem_last_error(), "nested begin"), "%s", ortmem_last_error());
    cr_assert_neq(ortmem_capture_active(), 0);
    OK(ortmem_capture_end());
    EXPECT_STATUS(ortmem_capture_end(), ORTMEM_E_STATE);
}

Test(capture_gate, end_without_begin_is_e_state, .timeout = 30)
{
    ortmem_capture_stats s0 = gate_stats();
    EXPECT_STATUS(ortmem_capture_end(), ORTMEM_E_STATE);
    cr_assert(strstr(ortmem_last_error(), "end without begin"), "%s", ortmem_last_error());
    cr_assert_eq(gate_stats().captures, s0.captures);
}

static void *end_from_here(void *arg)
{
    ortmem_status *st = arg;
    st[0] = ortmem_capture_end();
    st[1] = strstr(ortmem_last_error(), "only the capturing thread") ? ORTMEM_OK : ORTMEM_E_STATE;
    return NULL;
}

Test(capture_gate, end_from_another_thread_is_e_state_and_changes_nothing, .timeout = 30)
{
    OK(ortmem_capture_begin());
    ortmem_status st[2] = {ORTMEM_OK, ORTMEM_OK};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, end_from_here, st), 0);
    pthread_join(t, NULL);
    cr_assert_eq(st[0], ORTMEM_E_STATE, "%s", ortmem_status_str(st[0]));
    cr_assert_eq(st[1], ORTMEM_OK, "the detail names the rule");
    cr_assert_neq(ortmem_capture_active(), 0, "the capture is still held");
    OK(ortmem_capture_end());
}

Test(capture_gate, shared_leave_without_enter_is_e_state, .timeout = 30)
{
    EXPECT_STATUS(ortmem_capture_shared_leave(), ORTMEM_E_STATE);
    cr_assert(strstr(ortmem_last_error(), "leave without enter"), "%s", ortmem_last_error());
    ortmem_capture_shared_enter();
    OK(ortmem_capture_shared_leave());
    EXPECT_STATUS(ortmem_capture_shared_leave(), ORTMEM_E_STATE);
    cr_assert_eq(gate_stats().shared_active, 0);
}

Test(capture_gate, begin_inside_an_own_shared_section_is_e_state_instead_of_a_self_deadlock,
     .timeout = 30)
{
    ortmem_capture_shared_enter();
    EXPECT_STATUS(ortmem_capture_begin(), ORTMEM_E_STATE);
    cr_assert(strstr(ortmem_last_error(), "wait for itself"), "%s", ortmem_last_error());
    cr_assert_eq(ortmem_capture_active(), 0);
    OK(ortmem_capture_shared_leave());
    OK(ortmem_capture_begin());
    OK(ortmem_capture_end());
}

Test(capture_gate, shared_sections_nest_and_only_the_outermost_takes_the_gate, .timeout = 30)
{
    ortmem_capture_stats s0 = gate_stats();
    ortmem_capture_shared_enter();
    ortmem_capture_shared_enter();
    OK(ortmem_capture_shared_try_enter());
    ortmem_capture_stats s1 = gate_stats();
    cr_assert_eq(s1.shared_entered, s0.shared_entered + 1);
    cr_assert_eq(s1.shared_nested, s0.shared_nested + 2);
    cr_assert_eq(s1.shared_active, 1);
    OK(ortmem_capture_shared_leave());
    OK(ortmem_capture_shared_leave());
    cr_assert_eq(gate_stats().shared_active, 1, "the outermost section is still held");
    OK(ortmem_capture_shared_leave());
    cr_assert_eq(gate_stats().shared_active, 0);
}

Test(capture_gate, the_capturing_thread_bypasses_the_gate, .timeout = 30)
{
    ortmem_capture_stats s0 = gate_stats();
    OK(ortmem_capture_begin());
    /* Would wait forever (the capture holds the gate) without the bypass. */
    ortmem_capture_shared_enter();
    OK(ortmem_capture_shared_try_enter());
    ortmem_capture_stats s1 = gate_stats();
    cr_assert_eq(s1.shared_bypassed, s0.shared_bypassed + 1);
    cr_assert_eq(s1.shared_nested, s0.shared_nested + 1);
    cr_assert_eq(s1.shared_entered, s0.shared_entered, "the gate was not taken");
    cr_assert_eq(s1.shared_active, 0);
    cr_assert_eq(s1.shared_waits, s0.shared_waits);
    OK(ortmem_capture_shared_leave());
    OK(ortmem_capture_shared_leave());
    OK(ortmem_capture_end());
}

Test(capture_gate, a_bypassed_section_that_outlives_its_capture_holds_the_gate, .timeout = 30)
{
    OK(ortmem_capture_begin());
    ortmem_capture_shared_enter(); /* bypassed */
    OK(ortmem_capture_end());
    cr_assert_eq(gate_stats().shared_active, 1, "the section now counts for later captures");
    OK(ortmem_capture_shared_leave());
    cr_assert_eq(gate_stats().shared_active, 0);
}

/* ---- gate: threads ---- */

typedef struct capture_thread {
    pthread_t thread;
    _Atomic int begun_at; /* stamp after begin returned; 0 = not yet */
    _Atomic int release;  /* set by the test: end the capture */
    _Atomic int ended;
    ortmem_status begin_status, end_status;
} capture_thread;

static void *capture_body(void *arg)
{
    capture_thread *c = arg;
    c->begin_status = ortmem_capture_begin();
    atomic_store(&c->begun_at, atomic_fetch_add(&stamp_clock, 1) + 1);
    WAIT_UNTIL(atomic_load(&c->release));
    c->end_status = ortmem_capture_end();
    atomic_store(&c->ended, 1);
    return NULL;
}

typedef struct shared_thread {
    pthread_t thread;
    _Atomic int entered_at;
    _Atomic int capture_active_inside; /* what the gate said inside the section */
} shared_thread;

static void *shared_body(void *arg)
{
    shared_thread *s = arg;
    ortmem_capture_shared_enter();
    atomic_store(&s->entered_at, atomic_fetch_add(&stamp_clock, 1) + 1);
    atomic_store(&s->capture_active_inside, ortmem_capture_active());
    (void)ortmem_capture_shared_leave();
    return NULL;
}

static void *try_body(void *arg)
{
    ortmem_status *st = arg;
    *st = ortmem_capture_shared_try_enter();
    if (*st == ORTMEM_OK)
        (void)ortmem_capture_shared_leave();
    return NULL;
}

Test(capture_gate, a_waiting_capture_blocks_new_shared_sections_and_goes_first, .timeout = 60)
{
    ortmem_capture_stats s0 = gate_stats();
    /* This thread holds a shared section: the capture must wait for it. */
    ortmem_capture_shared_enter();
    capture_thread c = {0};
    cr_assert_eq(pthread_create(&c.thread, NULL, capture_body, &c), 0);
    WAIT_UNTIL(gate_stats().captures_waiting == 1);
    cr_assert_eq(atomic_load(&c.begun_at), 0, "the capture waits for the held section");

    /* Writer preference: another thread's new section is refused / waits. */
    ortmem_status tried = ORTMEM_OK;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, try_body, &tried), 0);
    pthread_join(t, NULL);
    cr_assert_eq(tried, ORTMEM_E_BUSY, "try-enter behind a waiting capture: %s",
                 ortmem_status_str(tried));
    shared_thread s = {0};
    cr_assert_eq(pthread_create(&s.thread, NULL, shared_body, &s), 0);
    WAIT_UNTIL(gate_stats().shared_waiting == 1);
    cr_assert_eq(atomic_load(&s.entered_at), 0);

    /* Nested sections of the holder do not wait (no self-deadlock). */
    OK(ortmem_capture_shared_try_enter());
    ortmem_capture_shared_enter();
    OK(ortmem_capture_shared_leave());
    OK(ortmem_capture_shared_leave());

    /* Leaving lets the capture in; the waiting section stays out. */
    OK(ortmem_capture_shared_leave());
    WAIT_UNTIL(atomic_load(&c.begun_at) != 0);
    OK(c.begin_status);
    ortmem_capture_stats mid = gate_stats();
    cr_assert_eq(mid.capture_active, 1);
    cr_assert_eq(mid.shared_active, 0, "no shared section inside the capture");
    cr_assert_eq(mid.shared_waiting, 1);
    cr_assert_eq(atomic_load(&s.entered_at), 0, "the section still waits");

    atomic_store(&c.release, 1);
    pthread_join(c.thread, NULL);
    pthread_join(s.thread, NULL);
    OK(c.end_status);
    cr_assert_lt(atomic_load(&c.begun_at), atomic_load(&s.entered_at),
                 "the capture (waiting first) went before the section");
    cr_assert_eq(atomic_load(&s.capture_active_inside), 0);
    ortmem_capture_stats s1 = gate_stats();
    cr_assert_eq(s1.capture_waits, s0.capture_waits + 1);
    cr_assert_eq(s1.shared_waits, s0.shared_waits + 1);
    cr_assert_eq(s1.shared_refused, s0.shared_refused + 1);
    cr_assert_eq(s1.shared_active, 0);
    cr_assert_eq(s1.captures_waiting, 0);
}

Test(capture_gate, a_second_capture_waits_for_the_first, .timeout = 60)
{
    capture_thread a = {0}, b = {0};
    cr_assert_eq(pthread_create(&a.thread, NULL, capture_body, &a), 0);
    WAIT_UNTIL(atomic_load(&a.begun_at) != 0);
    cr_assert_eq(pthread_create(&b.thread, NULL, capture_body, &b), 0);
    WAIT_UNTIL(gate_stats().captures_waiting == 1);
    cr_assert_eq(atomic_load(&b.begun_at), 0);
    atomic_store(&a.release, 1);
    WAIT_UNTIL(atomic_load(&b.begun_at) != 0);
    cr_assert_lt(atomic_load(&a.begun_at), atomic_load(&b.begun_at));
    cr_assert(atomic_load(&a.ended));
    atomic_store(&b.release, 1);
    pthread_join(a.thread, NULL);
    pthread_join(b.thread, NULL);
    OK(a.begin_status);
    OK(b.begin_status);
    OK(a.end_status);
    OK(b.end_status);
}

/* ---- deferral ---- */

typedef struct deferred_probe {
    _Atomic int runs;
    _Atomic int order; /* stamp when it ran */
    _Atomic int capture_active_then;
    pthread_t ran_on;
} deferred_probe;

static void probe_fn(void *arg)
{
    deferred_probe *p = arg;
    p->ran_on = pthread_self();
    atomic_store(&p->capture_active_then, ortmem_capture_active());
    atomic_store(&p->order, atomic_fetch_add(&stamp_clock, 1) + 1);
    atomic_fetch_add(&p->runs, 1);
}

Test(capture_gate, defer_without_a_capture_runs_at_once_on_the_caller, .timeout = 30)
{
    ortmem_capture_stats s0 = gate_stats();
    deferred_probe p = {0};
    OK(ortmem_capture_defer(probe_fn, &p));
    cr_assert_eq(atomic_load(&p.runs), 1);
    cr_assert(pthread_equal(p.ran_on, pthread_self()));
    ortmem_capture_stats s1 = gate_stats();
    cr_assert_eq(s1.deferred_immediate, s0.deferred_immediate + 1);
    cr_assert_eq(s1.deferred_queued, s0.deferred_queued);
    EXPECT_STATUS(ortmem_capture_defer(NULL, NULL), ORTMEM_E_INVALID);
}

Test(capture_gate, defer_during_a_capture_runs_after_end_on_the_ending_thread, .timeout = 60)
{
    ortmem_capture_stats s0 = gate_stats();
    capture_thread c = {0};
    cr_assert_eq(pthread_create(&c.thread, NULL, capture_body, &c), 0);
    WAIT_UNTIL(atomic_load(&c.begun_at) != 0);
    deferred_probe p[3];
    memset(p, 0, sizeof p);
    for (int i = 0; i < 3; i++)
        OK(ortmem_capture_defer(probe_fn, &p[i]));
    for (int i = 0; i < 3; i++)
        cr_assert_eq(atomic_load(&p[i].runs), 0, "queued, not run, while the capture is active");
    cr_assert_eq(gate_stats().deferred_pending, 3);
    atomic_store(&c.release, 1);
    pthread_join(c.thread, NULL);
    OK(c.end_status);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(atomic_load(&p[i].runs), 1, "item %d ran exactly once", i);
        cr_assert(pthread_equal(p[i].ran_on, c.thread), "item %d ran on the ending thread", i);
        cr_assert_eq(atomic_load(&p[i].capture_active_then), 0, "after the gate was left");
        cr_assert_gt(atomic_load(&p[i].order), atomic_load(&c.begun_at));
        if (i)
            cr_assert_gt(atomic_load(&p[i].order), atomic_load(&p[i - 1].order), "in order");
    }
    ortmem_capture_stats s1 = gate_stats();
    cr_assert_eq(s1.deferred_queued, s0.deferred_queued + 3);
    cr_assert_eq(s1.deferred_run, s0.deferred_run + 3);
    cr_assert_eq(s1.deferred_pending, 0);
}

Test(capture_gate, the_capturing_thread_own_deferrals_are_queued_too, .timeout = 30)
{
    deferred_probe p = {0};
    OK(ortmem_capture_begin());
    OK(ortmem_capture_defer(probe_fn, &p));
    cr_assert_eq(atomic_load(&p.runs), 0, "its driver calls would land inside the capture");
    OK(ortmem_capture_end());
    cr_assert_eq(atomic_load(&p.runs), 1);
    cr_assert_eq(atomic_load(&p.capture_active_then), 0);
}

Test(capture_gate, defer_behind_a_waiting_capture_does_not_block, .timeout = 60)
{
    ortmem_capture_shared_enter();
    capture_thread c = {0};
    cr_assert_eq(pthread_create(&c.thread, NULL, capture_body, &c), 0);
    WAIT_UNTIL(gate_stats().captures_waiting == 1);
    deferred_probe p = {0};
    OK(ortmem_capture_defer(probe_fn, &p)); /* queued: running it now could wait */
    cr_assert_eq(atomic_load(&p.runs), 0);
    OK(ortmem_capture_shared_leave());
    atomic_store(&c.release, 1);
    pthread_join(c.thread, NULL);
    cr_assert_eq(atomic_load(&p.runs), 1);
    cr_assert(pthread_equal(p.ran_on, c.thread));
}

/* ---- the mapping epoch (vmm) ---- */

static ortmem_range_state range_state(ortmem_region *r, size_t offset, size_t len)
{
    ortmem_range_state s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    OK(ortmem_region_range_state(r, offset, len, &s));
    return s;
}

Test(range_state, epochs_count_every_mapping_change_and_nothing_else)
{
    ortmem_backend *b = test_backend();
    ortmem_region *r = region_on(b, 8 * G, 0);
    ortmem_range_state s = range_state(r, 0, 8 * G);
    cr_assert_eq(s.granules, 8);
    cr_assert_eq(s.unmapped_granules, 8);
    cr_assert_eq(s.first_unmapped_offset, 0);
    cr_assert_eq(s.all_mapped, 0);
    cr_assert_eq(s.epoch_sum, 0);

    OK(ortmem_region_commit(r, 0, 2 * G));
    s = range_state(r, 0, 2 * G);
    cr_assert(s.all_mapped);
    cr_assert_eq(s.epoch_sum, 2, "one map per granule");
    cr_assert_eq(s.first_unmapped_offset, SIZE_MAX);
    s = range_state(r, G / 2, G); /* a sub-granule range touches both */
    cr_assert_eq(s.granules, 2);
    cr_assert_eq(s.epoch_sum, 2);

    OK(ortmem_region_commit(r, 4 * G, G)); /* other granules */
    cr_assert_eq(range_state(r, 0, 2 * G).epoch_sum, 2);
    OK(ortmem_region_protect(r, 0, 2 * G, ORTMEM_ACCESS_READ)); /* access only */
    cr_assert_eq(range_state(r, 0, 2 * G).epoch_sum, 2);
    OK(ortmem_region_protect(r, 0, 2 * G, ORTMEM_ACCESS_READ_WRITE));

    OK(ortmem_region_decommit(r, G, G));
    s = range_state(r, 0, 2 * G);
    cr_assert_eq(s.epoch_sum, 3);
    cr_assert_eq(s.unmapped_granules, 1);
    cr_assert_eq(s.first_unmapped_offset, G);
    OK(ortmem_region_commit(r, G, G));
    cr_assert_eq(range_state(r, 0, 2 * G).epoch_sum, 4);

    /* share maps into the destination; cow swaps the shared granule once. */
    ortmem_region *d = region_on(b, 2 * G, 0);
    OK(ortmem_region_share(d, 0, r, 0, G, ORTMEM_ACCESS_READ));
    cr_assert_eq(range_state(d, 0, G).epoch_sum, 1);
    cr_assert_eq(range_state(r, 0, G).epoch_sum, 1, "the source's mapping did not change");
    OK(ortmem_region_protect(d, 0, G, ORTMEM_ACCESS_READ_WRITE));
    OK(ortmem_region_cow(d, 0, G));
    cr_assert_eq(range_state(d, 0, G).epoch_sum, 2);
    cr_assert_eq(range_state(r, 0, G).epoch_sum, 1);

    cr_assert_neq(range_state(r, 0, G).region_id, range_state(d, 0, G).region_id);
    ortmem_range_state bad;
    memset(&bad, 0, sizeof bad);
    EXPECT_STATUS(ortmem_region_range_state(r, 0, 0, &bad), ORTMEM_E_INVALID);
    bad.struct_size = sizeof bad;
    EXPECT_STATUS(ortmem_region_range_state(r, 0, 0, &bad), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_region_range_state(r, 8 * G, 1, &bad), ORTMEM_E_RANGE);
    OK(ortmem_region_destroy(d));
    OK(ortmem_region_destroy(r));
    EXPECT_STATUS(ortmem_region_range_state(r, 0, 1, &bad), ORTMEM_E_HANDLE);
    OK(ortmem_backend_destroy(b));
}

Test(range_state, failed_calls_leave_the_epochs_alone)
{
    ortmem_backend *cpu = test_backend();
    ortmem_backend *f = NULL;
    OK(ortmem_fault_backend_create(cpu, NULL, &f));
    ortmem_region *r = region_on(f, 4 * G, 0);
    OK(ortmem_region_commit(r, 0, G));
    OK(ortmem_region_commit(r, 2 * G, G));
    uint64_t before = range_state(r, 0, 4 * G).epoch_sum;
    cr_assert_eq(before, 2);

    /* A commit whose second map fails rolls the first back. */
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = ORTMEM_OP_MAP;
    fo.fail_at = 2;
    OK(ortmem_fault_backend_arm(f, &fo));
    EXPECT_STATUS(ortmem_region_commit(r, G, 3 * G - G / 2), ORTMEM_E_BACKEND);
    cr_assert_eq(range_state(r, 0, 4 * G).epoch_sum, before);

    /* A decommit whose second unmap fails maps the first run back. */
    fo.op = ORTMEM_OP_UNMAP;
    OK(ortmem_fault_backend_arm(f, &fo));
    EXPECT_STATUS(ortmem_region_decommit(r, 0, 4 * G), ORTMEM_E_BACKEND);
    ortmem_range_state s = range_state(r, 0, 4 * G);
    cr_assert_eq(s.epoch_sum, before, "restored mappings keep their epoch");
    cr_assert_eq(s.unmapped_granules, 2);

    fo.fail_at = 0;
    OK(ortmem_fault_backend_arm(f, &fo));
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(f));
    OK(ortmem_backend_destroy(cpu));
}

/* ---- graph signatures over regions ---- */

static ortmem_graph_verdict check(ortmem_graph_signature *sig, char *reason, size_t cap)
{
    ortmem_graph_verdict v = ORTMEM_GRAPH_VERDICT_COUNT;
    OK(ortmem_graph_signature_check(sig, reason, cap, &v));
    /* Whatever the reason says, a short buffer is truncated, never overrun. */
    char tiny[8];
    memset(tiny, 'x', sizeof tiny);
    ortmem_graph_verdict w = ORTMEM_GRAPH_VERDICT_COUNT;
    OK(ortmem_graph_signature_check(sig, tiny, 5, &w));
    cr_assert_eq(w, v);
    cr_assert_eq(tiny[4], '\0');
    cr_assert_eq(tiny[5], 'x', "the reason ran past its capacity");
    return v;
}

#define EXPECT_VERDICT(sig, want, needle)                                                          \
    do {                                                                                           \
        char why_[512];                                                                            \
        ortmem_graph_verdict v_ = check((sig), why_, sizeof why_);                                 \
        cr_assert_eq(v_, (want), "verdict %s (want %s): %s", ortmem_graph_verdict_name(v_),        \
                     ortmem_graph_verdict_name(want), why_);                                       \
        cr_assert(strstr(why_, (needle)), "reason '%s' lacks '%s'", why_, (needle));               \
    } while (0)

typedef struct sig_env {
    ortmem_backend *b;
    ortmem_region *r;
    ortmem_graph_signature *sig;
} sig_env;

/* A region of 8 granules with [0, 2G) committed and recorded. */
static sig_env sig_open(void)
{
    sig_env e;
    e.b = test_backend();
    e.r = region_on(e.b, 8 * G, 0);
    OK(ortmem_region_commit(e.r, 0, 2 * G));
    OK(ortmem_graph_signature_create(&e.sig));
    OK(ortmem_graph_signature_add_range(e.sig, e.r, 0, 2 * G));
    return e;
}

static void sig_close(sig_env *e)
{
    OK(ortmem_graph_signature_destroy(e->sig));
    if (e->r)
        OK(ortmem_region_destroy(e->r));
    OK(ortmem_backend_destroy(e->b));
}

Test(graph_signature, keeps_after_a_commit_of_other_granules)
{
    sig_env e = sig_open();
    EXPECT_VERDICT(e.sig, ORTMEM_GRAPH_KEEP, "unchanged since capture (1 range, 0 bindings)");
    for (int i = 0; i < 20; i++) /* past the first growth of the entry array */
        OK(ortmem_graph_signature_add_range(e.sig, e.r, (size_t)i * 64, G + 64));
    EXPECT_VERDICT(e.sig, ORTMEM_GRAPH_KEEP, "unchanged since capture (21 ranges, 0 bindings)");
    OK(ortmem_region_commit(e.r, 4 * G, 2 * G));
    OK(ortmem_region_decommit(e.r, 4 * G, G));
    EXPECT_VERDICT(e.sig, ORTMEM_GRAPH_KEEP, "unchanged since capture");
    sig_close(&e);
}

Test(graph_signature, keeps_after_decommit_and_recommit_of_the_same_range_and_names_the_remap)
{
    sig_env e = sig_open();
    uint8_t *base = ortmem_region_base(e.r);
    fill_pattern(base, 2 * G, 5);
    OK(ortmem_region_decommit(e.r, 0, 2 * G));
    OK(ortmem_region_commit(e.r, 0, 2 * G));
    char why[512];
    cr_assert_eq(check(e.sig, why, sizeof why), ORTMEM_GRAPH_KEEP, "%s", why);
    cr_assert(strstr(why, "remapped since capture (4 mapping changes at the same VA)"), "%s", why);
    cr_assert(strstr(why, "kept"), "%s", why);
    sig_close(&e);
}

Test(graph_signature, invalidates_after_a_decommit_and_names_the_granule)
{
    sig_env e = sig_open();
    OK(ortmem_region_decommit(e.r, G, G));
    char want[128];
    snprintf(want, sizeof want, "granule at offset %zu is unmapped (evicted since capture)", G);
    EXPECT_VERDICT(e.sig, ORTMEM_GRAPH_INVALIDATE, want);
    EXPECT_VERDICT(e.sig, ORTMEM_GRAPH_INVALIDATE, "1 of 2 granules");
    /* Recommitted before replay: kept again (a remap). */
    OK(ortmem_region_commit(e.r, G, G));
    EXPECT_VERDICT(e.sig, ORTMEM_GRAPH_KEEP, "remapped");
    sig_close(&e);
}

Test(graph_signature, invalidates_when_the_region_is_destroyed)
{
    sig_env e = sig_open();
    OK(ortmem_region_destroy(e.r));
    EXPECT_VERDICT(e.sig, ORTMEM_GRAPH_INVALIDATE, "destroyed");
    /* A new region (perhaps at the same address) is not the old one. */
    for (int i = 0; i < 4; i++) {
        ortmem_region *n = region_on(e.b, (size_t)(i + 1) * 4 * G, 0);
        OK(ortmem_region_commit(n, 0, ortmem_region_size(n)));
        EXPECT_VERDICT(e.sig, ORTMEM_GRAPH_INVALIDATE, "destroyed");
        OK(ortmem_region_destroy(n));
    }
    e.r = NULL;
    sig_close(&e);
}

/* A region created after others were destroyed often gets one of their handle
 * addresses (glibc reuses the freed chunks): the handle registry alone would
 * take it for the old region. Same size with the same granules committed
 * (equal epoch sums), then one granule (the recorded range no longer fits). */
Test(graph_signature, a_new_region_at_a_recycled_handle_address_is_not_the_old_one)
{
    enum { N = 32 };
    ortmem_backend *b = test_backend();
    ortmem_region *old[N], *fresh[N];
    ortmem_graph_signature *sig[N];
    for (int i = 0; i < N; i++) {
        old[i] = region_on(b, 8 * G, 0);
        OK(ortmem_region_commit(old[i], 0, 2 * G));
        OK(ortmem_graph_signature_create(&sig[i]));
        OK(ortmem_graph_signature_add_range(sig[i], old[i], 0, 2 * G));
    }
    for (int i = 0; i < N; i++)
        OK(ortmem_region_destroy(old[i]));
    for (int small = 0; small < 2; small++) {
        int recycled = 0;
        for (int i = 0; i < N; i++) {
            fresh[i] = region_on(b, small ? G : 8 * G, 0);
            OK(ortmem_region_commit(fresh[i], 0, small ? G : 2 * G));
            for (int j = 0; j < N; j++)
                recycled += fresh[i] == old[j];
        }
        for (int i = 0; i < N; i++)
            EXPECT_VERDICT(sig[i], ORTMEM_GRAPH_INVALIDATE, "destroyed");
        for (int i = 0; i < N; i++)
            OK(ortmem_region_destroy(fresh[i]));
        if (!recycled)
            cr_skip_test("no handle address was recycled (%s regions)", small ? "small" : "equal");
    }
    for (int i = 0; i < N; i++)
        OK(ortmem_graph_signature_destroy(sig[i]));
    OK(ortmem_backend_destroy(b));
}

Test(graph_signature, counts_further_causes_and_reports_the_first)
{
    sig_env e = sig_open();
    ortmem_region *r2 = region_on(e.b, 2 * G, 0);
    OK(ortmem_region_commit(r2, 0, 2 * G));
    OK(ortmem_graph_signature_add_range(e.sig, r2, 0, G));
    OK(ortmem_graph_signature_add_range(e.sig, r2, G, G));
    OK(ortmem_region_decommit(e.r, 0, G));
    OK(ortmem_region_destroy(r2));
    char why[512];
    cr_assert_eq(check(e.sig, why, sizeof why), ORTMEM_GRAPH_INVALIDATE);
    cr_assert(strstr(why, "granule at offset 0 is unmapped"), "%s", why);
    cr_assert(strstr(why, "(and 2 more causes)"), "%s", why);
    /* A short buffer is truncated, not overrun. */
    char tiny[8];
    memset(tiny, 'x', sizeof tiny);
    cr_assert_eq(check(e.sig, tiny, 5), ORTMEM_GRAPH_INVALIDATE);
    cr_assert_eq(tiny[4], '\0');
    cr_assert_eq(tiny[5], 'x');
    cr_assert_eq(check(e.sig, NULL, 0), ORTMEM_GRAPH_INVALIDATE);
    sig_close(&e);
}

Test(graph_signature, bad_input_is_a_status)
{
    sig_env e = sig_open();
    ortmem_graph_verdict v;
    char why[64];
    EXPECT_STATUS(ortmem_graph_signature_create(NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_graph_signature_check(e.sig, why, sizeof why, NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_graph_signature_check(e.sig, NULL, 4, &v), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_graph_signature_add_range(e.sig, e.r, 2 * G, G), ORTMEM_E_STATE);
    cr_assert(strstr(ortmem_last_error(), "mapped memory only"), "%s", ortmem_last_error());
    EXPECT_STATUS(ortmem_graph_signature_add_range(e.sig, e.r, 0, 0), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_graph_signature_add_range(e.sig, e.r, 8 * G, 1), ORTMEM_E_RANGE);
    EXPECT_STATUS(ortmem_graph_signature_add_range(e.sig, (ortmem_region *)e.b, 0, G),
                  ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_graph_signature_add_range((ortmem_graph_signature *)e.r, e.r, 0, G),
                  ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_graph_signature_add_binding(e.sig, NULL, 0, 0, NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_graph_signature_add_binding(e.sig, NULL, 0, 2, NULL), ORTMEM_E_INVALID);
    cr_assert_str_eq(ortmem_graph_verdict_name(ORTMEM_GRAPH_KEEP), "keep");
    cr_assert_str_eq(ortmem_graph_verdict_name(ORTMEM_GRAPH_INVALIDATE), "invalidate");
    cr_assert_null(ortmem_graph_verdict_name(ORTMEM_GRAPH_VERDICT_COUNT));
    ortmem_graph_signature *gone = e.sig;
    OK(ortmem_graph_signature_destroy(gone));
    EXPECT_STATUS(ortmem_graph_signature_destroy(gone), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_graph_signature_check(gone, why, sizeof why, &v), ORTMEM_E_HANDLE);
    OK(ortmem_graph_signature_create(&e.sig));
    sig_close(&e);
}

/* ---- graph signatures over KV bindings ---- */

typedef struct kv_env {
    ortmem_backend *b, *host;
    ortmem_authority *a;
    ortmem_kv_cache *cache;
    ortmem_kv_seq *seq;
    ortmem_graph_signature *sig;
} kv_env;

static kv_env kv_open(ortmem_kv_strategy strategy, int with_host)
{
    kv_env e;
    memset(&e, 0, sizeof e);
    e.b = test_backend();
    if (with_host)
        e.host = test_backend();
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = 64 * MiB;
    OK(ortmem_authority_create(e.b, &ao, &e.a));
    ortmem_kv_cache_options o = ORTMEM_KV_CACHE_OPTIONS_INIT;
    o.geometry.layers = 2;
    o.geometry.kv_heads = 2;
    o.geometry.head_dim = 64;
    o.geometry.dtype = ORTMEM_KV_F16;
    o.geometry.layout = ORTMEM_KV_SEQ_MAJOR;
    o.strategy = strategy;
    o.max_context = 2048;
    o.min_bucket = 16;
    o.host_backend = e.host;
    OK(ortmem_kv_cache_create(e.a, &o, &e.cache));
    OK(ortmem_kv_seq_create(e.cache, &e.seq));
    OK(ortmem_kv_seq_append(e.seq, 10));
    OK(ortmem_graph_signature_create(&e.sig));
    /* The graph holds K and V of layer 1, read before capture. */
    for (int v = 0; v < 2; v++) {
        ortmem_kv_binding kb = {.struct_size = sizeof kb};
        OK(ortmem_kv_seq_binding(e.seq, 1, v, &kb));
        OK(ortmem_graph_signature_add_binding(e.sig, e.seq, 1, v, &kb));
    }
    OK(ortmem_graph_signature_add_binding(e.sig, e.seq, 0, 0, NULL)); /* read now */
    return e;
}

static void kv_close(kv_env *e)
{
    OK(ortmem_graph_signature_destroy(e->sig));
    if (e->seq)
        OK(ortmem_kv_seq_destroy(e->seq));
    OK(ortmem_kv_cache_destroy(e->cache));
    OK(ortmem_authority_destroy(e->a));
    OK(ortmem_backend_destroy(e->b));
    if (e->host)
        OK(ortmem_backend_destroy(e->host));
}

Test(graph_signature, keeps_after_a_stable_append)
{
    kv_env e = kv_open(ORTMEM_KV_STABLE, 0);
    EXPECT_VERDICT(e.sig, ORTMEM_GRAPH_KEEP, "unchanged since capture (0 ranges, 3 bindings)");
    OK(ortmem_kv_seq_append(e.seq, 1500)); /* commits new granules, moves nothing */
    EXPECT_VERDICT(e.sig, ORTMEM_GRAPH_KEEP, "unchanged since capture");
    OK(ortmem_kv_seq_truncate(e.seq, 5));
    EXPECT_VERDICT(e.sig, ORTMEM_GRAPH_KEEP, "unchanged since capture");
    kv_close(&e);
}

Test(graph_signature, invalidates_after_a_bucket_append_that_moves_the_binding)
{
    kv_env e = kv_open(ORTMEM_KV_BUCKET, 0);
    ortmem_kv_binding kb = {.struct_size = sizeof kb};
    OK(ortmem_kv_seq_binding(e.seq, 1, 0, &kb));
    cr_assert_eq(kb.generation, 1, "the first append placed the sequence in a bucket");
    OK(ortmem_kv_seq_append(e.seq, 6)); /* 16 tokens: still the first bucket */
    EXPECT_VERDICT(e.sig, ORTMEM_GRAPH_KEEP, "unchanged since capture");
    OK(ortmem_kv_seq_append(e.seq, 1)); /* 17: the next bucket, copied */
    EXPECT_VERDICT(e.sig, ORTMEM_GRAPH_INVALIDATE,
                   "binding layer 1 K generation 1 -> 2: bucket growth moved the pointer");
    EXPECT_VERDICT(e.sig, ORTMEM_GRAPH_INVALIDATE, "(and 2 more causes)");
    kv_close(&e);
}

Test(graph_signature, invalidates_when_the_sequence_is_destroyed_or_swapped_out)
{
    kv_env e = kv_open(ORTMEM_KV_STABLE, 1);
    OK(ortmem_kv_seq_swap_out(e.seq));
    EXPECT_VERDICT(e.sig, ORTMEM_GRAPH_INVALIDATE,
                   "binding layer 1 K: the sequence is swapped out");
    OK(ortmem_kv_seq_swap_in(e.seq)); /* back at the same VA */
    EXPECT_VERDICT(e.sig, ORTMEM_GRAPH_KEEP, "unchanged since capture");
    OK(ortmem_kv_seq_destroy(e.seq));
    e.seq = NULL;
    EXPECT_VERDICT(e.sig, ORTMEM_GRAPH_INVALIDATE, "binding layer 1 K: sequence destroyed");
    kv_close(&e);
}

Test(graph_signature, a_binding_without_memory_cannot_be_recorded)
{
    kv_env e = kv_open(ORTMEM_KV_BUCKET, 0);
    ortmem_kv_seq *fresh = NULL;
    OK(ortmem_kv_seq_create(e.cache, &fresh)); /* a bucket sequence before its first append */
    EXPECT_STATUS(ortmem_graph_signature_add_binding(e.sig, fresh, 0, 0, NULL), ORTMEM_E_STATE);
    EXPECT_STATUS(ortmem_graph_signature_add_binding(e.sig, fresh, 9, 0, NULL), ORTMEM_E_RANGE);
    ortmem_kv_binding small = {.struct_size = 8};
    EXPECT_STATUS(ortmem_graph_signature_add_binding(e.sig, e.seq, 0, 0, &small), ORTMEM_E_INVALID);
    OK(ortmem_kv_seq_destroy(fresh));
    kv_close(&e);
}
