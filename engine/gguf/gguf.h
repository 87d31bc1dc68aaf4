/* A GGUF file, read-only: header, metadata, tensor infos and the data
 * section mapped read-only. Every count, length, offset and size is checked
 * against the file before it is used: a hostile or truncated file is a
 * status with a message naming the field and the numbers, never a crash.
 * Versions 2 and 3, little-endian. */
#ifndef ENGINE_GGUF_GGUF_H
#define ENGINE_GGUF_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ggml_types.h"
#include "common/status.h"

/* Metadata value types, numbered as the format does. */
typedef enum eng_gguf_kind {
    ENG_GGUF_U8 = 0,
    ENG_GGUF_I8 = 1,
    ENG_GGUF_U16 = 2,
    ENG_GGUF_I16 = 3,
    ENG_GGUF_U32 = 4,
    ENG_GGUF_I32 = 5,
    ENG_GGUF_F32 = 6,
    ENG_GGUF_BOOL = 7,
    ENG_GGUF_STRING = 8,
    ENG_GGUF_ARRAY = 9,
    ENG_GGUF_U64 = 10,
    ENG_GGUF_I64 = 11,
    ENG_GGUF_F64 = 12,
} eng_gguf_kind;

typedef struct eng_gguf eng_gguf;

/* A string inside the file: not NUL-terminated. */
typedef struct eng_gguf_str {
    const char *ptr;
    uint64_t len;
} eng_gguf_str;

typedef struct eng_gguf_tensor {
    eng_gguf_str name;
    uint32_t type;    /* eng_ggml_type; the reader refuses ids it does not know */
    uint32_t n_dims;  /* 1..4 */
    uint64_t ne[4];   /* elements per dimension, ne[0] innermost (a row); 1 past n_dims */
    uint64_t offset;  /* from the start of the data section, aligned */
    uint64_t bytes;   /* ne[1]*ne[2]*ne[3] rows of ne[0]/block_elems blocks */
    const void *data; /* in the read-only mapping, valid until eng_gguf_close */
} eng_gguf_tensor;

/* Opens and maps path, checks it whole (header, every metadata entry, every
 * tensor info: type known, ne[0] a multiple of the block, sizes without
 * overflow, offsets aligned to general.alignment (32 when absent), ranges
 * inside the file and not overlapping). */
ortmem_status eng_gguf_open(const char *path, eng_gguf **out, eng_error *err);
void eng_gguf_close(eng_gguf *gguf);

uint32_t eng_gguf_version(const eng_gguf *gguf);
uint64_t eng_gguf_alignment(const eng_gguf *gguf);
uint64_t eng_gguf_file_bytes(const eng_gguf *gguf);
/* Where the data section starts in the file: a tensor's bytes are at
 * eng_gguf_data_offset + its offset (what a file catalog needs). */
uint64_t eng_gguf_data_offset(const eng_gguf *gguf);
const char *eng_gguf_path(const eng_gguf *gguf);

/* ---- Metadata ----
 * Lookups by key; ORTMEM_E_NOT_FOUND naming the key when absent,
 * ORTMEM_E_INVALID naming the key and both kinds when the stored kind does
 * not convert (integers convert to any integer type they fit, F32/F64 to
 * float when finite). */
uint64_t eng_gguf_kv_count(const eng_gguf *gguf);
/* The i-th entry's key and kind (for dumps). */
ortmem_status eng_gguf_kv_at(const eng_gguf *gguf, uint64_t i, eng_gguf_str *key,
                             eng_gguf_kind *kind, eng_error *err);
bool eng_gguf_has(const eng_gguf *gguf, const char *key);
ortmem_status eng_gguf_get_u32(const eng_gguf *gguf, const char *key, uint32_t *out,
                               eng_error *err);
ortmem_status eng_gguf_get_u64(const eng_gguf *gguf, const char *key, uint64_t *out,
                               eng_error *err);
ortmem_status eng_gguf_get_i64(const eng_gguf *gguf, const char *key, int64_t *out, eng_error *err);
ortmem_status eng_gguf_get_f32(const eng_gguf *gguf, const char *key, float *out, eng_error *err);
ortmem_status eng_gguf_get_bool(const eng_gguf *gguf, const char *key, bool *out, eng_error *err);
ortmem_status eng_gguf_get_str(const eng_gguf *gguf, const char *key, eng_gguf_str *out,
                               eng_error *err);
/* An array: its element kind and count (nested arrays are read and checked
 * but not exposed: ORTMEM_E_UNSUPPORTED naming the key). */
ortmem_status eng_gguf_get_array(const eng_gguf *gguf, const char *key, eng_gguf_kind *elem,
                                 uint64_t *count, eng_error *err);
/* Element i of an array of strings (O(1): the reader indexes them at open). */
ortmem_status eng_gguf_array_str(const eng_gguf *gguf, const char *key, uint64_t i,
                                 eng_gguf_str *out, eng_error *err);
/* Element i of an array of numbers, converted as the scalar getters do. */
ortmem_status eng_gguf_array_i64(const eng_gguf *gguf, const char *key, uint64_t i, int64_t *out,
                                 eng_error *err);
ortmem_status eng_gguf_array_f32(const eng_gguf *gguf, const char *key, uint64_t i, float *out,
                                 eng_error *err);

/* ---- Tensors ---- */
uint64_t eng_gguf_tensor_count(const eng_gguf *gguf);
const eng_gguf_tensor *eng_gguf_tensor_at(const eng_gguf *gguf, uint64_t i);
/* ORTMEM_E_NOT_FOUND naming the tensor when absent. */
ortmem_status eng_gguf_find_tensor(const eng_gguf *gguf, const char *name,
                                   const eng_gguf_tensor **out, eng_error *err);

/* True when s equals the NUL-terminated c. */
bool eng_gguf_str_eq(eng_gguf_str s, const char *c);

#endif
