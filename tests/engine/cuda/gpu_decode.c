/* The reference engine on a CUDA device, checked and measured (a plain
 * program, run by scripts/gpu-suite.sh and scripts/gpu-bench.sh on the GPU
 * machine; exit 77, skipped, where no GPU or no model is usable).
 *
 *   gpu_decode            the checks: every reference prompt's greedy tokens
 *                         against llama.cpp's (tests/data/engine/reference),
 *                         the first divergence named with both logits; the
 *                         decode step captured once and replayed while the KV
 *                         cache grows (0 re-captures); a reset sequence
 *                         decodes the same tokens again through the same
 *                         graph; the authority's ledger back to its start.
 *                         Then the model again under a device budget of
 *                         half its weights' bytes, most layers streamed
 *                         from pinned memory: llama.cpp's tokens again, one
 *                         capture, every streamed layer copied each token.
 *   gpu_decode --bench    tok/s at batch 1 (graphs on and off), 8 and 32
 *                         over 128 steps from a 5-token prompt (the HF
 *                         peer's geometry) and the 768 after them, the
 *                         step's kernels, as one JSON object per line; then
 *                         batch 1 with every weight resident and under
 *                         budgets of 75% and 50% of the weights, beside the
 *                         pinned copy bandwidth measured in the same run.
 *   gpu_decode --short    the batch check alone (48 steps, graphs on and off,
 *                         4 sequences): for compute-sanitizer. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/model_path.h"
#include "cuda/gpu.h"
#include "model/model.h"

#define SKIPPED 77
#define REFERENCE "reference/smollm2-q4_1.json"

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("  FAIL %s:%d: ", __FILE__, __LINE__);                                          \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            failures++;                                                                            \
            return false;                                                                          \
        }                                                                                          \
    } while (0)

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int32_t *int_array(json_t *a, size_t *n)
{
    *n = json_array_size(a);
    int32_t *v = malloc((*n ? *n : 1) * sizeof *v);
    for (size_t i = 0; v && i < *n; i++)
        v[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return v;
}

typedef struct setup {
    ortmem_backend *backend;
    eng_model *model;
    eng_gpu_streaming *streaming; /* when the model streams layers */
    uint64_t ledger_start;
    uint64_t file_bytes; /* the weights' bytes in the file */
    uint64_t budget;     /* the streamed model's device budget (load_streamed) */
} setup;

/* Bytes the authority owns beyond the weights' (resident slots, the ring a
 * streamed model maps at its first acquire and keeps, pending evictions):
 * a context's KV and activations. */
static uint64_t ledger_owned(eng_model *m)
{
    ortmem_authority_report r = {.struct_size = sizeof r};
    ortmem_residency_stats rs = {.struct_size = sizeof rs};
    if (ortmem_authority_report_get(eng_model_authority(m), &r, NULL, 0) != ORTMEM_OK ||
        ortmem_residency_stats_get(eng_model_residency(m), &rs) != ORTMEM_OK)
        return UINT64_MAX;
    return r.owned_bytes - rs.resident_bytes - rs.ring_bytes - rs.retiring_bytes;
}

static eng_gpu_context *context(setup *s, uint32_t n_ctx, uint32_t batch, bool graphs)
{
    eng_error err = {0};
    eng_gpu_context *c = NULL;
    eng_gpu_options o = {n_ctx, batch, !graphs, s->streaming};
    if (eng_gpu_context_create(s->model, &o, &c, &err) != ORTMEM_OK) {
        printf("  FAIL the GPU context (batch %u): %s\n", batch, err.message);
        failures++;
        return NULL;
    }
    return c;
}

static int32_t argmax(const float *x, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return (int32_t)best;
}

/* One reference prompt: prefill, then greedy steps; each token must be
 * llama.cpp's. A divergence prints the step, both ids and our two logits and
 * llama.cpp's. */
static bool reference_prompt(setup *s, eng_gpu_context *c, json_t *p, uint64_t *steps_run)
{
    const char *name = json_string_value(json_object_get(p, "name"));
    size_t n_prompt = 0, n_steps = 0;
    int32_t *prompt = int_array(json_object_get(p, "prompt_ids"), &n_prompt);
    int32_t *expected = int_array(json_object_get(p, "generated_ids"), &n_steps);
    json_t *top2 = json_object_get(p, "top2");
    const uint32_t vocab = eng_model_hparams(s->model)->n_vocab;
    float *logits = malloc(vocab * sizeof *logits);
    eng_error err = {0};
    bool ok = prompt && expected && logits;
    int32_t next = -1;
    if (ok && (eng_gpu_reset(c, 0, &err) != ORTMEM_OK ||
               eng_gpu_prefill(c, 0, prompt, n_prompt, &next, &err) != ORTMEM_OK)) {
        printf("  FAIL %s: prefill: %s\n", name, err.message);
        ok = false;
    }
    for (size_t step = 0; ok && step < n_steps; step++) {
        if (next != expected[step]) {
            json_t *row = json_array_get(top2, step);
            int32_t id1 = (int32_t)json_integer_value(json_array_get(row, 0));
            int32_t id2 = (int32_t)json_integer_value(json_array_get(row, 2));
            eng_gpu_logits(c, 0, logits, &err);
            printf("  FAIL %s diverges at step %zu: ours %d, llama.cpp %d; llama.cpp's logits "
                   "%d: %.6f, %d: %.6f; ours %d: %.6f, %d: %.6f (our argmax %d)\n",
                   name, step, next, expected[step], id1, json_real_value(json_array_get(row, 1)),
                   id2, json_real_value(json_array_get(row, 3)), id1, (double)logits[id1], id2,
                   (double)logits[id2], argmax(logits, vocab));
            failures++;
            ok = false;
            break;
        }
        if (step + 1 < n_steps && eng_gpu_step(c, &next, &next, &err) != ORTMEM_OK) {
            printf("  FAIL %s: step %zu: %s\n", name, step, err.message);
            failures++;
            ok = false;
        }
        (*steps_run)++;
    }
    if (ok)
        printf("  PASS %s: %zu greedy tokens equal llama.cpp's\n", name, n_steps);
    free(prompt);
    free(expected);
    free(logits);
    return ok;
}

static bool check_reference(setup *s, json_t *root)
{
    eng_gpu_context *c = context(s, 512, 1, true);
    if (!c)
        return false;
    json_t *prompts = json_object_get(root, "prompts");
    size_t i;
    json_t *p;
    bool ok = true;
    uint64_t steps = 0;
    json_array_foreach(prompts, i, p) ok = reference_prompt(s, c, p, &steps) && ok;
    eng_gpu_stats st;
    eng_gpu_stats_get(c, &st);
    eng_error err = {0};
    ortmem_kv_stats ks = {.struct_size = sizeof ks};
    eng_gpu_kv_stats(c, &ks, &err);
    printf("  graph: %" PRIu64 " capture(s), %" PRIu64 " re-capture(s), %" PRIu64
           " replays, %" PRIu64 " kernels per step; KV checks %" PRIu64 ", driver calls %" PRIu64
           ", committed %" PRIu64 " bytes for %" PRIu64 " live\n",
           st.captures, st.recaptures, st.replays, st.kernels_per_step, st.kv_checks,
           st.kv_driver_calls, ks.committed_bytes, ks.live_bytes);
    if (ok && st.captures != 1) {
        printf("  FAIL the step was captured %" PRIu64 " times over three prompts (1 expected: "
               "the sequence's range is stable across resets and growth)\n",
               st.captures);
        failures++;
        ok = false;
    }
    if (ok && st.kv_checks == 0) {
        printf("  FAIL the KV cache never committed during the steps (the growth was not "
               "exercised)\n");
        failures++;
        ok = false;
    }
    if (eng_gpu_context_destroy(c, &err) != ORTMEM_OK) {
        printf("  FAIL destroying the context: %s\n", err.message);
        failures++;
        ok = false;
    }
    uint64_t owned = ledger_owned(s->model);
    if (owned != s->ledger_start) {
        printf("  FAIL the ledger owns %" PRIu64 " bytes beside the weights after the context, "
               "%" PRIu64 " before it\n",
               owned, s->ledger_start);
        failures++;
        ok = false;
    }
    if (ok)
        printf("  PASS one capture replayed across three prompts and the KV growth; ledger back "
               "to %" PRIu64 " bytes beside the weights\n",
               owned);
    return ok;
}

/* Long growth: a sequence decoded far past the first granules of its
 * range, every token through the one graph. */
static bool check_growth(setup *s)
{
    eng_gpu_context *c = context(s, 4096, 1, true);
    if (!c)
        return false;
    eng_error err = {0};
    int32_t prompt[] = {504, 3575, 282, 4649, 314}, next = 0;
    bool ok = eng_gpu_prefill(c, 0, prompt, 5, &next, &err) == ORTMEM_OK;
    for (int i = 0; ok && i < 2000; i++)
        ok = eng_gpu_step(c, &next, &next, &err) == ORTMEM_OK;
    eng_gpu_stats st;
    eng_gpu_stats_get(c, &st);
    ortmem_kv_stats ks = {.struct_size = sizeof ks};
    eng_gpu_kv_stats(c, &ks, &err);
    eng_gpu_context_destroy(c, NULL);
    CHECK(ok, "2000 steps: %s", err.message);
    CHECK(st.captures == 1 && st.recaptures == 0,
          "%" PRIu64 " captures, %" PRIu64 " re-captures over 2000 steps", st.captures,
          st.recaptures);
    CHECK(st.kv_checks > 1, "the KV committed only %" PRIu64 " times", st.kv_checks);
    printf("  PASS 2005 tokens through one graph: %" PRIu64 " KV commits checked, 0 re-captures, "
           "%" PRIu64 " driver calls (%.3f per token), committed %" PRIu64 " for %" PRIu64
           " live bytes\n",
           st.kv_checks, st.kv_driver_calls, (double)st.kv_driver_calls / 2005.0,
           ks.committed_bytes, ks.live_bytes);
    return true;
}

/* Graphs on and off give the same tokens; a batch of sequences each
 * decodes what the single sequence decodes. */
static bool check_batch(setup *s)
{
    enum { STEPS = 48, B = 4 };
    int32_t prompt[] = {504, 3575, 282, 4649, 314};
    int32_t single[STEPS], plain[STEPS];
    eng_error err = {0};
    for (int graphs = 1; graphs >= 0; graphs--) {
        eng_gpu_context *c = context(s, 512, 1, graphs);
        if (!c)
            return false;
        int32_t next = 0;
        bool ok = eng_gpu_prefill(c, 0, prompt, 5, &next, &err) == ORTMEM_OK;
        for (int i = 0; ok && i < STEPS; i++) {
            (graphs ? single : plain)[i] = next;
            ok = eng_gpu_step(c, &next, &next, &err) == ORTMEM_OK;
        }
        eng_gpu_context_destroy(c, NULL);
        CHECK(ok, "graphs %d: %s", graphs, err.message);
    }
    CHECK(!memcmp(single, plain, sizeof single), "graph replays and plain launches differ");
    eng_gpu_context *c = context(s, 512, B, true);
    if (!c)
        return false;
    int32_t next[B], out[B];
    bool ok = true;
    for (uint32_t b = 0; ok && b < B; b++)
        ok = eng_gpu_prefill(c, b, prompt, 5, &next[b], &err) == ORTMEM_OK;
    for (int i = 0; ok && i < STEPS; i++) {
        for (int b = 0; b < B; b++)
            if (next[b] != single[i]) {
                printf("  FAIL sequence %d of %d: step %d gives %d, alone %d\n", b, B, i, next[b],
                       single[i]);
                failures++;
                eng_gpu_context_destroy(c, NULL);
                return false;
            }
        ok = eng_gpu_step(c, next, out, &err) == ORTMEM_OK;
        memcpy(next, out, sizeof next);
    }
    eng_gpu_context_destroy(c, NULL);
    CHECK(ok, "batch of %d: %s", B, err.message);
    printf("  PASS graphs on and off agree; %d sequences in one step each decode the single "
           "sequence's %d tokens\n",
           B, STEPS);
    return true;
}

/* The prompt every benchmark decodes (5 tokens). */
static const int32_t bench_prompt[] = {504, 3575, 282, 4649, 314};
enum { BENCH_PROMPT = 5, BENCH_STEPS = 128, BENCH_LONG = 768 };

/* Warms c up (the capture, the first commits, half a second of steps: a
 * device idle before the run decodes its first second slower, 402 against
 * 530 tok/s), resets and prefills every sequence again, then times `steps`
 * steps from the prompt (positions 5 to 5 + steps: the HF peer's geometry
 * at 128) and, when long > 0, `long` steps more. */
static bool timed_steps(eng_gpu_context *c, uint32_t batch, int steps, int long_steps,
                        double *seconds, double *long_seconds, eng_error *err)
{
    int32_t next[ENG_GPU_MAX_BATCH], out[ENG_GPU_MAX_BATCH];
    bool ok = true;
    for (int round = 0; round < 2 && ok; round++) {
        for (uint32_t b = 0; ok && b < batch; b++)
            ok = eng_gpu_reset(c, b, err) == ORTMEM_OK &&
                 eng_gpu_prefill(c, b, bench_prompt, BENCH_PROMPT, &next[b], err) == ORTMEM_OK;
        for (double w0 = now_s(); ok && round == 0 && now_s() - w0 < 0.5;) {
            ok = eng_gpu_step(c, next, out, err) == ORTMEM_OK;
            memcpy(next, out, sizeof next);
        }
    }
    double t0 = now_s();
    for (int i = 0; ok && i < steps; i++) {
        ok = eng_gpu_step(c, next, out, err) == ORTMEM_OK;
        memcpy(next, out, sizeof next);
    }
    *seconds = now_s() - t0;
    t0 = now_s();
    for (int i = 0; ok && i < long_steps; i++) {
        ok = eng_gpu_step(c, next, out, err) == ORTMEM_OK;
        memcpy(next, out, sizeof next);
    }
    if (long_seconds)
        *long_seconds = now_s() - t0;
    return ok;
}

static void bench(setup *s)
{
    const struct {
        uint32_t batch;
        bool graphs;
    } runs[] = {{1, true}, {1, false}, {8, true}, {32, true}};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        eng_gpu_context *c = context(s, 4096, runs[r].batch, runs[r].graphs);
        if (!c)
            return;
        eng_error err = {0};
        double dt = 0, dt_long = 0;
        bool ok = timed_steps(c, runs[r].batch, BENCH_STEPS, BENCH_LONG, &dt, &dt_long, &err);
        eng_gpu_stats st;
        eng_gpu_stats_get(c, &st);
        eng_gpu_context_destroy(c, NULL);
        if (!ok) {
            printf("{\"error\": \"batch %u: %s\"}\n", runs[r].batch, err.message);
            failures++;
            return;
        }
        const double tokens = (double)BENCH_STEPS * runs[r].batch;
        const double long_tokens = (double)BENCH_LONG * runs[r].batch;
        printf("{\"batch\": %u, \"graphs\": %s, \"steps\": %d, \"positions\": [%d, %d], "
               "\"tok_s\": %.1f, \"step_us\": %.2f, \"long_positions\": [%d, %d], "
               "\"long_tok_s\": %.1f, \"kernels_per_step\": %" PRIu64 ", \"captures\": %" PRIu64
               ", \"recaptures\": %" PRIu64 ", \"weights_file_bytes\": %" PRIu64 "}\n",
               runs[r].batch, runs[r].graphs ? "true" : "false", BENCH_STEPS, BENCH_PROMPT,
               BENCH_PROMPT + BENCH_STEPS, tokens / dt, dt / BENCH_STEPS * 1e6,
               BENCH_PROMPT + BENCH_STEPS, BENCH_PROMPT + BENCH_STEPS + BENCH_LONG,
               long_tokens / dt_long, st.kernels_per_step, st.captures, st.recaptures,
               eng_model_weights_file_bytes(s->model));
        fflush(stdout);
    }
}

/* The model loaded again under a device budget of fraction of its weights'
 * bytes, its streamed layers in pinned memory. */
static bool load_streamed(setup *s, const char *path, double fraction)
{
    eng_error err = {0};
    const uint64_t budget = (uint64_t)((double)s->file_bytes * fraction);
    s->budget = budget;
    if (eng_gpu_streaming_create(&s->streaming, &err) != ORTMEM_OK) {
        printf("  FAIL the streaming: %s\n", err.message);
        failures++;
        return false;
    }
    eng_model_options mo = {0};
    mo.backend = s->backend;
    mo.weights_budget = budget;
    eng_gpu_streaming_model_options(s->streaming, &mo);
    eng_model *m = NULL;
    if (eng_model_load(path, &mo, &m, &err) != ORTMEM_OK) {
        printf("  FAIL loading under a budget of %" PRIu64 " bytes: %s\n", budget, err.message);
        failures++;
        eng_gpu_streaming_destroy(s->streaming, NULL);
        s->streaming = NULL;
        return false;
    }
    s->model = m;
    s->ledger_start = ledger_owned(m);
    return true;
}

static bool unload_streamed(setup *s)
{
    eng_error err = {0};
    bool ok = eng_model_destroy(s->model, &err) == ORTMEM_OK &&
              eng_gpu_streaming_destroy(s->streaming, &err) == ORTMEM_OK;
    s->model = NULL;
    s->streaming = NULL;
    if (!ok) {
        printf("  FAIL tearing the streamed model down: %s\n", err.message);
        failures++;
    }
    return ok;
}

static void residency(eng_model *m, ortmem_residency_stats *rs)
{
    memset(rs, 0, sizeof *rs);
    rs->struct_size = sizeof *rs;
    ortmem_residency_stats_get(eng_model_residency(m), rs);
}

/* Half the weights' bytes on the device: llama.cpp's tokens through the
 * segment graphs, the streamed layers copied every token. */
static bool check_streamed(setup *s, const char *path, json_t *root)
{
    if (!load_streamed(s, path, 0.5))
        return false;
    const uint64_t budget = s->budget;
    ortmem_residency_stats before, after;
    residency(s->model, &before);
    int failures_before = failures;
    check_reference(s, root);
    residency(s->model, &after);
    const uint64_t resident = eng_model_weights_resident_bytes(s->model);
    bool ok = failures == failures_before;
    unload_streamed(s);
    CHECK(ok, "the streamed model's tokens or graph (above)");
    CHECK(after.streamed > before.streamed, "nothing was streamed under a budget of %" PRIu64,
          budget);
    CHECK(resident + after.ring_bytes <= budget,
          "%" PRIu64 " bytes resident and %" PRIu64 " of ring exceed the budget of %" PRIu64,
          resident, after.ring_bytes, budget);
    printf("  PASS under a budget of %" PRIu64 " bytes (half the weights): llama.cpp's tokens, "
           "%" PRIu64 " resident + %" PRIu64 " ring bytes, %" PRIu64 " layer acquires through "
           "the ring, %" PRIu64 " bytes copied, %" PRIu64 " stalls\n",
           budget, resident, after.ring_bytes, after.streamed - before.streamed,
           after.bytes_moved - before.bytes_moved, after.stalls - before.stalls);
    return true;
}

/* Batch 1 with every weight resident (fraction 0) and under budgets of
 * 75% and 50% of the weights, the same steps timed as bench's, beside the
 * pinned copy bandwidth measured in the same run. */
static void bench_streamed(setup *s, const char *path)
{
    const double fractions[] = {0.0, 0.75, 0.5};
    double gbps = 0.0;
    eng_error err = {0};
    for (size_t f = 0; f < sizeof fractions / sizeof fractions[0]; f++) {
        if (fractions[f] > 0) {
            if (!load_streamed(s, path, fractions[f]))
                return;
            if (gbps == 0.0 &&
                eng_gpu_streaming_bandwidth(s->streaming, 64u << 20, &gbps, &err) != ORTMEM_OK) {
                printf("{\"error\": \"pinned bandwidth: %s\"}\n", err.message);
                failures++;
            }
        } else {
            eng_model_options mo = {0};
            mo.backend = s->backend;
            if (eng_model_load(path, &mo, &s->model, &err) != ORTMEM_OK) {
                printf("{\"error\": \"loading the model: %s\"}\n", err.message);
                failures++;
                return;
            }
        }
        eng_gpu_context *c = context(s, 4096, 1, true);
        ortmem_residency_stats before, after;
        double dt = 0;
        bool ok = c != NULL && timed_steps(c, 1, BENCH_STEPS, 0, &dt, NULL, &err);
        if (ok) { /* one step more: the bytes one forward pass copies */
            int32_t token = 504, next = 0;
            residency(s->model, &before);
            ok = eng_gpu_step(c, &token, &next, &err) == ORTMEM_OK;
            residency(s->model, &after);
        }
        const uint64_t budget = fractions[f] > 0 ? s->budget : 0;
        const uint64_t resident = eng_model_weights_resident_bytes(s->model);
        eng_gpu_context_destroy(c, NULL);
        if (fractions[f] > 0) {
            unload_streamed(s);
        } else {
            eng_model_destroy(s->model, NULL);
            s->model = NULL;
        }
        if (!ok) {
            printf("{\"error\": \"budget %.2f: %s\"}\n", fractions[f], err.message);
            failures++;
            return;
        }
        const uint64_t per_pass = after.bytes_moved - before.bytes_moved;
        printf("{\"batch\": 1, \"graphs\": true, \"budget_fraction\": %.2f, "
               "\"budget_bytes\": %" PRIu64 ", \"resident_bytes\": %" PRIu64
               ", \"ring_bytes\": %" PRIu64 ", \"steps\": %d, \"tok_s\": %.1f, "
               "\"step_us\": %.2f, \"bytes_streamed_per_pass\": %" PRIu64
               ", \"pinned_gb_s\": %.2f, \"pcie_bound_tok_s\": %.1f}\n",
               fractions[f], budget, resident, after.ring_bytes, BENCH_STEPS, BENCH_STEPS / dt,
               dt / BENCH_STEPS * 1e6, per_pass, gbps,
               per_pass && gbps > 0 ? gbps * 1e9 / (double)per_pass : 0.0);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    bool bench_mode = argc > 1 && !strcmp(argv[1], "--bench");
    bool short_mode = argc > 1 && !strcmp(argv[1], "--short");
    char path[4096];
    eng_error err = {0};
    if (eng_default_model_path(path, sizeof path, &err) != ORTMEM_OK) {
        printf("skipped: no model (%s)\n", err.message);
        return SKIPPED;
    }
    setup s = {0};
    if (eng_gpu_backend_create(0, &s.backend, &err) != ORTMEM_OK) {
        printf("skipped: %s\n", err.message);
        return SKIPPED;
    }
    eng_model_options mo = {0};
    mo.backend = s.backend;
    double t0 = now_s();
    if (eng_model_load(path, &mo, &s.model, &err) != ORTMEM_OK) {
        printf("FAIL loading %s on the device: %s\n", path, err.message);
        ortmem_backend_destroy(s.backend);
        return 1;
    }
    printf("model on the device in %.2f s: %" PRIu64 " bytes of weights, %" PRIu64
           " resident (granule-rounded slots)\n",
           now_s() - t0, eng_model_weights_file_bytes(s.model),
           eng_model_weights_resident_bytes(s.model));
    s.ledger_start = ledger_owned(s.model);
    s.file_bytes = eng_model_weights_file_bytes(s.model);
    json_t *root = NULL;
    if (bench_mode) {
        bench(&s);
    } else if (short_mode) {
        check_batch(&s);
    } else {
        const char *dir = getenv("ORTMEM_ENGINE_TEST_DATA");
        char ref[4096];
        snprintf(ref, sizeof ref, "%s/" REFERENCE, dir ? dir : "tests/data/engine");
        json_error_t jerr;
        root = json_load_file(ref, 0, &jerr);
        if (!root) {
            printf("FAIL %s: %s\n", ref, jerr.text);
            failures++;
        } else {
            check_reference(&s, root);
        }
        check_growth(&s);
        check_batch(&s);
    }
    if (eng_model_destroy(s.model, &err) != ORTMEM_OK) {
        printf("FAIL destroying the model: %s\n", err.message);
        failures++;
    }
    s.model = NULL;
    if (root) {
        check_streamed(&s, path, root);
        json_decref(root);
    } else if (bench_mode) {
        bench_streamed(&s, path);
    }
    ortmem_backend_destroy(s.backend);
    printf("%s: %d failure(s)\n", bench_mode ? "gpu_decode --bench" : "gpu_decode", failures);
    return failures ? 1 : 0;
}
