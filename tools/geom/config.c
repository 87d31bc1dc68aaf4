/* The KV geometry of a Hugging Face config.json, read with jansson:
 * num_hidden_layers, num_key_value_heads (else num_attention_heads), head_dim
 * (else hidden_size / num_attention_heads) and torch_dtype (or dtype, its
 * newer name). Multimodal configs keep the language model's fields under
 * text_config; those are used when the top level has no num_hidden_layers. */
#include "geom.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static bool config_error(char *err, size_t err_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool config_error(char *err, size_t err_size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
    /* One line, as promised: jansson's text may quote input with newlines. */
    for (char *c = err; err_size && *c; c++)
        if (*c == '\n' || *c == '\r' || *c == '\t')
            *c = ' ';
    return false;
}

/* A field that must be a positive 32-bit integer when present. Absent and null
 * (some configs write "head_dim": null) are both "not given". */
typedef enum { FIELD_ABSENT, FIELD_OK, FIELD_BAD } field_state;

static field_state get_dim(const json_t *object, const char *key, uint32_t *out, char *err,
                           size_t err_size)
{
    const json_t *v = json_object_get(object, key);
    if (!v || json_is_null(v))
        return FIELD_ABSENT;
    if (!json_is_integer(v) || json_integer_value(v) <= 0 ||
        json_integer_value(v) > (json_int_t)UINT32_MAX) {
        char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        config_error(err, err_size, "%s is %.40s, not a positive integer", key, text ? text : "?");
        free(text);
        return FIELD_BAD;
    }
    *out = (uint32_t)json_integer_value(v);
    return FIELD_OK;
}

static bool get_dtype(const json_t *object, char *dtype, size_t size)
{
    static const char *const keys[] = {"torch_dtype", "dtype"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const json_t *v = json_object_get(object, keys[i]);
        if (json_is_string(v)) {
            snprintf(dtype, size, "%s", json_string_value(v));
            return true;
        }
    }
    return false;
}

bool geom_config_read(const char *path, geom_config *config, char *err, size_t err_size)
{
    memset(config, 0, sizeof *config);
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_DECODE_ANY, &jerr);
    if (!root) {
        if (jerr.line > 0)
            return config_error(err, err_size, "line %d, column %d: %s", jerr.line, jerr.column,
                                jerr.text);
        return config_error(err, err_size, "%s", jerr.text);
    }
    bool ok = false;
    const json_t *model = root;
    if (!json_is_object(root)) {
        config_error(err, err_size, "not a JSON object");
        goto out;
    }
    if (!json_object_get(root, "num_hidden_layers") &&
        json_is_object(json_object_get(root, "text_config")))
        model = json_object_get(root, "text_config");

    field_state s = get_dim(model, "num_hidden_layers", &config->layers, err, err_size);
    if (s == FIELD_BAD)
        goto out;
    if (s == FIELD_ABSENT) {
        config_error(err, err_size, "no num_hidden_layers");
        goto out;
    }
    uint32_t attention_heads = 0;
    field_state heads = get_dim(model, "num_attention_heads", &attention_heads, err, err_size);
    if (heads == FIELD_BAD)
        goto out;
    s = get_dim(model, "num_key_value_heads", &config->kv_heads, err, err_size);
    if (s == FIELD_BAD)
        goto out;
    if (s == FIELD_ABSENT) {
        if (heads == FIELD_ABSENT) {
            config_error(err, err_size, "neither num_key_value_heads nor num_attention_heads");
            goto out;
        }
        config->kv_heads = attention_heads;
    }
    s = get_dim(model, "head_dim", &config->head_dim, err, err_size);
    if (s == FIELD_BAD)
        goto out;
    if (s == FIELD_ABSENT) {
        uint32_t hidden = 0;
        s = get_dim(model, "hidden_size", &hidden, err, err_size);
        if (s == FIELD_BAD)
            goto out;
        if (s == FIELD_ABSENT || heads == FIELD_ABSENT) {
            config_error(err, err_size,
                         "no head_dim, and no hidden_size and num_attention_heads to derive it");
            goto out;
        }
        if (hidden % attention_heads) {
            config_error(err, err_size,
                         "no head_dim, and hidden_size %u is not a multiple of "
                         "num_attention_heads %u",
                         hidden, attention_heads);
            goto out;
        }
        config->head_dim = hidden / attention_heads;
    }
    if (!get_dtype(model, config->dtype, sizeof config->dtype) && model != root)
        (void)get_dtype(root, config->dtype, sizeof config->dtype);
    ok = true;
out:
    json_decref(root);
    return ok;
}

bool geom_torch_dtype(const char *name, ortmem_kv_dtype *dtype)
{
    static const struct {
        const char *torch;
        ortmem_kv_dtype kv;
    } map[] = {
        {"float32", ORTMEM_KV_F32},         {"float", ORTMEM_KV_F32},
        {"float16", ORTMEM_KV_F16},         {"half", ORTMEM_KV_F16},
        {"bfloat16", ORTMEM_KV_BF16},       {"float8_e4m3fn", ORTMEM_KV_FP8},
        {"float8_e4m3fnuz", ORTMEM_KV_FP8}, {"float8_e5m2", ORTMEM_KV_FP8},
        {"float8_e5m2fnuz", ORTMEM_KV_FP8}, {"int8", ORTMEM_KV_INT8},
    };
    const char *n = strncmp(name, "torch.", 6) == 0 ? name + 6 : name;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (strcmp(n, map[i].torch) == 0) {
            *dtype = map[i].kv;
            return true;
        }
    }
    return false;
}
