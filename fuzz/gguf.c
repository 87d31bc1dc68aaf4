/* The GGUF reader on hostile bytes: eng_gguf_open, then every key through
 * every getter, every array element, every tensor (found again by name, a
 * few rows dequantized) and a tokenizer built from whatever the metadata
 * holds. Checks that everything the reader hands out lies inside the file. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gguf/dequant.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

/* Elements looked at per array and per tensor row: enough to reach every
 * branch, few enough to keep thousands of inputs a second. */
#define MAX_ELEMS 512
#define MAX_ROWS 4
#define MAX_ROW_VALUES 4096

typedef struct span {
    const uint8_t *lo, *hi;
} span;

static void check_inside(span file, const void *ptr, uint64_t len, const char *what)
{
    const uint8_t *p = ptr;
    FUZZ_CHECK(len == 0 || (p >= file.lo && len <= (uint64_t)(file.hi - p)),
               "%s: %llu bytes at %p outside the file [%p, %p)", what, (unsigned long long)len, ptr,
               (const void *)file.lo, (const void *)file.hi);
}

static void walk_kv(const eng_gguf *g, uint64_t i, span file)
{
    eng_gguf_str key;
    eng_gguf_kind kind;
    eng_error err;
    if (eng_gguf_kv_at(g, i, &key, &kind, &err) != ORTMEM_OK)
        return;
    check_inside(file, key.ptr, key.len, "key");
    FUZZ_CHECK(kind <= ENG_GGUF_F64, "kind %d", (int)kind);
    char name[256];
    if (key.len >= sizeof name || memchr(key.ptr, '\0', key.len))
        return; /* not reachable by a C-string lookup */
    memcpy(name, key.ptr, key.len);
    name[key.len] = '\0';
    FUZZ_CHECK(eng_gguf_has(g, name), "key %s listed but not found", name);

    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f32;
    bool b;
    eng_gguf_str s;
    (void)eng_gguf_get_u32(g, name, &u32, &err);
    (void)eng_gguf_get_u64(g, name, &u64, &err);
    (void)eng_gguf_get_i64(g, name, &i64, &err);
    (void)eng_gguf_get_bool(g, name, &b, &err);
    if (eng_gguf_get_f32(g, name, &f32, &err) == ORTMEM_OK)
        FUZZ_CHECK(f32 == f32, "%s: get_f32 gave NaN", name);
    if (eng_gguf_get_str(g, name, &s, &err) == ORTMEM_OK)
        check_inside(file, s.ptr, s.len, "string value");

    eng_gguf_kind elem;
    uint64_t count;
    if (eng_gguf_get_array(g, name, &elem, &count, &err) != ORTMEM_OK)
        return;
    FUZZ_CHECK(kind == ENG_GGUF_ARRAY, "%s: get_array on kind %d", name, (int)kind);
    /* Every element costs at least one byte of the file. */
    FUZZ_CHECK(count <= eng_gguf_file_bytes(g) || elem == ENG_GGUF_ARRAY, "%s: %llu elements", name,
               (unsigned long long)count);
    uint64_t n = count < MAX_ELEMS ? count : MAX_ELEMS;
    for (uint64_t k = 0; k < n; k++) {
        if (eng_gguf_array_str(g, name, k, &s, &err) == ORTMEM_OK)
            check_inside(file, s.ptr, s.len, "array string");
        (void)eng_gguf_array_i64(g, name, k, &i64, &err);
        (void)eng_gguf_array_f32(g, name, k, &f32, &err);
    }
    /* Past the end is a status, never a read. */
    FUZZ_CHECK(eng_gguf_array_str(g, name, count, &s, &err) != ORTMEM_OK, "%s[%llu]", name,
               (unsigned long long)count);
    FUZZ_CHECK(eng_gguf_array_i64(g, name, count, &i64, &err) != ORTMEM_OK, "%s[%llu]", name,
               (unsigned long long)count);
}

static void walk_tensor(const eng_gguf *g, uint64_t i, span file, float *row)
{
    const eng_gguf_tensor *t = eng_gguf_tensor_at(g, i);
    FUZZ_CHECK(t != NULL, "tensor %llu of %llu is NULL", (unsigned long long)i,
               (unsigned long long)eng_gguf_tensor_count(g));
    check_inside(file, t->name.ptr, t->name.len, "tensor name");
    check_inside(file, t->data, t->bytes, "tensor data");
    eng_type_traits tr = eng_type_traits_of(t->type);
    FUZZ_CHECK(tr.block_elems != 0, "tensor of unknown type %u", t->type);
    FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= 4, "n_dims %u", t->n_dims);
    FUZZ_CHECK(t->ne[0] % tr.block_elems == 0, "ne0 %llu, block %u", (unsigned long long)t->ne[0],
               tr.block_elems);
    uint64_t row_bytes = t->ne[0] / tr.block_elems * tr.block_bytes;
    uint64_t rows = t->ne[1] * t->ne[2] * t->ne[3]; /* the reader checked the overflow */
    FUZZ_CHECK(t->bytes == row_bytes * rows, "bytes %llu, rows %llu of %llu",
               (unsigned long long)t->bytes, (unsigned long long)rows,
               (unsigned long long)row_bytes);
    FUZZ_CHECK(t->offset % eng_gguf_alignment(g) == 0, "offset %llu, alignment %llu",
               (unsigned long long)t->offset, (unsigned long long)eng_gguf_alignment(g));

    if (t->name.len < 256 && !memchr(t->name.ptr, '\0', t->name.len)) {
        char name[256];
        memcpy(name, t->name.ptr, t->name.len);
        name[t->name.len] = '\0';
        const eng_gguf_tensor *found = NULL;
        eng_error err;
        FUZZ_CHECK(eng_gguf_find_tensor(g, name, &found, &err) == ORTMEM_OK && found == t,
                   "tensor %s not found by name", name);
    }

    if (t->ne[0] > MAX_ROW_VALUES)
        return;
    /* The activation formats have no conversion (engine/gguf/dequant.h). */
    bool activation = t->type == ENG_TYPE_Q8_1 || t->type == ENG_TYPE_Q8_K;
    for (uint64_t r = 0; r < rows && r < MAX_ROWS; r++) {
        eng_error err;
        const uint8_t *src = (const uint8_t *)t->data + r * row_bytes;
        ortmem_status st = eng_dequantize(t->type, src, row, (size_t)t->ne[0], &err);
        FUZZ_CHECK(st == (activation ? ORTMEM_E_UNSUPPORTED : ORTMEM_OK), "dequantize %s x%llu: %s",
                   tr.name, (unsigned long long)t->ne[0], err.message);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static float row[MAX_ROW_VALUES];
    const char *path = fuzz_as_file(data, size);
    if (!path)
        return 0;
    eng_gguf *g = NULL;
    eng_error err;
    if (eng_gguf_open(path, &g, &err) != ORTMEM_OK) {
        FUZZ_CHECK(g == NULL && err.status != ORTMEM_OK && err.message[0], "failed open: %s",
                   err.message);
        return 0;
    }
    FUZZ_CHECK(eng_gguf_file_bytes(g) == size, "file bytes %llu, input %zu",
               (unsigned long long)eng_gguf_file_bytes(g), size);
    /* The first key's (or else the first tensor name's) text starts 32 bytes
     * in: 4 magic, 4 version, 8 + 8 counts, 8 length. That places the map. */
    span file = {NULL, NULL};
    eng_gguf_str first = {NULL, 0};
    eng_gguf_kind kind;
    if (eng_gguf_kv_count(g) > 0)
        (void)eng_gguf_kv_at(g, 0, &first, &kind, &err);
    else if (eng_gguf_tensor_count(g) > 0)
        first = eng_gguf_tensor_at(g, 0)->name;
    if (first.ptr) {
        file.lo = (const uint8_t *)first.ptr - 32;
        file.hi = file.lo + size;
        FUZZ_CHECK(memcmp(file.lo, data, size < 64 ? size : 64) == 0, "map base misplaced");
    }
    if (file.lo) {
        for (uint64_t i = 0; i < eng_gguf_kv_count(g); i++)
            walk_kv(g, i, file);
        for (uint64_t i = 0; i < eng_gguf_tensor_count(g); i++)
            walk_tensor(g, i, file, row);
    }
    FUZZ_CHECK(eng_gguf_tensor_at(g, eng_gguf_tensor_count(g)) == NULL, "tensor past the end");

    eng_tokenizer *tok = NULL;
    if (eng_tokenizer_create(g, &tok, &err) == ORTMEM_OK) {
        int32_t ids[64];
        size_t n;
        (void)eng_tokenize(tok, "Hello world <|im_end|> 123", 26, true, ids, 64, &n, &err);
        eng_tokenizer_destroy(tok);
    }
    eng_gguf_close(g);
    return 0;
}
