#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Deeper nesting than this is refused: a hostile file could otherwise drive
 * the recursive array check through the stack. */
#define GGUF_MAX_ARRAY_DEPTH 16
#define GGUF_DEFAULT_ALIGNMENT 32u

typedef unsigned long long ull;

/* A name in a message: at most 96 bytes of it (a hostile one may be huge). */
#define SHOWN(s) (int)((s).len < 96 ? (s).len : 96), (s).ptr

typedef struct kv_entry {
    eng_gguf_str key;
    eng_gguf_kind kind;
    const uint8_t *value;  /* scalar value, or an array's first element */
    eng_gguf_kind elem;    /* arrays only */
    uint64_t count;        /* arrays only */
    eng_gguf_str *strings; /* arrays of strings: every element, indexed at open */
} kv_entry;

/* Open addressing over the names of an array of entries (metadata or
 * tensors): entry i's name is at entries + i * stride + name_offset. Slots
 * hold index + 1; 0 is empty. */
typedef struct name_index {
    size_t *slots;
    size_t mask;
    const uint8_t *entries;
    size_t stride, name_offset;
} name_index;

struct eng_gguf {
    char *path;
    const uint8_t *map;
    uint64_t file_bytes;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_start;
    uint64_t kv_count;
    kv_entry *kvs;
    name_index kv_index;
    uint64_t tensor_count;
    eng_gguf_tensor *tensors;
    name_index tensor_index;
};

/* ---- Reading the file, every read checked against its end ---- */

typedef struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    eng_error *err;
} cursor;

static uint64_t left(const cursor *c)
{
    return c->size - c->pos;
}

static ortmem_status need(cursor *c, uint64_t n, const char *what)
{
    if (n > left(c))
        return eng_fail(c->err, ORTMEM_E_IO,
                        "truncated: %s needs %llu bytes at offset %llu, the file has %llu left",
                        what, (ull)n, (ull)c->pos, (ull)left(c));
    return ORTMEM_OK;
}

static uint64_t le_bytes(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static ortmem_status read_u32(cursor *c, uint32_t *out, const char *what)
{
    ortmem_status st = need(c, 4, what);
    if (st != ORTMEM_OK)
        return st;
    *out = (uint32_t)le_bytes(c->base + c->pos, 4);
    c->pos += 4;
    return ORTMEM_OK;
}

static ortmem_status read_u64(cursor *c, uint64_t *out, const char *what)
{
    ortmem_status st = need(c, 8, what);
    if (st != ORTMEM_OK)
        return st;
    *out = le_bytes(c->base + c->pos, 8);
    c->pos += 8;
    return ORTMEM_OK;
}

static ortmem_status read_str(cursor *c, eng_gguf_str *out, const char *what)
{
    uint64_t len;
    ortmem_status st = read_u64(c, &len, what);
    if (st != ORTMEM_OK)
        return st;
    if (len > left(c))
        return eng_fail(c->err, ORTMEM_E_IO,
                        "truncated: %s length %llu at offset %llu runs past the end of the file "
                        "(%llu bytes left)",
                        what, (ull)len, (ull)(c->pos - 8), (ull)left(c));
    out->ptr = (const char *)c->base + c->pos;
    out->len = len;
    c->pos += len;
    return ORTMEM_OK;
}

/* Bytes of one scalar value of kind k; 0 for strings, arrays and unknown kinds. */
static uint64_t scalar_bytes(uint32_t kind)
{
    switch (kind) {
    case ENG_GGUF_U8:
    case ENG_GGUF_I8:
    case ENG_GGUF_BOOL: return 1;
    case ENG_GGUF_U16:
    case ENG_GGUF_I16: return 2;
    case ENG_GGUF_U32:
    case ENG_GGUF_I32:
    case ENG_GGUF_F32: return 4;
    case ENG_GGUF_U64:
    case ENG_GGUF_I64:
    case ENG_GGUF_F64: return 8;
    default: return 0;
    }
}

static const char *kind_name(uint32_t kind)
{
    static const char *const names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    return kind < sizeof names / sizeof names[0] ? names[kind] : "unknown";
}

/* Skips over one array body (element kind, count, elements), checking it;
 * depth counts the arrays around it. */
static ortmem_status skip_array(cursor *c, unsigned depth, uint32_t *elem_out, uint64_t *count_out,
                                uint64_t *first_out)
{
    if (depth > GGUF_MAX_ARRAY_DEPTH)
        return eng_fail(c->err, ORTMEM_E_INVALID, "arrays nested deeper than %d at offset %llu",
                        GGUF_MAX_ARRAY_DEPTH, (ull)c->pos);
    uint32_t elem;
    uint64_t count;
    ortmem_status st = read_u32(c, &elem, "array element kind");
    if (st == ORTMEM_OK)
        st = read_u64(c, &count, "array count");
    if (st != ORTMEM_OK)
        return st;
    if (elem > ENG_GGUF_F64)
        return eng_fail(c->err, ORTMEM_E_INVALID,
                        "array element kind %u is not a GGUF kind (0..12)", elem);
    if (elem_out) {
        *elem_out = elem;
        *count_out = count;
        *first_out = c->pos;
    }
    uint64_t size = scalar_bytes(elem);
    if (size) {
        if (count > UINT64_MAX / size)
            return eng_fail(c->err, ORTMEM_E_OVERFLOW,
                            "array of %llu %s elements: %llu * %llu bytes overflows 64 bits",
                            (ull)count, kind_name(elem), (ull)count, (ull)size);
        if (count * size > left(c))
            return eng_fail(c->err, ORTMEM_E_IO,
                            "truncated: array of %llu %s elements needs %llu bytes at offset %llu, "
                            "the file has %llu left",
                            (ull)count, kind_name(elem), (ull)(count * size), (ull)c->pos,
                            (ull)left(c));
        c->pos += count * size;
        return ORTMEM_OK;
    }
    /* Strings take at least their 8-byte length, arrays their 12-byte header. */
    uint64_t least = elem == ENG_GGUF_STRING ? 8 : 12;
    if (count > left(c) / least)
        return eng_fail(c->err, ORTMEM_E_IO,
                        "truncated: array count %llu of %s elements cannot fit in the %llu bytes "
                        "left at offset %llu",
                        (ull)count, kind_name(elem), (ull)left(c), (ull)c->pos);
    for (uint64_t i = 0; i < count; i++) {
        eng_gguf_str s;
        st = elem == ENG_GGUF_STRING ? read_str(c, &s, "string")
                                     : skip_array(c, depth + 1, NULL, NULL, NULL);
        if (st != ORTMEM_OK)
            return eng_wrap(c->err, "element %llu of %llu", (ull)i, (ull)count);
    }
    return ORTMEM_OK;
}

/* ---- Name index ---- */

static uint64_t hash_bytes(const char *p, uint64_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (uint64_t i = 0; i < len; i++) {
        h ^= (uint8_t)p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static bool str_same(eng_gguf_str a, const char *p, uint64_t len)
{
    return a.len == len && (len == 0 || memcmp(a.ptr, p, len) == 0);
}

static eng_gguf_str entry_name(const name_index *ix, size_t i)
{
    eng_gguf_str name;
    memcpy(&name, ix->entries + i * ix->stride + ix->name_offset, sizeof name);
    return name;
}

/* The slot holding the name p[0..len), or the empty slot where it would go. */
static size_t index_slot(const name_index *ix, const char *p, uint64_t len)
{
    size_t slot = (size_t)hash_bytes(p, len) & ix->mask;
    while (ix->slots[slot] && !str_same(entry_name(ix, ix->slots[slot] - 1), p, len))
        slot = (slot + 1) & ix->mask;
    return slot;
}

/* Indexes the n entries; a repeated name is an error naming both entries
 * (what: "metadata entry", "tensor"). */
static ortmem_status index_build(name_index *ix, const void *entries, size_t stride,
                                 size_t name_offset, uint64_t n, const char *what, eng_error *err)
{
    size_t cap = 16;
    while (cap < n * 2) /* n is bounded by the file size, so this cannot overflow */
        cap *= 2;
    ix->slots = calloc(cap, sizeof *ix->slots);
    if (!ix->slots)
        return eng_fail(err, ORTMEM_E_NOMEM, "name index of %zu slots", cap);
    ix->mask = cap - 1;
    ix->entries = entries;
    ix->stride = stride;
    ix->name_offset = name_offset;
    for (uint64_t i = 0; i < n; i++) {
        eng_gguf_str name = entry_name(ix, i);
        size_t slot = index_slot(ix, name.ptr, name.len);
        if (ix->slots[slot])
            return eng_fail(err, ORTMEM_E_INVALID, "%s %llu: name '%.*s' repeats %s %zu", what,
                            (ull)i, SHOWN(name), what, ix->slots[slot] - 1);
        ix->slots[slot] = (size_t)i + 1;
    }
    return ORTMEM_OK;
}

/* Entry index + 1 of name, 0 when absent. */
static size_t index_find(const name_index *ix, const char *name)
{
    return ix->slots[index_slot(ix, name, strlen(name))];
}

/* ---- Metadata ---- */

static ortmem_status read_kv(eng_gguf *g, cursor *c, uint64_t i, eng_error *err)
{
    kv_entry *kv = &g->kvs[i];
    uint32_t kind;
    ortmem_status st = read_str(c, &kv->key, "key");
    if (st == ORTMEM_OK)
        st = read_u32(c, &kind, "value kind");
    if (st != ORTMEM_OK)
        return eng_wrap(err, "metadata entry %llu of %llu", (ull)i, (ull)g->kv_count);
#define KV_FAIL() eng_wrap(err, "metadata entry %llu '%.*s'", (ull)i, SHOWN(kv->key))
    if (kind > ENG_GGUF_F64) {
        eng_fail(err, ORTMEM_E_INVALID, "value kind %u is not a GGUF kind (0..12)", kind);
        return KV_FAIL();
    }
    kv->kind = (eng_gguf_kind)kind;
    kv->value = c->base + c->pos;
    if (kind == ENG_GGUF_STRING) {
        eng_gguf_str s;
        if (read_str(c, &s, "string value") != ORTMEM_OK)
            return KV_FAIL();
    } else if (kind == ENG_GGUF_ARRAY) {
        uint32_t elem;
        uint64_t first;
        if (skip_array(c, 1, &elem, &kv->count, &first) != ORTMEM_OK)
            return KV_FAIL();
        kv->elem = (eng_gguf_kind)elem;
        kv->value = c->base + first;
        if (elem == ENG_GGUF_STRING && kv->count > 0) {
            /* The array was checked whole, so re-reading it cannot fail. */
            kv->strings = malloc(kv->count * sizeof *kv->strings);
            if (!kv->strings) {
                eng_fail(err, ORTMEM_E_NOMEM, "index of %llu strings", (ull)kv->count);
                return KV_FAIL();
            }
            cursor r = {c->base, c->size, first, err};
            for (uint64_t j = 0; j < kv->count; j++)
                read_str(&r, &kv->strings[j], "string");
        }
    } else {
        if (need(c, scalar_bytes(kind), "value") != ORTMEM_OK)
            return KV_FAIL();
        c->pos += scalar_bytes(kind);
    }
    return ORTMEM_OK;
#undef KV_FAIL
}

static const kv_entry *find_kv(const eng_gguf *g, const char *key)
{
    size_t found = index_find(&g->kv_index, key);
    return found ? &g->kvs[found - 1] : NULL;
}

/* ---- Tensor infos ---- */

static ortmem_status read_tensor_info(eng_gguf *g, cursor *c, uint64_t i, eng_error *err)
{
    eng_gguf_tensor *t = &g->tensors[i];
    ortmem_status st = read_str(c, &t->name, "tensor name");
    if (st != ORTMEM_OK)
        return eng_wrap(err, "tensor info %llu of %llu", (ull)i, (ull)g->tensor_count);
#define T_FAIL() eng_wrap(err, "tensor %llu '%.*s'", (ull)i, SHOWN(t->name))
    if (read_u32(c, &t->n_dims, "n_dims") != ORTMEM_OK)
        return T_FAIL();
    if (t->n_dims < 1 || t->n_dims > 4) {
        eng_fail(err, ORTMEM_E_INVALID, "n_dims %u is outside 1..4", t->n_dims);
        return T_FAIL();
    }
    for (uint32_t d = 0; d < 4; d++) {
        t->ne[d] = 1;
        if (d < t->n_dims && read_u64(c, &t->ne[d], "ne") != ORTMEM_OK)
            return T_FAIL();
        if (t->ne[d] > (uint64_t)INT64_MAX) {
            eng_fail(err, ORTMEM_E_INVALID, "ne[%u] %llu is past INT64_MAX", d, (ull)t->ne[d]);
            return T_FAIL();
        }
    }
    if (read_u32(c, &t->type, "type") != ORTMEM_OK ||
        read_u64(c, &t->offset, "offset") != ORTMEM_OK)
        return T_FAIL();
    eng_type_traits tr = eng_type_traits_of(t->type);
    if (!tr.name) {
        eng_fail(err, ORTMEM_E_UNSUPPORTED, "type id %u is not a type the engine knows", t->type);
        return T_FAIL();
    }
    if (t->ne[0] % tr.block_elems) {
        eng_fail(err, ORTMEM_E_INVALID, "ne[0] %llu is not a multiple of the %s block (%u)",
                 (ull)t->ne[0], tr.name, tr.block_elems);
        return T_FAIL();
    }
    uint64_t bytes = t->ne[0] / tr.block_elems;
    if (bytes && bytes > UINT64_MAX / tr.block_bytes)
        goto overflow;
    bytes *= tr.block_bytes;
    for (uint32_t d = 1; d < 4; d++) {
        if (t->ne[d] && bytes > (uint64_t)INT64_MAX / t->ne[d])
            goto overflow;
        bytes *= t->ne[d];
    }
    if (bytes > (uint64_t)INT64_MAX)
        goto overflow;
    t->bytes = bytes;
    if (t->offset % g->alignment) {
        eng_fail(err, ORTMEM_E_INVALID, "offset %llu is not aligned to %llu", (ull)t->offset,
                 (ull)g->alignment);
        return T_FAIL();
    }
    return ORTMEM_OK;
overflow:
    eng_fail(err, ORTMEM_E_OVERFLOW,
             "size of %s {%llu, %llu, %llu, %llu} overflows (block %u values in %u bytes)", tr.name,
             (ull)t->ne[0], (ull)t->ne[1], (ull)t->ne[2], (ull)t->ne[3], tr.block_elems,
             tr.block_bytes);
    return T_FAIL();
#undef T_FAIL
}

static int compare_by_offset(const void *a, const void *b, void *ctx)
{
    const eng_gguf_tensor *ts = ctx;
    const eng_gguf_tensor *x = &ts[*(const uint64_t *)a], *y = &ts[*(const uint64_t *)b];
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Every tensor inside the data section, none overlapping another. */
static ortmem_status place_tensors(eng_gguf *g, eng_error *err)
{
    uint64_t data_bytes = g->file_bytes - g->data_start;
    for (uint64_t i = 0; i < g->tensor_count; i++) {
        eng_gguf_tensor *t = &g->tensors[i];
        if (t->offset > data_bytes || t->bytes > data_bytes - t->offset)
            return eng_fail(
                err, ORTMEM_E_IO,
                "tensor %llu '%.*s': bytes %llu..%llu of the data section run past "
                "its end (the data section holds %llu bytes from file offset %llu; truncated?)",
                (ull)i, SHOWN(t->name), (ull)t->offset, (ull)(t->offset + t->bytes),
                (ull)data_bytes, (ull)g->data_start);
        t->data = g->map + g->data_start + t->offset;
    }
    if (g->tensor_count < 2)
        return ORTMEM_OK;
    uint64_t *order = malloc(g->tensor_count * sizeof *order);
    if (!order)
        return eng_fail(err, ORTMEM_E_NOMEM, "order of %llu tensors", (ull)g->tensor_count);
    for (uint64_t i = 0; i < g->tensor_count; i++)
        order[i] = i;
    qsort_r(order, g->tensor_count, sizeof *order, compare_by_offset, g->tensors);
    ortmem_status st = ORTMEM_OK;
    for (uint64_t k = 1; k < g->tensor_count && st == ORTMEM_OK; k++) {
        const eng_gguf_tensor *a = &g->tensors[order[k - 1]], *b = &g->tensors[order[k]];
        if (a->offset + a->bytes > b->offset)
            st = eng_fail(err, ORTMEM_E_INVALID,
                          "tensor %llu '%.*s' (bytes %llu..%llu) overlaps tensor %llu '%.*s' "
                          "(bytes %llu..%llu)",
                          (ull)order[k - 1], SHOWN(a->name), (ull)a->offset,
                          (ull)(a->offset + a->bytes), (ull)order[k], SHOWN(b->name),
                          (ull)b->offset, (ull)(b->offset + b->bytes));
    }
    free(order);
    return st;
}

/* ---- Open and close ---- */

void eng_gguf_close(eng_gguf *g)
{
    if (!g)
        return;
    if (g->kvs)
        for (uint64_t i = 0; i < g->kv_count; i++)
            free(g->kvs[i].strings);
    free(g->kvs);
    free(g->kv_index.slots);
    free(g->tensors);
    free(g->tensor_index.slots);
    if (g->map)
        munmap((void *)g->map, (size_t)g->file_bytes);
    free(g->path);
    free(g);
}

static ortmem_status read_alignment(eng_gguf *g, eng_error *err)
{
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const kv_entry *kv = find_kv(g, "general.alignment");
    if (!kv)
        return ORTMEM_OK;
    if (kv->kind != ENG_GGUF_U32)
        return eng_fail(err, ORTMEM_E_INVALID, "general.alignment is %s, the format says u32",
                        kind_name(kv->kind));
    uint32_t a = (uint32_t)le_bytes(kv->value, 4);
    if (a == 0 || (a & (a - 1)))
        return eng_fail(err, ORTMEM_E_INVALID, "general.alignment %u is not a power of two", a);
    g->alignment = a;
    return ORTMEM_OK;
}

static ortmem_status parse(eng_gguf *g, eng_error *err)
{
    cursor c = {g->map, g->file_bytes, 0, err};
    uint32_t magic;
    ortmem_status st = read_u32(&c, &magic, "magic");
    if (st != ORTMEM_OK)
        return st;
    if (memcmp(g->map, "GGUF", 4) != 0)
        return eng_fail(err, ORTMEM_E_INVALID,
                        "magic 0x%08x is not \"GGUF\" (0x%08x little-endian)", magic, 0x46554747u);
    if ((st = read_u32(&c, &g->version, "version")) != ORTMEM_OK)
        return st;
    if (g->version != 2 && g->version != 3) {
        uint32_t swapped = __builtin_bswap32(g->version);
        return eng_fail(err, ORTMEM_E_UNSUPPORTED, "version %u is not 2 or 3%s", g->version,
                        swapped == 2 || swapped == 3 ? " (a big-endian file: not supported)" : "");
    }
    if ((st = read_u64(&c, &g->tensor_count, "tensor_count")) != ORTMEM_OK ||
        (st = read_u64(&c, &g->kv_count, "kv_count")) != ORTMEM_OK)
        return st;
    /* A metadata entry takes at least 13 bytes (key length, kind, one byte),
     * a tensor info at least 32 (name length, n_dims, one ne, type, offset). */
    if (g->kv_count > left(&c) / 13)
        return eng_fail(err, ORTMEM_E_INVALID,
                        "kv_count %llu cannot fit in the %llu bytes after the header (13 bytes "
                        "each at least)",
                        (ull)g->kv_count, (ull)left(&c));
    if (g->tensor_count > (left(&c) - g->kv_count * 13) / 32)
        return eng_fail(err, ORTMEM_E_INVALID,
                        "tensor_count %llu cannot fit in the %llu bytes after the header and "
                        "metadata (32 bytes each at least)",
                        (ull)g->tensor_count, (ull)(left(&c) - g->kv_count * 13));
    g->kvs = calloc(g->kv_count ? g->kv_count : 1, sizeof *g->kvs);
    g->tensors = calloc(g->tensor_count ? g->tensor_count : 1, sizeof *g->tensors);
    if (!g->kvs || !g->tensors)
        return eng_fail(err, ORTMEM_E_NOMEM, "tables of %llu entries and %llu tensors",
                        (ull)g->kv_count, (ull)g->tensor_count);
    for (uint64_t i = 0; i < g->kv_count; i++)
        if ((st = read_kv(g, &c, i, err)) != ORTMEM_OK)
            return st;
    st = index_build(&g->kv_index, g->kvs, sizeof *g->kvs, offsetof(kv_entry, key), g->kv_count,
                     "metadata entry", err);
    if (st != ORTMEM_OK || (st = read_alignment(g, err)) != ORTMEM_OK)
        return st;
    for (uint64_t i = 0; i < g->tensor_count; i++)
        if ((st = read_tensor_info(g, &c, i, err)) != ORTMEM_OK)
            return st;
    st = index_build(&g->tensor_index, g->tensors, sizeof *g->tensors,
                     offsetof(eng_gguf_tensor, name), g->tensor_count, "tensor", err);
    if (st != ORTMEM_OK)
        return st;
    uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    if (pad > left(&c) && g->tensor_count > 0)
        return eng_fail(err, ORTMEM_E_IO,
                        "truncated: the data section starts at offset %llu (aligned to %llu), "
                        "the file has %llu bytes",
                        (ull)(c.pos + pad), (ull)g->alignment, (ull)g->file_bytes);
    g->data_start = pad > left(&c) ? g->file_bytes : c.pos + pad;
    return place_tensors(g, err);
}

ortmem_status eng_gguf_open(const char *path, eng_gguf **out, eng_error *err)
{
    if (!path || !out)
        return eng_fail(err, ORTMEM_E_INVALID, "gguf open: path %p, out %p", (const void *)path,
                        (void *)out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return eng_fail(err, ORTMEM_E_IO, "open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return eng_fail(err, ORTMEM_E_IO, "stat %s: %s", path, strerror(e));
    }
    if (sb.st_size < 24) {
        close(fd);
        return eng_fail(err, ORTMEM_E_IO, "truncated: %s has %lld bytes, a GGUF header needs 24",
                        path, (long long)sb.st_size);
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED)
        return eng_fail(err, ORTMEM_E_IO, "mmap %s (%lld bytes): %s", path, (long long)sb.st_size,
                        strerror(map_errno));
    eng_gguf *g = calloc(1, sizeof *g);
    char *copy = strdup(path);
    if (!g || !copy) {
        free(g);
        free(copy);
        munmap(map, (size_t)sb.st_size);
        return eng_fail(err, ORTMEM_E_NOMEM, "gguf reader for %s", path);
    }
    g->path = copy;
    g->map = map;
    g->file_bytes = (uint64_t)sb.st_size;
    ortmem_status st = parse(g, err);
    if (st != ORTMEM_OK) {
        eng_gguf_close(g);
        return eng_wrap(err, "%s", path);
    }
    *out = g;
    return ORTMEM_OK;
}

uint32_t eng_gguf_version(const eng_gguf *g)
{
    return g->version;
}

uint64_t eng_gguf_alignment(const eng_gguf *g)
{
    return g->alignment;
}

uint64_t eng_gguf_file_bytes(const eng_gguf *g)
{
    return g->file_bytes;
}

uint64_t eng_gguf_data_offset(const eng_gguf *g)
{
    return g->data_start;
}

const char *eng_gguf_path(const eng_gguf *g)
{
    return g->path;
}

/* ---- Metadata lookups ---- */

uint64_t eng_gguf_kv_count(const eng_gguf *g)
{
    return g->kv_count;
}

ortmem_status eng_gguf_kv_at(const eng_gguf *g, uint64_t i, eng_gguf_str *key, eng_gguf_kind *kind,
                             eng_error *err)
{
    if (i >= g->kv_count)
        return eng_fail(err, ORTMEM_E_RANGE, "metadata entry %llu: the file has %llu", (ull)i,
                        (ull)g->kv_count);
    if (key)
        *key = g->kvs[i].key;
    if (kind)
        *kind = g->kvs[i].kind;
    return ORTMEM_OK;
}

bool eng_gguf_has(const eng_gguf *g, const char *key)
{
    return find_kv(g, key) != NULL;
}

static ortmem_status lookup(const eng_gguf *g, const char *key, const kv_entry **out,
                            eng_error *err)
{
    *out = find_kv(g, key);
    if (!*out)
        return eng_fail(err, ORTMEM_E_NOT_FOUND, "metadata key '%s' is not in %s", key, g->path);
    return ORTMEM_OK;
}

/* An integer value of kind k at p, as a sign and magnitude pair: negative
 * when *neg, *mag its absolute value. false when k is not an integer kind. */
static bool read_integer(uint32_t k, const uint8_t *p, bool *neg, uint64_t *mag)
{
    uint64_t size = scalar_bytes(k);
    bool is_signed =
        k == ENG_GGUF_I8 || k == ENG_GGUF_I16 || k == ENG_GGUF_I32 || k == ENG_GGUF_I64;
    bool is_unsigned =
        k == ENG_GGUF_U8 || k == ENG_GGUF_U16 || k == ENG_GGUF_U32 || k == ENG_GGUF_U64;
    if (!is_signed && !is_unsigned)
        return false;
    uint64_t raw = le_bytes(p, (unsigned)size);
    *neg = false;
    *mag = raw;
    if (is_signed) {
        uint64_t sign_bit = 1ull << (size * 8 - 1);
        if (raw & sign_bit) {
            uint64_t full = size == 8 ? raw : raw | ~((sign_bit << 1) - 1); /* sign-extend */
            *neg = true;
            *mag = ~full + 1;
        }
    }
    return true;
}

static ortmem_status integer_of(const char *key, uint32_t kind, const uint8_t *p, bool *neg,
                                uint64_t *mag, eng_error *err)
{
    if (!read_integer(kind, p, neg, mag))
        return eng_fail(err, ORTMEM_E_INVALID, "metadata key '%s' is %s, not an integer", key,
                        kind_name(kind));
    return ORTMEM_OK;
}

static ortmem_status unsigned_of(const char *key, uint32_t kind, const uint8_t *p, uint64_t max,
                                 uint64_t *out, const char *want, eng_error *err)
{
    bool neg = false;
    uint64_t mag = 0;
    ortmem_status st = integer_of(key, kind, p, &neg, &mag, err);
    if (st != ORTMEM_OK)
        return st;
    if ((neg && mag) || mag > max)
        return eng_fail(err, ORTMEM_E_INVALID, "metadata key '%s' (%s) holds %s%llu, outside %s",
                        key, kind_name(kind), neg ? "-" : "", (ull)mag, want);
    *out = mag;
    return ORTMEM_OK;
}

static ortmem_status signed_of(const char *key, uint32_t kind, const uint8_t *p, int64_t *out,
                               eng_error *err)
{
    bool neg = false;
    uint64_t mag = 0;
    ortmem_status st = integer_of(key, kind, p, &neg, &mag, err);
    if (st != ORTMEM_OK)
        return st;
    if (neg ? mag > (uint64_t)INT64_MAX + 1 : mag > (uint64_t)INT64_MAX)
        return eng_fail(err, ORTMEM_E_INVALID, "metadata key '%s' (%s) holds %llu, outside i64",
                        key, kind_name(kind), (ull)mag);
    *out = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
    return ORTMEM_OK;
}

static ortmem_status float_of(const char *key, uint32_t kind, const uint8_t *p, float *out,
                              eng_error *err)
{
    float f;
    if (kind == ENG_GGUF_F32) {
        uint32_t bits = (uint32_t)le_bytes(p, 4);
        memcpy(&f, &bits, sizeof f);
    } else if (kind == ENG_GGUF_F64) {
        uint64_t bits = le_bytes(p, 8);
        double d;
        memcpy(&d, &bits, sizeof d);
        if (!isfinite(d) || fabs(d) > 3.4028234663852886e38)
            return eng_fail(err, ORTMEM_E_INVALID,
                            "metadata key '%s' (f64) holds %g, not a finite float", key, d);
        f = (float)d;
    } else {
        return eng_fail(err, ORTMEM_E_INVALID, "metadata key '%s' is %s, not f32 or f64", key,
                        kind_name(kind));
    }
    if (!isfinite(f))
        return eng_fail(err, ORTMEM_E_INVALID, "metadata key '%s' holds %g, not finite", key,
                        (double)f);
    *out = f;
    return ORTMEM_OK;
}

ortmem_status eng_gguf_get_u32(const eng_gguf *g, const char *key, uint32_t *out, eng_error *err)
{
    const kv_entry *kv;
    uint64_t v;
    ortmem_status st = lookup(g, key, &kv, err);
    if (st == ORTMEM_OK)
        st = unsigned_of(key, kv->kind, kv->value, UINT32_MAX, &v, "u32", err);
    if (st == ORTMEM_OK)
        *out = (uint32_t)v;
    return st;
}

ortmem_status eng_gguf_get_u64(const eng_gguf *g, const char *key, uint64_t *out, eng_error *err)
{
    const kv_entry *kv;
    ortmem_status st = lookup(g, key, &kv, err);
    if (st == ORTMEM_OK)
        st = unsigned_of(key, kv->kind, kv->value, UINT64_MAX, out, "u64", err);
    return st;
}

ortmem_status eng_gguf_get_i64(const eng_gguf *g, const char *key, int64_t *out, eng_error *err)
{
    const kv_entry *kv;
    ortmem_status st = lookup(g, key, &kv, err);
    if (st == ORTMEM_OK)
        st = signed_of(key, kv->kind, kv->value, out, err);
    return st;
}

ortmem_status eng_gguf_get_f32(const eng_gguf *g, const char *key, float *out, eng_error *err)
{
    const kv_entry *kv;
    ortmem_status st = lookup(g, key, &kv, err);
    if (st == ORTMEM_OK)
        st = float_of(key, kv->kind, kv->value, out, err);
    return st;
}

ortmem_status eng_gguf_get_bool(const eng_gguf *g, const char *key, bool *out, eng_error *err)
{
    const kv_entry *kv;
    ortmem_status st = lookup(g, key, &kv, err);
    if (st != ORTMEM_OK)
        return st;
    if (kv->kind != ENG_GGUF_BOOL)
        return eng_fail(err, ORTMEM_E_INVALID, "metadata key '%s' is %s, not bool", key,
                        kind_name(kv->kind));
    *out = kv->value[0] != 0;
    return ORTMEM_OK;
}

ortmem_status eng_gguf_get_str(const eng_gguf *g, const char *key, eng_gguf_str *out,
                               eng_error *err)
{
    const kv_entry *kv;
    ortmem_status st = lookup(g, key, &kv, err);
    if (st != ORTMEM_OK)
        return st;
    if (kv->kind != ENG_GGUF_STRING)
        return eng_fail(err, ORTMEM_E_INVALID, "metadata key '%s' is %s, not string", key,
                        kind_name(kv->kind));
    out->len = le_bytes(kv->value, 8);
    out->ptr = (const char *)kv->value + 8;
    return ORTMEM_OK;
}

static ortmem_status lookup_array(const eng_gguf *g, const char *key, const kv_entry **out,
                                  eng_error *err)
{
    ortmem_status st = lookup(g, key, out, err);
    if (st != ORTMEM_OK)
        return st;
    if ((*out)->kind != ENG_GGUF_ARRAY)
        return eng_fail(err, ORTMEM_E_INVALID, "metadata key '%s' is %s, not an array", key,
                        kind_name((*out)->kind));
    if ((*out)->elem == ENG_GGUF_ARRAY)
        return eng_fail(err, ORTMEM_E_UNSUPPORTED,
                        "metadata key '%s' is an array of %llu arrays (nested arrays are checked, "
                        "not exposed)",
                        key, (ull)(*out)->count);
    return ORTMEM_OK;
}

ortmem_status eng_gguf_get_array(const eng_gguf *g, const char *key, eng_gguf_kind *elem,
                                 uint64_t *count, eng_error *err)
{
    const kv_entry *kv;
    ortmem_status st = lookup_array(g, key, &kv, err);
    if (st != ORTMEM_OK)
        return st;
    if (elem)
        *elem = kv->elem;
    if (count)
        *count = kv->count;
    return ORTMEM_OK;
}

static ortmem_status array_element(const eng_gguf *g, const char *key, uint64_t i,
                                   const kv_entry **out, eng_error *err)
{
    ortmem_status st = lookup_array(g, key, out, err);
    if (st != ORTMEM_OK)
        return st;
    if (i >= (*out)->count)
        return eng_fail(err, ORTMEM_E_RANGE, "metadata key '%s': element %llu of an array of %llu",
                        key, (ull)i, (ull)(*out)->count);
    return ORTMEM_OK;
}

ortmem_status eng_gguf_array_str(const eng_gguf *g, const char *key, uint64_t i, eng_gguf_str *out,
                                 eng_error *err)
{
    const kv_entry *kv;
    ortmem_status st = array_element(g, key, i, &kv, err);
    if (st != ORTMEM_OK)
        return st;
    if (kv->elem != ENG_GGUF_STRING)
        return eng_fail(err, ORTMEM_E_INVALID, "metadata key '%s' is an array of %s, not strings",
                        key, kind_name(kv->elem));
    *out = kv->strings[i];
    return ORTMEM_OK;
}

ortmem_status eng_gguf_array_i64(const eng_gguf *g, const char *key, uint64_t i, int64_t *out,
                                 eng_error *err)
{
    const kv_entry *kv;
    ortmem_status st = array_element(g, key, i, &kv, err);
    if (st != ORTMEM_OK)
        return st;
    return signed_of(key, kv->elem, kv->value + i * scalar_bytes(kv->elem), out, err);
}

ortmem_status eng_gguf_array_f32(const eng_gguf *g, const char *key, uint64_t i, float *out,
                                 eng_error *err)
{
    const kv_entry *kv;
    ortmem_status st = array_element(g, key, i, &kv, err);
    if (st != ORTMEM_OK)
        return st;
    return float_of(key, kv->elem, kv->value + i * scalar_bytes(kv->elem), out, err);
}

/* ---- Tensors ---- */

uint64_t eng_gguf_tensor_count(const eng_gguf *g)
{
    return g->tensor_count;
}

const eng_gguf_tensor *eng_gguf_tensor_at(const eng_gguf *g, uint64_t i)
{
    return i < g->tensor_count ? &g->tensors[i] : NULL;
}

ortmem_status eng_gguf_find_tensor(const eng_gguf *g, const char *name, const eng_gguf_tensor **out,
                                   eng_error *err)
{
    size_t found = index_find(&g->tensor_index, name);
    if (!found)
        return eng_fail(err, ORTMEM_E_NOT_FOUND, "tensor '%s' is not in %s (%llu tensors)", name,
                        g->path, (ull)g->tensor_count);
    *out = &g->tensors[found - 1];
    return ORTMEM_OK;
}

bool eng_gguf_str_eq(eng_gguf_str s, const char *c)
{
    return str_same(s, c, strlen(c));
}
