/* JSON string literals (see json.h). */
#include "json.h"

#include "utf8.h"

/* The two-character escape of c under controls, or NULL when it has none. */
static const char *short_escape(unsigned char c, json_controls controls)
{
    switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    default: break;
    }
    if (controls != JSON_CONTROLS_NAMED)
        return NULL;
    switch (c) {
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: return NULL;
    }
}

void json_put_string(FILE *out, const char *s, json_controls controls)
{
    fputc('"', out);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        const char *escape = short_escape(*p, controls);
        if (escape) {
            fputs(escape, out);
            p++;
            continue;
        }
        if (*p < 0x20 || *p == 0x7f) {
            fprintf(out, "\\u%04x", *p++);
            continue;
        }
        size_t len = utf8_sequence_length(p);
        if (len == 0) {
            fputs("\\ufffd", out);
            p++;
            continue;
        }
        fwrite(p, 1, len, out);
        p += len;
    }
    fputc('"', out);
}
