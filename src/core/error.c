#include "core/error.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char om_detail[OM_DETAIL_MAX];

static const char *const om_status_names[ORTMEM_STATUS_COUNT] = {
    [ORTMEM_OK] = "ORTMEM_OK",
    [ORTMEM_E_INVALID] = "ORTMEM_E_INVALID",
    [ORTMEM_E_OVERFLOW] = "ORTMEM_E_OVERFLOW",
    [ORTMEM_E_RANGE] = "ORTMEM_E_RANGE",
    [ORTMEM_E_ALIGN] = "ORTMEM_E_ALIGN",
    [ORTMEM_E_HANDLE] = "ORTMEM_E_HANDLE",
    [ORTMEM_E_STATE] = "ORTMEM_E_STATE",
    [ORTMEM_E_BUSY] = "ORTMEM_E_BUSY",
    [ORTMEM_E_NOT_FOUND] = "ORTMEM_E_NOT_FOUND",
    [ORTMEM_E_DOUBLE_FREE] = "ORTMEM_E_DOUBLE_FREE",
    [ORTMEM_E_NOMEM] = "ORTMEM_E_NOMEM",
    [ORTMEM_E_BACKEND] = "ORTMEM_E_BACKEND",
    [ORTMEM_E_UNSUPPORTED] = "ORTMEM_E_UNSUPPORTED",
    [ORTMEM_E_UNAVAILABLE] = "ORTMEM_E_UNAVAILABLE",
    [ORTMEM_E_QUARANTINED] = "ORTMEM_E_QUARANTINED",
    [ORTMEM_E_IO] = "ORTMEM_E_IO",
    [ORTMEM_E_BUDGET] = "ORTMEM_E_BUDGET",
    [ORTMEM_E_TIMEOUT] = "ORTMEM_E_TIMEOUT",
    [ORTMEM_E_CANCELLED] = "ORTMEM_E_CANCELLED",
};

const char *ortmem_status_str(ortmem_status status)
{
    if ((unsigned)status >= ORTMEM_STATUS_COUNT)
        return "ORTMEM_E_UNKNOWN";
    return om_status_names[status];
}

const char *ortmem_last_error(void)
{
    return om_detail;
}

void om_error_clear(void)
{
    om_detail[0] = '\0';
}

void om_error_save(om_error_saved *saved)
{
    memcpy(saved->detail, om_detail, sizeof saved->detail);
}

ortmem_status om_error_restore(const om_error_saved *saved, ortmem_status status)
{
    memcpy(om_detail, saved->detail, sizeof om_detail);
    return status;
}

ortmem_status ortmem_error_set(ortmem_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(om_detail, sizeof om_detail, fmt, ap);
    va_end(ap);
    return status;
}

ortmem_status om_error_wrap(ortmem_status status, const char *fmt, ...)
{
    char inner[OM_DETAIL_MAX];
    char prefix[OM_DETAIL_MAX];
    memcpy(inner, om_detail, sizeof inner);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Truncation keeps the prefix, which names the failing call. */
    size_t plen = strnlen(prefix, sizeof om_detail - 1);
    memcpy(om_detail, prefix, plen);
    om_detail[plen] = '\0';
    if (inner[0] != '\0' && plen + 2 < sizeof om_detail) {
        memcpy(om_detail + plen, ": ", 2);
        size_t room = sizeof om_detail - plen - 3;
        size_t ilen = strnlen(inner, room);
        memcpy(om_detail + plen + 2, inner, ilen);
        om_detail[plen + 2 + ilen] = '\0';
    }
    return status;
}

ortmem_status om_struct_check(const char *what, const char *name, const size_t *struct_size,
                              size_t need, size_t know)
{
    if (!struct_size)
        return OM_ERR(ORTMEM_E_INVALID, "%s: %s is NULL", what, name);
    size_t size = *struct_size;
    if (size == 0)
        return OM_ERR(ORTMEM_E_INVALID, "%s: %s struct_size is 0 (set it to sizeof the struct)",
                      what, name);
    if (size < need)
        return OM_ERR(ORTMEM_E_INVALID,
                      "%s: %s struct_size %zu is smaller than the %zu bytes this library needs",
                      what, name, size, need);
    if (size > know)
        return OM_ERR(ORTMEM_E_INVALID,
                      "%s: %s struct_size %zu is larger than the %zu bytes this library knows",
                      what, name, size, know);
    return ORTMEM_OK;
}
