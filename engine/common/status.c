#include "common/status.h"

#include <stdio.h>
#include <string.h>

ortmem_status eng_vfail(eng_error *err, ortmem_status status, const char *fmt, va_list args)
{
    if (err) {
        err->status = status;
        vsnprintf(err->message, sizeof err->message, fmt, args);
    }
    return status;
}

ortmem_status eng_fail(eng_error *err, ortmem_status status, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    eng_vfail(err, status, fmt, args);
    va_end(args);
    return status;
}

ortmem_status eng_wrap(eng_error *err, const char *fmt, ...)
{
    if (!err)
        return ORTMEM_E_INVALID;
    char joined[sizeof err->message];
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(joined, sizeof joined, fmt, args);
    va_end(args);
    size_t used = n < 0 ? 0 : (size_t)n < sizeof joined ? (size_t)n : sizeof joined - 1;
    const char *sep = ": ";
    for (size_t i = 0; sep[i] && used + 1 < sizeof joined; i++)
        joined[used++] = sep[i];
    size_t rest = strlen(err->message);
    if (rest > sizeof joined - 1 - used)
        rest = sizeof joined - 1 - used;
    memcpy(joined + used, err->message, rest);
    joined[used + rest] = '\0';
    memcpy(err->message, joined, sizeof joined);
    return err->status;
}

ortmem_status eng_from_ortmem(eng_error *err, ortmem_status status, const char *what)
{
    return eng_fail(err, status, "%s: %s (%s)", what, ortmem_last_error(),
                    ortmem_status_str(status));
}
