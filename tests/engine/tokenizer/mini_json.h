/* Just enough JSON for the recorded references: objects, arrays, strings
 * (escapes and \u pairs decoded to UTF-8), integers, true/false/null.
 * Header-only, for the tokenizer's tests. */
#ifndef TESTS_ENGINE_TOKENIZER_MINI_JSON_H
#define TESTS_ENGINE_TOKENIZER_MINI_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { JNULL, JBOOL, JNUM, JSTR, JARR, JOBJ } jkind;

typedef struct jnode {
    jkind kind;
    int64_t num;
    char *str; /* JSTR: bytes (NUL-terminated, may hold NULs); JOBJ: unused */
    size_t len;
    struct jnode **items; /* JARR values; JOBJ values */
    char **keys;          /* JOBJ keys */
    size_t count;
} jnode;

typedef struct jparser {
    const char *p, *end;
    bool bad;
} jparser;

static void j_ws(jparser *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
        j->p++;
}

static void j_put(char **s, size_t *len, size_t *cap, const char *b, size_t n)
{
    if (*len + n + 1 > *cap) {
        *cap = (*len + n + 1) * 2;
        *s = realloc(*s, *cap);
    }
    memcpy(*s + *len, b, n);
    *len += n;
    (*s)[*len] = '\0';
}

static unsigned j_hex4(jparser *j)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = j->p < j->end ? *j->p++ : 0;
        v = v * 16 + (unsigned)(c >= '0' && c <= '9'   ? c - '0'
                                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                       : (j->bad = true, 0));
    }
    return v;
}

static char *j_string(jparser *j, size_t *out_len)
{
    char *s = NULL;
    size_t len = 0, cap = 0;
    j_put(&s, &len, &cap, "", 0);
    j->p++; /* opening quote */
    while (j->p < j->end && *j->p != '"') {
        if (*j->p != '\\') {
            j_put(&s, &len, &cap, j->p++, 1);
            continue;
        }
        j->p++;
        char c = j->p < j->end ? *j->p++ : 0;
        char lit = c == 'n'   ? '\n'
                   : c == 't' ? '\t'
                   : c == 'r' ? '\r'
                   : c == 'b' ? '\b'
                   : c == 'f' ? '\f'
                              : c;
        if (c != 'u') {
            j_put(&s, &len, &cap, &lit, 1);
            continue;
        }
        unsigned cp = j_hex4(j);
        if (cp >= 0xD800 && cp < 0xDC00 && j->end - j->p >= 6 && j->p[0] == '\\' &&
            j->p[1] == 'u') {
            j->p += 2;
            unsigned lo = j_hex4(j);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        char u[4];
        size_t n;
        if (cp < 0x80) {
            u[0] = (char)cp;
            n = 1;
        } else if (cp < 0x800) {
            u[0] = (char)(0xC0 | (cp >> 6));
            u[1] = (char)(0x80 | (cp & 0x3F));
            n = 2;
        } else if (cp < 0x10000) {
            u[0] = (char)(0xE0 | (cp >> 12));
            u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
            u[2] = (char)(0x80 | (cp & 0x3F));
            n = 3;
        } else {
            u[0] = (char)(0xF0 | (cp >> 18));
            u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
            u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
            u[3] = (char)(0x80 | (cp & 0x3F));
            n = 4;
        }
        j_put(&s, &len, &cap, u, n);
    }
    if (j->p >= j->end)
        j->bad = true;
    j->p++;
    *out_len = len;
    return s;
}

static jnode *j_value(jparser *j)
{
    j_ws(j);
    jnode *n = calloc(1, sizeof *n);
    if (j->p >= j->end) {
        j->bad = true;
        return n;
    }
    char c = *j->p;
    if (c == '{' || c == '[') {
        n->kind = c == '{' ? JOBJ : JARR;
        char close = c == '{' ? '}' : ']';
        j->p++;
        j_ws(j);
        while (!j->bad && j->p < j->end && *j->p != close) {
            n->items = realloc(n->items, (n->count + 1) * sizeof *n->items);
            n->keys = realloc(n->keys, (n->count + 1) * sizeof *n->keys);
            n->keys[n->count] = NULL;
            if (n->kind == JOBJ) {
                size_t kl;
                j_ws(j);
                n->keys[n->count] = j_string(j, &kl);
                j_ws(j);
                if (j->p < j->end && *j->p == ':')
                    j->p++;
                else
                    j->bad = true;
            }
            n->items[n->count++] = j_value(j);
            j_ws(j);
            if (j->p < j->end && *j->p == ',')
                j->p++;
            j_ws(j);
        }
        j->p++;
    } else if (c == '"') {
        n->kind = JSTR;
        n->str = j_string(j, &n->len);
    } else if (c == 't' || c == 'f' || c == 'n') {
        n->kind = c == 'n' ? JNULL : JBOOL;
        n->num = c == 't';
        j->p += c == 'f' ? 5 : 4;
    } else {
        n->kind = JNUM;
        char *e;
        n->num = strtoll(j->p, &e, 10);
        if (e == j->p)
            j->bad = true;
        while (e < j->end && (*e == '.' || *e == 'e' || *e == 'E' || *e == '+' || *e == '-' ||
                              (*e >= '0' && *e <= '9')))
            e++;
        j->p = e;
    }
    return n;
}

static void j_free(jnode *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->count; i++) {
        j_free(n->items[i]);
        if (n->keys)
            free(n->keys[i]);
    }
    free(n->items);
    free(n->keys);
    free(n->str);
    free(n);
}

/* The file parsed, or NULL when it cannot be read or parsed. */
static jnode *j_load(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size + 1);
    size_t got = fread(buf, 1, (size_t)size, f);
    fclose(f);
    jparser j = {buf, buf + got, false};
    jnode *root = j_value(&j);
    free(buf);
    if (j.bad) {
        j_free(root);
        return NULL;
    }
    return root;
}

static jnode *j_get(const jnode *obj, const char *key)
{
    if (!obj || obj->kind != JOBJ)
        return NULL;
    for (size_t i = 0; i < obj->count; i++)
        if (strcmp(obj->keys[i], key) == 0)
            return obj->items[i];
    return NULL;
}

/* Hex text to bytes (malloc'ed, NUL-terminated); *len the count. */
static char *j_unhex(const jnode *s, size_t *len)
{
    size_t n = s->len / 2;
    char *out = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(s->str + 2 * i, "%2x", &v);
        out[i] = (char)v;
    }
    out[n] = '\0';
    *len = n;
    return out;
}

#endif
