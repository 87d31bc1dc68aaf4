/* Counts and byte sizes as text (see number.h). */
#include "number.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <strings.h>

/* Reads the leading digits of text into *value; returns what follows them,
 * or NULL when there are none or they overflow. */
static const char *read_digits(const char *text, uint64_t *value)
{
    if (!text || !isdigit((unsigned char)*text))
        return NULL;
    uint64_t v = 0;
    for (; isdigit((unsigned char)*text); text++) {
        unsigned digit = (unsigned)(*text - '0');
        if (v > (UINT64_MAX - digit) / 10)
            return NULL;
        v = v * 10 + digit;
    }
    *value = v;
    return text;
}

bool parse_u64(const char *text, uint64_t *out)
{
    uint64_t v;
    const char *rest = read_digits(text, &v);
    if (!rest || *rest)
        return false;
    *out = v;
    return true;
}

bool parse_size(const char *text, uint64_t *bytes)
{
    uint64_t v;
    const char *suffix = read_digits(text, &v);
    if (!suffix)
        return false;
    static const struct {
        const char *suffix;
        unsigned shift;
    } suffixes[] = {
        {"", 0},   {"k", 10},   {"kib", 10}, {"m", 20},   {"mib", 20},
        {"g", 30}, {"gib", 30}, {"t", 40},   {"tib", 40},
    };
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        if (strcasecmp(suffix, suffixes[i].suffix) == 0) {
            if (v > (UINT64_MAX >> suffixes[i].shift))
                return false;
            *bytes = v << suffixes[i].shift;
            return true;
        }
    }
    return false;
}

const char *size_text(uint64_t bytes, char *buf, size_t size)
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
