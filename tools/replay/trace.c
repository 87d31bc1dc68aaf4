/* Trace parsing and validation. The whole file is read and checked before any
 * operation runs, so a bad line costs nothing but its error message. */
#include "replay.h"

#include "common/number.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define REPLAY_MAX_TOKENS 8
#define NO_OBJECT UINT32_MAX

static const char *const kind_names[REPLAY_KIND_COUNT] = {
    [REPLAY_ALLOC] = "alloc",     [REPLAY_FREE] = "free",         [REPLAY_REGION] = "region",
    [REPLAY_COMMIT] = "commit",   [REPLAY_DECOMMIT] = "decommit", [REPLAY_SHARE] = "share",
    [REPLAY_DESTROY] = "destroy",
};

/* How each line reads, for error messages. */
static const char *const kind_usage[REPLAY_KIND_COUNT] = {
    [REPLAY_ALLOC] = "alloc ID SIZE [ALIGN] [@HOLDER]",
    [REPLAY_FREE] = "free ID",
    [REPLAY_REGION] = "region ID SIZE [HOLDER]",
    [REPLAY_COMMIT] = "commit ID OFFSET LEN",
    [REPLAY_DECOMMIT] = "decommit ID OFFSET LEN",
    [REPLAY_SHARE] = "share DST DST_OFF SRC SRC_OFF LEN [ro|rw|none]",
    [REPLAY_DESTROY] = "destroy ID",
};

const char *replay_kind_name(replay_kind kind)
{
    return (unsigned)kind < REPLAY_KIND_COUNT ? kind_names[kind] : "?";
}

/* ---- names: every ID, with the objects it names right now ---- */

typedef struct name_entry {
    size_t name; /* offset in the names pool; SIZE_MAX = empty slot */
    uint64_t hash;
    uint32_t live_alloc; /* object, or NO_OBJECT */
    uint32_t live_region;
    uint32_t alloc_ended;  /* line of the last free of this ID, 0 = none */
    uint32_t region_ended; /* line of the last destroy, 0 = none */
} name_entry;

typedef struct parser {
    const char *path;
    FILE *err;
    size_t max_errors;
    size_t errors;    /* messages */
    size_t bad_lines; /* lines with at least one message */
    uint32_t last_bad_line;
    replay_trace *trace;
    size_t ops_capacity, objects_capacity, names_capacity;
    name_entry *table;
    size_t table_capacity, table_used;
    uint64_t *alloc_live_bytes; /* per object: padded bytes while live */
    size_t alloc_live_capacity;
    uint64_t live_bytes;
    size_t holders_capacity;
    uint64_t *holder_live_bytes; /* per holder: live padded allocation bytes */
    bool out_of_memory;
} parser;

static void parse_error(parser *ps, uint32_t line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void parse_error(parser *ps, uint32_t line, const char *fmt, ...)
{
    ps->errors++;
    if (line != ps->last_bad_line) {
        ps->bad_lines++;
        ps->last_bad_line = line;
    }
    if (ps->errors > ps->max_errors)
        return;
    fprintf(ps->err, "ortmem-replay: %s: line %" PRIu32 ": ", ps->path, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(ps->err, fmt, ap);
    va_end(ap);
    fputc('\n', ps->err);
}

static uint64_t saturating_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

static bool grow(void **items, size_t *capacity, size_t need, size_t item_size)
{
    if (need <= *capacity)
        return true;
    size_t ncap = *capacity ? *capacity : 64;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2 / item_size)
            return false;
        ncap *= 2;
    }
    void *grown = realloc(*items, ncap * item_size);
    if (!grown)
        return false;
    *items = grown;
    *capacity = ncap;
    return true;
}

static bool table_rehash(parser *ps)
{
    size_t ncap = ps->table_capacity ? ps->table_capacity * 2 : 1024;
    name_entry *fresh = malloc(ncap * sizeof *fresh);
    if (!fresh)
        return false;
    for (size_t i = 0; i < ncap; i++)
        fresh[i].name = SIZE_MAX;
    for (size_t i = 0; i < ps->table_capacity; i++) {
        if (ps->table[i].name == SIZE_MAX)
            continue;
        size_t slot = ps->table[i].hash & (ncap - 1);
        while (fresh[slot].name != SIZE_MAX)
            slot = (slot + 1) & (ncap - 1);
        fresh[slot] = ps->table[i];
    }
    free(ps->table);
    ps->table = fresh;
    ps->table_capacity = ncap;
    return true;
}

/* The entry for name, created on first sight; NULL when out of memory. */
static name_entry *lookup(parser *ps, const char *name)
{
    if ((ps->table_used + 1) * 2 > ps->table_capacity && !table_rehash(ps))
        return NULL;
    uint64_t h = hash_name(name);
    size_t slot = h & (ps->table_capacity - 1);
    replay_trace *t = ps->trace;
    while (ps->table[slot].name != SIZE_MAX) {
        name_entry *e = &ps->table[slot];
        if (e->hash == h && strcmp(t->names + e->name, name) == 0)
            return e;
        slot = (slot + 1) & (ps->table_capacity - 1);
    }
    size_t len = strlen(name) + 1;
    if (!grow((void **)&t->names, &ps->names_capacity, t->names_len + len, 1))
        return NULL;
    memcpy(t->names + t->names_len, name, len);
    name_entry *e = &ps->table[slot];
    *e = (name_entry){t->names_len, h, NO_OBJECT, NO_OBJECT, 0, 0};
    t->names_len += len;
    ps->table_used++;
    return e;
}

/* Object numbers stay below this, so the run can name each holder's arena by a
 * number above every object's. */
#define MAX_OBJECTS (NO_OBJECT - 1 - REPLAY_MAX_HOLDERS)

static uint32_t new_object(parser *ps, name_entry *e, uint32_t line, bool is_region,
                           uint16_t holder)
{
    replay_trace *t = ps->trace;
    if (t->object_count >= MAX_OBJECTS || !grow((void **)&t->objects, &ps->objects_capacity,
                                                t->object_count + 1, sizeof *t->objects)) {
        ps->out_of_memory = true;
        return NO_OBJECT;
    }
    t->objects[t->object_count] = (replay_object){e->name, line, holder, is_region};
    replay_holder *h = &t->holders[holder];
    if (is_region)
        h->regions++;
    else
        h->allocations++;
    return (uint32_t)t->object_count++;
}

/* ---- holders ---- */

#define NO_HOLDER UINT16_MAX

static uint16_t find_holder(const parser *ps, const char *name)
{
    const replay_trace *t = ps->trace;
    for (size_t i = 0; i < t->holder_count; i++) {
        if (strcmp(t->holders[i].name, name) == 0)
            return (uint16_t)i;
    }
    return NO_HOLDER;
}

/* Appends a holder; NO_HOLDER after reporting why not. */
static uint16_t add_holder(parser *ps, uint32_t line, const char *name, bool declared)
{
    replay_trace *t = ps->trace;
    if (t->holder_count >= REPLAY_MAX_HOLDERS) {
        parse_error(ps, line, "more than %d holders", REPLAY_MAX_HOLDERS);
        return NO_HOLDER;
    }
    size_t old_capacity = ps->holders_capacity;
    if (!grow((void **)&t->holders, &ps->holders_capacity, t->holder_count + 1,
              sizeof *t->holders)) {
        ps->out_of_memory = true;
        return NO_HOLDER;
    }
    if (ps->holders_capacity != old_capacity) {
        uint64_t *live = realloc(ps->holder_live_bytes, ps->holders_capacity * sizeof *live);
        if (!live) {
            ps->out_of_memory = true;
            return NO_HOLDER;
        }
        ps->holder_live_bytes = live;
    }
    replay_holder *h = &t->holders[t->holder_count];
    memset(h, 0, sizeof *h);
    snprintf(h->name, sizeof h->name, "%s", name);
    h->role = ORTMEM_ROLE_OTHER;
    h->line = line;
    h->declared = declared;
    ps->holder_live_bytes[t->holder_count] = 0;
    return (uint16_t)t->holder_count++;
}

/* The holder an annotation names (NULL: none, the default holder), or
 * NO_HOLDER after reporting why not. */
static uint16_t holder_of(parser *ps, uint32_t line, const char *name)
{
    if (!name) {
        uint16_t h = find_holder(ps, REPLAY_DEFAULT_HOLDER);
        return h != NO_HOLDER ? h : add_holder(ps, line, REPLAY_DEFAULT_HOLDER, false);
    }
    uint16_t h = *name ? find_holder(ps, name) : NO_HOLDER;
    if (h == NO_HOLDER)
        parse_error(ps, line,
                    "no holder '%s' (a holder line must declare it first: holder NAME "
                    "ROLE [PRIORITY] [reclaimable])",
                    name);
    return h;
}

/* A holder for an object whose line named an unknown one: the object is still
 * registered, so later lines on it do not cascade errors (the trace is not
 * replayed anyway). NO_HOLDER only when even that failed. */
static uint16_t stand_in_holder(parser *ps, uint32_t line)
{
    return ps->trace->holder_count ? 0 : holder_of(ps, line, NULL);
}

static bool parse_priority(const char *text, int *priority)
{
    const char *p = text;
    if (*p == '-' || *p == '+')
        p++;
    if (!isdigit((unsigned char)*p))
        return false;
    errno = 0;
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (errno || *end || v < INT_MIN || v > INT_MAX)
        return false;
    *priority = (int)v;
    return true;
}

/* holder NAME ROLE [PRIORITY] [reclaimable] */
static void parse_holder(parser *ps, uint32_t line, char **tok, size_t args)
{
    if (args < 2 || args > 4) {
        parse_error(ps, line,
                    "holder takes 2 to 4 fields, got %zu (holder NAME ROLE [PRIORITY] "
                    "[reclaimable])",
                    args);
        return;
    }
    const char *name = tok[1];
    if (name[0] == '@') {
        parse_error(ps, line, "holder name '%s' starts with '@' (write the name without it)", name);
        return;
    }
    if (strlen(name) > REPLAY_HOLDER_NAME_MAX) {
        parse_error(ps, line, "holder name '%.20s...' is longer than %d bytes", name,
                    REPLAY_HOLDER_NAME_MAX);
        return;
    }
    uint16_t existing = find_holder(ps, name);
    if (existing != NO_HOLDER) {
        const replay_holder *h = &ps->trace->holders[existing];
        if (h->declared)
            parse_error(ps, line, "holder '%s' is already declared (line %" PRIu32 ")", name,
                        h->line);
        else
            parse_error(ps, line,
                        "holder '%s' is the default holder, already charged by line %" PRIu32
                        " (declare it before its first use)",
                        name, h->line);
        return;
    }
    ortmem_role role = ORTMEM_ROLE_OTHER;
    bool ok = true;
    if (ortmem_role_parse(tok[2], &role) != ORTMEM_OK) {
        parse_error(ps, line, "role '%s' is not weights, kv, workspace or other", tok[2]);
        ok = false;
    }
    int priority = 0;
    bool reclaimable = false;
    for (size_t i = 3; i <= args; i++) {
        if (i == args && strcmp(tok[i], "reclaimable") == 0) {
            reclaimable = true;
        } else if (i == 3 && parse_priority(tok[i], &priority)) {
            continue;
        } else {
            parse_error(ps, line,
                        i == 3 ? "'%s' is neither a priority (an integer) nor 'reclaimable'"
                               : "'%s' is not 'reclaimable'",
                        tok[i]);
            ok = false;
        }
    }
    /* Registered even when malformed, so later lines do not cascade errors. */
    uint16_t h = add_holder(ps, line, name, true);
    if (h == NO_HOLDER || !ok)
        return;
    replay_holder *holder = &ps->trace->holders[h];
    holder->role = role;
    holder->priority = priority;
    holder->reclaimable = reclaimable;
}

/* ---- one line ---- */

static bool size_arg(parser *ps, uint32_t line, const char *what, const char *token, uint64_t *out)
{
    if (parse_size(token, out) && *out <= SIZE_MAX)
        return true;
    parse_error(ps, line,
                "%s '%s' is not a byte count (digits with an optional KiB, MiB or GiB "
                "suffix)",
                what, token);
    return false;
}

static bool range_args(parser *ps, uint32_t line, const char *off_token, const char *len_token,
                       uint64_t *offset, uint64_t *len)
{
    if (!size_arg(ps, line, "offset", off_token, offset) ||
        !size_arg(ps, line, "length", len_token, len))
        return false;
    if (*len == 0) {
        parse_error(ps, line, "length is 0");
        return false;
    }
    if (*offset > SIZE_MAX - *len) {
        parse_error(ps, line, "offset %" PRIu64 " + length %" PRIu64 " overflows", *offset, *len);
        return false;
    }
    return true;
}

/* The live region a line names, or NO_OBJECT after reporting why not. */
static uint32_t live_region(parser *ps, uint32_t line, const char *id)
{
    name_entry *e = lookup(ps, id);
    if (!e) {
        ps->out_of_memory = true;
        return NO_OBJECT;
    }
    if (e->live_region != NO_OBJECT)
        return e->live_region;
    if (e->region_ended)
        parse_error(ps, line, "region '%s' was destroyed at line %" PRIu32, id, e->region_ended);
    else if (e->live_alloc != NO_OBJECT)
        parse_error(ps, line, "'%s' is an allocation, not a region", id);
    else
        parse_error(ps, line, "no region '%s' (a region line must create it first)", id);
    return NO_OBJECT;
}

static bool parse_access(const char *token, uint8_t *access)
{
    if (strcmp(token, "ro") == 0 || strcmp(token, "read") == 0)
        *access = ORTMEM_ACCESS_READ;
    else if (strcmp(token, "rw") == 0 || strcmp(token, "read_write") == 0)
        *access = ORTMEM_ACCESS_READ_WRITE;
    else if (strcmp(token, "none") == 0)
        *access = ORTMEM_ACCESS_NONE;
    else
        return false;
    return true;
}

static void track_alloc_bytes(parser *ps, uint32_t object, uint64_t padded)
{
    if (!grow((void **)&ps->alloc_live_bytes, &ps->alloc_live_capacity, (size_t)object + 1,
              sizeof *ps->alloc_live_bytes)) {
        ps->out_of_memory = true;
        return;
    }
    ps->alloc_live_bytes[object] = padded;
    ps->live_bytes = saturating_add(ps->live_bytes, padded);
    if (ps->live_bytes > ps->trace->alloc_peak_bytes)
        ps->trace->alloc_peak_bytes = ps->live_bytes;
    uint16_t holder = ps->trace->objects[object].holder;
    replay_holder *h = &ps->trace->holders[holder];
    uint64_t *live = &ps->holder_live_bytes[holder];
    *live = saturating_add(*live, padded);
    if (*live > h->alloc_peak_bytes)
        h->alloc_peak_bytes = *live;
    if (padded > h->alloc_largest_bytes)
        h->alloc_largest_bytes = padded;
}

static void untrack_alloc_bytes(parser *ps, uint32_t object)
{
    if (object >= ps->alloc_live_capacity)
        return;
    uint64_t bytes = ps->alloc_live_bytes[object];
    ps->live_bytes = ps->live_bytes > bytes ? ps->live_bytes - bytes : 0;
    uint64_t *live = &ps->holder_live_bytes[ps->trace->objects[object].holder];
    *live = *live > bytes ? *live - bytes : 0;
    ps->alloc_live_bytes[object] = 0;
}

static void parse_line(parser *ps, uint32_t line, char *text)
{
    char *hash = strchr(text, '#');
    if (hash)
        *hash = '\0';
    char *tok[REPLAY_MAX_TOKENS + 1];
    size_t n = 0;
    for (char *save = NULL, *t = strtok_r(text, " \t\r\v\f\n", &save); t;
         t = strtok_r(NULL, " \t\r\v\f\n", &save)) {
        if (n == REPLAY_MAX_TOKENS + 1)
            break;
        tok[n++] = t;
    }
    if (n == 0)
        return;
    if (strcmp(tok[0], "holder") == 0) {
        parse_holder(ps, line, tok, n - 1);
        return;
    }
    replay_kind kind = REPLAY_KIND_COUNT;
    for (unsigned k = 0; k < REPLAY_KIND_COUNT; k++) {
        if (strcmp(tok[0], kind_names[k]) == 0)
            kind = (replay_kind)k;
    }
    if (kind == REPLAY_KIND_COUNT) {
        parse_error(ps, line,
                    "unknown operation '%s' (expected holder, alloc, free, region, commit, "
                    "decommit, share or destroy)",
                    tok[0]);
        return;
    }
    static const size_t min_args[REPLAY_KIND_COUNT] = {2, 1, 2, 3, 3, 5, 1};
    static const size_t max_args[REPLAY_KIND_COUNT] = {4, 1, 3, 3, 3, 6, 1};
    size_t args = n - 1;
    if (args < min_args[kind] || args > max_args[kind]) {
        if (min_args[kind] == max_args[kind])
            parse_error(ps, line, "%s takes %zu field%s, got %zu (%s)", kind_names[kind],
                        min_args[kind], min_args[kind] == 1 ? "" : "s", args, kind_usage[kind]);
        else
            parse_error(ps, line, "%s takes %zu or %zu fields, got %zu (%s)", kind_names[kind],
                        min_args[kind], max_args[kind], args, kind_usage[kind]);
        return;
    }
    replay_op op = {.kind = (uint8_t)kind, .line = line, .object = NO_OBJECT, .source = NO_OBJECT};
    bool ok = true;
    switch (kind) {
    case REPLAY_ALLOC: {
        name_entry *e = lookup(ps, tok[1]);
        if (!e) {
            ps->out_of_memory = true;
            return;
        }
        /* alloc ID SIZE [ALIGN] [@HOLDER]: the holder is the last field. */
        uint16_t holder = NO_HOLDER;
        if (args >= 3 && tok[args][0] == '@') {
            holder = holder_of(ps, line, tok[args] + 1);
            args--;
        } else if (args == 4) {
            parse_error(ps, line, "'%s' is not a holder (write @HOLDER as the last field)", tok[4]);
            args--;
        } else {
            holder = holder_of(ps, line, NULL);
        }
        ok = holder != NO_HOLDER;
        if (!ok && (holder = stand_in_holder(ps, line)) == NO_HOLDER)
            return;
        ok = size_arg(ps, line, "size", tok[2], &op.arg[0]) && ok;
        if (ok && op.arg[0] == 0) {
            parse_error(ps, line, "size is 0");
            ok = false;
        }
        if (ok && args == 3) {
            ok = size_arg(ps, line, "alignment", tok[3], &op.arg[1]);
            if (ok && (op.arg[1] & (op.arg[1] - 1))) {
                parse_error(ps, line, "alignment %" PRIu64 " is not a power of two", op.arg[1]);
                ok = false;
            }
        }
        if (e->live_alloc != NO_OBJECT) {
            parse_error(ps, line, "allocation '%s' is still live (allocated at line %" PRIu32 ")",
                        tok[1], ps->trace->objects[e->live_alloc].line);
            return;
        }
        /* Registered even when malformed, so later lines do not cascade errors. */
        op.object = new_object(ps, e, line, false, holder);
        if (op.object == NO_OBJECT)
            return;
        e->live_alloc = op.object;
        /* Every allocation gets its entry, so a free reads a set value. */
        uint64_t padded = 0;
        if (ok) {
            uint64_t align = op.arg[1] > 256 ? op.arg[1] : 256;
            padded = saturating_add(op.arg[0], align);
            if (padded > ps->trace->alloc_largest_bytes)
                ps->trace->alloc_largest_bytes = padded;
        }
        track_alloc_bytes(ps, op.object, padded);
        break;
    }
    case REPLAY_FREE: {
        name_entry *e = lookup(ps, tok[1]);
        if (!e) {
            ps->out_of_memory = true;
            return;
        }
        if (e->live_alloc == NO_OBJECT) {
            if (e->alloc_ended)
                parse_error(ps, line, "allocation '%s' was already freed at line %" PRIu32, tok[1],
                            e->alloc_ended);
            else
                parse_error(ps, line, "free of '%s', which no alloc line created", tok[1]);
            return;
        }
        op.object = e->live_alloc;
        e->live_alloc = NO_OBJECT;
        e->alloc_ended = line;
        untrack_alloc_bytes(ps, op.object);
        break;
    }
    case REPLAY_REGION: {
        name_entry *e = lookup(ps, tok[1]);
        if (!e) {
            ps->out_of_memory = true;
            return;
        }
        uint16_t holder = holder_of(ps, line, args == 3 ? tok[3] : NULL);
        ok = holder != NO_HOLDER;
        if (!ok && (holder = stand_in_holder(ps, line)) == NO_HOLDER)
            return;
        ok = size_arg(ps, line, "size", tok[2], &op.arg[0]) && ok;
        if (ok && op.arg[0] == 0) {
            parse_error(ps, line, "size is 0");
            ok = false;
        }
        if (e->live_region != NO_OBJECT) {
            parse_error(ps, line, "region '%s' is still live (created at line %" PRIu32 ")", tok[1],
                        ps->trace->objects[e->live_region].line);
            return;
        }
        op.object = new_object(ps, e, line, true, holder);
        if (op.object == NO_OBJECT)
            return;
        e->live_region = op.object;
        break;
    }
    case REPLAY_COMMIT:
    case REPLAY_DECOMMIT:
        op.object = live_region(ps, line, tok[1]);
        ok = op.object != NO_OBJECT;
        ok = range_args(ps, line, tok[2], tok[3], &op.arg[0], &op.arg[1]) && ok;
        break;
    case REPLAY_SHARE:
        op.object = live_region(ps, line, tok[1]);
        op.source = live_region(ps, line, tok[3]);
        ok = op.object != NO_OBJECT && op.source != NO_OBJECT;
        ok = size_arg(ps, line, "destination offset", tok[2], &op.arg[0]) && ok;
        ok = range_args(ps, line, tok[4], tok[5], &op.arg[1], &op.arg[2]) && ok;
        if (ok && op.arg[0] > SIZE_MAX - op.arg[2]) {
            parse_error(ps, line, "destination offset %" PRIu64 " + length %" PRIu64 " overflows",
                        op.arg[0], op.arg[2]);
            ok = false;
        }
        op.access = ORTMEM_ACCESS_READ;
        if (args == 6 && !parse_access(tok[6], &op.access)) {
            parse_error(ps, line, "share access '%s' is not ro, rw or none", tok[6]);
            ok = false;
        }
        break;
    case REPLAY_DESTROY: {
        op.object = live_region(ps, line, tok[1]);
        if (op.object == NO_OBJECT)
            return;
        name_entry *e = lookup(ps, tok[1]);
        if (!e) {
            ps->out_of_memory = true;
            return;
        }
        e->live_region = NO_OBJECT;
        e->region_ended = line;
        break;
    }
    case REPLAY_KIND_COUNT: return;
    }
    if (!ok || ps->errors)
        return; /* after the first error only validation goes on */
    replay_trace *t = ps->trace;
    if (!grow((void **)&t->ops, &ps->ops_capacity, t->op_count + 1, sizeof *t->ops)) {
        ps->out_of_memory = true;
        return;
    }
    t->ops[t->op_count++] = op;
    t->kind_counts[kind]++;
}

bool replay_trace_load(const char *path, FILE *err, size_t max_errors, replay_trace *trace)
{
    memset(trace, 0, sizeof *trace);
    bool from_stdin = strcmp(path, "-") == 0; /* e.g. zcat big.trace.gz | ortmem-replay - */
    FILE *in = from_stdin ? stdin : fopen(path, "r");
    if (!in) {
        fprintf(err, "ortmem-replay: cannot open trace '%s': %s\n", path, strerror(errno));
        return false;
    }
    parser ps = {.path = path, .err = err, .max_errors = max_errors, .trace = trace};
    char *text = NULL;
    size_t text_capacity = 0;
    uint32_t line = 0;
    bool read_failed = false;
    for (;;) {
        ssize_t len = getline(&text, &text_capacity, in);
        if (len < 0)
            break;
        if (line == UINT32_MAX - 1) {
            parse_error(&ps, line, "trace longer than %" PRIu32 " lines", line);
            break;
        }
        line++;
        if (memchr(text, '\0', (size_t)len)) {
            parse_error(&ps, line, "contains a NUL byte (not a text trace?)");
            continue;
        }
        parse_line(&ps, line, text);
        if (ps.out_of_memory)
            break;
    }
    read_failed = ferror(in) != 0;
    free(text);
    if (!from_stdin)
        fclose(in);
    free(ps.table);
    free(ps.alloc_live_bytes);
    free(ps.holder_live_bytes);
    if (read_failed)
        fprintf(err, "ortmem-replay: reading '%s' failed\n", path);
    if (ps.out_of_memory)
        fprintf(err, "ortmem-replay: out of memory while reading '%s' (line %" PRIu32 ")\n", path,
                line);
    if (ps.errors > ps.max_errors)
        fprintf(err, "ortmem-replay: %s: %zu more errors not shown\n", path,
                ps.errors - ps.max_errors);
    if (ps.errors)
        fprintf(err, "ortmem-replay: %s: %zu malformed line%s; nothing was replayed\n", path,
                ps.bad_lines, ps.bad_lines == 1 ? "" : "s");
    if (read_failed || ps.out_of_memory || ps.errors) {
        replay_trace_free(trace);
        return false;
    }
    return true;
}

void replay_trace_free(replay_trace *trace)
{
    free(trace->ops);
    free(trace->objects);
    free(trace->names);
    free(trace->holders);
    memset(trace, 0, sizeof *trace);
}

const char *replay_object_name(const replay_trace *trace, uint32_t object)
{
    if (object >= trace->object_count)
        return "?";
    return trace->names + trace->objects[object].name;
}

/* The holder an object's line names, or NULL for the default holder. */
static const char *declared_holder(const replay_trace *trace, uint32_t object)
{
    if (object >= trace->object_count)
        return NULL;
    const replay_holder *h = &trace->holders[trace->objects[object].holder];
    return h->declared ? h->name : NULL;
}

void replay_op_format(const replay_trace *trace, const replay_op *op, char *buf, size_t size)
{
    const char *name = replay_kind_name((replay_kind)op->kind);
    const char *id = replay_object_name(trace, op->object);
    const char *holder = declared_holder(trace, op->object);
    switch ((replay_kind)op->kind) {
    case REPLAY_ALLOC:
        snprintf(buf, size, "%s %s %" PRIu64 " %" PRIu64 "%s%s", name, id, op->arg[0], op->arg[1],
                 holder ? " @" : "", holder ? holder : "");
        break;
    case REPLAY_REGION:
        snprintf(buf, size, "%s %s %" PRIu64 "%s%s", name, id, op->arg[0], holder ? " " : "",
                 holder ? holder : "");
        break;
    case REPLAY_COMMIT:
    case REPLAY_DECOMMIT:
        snprintf(buf, size, "%s %s %" PRIu64 " %" PRIu64, name, id, op->arg[0], op->arg[1]);
        break;
    case REPLAY_SHARE:
        snprintf(buf, size, "%s %s %" PRIu64 " %s %" PRIu64 " %" PRIu64 "%s", name, id, op->arg[0],
                 replay_object_name(trace, op->source), op->arg[1], op->arg[2],
                 op->access == ORTMEM_ACCESS_READ_WRITE ? " rw"
                 : op->access == ORTMEM_ACCESS_NONE     ? " none"
                                                        : "");
        break;
    default: snprintf(buf, size, "%s %s", name, id); break;
    }
}
