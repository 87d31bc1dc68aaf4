#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/model_path.h"
#include "gguf/dequant.h"
#include "gguf/gguf.h"

/* The reference is the gguf Python package (dequant_reference.py), run by
 * the model's venv; meson passes both paths. */
static void reference_command(char *cmd, size_t len, const char *args)
{
    const char *python = getenv("ORTMEM_GGUF_PYTHON");
    const char *script = getenv("ORTMEM_GGUF_REFERENCE");
    cr_assert(python && script, "ORTMEM_GGUF_PYTHON and ORTMEM_GGUF_REFERENCE come from meson");
    cr_assert_eq(access(python, X_OK), 0, "no python at %s (scripts/model-env.sh installs it)",
                 python);
    snprintf(cmd, len, "'%s' '%s' %s", python, script, args);
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* n bytes from 2n hex digits. */
static void unhex(const char *hex, uint8_t *out, size_t n)
{
    cr_assert_geq(strlen(hex), 2 * n, "hex field is %zu digits, want %zu", strlen(hex), 2 * n);
    for (size_t i = 0; i < n; i++) {
        int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
        cr_assert(hi >= 0 && lo >= 0, "bad hex at %zu", 2 * i);
        out[i] = (uint8_t)(hi << 4 | lo);
    }
}

/* The f32 bit patterns written as 8 hex digits each (big-endian digits). */
static void unhex_words(const char *hex, uint32_t *out, size_t n)
{
    cr_assert_eq(strlen(hex), 8 * n, "values field is %zu digits, want %zu", strlen(hex), 8 * n);
    for (size_t i = 0; i < n; i++) {
        uint32_t w = 0;
        for (int k = 0; k < 8; k++)
            w = w << 4 | (uint32_t)hex_digit(hex[8 * i + (size_t)k]);
        out[i] = w;
    }
}

static void expect_bits(const float *got, const uint32_t *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &got[i], 4);
        cr_assert_eq(bits, want[i], "%s: value %zu is %08x (%g), gguf says %08x", what, i, bits,
                     (double)got[i], want[i]);
    }
}

static char *next_field(char **rest)
{
    return strsep(rest, " \n");
}

Test(dequant_model, rows_match_the_gguf_package)
{
    char model[4096], cmd[8192];
    eng_error err = {0};
    cr_assert_eq(eng_default_model_path(model, sizeof model, &err), ORTMEM_OK, "%s", err.message);
    eng_gguf *g = NULL;
    cr_assert_eq(eng_gguf_open(model, &g, &err), ORTMEM_OK, "%s", err.message);
    char args[4200];
    snprintf(args, sizeof args, "model '%s'", model);
    reference_command(cmd, sizeof cmd, args);
    FILE *ref = popen(cmd, "r");
    cr_assert_not_null(ref, "%s", cmd);
    char *line = NULL;
    size_t cap = 0;
    size_t rows = 0, per_type[64] = {0};
    while (getline(&line, &cap, ref) > 0) {
        char *rest = line;
        char *tag = next_field(&rest), *name = next_field(&rest);
        char *row_s = next_field(&rest), *n_s = next_field(&rest), *hex = next_field(&rest);
        cr_assert(tag && strcmp(tag, "row") == 0 && name && row_s && n_s && hex, "line %zu", rows);
        const eng_gguf_tensor *t;
        cr_assert_eq(eng_gguf_find_tensor(g, name, &t, &err), ORTMEM_OK, "%s", err.message);
        uint64_t row = strtoull(row_s, NULL, 10), n = strtoull(n_s, NULL, 10);
        cr_assert_eq(n, t->ne[0]);
        eng_type_traits tr = eng_type_traits_of(t->type);
        size_t row_bytes = t->ne[0] / tr.block_elems * tr.block_bytes;
        float *got = malloc(n * sizeof *got);
        uint32_t *want = malloc(n * sizeof *want);
        unhex_words(hex, want, n);
        cr_assert_eq(
            eng_dequantize(t->type, (const uint8_t *)t->data + row * row_bytes, got, n, &err),
            ORTMEM_OK, "%s", err.message);
        char what[160];
        snprintf(what, sizeof what, "%s (%s) row %llu", name, tr.name, (unsigned long long)row);
        expect_bits(got, want, n, what);
        free(got);
        free(want);
        per_type[t->type]++;
        rows++;
    }
    free(line);
    cr_assert_eq(pclose(ref), 0, "the reference script failed: %s", cmd);
    cr_assert_eq(rows, 18, "rows checked: %zu", rows);
    cr_assert_geq(per_type[ENG_TYPE_Q8_0], 4);
    cr_assert_geq(per_type[ENG_TYPE_Q4_1], 12);
    cr_assert_geq(per_type[ENG_TYPE_F32], 2);
    eng_gguf_close(g);
}

/* Types the model lacks: data quantized (or raw blocks made) by the script,
 * its bytes and the package's dequantization through a temporary file. */
Test(dequant_synthetic, every_type_matches_the_gguf_package)
{
    char path[] = "/tmp/engine-dequant-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    char args[256], cmd[8192];
    snprintf(args, sizeof args, "synthetic '%s' 11", path);
    reference_command(cmd, sizeof cmd, args);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    FILE *in = fopen(path, "r");
    cr_assert_not_null(in);
    char *line = NULL;
    size_t cap = 0, cases = 0, per_type[64] = {0};
    eng_error err = {0};
    while (getline(&line, &cap, in) > 0) {
        char *rest = line;
        char *tag = next_field(&rest), *type_s = next_field(&rest), *n_s = next_field(&rest);
        char *raw_hex = next_field(&rest), *hex = next_field(&rest);
        cr_assert(tag && strcmp(tag, "block") == 0 && type_s && n_s && raw_hex && hex, "case %zu",
                  cases);
        uint32_t type = (uint32_t)strtoul(type_s, NULL, 10);
        size_t n = strtoull(n_s, NULL, 10);
        eng_type_traits tr = eng_type_traits_of(type);
        cr_assert_not_null(tr.name, "type %u", type);
        size_t raw_bytes = n / tr.block_elems * tr.block_bytes;
        cr_assert_eq(strlen(raw_hex), 2 * raw_bytes, "%s: raw bytes", tr.name);
        uint8_t *raw = malloc(raw_bytes);
        float *got = malloc(n * sizeof *got);
        uint32_t *want = malloc(n * sizeof *want);
        unhex(raw_hex, raw, raw_bytes);
        unhex_words(hex, want, n);
        cr_assert_eq(eng_dequantize(type, raw, got, n, &err), ORTMEM_OK, "%s", err.message);
        char what[64];
        snprintf(what, sizeof what, "case %zu (%s)", cases, tr.name);
        expect_bits(got, want, n, what);
        free(raw);
        free(got);
        free(want);
        per_type[type]++;
        cases++;
    }
    free(line);
    fclose(in);
    unlink(path);
    uint32_t types[] = {ENG_TYPE_F16,  ENG_TYPE_BF16, ENG_TYPE_Q4_0, ENG_TYPE_Q4_1,
                        ENG_TYPE_Q5_0, ENG_TYPE_Q5_1, ENG_TYPE_Q8_0, ENG_TYPE_Q2_K,
                        ENG_TYPE_Q3_K, ENG_TYPE_Q4_K, ENG_TYPE_Q5_K, ENG_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        cr_assert_geq(per_type[types[i]], 1, "no case of %s", eng_type_traits_of(types[i]).name);
    cr_assert_eq(cases, 19, "cases: %zu", cases);
}

/* Values worked out by hand from the format, independent of the script. */
Test(dequant_known, blocks_by_hand)
{
    eng_error err = {0};
    float out[256];
    /* Q4_0, d = 0.5: low nibble j gives value j, high nibble value j + 16. */
    uint8_t q4_0[18] = {0x00, 0x38};
    for (int j = 0; j < 16; j++)
        q4_0[2 + j] = (uint8_t)((15 - j) << 4 | j);
    cr_assert_eq(eng_dequantize(ENG_TYPE_Q4_0, q4_0, out, 32, &err), ORTMEM_OK);
    cr_assert_eq(out[0], -4.0f);  /* (0 - 8) * 0.5 */
    cr_assert_eq(out[15], 3.5f);  /* (15 - 8) * 0.5 */
    cr_assert_eq(out[16], 3.5f);  /* high nibble of qs[0] is 15 */
    cr_assert_eq(out[31], -4.0f); /* high nibble of qs[15] is 0 */
    /* Q5_1, d = 1, m = -16: qh bit j adds 16 to value j. */
    uint8_t q5_1[24] = {0x00, 0x3c, 0x00, 0xcc, 0x01, 0x00, 0x01, 0x80};
    cr_assert_eq(eng_dequantize(ENG_TYPE_Q5_1, q5_1, out, 32, &err), ORTMEM_OK);
    cr_assert_eq(out[0], 0.0f);   /* 16 - 16 */
    cr_assert_eq(out[1], -16.0f); /* 0 - 16 */
    cr_assert_eq(out[16], 0.0f);  /* bit 16 */
    cr_assert_eq(out[31], 0.0f);  /* bit 31 */
    /* Q6_K, d = 1, every scale 2, quants 0 (i.e. -32) except: ql[0] = 0x21
     * (value 0 takes its low nibble 1, value 64 its high nibble 2), ql[32] =
     * 0x50 (value 32 takes its low nibble 0) and qh[0] bits 2..3 = 3 (value
     * 32 gets 48). */
    uint8_t q6_k[210] = {0};
    q6_k[0] = 0x21;
    q6_k[32] = 0x50;
    q6_k[128] = 0x0c;
    for (int s = 0; s < 16; s++)
        q6_k[192 + s] = 2;
    q6_k[208] = 0x00;
    q6_k[209] = 0x3c;
    cr_assert_eq(eng_dequantize(ENG_TYPE_Q6_K, q6_k, out, 256, &err), ORTMEM_OK);
    cr_assert_eq(out[0], -62.0f);  /* 2 * (1 - 32) */
    cr_assert_eq(out[32], 32.0f);  /* 2 * (48 - 32) */
    cr_assert_eq(out[64], -60.0f); /* 2 * (2 - 32) */
    cr_assert_eq(out[96], -54.0f); /* 2 * (5 - 32) */
    cr_assert_eq(out[1], -64.0f);
    cr_assert_eq(out[255], -64.0f);
}

Test(dequant_known, refusals)
{
    eng_error err = {0};
    float out[32];
    uint8_t block[34] = {0};
    cr_assert_eq(eng_dequantize(ENG_TYPE_Q8_K, block, out, 256, &err), ORTMEM_E_UNSUPPORTED);
    cr_assert(strstr(err.message, "Q8_K"), "%s", err.message);
    cr_assert_eq(eng_dequantize(ENG_TYPE_Q8_1, block, out, 32, &err), ORTMEM_E_UNSUPPORTED);
    cr_assert_eq(eng_dequantize(99, block, out, 32, &err), ORTMEM_E_UNSUPPORTED);
    cr_assert(strstr(err.message, "99"), "%s", err.message);
    cr_assert_eq(eng_dequantize(ENG_TYPE_Q8_0, block, out, 31, &err), ORTMEM_E_ALIGN);
    cr_assert(strstr(err.message, "31 values"), "%s", err.message);
    cr_assert_eq(eng_dequantize(ENG_TYPE_F32, block, out, 0, &err), ORTMEM_OK);
}
