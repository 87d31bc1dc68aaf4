#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/model_path.h"
#include "gguf/gguf.h"
#include "gguf_writer.h"

/* ---- A small valid file with every value kind ---- */

#define SMALL_KVS 17

static void small_metadata(wbuf *w)
{
    w_key(w, "k.u8", ENG_GGUF_U8);
    w_u8(w, 200);
    w_key(w, "k.i8", ENG_GGUF_I8);
    w_u8(w, (uint8_t)-5);
    w_key(w, "k.u16", ENG_GGUF_U16);
    w_le(w, 60000, 2);
    w_key(w, "k.i16", ENG_GGUF_I16);
    w_le(w, (uint16_t)-300, 2);
    w_kv_u32(w, "k.u32", 4000000000u);
    w_key(w, "k.i32", ENG_GGUF_I32);
    w_u32(w, (uint32_t)-70000);
    w_key(w, "k.f32", ENG_GGUF_F32);
    w_f32(w, 1.5f);
    w_key(w, "k.bool", ENG_GGUF_BOOL);
    w_u8(w, 1);
    w_kv_str(w, "k.str", "hello");
    w_key(w, "k.u64", ENG_GGUF_U64);
    w_u64(w, 1ull << 40);
    w_key(w, "k.i64", ENG_GGUF_I64);
    w_u64(w, (uint64_t)INT64_MIN);
    w_key(w, "k.f64", ENG_GGUF_F64);
    double d = 0.25;
    uint64_t bits;
    memcpy(&bits, &d, 8);
    w_u64(w, bits);
    w_key(w, "k.strings", ENG_GGUF_ARRAY); /* array of strings, one empty */
    w_u32(w, ENG_GGUF_STRING);
    w_u64(w, 3);
    w_str(w, "zero");
    w_str(w, "");
    w_str(w, "two");
    w_key(w, "k.i32s", ENG_GGUF_ARRAY);
    w_u32(w, ENG_GGUF_I32);
    w_u64(w, 3);
    w_u32(w, 7);
    w_u32(w, (uint32_t)-8);
    w_u32(w, 9);
    w_key(w, "k.f32s", ENG_GGUF_ARRAY);
    w_u32(w, ENG_GGUF_F32);
    w_u64(w, 2);
    w_f32(w, -0.5f);
    w_f32(w, 3.0f);
    w_key(w, "k.nested", ENG_GGUF_ARRAY); /* [[1, 2], ["x"]] */
    w_u32(w, ENG_GGUF_ARRAY);
    w_u64(w, 2);
    w_u32(w, ENG_GGUF_U16);
    w_u64(w, 2);
    w_le(w, 1, 2);
    w_le(w, 2, 2);
    w_u32(w, ENG_GGUF_STRING);
    w_u64(w, 1);
    w_str(w, "x");
    w_key(w, "k.empty", ENG_GGUF_ARRAY);
    w_u32(w, ENG_GGUF_STRING);
    w_u64(w, 0);
}

/* Two tensors: "a" F32 {8, 2} at 0 (64 bytes), "b" Q8_0 {32} at 64 (34 bytes). */
static void small_file(wbuf *w)
{
    w_header(w, 3, 2, SMALL_KVS);
    small_metadata(w);
    w_tensor(w, "a", 2, (uint64_t[]){8, 2}, ENG_TYPE_F32, 0);
    w_tensor(w, "b", 1, (uint64_t[]){32}, ENG_TYPE_Q8_0, 64);
    w_pad(w, 32);
    for (int i = 0; i < 16; i++)
        w_f32(w, (float)i);
    w_le(w, 0x3c00, 2); /* d = 1.0 */
    for (int i = 0; i < 32; i++)
        w_u8(w, (uint8_t)(i - 16));
}

Test(gguf_small, reads_every_kind_and_both_tensors)
{
    wbuf w = {0};
    small_file(&w);
    eng_gguf *g = NULL;
    eng_error err = {0};
    cr_assert_eq(w_open(&w, &g, &err), ORTMEM_OK, "%s", err.message);
    cr_assert_eq(eng_gguf_version(g), 3);
    cr_assert_eq(eng_gguf_alignment(g), 32);
    cr_assert_eq(eng_gguf_file_bytes(g), w.len);
    cr_assert_eq(eng_gguf_kv_count(g), SMALL_KVS);
    eng_gguf_str key;
    eng_gguf_kind kind;
    cr_assert_eq(eng_gguf_kv_at(g, 9, &key, &kind, &err), ORTMEM_OK);
    cr_assert(eng_gguf_str_eq(key, "k.u64"));
    cr_assert_eq(kind, ENG_GGUF_U64);
    cr_assert_eq(eng_gguf_kv_at(g, SMALL_KVS, &key, &kind, &err), ORTMEM_E_RANGE);

    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f;
    bool b;
    eng_gguf_str s;
    cr_assert_eq(eng_gguf_get_u32(g, "k.u8", &u32, &err), ORTMEM_OK);
    cr_assert_eq(u32, 200);
    cr_assert_eq(eng_gguf_get_i64(g, "k.i8", &i64, &err), ORTMEM_OK);
    cr_assert_eq(i64, -5);
    cr_assert_eq(eng_gguf_get_u32(g, "k.i8", &u32, &err), ORTMEM_E_INVALID);
    cr_assert(strstr(err.message, "-5") && strstr(err.message, "k.i8"), "%s", err.message);
    cr_assert_eq(eng_gguf_get_u64(g, "k.u16", &u64, &err), ORTMEM_OK);
    cr_assert_eq(u64, 60000);
    cr_assert_eq(eng_gguf_get_i64(g, "k.i16", &i64, &err), ORTMEM_OK);
    cr_assert_eq(i64, -300);
    cr_assert_eq(eng_gguf_get_u32(g, "k.u32", &u32, &err), ORTMEM_OK);
    cr_assert_eq(u32, 4000000000u);
    cr_assert_eq(eng_gguf_get_i64(g, "k.i32", &i64, &err), ORTMEM_OK);
    cr_assert_eq(i64, -70000);
    cr_assert_eq(eng_gguf_get_f32(g, "k.f32", &f, &err), ORTMEM_OK);
    cr_assert_eq(f, 1.5f);
    cr_assert_eq(eng_gguf_get_bool(g, "k.bool", &b, &err), ORTMEM_OK);
    cr_assert(b);
    cr_assert_eq(eng_gguf_get_str(g, "k.str", &s, &err), ORTMEM_OK);
    cr_assert(eng_gguf_str_eq(s, "hello"));
    cr_assert_eq(eng_gguf_get_u64(g, "k.u64", &u64, &err), ORTMEM_OK);
    cr_assert_eq(u64, 1ull << 40);
    u32 = 77;
    cr_assert_eq(eng_gguf_get_u32(g, "k.u64", &u32, &err), ORTMEM_E_INVALID);
    cr_assert_eq(u32, 77, "a failed call changes nothing");
    cr_assert(strstr(err.message, "1099511627776"), "%s", err.message);
    cr_assert_eq(eng_gguf_get_i64(g, "k.i64", &i64, &err), ORTMEM_OK);
    cr_assert_eq(i64, INT64_MIN);
    cr_assert_eq(eng_gguf_get_f32(g, "k.f64", &f, &err), ORTMEM_OK);
    cr_assert_eq(f, 0.25f);
    cr_assert_eq(eng_gguf_get_f32(g, "k.u32", &f, &err), ORTMEM_E_INVALID);
    cr_assert(strstr(err.message, "u32"), "%s", err.message);
    cr_assert_eq(eng_gguf_get_str(g, "k.u32", &s, &err), ORTMEM_E_INVALID);
    cr_assert_eq(eng_gguf_get_bool(g, "k.str", &b, &err), ORTMEM_E_INVALID);
    cr_assert_eq(eng_gguf_get_u32(g, "k.missing", &u32, &err), ORTMEM_E_NOT_FOUND);
    cr_assert(strstr(err.message, "k.missing"), "%s", err.message);
    cr_assert(eng_gguf_has(g, "k.f64"));
    cr_assert(!eng_gguf_has(g, "k.f6"));

    eng_gguf_kind elem;
    uint64_t count;
    cr_assert_eq(eng_gguf_get_array(g, "k.strings", &elem, &count, &err), ORTMEM_OK);
    cr_assert_eq(elem, ENG_GGUF_STRING);
    cr_assert_eq(count, 3);
    const char *want[] = {"zero", "", "two"};
    for (uint64_t i = 0; i < 3; i++) {
        cr_assert_eq(eng_gguf_array_str(g, "k.strings", i, &s, &err), ORTMEM_OK);
        cr_assert(eng_gguf_str_eq(s, want[i]), "element %llu", (unsigned long long)i);
    }
    cr_assert_eq(eng_gguf_array_str(g, "k.strings", 3, &s, &err), ORTMEM_E_RANGE);
    cr_assert(strstr(err.message, "element 3 of an array of 3"), "%s", err.message);
    cr_assert_eq(eng_gguf_array_i64(g, "k.i32s", 1, &i64, &err), ORTMEM_OK);
    cr_assert_eq(i64, -8);
    cr_assert_eq(eng_gguf_array_i64(g, "k.i32s", 2, &i64, &err), ORTMEM_OK);
    cr_assert_eq(i64, 9);
    cr_assert_eq(eng_gguf_array_f32(g, "k.f32s", 1, &f, &err), ORTMEM_OK);
    cr_assert_eq(f, 3.0f);
    cr_assert_eq(eng_gguf_array_f32(g, "k.i32s", 0, &f, &err), ORTMEM_E_INVALID);
    cr_assert_eq(eng_gguf_array_str(g, "k.i32s", 0, &s, &err), ORTMEM_E_INVALID);
    cr_assert_eq(eng_gguf_get_array(g, "k.nested", &elem, &count, &err), ORTMEM_E_UNSUPPORTED);
    cr_assert(strstr(err.message, "nested"), "%s", err.message);
    cr_assert_eq(eng_gguf_get_array(g, "k.empty", &elem, &count, &err), ORTMEM_OK);
    cr_assert_eq(count, 0);
    cr_assert_eq(eng_gguf_get_array(g, "k.str", &elem, &count, &err), ORTMEM_E_INVALID);

    cr_assert_eq(eng_gguf_tensor_count(g), 2);
    cr_assert_null(eng_gguf_tensor_at(g, 2));
    const eng_gguf_tensor *t;
    cr_assert_eq(eng_gguf_find_tensor(g, "a", &t, &err), ORTMEM_OK);
    cr_assert_eq(t, eng_gguf_tensor_at(g, 0));
    cr_assert_eq(t->n_dims, 2);
    cr_assert_eq(t->ne[0], 8);
    cr_assert_eq(t->ne[1], 2);
    cr_assert_eq(t->ne[2], 1);
    cr_assert_eq(t->bytes, 64);
    float a15;
    memcpy(&a15, (const uint8_t *)t->data + 60, 4);
    cr_assert_eq(a15, 15.0f);
    cr_assert_eq(eng_gguf_find_tensor(g, "b", &t, &err), ORTMEM_OK);
    cr_assert_eq(t->type, ENG_TYPE_Q8_0);
    cr_assert_eq(t->bytes, 34);
    cr_assert_eq(t->offset, 64);
    cr_assert_eq((const uint8_t *)t->data - (const uint8_t *)eng_gguf_tensor_at(g, 0)->data, 64);
    cr_assert_eq(((const int8_t *)t->data)[2], -16);
    cr_assert_eq(eng_gguf_find_tensor(g, "c", &t, &err), ORTMEM_E_NOT_FOUND);
    cr_assert(strstr(err.message, "'c'"), "%s", err.message);
    eng_gguf_close(g);
    free(w.p);
}

/* Every prefix of the small file fails cleanly (run under ASan too). */
Test(gguf_hostile, every_truncation_fails_cleanly)
{
    wbuf w = {0};
    small_file(&w);
    for (size_t n = 0; n < w.len; n++) {
        eng_gguf *g = (eng_gguf *)&w; /* must stay as it is */
        eng_error err = {0};
        ortmem_status st = w_open_prefix(&w, n, &g, &err);
        cr_assert(st == ORTMEM_E_IO || st == ORTMEM_E_INVALID, "prefix %zu: %s (%s)", n,
                  ortmem_status_str(st), err.message);
        cr_assert_eq(g, (eng_gguf *)&w, "prefix %zu", n);
        cr_assert(err.message[0], "prefix %zu has no message", n);
    }
    free(w.p);
}

/* Opens w, expecting status and a word of the message. */
static void expect_fail(wbuf *w, ortmem_status status, const char *word)
{
    eng_gguf *g = NULL;
    eng_error err = {0};
    ortmem_status st = w_open(w, &g, &err);
    cr_assert_eq(st, status, "%s, want %s: %s", ortmem_status_str(st), ortmem_status_str(status),
                 err.message);
    cr_assert_null(g);
    cr_assert(strstr(err.message, word), "'%s' not in: %s", word, err.message);
    free(w->p);
    *w = (wbuf){0};
}

Test(gguf_hostile, header)
{
    wbuf w = {0};
    eng_error err = {0};
    eng_gguf *g = NULL;
    cr_assert_eq(eng_gguf_open("/nonexistent/engine.gguf", &g, &err), ORTMEM_E_IO);
    cr_assert(strstr(err.message, "/nonexistent/engine.gguf"), "%s", err.message);

    w_put(&w, "GGUG", 4);
    w_u32(&w, 3);
    w_u64(&w, 0);
    w_u64(&w, 0);
    expect_fail(&w, ORTMEM_E_INVALID, "magic");
    w_header(&w, 1, 0, 0);
    expect_fail(&w, ORTMEM_E_UNSUPPORTED, "version 1");
    w_header(&w, 0x03000000, 0, 0); /* a big-endian file */
    expect_fail(&w, ORTMEM_E_UNSUPPORTED, "big-endian");
    w_header(&w, 3, 0, UINT64_MAX);
    expect_fail(&w, ORTMEM_E_INVALID, "kv_count 18446744073709551615");
    w_header(&w, 3, 1ull << 40, 0);
    w_u64(&w, 0);
    expect_fail(&w, ORTMEM_E_INVALID, "tensor_count 1099511627776");

    w_header(&w, 2, 0, 0); /* version 2, nothing in it: valid */
    cr_assert_eq(w_open(&w, &g, &err), ORTMEM_OK, "%s", err.message);
    cr_assert_eq(eng_gguf_version(g), 2);
    cr_assert_eq(eng_gguf_tensor_count(g), 0);
    eng_gguf_close(g);
    free(w.p);
}

Test(gguf_hostile, metadata)
{
    wbuf w = {0};
    /* A key whose length runs past the end. */
    w_header(&w, 3, 0, 1);
    w_u64(&w, UINT64_MAX);
    w_u32(&w, ENG_GGUF_U8);
    w_u8(&w, 0);
    expect_fail(&w, ORTMEM_E_IO, "length 18446744073709551615");
    /* A string value whose length runs past the end. */
    w_header(&w, 3, 0, 1);
    w_key(&w, "s", ENG_GGUF_STRING);
    w_u64(&w, 1ull << 62);
    w_put(&w, "abc", 3);
    expect_fail(&w, ORTMEM_E_IO, "'s'");
    /* An unknown value kind. */
    w_header(&w, 3, 0, 1);
    w_key(&w, "k", 13);
    w_u64(&w, 0);
    expect_fail(&w, ORTMEM_E_INVALID, "kind 13");
    /* Array counts: one whose byte size overflows, one past the end, one of
     * strings that cannot fit, an unknown element kind. */
    w_header(&w, 3, 0, 1);
    w_key(&w, "arr", ENG_GGUF_ARRAY);
    w_u32(&w, ENG_GGUF_U64);
    w_u64(&w, 1ull << 62);
    w_u64(&w, 0);
    expect_fail(&w, ORTMEM_E_OVERFLOW, "overflows");
    w_header(&w, 3, 0, 1);
    w_key(&w, "arr", ENG_GGUF_ARRAY);
    w_u32(&w, ENG_GGUF_U8);
    w_u64(&w, 100);
    w_u64(&w, 0);
    expect_fail(&w, ORTMEM_E_IO, "needs 100 bytes");
    w_header(&w, 3, 0, 1);
    w_key(&w, "arr", ENG_GGUF_ARRAY);
    w_u32(&w, ENG_GGUF_STRING);
    w_u64(&w, UINT64_MAX / 2);
    w_u64(&w, 0);
    expect_fail(&w, ORTMEM_E_IO, "cannot fit");
    w_header(&w, 3, 0, 1);
    w_key(&w, "arr", ENG_GGUF_ARRAY);
    w_u32(&w, 99);
    w_u64(&w, 0);
    expect_fail(&w, ORTMEM_E_INVALID, "element kind 99");
    /* A string inside an array past the end: the message names the element. */
    w_header(&w, 3, 0, 1);
    w_key(&w, "toks", ENG_GGUF_ARRAY);
    w_u32(&w, ENG_GGUF_STRING);
    w_u64(&w, 2);
    w_str(&w, "ok");
    w_u64(&w, 1000);
    w_u64(&w, 0);
    expect_fail(&w, ORTMEM_E_IO, "element 1 of 2");
    /* A repeated key. */
    w_header(&w, 3, 0, 2);
    w_kv_u32(&w, "dup", 1);
    w_kv_u32(&w, "dup", 2);
    expect_fail(&w, ORTMEM_E_INVALID, "repeats");
}

Test(gguf_hostile, nested_arrays)
{
    wbuf w = {0};
    /* Arrays of arrays are read and checked whole: an inner count past the end fails. */
    w_header(&w, 3, 0, 1);
    w_key(&w, "n", ENG_GGUF_ARRAY);
    w_u32(&w, ENG_GGUF_ARRAY);
    w_u64(&w, 1);
    w_u32(&w, ENG_GGUF_U32);
    w_u64(&w, 50);
    w_u64(&w, 0);
    expect_fail(&w, ORTMEM_E_IO, "element 0 of 1");
    /* Nesting past the depth limit fails instead of recursing on. */
    w_header(&w, 3, 0, 1);
    w_key(&w, "deep", ENG_GGUF_ARRAY);
    for (int i = 0; i < 40; i++) {
        w_u32(&w, ENG_GGUF_ARRAY);
        w_u64(&w, 1);
    }
    w_u32(&w, ENG_GGUF_U8);
    w_u64(&w, 0);
    expect_fail(&w, ORTMEM_E_INVALID, "nested deeper");
    /* Three levels are fine. */
    w_header(&w, 3, 0, 1);
    w_key(&w, "three", ENG_GGUF_ARRAY);
    w_u32(&w, ENG_GGUF_ARRAY);
    w_u64(&w, 1);
    w_u32(&w, ENG_GGUF_ARRAY);
    w_u64(&w, 2);
    w_u32(&w, ENG_GGUF_I8);
    w_u64(&w, 1);
    w_u8(&w, 1);
    w_u32(&w, ENG_GGUF_STRING);
    w_u64(&w, 1);
    w_str(&w, "s");
    eng_gguf *g = NULL;
    eng_error err = {0};
    cr_assert_eq(w_open(&w, &g, &err), ORTMEM_OK, "%s", err.message);
    cr_assert(eng_gguf_has(g, "three"));
    eng_gguf_close(g);
    free(w.p);
}

Test(gguf_hostile, alignment)
{
    wbuf w = {0};
    uint32_t bad[] = {0, 3, 48};
    for (int i = 0; i < 3; i++) {
        w_header(&w, 3, 0, 1);
        w_kv_u32(&w, "general.alignment", bad[i]);
        expect_fail(&w, ORTMEM_E_INVALID, "power of two");
    }
    w_header(&w, 3, 0, 1);
    w_kv_str(&w, "general.alignment", "32");
    expect_fail(&w, ORTMEM_E_INVALID, "u32");
    /* 64: the data section and the offsets follow it. */
    w_header(&w, 3, 1, 1);
    w_kv_u32(&w, "general.alignment", 64);
    w_tensor(&w, "t", 1, (uint64_t[]){4}, ENG_TYPE_F32, 0);
    size_t infos_end = w.len;
    w_pad(&w, 64);
    for (int i = 0; i < 4; i++)
        w_f32(&w, 2.0f);
    eng_gguf *g = NULL;
    eng_error err = {0};
    cr_assert_eq(w_open(&w, &g, &err), ORTMEM_OK, "%s", err.message);
    cr_assert_eq(eng_gguf_alignment(g), 64);
    const eng_gguf_tensor *t = eng_gguf_tensor_at(g, 0);
    float v;
    memcpy(&v, t->data, 4);
    cr_assert_eq(v, 2.0f);
    cr_assert_gt(w.len - 16, infos_end, "the padding was needed");
    eng_gguf_close(g);
    free(w.p);
    w = (wbuf){0};
    /* An offset that is not a multiple of the alignment. */
    w_header(&w, 3, 1, 0);
    w_tensor(&w, "t", 1, (uint64_t[]){4}, ENG_TYPE_F32, 16);
    w_pad(&w, 32);
    for (int i = 0; i < 16; i++)
        w_f32(&w, 0.0f);
    expect_fail(&w, ORTMEM_E_INVALID, "offset 16 is not aligned to 32");
}

/* One tensor info with the given fields, then 256 bytes of data. */
static void one_tensor(wbuf *w, const char *name, uint32_t n_dims, const uint64_t *ne,
                       uint32_t type, uint64_t offset)
{
    w_header(w, 3, 1, 0);
    w_tensor(w, name, n_dims, ne, type, offset);
    w_pad(w, 32);
    for (int i = 0; i < 256; i++)
        w_u8(w, 0);
}

Test(gguf_hostile, tensor_infos)
{
    wbuf w = {0};
    one_tensor(&w, "t", 0, (uint64_t[]){4}, ENG_TYPE_F32, 0);
    expect_fail(&w, ORTMEM_E_INVALID, "n_dims 0");
    w_header(&w, 3, 1, 0);
    w_tensor(&w, "t", 5, (uint64_t[]){1, 1, 1, 1, 1}, ENG_TYPE_F32, 0);
    w_pad(&w, 32);
    expect_fail(&w, ORTMEM_E_INVALID, "n_dims 5");
    one_tensor(&w, "t", 1, (uint64_t[]){4}, 99, 0);
    expect_fail(&w, ORTMEM_E_UNSUPPORTED, "type id 99");
    one_tensor(&w, "t", 1, (uint64_t[]){4}, 4, 0); /* Q4_2, long removed */
    expect_fail(&w, ORTMEM_E_UNSUPPORTED, "type id 4");
    one_tensor(&w, "q", 1, (uint64_t[]){33}, ENG_TYPE_Q8_0, 0);
    expect_fail(&w, ORTMEM_E_INVALID, "ne[0] 33 is not a multiple of the Q8_0 block (32)");
    one_tensor(&w, "big", 3, (uint64_t[]){1ull << 32, 1ull << 32, 1ull << 32}, ENG_TYPE_F32, 0);
    expect_fail(&w, ORTMEM_E_OVERFLOW, "overflows");
    one_tensor(&w, "neg", 2, (uint64_t[]){4, UINT64_MAX}, ENG_TYPE_F32, 0);
    expect_fail(&w, ORTMEM_E_INVALID, "ne[1]");
    /* Past the end: a range one byte too long, an offset far away. */
    one_tensor(&w, "long", 1, (uint64_t[]){65}, ENG_TYPE_F32, 0);
    expect_fail(&w, ORTMEM_E_IO, "past");
    one_tensor(&w, "far", 1, (uint64_t[]){4}, ENG_TYPE_F32, 1ull << 60);
    expect_fail(&w, ORTMEM_E_IO, "'far'");
    one_tensor(&w, "edge", 1, (uint64_t[]){64}, ENG_TYPE_F32, 0); /* exactly fits */
    eng_gguf *g = NULL;
    eng_error err = {0};
    cr_assert_eq(w_open(&w, &g, &err), ORTMEM_OK, "%s", err.message);
    eng_gguf_close(g);
    free(w.p);
}

static void two_tensors(wbuf *w, const char *name_a, uint64_t off_a, const char *name_b,
                        uint64_t off_b)
{
    w_header(w, 3, 2, 0);
    w_tensor(w, name_a, 1, (uint64_t[]){16}, ENG_TYPE_F32, off_a);
    w_tensor(w, name_b, 1, (uint64_t[]){16}, ENG_TYPE_F32, off_b);
    w_pad(w, 32);
    for (int i = 0; i < 256; i++)
        w_u8(w, 0);
}

Test(gguf_hostile, overlap_and_duplicates)
{
    wbuf w = {0};
    two_tensors(&w, "a", 64, "b", 32); /* b's 64 bytes run into a */
    expect_fail(&w, ORTMEM_E_INVALID, "overlaps");
    two_tensors(&w, "a", 0, "b", 0);
    expect_fail(&w, ORTMEM_E_INVALID, "overlaps");
    two_tensors(&w, "a", 0, "a", 64);
    expect_fail(&w, ORTMEM_E_INVALID, "name 'a' repeats tensor 0");
    two_tensors(&w, "a", 64, "b", 0); /* out of order but apart: valid */
    eng_gguf *g = NULL;
    eng_error err = {0};
    cr_assert_eq(w_open(&w, &g, &err), ORTMEM_OK, "%s", err.message);
    const eng_gguf_tensor *b;
    cr_assert_eq(eng_gguf_find_tensor(g, "b", &b, &err), ORTMEM_OK);
    cr_assert_eq(b->offset, 0);
    eng_gguf_close(g);
    free(w.p);
}

/* ---- The real model ---- */

static eng_gguf *open_model(void)
{
    char path[4096];
    eng_error err = {0};
    cr_assert_eq(eng_default_model_path(path, sizeof path, &err), ORTMEM_OK, "%s", err.message);
    eng_gguf *g = NULL;
    cr_assert_eq(eng_gguf_open(path, &g, &err), ORTMEM_OK, "%s", err.message);
    return g;
}

Test(gguf_model, header_and_hyperparameters)
{
    eng_gguf *g = open_model();
    eng_error err = {0};
    cr_assert_eq(eng_gguf_version(g), 3);
    cr_assert_eq(eng_gguf_file_bytes(g), 98362432);
    cr_assert_eq(eng_gguf_alignment(g), 32);
    cr_assert_eq(eng_gguf_kv_count(g), 33);
    cr_assert_eq(eng_gguf_tensor_count(g), 272);
    eng_gguf_str s;
    cr_assert_eq(eng_gguf_get_str(g, "general.architecture", &s, &err), ORTMEM_OK);
    cr_assert(eng_gguf_str_eq(s, "llama"));
    uint32_t u;
    cr_assert_eq(eng_gguf_get_u32(g, "llama.block_count", &u, &err), ORTMEM_OK);
    cr_assert_eq(u, 30);
    cr_assert_eq(eng_gguf_get_u32(g, "llama.embedding_length", &u, &err), ORTMEM_OK);
    cr_assert_eq(u, 576);
    cr_assert_eq(eng_gguf_get_u32(g, "llama.attention.head_count_kv", &u, &err), ORTMEM_OK);
    cr_assert_eq(u, 3);
    float f;
    cr_assert_eq(eng_gguf_get_f32(g, "llama.rope.freq_base", &f, &err), ORTMEM_OK);
    cr_assert_eq(f, 100000.0f);
    cr_assert_eq(eng_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f, &err),
                 ORTMEM_OK);
    cr_assert_eq(f, 1e-5f);
    bool b = true;
    cr_assert_eq(eng_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b, &err), ORTMEM_OK);
    cr_assert(!b);
    eng_gguf_close(g);
}

Test(gguf_model, vocabulary)
{
    eng_gguf *g = open_model();
    eng_error err = {0};
    eng_gguf_kind elem;
    uint64_t count;
    cr_assert_eq(eng_gguf_get_array(g, "tokenizer.ggml.tokens", &elem, &count, &err), ORTMEM_OK);
    cr_assert_eq(elem, ENG_GGUF_STRING);
    cr_assert_eq(count, 49152);
    struct {
        uint64_t id;
        const char *text;
    } known[] = {{0, "<|endoftext|>"}, {1, "<|im_start|>"}, {2, "<|im_end|>"},
                 {100, "t"},           {1000, "()"},        {49151, "ectable"}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        eng_gguf_str s;
        cr_assert_eq(eng_gguf_array_str(g, "tokenizer.ggml.tokens", known[i].id, &s, &err),
                     ORTMEM_OK);
        cr_assert(eng_gguf_str_eq(s, known[i].text), "token %llu is '%.*s'",
                  (unsigned long long)known[i].id, (int)s.len, s.ptr);
    }
    cr_assert_eq(eng_gguf_get_array(g, "tokenizer.ggml.merges", &elem, &count, &err), ORTMEM_OK);
    cr_assert_eq(count, 48900);
    eng_gguf_str m;
    cr_assert_eq(eng_gguf_array_str(g, "tokenizer.ggml.merges", 0, &m, &err), ORTMEM_OK);
    cr_assert(eng_gguf_str_eq(m, "\xc4\xa0 t"));
    cr_assert_eq(eng_gguf_get_array(g, "tokenizer.ggml.token_type", &elem, &count, &err),
                 ORTMEM_OK);
    cr_assert_eq(elem, ENG_GGUF_I32);
    int64_t type;
    cr_assert_eq(eng_gguf_array_i64(g, "tokenizer.ggml.token_type", 0, &type, &err), ORTMEM_OK);
    cr_assert_eq(type, 3, "<|endoftext|> is a control token");
    eng_gguf_close(g);
}

Test(gguf_model, tensors)
{
    eng_gguf *g = open_model();
    eng_error err = {0};
    const eng_gguf_tensor *t;
    cr_assert_eq(eng_gguf_find_tensor(g, "token_embd.weight", &t, &err), ORTMEM_OK);
    cr_assert_eq(t->type, ENG_TYPE_Q8_0);
    cr_assert_eq(t->n_dims, 2);
    cr_assert_eq(t->ne[0], 576);
    cr_assert_eq(t->ne[1], 49152);
    cr_assert_eq(t->offset, 0);
    cr_assert_eq(t->bytes, 30081024);
    cr_assert_eq(eng_gguf_find_tensor(g, "blk.0.attn_q.weight", &t, &err), ORTMEM_OK);
    cr_assert_eq(t->type, ENG_TYPE_Q4_1);
    cr_assert_eq(t->ne[0], 576);
    cr_assert_eq(t->ne[1], 576);
    cr_assert_eq(t->bytes, 576 / 32 * 20 * 576);
    cr_assert_eq(eng_gguf_find_tensor(g, "blk.0.attn_norm.weight", &t, &err), ORTMEM_OK);
    cr_assert_eq(t->type, ENG_TYPE_F32);
    cr_assert_eq(t->n_dims, 1);
    cr_assert_eq((const uint8_t *)t->data - (const uint8_t *)eng_gguf_tensor_at(g, 0)->data,
                 31866688 - 1785664);
    cr_assert_eq(eng_gguf_find_tensor(g, "output.weight", &t, &err), ORTMEM_E_NOT_FOUND,
                 "the output is tied to token_embd");
    size_t per_type[64] = {0};
    for (uint64_t i = 0; i < eng_gguf_tensor_count(g); i++) {
        const eng_gguf_tensor *ti = eng_gguf_tensor_at(g, i);
        cr_assert_eq(eng_gguf_find_tensor(g, "blk.29.ffn_up.weight", &t, &err), ORTMEM_OK);
        per_type[ti->type]++;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)ti->name.len, ti->name.ptr);
        cr_assert_eq(eng_gguf_find_tensor(g, name, &t, &err), ORTMEM_OK);
        cr_assert_eq(t, ti);
    }
    cr_assert_eq(per_type[ENG_TYPE_Q4_1], 210);
    cr_assert_eq(per_type[ENG_TYPE_F32], 61);
    cr_assert_eq(per_type[ENG_TYPE_Q8_0], 1);
    eng_gguf_close(g);
}

/* The data section's offset in the file: each tensor's bytes, read from the
 * file at data offset + tensor offset, are the ones the reader maps. */
Test(gguf_model, data_offset_locates_every_tensor_in_the_file)
{
    eng_gguf *g = open_model();
    uint64_t data = eng_gguf_data_offset(g);
    cr_assert_eq(data % eng_gguf_alignment(g), 0);
    cr_assert_lt(data, eng_gguf_file_bytes(g));
    FILE *f = fopen(eng_gguf_path(g), "rb");
    cr_assert_not_null(f);
    for (uint64_t i = 0; i < eng_gguf_tensor_count(g); i++) {
        const eng_gguf_tensor *t = eng_gguf_tensor_at(g, i);
        unsigned char head[64];
        size_t n = t->bytes < sizeof head ? (size_t)t->bytes : sizeof head;
        cr_assert_eq(fseek(f, (long)(data + t->offset), SEEK_SET), 0);
        cr_assert_eq(fread(head, 1, n, f), n);
        cr_assert_eq(memcmp(head, t->data, n), 0, "tensor %llu", (unsigned long long)i);
    }
    fclose(f);
    eng_gguf_close(g);
}
