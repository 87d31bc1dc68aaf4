/* Wrapped text, shared by the report and the progress lines. */
#include "kvdemo.h"

#include <string.h>

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
