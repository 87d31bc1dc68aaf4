/* Text helpers shared by the report and the progress lines. */
#include "kvdemo.h"

#include <inttypes.h>
#include <string.h>

const char *kd_size(uint64_t bytes, char *buf, size_t size)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    unsigned u = 0;
    while (u + 1 < sizeof units / sizeof units[0] && bytes && bytes % 1024 == 0) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, size, "%" PRIu64 " %s", bytes, units[u]);
    return buf;
}

void kd_put_wrapped(FILE *out, const char *text, int indent, size_t width)
{
    const char *p = text;
    while (*p) {
        size_t len = strlen(p);
        size_t take = len;
        if (len > width) {
            take = width;
            while (take > 0 && p[take] != ' ')
                take--;
            if (take == 0)
                take = width;
        }
        fprintf(out, "%*s%.*s\n", indent, "", (int)take, p);
        p += take;
        while (*p == ' ')
            p++;
    }
}
