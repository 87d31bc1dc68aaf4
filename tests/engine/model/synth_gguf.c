/* The tiny GGUF of synth_gguf.h, written field by field (format version 3,
 * little-endian, data aligned to 32 bytes). */
#include "synth_gguf.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SYN_LAYERS 2
#define SYN_EMBD 32
#define SYN_FF 64
#define SYN_HEADS 4
#define SYN_KV_HEADS 2
#define SYN_VOCAB 64
#define SYN_KV_DIM (SYN_EMBD / SYN_HEADS * SYN_KV_HEADS)
#define SYN_ALIGN 32

typedef struct syn_tensor {
    char name[64];
    uint32_t n_dims, type;
    uint64_t ne[2];
    uint64_t offset, bytes;
} syn_tensor;

static void put(FILE *f, const void *p, size_t n)
{
    cr_assert_eq(fwrite(p, 1, n, f), n);
}

static void put_u32(FILE *f, uint32_t v)
{
    put(f, &v, 4);
}

static void put_u64(FILE *f, uint64_t v)
{
    put(f, &v, 8);
}

static void put_str(FILE *f, const char *s)
{
    put_u64(f, strlen(s));
    put(f, s, strlen(s));
}

static void kv_u32(FILE *f, const char *key, uint32_t v)
{
    put_str(f, key);
    put_u32(f, 4);
    put_u32(f, v);
}

static void kv_f32(FILE *f, const char *key, float v)
{
    put_str(f, key);
    put_u32(f, 6);
    put(f, &v, 4);
}

static size_t add(syn_tensor *t, size_t n, const char *name, uint64_t ne0, uint64_t ne1)
{
    snprintf(t[n].name, sizeof t[n].name, "%s", name);
    t[n].n_dims = ne1 > 1 ? 2 : 1;
    t[n].type = 0; /* F32 */
    t[n].ne[0] = ne0;
    t[n].ne[1] = ne1;
    return n + 1;
}

uint64_t synth_gguf_write(const char *path, const synth_options *o)
{
    syn_tensor t[3 + 9 * SYN_LAYERS];
    size_t n = 0;
    char name[64];
    n = add(t, n, "token_embd.weight", SYN_EMBD, SYN_VOCAB);
    static const struct {
        const char *what;
        uint64_t ne0, ne1;
    } parts[] = {{"attn_norm", SYN_EMBD, 1},          {"attn_q", SYN_EMBD, SYN_EMBD},
                 {"attn_k", SYN_EMBD, SYN_KV_DIM},    {"attn_v", SYN_EMBD, SYN_KV_DIM},
                 {"attn_output", SYN_EMBD, SYN_EMBD}, {"ffn_norm", SYN_EMBD, 1},
                 {"ffn_gate", SYN_EMBD, SYN_FF},      {"ffn_up", SYN_EMBD, SYN_FF},
                 {"ffn_down", SYN_FF, SYN_EMBD}};
    const size_t n_parts = sizeof parts / sizeof parts[0];
    for (size_t i = 0; i < SYN_LAYERS * n_parts; i++) {
        /* Block by block, or (by_kind) part by part across the blocks. */
        const size_t l = o->by_kind ? i % SYN_LAYERS : i / n_parts;
        const size_t p = o->by_kind ? i / SYN_LAYERS : i % n_parts;
        snprintf(name, sizeof name, "blk.%zu.%s.weight", l, parts[p].what);
        n = add(t, n, name, parts[p].ne0, parts[p].ne1);
    }
    n = add(t, n, "output_norm.weight", SYN_EMBD, 1);
    size_t kept = 0;
    uint64_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        if (o->omit_tensor && !strcmp(t[i].name, o->omit_tensor))
            continue;
        t[kept] = t[i];
        syn_tensor *k = &t[kept++];
        if (o->reshape_tensor && !strcmp(k->name, o->reshape_tensor))
            k->ne[0] = o->new_ne0;
        if (o->retype_tensor && !strcmp(k->name, o->retype_tensor))
            k->type = o->new_type;
        k->bytes = k->ne[0] * k->ne[1] * 4;
        k->offset = offset;
        offset += (k->bytes + SYN_ALIGN - 1) / SYN_ALIGN * SYN_ALIGN;
    }
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s", path);
    put(f, "GGUF", 4);
    put_u32(f, 3);
    put_u64(f, kept);
    put_u64(f, o->extra_key ? 12 : 11);
    put_str(f, "general.architecture");
    put_u32(f, 8);
    put_str(f, o->arch ? o->arch : "llama");
    kv_u32(f, "llama.block_count", SYN_LAYERS);
    kv_u32(f, "llama.context_length", 64);
    kv_u32(f, "llama.embedding_length", SYN_EMBD);
    kv_u32(f, "llama.feed_forward_length", SYN_FF);
    kv_u32(f, "llama.attention.head_count", SYN_HEADS);
    kv_u32(f, "llama.attention.head_count_kv", SYN_KV_HEADS);
    kv_u32(f, "llama.rope.dimension_count", SYN_EMBD / SYN_HEADS);
    kv_u32(f, "llama.vocab_size", SYN_VOCAB);
    kv_f32(f, "llama.rope.freq_base", 10000.0f);
    kv_f32(f, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    if (o->extra_key)
        kv_u32(f, o->extra_key, o->extra_value);
    for (size_t i = 0; i < kept; i++) {
        put_str(f, t[i].name);
        put_u32(f, t[i].n_dims);
        for (uint32_t d = 0; d < t[i].n_dims; d++)
            put_u64(f, t[i].ne[d]);
        put_u32(f, t[i].type);
        put_u64(f, t[i].offset);
    }
    long pos = ftell(f);
    static const char zeros[SYN_ALIGN];
    put(f, zeros, (size_t)((SYN_ALIGN - pos % SYN_ALIGN) % SYN_ALIGN));
    uint32_t seed = 12345;
    for (size_t i = 0; i < kept; i++) {
        for (uint64_t e = 0; e < t[i].ne[0] * t[i].ne[1]; e++) {
            seed = seed * 1664525u + 1013904223u;
            float v = (float)((int32_t)(seed >> 8) % 1000) / 8000.0f;
            put(f, &v, 4);
        }
        uint64_t pad = (SYN_ALIGN - t[i].bytes % SYN_ALIGN) % SYN_ALIGN;
        put(f, zeros, (size_t)pad);
    }
    uint64_t size = (uint64_t)ftell(f);
    cr_assert_eq(fclose(f), 0);
    if (o->truncate_to)
        cr_assert_eq(truncate(path, (off_t)o->truncate_to), 0);
    return size;
}
