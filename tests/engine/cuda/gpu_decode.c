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
 *   gpu_decode --bench    tok/s at batch 1 (graphs on and off), 8 and 32,
 *                         the step's kernels, KV driver calls per token, as
 *                         one JSON object per line.
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
    uint64_t ledger_start;
} setup;

static uint64_t ledger_owned(eng_model *m)
{
    ortmem_authority_report r = {.struct_size = sizeof r};
    if (ortmem_authority_report_get(eng_model_authority(m), &r, NULL, 0) != ORTMEM_OK)
        return UINT64_MAX;
    return r.owned_bytes;
}

static eng_gpu_context *context(setup *s, uint32_t n_ctx, uint32_t batch, bool graphs)
{
    eng_error err = {0};
    eng_gpu_context *c = NULL;
    eng_gpu_options o = {n_ctx, batch, !graphs};
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
        printf("  FAIL the ledger owns %" PRIu64 " bytes after the context, %" PRIu64
               " before it\n",
               owned, s->ledger_start);
        failures++;
        ok = false;
    }
    if (ok)
        printf("  PASS one capture replayed across three prompts and the KV growth; ledger back "
               "to %" PRIu64 " bytes\n",
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

static void bench(setup *s)
{
    const struct {
        uint32_t batch;
        bool graphs;
    } runs[] = {{1, true}, {1, false}, {8, true}, {32, true}};
    const int steps = 512;
    int32_t prompt[] = {504, 3575, 282, 4649, 314};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        eng_gpu_context *c = context(s, 4096, runs[r].batch, runs[r].graphs);
        if (!c)
            return;
        eng_error err = {0};
        int32_t next[ENG_GPU_MAX_BATCH], out[ENG_GPU_MAX_BATCH];
        bool ok = true;
        for (uint32_t b = 0; ok && b < runs[r].batch; b++)
            ok = eng_gpu_prefill(c, b, prompt, 5, &next[b], &err) == ORTMEM_OK;
        for (int i = 0; ok && i < 16; i++) { /* warm-up: the capture, the first commits */
            ok = eng_gpu_step(c, next, out, &err) == ORTMEM_OK;
            memcpy(next, out, sizeof next);
        }
        eng_gpu_stats before;
        eng_gpu_stats_get(c, &before);
        double t0 = now_s();
        for (int i = 0; ok && i < steps; i++) {
            ok = eng_gpu_step(c, next, out, &err) == ORTMEM_OK;
            memcpy(next, out, sizeof next);
        }
        double dt = now_s() - t0;
        eng_gpu_stats st;
        eng_gpu_stats_get(c, &st);
        eng_gpu_context_destroy(c, NULL);
        if (!ok) {
            printf("{\"error\": \"batch %u: %s\"}\n", runs[r].batch, err.message);
            failures++;
            return;
        }
        const double tokens = (double)steps * runs[r].batch;
        printf("{\"batch\": %u, \"graphs\": %s, \"steps\": %d, \"seconds\": %.6f, "
               "\"tok_s\": %.1f, \"step_us\": %.2f, \"kernels_per_step\": %" PRIu64
               ", \"captures\": %" PRIu64 ", \"recaptures\": %" PRIu64
               ", \"kv_driver_calls_per_token\": %.4f, \"weights_file_bytes\": %" PRIu64 "}\n",
               runs[r].batch, runs[r].graphs ? "true" : "false", steps, dt, tokens / dt,
               dt / steps * 1e6, st.kernels_per_step, st.captures, st.recaptures,
               (double)(st.kv_driver_calls - before.kv_driver_calls) / tokens,
               eng_model_weights_file_bytes(s->model));
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
    if (bench_mode) {
        bench(&s);
    } else if (short_mode) {
        check_batch(&s);
    } else {
        const char *dir = getenv("ORTMEM_ENGINE_TEST_DATA");
        char ref[4096];
        snprintf(ref, sizeof ref, "%s/" REFERENCE, dir ? dir : "tests/data/engine");
        json_error_t jerr;
        json_t *root = json_load_file(ref, 0, &jerr);
        if (!root) {
            printf("FAIL %s: %s\n", ref, jerr.text);
            failures++;
        } else {
            check_reference(&s, root);
            json_decref(root);
        }
        check_growth(&s);
        check_batch(&s);
    }
    if (eng_model_destroy(s.model, &err) != ORTMEM_OK) {
        printf("FAIL destroying the model: %s\n", err.message);
        failures++;
    }
    ortmem_backend_destroy(s.backend);
    printf("%s: %d failure(s)\n", bench_mode ? "gpu_decode --bench" : "gpu_decode", failures);
    return failures ? 1 : 0;
}
