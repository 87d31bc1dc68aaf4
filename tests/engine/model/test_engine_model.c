/* The model part of the engine (engine/model): greedy decoding of the
 * default model agrees with llama.cpp's recorded tokens for every step of
 * the three reference prompts; the KV cache commits no more over the live
 * bytes than ortmem's stated bound; the authority's ledger comes back to
 * zero at teardown; and bad model files are refused with messages that name
 * what is wrong. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/model_path.h"
#include "model/model.h"
#include "synth_gguf.h"

#define REFERENCE "reference/smollm2-q4_1.json"
#define REFERENCE_CTX 512

static void default_model(char *path, size_t size)
{
    eng_error err = {0};
    cr_assert_eq(eng_default_model_path(path, size, &err), ORTMEM_OK, "%s", err.message);
}

static eng_model *load(const char *path)
{
    eng_error err = {0};
    eng_model *m = NULL;
    cr_assert_eq(eng_model_load(path, NULL, &m, &err), ORTMEM_OK, "%s", err.message);
    return m;
}

static eng_context *context(eng_model *m, uint32_t n_ctx)
{
    eng_error err = {0};
    eng_context *c = NULL;
    eng_context_options o = {n_ctx, 0, 2};
    cr_assert_eq(eng_context_create(m, &o, &c, &err), ORTMEM_OK, "%s", err.message);
    return c;
}

/* The largest logit's id, the lowest id on ties (as the reference's greedy). */
static int32_t argmax(const float *logits, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return (int32_t)best;
}

static json_t *reference(void)
{
    const char *dir = getenv("ORTMEM_ENGINE_TEST_DATA");
    cr_assert_not_null(dir, "ORTMEM_ENGINE_TEST_DATA is not set (meson sets it)");
    char path[4096];
    snprintf(path, sizeof path, "%s/" REFERENCE, dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    cr_assert_not_null(root, "%s: %s (line %d)", path, jerr.text, jerr.line);
    return root;
}

static json_t *reference_prompt(json_t *root, const char *name)
{
    json_t *prompts = json_object_get(root, "prompts");
    cr_assert(json_is_array(prompts), "the reference has no prompts");
    size_t i;
    json_t *p;
    json_array_foreach(prompts, i, p)
    {
        if (!strcmp(json_string_value(json_object_get(p, "name")), name))
            return p;
    }
    cr_assert_fail("the reference has no prompt \"%s\"", name);
    return NULL;
}

static int32_t *int_array(json_t *a, size_t *n)
{
    cr_assert(json_is_array(a));
    *n = json_array_size(a);
    int32_t *v = malloc((*n ? *n : 1) * sizeof *v);
    cr_assert_not_null(v);
    for (size_t i = 0; i < *n; i++)
        v[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return v;
}

/* Decodes the prompt's ids and then, step by step, our greedy token; each
 * must be llama.cpp's. A divergence names the step, both ids, llama.cpp's
 * two best logits and ours for the same two ids. */
/* budget: eng_model_options.weights_budget as a fraction of the weights'
 * file bytes (0: every weight pinned). */
/* budget: a fraction of the weights' bytes (0: all resident); staging:
 * the catalog's bytes copied into host staging, a ring of two slots. */
static void agree_with_llama_cpp_under(const char *name, double budget, ortmem_staging *staging)
{
    json_t *root = reference();
    json_t *p = reference_prompt(root, name);
    size_t n_prompt, n_steps;
    int32_t *prompt = int_array(json_object_get(p, "prompt_ids"), &n_prompt);
    int32_t *expected = int_array(json_object_get(p, "generated_ids"), &n_steps);
    json_t *top2 = json_object_get(p, "top2");
    cr_assert_eq(json_array_size(top2), n_steps);
    cr_assert_geq(n_steps, 64, "the reference records %zu steps", n_steps);

    char path[4096];
    default_model(path, sizeof path);
    eng_model *m = load(path);
    uint64_t weights_budget = 0;
    if (budget > 0) {
        weights_budget = (uint64_t)((double)eng_model_weights_file_bytes(m) * budget);
        eng_error lerr = {0};
        cr_assert_eq(eng_model_destroy(m, &lerr), ORTMEM_OK, "%s", lerr.message);
        eng_model_options mo = {0};
        mo.weights_budget = weights_budget;
        if (staging) {
            mo.staging = staging;
            mo.ring_slots = 2;
        }
        m = NULL;
        cr_assert_eq(eng_model_load(path, &mo, &m, &lerr), ORTMEM_OK, "%s", lerr.message);
    }
    eng_context *c = context(m, REFERENCE_CTX);
    const size_t vocab = eng_model_hparams(m)->n_vocab;
    eng_error err = {0};
    cr_assert_eq(eng_context_decode(c, prompt, n_prompt, &err), ORTMEM_OK, "%s", err.message);
    for (size_t step = 0; step < n_steps; step++) {
        const float *logits = eng_context_logits(c);
        int32_t ours = argmax(logits, vocab);
        if (ours != expected[step]) {
            json_t *row = json_array_get(top2, step);
            int32_t id1 = (int32_t)json_integer_value(json_array_get(row, 0));
            int32_t id2 = (int32_t)json_integer_value(json_array_get(row, 2));
            cr_assert_fail("prompt %s diverges at step %zu: ours %d, llama.cpp %d; llama.cpp's "
                           "logits %d = %.6f, %d = %.6f; ours %d = %.6f, %d = %.6f "
                           "(our own top token %d = %.6f)",
                           name, step, ours, expected[step], id1,
                           json_real_value(json_array_get(row, 1)), id2,
                           json_real_value(json_array_get(row, 3)), id1, (double)logits[id1], id2,
                           (double)logits[id2], ours, (double)logits[ours]);
        }
        cr_assert_eq(eng_context_decode(c, &ours, 1, &err), ORTMEM_OK, "%s", err.message);
    }
    cr_assert_eq(eng_context_length(c), n_prompt + n_steps);
    if (budget > 0) {
        /* The streamed matrices went through the ring every token, and the
         * weights never held more than the budget. */
        ortmem_residency_stats rs = {.struct_size = sizeof rs};
        cr_assert_eq(ortmem_residency_stats_get(eng_model_residency(m), &rs), ORTMEM_OK);
        cr_assert_gt(rs.streamed, 0);
        cr_assert_geq(rs.streamed, n_steps, "%llu streamed acquires over %zu tokens",
                      (unsigned long long)rs.streamed, n_steps);
        cr_assert_leq(rs.resident_bytes + rs.ring_bytes, weights_budget,
                      "resident %llu + ring %llu over the budget %llu",
                      (unsigned long long)rs.resident_bytes, (unsigned long long)rs.ring_bytes,
                      (unsigned long long)weights_budget);
        cr_assert_lt(eng_model_weights_resident_bytes(m), eng_model_weights_file_bytes(m));
    }
    if (staging) {
        /* Every tensor was read from the staging's copy. */
        ortmem_staging_stats ss = {.struct_size = sizeof ss};
        cr_assert_eq(ortmem_staging_stats_get(staging, &ss), ORTMEM_OK);
        cr_assert_geq(ss.allocated_bytes, eng_model_weights_file_bytes(m),
                      "%" PRIu64 " bytes in staging for %" PRIu64 " of weights", ss.allocated_bytes,
                      eng_model_weights_file_bytes(m));
    }
    cr_assert_eq(eng_context_destroy(c, &err), ORTMEM_OK, "%s", err.message);
    cr_assert_eq(eng_model_destroy(m, &err), ORTMEM_OK, "%s", err.message);
    free(prompt);
    free(expected);
    json_decref(root);
}

static void agree_with_llama_cpp(const char *name)
{
    agree_with_llama_cpp_under(name, 0, NULL);
}

Test(engine_model, greedy_tokens_agree_with_llama_cpp_capital, .timeout = 240)
{
    agree_with_llama_cpp("capital");
}

/* Half the weights' bytes: most matrices stream through the residency
 * cache's ring at every token, and the tokens are llama.cpp's still. */
Test(engine_model, streamed_weights_under_half_the_budget_keep_the_tokens, .timeout = 240)
{
    agree_with_llama_cpp_under("chat", 0.5, NULL);
}

/* The same from a copy of the weights in host staging (what a device
 * copies from: pinned memory), through a ring of two slots; the staging's
 * allocations are the model's until it is destroyed. */
Test(engine_model, streamed_from_staging_through_two_ring_slots_keep_the_tokens, .timeout = 240)
{
    ortmem_staging *staging = NULL;
    cr_assert_eq(ortmem_staging_create(NULL, &staging), ORTMEM_OK);
    agree_with_llama_cpp_under("capital", 0.5, staging);
    ortmem_staging_stats ss = {.struct_size = sizeof ss};
    cr_assert_eq(ortmem_staging_stats_get(staging, &ss), ORTMEM_OK);
    cr_assert_eq(ss.allocations, 0, "%" PRIu64 " staging allocations outlive the model",
                 ss.allocations);
    cr_assert_eq(ortmem_staging_destroy(staging), ORTMEM_OK);
}

/* A budget below what stays resident (the embedding alone is 30 MB) is
 * refused with the numbers, and nothing is left behind. */
Test(engine_model, a_weights_budget_too_small_is_refused_with_the_numbers)
{
    char path[4096];
    default_model(path, sizeof path);
    eng_model_options mo = {0};
    mo.weights_budget = 8u << 20;
    eng_model *m = NULL;
    eng_error err = {0};
    cr_assert_eq(eng_model_load(path, &mo, &m, &err), ORTMEM_E_BUDGET, "%s", err.message);
    cr_assert_null(m);
    cr_assert(strstr(err.message, "a weights budget of 8388608 bytes is below the"), "%s",
              err.message);
    cr_assert(strstr(err.message, "plus a ring of 4 slots of"), "%s", err.message);
}

Test(engine_model, greedy_tokens_agree_with_llama_cpp_fibonacci, .timeout = 240)
{
    agree_with_llama_cpp("fibonacci");
}

Test(engine_model, greedy_tokens_agree_with_llama_cpp_chat, .timeout = 240)
{
    agree_with_llama_cpp("chat");
}

/* Committed KV bytes stay within the bound ortmem states for the cache's
 * extent policy, the live bytes are exactly the tokens' keys and values,
 * and the ledger's KV and weights lines are what the cache and the
 * residency cache say; after teardown the authority owns nothing. */
Test(engine_model, kv_within_its_bound_and_ledger_back_to_zero, .timeout = 240)
{
    char path[4096];
    default_model(path, sizeof path);
    eng_model *m = load(path);
    const eng_hparams *hp = eng_model_hparams(m);
    eng_context *c = context(m, 1024);
    eng_error err = {0};
    const int32_t prompt[] = {504, 3575, 282, 4649, 314};
    cr_assert_eq(eng_context_decode(c, prompt, 5, &err), ORTMEM_OK, "%s", err.message);
    for (int i = 0; i < 40; i++) {
        int32_t next = argmax(eng_context_logits(c), hp->n_vocab);
        cr_assert_eq(eng_context_decode(c, &next, 1, &err), ORTMEM_OK, "%s", err.message);
    }
    ortmem_kv_stats ks;
    cr_assert_eq(eng_context_kv_stats(c, &ks, &err), ORTMEM_OK, "%s", err.message);
    const uint64_t per_token = 2ull * hp->n_layer * hp->n_head_kv * hp->head_dim * 2;
    cr_assert_eq(ks.live_tokens, 45);
    cr_assert_eq(ks.live_bytes, 45 * per_token);
    cr_assert_geq(ks.committed_bytes, ks.live_bytes);
    cr_assert_leq(ks.overcommit_bytes, ks.overcommit_bound_bytes,
                  "over-commit %llu above the bound %llu", (unsigned long long)ks.overcommit_bytes,
                  (unsigned long long)ks.overcommit_bound_bytes);
    cr_assert_leq(ks.committed_bytes - ks.live_bytes, ks.overcommit_bound_bytes);

    ortmem_authority *a = eng_model_authority(m);
    ortmem_authority_report r = {.struct_size = sizeof r};
    cr_assert_eq(ortmem_authority_report_get(a, &r, NULL, 0), ORTMEM_OK);
    cr_assert_eq(r.by_role_owned[ORTMEM_ROLE_KV], ks.committed_bytes);
    cr_assert_eq(r.by_role_owned[ORTMEM_ROLE_WEIGHTS], eng_model_weights_resident_bytes(m));
    cr_assert_geq(eng_model_weights_resident_bytes(m), eng_model_weights_file_bytes(m));

    cr_assert_eq(eng_model_destroy(m, &err), ORTMEM_E_BUSY, "a model with a context is kept");
    cr_assert_eq(eng_context_destroy(c, &err), ORTMEM_OK, "%s", err.message);
    cr_assert_eq(ortmem_authority_report_get(a, &r, NULL, 0), ORTMEM_OK);
    cr_assert_eq(r.by_role_owned[ORTMEM_ROLE_KV], 0, "KV still owns %llu bytes",
                 (unsigned long long)r.by_role_owned[ORTMEM_ROLE_KV]);
    cr_assert_eq(r.owned_bytes, eng_model_weights_resident_bytes(m));
    /* The model's teardown checks the authority owns and claims nothing once
     * the weights are released (ORTMEM_E_STATE naming the bytes if not). */
    cr_assert_eq(eng_model_destroy(m, &err), ORTMEM_OK, "%s", err.message);
}

/* A caller's backend (here the fault backend over a CPU one): a create that
 * fails in the middle of the load is a status naming it, and the load leaves
 * nothing owned or mapped on the backend; re-armed not to fail, the same
 * backend loads the model, decodes llama.cpp's first tokens, and is the
 * caller's again, empty, after the model's teardown. */
Test(engine_model, a_callers_backend_and_a_failed_load_that_leaves_nothing, .timeout = 240)
{
    char path[4096];
    default_model(path, sizeof path);
    ortmem_cpu_options co = ORTMEM_CPU_OPTIONS_INIT;
    co.granule = 4096;
    ortmem_backend *cpu = NULL, *fault = NULL;
    cr_assert_eq(ortmem_cpu_backend_create(&co, &cpu), ORTMEM_OK, "%s", ortmem_last_error());
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = ORTMEM_OP_CREATE;
    fo.fail_at = 100; /* the 100th of the weights' 272 slots */
    cr_assert_eq(ortmem_fault_backend_create(cpu, &fo, &fault), ORTMEM_OK);
    eng_model_options mo = {0};
    mo.backend = fault;
    eng_model *m = NULL;
    eng_error err = {0};
    cr_assert_neq(eng_model_load(path, &mo, &m, &err), ORTMEM_OK);
    cr_assert_null(m);
    cr_assert(err.message[0], "a failed load says why");
    ortmem_vmm_stats vs = {.struct_size = sizeof vs};
    cr_assert_eq(ortmem_backend_stats(fault, &vs), ORTMEM_OK);
    cr_assert_eq(vs.owned_bytes, 0, "the failed load left %llu bytes owned",
                 (unsigned long long)vs.owned_bytes);
    cr_assert_eq(vs.mapped_bytes, 0);

    fo.fail_at = 0;
    cr_assert_eq(ortmem_fault_backend_arm(fault, &fo), ORTMEM_OK);
    cr_assert_eq(eng_model_load(path, &mo, &m, &err), ORTMEM_OK, "%s", err.message);
    eng_context *c = context(m, 256);
    const int32_t prompt[] = {504, 3575, 282, 4649, 314};
    const int32_t want[] = {7042, 30, 198, 198}; /* llama.cpp: " Paris.\n\n" */
    cr_assert_eq(eng_context_decode(c, prompt, 5, &err), ORTMEM_OK, "%s", err.message);
    for (int i = 0; i < 4; i++) {
        int32_t next = argmax(eng_context_logits(c), eng_model_hparams(m)->n_vocab);
        cr_assert_eq(next, want[i], "step %d: %d, llama.cpp %d", i, next, want[i]);
        cr_assert_eq(eng_context_decode(c, &next, 1, &err), ORTMEM_OK, "%s", err.message);
    }
    cr_assert_eq(eng_context_destroy(c, &err), ORTMEM_OK, "%s", err.message);
    cr_assert_eq(eng_model_destroy(m, &err), ORTMEM_OK, "%s", err.message);
    cr_assert_eq(ortmem_backend_stats(fault, &vs), ORTMEM_OK);
    cr_assert_eq(vs.owned_bytes, vs.pool_bytes, "owned %llu after the teardown",
                 (unsigned long long)vs.owned_bytes);
    cr_assert_eq(ortmem_backend_destroy(fault), ORTMEM_OK, "%s", ortmem_last_error());
    cr_assert_eq(ortmem_backend_destroy(cpu), ORTMEM_OK, "%s", ortmem_last_error());
}

/* A failed decode changes nothing: a token outside the vocabulary, or more
 * tokens than the context holds. */
Test(engine_model, refused_decodes_change_nothing, .timeout = 120)
{
    char path[4096];
    default_model(path, sizeof path);
    eng_model *m = load(path);
    eng_context *c = context(m, 8);
    eng_error err = {0};
    const int32_t prompt[] = {504, 3575, 282, 4649, 314};
    cr_assert_eq(eng_context_decode(c, prompt, 5, &err), ORTMEM_OK, "%s", err.message);
    int32_t bad = (int32_t)eng_model_hparams(m)->n_vocab;
    cr_assert_eq(eng_context_decode(c, &bad, 1, &err), ORTMEM_E_RANGE);
    cr_assert(strstr(err.message, "outside the vocabulary"), "%s", err.message);
    cr_assert_eq(eng_context_decode(c, prompt, 4, &err), ORTMEM_E_RANGE);
    cr_assert(strstr(err.message, "exceed the context of 8"), "%s", err.message);
    cr_assert_eq(eng_context_length(c), 5);
    ortmem_kv_stats ks;
    cr_assert_eq(eng_context_kv_stats(c, &ks, &err), ORTMEM_OK);
    cr_assert_eq(ks.live_tokens, 5);
    cr_assert_eq(eng_context_destroy(c, &err), ORTMEM_OK, "%s", err.message);
    cr_assert_eq(eng_model_destroy(m, &err), ORTMEM_OK, "%s", err.message);
}

/* ---- bad model files ---- */

static ortmem_status load_synth(const synth_options *o, eng_error *err)
{
    char path[] = "/tmp/engine-model-synth-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    synth_gguf_write(path, o);
    eng_model *m = NULL;
    ortmem_status st = eng_model_load(path, NULL, &m, err);
    unlink(path);
    if (st == ORTMEM_OK)
        cr_assert_eq(eng_model_destroy(m, err), ORTMEM_OK, "%s", err->message);
    else
        cr_assert_null(m, "a failed load leaves the result untouched");
    return st;
}

Test(engine_model, the_synthetic_model_loads)
{
    eng_error err = {0};
    synth_options o = {0};
    cr_assert_eq(load_synth(&o, &err), ORTMEM_OK, "%s", err.message);
}

/* Logits of 6 greedy steps on the synthetic model loaded with budget (0:
 * every weight resident), into out (steps x vocab); the load's status. */
static ortmem_status synth_logits(const synth_options *so, uint64_t budget, float *out,
                                  size_t vocab, uint64_t *streamed, eng_error *err)
{
    char path[] = "/tmp/engine-model-synth-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    synth_gguf_write(path, so);
    eng_model_options mo = {0};
    mo.weights_budget = budget;
    eng_model *m = NULL;
    ortmem_status st = eng_model_load(path, &mo, &m, err);
    unlink(path);
    if (st != ORTMEM_OK)
        return st;
    eng_context *c = context(m, 32);
    int32_t token = 1;
    for (int step = 0; step < 6; step++) {
        cr_assert_eq(eng_context_decode(c, &token, 1, err), ORTMEM_OK, "%s", err->message);
        memcpy(out + (size_t)step * vocab, eng_context_logits(c), vocab * sizeof(float));
        token = argmax(eng_context_logits(c), vocab);
    }
    ortmem_residency_stats rs = {.struct_size = sizeof rs};
    cr_assert_eq(ortmem_residency_stats_get(eng_model_residency(m), &rs), ORTMEM_OK);
    *streamed = rs.streamed;
    cr_assert_eq(eng_context_destroy(c, err), ORTMEM_OK, "%s", err->message);
    cr_assert_eq(eng_model_destroy(m, err), ORTMEM_OK, "%s", err->message);
    return ORTMEM_OK;
}

/* A budget that keeps only what must stay resident streams every layer
 * through the ring at every step, and the logits are the resident model's
 * bit for bit; a file whose layers are interleaved is refused a budget
 * (layers stream whole) but loads and decodes without one. */
Test(engine_model, every_layer_streamed_gives_the_same_logits)
{
    enum { VOCAB = 64, STEPS = 6 };
    static float resident[STEPS * VOCAB], streamed[STEPS * VOCAB];
    eng_error err = {0};
    synth_options so = {0};
    uint64_t n_streamed = 0;
    cr_assert_eq(synth_logits(&so, 0, resident, VOCAB, &n_streamed, &err), ORTMEM_OK, "%s",
                 err.message);
    cr_assert_eq(n_streamed, 0);
    /* The smallest budget, read from the refusal of a budget of one byte. */
    cr_assert_eq(synth_logits(&so, 1, streamed, VOCAB, &n_streamed, &err), ORTMEM_E_BUDGET);
    unsigned long long must = 0, slot = 0;
    const char *at = strstr(err.message, "is below the ");
    cr_assert(at && sscanf(at, "is below the %llu", &must) == 1, "%s", err.message);
    at = strstr(err.message, "slots of ");
    cr_assert(at && sscanf(at, "slots of %llu", &slot) == 1, "%s", err.message);
    cr_assert_eq(synth_logits(&so, must + 4 * slot, streamed, VOCAB, &n_streamed, &err), ORTMEM_OK,
                 "%s", err.message);
    cr_assert_eq(n_streamed, (uint64_t)STEPS * 2, "every layer (2) at every step (%d): %llu", STEPS,
                 (unsigned long long)n_streamed);
    cr_assert(!memcmp(resident, streamed, sizeof resident),
              "the streamed model's logits differ from the resident model's");
    so.by_kind = 1;
    cr_assert_eq(synth_logits(&so, must + 4 * slot, streamed, VOCAB, &n_streamed, &err),
                 ORTMEM_E_UNSUPPORTED);
    cr_assert(strstr(err.message, "do not lie together"), "%s", err.message);
    cr_assert_eq(synth_logits(&so, 0, streamed, VOCAB, &n_streamed, &err), ORTMEM_OK, "%s",
                 err.message);
}

/* Contexts of one model on several threads at once (the soak's decode
 * workload): each raises the authority's limit by its KV cache's bound at
 * create and lowers it at destroy, reading the limit and writing it back. A
 * raise or a lowering lost between two threads would leave the limit off its
 * base; a lost count of contexts would refuse or allow the model's destroy
 * wrongly. */
#define RACE_THREADS 4
#define RACE_ROUNDS 2000

static void *create_decode_destroy(void *arg)
{
    eng_model *m = arg;
    eng_context_options o = {16, 0, 1};
    const int32_t prompt[] = {1, 2, 3};
    for (int i = 0; i < RACE_ROUNDS; i++) {
        eng_error err = {0};
        eng_context *c = NULL;
        if (eng_context_create(m, &o, &c, &err) != ORTMEM_OK)
            return strdup(err.message);
        if (i % 16 == 0 && eng_context_decode(c, prompt, 3, &err) != ORTMEM_OK)
            return strdup(err.message);
        if (eng_context_destroy(c, &err) != ORTMEM_OK)
            return strdup(err.message);
    }
    return NULL;
}

Test(engine_model, contexts_on_several_threads_give_the_limit_back, .timeout = 120)
{
    char path[] = "/tmp/engine-model-synth-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    synth_options so = {0};
    synth_gguf_write(path, &so);
    eng_error err = {0};
    eng_model *m = load(path);
    unlink(path);
    ortmem_authority_report base = {.struct_size = sizeof base};
    cr_assert_eq(ortmem_authority_report_get(eng_model_authority(m), &base, NULL, 0), ORTMEM_OK);
    pthread_t t[RACE_THREADS];
    for (int i = 0; i < RACE_THREADS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, create_decode_destroy, m), 0);
    for (int i = 0; i < RACE_THREADS; i++) {
        void *failure = NULL;
        pthread_join(t[i], &failure);
        cr_expect_null(failure, "thread %d: %s", i, failure ? (char *)failure : "");
        free(failure);
    }
    ortmem_authority_report after = {.struct_size = sizeof after};
    cr_assert_eq(ortmem_authority_report_get(eng_model_authority(m), &after, NULL, 0), ORTMEM_OK);
    cr_assert_eq(after.limit_bytes, base.limit_bytes,
                 "the limit is %llu after %d contexts came and went, %llu before",
                 (unsigned long long)after.limit_bytes, RACE_THREADS * RACE_ROUNDS,
                 (unsigned long long)base.limit_bytes);
    cr_assert_eq(after.owned_bytes, base.owned_bytes);
    cr_assert_eq(eng_model_destroy(m, &err), ORTMEM_OK, "%s", err.message);
}

Test(engine_model, another_architecture_is_refused_by_name)
{
    eng_error err = {0};
    synth_options o = {.arch = "gpt2"};
    cr_assert_eq(load_synth(&o, &err), ORTMEM_E_UNSUPPORTED);
    cr_assert(strstr(err.message, "\"gpt2\""), "%s", err.message);
}

Test(engine_model, variants_the_forward_pass_does_not_compute_are_refused)
{
    eng_error err = {0};
    synth_options experts = {.extra_key = "llama.expert_count", .extra_value = 8};
    cr_assert_eq(load_synth(&experts, &err), ORTMEM_E_UNSUPPORTED);
    cr_assert(strstr(err.message, "8 experts"), "%s", err.message);
    synth_options keys = {.extra_key = "llama.attention.key_length", .extra_value = 16};
    cr_assert_eq(load_synth(&keys, &err), ORTMEM_E_UNSUPPORTED);
    cr_assert(strstr(err.message, "key_length is 16"), "%s", err.message);
    synth_options same = {.extra_key = "llama.attention.key_length", .extra_value = 8};
    cr_assert_eq(load_synth(&same, &err), ORTMEM_OK, "%s", err.message);
}

Test(engine_model, a_wrong_shape_names_the_tensor_and_both_shapes)
{
    eng_error err = {0};
    synth_options o = {.reshape_tensor = "blk.1.attn_k.weight", .new_ne0 = 24};
    cr_assert_eq(load_synth(&o, &err), ORTMEM_E_INVALID);
    cr_assert(strstr(err.message, "blk.1.attn_k.weight has shape [24, 16], expected [32, 16]"),
              "%s", err.message);
}

Test(engine_model, a_missing_tensor_is_named)
{
    eng_error err = {0};
    synth_options o = {.omit_tensor = "blk.0.ffn_up.weight"};
    cr_assert_eq(load_synth(&o, &err), ORTMEM_E_NOT_FOUND);
    cr_assert(strstr(err.message, "blk.0.ffn_up.weight"), "%s", err.message);
}

Test(engine_model, a_norm_that_is_not_f32_is_refused)
{
    eng_error err = {0};
    synth_options o = {.retype_tensor = "output_norm.weight", .new_type = 1 /* F16 */};
    cr_assert_eq(load_synth(&o, &err), ORTMEM_E_UNSUPPORTED);
    cr_assert(strstr(err.message, "output_norm.weight is F16"), "%s", err.message);
}

Test(engine_model, unknown_types_and_cut_files_are_refused)
{
    eng_error err = {0};
    synth_options o = {.retype_tensor = "blk.0.attn_q.weight", .new_type = 99};
    cr_assert_neq(load_synth(&o, &err), ORTMEM_OK);
    synth_options cut = {.truncate_to = 2000};
    cr_assert_neq(load_synth(&cut, &err), ORTMEM_OK);
}
