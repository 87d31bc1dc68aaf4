/* The trace file: a text header of tensors, then the access order.
 *
 *   ortmem-residency-trace 1
 *   tensor NAME BYTES          one per tensor, before its first access
 *   access NAME [NAME ...]     accesses in order; one line per decode step
 *
 * '#' starts a comment; blank lines are skipped; a NAME is any run of
 * non-blank bytes, unique. */
#include "rsim.h"

#include "common/number.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC "ortmem-residency-trace"

typedef struct name_index {
    uint32_t *slots; /* open addressing: tensor id + 1, 0 = empty */
    size_t cap;      /* a power of two */
} name_index;

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static bool lookup(const name_index *ix, const rs_trace *t, const char *name, uint32_t *id,
                   size_t *slot)
{
    size_t i = (size_t)hash_name(name) & (ix->cap - 1);
    while (ix->slots[i]) {
        if (strcmp(t->names[ix->slots[i] - 1], name) == 0) {
            *id = ix->slots[i] - 1;
            *slot = i;
            return true;
        }
        i = (i + 1) & (ix->cap - 1);
    }
    *slot = i;
    return false;
}

/* Room for one more name at a load factor of at most one half. */
static bool index_grow(name_index *ix, const rs_trace *t)
{
    if ((size_t)t->count + 1 <= ix->cap / 2)
        return true;
    size_t cap = ix->cap ? ix->cap * 2 : 64;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return false;
    name_index grown = {slots, cap};
    for (uint32_t k = 0; k < t->count; k++) {
        uint32_t id;
        size_t slot;
        (void)lookup(&grown, t, t->names[k], &id, &slot);
        slots[slot] = k + 1;
    }
    free(ix->slots);
    *ix = grown;
    return true;
}

static bool failf(char *err, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool failf(char *err, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return false;
}

static bool add_tensor(rs_trace *t, name_index *ix, const char *name, uint64_t bytes,
                       unsigned long line, char *err, size_t size)
{
    uint32_t id;
    size_t slot;
    if (!index_grow(ix, t))
        return failf(err, size, "line %lu: out of memory", line);
    if (lookup(ix, t, name, &id, &slot))
        return failf(err, size, "line %lu: tensor '%s' is declared twice", line, name);
    if (t->count == UINT32_MAX - 1)
        return failf(err, size, "line %lu: too many tensors", line);
    char **names = realloc(t->names, (t->count + 1) * sizeof *names);
    if (names)
        t->names = names;
    uint64_t *b = realloc(t->bytes, (t->count + 1) * sizeof *b);
    if (b)
        t->bytes = b;
    char *copy = strdup(name);
    if (!names || !b || !copy) {
        free(copy);
        return failf(err, size, "line %lu: out of memory", line);
    }
    t->names[t->count] = copy;
    t->bytes[t->count] = bytes;
    ix->slots[slot] = ++t->count;
    return true;
}

static bool add_access(rs_trace *t, uint64_t *cap, uint32_t id)
{
    if (t->length == *cap) {
        uint64_t grown = *cap ? *cap * 2 : 4096;
        uint32_t *a = realloc(t->accesses, grown * sizeof *a);
        if (!a)
            return false;
        t->accesses = a;
        *cap = grown;
    }
    t->accesses[t->length++] = id;
    return true;
}

void rs_trace_free(rs_trace *t)
{
    for (uint32_t k = 0; k < t->count; k++)
        free(t->names[k]);
    free(t->names);
    free(t->bytes);
    free(t->accesses);
    memset(t, 0, sizeof *t);
}

static bool parse_lines(FILE *f, rs_trace *t, name_index *ix, char *err, size_t size)
{
    char *line = NULL;
    size_t line_cap = 0;
    unsigned long number = 0;
    uint64_t access_cap = 0;
    bool magic = false, ok = true;
    ssize_t got;
    while (ok && (got = getline(&line, &line_cap, f)) >= 0) {
        number++;
        if ((size_t)got != strlen(line)) {
            ok = failf(err, size, "line %lu: a NUL byte", number);
            break;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *save = NULL;
        char *word = strtok_r(line, " \t\r\n", &save);
        if (!word)
            continue;
        if (!magic) {
            char *version = strtok_r(NULL, " \t\r\n", &save);
            if (strcmp(word, MAGIC) != 0 || !version || strcmp(version, "1") != 0 ||
                strtok_r(NULL, " \t\r\n", &save))
                ok = failf(err, size,
                           "line %lu: not a trace (the first line must be '" MAGIC " 1')", number);
            magic = true;
        } else if (strcmp(word, "tensor") == 0) {
            char *name = strtok_r(NULL, " \t\r\n", &save);
            char *bytes = strtok_r(NULL, " \t\r\n", &save);
            uint64_t b;
            if (!name || !bytes || strtok_r(NULL, " \t\r\n", &save))
                ok = failf(err, size, "line %lu: 'tensor NAME BYTES' expected", number);
            else if (!parse_u64(bytes, &b) || b == 0)
                ok = failf(err, size, "line %lu: tensor '%s': bytes '%s' is not a positive integer",
                           number, name, bytes);
            else
                ok = add_tensor(t, ix, name, b, number, err, size);
        } else if (strcmp(word, "access") == 0) {
            t->steps++;
            for (char *name; ok && (name = strtok_r(NULL, " \t\r\n", &save));) {
                uint32_t id;
                size_t slot;
                if (!ix->cap || !lookup(ix, t, name, &id, &slot))
                    ok = failf(err, size, "line %lu: tensor '%s' is not declared before its access",
                               number, name);
                else if (!add_access(t, &access_cap, id))
                    ok = failf(err, size, "line %lu: out of memory", number);
            }
        } else {
            ok = failf(err, size, "line %lu: '%s' is neither 'tensor' nor 'access'", number, word);
        }
    }
    free(line);
    if (ok && ferror(f))
        ok = failf(err, size, "read error: %s", strerror(errno));
    if (ok && !magic)
        ok = failf(err, size, "empty file (the first line must be '" MAGIC " 1')");
    if (ok && t->count == 0)
        ok = failf(err, size, "no tensor is declared");
    if (ok && t->length == 0)
        ok = failf(err, size, "no access is recorded");
    return ok;
}

bool rs_trace_read(const char *path, rs_trace *t, char *err, size_t size)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "r");
    if (!f)
        return failf(err, size, "cannot open: %s", strerror(errno));
    name_index ix = {NULL, 0};
    bool ok = parse_lines(f, t, &ix, err, size);
    fclose(f);
    free(ix.slots);
    if (!ok)
        rs_trace_free(t);
    return ok;
}
