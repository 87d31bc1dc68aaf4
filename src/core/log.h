/* Internal logging through the user's callback; silent by default. */
#ifndef ORTMEM_SRC_CORE_LOG_H
#define ORTMEM_SRC_CORE_LOG_H

#include <ortmem/core.h>

void om_log(ortmem_log_level level, const char *fmt, ...) ORTMEM_PRINTF(2, 3);

#endif
