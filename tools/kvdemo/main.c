/* ortmem-kvdemo: KV paging under a serving-like workload on the CPU backend
 * (or CUDA's, --backend cuda), once per layout and strategy, with committed
 * against live bytes as it runs and a report at the end, the backend calls
 * per request among it. Exit status 0 when every byte read back was the byte
 * written, 1 on a corruption or a library failure (or a plot that could not
 * be drawn), 2 for invalid input or a backend that is unavailable (one line
 * on stderr). */
#include "kvdemo.h"

#include "common/cli.h"
#include "common/gnuplot.h"
#include "common/json.h"
#include "common/number.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXIT_FOUND_PROBLEMS 1
#define EXIT_USAGE 2
#define MiB (1024.0 * 1024.0)

static void usage(FILE *out)
{
    fputs("usage: ortmem-kvdemo [--model NAME] [--granule SIZE] [--requests N] [--batch B]\n"
          "                     [--max-context T] [--prompt-min T] [--prompt-max T]\n"
          "                     [--gen-min T] [--gen-max T] [--system-prompt T] [--seed S]\n"
          "                     [--budget SIZE] [--verify N] [--warmup N] [--json]\n"
          "                     [--plot PATH.svg] [--backend cpu|cuda] [--device N]\n"
          "                     [--io store|copy] [--warm on|off] [--prewarm on|off]\n"
          "\n"
          "KV paging on the CPU backend (or CUDA's): a serving-like workload (requests of\n"
          "varied prompt and generation lengths, continuous batching, a system prompt\n"
          "shared by forking the sequence that holds it and through the prefix cache) run\n"
          "once per layout (head-major, seq-major, token-major) and strategy (stable,\n"
          "bucket), each on its own backend under its own authority. Every appended\n"
          "token's K and V are written through the binding descriptors and a sample is\n"
          "read back before a sequence goes. Prints committed against live bytes as it\n"
          "runs, then a report per configuration and the ledger of the one with the lowest\n"
          "peak, and the backend calls (create, map, set-access, unmap, release) during\n"
          "the warm-up and per request after it.\n"
          "\n"
          "  --model NAME        geometry preset (default qwen2.5-0.5b):\n"
          "                      ",
          out);
    for (const char *const *n = ortmem_kv_preset_names(); *n; n++)
        fprintf(out, "%s%s", n == ortmem_kv_preset_names() ? "" : ", ", *n);
    fputs("\n"
          "  --granule SIZE      the backend's granule, a power of two (default 2MiB)\n"
          "  --requests N        requests in the workload (default 48)\n"
          "  --batch B           live requests at most (default 8; the system prompt's\n"
          "                      sequence lives besides them)\n"
          "  --max-context T     tokens per sequence (default 8192)\n"
          "  --prompt-min T      prompt tokens of a request (default 64 .. 2048, mostly\n"
          "  --prompt-max T      short); one that shares the system prompt has it and at\n"
          "                      least --prompt-min tokens of its own\n"
          "  --gen-min T         generated tokens (default 16 .. 512, mostly short)\n"
          "  --gen-max T\n"
          "  --system-prompt T   tokens of the shared system prompt (default 1100; 0: no\n"
          "                      sharing). Every 4th request forks the sequence holding it,\n"
          "                      every 4th (offset 2) creates a sequence with a prompt that\n"
          "                      starts with it through the prefix cache\n"
          "  --seed S            the workload's seed (default 1)\n"
          "  --budget SIZE       each authority's limit on owned bytes (default 64GiB: none);\n"
          "                      a refused admission waits for a request to finish, a\n"
          "                      refused decode token preempts (prefilled again later);\n"
          "                      a request that cannot fit alone is dropped\n"
          "  --verify N          random tokens read back per sequence (default 64)\n"
          "  --warmup N          the first N requests are the warm-up (default --batch,\n"
          "                      the first wave of live requests); the backend calls of\n"
          "                      every later request are counted (mean and max)\n"
          "  --backend cpu|cuda  the backend (default cpu); cuda: the CUDA driver's VMM\n"
          "                      on --device N (default 0); where it is unavailable, one\n"
          "                      line saying why and exit status 2\n"
          "  --io store|copy     how the K/V bytes are written and read: plain stores\n"
          "                      (the CPU default) or the backend's copies through a host\n"
          "                      staging buffer, decode tokens in batches (cuda's only\n"
          "                      way: device memory takes no stores)\n"
          "  --warm on|off       warm ranges (default on): a stable cache keeps a finished\n"
          "                      sequence's range mapped (cleared) and the next sequence\n"
          "                      of its kind takes it with no create, map, unmap or\n"
          "                      release; off: every finished range is decommitted\n"
          "  --prewarm on|off    with warm ranges (default off): at start, as an engine\n"
          "                      sized to its batch would, the stable cache pre-warms\n"
          "                      --batch ranges of each kind (plain, forks of the system\n"
          "                      prompt's sequence, the published system prompt), each\n"
          "                      committed for the longest request (prompt and generated\n"
          "                      tokens at most), so no later request makes a create,\n"
          "                      map, unmap or release; its calls count in the warm-up\n"
          "  --json              one JSON object on stdout instead of progress and tables\n"
          "  --plot PATH.svg     committed MiB against the decode step for every\n"
          "                      configuration, live and unique live MiB for reference;\n"
          "                      needs gnuplot (Debian package gnuplot-nox)\n"
          "  --inject-corruption for tests: one byte of the first request's first token is\n"
          "                      overwritten behind the cache's back; the run must report\n"
          "                      the corruption and exit 1\n"
          "  -h, --help          this text\n"
          "\n"
          "SIZE takes KiB, MiB, GiB (or K, M, G) suffixes. Exit status: 0 every byte read\n"
          "back was the byte written, 1 a corruption or a library failure, 2 invalid input\n"
          "or a backend that is unavailable.\n",
          out);
}

/* One line on stderr, "ortmem-kvdemo: ...". */
#define fail(status, ...) cli_fail("ortmem-kvdemo", status, __VA_ARGS__)

/* ---- parsing ---- */

typedef struct option_spec {
    const char *name;
    uint64_t *value;
    uint64_t min, max;
    bool size;
} option_spec;

static int apply_option(void *context, const char *name, const char *value)
{
    kd_options *o = context;
    if (strcmp(name, "--model") == 0) {
        o->model = value;
        return 0;
    }
    if (strcmp(name, "--backend") == 0) {
        if (strcmp(value, "cpu") == 0)
            o->backend = KD_BACKEND_CPU;
        else if (strcmp(value, "cuda") == 0)
            o->backend = KD_BACKEND_CUDA;
        else
            return fail(EXIT_USAGE, "--backend '%s': not cpu or cuda", value);
        return 0;
    }
    if (strcmp(name, "--io") == 0) {
        if (strcmp(value, "store") != 0 && strcmp(value, "copy") != 0)
            return fail(EXIT_USAGE, "--io '%s': not store or copy", value);
        o->io = value;
        return 0;
    }
    if (strcmp(name, "--warm") == 0) {
        if (strcmp(value, "on") != 0 && strcmp(value, "off") != 0)
            return fail(EXIT_USAGE, "--warm '%s': not on or off", value);
        o->warm = strcmp(value, "on") == 0;
        return 0;
    }
    if (strcmp(name, "--prewarm") == 0) {
        if (strcmp(value, "on") != 0 && strcmp(value, "off") != 0)
            return fail(EXIT_USAGE, "--prewarm '%s': not on or off", value);
        o->prewarm = strcmp(value, "on") == 0;
        return 0;
    }
    if (strcmp(name, "--plot") == 0) {
        if (!*value)
            return fail(EXIT_USAGE, "--plot needs a file name");
        o->plot = value;
        return 0;
    }
    const option_spec specs[] = {
        {"--granule", &o->granule, 4096, (uint64_t)1 << 40, true},
        {"--requests", &o->requests, 1, 1000000, false},
        {"--batch", &o->batch, 1, 4096, false},
        {"--max-context", &o->max_context, 2, (uint64_t)1 << 24, false},
        {"--prompt-min", &o->prompt_min, 1, (uint64_t)1 << 24, false},
        {"--prompt-max", &o->prompt_max, 1, (uint64_t)1 << 24, false},
        {"--gen-min", &o->gen_min, 1, (uint64_t)1 << 24, false},
        {"--gen-max", &o->gen_max, 1, (uint64_t)1 << 24, false},
        {"--system-prompt", &o->system_tokens, 0, (uint64_t)1 << 24, false},
        {"--seed", &o->seed, 0, UINT64_MAX, false},
        {"--budget", &o->budget, 1, UINT64_MAX, true},
        {"--verify", &o->verify_samples, 0, 1000000, false},
        {"--warmup", &o->warmup, 0, 1000000, false},
        {"--device", &o->device, 0, 1023, false},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        if (strcmp(name, specs[i].name) != 0)
            continue;
        uint64_t v;
        bool ok = specs[i].size ? parse_size(value, &v) : parse_u64(value, &v);
        if (!ok)
            return fail(EXIT_USAGE, "%s '%s': not %s", name, value,
                        specs[i].size ? "a size (digits with an optional KiB, MiB or GiB suffix)"
                                      : "a non-negative integer");
        if (v < specs[i].min || v > specs[i].max)
            return fail(EXIT_USAGE, "%s '%s': out of range (%" PRIu64 " .. %" PRIu64 ")", name,
                        value, specs[i].min, specs[i].max);
        *specs[i].value = v;
        o->warmup_set = o->warmup_set || specs[i].value == &o->warmup;
        o->device_set = o->device_set || specs[i].value == &o->device;
        return 0;
    }
    return fail(EXIT_USAGE, "unknown option '%s' (ortmem-kvdemo --help lists them)", name);
}

static int parse_args(int argc, char **argv, kd_options *o, bool *help)
{
    const cli_flag flags[] = {
        {"-h", help},         {"--help", help},
        {"--json", &o->json}, {"--inject-corruption", &o->inject_corruption},
        {NULL, NULL},
    };
    static const char *const valued[] = {
        "--model",   "--plot",        "--granule",       "--requests",
        "--batch",   "--max-context", "--prompt-min",    "--prompt-max",
        "--gen-min", "--gen-max",     "--system-prompt", "--seed",
        "--budget",  "--verify",      "--warmup",        "--backend",
        "--device",  "--io",          "--warm",          "--prewarm",
        NULL,
    };
    const cli_parser parser = {"ortmem-kvdemo", flags, valued, apply_option, o};
    return cli_parse(&parser, argc, argv);
}

static int check_options(const kd_options *o)
{
    if (o->device_set && o->backend != KD_BACKEND_CUDA)
        return fail(EXIT_USAGE, "--device %" PRIu64 ": a CUDA device, for --backend cuda only",
                    o->device);
    if (o->backend == KD_BACKEND_CUDA && !o->copy_io)
        return fail(EXIT_USAGE, "--io store with --backend cuda: device memory takes no host "
                                "stores (--io copy is its only way)");
    if (o->warmup > o->requests)
        return fail(EXIT_USAGE, "--warmup %" PRIu64 " is above --requests %" PRIu64, o->warmup,
                    o->requests);
    if (o->granule & (o->granule - 1))
        return fail(EXIT_USAGE, "--granule %" PRIu64 ": not a power of two", o->granule);
    if (o->prompt_min > o->prompt_max)
        return fail(EXIT_USAGE, "--prompt-min %" PRIu64 " is above --prompt-max %" PRIu64,
                    o->prompt_min, o->prompt_max);
    if (o->gen_min > o->gen_max)
        return fail(EXIT_USAGE, "--gen-min %" PRIu64 " is above --gen-max %" PRIu64, o->gen_min,
                    o->gen_max);
    uint64_t longest_start = o->system_tokens + o->prompt_min;
    if (o->prompt_max > longest_start)
        longest_start = o->prompt_max;
    if (o->system_tokens + o->prompt_min >= o->max_context || o->prompt_max >= o->max_context)
        return fail(EXIT_USAGE,
                    "--max-context %" PRIu64 " leaves no room to generate after a prompt of "
                    "%" PRIu64 " tokens (system prompt %" PRIu64 ", prompts %" PRIu64 " .. %" PRIu64
                    ")",
                    o->max_context, longest_start, o->system_tokens, o->prompt_min, o->prompt_max);
    return 0;
}

/* ---- the report ---- */

static const ortmem_kv_layout layouts[3] = {ORTMEM_KV_HEAD_MAJOR, ORTMEM_KV_SEQ_MAJOR,
                                            ORTMEM_KV_TOKEN_MAJOR};
static const ortmem_kv_strategy strategies[2] = {ORTMEM_KV_STABLE, ORTMEM_KV_BUCKET};

static const char *config_name(const kd_result *r, char *buf, size_t size)
{
    snprintf(buf, size, "%s %s", ortmem_kv_layout_name(r->layout),
             ortmem_kv_strategy_name(r->strategy));
    return buf;
}

/* The configuration that completed the most requests, then with the lowest
 * peak committed, then the better mean efficiency. Failed ones do not count. */
static size_t best_of(const kd_result *results, size_t count)
{
    size_t best = count;
    for (size_t i = 0; i < count; i++) {
        const kd_result *r = &results[i];
        if (r->error[0] || r->corruptions || !r->completed)
            continue;
        const kd_result *b = best < count ? &results[best] : NULL;
        if (!b || r->completed > b->completed ||
            (r->completed == b->completed &&
             (r->peak_committed < b->peak_committed ||
              (r->peak_committed == b->peak_committed && r->mean_efficiency > b->mean_efficiency))))
            best = i;
    }
    return best;
}

static void put_header(FILE *out, const kd_options *o, const ortmem_kv_geometry *g,
                       const kd_workload *w)
{
    ortmem_kv_eval e = {.struct_size = sizeof e};
    (void)ortmem_kv_evaluate(g, 1, o->max_context, 1, 0, 0, &e);
    char granule[32], budget[32], backend[64];
    fprintf(out,
            "ortmem-kvdemo: KV paging on %s, granule %s; K/V bytes through %s\n"
            "model %s: %u layers, %u KV heads, head_dim %u, %s: %" PRIu64 " bytes per token\n",
            kd_backend_label(o, backend, sizeof backend),
            size_text(o->granule, granule, sizeof granule),
            o->copy_io ? "the backend's copies (a host staging buffer)" : "stores", o->model,
            g->layers, g->kv_heads, g->head_dim, ortmem_kv_dtype_name(g->dtype), e.bytes_per_token);
    fprintf(out,
            "workload (seed %" PRIu64 "): %zu requests: %" PRIu64 " with prompts of their own, "
            "%" PRIu64 " fork the system\n"
            "  prompt's sequence, %" PRIu64 " come through the prefix cache; prompts %" PRIu64
            " tokens on average,\n"
            "  generations %" PRIu64 "; system prompt %" PRIu64 " tokens; max context %" PRIu64
            "; up to %" PRIu64 " live;\n"
            "  %" PRIu64 " decode steps; budget %s per configuration\n",
            o->seed, w->count, w->kinds[KD_PLAIN], w->kinds[KD_FORK], w->kinds[KD_PREFIX],
            w->count ? w->prompt_tokens / w->count : 0, w->count ? w->gen_tokens / w->count : 0,
            w->system_tokens, o->max_context, o->batch, w->steps,
            size_text(o->budget, budget, sizeof budget));
}

static void put_table(FILE *out, const kd_result *results, size_t count)
{
    fprintf(out, "\n%-18s %25s %6s %15s %8s %7s %7s %8s %8s\n", "", "------- peak MiB -------",
            "mean", "- copied MiB -", "gens", "prefix", "saved", "shared", "budget");
    fprintf(out, "%-18s %9s %7s %7s %6s %8s %6s %8s %7s %7s %8s %8s\n", "configuration",
            "committed", "live", "unique", "eff.", "growth", "COW", "bumped", "hits", "MiB",
            "granules", "refusals");
    for (size_t i = 0; i < count; i++) {
        const kd_result *r = &results[i];
        char name[64];
        fprintf(out,
                "%-18s %9.1f %7.1f %7.1f %5.1f%% %8.1f %6.0f %8" PRIu64 " %7" PRIu64
                " %7.1f %8" PRIu64 " %8" PRIu64 "%s\n",
                config_name(r, name, sizeof name), r->peak_committed / MiB, r->peak_live / MiB,
                r->peak_unique / MiB, 100.0 * r->mean_efficiency,
                r->stats.growth_copied_bytes / MiB, r->stats.cow_copied_bytes / MiB,
                r->stats.generations_bumped, r->stats.prefix_hits,
                r->stats.prefix_bytes_saved / MiB, r->shared_granules_at_peak, r->budget_refusals,
                r->error[0]      ? "  FAILED"
                : r->corruptions ? "  CORRUPT"
                                 : "");
    }
    fputs("live: every sequence's tokens, a shared one in each sequence that maps it; eff.: "
          "live/committed\nover the steps (sharing lifts it past 100%); unique: the system prompt "
          "counted once; shared\ngranules: mapped by more than one sequence, at peak committed.\n",
          out);
}

static double per_request(uint64_t calls, uint64_t requests)
{
    return requests ? (double)calls / (double)requests : 0.0;
}

static void put_calls(FILE *out, const kd_result *results, size_t count)
{
    const kd_calls *c0 = count ? &results[0].calls : NULL;
    fprintf(out,
            "\nbackend calls (create, map, set-access, unmap, release; ortmem_backend_stats), "
            "warm-up: the first\n%" PRIu64 " requests and what no request made; then %" PRIu64
            " requests, each charged with the calls its own\nlibrary calls made; steady: "
            "create + map + unmap + release per request after the warm-up:\n",
            c0 ? c0->warmup_requests : 0, c0 ? c0->after_requests : 0);
    fprintf(out, "%-18s %7s %7s %7s %14s %13s   %s\n", "", "", "", "", "per request", "steady",
            "---- per request after warm-up, mean (max) ----");
    fprintf(out, "%-18s %7s %7s %7s %7s %6s %13s   %-9s %-9s %-9s %-9s %s\n", "configuration",
            "total", "warm-up", "after", "mean", "max", "mean (max)", "create", "map", "set-acc.",
            "unmap", "release");
    for (size_t i = 0; i < count; i++) {
        const kd_calls *c = &results[i].calls;
        char name[64];
        fprintf(out, "%-18s %7" PRIu64 " %7" PRIu64 " %7" PRIu64 " %7.1f %6" PRIu64 "  ",
                config_name(&results[i], name, sizeof name), c->total_all, c->warmup_all,
                c->after_all, per_request(c->after_all, c->after_requests), c->max_all);
        char steady[32];
        snprintf(steady, sizeof steady, "%.1f (%" PRIu64 ")",
                 per_request(c->steady_after, c->after_requests), c->steady_max);
        fprintf(out, " %13s ", steady);
        for (size_t k = 0; k < KD_CALL_OPS; k++) {
            char cell[32];
            snprintf(cell, sizeof cell, "%.1f (%" PRIu64 ")",
                     per_request(c->after[k], c->after_requests), c->max[k]);
            fprintf(out, k + 1 < KD_CALL_OPS ? " %-9s" : " %s", cell);
        }
        fputc('\n', out);
    }
}

static void put_notes(FILE *out, const kd_result *results, size_t count)
{
    fputs("\nwhat auto would choose for this workload, per layout (ortmem_kv_cache_explain):\n",
          out);
    for (size_t i = 0; i < count; i++) {
        const kd_result *r = &results[i];
        if (r->strategy != ORTMEM_KV_STABLE)
            continue;
        fprintf(out, "  %s:\n", ortmem_kv_layout_name(r->layout));
        kd_put_wrapped(out, r->explain, 4, 96);
    }
    fputs("\nsharing the system prompt, per configuration:\n", out);
    for (size_t i = 0; i < count; i++) {
        const kd_result *r = &results[i];
        char name[64], line[1200];
        snprintf(line, sizeof line,
                 "%" PRIu64 " prefix hits (%" PRIu64 " tokens reused), %" PRIu64 " misses, %" PRIu64
                 " evicted under pressure; %s",
                 r->stats.prefix_hits, r->stats.prefix_tokens_reused, r->prefix_misses,
                 r->stats.prefix_evicted, r->prefix_note[0] ? r->prefix_note : "prefix cache on");
        fprintf(out, "  %s:\n", config_name(r, name, sizeof name));
        kd_put_wrapped(out, line, 4, 96);
    }
}

static void put_checks(FILE *out, const kd_result *results, size_t count)
{
    uint64_t written = 0, verified = 0, corrupt = 0, waits = 0, preempt = 0, dropped = 0;
    for (size_t i = 0; i < count; i++) {
        written += results[i].tokens_written;
        verified += results[i].tokens_verified;
        corrupt += results[i].corruptions;
        waits += results[i].admission_waits;
        preempt += results[i].preemptions;
        dropped += results[i].dropped;
    }
    fprintf(out,
            "\nchecked: %" PRIu64 " tokens written through the bindings, %" PRIu64
            " read back, %" PRIu64 " corruptions; %" PRIu64 " admissions waited, %" PRIu64
            " preemptions, %" PRIu64 " requests dropped\n",
            written, verified, corrupt, waits, preempt, dropped);
    for (size_t i = 0; i < count; i++) {
        char name[64];
        if (results[i].corruptions)
            fprintf(out, "CORRUPTION in %s: %s\n", config_name(&results[i], name, sizeof name),
                    results[i].first_corruption);
        if (results[i].error[0])
            fprintf(out, "FAILED %s: %s\n", config_name(&results[i], name, sizeof name),
                    results[i].error);
    }
}

/* ---- JSON ---- */

/* A JSON string literal; the demo's report writes every control byte as \u00XX. */
static void json_string(FILE *out, const char *s)
{
    json_put_string(out, s, JSON_CONTROLS_AS_CODES);
}

/* {"warmup_requests": W, "requests_after_warmup": A, "create": {...}, ...,
 * "all": {...}}: per operation total, warmup, after_warmup, per_request_mean
 * and per_request_max (all: the five summed, its max per request). */
static void put_json_calls(FILE *out, const kd_calls *c)
{
    fprintf(out, "{\"warmup_requests\": %" PRIu64 ", \"requests_after_warmup\": %" PRIu64,
            c->warmup_requests, c->after_requests);
    for (size_t k = 0; k <= KD_CALL_OPS; k++) {
        bool all = k == KD_CALL_OPS;
        uint64_t after = all ? c->after_all : c->after[k];
        fprintf(out,
                ", \"%s\": {\"total\": %" PRIu64 ", \"warmup\": %" PRIu64
                ", \"after_warmup\": %" PRIu64 ", \"per_request_mean\": %.6f"
                ", \"per_request_max\": %" PRIu64 "}",
                all ? "all" : kd_call_name(k), all ? c->total_all : c->total[k],
                all ? c->warmup_all : c->warmup[k], after, per_request(after, c->after_requests),
                all ? c->max_all : c->max[k]);
    }
    fprintf(out,
            ", \"steady_state\": {\"ops\": \"create+map+unmap+release\", \"after_warmup\": %" PRIu64
            ", \"per_request_mean\": %.6f, \"per_request_max\": %" PRIu64
            ", \"requests_with_none\": %" PRIu64 "}",
            c->steady_after, per_request(c->steady_after, c->after_requests), c->steady_max,
            c->steady_none);
    fputc('}', out);
}

static void put_json(FILE *out, const kd_options *o, const ortmem_kv_geometry *g,
                     const kd_workload *w, const kd_result *results, size_t count, size_t best)
{
    ortmem_kv_eval e = {.struct_size = sizeof e};
    (void)ortmem_kv_evaluate(g, 1, o->max_context, 1, 0, 0, &e);
    uint64_t corruptions = 0;
    for (size_t i = 0; i < count; i++)
        corruptions += results[i].corruptions;
    fputs("{\"model\": ", out);
    json_string(out, o->model);
    fprintf(out,
            ", \"layers\": %u, \"kv_heads\": %u, \"head_dim\": %u, \"dtype\": \"%s\", "
            "\"bytes_per_token\": %" PRIu64 ", \"granule\": %" PRIu64 ",\n",
            g->layers, g->kv_heads, g->head_dim, ortmem_kv_dtype_name(g->dtype), e.bytes_per_token,
            o->granule);
    fprintf(out,
            " \"backend\": \"%s\", \"device\": %" PRIu64
            ", \"io\": \"%s\", \"warm\": %s, \"prewarm\": %s,\n",
            o->backend == KD_BACKEND_CUDA ? "cuda" : "cpu", o->device,
            o->copy_io ? "copy" : "store", o->warm ? "true" : "false",
            o->warm && o->prewarm ? "true" : "false");
    fprintf(out,
            " \"workload\": {\"seed\": %" PRIu64 ", \"requests\": %zu, \"plain\": %" PRIu64
            ", \"fork\": %" PRIu64 ", \"prefix\": %" PRIu64 ", \"batch\": %" PRIu64
            ", \"max_context\": %" PRIu64 ", \"prompt_min\": %" PRIu64 ", \"prompt_max\": %" PRIu64
            ", \"gen_min\": %" PRIu64 ", \"gen_max\": %" PRIu64 ", \"system_prompt\": %" PRIu64
            ", \"prompt_tokens\": %" PRIu64 ", \"gen_tokens\": %" PRIu64 ", \"steps\": %" PRIu64
            ", \"expected_tokens\": %" PRIu64 ", \"budget\": %" PRIu64 ", \"warmup\": %" PRIu64
            "},\n",
            o->seed, w->count, w->kinds[KD_PLAIN], w->kinds[KD_FORK], w->kinds[KD_PREFIX], o->batch,
            o->max_context, o->prompt_min, o->prompt_max, o->gen_min, o->gen_max, w->system_tokens,
            w->prompt_tokens, w->gen_tokens, w->steps, w->expected_tokens, o->budget, o->warmup);
    fputs(" \"configurations\": [", out);
    for (size_t i = 0; i < count; i++) {
        const kd_result *r = &results[i];
        const ortmem_kv_stats *st = &r->stats;
        fprintf(
            out,
            "%s\n  {\"layout\": \"%s\", \"strategy\": \"%s\", \"steps\": %" PRIu64
            ", \"completed\": %" PRIu64 ", \"peak_committed_bytes\": %" PRIu64
            ", \"peak_live_bytes\": %" PRIu64 ", \"peak_unique_live_bytes\": %" PRIu64
            ", \"peak_step\": %" PRIu64 ", \"ledger_peak_owned_bytes\": %" PRIu64
            ", \"mean_efficiency\": %.6f"
            ", \"growth_copied_bytes\": %" PRIu64 ", \"cow_copied_bytes\": %" PRIu64
            ", \"generations_bumped\": %" PRIu64 ", \"binding_generation_changes\": %" PRIu64
            ", \"prefix_cache\": %s, \"prefix_hits\": %" PRIu64 ", \"prefix_misses\": %" PRIu64
            ", \"prefix_tokens_reused\": %" PRIu64 ", \"prefix_bytes_saved\": %" PRIu64
            ", \"prefix_evicted\": %" PRIu64 ", \"shared_granules_at_peak\": %" PRIu64
            ", \"budget_refusals\": %" PRIu64 ", \"admission_waits\": %" PRIu64
            ", \"preemptions\": %" PRIu64 ", \"dropped\": %" PRIu64 ", \"tokens_written\": %" PRIu64
            ", \"tokens_verified\": %" PRIu64 ", \"corruptions\": %" PRIu64
            ", \"seconds\": %.3f, \"auto_strategy\": \"%s\", \"explain\": ",
            i ? "," : "", ortmem_kv_layout_name(r->layout), ortmem_kv_strategy_name(r->strategy),
            r->steps, r->completed, r->peak_committed, r->peak_live, r->peak_unique, r->peak_step,
            r->ledger_peak_owned, r->mean_efficiency, st->growth_copied_bytes, st->cow_copied_bytes,
            st->generations_bumped, r->generation_changes, r->prefix_cache ? "true" : "false",
            st->prefix_hits, r->prefix_misses, st->prefix_tokens_reused, st->prefix_bytes_saved,
            st->prefix_evicted, r->shared_granules_at_peak, r->budget_refusals, r->admission_waits,
            r->preemptions, r->dropped, r->tokens_written, r->tokens_verified, r->corruptions,
            r->seconds, r->explain[0] ? ortmem_kv_strategy_name(r->auto_strategy) : "");
        json_string(out, r->explain);
        fputs(", \"prefix_note\": ", out);
        json_string(out, r->prefix_note);
        fputs(", \"first_corruption\": ", out);
        json_string(out, r->first_corruption);
        fputs(", \"error\": ", out);
        json_string(out, r->error);
        fprintf(out,
                ", \"copies\": %" PRIu64 ",\n   \"warm\": {\"ranges\": %" PRIu64
                ", \"bytes\": %" PRIu64 ", \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
                ", \"reclaimed_bytes\": %" PRIu64 ", \"cleared_bytes\": %" PRIu64
                ", \"prewarmed\": %" PRIu64 ", \"prewarm_note\": ",
                r->copies, st->warm_ranges, st->warm_bytes, st->warm_hits, st->warm_misses,
                st->warm_reclaimed_bytes, st->warm_cleared_bytes, st->warm_prewarmed);
        json_string(out, r->prewarm_note);
        fputs("},\n   \"backend_calls\": ", out);
        put_json_calls(out, &r->calls);
        fputc('}', out);
    }
    fputs("],\n \"best\": ", out);
    if (best < count) {
        char name[64];
        json_string(out, config_name(&results[best], name, sizeof name));
        fputs(", \"ledger\": ", out);
        const char *ledger = results[best].ledger_json;
        size_t len = ledger ? strlen(ledger) : 0;
        while (len && ledger[len - 1] == '\n')
            len--;
        if (len)
            fwrite(ledger, 1, len, out);
        else
            fputs("null", out);
    } else {
        fputs("null, \"ledger\": null", out);
    }
    fprintf(out, ",\n \"corruptions\": %" PRIu64 "}\n", corruptions);
}

int main(int argc, char **argv)
{
    kd_options o = {
        .model = "qwen2.5-0.5b",
        .granule = (uint64_t)2 << 20,
        .requests = 48,
        .batch = 8,
        .max_context = 8192,
        .prompt_min = 64,
        .prompt_max = 2048,
        .gen_min = 16,
        .gen_max = 512,
        .system_tokens = 1100,
        .seed = 1,
        .budget = (uint64_t)64 << 30,
        .verify_samples = 64,
        .warm = true,
        .prewarm = false,
    };
    bool help = false;
    int rc = parse_args(argc, argv, &o, &help);
    if (rc)
        return rc;
    if (help) {
        usage(stdout);
        return 0;
    }
    o.copy_io = o.io ? strcmp(o.io, "copy") == 0 : o.backend == KD_BACKEND_CUDA;
    if (!o.warmup_set)
        o.warmup = o.batch < o.requests ? o.batch : o.requests; /* the first wave */
    rc = check_options(&o);
    if (rc)
        return rc;
    ortmem_kv_geometry geometry = ORTMEM_KV_GEOMETRY_INIT;
    if (ortmem_kv_preset(o.model, &geometry) != ORTMEM_OK)
        return fail(EXIT_USAGE, "--model '%s': %s", o.model, ortmem_last_error());
    geometry.granule = o.granule;
    if (ortmem_kv_geometry_check(&geometry) != ORTMEM_OK)
        return fail(EXIT_USAGE, "%s", ortmem_last_error());
    /* Before anything runs: a backend that cannot be created, a plot that
     * cannot be drawn. */
    if (o.backend == KD_BACKEND_CUDA) {
        ortmem_backend *probe = NULL;
        ortmem_status st = kd_backend_create(&o, &probe);
        if (st != ORTMEM_OK)
            return fail(EXIT_USAGE,
                        "--backend cuda: the CUDA backend on device %" PRIu64
                        " is %s (%s: %s); nothing was run",
                        o.device, st == ORTMEM_E_UNAVAILABLE ? "unavailable" : "not usable",
                        ortmem_status_str(st), ortmem_last_error());
        (void)ortmem_backend_destroy(probe);
    }
    if (o.plot && !gnuplot_available())
        return fail(EXIT_USAGE, "--plot needs gnuplot, which is not installed (Debian: apt-get "
                                "install gnuplot-nox); nothing was run");
    int svg_fd = -1;
    if (o.plot) {
        svg_fd = open(o.plot, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (svg_fd < 0)
            return fail(EXIT_USAGE, "cannot write the plot '%s': %s", o.plot, strerror(errno));
    }
    kd_workload w;
    char why[256];
    if (!kd_workload_make(&o, &w, why, sizeof why)) {
        if (svg_fd >= 0)
            (void)gnuplot_svg_close(svg_fd, o.plot, false, NULL);
        return fail(EXIT_FOUND_PROBLEMS, "%s", why);
    }
    FILE *progress = o.json ? NULL : stdout;
    if (progress) {
        put_header(progress, &o, &geometry, &w);
        fflush(progress);
    }
    kd_result results[KD_CONFIGS];
    size_t count = 0;
    for (size_t l = 0; l < 3; l++) {
        for (size_t s = 0; s < 2; s++) {
            kd_run(&o, &geometry, &w, layouts[l], strategies[s], progress, &results[count++]);
            if (progress)
                fflush(progress);
        }
    }
    size_t best = best_of(results, count);
    int status = 0;
    for (size_t i = 0; i < count; i++) {
        if (results[i].corruptions || results[i].error[0])
            status = EXIT_FOUND_PROBLEMS;
    }
    if (o.plot) {
        char title[256], granule[32];
        snprintf(title, sizeof title,
                 "KV paging: %s, %zu requests, up to %" PRIu64 " live, granule %s", o.model,
                 w.count, o.batch, size_text(o.granule, granule, sizeof granule));
        bool drawn = kd_plot_draw(results, count, svg_fd, title, stderr);
        int close_errno;
        if (!gnuplot_svg_close(svg_fd, o.plot, drawn, &close_errno))
            status = EXIT_FOUND_PROBLEMS;
        if (close_errno)
            fprintf(stderr, "ortmem-kvdemo: writing the plot '%s' failed: %s\n", o.plot,
                    strerror(close_errno));
    }
    if (o.json) {
        put_json(stdout, &o, &geometry, &w, results, count, best);
    } else {
        put_table(stdout, results, count);
        put_calls(stdout, results, count);
        put_notes(stdout, results, count);
        if (best < count) {
            char name[64];
            fprintf(stdout,
                    "\nledger of %s (the lowest peak committed), after the workload "
                    "(ortmem_authority_format;\na published prefix stays owned by the holder "
                    "that committed it, kv-prefix maps it):\n",
                    config_name(&results[best], name, sizeof name));
            if (results[best].ledger_table)
                fputs(results[best].ledger_table, stdout);
        }
        put_checks(stdout, results, count);
        if (o.plot && status != EXIT_FOUND_PROBLEMS)
            fprintf(stdout, "plot: %s\n", o.plot);
    }
    for (size_t i = 0; i < count; i++)
        kd_result_free(&results[i]);
    kd_workload_free(&w);
    if (fflush(stdout) != 0 || ferror(stdout))
        status = EXIT_FOUND_PROBLEMS;
    return status;
}
