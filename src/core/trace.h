/* Trace recording: operations appended as replayable text lines. */
#ifndef ORTMEM_SRC_CORE_TRACE_H
#define ORTMEM_SRC_CORE_TRACE_H

#include <stdbool.h>
#include <ortmem/core.h>

/* Cheap check for hot paths: is a trace being recorded? */
bool om_trace_enabled(void);

/* Appends one line (no newline in fmt). Does nothing when not recording. */
void om_trace_line(const char *fmt, ...) ORTMEM_PRINTF(1, 2);

#endif
