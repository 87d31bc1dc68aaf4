/* ortmem-decode --device cuda: the model loaded over ortmem's CUDA backend
 * and decoded by engine/cuda, the decode step replayed as one captured
 * graph; --batch B decodes B sequences of the prompt together. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"

#include "decode.h"

#ifndef ORTMEM_DECODE_CUDA

int gpu_run(const options *o, const char *path, run_result *r)
{
    (void)o;
    (void)path;
    (void)r;
    return cli_fail(PROGRAM, EXIT_USAGE,
                    "--device cuda: this ortmem-decode was built without the CUDA engine "
                    "(engine/cuda needs nvcc when meson configures the build)");
}

#else

#include "cuda/gpu.h"
#include "model/model.h"

/* The loop: prefill every sequence, then steps until -n tokens, a full
 * context, or the first sequence's end of generation. Greedy takes the
 * device's argmax; sampling copies the first sequence's logits each step
 * (the other sequences then follow their own argmax). */
static int generate(const options *o, eng_gpu_context *ctx, const eng_tokenizer *tok,
                    eng_sampler *sampler, uint32_t vocab, run_result *r)
{
    eng_error err = {0};
    const uint32_t batch = eng_gpu_batch(ctx), n_ctx = eng_gpu_n_ctx(ctx);
    const bool greedy = o->sample.temperature <= 0.0f && o->sample.repeat_penalty == 1.0f;
    const uint64_t limit = o->n_predict < n_ctx ? o->n_predict : n_ctx;
    int32_t next[ENG_GPU_MAX_BATCH], out[ENG_GPU_MAX_BATCH];
    size_t history_cap = r->n_prompt + limit;
    int32_t *history = malloc((history_cap ? history_cap : 1) * sizeof(int32_t));
    float *logits = greedy ? NULL : malloc((size_t)vocab * sizeof(float));
    r->ids = malloc((limit ? limit : 1) * sizeof(int32_t));
    int rc = 0;
    if (!history || !r->ids || (!greedy && !logits)) {
        rc = cli_fail(PROGRAM, EXIT_FAILED, "no memory for %" PRIu64 " tokens", limit);
        goto done;
    }
    memcpy(history, r->prompt_ids, r->n_prompt * sizeof(int32_t));
    size_t history_len = r->n_prompt;
    double t0 = seconds_now();
    for (uint32_t s = 0; s < batch; s++)
        if (eng_gpu_prefill(ctx, s, r->prompt_ids, r->n_prompt, &next[s], &err) != ORTMEM_OK) {
            rc = cli_fail(PROGRAM, EXIT_FAILED, "prefill: %s", err.message);
            goto done;
        }
    r->prefill_s = seconds_now() - t0;
    r->stop = "the token limit";
    t0 = seconds_now();
    for (uint64_t i = 0; i < limit; i++) {
        int32_t id = next[0];
        if (!greedy) {
            if (eng_gpu_logits(ctx, 0, logits, &err) != ORTMEM_OK ||
                eng_sample(sampler, logits, history, history_len, &id, &err) != ORTMEM_OK) {
                rc = cli_fail(PROGRAM, EXIT_FAILED, "sampling: %s", err.message);
                goto done;
            }
            next[0] = id;
        }
        if (eng_tokenizer_is_eog(tok, id)) {
            r->stop = "end of generation";
            break;
        }
        history[history_len++] = id;
        if ((rc = emit_token(o, tok, r, id)) != 0)
            goto done;
        if (i + 1 == limit)
            break;
        if (eng_gpu_length(ctx, 0) >= n_ctx) {
            r->stop = "a full context";
            break;
        }
        if (eng_gpu_step(ctx, next, out, &err) != ORTMEM_OK) {
            rc = cli_fail(PROGRAM, EXIT_FAILED, "decode: %s", err.message);
            goto done;
        }
        memcpy(next, out, batch * sizeof(int32_t));
        r->decode_tokens += batch;
    }
    r->decode_s = seconds_now() - t0;
    if (!o->json) {
        text_stream(&r->text, true);
        fputc('\n', stdout);
    }
done:
    free(history);
    free(logits);
    return rc;
}

int gpu_run(const options *o, const char *path, run_result *r)
{
    eng_error err = {0};
    ortmem_backend *backend = NULL;
    if (eng_gpu_backend_create(o->cuda_ordinal, &backend, &err) != ORTMEM_OK)
        return cli_fail(PROGRAM, EXIT_FAILED, "--device cuda:%d: %s", o->cuda_ordinal, err.message);
    eng_model *model = NULL;
    eng_model_options mo = {0};
    mo.backend = backend;
    mo.progress = load_progress;
    mo.weights_budget = o->device_budget;
    /* Under a budget: the layers that do not fit wait in pinned memory. */
    eng_gpu_streaming *streaming = NULL;
    if (o->device_budget) {
        if (eng_gpu_streaming_create(&streaming, &err) != ORTMEM_OK) {
            ortmem_backend_destroy(backend);
            return cli_fail(PROGRAM, EXIT_FAILED, "--device-budget: %s", err.message);
        }
        eng_gpu_streaming_model_options(streaming, &mo);
    }
    if (eng_model_load(path, &mo, &model, &err) != ORTMEM_OK) {
        eng_gpu_streaming_destroy(streaming, NULL);
        ortmem_backend_destroy(backend);
        return cli_fail(PROGRAM, err.status == ORTMEM_E_NOMEM ? EXIT_FAILED : EXIT_USAGE,
                        "cannot load the model %s", err.message);
    }
    ortmem_residency_stats loaded = {.struct_size = sizeof loaded};
    ortmem_residency_stats_get(eng_model_residency(model), &loaded);
    r->bytes_moved_at_load = loaded.bytes_moved;
    eng_tokenizer *tok = NULL;
    eng_sampler *sampler = NULL;
    eng_gpu_context *ctx = NULL;
    int rc = 0;
    const uint32_t batch = o->batch ? (uint32_t)o->batch : 1;
    const eng_hparams *hp = eng_model_hparams(model);
    if (o->n_ctx > hp->n_ctx_train) {
        rc = cli_fail(PROGRAM, EXIT_USAGE,
                      "--ctx %" PRIu64 " exceeds the model's trained context of %u", o->n_ctx,
                      hp->n_ctx_train);
        goto done;
    }
    if (eng_tokenizer_create(eng_model_gguf(model), &tok, &err) != ORTMEM_OK) {
        rc = cli_fail(PROGRAM, EXIT_USAGE, "the tokenizer of %s: %s", path, err.message);
        goto done;
    }
    if ((rc = tokenize_prompt(o, tok, r)) != 0)
        goto done;
    eng_gpu_options go = {(uint32_t)o->n_ctx, batch, o->no_graphs, streaming};
    if (eng_gpu_context_create(model, &go, &ctx, &err) != ORTMEM_OK) {
        rc = cli_fail(PROGRAM, err.status == ORTMEM_E_RANGE ? EXIT_USAGE : EXIT_FAILED,
                      "the GPU context: %s", err.message);
        goto done;
    }
    if (r->n_prompt >= eng_gpu_n_ctx(ctx)) {
        rc = cli_fail(PROGRAM, EXIT_USAGE,
                      "the prompt is %zu tokens; the context holds %u (raise --ctx)", r->n_prompt,
                      eng_gpu_n_ctx(ctx));
        goto done;
    }
    if (eng_sampler_create(&o->sample, hp->n_vocab, &sampler, &err) != ORTMEM_OK) {
        rc = cli_fail(PROGRAM, EXIT_USAGE, "sampling: %s", err.message);
        goto done;
    }
    if ((rc = generate(o, ctx, tok, sampler, hp->n_vocab, r)) != 0)
        goto done;
    if (eng_gpu_kv_stats(ctx, &r->kv, &err) != ORTMEM_OK ||
        eng_gpu_kv_explain(ctx, &r->layout, r->explain, sizeof r->explain, &err) != ORTMEM_OK) {
        rc = cli_fail(PROGRAM, EXIT_FAILED, "%s", err.message);
        goto done;
    }
    r->strategy = ORTMEM_KV_STABLE;
    r->cuda = true;
    r->batch = batch;
    eng_gpu_stats st;
    eng_gpu_stats_get(ctx, &st);
    r->captures = st.captures;
    r->recaptures = st.recaptures;
    r->replays = st.replays;
    r->kv_checks = st.kv_checks;
    r->kv_driver_calls = st.kv_driver_calls;
    r->kernels_per_step = st.kernels_per_step;
    r->weights_resident = eng_model_weights_resident_bytes(model);
    r->residency.struct_size = sizeof r->residency;
    ortmem_residency_stats_get(eng_model_residency(model), &r->residency);
    r->ledger_table = ledger_text(eng_model_authority(model), ORTMEM_REPORT_TABLE);
    r->ledger_json = ledger_text(eng_model_authority(model), ORTMEM_REPORT_JSON);
done:
    eng_sampler_destroy(sampler);
    if (eng_gpu_context_destroy(ctx, &err) != ORTMEM_OK && rc == 0)
        rc = cli_fail(PROGRAM, EXIT_FAILED, "teardown: %s", err.message);
    eng_tokenizer_destroy(tok);
    if (eng_model_destroy(model, &err) != ORTMEM_OK && rc == 0)
        rc = cli_fail(PROGRAM, EXIT_FAILED, "teardown: %s", err.message);
    if (eng_gpu_streaming_destroy(streaming, &err) != ORTMEM_OK && rc == 0)
        rc = cli_fail(PROGRAM, EXIT_FAILED, "teardown: %s", err.message);
    ortmem_backend_destroy(backend);
    return rc;
}

#endif
