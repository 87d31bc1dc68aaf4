/* Internal logging through the user's callback; silent by default. While the
 * calling thread is inside an ortmem call (a handle pinned, locks possibly
 * held) messages are queued and delivered when its outermost call returns,
 * so a callback may call back into ortmem without deadlocking. */
#ifndef ORTMEM_SRC_CORE_LOG_H
#define ORTMEM_SRC_CORE_LOG_H

#include <ortmem/core.h>

void om_log(ortmem_log_level level, const char *fmt, ...) ORTMEM_PRINTF(2, 3);

/* Handle pins bracket every public call (core/handle.c). */
void om_log_enter_call(void);
void om_log_leave_call(void);

#endif
