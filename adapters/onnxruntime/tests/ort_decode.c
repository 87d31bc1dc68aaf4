/* Greedy decoding of the tiny test model, plain and on ortmem (ort_decode.h). */
#include "ort_decode.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KV_BINDINGS (TINY_LAYERS * 2u)
#define TOKEN_FLOATS (TINY_HEADS * TINY_HEAD_DIM)

#define ORT_TRY(expr, what)                                                                        \
    do {                                                                                           \
        st = ortmem_ort_check(run->ort, (expr), (what));                                           \
        if (st != ORTMEM_OK)                                                                       \
            goto done;                                                                             \
    } while (0)

char *ort_decode_library_path(void)
{
    const char *lib = getenv("ORTMEM_ORT_LIB");
    if (lib != NULL && lib[0] != '\0')
        return strdup(lib);
    const char *venv = getenv("ORTMEM_ORT_VENV");
    if (venv == NULL || venv[0] == '\0')
        return NULL;
    char pattern[4096];
    snprintf(pattern, sizeof(pattern),
             "%s/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so*", venv);
    glob_t found;
    char *path = NULL;
    if (glob(pattern, 0, NULL, &found) == 0 && found.gl_pathc > 0)
        path = strdup(found.gl_pathv[0]);
    globfree(&found);
    return path;
}

static ortmem_status make_session(ort_decode_run *run, OrtSession **session)
{
    const OrtApi *api = ortmem_ort_api(run->ort);
    OrtSessionOptions *options = NULL;
    OrtCUDAProviderOptionsV2 *cuda = NULL;
    ortmem_status st;
    ORT_TRY(api->CreateSessionOptions(&options), "CreateSessionOptions");
    /* One thread: the same arithmetic order in both runs, and a shared machine. */
    ORT_TRY(api->SetIntraOpNumThreads(options, 1), "SetIntraOpNumThreads");
    ORT_TRY(api->SetInterOpNumThreads(options, 1), "SetInterOpNumThreads");
    if (run->use_env_allocators)
        ORT_TRY(api->AddSessionConfigEntry(options, "session.use_env_allocators", "1"),
                "AddSessionConfigEntry(session.use_env_allocators)");
    if (run->cuda) {
        ORT_TRY(api->CreateCUDAProviderOptions(&cuda), "CreateCUDAProviderOptions");
        ORT_TRY(api->SessionOptionsAppendExecutionProvider_CUDA_V2(options, cuda),
                "SessionOptionsAppendExecutionProvider_CUDA_V2");
    }
    ORT_TRY(api->CreateSession(run->env, run->model_path, options, session), run->model_path);
done:
    if (cuda != NULL)
        api->ReleaseCUDAProviderOptions(cuda);
    if (options != NULL)
        api->ReleaseSessionOptions(options);
    return st;
}

static int64_t argmax(const float *logits)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < TINY_VOCAB; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

static void kv_names(uint32_t slot, char *past, char *present, size_t capacity)
{
    const char *kind = slot % 2u ? "value" : "key";
    snprintf(past, capacity, "past_%s_%u", kind, slot / 2u);
    snprintf(present, capacity, "present_%s_%u", kind, slot / 2u);
}

ortmem_status ort_decode_plain(ort_decode_run *run)
{
    const OrtApi *api = ortmem_ort_api(run->ort);
    OrtSession *session = NULL;
    OrtMemoryInfo *cpu = NULL;
    OrtValue *inputs[2 + KV_BINDINGS] = {0};
    OrtValue *outputs[1 + KV_BINDINGS] = {0};
    char names_in[2 + KV_BINDINGS][32], names_out[1 + KV_BINDINGS][32];
    const char *in_ptrs[2 + KV_BINDINGS], *out_ptrs[1 + KV_BINDINGS];
    float *host_kv = calloc((size_t)KV_BINDINGS * (run->steps + 1u) * TOKEN_FLOATS, sizeof(float));
    ortmem_status st = ORTMEM_OK;
    if (host_kv == NULL)
        return ortmem_error_set(ORTMEM_E_NOMEM, "ort_decode_plain: host KV of %u steps",
                                run->steps);
    snprintf(names_in[0], 32, "input_ids");
    snprintf(names_in[1], 32, "position_ids");
    snprintf(names_out[0], 32, "logits");
    for (uint32_t slot = 0; slot < KV_BINDINGS; slot++)
        kv_names(slot, names_in[2 + slot], names_out[1 + slot], 32);
    for (size_t i = 0; i < 2 + KV_BINDINGS; i++)
        in_ptrs[i] = names_in[i];
    for (size_t i = 0; i < 1 + KV_BINDINGS; i++)
        out_ptrs[i] = names_out[i];
    st = make_session(run, &session);
    if (st != ORTMEM_OK)
        goto done;
    ORT_TRY(api->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &cpu),
            "CreateCpuMemoryInfo");
    run->tokens[0] = run->first_token;
    for (uint32_t step = 0; step < run->steps; step++) {
        int64_t ids[1] = {run->tokens[step]}, pos[1] = {step};
        int64_t id_shape[2] = {1, 1};
        ORT_TRY(api->CreateTensorWithDataAsOrtValue(cpu, ids, sizeof(ids), id_shape, 2,
                                                    ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
                                                    &inputs[0]),
                "input_ids");
        ORT_TRY(api->CreateTensorWithDataAsOrtValue(cpu, pos, sizeof(pos), id_shape, 2,
                                                    ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
                                                    &inputs[1]),
                "position_ids");
        for (uint32_t slot = 0; slot < KV_BINDINGS; slot++) {
            float *past = host_kv + (size_t)slot * (run->steps + 1u) * TOKEN_FLOATS;
            int64_t shape[4] = {1, step, TINY_HEADS, TINY_HEAD_DIM};
            ORT_TRY(api->CreateTensorWithDataAsOrtValue(
                        cpu, past, (size_t)step * TOKEN_FLOATS * sizeof(float), shape, 4,
                        ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &inputs[2 + slot]),
                    names_in[2 + slot]);
        }
        ORT_TRY(api->Run(session, NULL, in_ptrs, (const OrtValue *const *)inputs, 2 + KV_BINDINGS,
                         out_ptrs, 1 + KV_BINDINGS, outputs),
                "Run");
        float *data = NULL;
        ORT_TRY(api->GetTensorMutableData(outputs[0], (void **)&data), "logits");
        memcpy(run->logits + (size_t)step * TINY_VOCAB, data, TINY_VOCAB * sizeof(float));
        run->tokens[step + 1] = argmax(data);
        /* The caller keeps the cache: each present is copied after the past. */
        for (uint32_t slot = 0; slot < KV_BINDINGS; slot++) {
            float *past = host_kv + (size_t)slot * (run->steps + 1u) * TOKEN_FLOATS;
            ORT_TRY(api->GetTensorMutableData(outputs[1 + slot], (void **)&data),
                    names_out[1 + slot]);
            memcpy(past + (size_t)step * TOKEN_FLOATS, data, TOKEN_FLOATS * sizeof(float));
        }
        for (size_t i = 0; i < 2 + KV_BINDINGS; i++) {
            api->ReleaseValue(inputs[i]);
            inputs[i] = NULL;
        }
        for (size_t i = 0; i < 1 + KV_BINDINGS; i++) {
            api->ReleaseValue(outputs[i]);
            outputs[i] = NULL;
        }
    }
done:
    for (size_t i = 0; i < 2 + KV_BINDINGS; i++)
        if (inputs[i] != NULL)
            api->ReleaseValue(inputs[i]);
    for (size_t i = 0; i < 1 + KV_BINDINGS; i++)
        if (outputs[i] != NULL)
            api->ReleaseValue(outputs[i]);
    if (cpu != NULL)
        api->ReleaseMemoryInfo(cpu);
    if (session != NULL)
        api->ReleaseSession(session);
    free(host_kv);
    return st;
}

ortmem_status ort_decode_ortmem(ort_decode_run *run)
{
    const OrtApi *api = ortmem_ort_api(run->ort);
    OrtSession *session = NULL;
    OrtIoBinding *io = NULL;
    OrtMemoryInfo *cpu = NULL;
    OrtValue *ids_value = NULL, *pos_value = NULL;
    OrtValue **bound = NULL;
    size_t bound_count = 0;
    OrtAllocator *default_allocator = NULL;
    ortmem_status st = make_session(run, &session);
    if (st != ORTMEM_OK)
        return st;
    ORT_TRY(api->CreateIoBinding(session, &io), "CreateIoBinding");
    ORT_TRY(api->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &cpu),
            "CreateCpuMemoryInfo");
    ORT_TRY(api->GetAllocatorWithDefaultOptions(&default_allocator),
            "GetAllocatorWithDefaultOptions");
    run->tokens[0] = run->first_token;
    for (uint32_t step = 0; step < run->steps; step++) {
        int64_t ids[1] = {run->tokens[step]}, pos[1] = {step};
        int64_t id_shape[2] = {1, 1};
        api->ClearBoundInputs(io);
        api->ClearBoundOutputs(io);
        ORT_TRY(api->CreateTensorWithDataAsOrtValue(cpu, ids, sizeof(ids), id_shape, 2,
                                                    ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
                                                    &ids_value),
                "input_ids");
        ORT_TRY(api->CreateTensorWithDataAsOrtValue(cpu, pos, sizeof(pos), id_shape, 2,
                                                    ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
                                                    &pos_value),
                "position_ids");
        ORT_TRY(api->BindInput(io, "input_ids", ids_value), "BindInput(input_ids)");
        ORT_TRY(api->BindInput(io, "position_ids", pos_value), "BindInput(position_ids)");
        /* Logits first, so they are output 0; ORT allocates them on the host. */
        ORT_TRY(api->BindOutputToDevice(io, "logits", cpu), "BindOutputToDevice(logits)");
        st = ortmem_ort_kv_bind(run->kv, io, 1);
        if (st != ORTMEM_OK)
            goto done;
        st = ortmem_ort_check(run->ort, api->RunWithBinding(session, NULL, io), "RunWithBinding");
        if (st != ORTMEM_OK) {
            ortmem_ort_kv_truncate(run->kv, step);
            goto done;
        }
        ORT_TRY(api->GetBoundOutputValues(io, default_allocator, &bound, &bound_count),
                "GetBoundOutputValues");
        float *data = NULL;
        ORT_TRY(api->GetTensorMutableData(bound[0], (void **)&data), "logits");
        memcpy(run->logits + (size_t)step * TINY_VOCAB, data, TINY_VOCAB * sizeof(float));
        run->tokens[step + 1] = argmax(data);
        for (size_t i = 0; i < bound_count; i++)
            api->ReleaseValue(bound[i]);
        ORT_TRY(api->AllocatorFree(default_allocator, bound), "AllocatorFree");
        bound = NULL;
        api->ReleaseValue(ids_value);
        api->ReleaseValue(pos_value);
        ids_value = pos_value = NULL;
        if (run->after_step != NULL)
            run->after_step(run->user, step);
    }
done:
    if (bound != NULL) {
        for (size_t i = 0; i < bound_count; i++)
            api->ReleaseValue(bound[i]);
        OrtStatus *freed = api->AllocatorFree(default_allocator, bound);
        if (freed != NULL)
            api->ReleaseStatus(freed);
    }
    if (ids_value != NULL)
        api->ReleaseValue(ids_value);
    if (pos_value != NULL)
        api->ReleaseValue(pos_value);
    if (io != NULL)
        api->ReleaseIoBinding(io);
    if (cpu != NULL)
        api->ReleaseMemoryInfo(cpu);
    api->ReleaseSession(session);
    return st;
}
