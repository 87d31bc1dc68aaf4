/* The process-global capture gate: a writer-preferring reader/writer gate
 * whose readers are driver calls that synchronize the device (shared
 * sections) and whose writer is a stream capture.
 *
 * One mutex guards the state; shared sections wait on shared_cv, captures on
 * capture_cv. Per thread: the nesting depth of its shared sections, whether
 * the outermost one bypassed the gate, and whether it holds the capture. */
#include "core/gate.h"
#include "core/alloc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <ortmem/gate.h>

#include "core/counter.h"
#include "core/error.h"

typedef struct om_deferred_call {
    struct om_deferred_call *next;
    void (*fn)(void *arg);
    void *arg;
} om_deferred_call;

static pthread_mutex_t om_gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t om_shared_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t om_capture_cv = PTHREAD_COND_INITIALIZER;

/* State (gate lock). */
static uint64_t om_shared_active;
static uint64_t om_shared_waiting;
static uint64_t om_captures_waiting;
static bool om_capture_held;
static unsigned om_capture_owner; /* thread number of the capturing thread */
static om_deferred_call *om_queue_head, *om_queue_tail;
static uint64_t om_queue_len;

/* Counters (atomic, so stats and the lock-free nested path need no lock). */
static om_counter om_c_entered, om_c_nested, om_c_bypassed, om_c_shared_waits, om_c_refused,
    om_c_captures, om_c_capture_waits, om_c_queued, om_c_run, om_c_immediate, om_c_saturations;

/* Per thread. */
static _Thread_local unsigned om_tl_depth;  /* shared sections held, nested */
static _Thread_local bool om_tl_bypassed;   /* the outermost one bypassed the gate */
static _Thread_local bool om_tl_capturing;  /* this thread holds the capture */
static _Thread_local unsigned om_tl_number; /* for messages; 0 = not assigned yet */
static _Atomic unsigned om_thread_numbers;

static void count(om_counter *c)
{
    om_counter_add(c, 1, &om_c_saturations);
}

static unsigned thread_number(void)
{
    if (om_tl_number == 0)
        om_tl_number = atomic_fetch_add(&om_thread_numbers, 1) + 1;
    return om_tl_number;
}

/* A capture can take the gate: none held, no shared section. */
static bool gate_free_for_capture(void)
{
    return !om_capture_held && om_shared_active == 0;
}

/* A new shared section must wait: a capture holds the gate or waits for it. */
static bool shared_must_wait(void)
{
    return om_capture_held || om_captures_waiting > 0;
}

/* The nested and bypass paths; true when the section is entered without the gate. */
static bool shared_enter_local(void)
{
    if (om_tl_depth > 0) {
        om_tl_depth++;
        count(&om_c_nested);
        return true;
    }
    if (om_tl_capturing) {
        /* Only this thread clears om_tl_capturing, so no lock is needed. */
        om_tl_depth = 1;
        om_tl_bypassed = true;
        count(&om_c_bypassed);
        return true;
    }
    return false;
}

void om_capture_shared_enter(void)
{
    if (shared_enter_local())
        return;
    pthread_mutex_lock(&om_gate_lock);
    if (shared_must_wait()) {
        count(&om_c_shared_waits);
        om_shared_waiting++;
        while (shared_must_wait())
            pthread_cond_wait(&om_shared_cv, &om_gate_lock);
        om_shared_waiting--;
    }
    om_shared_active++;
    count(&om_c_entered);
    pthread_mutex_unlock(&om_gate_lock);
    om_tl_depth = 1;
    om_tl_bypassed = false;
}

static bool shared_leave(void)
{
    if (om_tl_depth == 0)
        return false;
    if (--om_tl_depth > 0)
        return true;
    if (om_tl_bypassed) {
        om_tl_bypassed = false;
        return true;
    }
    pthread_mutex_lock(&om_gate_lock);
    om_shared_active--;
    if (om_shared_active == 0 && om_captures_waiting > 0)
        pthread_cond_broadcast(&om_capture_cv);
    pthread_mutex_unlock(&om_gate_lock);
    return true;
}

void om_capture_shared_leave(void)
{
    (void)shared_leave();
}

void ortmem_capture_shared_enter(void)
{
    om_capture_shared_enter();
}

ortmem_status ortmem_capture_shared_try_enter(void)
{
    om_error_clear();
    if (shared_enter_local())
        return ORTMEM_OK;
    pthread_mutex_lock(&om_gate_lock);
    if (shared_must_wait()) {
        bool held = om_capture_held;
        uint64_t waiting = om_captures_waiting;
        pthread_mutex_unlock(&om_gate_lock);
        count(&om_c_refused);
        return OM_ERR(ORTMEM_E_BUSY,
                      "capture shared try-enter: %s (%llu capture%s waiting); nothing entered",
                      held ? "a capture holds the gate" : "a capture is waiting for the gate",
                      (unsigned long long)waiting, waiting == 1 ? "" : "s");
    }
    om_shared_active++;
    count(&om_c_entered);
    pthread_mutex_unlock(&om_gate_lock);
    om_tl_depth = 1;
    om_tl_bypassed = false;
    return ORTMEM_OK;
}

ortmem_status ortmem_capture_shared_leave(void)
{
    om_error_clear();
    if (!shared_leave())
        return OM_ERR(ORTMEM_E_STATE,
                      "capture shared leave: thread #%u holds no shared section (leave without "
                      "enter)",
                      thread_number());
    return ORTMEM_OK;
}

ortmem_status ortmem_capture_begin(void)
{
    om_error_clear();
    if (om_tl_capturing)
        return OM_ERR(ORTMEM_E_STATE,
                      "capture begin: thread #%u already holds the capture (nested begin); end "
                      "it first",
                      thread_number());
    if (om_tl_depth > 0)
        return OM_ERR(ORTMEM_E_STATE,
                      "capture begin: thread #%u is inside %u shared section%s of its own and "
                      "would wait for itself; leave %s first",
                      thread_number(), om_tl_depth, om_tl_depth == 1 ? "" : "s",
                      om_tl_depth == 1 ? "it" : "them");
    unsigned me = thread_number();
    pthread_mutex_lock(&om_gate_lock);
    if (!gate_free_for_capture()) {
        count(&om_c_capture_waits);
        om_captures_waiting++;
        while (!gate_free_for_capture())
            pthread_cond_wait(&om_capture_cv, &om_gate_lock);
        om_captures_waiting--;
    }
    om_capture_held = true;
    om_capture_owner = me;
    count(&om_c_captures);
    pthread_mutex_unlock(&om_gate_lock);
    om_tl_capturing = true;
    return ORTMEM_OK;
}

ortmem_status ortmem_capture_end(void)
{
    om_error_clear();
    unsigned me = thread_number();
    pthread_mutex_lock(&om_gate_lock);
    if (!om_capture_held) {
        pthread_mutex_unlock(&om_gate_lock);
        return OM_ERR(ORTMEM_E_STATE,
                      "capture end: no capture is active (end without begin on thread #%u)", me);
    }
    if (!om_tl_capturing) {
        unsigned owner = om_capture_owner;
        pthread_mutex_unlock(&om_gate_lock);
        return OM_ERR(ORTMEM_E_STATE,
                      "capture end: the active capture was begun by thread #%u, not by the "
                      "calling thread #%u; only the capturing thread can end it",
                      owner, me);
    }
    om_capture_held = false;
    om_tl_capturing = false;
    if (om_tl_depth > 0 && om_tl_bypassed) {
        /* A section the capture bypassed outlives it: it now holds the gate. */
        om_tl_bypassed = false;
        om_shared_active++;
        count(&om_c_entered);
    }
    om_deferred_call *items = om_queue_head;
    om_queue_head = om_queue_tail = NULL;
    om_queue_len = 0;
    if (om_captures_waiting > 0)
        pthread_cond_broadcast(&om_capture_cv);
    pthread_cond_broadcast(&om_shared_cv);
    pthread_mutex_unlock(&om_gate_lock);
    /* Gate left: run what was deferred, in order, on this thread. */
    while (items) {
        om_deferred_call *next = items->next;
        void (*fn)(void *) = items->fn;
        void *arg = items->arg;
        om_free(items);
        fn(arg);
        count(&om_c_run);
        items = next;
    }
    return ORTMEM_OK;
}

int ortmem_capture_active(void)
{
    pthread_mutex_lock(&om_gate_lock);
    int held = om_capture_held;
    pthread_mutex_unlock(&om_gate_lock);
    return held;
}

ortmem_status ortmem_capture_defer(void (*fn)(void *arg), void *arg)
{
    om_error_clear();
    if (!fn)
        return OM_ERR(ORTMEM_E_INVALID, "capture defer: function is NULL");
    pthread_mutex_lock(&om_gate_lock);
    if (!om_capture_held && om_captures_waiting == 0) {
        pthread_mutex_unlock(&om_gate_lock);
        count(&om_c_immediate);
        fn(arg);
        return ORTMEM_OK;
    }
    om_deferred_call *d = om_malloc(sizeof *d);
    if (!d) {
        pthread_mutex_unlock(&om_gate_lock);
        return OM_ERR(ORTMEM_E_NOMEM, "capture defer: queue entry (%zu bytes); not run", sizeof *d);
    }
    *d = (om_deferred_call){NULL, fn, arg};
    if (om_queue_tail)
        om_queue_tail->next = d;
    else
        om_queue_head = d;
    om_queue_tail = d;
    om_queue_len++;
    count(&om_c_queued);
    pthread_mutex_unlock(&om_gate_lock);
    return ORTMEM_OK;
}

ortmem_status ortmem_capture_stats_get(ortmem_capture_stats *stats)
{
    om_error_clear();
    if (!stats || stats->struct_size == 0 || stats->struct_size > sizeof *stats)
        return OM_ERR(ORTMEM_E_INVALID, "capture stats: stats NULL or struct_size unset");
    ortmem_capture_stats s;
    memset(&s, 0, sizeof s);
    pthread_mutex_lock(&om_gate_lock);
    s.shared_active = om_shared_active;
    s.shared_waiting = om_shared_waiting;
    s.captures_waiting = om_captures_waiting;
    s.deferred_pending = om_queue_len;
    s.capture_active = om_capture_held;
    pthread_mutex_unlock(&om_gate_lock);
    s.shared_entered = om_counter_get(&om_c_entered);
    s.shared_nested = om_counter_get(&om_c_nested);
    s.shared_bypassed = om_counter_get(&om_c_bypassed);
    s.shared_waits = om_counter_get(&om_c_shared_waits);
    s.shared_refused = om_counter_get(&om_c_refused);
    s.captures = om_counter_get(&om_c_captures);
    s.capture_waits = om_counter_get(&om_c_capture_waits);
    s.deferred_queued = om_counter_get(&om_c_queued);
    s.deferred_run = om_counter_get(&om_c_run);
    s.deferred_immediate = om_counter_get(&om_c_immediate);
    s.saturations = om_counter_get(&om_c_saturations);
    s.struct_size = stats->struct_size;
    memcpy(stats, &s, stats->struct_size);
    return ORTMEM_OK;
}
