/* A tiny GGUF writer for the tests: builds a file in memory, field by field,
 * so a test can write a valid file or corrupt any one field of it. */
#ifndef TESTS_ENGINE_GGUF_WRITER_H
#define TESTS_ENGINE_GGUF_WRITER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
} wbuf;

static inline void w_put(wbuf *w, const void *src, size_t n)
{
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n)
            cap *= 2;
        w->p = realloc(w->p, cap);
        if (!w->p)
            abort();
        w->cap = cap;
    }
    if (n)
        memcpy(w->p + w->len, src, n);
    w->len += n;
}

static inline void w_u8(wbuf *w, uint8_t v)
{
    w_put(w, &v, 1);
}

static inline void w_le(wbuf *w, uint64_t v, unsigned bytes)
{
    for (unsigned i = 0; i < bytes; i++)
        w_u8(w, (uint8_t)(v >> (8 * i)));
}

static inline void w_u32(wbuf *w, uint32_t v)
{
    w_le(w, v, 4);
}

static inline void w_u64(wbuf *w, uint64_t v)
{
    w_le(w, v, 8);
}

static inline void w_f32(wbuf *w, float f)
{
    uint32_t bits;
    memcpy(&bits, &f, 4);
    w_u32(w, bits);
}

static inline void w_str(wbuf *w, const char *s)
{
    w_u64(w, strlen(s));
    w_put(w, s, strlen(s));
}

static inline void w_header(wbuf *w, uint32_t version, uint64_t tensors, uint64_t kvs)
{
    w_put(w, "GGUF", 4);
    w_u32(w, version);
    w_u64(w, tensors);
    w_u64(w, kvs);
}

/* A key and its kind; the caller writes the value. */
static inline void w_key(wbuf *w, const char *key, uint32_t kind)
{
    w_str(w, key);
    w_u32(w, kind);
}

static inline void w_kv_u32(wbuf *w, const char *key, uint32_t v)
{
    w_key(w, key, ENG_GGUF_U32);
    w_u32(w, v);
}

static inline void w_kv_str(wbuf *w, const char *key, const char *v)
{
    w_key(w, key, ENG_GGUF_STRING);
    w_str(w, v);
}

static inline void w_tensor(wbuf *w, const char *name, uint32_t n_dims, const uint64_t *ne,
                            uint32_t type, uint64_t offset)
{
    w_str(w, name);
    w_u32(w, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        w_u64(w, ne[d]);
    w_u32(w, type);
    w_u64(w, offset);
}

static inline void w_pad(wbuf *w, size_t align)
{
    while (w->len % align)
        w_u8(w, 0);
}

/* Writes the first n bytes to a fresh temporary file and opens it (the file
 * is unlinked at once: the mapping outlives the name). */
static inline ortmem_status w_open_prefix(const wbuf *w, size_t n, eng_gguf **out, eng_error *err)
{
    char path[] = "/tmp/engine-gguf-test-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        abort();
    if (n && write(fd, w->p, n) != (ssize_t)n)
        abort();
    close(fd);
    ortmem_status st = eng_gguf_open(path, out, err);
    unlink(path);
    return st;
}

static inline ortmem_status w_open(const wbuf *w, eng_gguf **out, eng_error *err)
{
    return w_open_prefix(w, w->len, out, err);
}

#endif
