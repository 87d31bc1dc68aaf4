#include "core/log.h"

#include <pthread.h>
#include <stdio.h>

#define OM_LOG_QUEUE 8
#define OM_LOG_MESSAGE 512

static pthread_mutex_t om_log_lock = PTHREAD_MUTEX_INITIALIZER;
static ortmem_log_fn om_log_fn;
static void *om_log_user;
static ortmem_log_level om_log_min = ORTMEM_LOG_INFO;

/* Per thread: how deep in ortmem calls, and the messages waiting to go out. */
static _Thread_local unsigned om_call_depth;
static _Thread_local unsigned om_queued;
static _Thread_local unsigned om_dropped;
static _Thread_local ortmem_log_level om_queue_level[OM_LOG_QUEUE];
static _Thread_local char om_queue_text[OM_LOG_QUEUE][OM_LOG_MESSAGE];

void ortmem_set_log(ortmem_log_fn fn, void *user, ortmem_log_level min_level)
{
    pthread_mutex_lock(&om_log_lock);
    om_log_fn = fn;
    om_log_user = user;
    om_log_min = min_level;
    pthread_mutex_unlock(&om_log_lock);
}

static ortmem_log_fn om_log_target(ortmem_log_level level, void **user)
{
    pthread_mutex_lock(&om_log_lock);
    ortmem_log_fn fn = level >= om_log_min ? om_log_fn : NULL;
    *user = om_log_user;
    pthread_mutex_unlock(&om_log_lock);
    return fn;
}

void om_log(ortmem_log_level level, const char *fmt, ...)
{
    void *user;
    if (!om_log_target(level, &user))
        return;
    if (om_queued == OM_LOG_QUEUE) {
        om_dropped++;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(om_queue_text[om_queued], OM_LOG_MESSAGE, fmt, ap);
    va_end(ap);
    om_queue_level[om_queued++] = level;
    if (om_call_depth == 0) {
        /* Not inside a call: deliver at once. */
        om_call_depth = 1;
        om_log_leave_call();
    }
}

void om_log_enter_call(void)
{
    om_call_depth++;
}

void om_log_leave_call(void)
{
    if (--om_call_depth != 0 || om_queued == 0)
        return;
    /* Deliver with depth held at 1 so messages logged by a re-entrant callback
     * queue up behind these instead of recursing. */
    om_call_depth = 1;
    for (unsigned i = 0; i < om_queued; i++) {
        void *user;
        ortmem_log_fn fn = om_log_target(om_queue_level[i], &user);
        if (fn)
            fn(user, om_queue_level[i], om_queue_text[i]);
    }
    om_queued = 0;
    if (om_dropped) {
        void *user;
        ortmem_log_fn fn = om_log_target(ORTMEM_LOG_WARN, &user);
        char note[96];
        snprintf(note, sizeof note, "ortmem: %u log messages dropped (queue of %d full)",
                 om_dropped, OM_LOG_QUEUE);
        om_dropped = 0;
        if (fn)
            fn(user, ORTMEM_LOG_WARN, note);
    }
    om_call_depth = 0;
}
