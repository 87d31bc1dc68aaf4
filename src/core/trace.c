#include "core/trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static pthread_mutex_t om_trace_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *om_trace_file;
static atomic_bool om_trace_on;

bool om_trace_enabled(void)
{
    return atomic_load_explicit(&om_trace_on, memory_order_relaxed);
}

void om_trace_line(const char *fmt, ...)
{
    if (!om_trace_enabled())
        return;
    pthread_mutex_lock(&om_trace_lock);
    if (om_trace_file) {
        va_list ap;
        va_start(ap, fmt);
        vfprintf(om_trace_file, fmt, ap);
        va_end(ap);
        fputc('\n', om_trace_file);
    }
    pthread_mutex_unlock(&om_trace_lock);
}

static ortmem_status om_trace_close_locked(void)
{
    ortmem_status st = ORTMEM_OK;
    atomic_store(&om_trace_on, false);
    if (om_trace_file && fclose(om_trace_file) != 0)
        st = OM_ERR(ORTMEM_E_IO, "trace stop: closing the trace failed: %s", strerror(errno));
    om_trace_file = NULL;
    return st;
}

ortmem_status ortmem_trace_start(const char *path)
{
    om_error_clear();
    if (!path || !*path)
        return OM_ERR(ORTMEM_E_INVALID, "trace start: path is NULL or empty");
    FILE *f = fopen(path, "w");
    if (!f)
        return OM_ERR(ORTMEM_E_IO, "trace start: cannot open '%s': %s", path, strerror(errno));
    fputs("# ortmem trace v1: replay with ortmem-replay\n", f);
    pthread_mutex_lock(&om_trace_lock);
    (void)om_trace_close_locked();
    om_trace_file = f;
    atomic_store(&om_trace_on, true);
    pthread_mutex_unlock(&om_trace_lock);
    return ORTMEM_OK;
}

ortmem_status ortmem_trace_stop(void)
{
    om_error_clear();
    pthread_mutex_lock(&om_trace_lock);
    ortmem_status st = om_trace_close_locked();
    pthread_mutex_unlock(&om_trace_lock);
    return st;
}

/* ORTMEM_TRACE=path records from load time; a bad path is ignored silently
 * because the library never prints (ortmem_trace_start reports it). */
__attribute__((constructor)) static void om_trace_from_environment(void)
{
    const char *path = getenv("ORTMEM_TRACE");
    if (path && *path)
        (void)ortmem_trace_start(path);
}
