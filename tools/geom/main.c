/* ortmem-geom: what a KV cache commits for a model geometry, from the command
 * line. Exit status 0 when done, 2 for invalid input (one line on stderr,
 * nothing on stdout), 1 when the plot could not be made. */
#include "geom.h"

#include "common/cli.h"
#include "common/gnuplot.h"
#include "common/json.h"
#include "common/number.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define DEFAULT_GRANULE ((uint64_t)2 << 20)
#define DEFAULT_MIN_BUCKET 256

static void usage(FILE *out)
{
    fputs(
        "usage: ortmem-geom [--model NAME | --config PATH] [--layers L --kv-heads H --head-dim D]\n"
        "                   [--dtype T] [--granule SIZE] [--layout LAYOUT | --all-layouts]\n"
        "                   [--tokens N] [--capacity C] [--batch B] [--prefix P]\n"
        "                   [--min-bucket M] [--budget SIZE] [--growth [--step N]] [--json]\n"
        "                   [--sweep PATH.svg]\n"
        "\n"
        "What a KV cache commits for a model geometry: bytes per token, fragments, the\n"
        "floor, the crossover between a stable full-context VA range and bucket growth,\n"
        "committed against live bytes, the bucket, prefix sharing. Exact arithmetic\n"
        "(ortmem_kv_evaluate); the formulas are in docs/memory/KV_GEOMETRY.md.\n"
        "\n"
        "geometry\n"
        "  --model NAME       a preset (fills L, H, D; f16):\n                    ",
        out);
    for (const char *const *n = ortmem_kv_preset_names(); *n; n++)
        fprintf(out, " %s", *n);
    fputs("\n"
          "  --config PATH      a Hugging Face config.json: num_hidden_layers,\n"
          "                     num_key_value_heads (else num_attention_heads), head_dim\n"
          "                     (else hidden_size / num_attention_heads), torch_dtype\n"
          "  --gguf PATH        proposed, not built: the geometry from a GGUF file\n"
          "  --layers L         layers; explicit flags override --model and --config\n"
          "  --kv-heads H       KV heads per layer\n"
          "  --head-dim D       elements per head\n"
          "  --dtype T          f32 f16 bf16 fp8 int8 int4 (default f16, or the config's)\n"
          "  --granule SIZE     physical granule, a power of two (default 2MiB)\n"
          "  --layout LAYOUT    head-major  [H][cap][D] per (layer, K|V) binding (default)\n"
          "                     seq-major   [cap][H][D] per binding\n"
          "                     token-major [cap][2L][H][D], one range per sequence\n"
          "  --all-layouts      the three layouts side by side (instead of --layout)\n"
          "point\n"
          "  --tokens N         live tokens per sequence (default 1)\n"
          "  --capacity C       context a stable sequence reserves, tokens (default 32768)\n"
          "  --batch B          sequences (default 1)\n"
          "  --prefix P         leading tokens shared between sequences (default 0)\n"
          "  --min-bucket M     smallest bucket, tokens (default 256)\n"
          "  --budget SIZE      also: sequences of N tokens that fit in SIZE, with and\n"
          "                     without the prefix shared\n"
          "growth over extents (a model: ortmem_kv_growth_evaluate)\n"
          "  --growth           also: the handles and driver calls one stable sequence\n"
          "                     costs growing to the capacity (and to --tokens) per extent\n"
          "                     policy: granule, geometric with 8, 32 and 128 MiB caps,\n"
          "                     exact; the over-commit bound and the largest extent\n"
          "  --step N           tokens per append, the first included (default 1024)\n"
          "output\n"
          "  --json             one JSON object instead of the table\n"
          "  --sweep PATH.svg   plot committed MiB against tokens 1 .. capacity for every\n"
          "                     layout, stable and bucket growth, crossovers marked;\n"
          "                     needs gnuplot (Debian package gnuplot-nox)\n"
          "  -h, --help         this text\n"
          "\n"
          "SIZE takes KiB, MiB, GiB (or K, M, G) suffixes; counts are plain integers.\n"
          "Exit status: 0 done, 2 invalid input (one line on stderr), 1 the plot failed.\n",
          out);
}

/* One line on stderr, "ortmem-geom: ...". */
#define fail(status, ...) cli_fail("ortmem-geom", status, __VA_ARGS__)

/* ---- parsing ---- */

typedef struct options {
    const char *model, *config, *gguf, *sweep;
    bool json, all_layouts, help, growth;
    bool has_layers, has_kv_heads, has_head_dim, has_dtype, has_layout, has_budget, has_tokens;
    uint32_t layers, kv_heads, head_dim;
    ortmem_kv_dtype dtype;
    ortmem_kv_layout layout;
    uint64_t granule, tokens, capacity, batch, prefix, min_bucket, budget, step;
} options;

/* A dimension: 1 .. 2^32-1. */
static int parse_dim(const char *name, const char *value, uint32_t *out, bool *has)
{
    uint64_t v;
    if (!parse_u64(value, &v) || v == 0 || v > UINT32_MAX)
        return fail(EXIT_USAGE, "%s '%s': not a positive integer (1 .. %" PRIu32 ")", name, value,
                    UINT32_MAX);
    *out = (uint32_t)v;
    *has = true;
    return 0;
}

static int parse_count(const char *name, const char *value, uint64_t min, uint64_t *out)
{
    uint64_t v;
    if (!parse_u64(value, &v) || v < min)
        return fail(EXIT_USAGE, "%s '%s': not %s integer", name, value,
                    min ? "a positive" : "a non-negative");
    *out = v;
    return 0;
}

static int parse_bytes(const char *name, const char *value, uint64_t *out)
{
    if (!parse_size(value, out))
        return fail(EXIT_USAGE,
                    "%s '%s': not a size (digits with an optional KiB, MiB or GiB suffix)", name,
                    value);
    return 0;
}

/* Options that take a value, in --name VALUE or --name=VALUE form. */
static int apply_option(void *context, const char *name, const char *value)
{
    options *o = context;
    if (strcmp(name, "--model") == 0)
        o->model = value;
    else if (strcmp(name, "--config") == 0)
        o->config = value;
    else if (strcmp(name, "--gguf") == 0)
        o->gguf = value;
    else if (strcmp(name, "--sweep") == 0)
        o->sweep = value;
    else if (strcmp(name, "--layers") == 0)
        return parse_dim(name, value, &o->layers, &o->has_layers);
    else if (strcmp(name, "--kv-heads") == 0)
        return parse_dim(name, value, &o->kv_heads, &o->has_kv_heads);
    else if (strcmp(name, "--head-dim") == 0)
        return parse_dim(name, value, &o->head_dim, &o->has_head_dim);
    else if (strcmp(name, "--dtype") == 0) {
        if (ortmem_kv_dtype_parse(value, &o->dtype) != ORTMEM_OK)
            return fail(EXIT_USAGE, "--dtype '%s': unknown (f32, f16, bf16, fp8, int8, int4)",
                        value);
        o->has_dtype = true;
    } else if (strcmp(name, "--layout") == 0) {
        if (ortmem_kv_layout_parse(value, &o->layout) != ORTMEM_OK)
            return fail(EXIT_USAGE, "--layout '%s': unknown (head-major, seq-major, token-major)",
                        value);
        o->has_layout = true;
    } else if (strcmp(name, "--granule") == 0) {
        if (parse_bytes(name, value, &o->granule))
            return EXIT_USAGE;
        if (o->granule == 0 || (o->granule & (o->granule - 1)))
            return fail(EXIT_USAGE, "--granule '%s': %" PRIu64 " bytes is not a power of two",
                        value, o->granule);
    } else if (strcmp(name, "--tokens") == 0) {
        o->has_tokens = true;
        return parse_count(name, value, 0, &o->tokens);
    } else if (strcmp(name, "--capacity") == 0)
        return parse_count(name, value, 1, &o->capacity);
    else if (strcmp(name, "--batch") == 0)
        return parse_count(name, value, 1, &o->batch);
    else if (strcmp(name, "--prefix") == 0)
        return parse_count(name, value, 0, &o->prefix);
    else if (strcmp(name, "--step") == 0)
        return parse_count(name, value, 1, &o->step);
    else if (strcmp(name, "--min-bucket") == 0)
        return parse_count(name, value, 0, &o->min_bucket);
    else if (strcmp(name, "--budget") == 0) {
        o->has_budget = true;
        return parse_bytes(name, value, &o->budget);
    } else
        return fail(EXIT_USAGE, "unknown option '%s' (ortmem-geom --help lists them)", name);
    return 0;
}

static int parse_args(int argc, char **argv, options *o)
{
    const cli_flag flags[] = {
        {"-h", &o->help},         {"--help", &o->help},
        {"--json", &o->json},     {"--all-layouts", &o->all_layouts},
        {"--growth", &o->growth}, {NULL, NULL},
    };
    static const char *const valued[] = {
        "--model",    "--config", "--gguf",       "--sweep",   "--layers", "--kv-heads",
        "--head-dim", "--dtype",  "--layout",     "--granule", "--tokens", "--capacity",
        "--batch",    "--prefix", "--min-bucket", "--budget",  "--step",   NULL,
    };
    const cli_parser parser = {"ortmem-geom", flags, valued, apply_option, o};
    return cli_parse(&parser, argc, argv);
}

/* ---- the geometry: preset or config, then explicit flags ---- */

static int build_input(const options *o, geom_input *in)
{
    ortmem_kv_geometry g = ORTMEM_KV_GEOMETRY_INIT;
    if (o->gguf)
        return fail(EXIT_USAGE,
                    "--gguf '%s': reading the geometry from a GGUF file is proposed, not built "
                    "(use --config PATH/config.json, --model, or --layers/--kv-heads/--head-dim)",
                    o->gguf);
    if (o->model && o->config)
        return fail(EXIT_USAGE, "--model and --config both name the geometry; give one");
    if (o->model && ortmem_kv_preset(o->model, &g) != ORTMEM_OK)
        return fail(EXIT_USAGE, "--model '%s': %s", o->model, ortmem_last_error());
    if (o->config) {
        geom_config c;
        char err[512];
        if (!geom_config_read(o->config, &c, err, sizeof err))
            return fail(EXIT_USAGE, "--config '%s': %s", o->config, err);
        g.layers = c.layers;
        g.kv_heads = c.kv_heads;
        g.head_dim = c.head_dim;
        if (c.dtype[0] && !o->has_dtype && !geom_torch_dtype(c.dtype, &g.dtype))
            return fail(EXIT_USAGE,
                        "--config '%s': torch_dtype '%s' is no KV element type (give --dtype)",
                        o->config, c.dtype);
    }
    if (o->has_layers)
        g.layers = o->layers;
    if (o->has_kv_heads)
        g.kv_heads = o->kv_heads;
    if (o->has_head_dim)
        g.head_dim = o->head_dim;
    if (o->has_dtype)
        g.dtype = o->dtype;
    if (o->has_layout)
        g.layout = o->layout;
    g.granule = o->granule;
    static const struct {
        const char *flag;
        size_t offset;
    } required[] = {
        {"--layers", offsetof(ortmem_kv_geometry, layers)},
        {"--kv-heads", offsetof(ortmem_kv_geometry, kv_heads)},
        {"--head-dim", offsetof(ortmem_kv_geometry, head_dim)},
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        uint32_t v;
        memcpy(&v, (const char *)&g + required[i].offset, sizeof v);
        if (v == 0)
            return fail(EXIT_USAGE, "%s is missing (or give --model NAME or --config PATH)",
                        required[i].flag);
    }
    if (ortmem_kv_geometry_check(&g) != ORTMEM_OK)
        return fail(EXIT_USAGE, "%s", ortmem_last_error());
    if (o->tokens > o->capacity)
        return fail(EXIT_USAGE, "--tokens %" PRIu64 " is above --capacity %" PRIu64, o->tokens,
                    o->capacity);
    if (o->prefix > o->tokens)
        return fail(EXIT_USAGE, "--prefix %" PRIu64 " is above --tokens %" PRIu64, o->prefix,
                    o->tokens);
    in->geometry = g;
    in->source = o->model ? o->model : o->config;
    in->tokens = o->tokens;
    in->capacity = o->capacity;
    in->batch = o->batch;
    in->prefix = o->prefix;
    in->min_bucket = o->min_bucket;
    return 0;
}

/* ---- results ---- */

/* The extent policies --growth compares. */
static const struct {
    const char *name;
    ortmem_extent_growth growth;
    size_t cap_bytes;
} growth_policies[] = {
    {"granule", ORTMEM_EXTENT_GRANULE, 0},
    {"geometric 8MiB", ORTMEM_EXTENT_GEOMETRIC, (size_t)8 << 20},
    {"geometric 32MiB", ORTMEM_EXTENT_GEOMETRIC, (size_t)32 << 20},
    {"geometric 128MiB", ORTMEM_EXTENT_GEOMETRIC, (size_t)128 << 20},
    {"exact", ORTMEM_EXTENT_EXACT, 0},
};
#define GROWTH_POLICIES (sizeof growth_policies / sizeof growth_policies[0])

typedef struct growth_row {
    bool skipped; /* the cap is below the granule */
    ortmem_kv_growth_cost to_capacity, to_tokens;
} growth_row;

typedef struct result {
    ortmem_kv_layout layout;
    ortmem_kv_eval e;
    bool has_budget;
    uint64_t budget, fit, fit_shared; /* fit_shared UINT64_MAX: no bound */
    bool has_growth, growth_to_tokens;
    growth_row growth[GROWTH_POLICIES];
} result;

static int grow_to(const ortmem_kv_geometry *g, const ortmem_extent_policy *p, const options *o,
                   uint64_t tokens, ortmem_kv_growth_cost *cost)
{
    memset(cost, 0, sizeof *cost);
    cost->struct_size = sizeof *cost;
    if (ortmem_kv_growth_evaluate(g, p, o->capacity, o->step, o->step, tokens, cost) != ORTMEM_OK)
        return fail(EXIT_USAGE, "--growth: %s: %s", ortmem_kv_layout_name(g->layout),
                    ortmem_last_error());
    return 0;
}

static int evaluate_growth(const ortmem_kv_geometry *g, const options *o, result *r)
{
    r->has_growth = true;
    r->growth_to_tokens = o->has_tokens && o->tokens > 0 && o->tokens < o->capacity;
    for (size_t i = 0; i < GROWTH_POLICIES; i++) {
        ortmem_extent_policy p = ORTMEM_EXTENT_POLICY_INIT;
        p.growth = growth_policies[i].growth;
        p.cap_bytes = growth_policies[i].cap_bytes;
        growth_row *row = &r->growth[i];
        row->skipped = p.cap_bytes && p.cap_bytes < g->granule;
        if (row->skipped)
            continue;
        int rc = grow_to(g, &p, o, o->capacity, &row->to_capacity);
        if (!rc && r->growth_to_tokens)
            rc = grow_to(g, &p, o, o->tokens, &row->to_tokens);
        if (rc)
            return rc;
    }
    return 0;
}

static int evaluate(const geom_input *in, const options *o, ortmem_kv_layout layout, result *r)
{
    ortmem_kv_geometry g = in->geometry;
    g.layout = layout;
    memset(r, 0, sizeof *r);
    r->layout = layout;
    r->e.struct_size = sizeof r->e;
    if (ortmem_kv_evaluate(&g, in->tokens, in->capacity, in->batch, in->prefix, in->min_bucket,
                           &r->e) != ORTMEM_OK)
        return fail(EXIT_USAGE, "%s: %s", ortmem_kv_layout_name(layout), ortmem_last_error());
    if (o->has_budget) {
        r->has_budget = true;
        r->budget = o->budget;
        if (ortmem_kv_capacity(&g, o->budget, in->tokens, in->capacity, in->prefix, &r->fit,
                               &r->fit_shared) != ORTMEM_OK)
            return fail(EXIT_USAGE, "--budget: %s: %s", ortmem_kv_layout_name(layout),
                        ortmem_last_error());
    }
    return o->growth ? evaluate_growth(&g, o, r) : 0;
}

/* A JSON string literal; geom's report writes every control byte as \u00XX. */
static void json_string(FILE *out, const char *s)
{
    json_put_string(out, s, JSON_CONTROLS_AS_CODES);
}

static void json_u64(FILE *out, const char *indent, const char *key, uint64_t v)
{
    fprintf(out, ",\n%s\"%s\": %" PRIu64, indent, key, v);
}

static void json_cost(FILE *out, const char *indent, const char *key,
                      const ortmem_kv_growth_cost *c)
{
    fprintf(out, ",\n%s\"%s\": {", indent, key);
    fprintf(out,
            "\"appends\": %" PRIu64 ", \"extents\": %" PRIu64 ", \"calls_create\": %" PRIu64
            ", \"calls_map\": %" PRIu64 ", \"calls_set_access\": %" PRIu64
            ", \"calls_unmap\": %" PRIu64 ", \"calls_release\": %" PRIu64
            ", \"committed_bytes\": %" PRIu64 ", \"live_bytes\": %" PRIu64
            ", \"overcommit_max_bytes\": %" PRIu64 ", \"overcommit_bound_bytes\": %" PRIu64
            ", \"largest_extent_bytes\": %" PRIu64 "}",
            c->appends, c->extents, c->calls_create, c->calls_map, c->calls_set_access,
            c->calls_unmap, c->calls_release, c->committed_bytes, c->live_bytes,
            c->overcommit_max_bytes, c->overcommit_bound_bytes, c->largest_extent_bytes);
}

/* "growth": one object per policy, each with the cost to the capacity and,
 * when --tokens is between 0 and it, to the tokens. */
static void json_growth(FILE *out, const char *indent, const result *r)
{
    char inner[32];
    snprintf(inner, sizeof inner, "%s    ", indent);
    fprintf(out, ",\n%s\"growth\": [", indent);
    bool first = true;
    for (size_t i = 0; i < GROWTH_POLICIES; i++) {
        if (r->growth[i].skipped)
            continue;
        fprintf(out, "%s\n%s  {\n%s\"policy\": ", first ? "" : ",", indent, inner);
        json_string(out, growth_policies[i].name);
        json_u64(out, inner, "cap_bytes", growth_policies[i].cap_bytes);
        json_cost(out, inner, "to_capacity", &r->growth[i].to_capacity);
        if (r->growth_to_tokens)
            json_cost(out, inner, "to_tokens", &r->growth[i].to_tokens);
        fprintf(out, "\n%s  }", indent);
        first = false;
    }
    fprintf(out, "\n%s]", indent);
}

static void json_results(FILE *out, const char *indent, const result *r, uint64_t granule,
                         bool first)
{
    const ortmem_kv_eval *e = &r->e;
    fprintf(out, "%s%s\"layout\": \"%s\"", first ? "" : ",\n", indent,
            ortmem_kv_layout_name(r->layout));
    json_u64(out, indent, "bytes_per_token", e->bytes_per_token);
    json_u64(out, indent, "fragments", e->fragments);
    json_u64(out, indent, "contiguous_bytes_per_token", e->contiguous_bytes_per_token);
    json_u64(out, indent, "floor_bytes", e->floor_bytes);
    json_u64(out, indent, "floor_granules", e->fragments);
    json_u64(out, indent, "crossover_tokens", e->crossover_tokens);
    json_u64(out, indent, "committed_bytes", e->committed_bytes);
    json_u64(out, indent, "committed_granules", e->committed_bytes / granule);
    json_u64(out, indent, "live_bytes", e->live_bytes);
    if (e->committed_bytes)
        fprintf(out, ",\n%s\"efficiency\": %.6g", indent,
                (double)e->live_bytes / (double)e->committed_bytes);
    else
        fprintf(out, ",\n%s\"efficiency\": null", indent);
    json_u64(out, indent, "bucket_tokens", e->bucket_tokens);
    json_u64(out, indent, "bucket_bytes", e->bucket_bytes);
    json_u64(out, indent, "bucket_committed_bytes", e->bucket_committed_bytes);
    json_u64(out, indent, "sequence_reserved_bytes", e->sequence_reserved_bytes);
    fprintf(out, ",\n%s\"shareable\": %s", indent, e->shareable ? "true" : "false");
    json_u64(out, indent, "share_granules", e->share_granules);
    json_u64(out, indent, "share_copy_bytes", e->share_copy_bytes);
    if (r->has_budget) {
        json_u64(out, indent, "budget_bytes", r->budget);
        json_u64(out, indent, "sequences_fit", r->fit);
        if (r->fit_shared == UINT64_MAX)
            fprintf(out, ",\n%s\"sequences_fit_shared_prefix\": null", indent);
        else
            json_u64(out, indent, "sequences_fit_shared_prefix", r->fit_shared);
    }
    if (r->has_growth)
        json_growth(out, indent, r);
}

static void print_json(FILE *out, const geom_input *in, const options *o, const result *r,
                       size_t count)
{
    const ortmem_kv_geometry *g = &in->geometry;
    fputs("{\n  \"model\": ", out);
    if (o->model)
        json_string(out, o->model);
    else
        fputs("null", out);
    fputs(",\n  \"config\": ", out);
    if (o->config)
        json_string(out, o->config);
    else
        fputs("null", out);
    json_u64(out, "  ", "layers", g->layers);
    json_u64(out, "  ", "kv_heads", g->kv_heads);
    json_u64(out, "  ", "head_dim", g->head_dim);
    fprintf(out, ",\n  \"dtype\": \"%s\"", ortmem_kv_dtype_name(g->dtype));
    json_u64(out, "  ", "granule_bytes", g->granule);
    json_u64(out, "  ", "tokens", in->tokens);
    json_u64(out, "  ", "capacity", in->capacity);
    json_u64(out, "  ", "batch", in->batch);
    json_u64(out, "  ", "prefix", in->prefix);
    json_u64(out, "  ", "min_bucket", in->min_bucket ? in->min_bucket : DEFAULT_MIN_BUCKET);
    if (o->growth)
        json_u64(out, "  ", "step", o->step);
    if (o->sweep) {
        fputs(",\n  \"sweep\": ", out);
        json_string(out, o->sweep);
    }
    if (o->all_layouts) {
        fputs(",\n  \"layouts\": [", out);
        for (size_t i = 0; i < count; i++) {
            fprintf(out, "%s\n    {\n", i ? "," : "");
            json_results(out, "      ", &r[i], g->granule, true);
            fputs("\n    }", out);
        }
        fputs("\n  ]\n}\n", out);
    } else {
        json_results(out, "  ", &r[0], g->granule, false);
        fputs("\n}\n", out);
    }
}

/* Table rows: a byte quantity shows exact bytes and MiB; a count shows in the
 * first column alone. */
typedef enum { ROW_BYTES, ROW_COUNT, ROW_TEXT } row_kind;

#define LABEL_W 35
#define VALUE_W 14
#define MIB_W 11

/* A table line is built here and printed without its trailing blanks. */
typedef struct line_buf {
    char text[512];
    size_t len;
} line_buf;

static void put(line_buf *line, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(line_buf *line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line->text + line->len, sizeof line->text - line->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        line->len += (size_t)n < sizeof line->text - line->len ? (size_t)n
                                                               : sizeof line->text - line->len - 1;
}

static void line_end(FILE *out, line_buf *line)
{
    while (line->len && line->text[line->len - 1] == ' ')
        line->len--;
    fprintf(out, "%.*s\n", (int)line->len, line->text);
    line->len = 0;
}

/* Exact bytes, and MiB unless the value is under a KiB. */
static void cell_bytes(line_buf *line, uint64_t v)
{
    put(line, "%*" PRIu64, VALUE_W, v);
    if (v == 0 || v >= 1024)
        put(line, "%*.3f", MIB_W, (double)v / 1048576.0);
    else
        put(line, "%*s", MIB_W, "");
}

static void cell_count(line_buf *line, uint64_t v)
{
    put(line, "%*" PRIu64 "%*s", VALUE_W, v, MIB_W, "");
}

static void cell_text(line_buf *line, const char *text)
{
    put(line, "%*s%*s", VALUE_W, text, MIB_W, "");
}

/* One layout's growth block: a row per policy. */
static void print_growth(FILE *out, const geom_input *in, const options *o, const result *r,
                         uint64_t tokens, bool to_tokens)
{
    fprintf(out,
            "\ngrowth of one stable sequence, %s, 0 -> %" PRIu64 " tokens in appends of %" PRIu64
            " (modelled)\n",
            ortmem_kv_layout_name(r->layout), tokens, o->step);
    fprintf(out, "%-17s %9s %9s %9s %11s %9s %9s %14s %14s %12s\n", "policy", "extents", "create",
            "map", "set-access", "unmap", "release", "overcommit MiB", "bound MiB", "largest MiB");
    for (size_t i = 0; i < GROWTH_POLICIES; i++) {
        if (r->growth[i].skipped)
            continue;
        const ortmem_kv_growth_cost *c =
            to_tokens ? &r->growth[i].to_tokens : &r->growth[i].to_capacity;
        fprintf(out,
                "%-17s %9" PRIu64 " %9" PRIu64 " %9" PRIu64 " %11" PRIu64 " %9" PRIu64 " %9" PRIu64
                " %14.3f %14.3f %12.3f\n",
                growth_policies[i].name, c->extents, c->calls_create, c->calls_map,
                c->calls_set_access, c->calls_unmap, c->calls_release,
                (double)c->overcommit_max_bytes / 1048576.0,
                (double)c->overcommit_bound_bytes / 1048576.0,
                (double)c->largest_extent_bytes / 1048576.0);
    }
    (void)in;
}

static void print_table(FILE *out, const geom_input *in, const options *o, const result *r,
                        size_t count)
{
    const ortmem_kv_geometry *g = &in->geometry;
    char gran[32];
    fprintf(out,
            "%s: %" PRIu32 " layers, %" PRIu32 " KV heads, head dim %" PRIu32 ", %s, granule %s\n",
            in->source ? in->source : "geometry", g->layers, g->kv_heads, g->head_dim,
            ortmem_kv_dtype_name(g->dtype), size_text(g->granule, gran, sizeof gran));
    fprintf(out,
            "tokens %" PRIu64 ", capacity %" PRIu64 ", batch %" PRIu64 ", prefix %" PRIu64
            ", min bucket %" PRIu64 "\n\n",
            in->tokens, in->capacity, in->batch, in->prefix,
            in->min_bucket ? in->min_bucket : DEFAULT_MIN_BUCKET);
    line_buf line = {.len = 0};
    put(&line, "%-*s", LABEL_W, "");
    for (size_t i = 0; i < count; i++)
        put(&line, "%*s", VALUE_W + MIB_W, ortmem_kv_layout_name(r[i].layout));
    line_end(out, &line);
    put(&line, "%-*s", LABEL_W, "");
    for (size_t i = 0; i < count; i++)
        put(&line, "%*s%*s", VALUE_W, "value", MIB_W, "MiB");
    line_end(out, &line);

    enum { GRANULES, EFFICIENCY, SHAREABLE };
    static const struct {
        const char *label;
        row_kind kind;
        size_t what; /* offset in ortmem_kv_eval, or for ROW_TEXT one of the above */
    } rows[] = {
        {"bytes per token (whole model)", ROW_BYTES, offsetof(ortmem_kv_eval, bytes_per_token)},
        {"fragments per sequence", ROW_COUNT, offsetof(ortmem_kv_eval, fragments)},
        {"contiguous bytes/token (fragment)", ROW_BYTES,
         offsetof(ortmem_kv_eval, contiguous_bytes_per_token)},
        {"floor (fragments x granule)", ROW_BYTES, offsetof(ortmem_kv_eval, floor_bytes)},
        {"crossover tokens", ROW_COUNT, offsetof(ortmem_kv_eval, crossover_tokens)},
        {"committed, stable (all sequences)", ROW_BYTES, offsetof(ortmem_kv_eval, committed_bytes)},
        {"  granules", ROW_TEXT, GRANULES},
        {"live (all sequences)", ROW_BYTES, offsetof(ortmem_kv_eval, live_bytes)},
        {"  efficiency (live / committed)", ROW_TEXT, EFFICIENCY},
        {"bucket tokens", ROW_COUNT, offsetof(ortmem_kv_eval, bucket_tokens)},
        {"bucket bytes (all sequences)", ROW_BYTES, offsetof(ortmem_kv_eval, bucket_bytes)},
        {"bucket committed (all sequences)", ROW_BYTES,
         offsetof(ortmem_kv_eval, bucket_committed_bytes)},
        {"reserved VA per stable sequence", ROW_BYTES,
         offsetof(ortmem_kv_eval, sequence_reserved_bytes)},
        {"prefix shareable by mapping", ROW_TEXT, SHAREABLE},
        {"shared granules per sequence", ROW_COUNT, offsetof(ortmem_kv_eval, share_granules)},
        {"prefix bytes copied per sequence", ROW_BYTES, offsetof(ortmem_kv_eval, share_copy_bytes)},
    };
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        put(&line, "%-*s", LABEL_W, rows[k].label);
        for (size_t i = 0; i < count; i++) {
            const ortmem_kv_eval *e = &r[i].e;
            uint64_t v = 0;
            char text[32];
            switch (rows[k].kind) {
            case ROW_BYTES:
                memcpy(&v, (const char *)e + rows[k].what, sizeof v);
                cell_bytes(&line, v);
                break;
            case ROW_COUNT:
                memcpy(&v, (const char *)e + rows[k].what, sizeof v);
                cell_count(&line, v);
                break;
            case ROW_TEXT:
                if (rows[k].what == GRANULES) {
                    cell_count(&line, e->committed_bytes / g->granule);
                } else if (rows[k].what == EFFICIENCY) {
                    if (e->committed_bytes)
                        snprintf(text, sizeof text, "%.4g%%",
                                 100.0 * (double)e->live_bytes / (double)e->committed_bytes);
                    else
                        snprintf(text, sizeof text, "-");
                    cell_text(&line, text);
                } else {
                    cell_text(&line, e->shareable ? "yes" : "no");
                }
                break;
            }
        }
        line_end(out, &line);
    }
    if (o->has_budget) {
        char budget[32];
        fprintf(out, "\nsequences of %" PRIu64 " tokens that fit in %s\n", in->tokens,
                size_text(o->budget, budget, sizeof budget));
        put(&line, "%-*s", LABEL_W, "  each committing its own granules");
        for (size_t i = 0; i < count; i++)
            cell_count(&line, r[i].fit);
        line_end(out, &line);
        put(&line, "%-*s", LABEL_W, "  the prefix's full granules shared");
        for (size_t i = 0; i < count; i++) {
            if (r[i].fit_shared == UINT64_MAX)
                cell_text(&line, "unbounded");
            else
                cell_count(&line, r[i].fit_shared);
        }
        line_end(out, &line);
    }
    for (size_t i = 0; i < count && r[i].has_growth; i++) {
        print_growth(out, in, o, &r[i], o->capacity, false);
        if (r[i].growth_to_tokens)
            print_growth(out, in, o, &r[i], o->tokens, true);
    }
    if (o->sweep)
        fprintf(out, "\nplot: %s\n", o->sweep);
}

/* ---- main ---- */

int main(int argc, char **argv)
{
    options o = {
        .granule = DEFAULT_GRANULE, .tokens = 1, .capacity = 32768, .batch = 1, .step = 1024};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    if (o.help) {
        usage(stdout);
        return 0;
    }
    geom_input in;
    rc = build_input(&o, &in);
    if (rc)
        return rc;
    result r[ORTMEM_KV_LAYOUT_COUNT];
    size_t count = 0;
    if (o.all_layouts) {
        for (unsigned l = 0; l < ORTMEM_KV_LAYOUT_COUNT; l++) {
            rc = evaluate(&in, &o, (ortmem_kv_layout)l, &r[count++]);
            if (rc)
                return rc;
        }
    } else {
        rc = evaluate(&in, &o, in.geometry.layout, &r[count++]);
        if (rc)
            return rc;
    }
    if (o.sweep) {
        if (!gnuplot_available())
            return fail(EXIT_FAILED, "--sweep needs gnuplot, which is not installed (Debian: "
                                     "apt-get install gnuplot-nox)");
        int fd = open(o.sweep, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (fd < 0)
            return fail(EXIT_FAILED, "--sweep: cannot write '%s': %s", o.sweep, strerror(errno));
        rc = geom_plot_draw(&in, fd, stderr);
        int close_errno;
        if (!gnuplot_svg_close(fd, o.sweep, rc == 0, &close_errno)) {
            if (close_errno)
                rc = fail(EXIT_FAILED, "--sweep: writing '%s' failed: %s", o.sweep,
                          strerror(close_errno));
            return rc;
        }
    }
    if (o.json)
        print_json(stdout, &in, &o, r, count);
    else
        print_table(stdout, &in, &o, r, count);
    if (fflush(stdout) != 0 || ferror(stdout))
        return fail(EXIT_FAILED, "writing the output failed: %s", strerror(errno));
    return 0;
}
