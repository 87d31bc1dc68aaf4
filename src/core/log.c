#include "core/log.h"

#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t om_log_lock = PTHREAD_MUTEX_INITIALIZER;
static ortmem_log_fn om_log_fn;
static void *om_log_user;
static ortmem_log_level om_log_min = ORTMEM_LOG_INFO;

void ortmem_set_log(ortmem_log_fn fn, void *user, ortmem_log_level min_level)
{
    pthread_mutex_lock(&om_log_lock);
    om_log_fn = fn;
    om_log_user = user;
    om_log_min = min_level;
    pthread_mutex_unlock(&om_log_lock);
}

void om_log(ortmem_log_level level, const char *fmt, ...)
{
    pthread_mutex_lock(&om_log_lock);
    ortmem_log_fn fn = om_log_fn;
    void *user = om_log_user;
    ortmem_log_level min = om_log_min;
    pthread_mutex_unlock(&om_log_lock);
    if (!fn || level < min)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Called without the lock held: the callback may call back into ortmem. */
    fn(user, level, msg);
}
