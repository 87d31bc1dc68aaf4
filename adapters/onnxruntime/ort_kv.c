/* ortmem-ort: past and present key/value tensors bound to one sequence of an
 * ortmem KV cache, so that a step's present lands where the next step's past
 * is read. */
#include <stdio.h>
#include <stdlib.h>

#include "ort_internal.h"

#define NAME_CAPACITY 128

struct ortmem_ort_kv {
    ortmem_ort *ort;
    OrtMemoryInfo *memory_info; /* a copy of the caller's device */
    ortmem_kv_cache *cache;
    ortmem_kv_seq *seq;
    uint32_t layers, heads, head_dim;
    uint64_t token_bytes; /* of one binding: heads * head_dim * 4 */
    /* Per layer and K|V: the model's past and present names. */
    char (*past_names)[NAME_CAPACITY];
    char (*present_names)[NAME_CAPACITY];
};

static ortmem_status format_names(ortmem_ort_kv *kv, const char *key_format,
                                  const char *value_format, char (*names)[NAME_CAPACITY])
{
    for (uint32_t layer = 0; layer < kv->layers; layer++) {
        for (int value = 0; value < 2; value++) {
            char *name = names[layer * 2u + (unsigned)value];
            int n = snprintf(name, NAME_CAPACITY, value ? value_format : key_format, layer);
            if (n < 0 || n >= NAME_CAPACITY)
                return ortmem_error_set(ORTMEM_E_RANGE,
                                        "ortmem_ort_kv_create: the name for layer %u from "
                                        "'%s' is longer than %d bytes",
                                        layer, value ? value_format : key_format,
                                        NAME_CAPACITY - 1);
        }
    }
    return ORTMEM_OK;
}

static void kv_free(ortmem_ort_kv *kv)
{
    if (kv->seq != NULL)
        ortmem_kv_seq_destroy(kv->seq);
    if (kv->cache != NULL)
        ortmem_kv_cache_destroy(kv->cache);
    if (kv->memory_info != NULL)
        ortmem_ort_api(kv->ort)->ReleaseMemoryInfo(kv->memory_info);
    free(kv->past_names);
    free(kv->present_names);
    free(kv);
}

ortmem_status ortmem_ort_kv_create(ortmem_ort *ort, ortmem_authority *authority,
                                   const OrtMemoryInfo *memory_info,
                                   const ortmem_ort_kv_options *options, ortmem_ort_kv **out)
{
    if (ort == NULL || authority == NULL || memory_info == NULL || options == NULL || out == NULL)
        return ortmem_error_set(ORTMEM_E_INVALID, "ortmem_ort_kv_create: NULL argument");
    if (options->struct_size < sizeof(*options))
        return ortmem_error_set(ORTMEM_E_INVALID,
                                "ortmem_ort_kv_create: options struct_size %zu < %zu",
                                options->struct_size, sizeof(*options));
    if (options->layers == 0 || options->kv_heads == 0 || options->head_dim == 0 ||
        options->max_context == 0)
        return ortmem_error_set(ORTMEM_E_INVALID,
                                "ortmem_ort_kv_create: layers %u, kv_heads %u, head_dim %u, "
                                "max_context %llu: none may be 0",
                                options->layers, options->kv_heads, options->head_dim,
                                (unsigned long long)options->max_context);
    ortmem_device_kind kind;
    int ordinal;
    ortmem_status st = ort_device_of(ort, memory_info, &kind, &ordinal);
    if (st == ORTMEM_OK)
        st = ort_check_backend(authority, kind, "ortmem_ort_kv_create");
    if (st != ORTMEM_OK)
        return st;

    ortmem_ort_kv *kv = calloc(1, sizeof(*kv));
    size_t names = (size_t)options->layers * 2u;
    if (kv != NULL) {
        kv->past_names = calloc(names, NAME_CAPACITY);
        kv->present_names = calloc(names, NAME_CAPACITY);
    }
    if (kv == NULL || kv->past_names == NULL || kv->present_names == NULL) {
        if (kv != NULL) {
            free(kv->past_names);
            free(kv->present_names);
            free(kv);
        }
        return ortmem_error_set(ORTMEM_E_NOMEM, "ortmem_ort_kv_create: names of %u layers",
                                options->layers);
    }
    kv->ort = ort;
    kv->layers = options->layers;
    kv->heads = options->kv_heads;
    kv->head_dim = options->head_dim;
    kv->token_bytes = (uint64_t)options->kv_heads * options->head_dim * sizeof(float);
    st = format_names(kv, options->past_key_format ? options->past_key_format : "past_key_%u",
                      options->past_value_format ? options->past_value_format : "past_value_%u",
                      kv->past_names);
    if (st == ORTMEM_OK)
        st = format_names(
            kv, options->present_key_format ? options->present_key_format : "present_key_%u",
            options->present_value_format ? options->present_value_format : "present_value_%u",
            kv->present_names);
    if (st != ORTMEM_OK) {
        kv_free(kv);
        return st;
    }
    const char *device_name = NULL;
    const OrtApi *api = ortmem_ort_api(ort);
    st = ortmem_ort_check(ort, api->MemoryInfoGetName(memory_info, &device_name),
                          "MemoryInfoGetName");
    if (st == ORTMEM_OK)
        st = ortmem_ort_check(ort,
                              api->CreateMemoryInfo(device_name, OrtDeviceAllocator, ordinal,
                                                    OrtMemTypeDefault, &kv->memory_info),
                              "CreateMemoryInfo");
    if (st != ORTMEM_OK) {
        kv_free(kv);
        return st;
    }

    /* Stable: the full context is VA, committed where tokens land, and the
     * pointers never move. Sequence-major: [capacity][heads][head_dim] per
     * binding, so the first n tokens are one contiguous [1, n, heads,
     * head_dim] tensor. */
    ortmem_kv_cache_options co = ORTMEM_KV_CACHE_OPTIONS_INIT;
    co.geometry.layers = options->layers;
    co.geometry.kv_heads = options->kv_heads;
    co.geometry.head_dim = options->head_dim;
    co.geometry.dtype = ORTMEM_KV_F32;
    co.geometry.layout = ORTMEM_KV_SEQ_MAJOR;
    co.strategy = ORTMEM_KV_STABLE;
    co.max_context = options->max_context;
    co.max_sequences = 1;
    co.warm_max_bytes = 0;
    co.extents = options->extents;
    st = ortmem_kv_cache_create(authority, &co, &kv->cache);
    if (st == ORTMEM_OK)
        st = ortmem_kv_seq_create(kv->cache, &kv->seq);
    if (st != ORTMEM_OK) {
        char detail[512];
        snprintf(detail, sizeof(detail), "%s", ortmem_last_error());
        kv_free(kv);
        return ortmem_error_set(st, "ortmem_ort_kv_create: %s", detail);
    }
    /* The layout's promise, checked once: heads packed within a token. */
    ortmem_kv_binding b;
    b.struct_size = sizeof(b);
    st = ortmem_kv_seq_binding(kv->seq, 0, 0, &b);
    if (st == ORTMEM_OK && (b.token_stride != kv->token_bytes ||
                            b.head_stride != (uint64_t)kv->head_dim * sizeof(float))) {
        st = ortmem_error_set(ORTMEM_E_STATE,
                              "ortmem_ort_kv_create: binding strides token %llu, head %llu; a "
                              "contiguous [tokens, %u, %u] float tensor needs %llu and %zu",
                              (unsigned long long)b.token_stride, (unsigned long long)b.head_stride,
                              kv->heads, kv->head_dim, (unsigned long long)kv->token_bytes,
                              (size_t)kv->head_dim * sizeof(float));
    }
    if (st != ORTMEM_OK) {
        kv_free(kv);
        return st;
    }
    *out = kv;
    return ORTMEM_OK;
}

static ortmem_status bind_one(ortmem_ort_kv *kv, OrtIoBinding *binding, const char *name,
                              int output, void *data, uint64_t tokens)
{
    const OrtApi *api = ortmem_ort_api(kv->ort);
    int64_t shape[4] = {1, (int64_t)tokens, (int64_t)kv->heads, (int64_t)kv->head_dim};
    OrtValue *value = NULL;
    ortmem_status st = ortmem_ort_check(
        kv->ort,
        api->CreateTensorWithDataAsOrtValue(kv->memory_info, data, tokens * kv->token_bytes, shape,
                                            4, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &value),
        name);
    if (st != ORTMEM_OK)
        return st;
    /* The binding keeps its own reference to the value (not to the bytes,
     * which stay the cache's). */
    st = ortmem_ort_check(kv->ort,
                          output ? api->BindOutput(binding, name, value)
                                 : api->BindInput(binding, name, value),
                          name);
    api->ReleaseValue(value);
    return st;
}

ortmem_status ortmem_ort_kv_bind(ortmem_ort_kv *kv, OrtIoBinding *binding, uint64_t new_tokens)
{
    if (kv == NULL || binding == NULL || new_tokens == 0)
        return ortmem_error_set(ORTMEM_E_INVALID,
                                "ortmem_ort_kv_bind: NULL argument or 0 new tokens");
    uint64_t length = 0;
    ortmem_status st = ortmem_kv_seq_length(kv->seq, &length);
    if (st != ORTMEM_OK)
        return st;
    st = ortmem_kv_seq_append(kv->seq, new_tokens);
    if (st != ORTMEM_OK)
        return st;
    for (uint32_t layer = 0; layer < kv->layers && st == ORTMEM_OK; layer++) {
        for (int value = 0; value < 2 && st == ORTMEM_OK; value++) {
            ortmem_kv_binding b;
            b.struct_size = sizeof(b);
            st = ortmem_kv_seq_binding(kv->seq, layer, value, &b);
            if (st != ORTMEM_OK)
                break;
            unsigned slot = layer * 2u + (unsigned)value;
            char *base = b.base;
            st = bind_one(kv, binding, kv->past_names[slot], 0, base, length);
            if (st == ORTMEM_OK)
                st = bind_one(kv, binding, kv->present_names[slot], 1,
                              base + length * b.token_stride, new_tokens);
        }
    }
    if (st != ORTMEM_OK) {
        char detail[512];
        snprintf(detail, sizeof(detail), "%s", ortmem_last_error());
        ortmem_kv_seq_truncate(kv->seq, length);
        return ortmem_error_set(st, "ortmem_ort_kv_bind: %s (the %llu new tokens were undone)",
                                detail, (unsigned long long)new_tokens);
    }
    return ORTMEM_OK;
}

ortmem_status ortmem_ort_kv_truncate(ortmem_ort_kv *kv, uint64_t length)
{
    if (kv == NULL)
        return ortmem_error_set(ORTMEM_E_INVALID, "ortmem_ort_kv_truncate: kv is NULL");
    return ortmem_kv_seq_truncate(kv->seq, length);
}

ortmem_status ortmem_ort_kv_length(ortmem_ort_kv *kv, uint64_t *length)
{
    if (kv == NULL || length == NULL)
        return ortmem_error_set(ORTMEM_E_INVALID, "ortmem_ort_kv_length: NULL argument");
    return ortmem_kv_seq_length(kv->seq, length);
}

ortmem_status ortmem_ort_kv_binding(ortmem_ort_kv *kv, uint32_t layer, int value,
                                    ortmem_kv_binding *binding)
{
    if (kv == NULL)
        return ortmem_error_set(ORTMEM_E_INVALID, "ortmem_ort_kv_binding: kv is NULL");
    return ortmem_kv_seq_binding(kv->seq, layer, value, binding);
}

ortmem_status ortmem_ort_kv_stats(ortmem_ort_kv *kv, ortmem_kv_stats *stats)
{
    if (kv == NULL)
        return ortmem_error_set(ORTMEM_E_INVALID, "ortmem_ort_kv_stats: kv is NULL");
    return ortmem_kv_cache_stats(kv->cache, stats);
}

uint64_t ortmem_ort_kv_bytes_per_token(const ortmem_ort_kv *kv)
{
    return kv != NULL ? 2u * kv->layers * kv->token_bytes : 0;
}

ortmem_status ortmem_ort_kv_destroy(ortmem_ort_kv *kv)
{
    if (kv == NULL)
        return ORTMEM_OK;
    ortmem_status st = ortmem_kv_seq_destroy(kv->seq);
    if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED)
        return st;
    kv->seq = NULL;
    ortmem_status cst = ortmem_kv_cache_destroy(kv->cache);
    if (cst != ORTMEM_OK && cst != ORTMEM_E_QUARANTINED)
        return cst;
    kv->cache = NULL;
    kv_free(kv);
    return st != ORTMEM_OK ? st : cst;
}
