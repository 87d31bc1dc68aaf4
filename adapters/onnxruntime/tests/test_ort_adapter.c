/* The ONNX Runtime adapter on the CPU execution provider, over the tiny
 * decoder-with-past model make_model.py writes (docs/adapters/ONNXRUNTIME.md).
 * Skipped, saying why, where scripts/ort-env.sh's environment is missing. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ort_decode.h"

#define GRANULE ((size_t)4096)
#define KV_BINDINGS (TINY_LAYERS * 2u)
#define BINDING_TOKEN_BYTES ((uint64_t)TINY_HEADS * TINY_HEAD_DIM * sizeof(float))

typedef struct fixture {
    ortmem_ort *ort;
    OrtEnv *env;
    const char *model;
    ortmem_backend *backend;
    ortmem_authority *authority;
} fixture;

static void open_or_skip(fixture *f, uint64_t limit_bytes)
{
    memset(f, 0, sizeof(*f));
    char *lib = ort_decode_library_path();
    f->model = getenv("ORTMEM_ORT_MODEL");
    if (lib == NULL || f->model == NULL || f->model[0] == '\0') {
        free(lib);
        cr_skip_test("ONNX Runtime or the test model is missing: run scripts/ort-env.sh and "
                     "reconfigure (ORTMEM_ORT_LIB or ORTMEM_ORT_VENV, ORTMEM_ORT_MODEL)");
    }
    ortmem_status st = ortmem_ort_open(lib, &f->ort);
    free(lib);
    if (st != ORTMEM_OK)
        cr_skip_test("%s", ortmem_last_error());
    const OrtApi *api = ortmem_ort_api(f->ort);
    OrtStatus *os = api->CreateEnv(ORT_LOGGING_LEVEL_ERROR, "ortmem-test", &f->env);
    cr_assert_eq(ortmem_ort_check(f->ort, os, "CreateEnv"), ORTMEM_OK, "%s", ortmem_last_error());
    ortmem_cpu_options co = ORTMEM_CPU_OPTIONS_INIT;
    co.granule = GRANULE;
    cr_assert_eq(ortmem_cpu_backend_create(&co, &f->backend), ORTMEM_OK, "%s", ortmem_last_error());
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = limit_bytes;
    cr_assert_eq(ortmem_authority_create(f->backend, &ao, &f->authority), ORTMEM_OK, "%s",
                 ortmem_last_error());
}

static uint64_t owned_bytes(fixture *f)
{
    ortmem_authority_report r;
    r.struct_size = sizeof(r);
    cr_assert_eq(ortmem_authority_report_get(f->authority, &r, NULL, 0), ORTMEM_OK);
    return r.owned_bytes;
}

static void close_fixture(fixture *f)
{
    /* Nothing may be left charged: the ledger is back to zero. */
    cr_expect_eq(owned_bytes(f), 0, "owned %llu bytes at the end",
                 (unsigned long long)owned_bytes(f));
    cr_assert_eq(ortmem_authority_destroy(f->authority), ORTMEM_OK, "%s", ortmem_last_error());
    cr_assert_eq(ortmem_backend_destroy(f->backend), ORTMEM_OK, "%s", ortmem_last_error());
    ortmem_ort_api(f->ort)->ReleaseEnv(f->env);
    ortmem_ort_close(f->ort);
}

static ortmem_ort_kv *make_kv(fixture *f, uint64_t max_context)
{
    OrtMemoryInfo *cpu = NULL;
    const OrtApi *api = ortmem_ort_api(f->ort);
    cr_assert_null(api->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &cpu));
    ortmem_ort_kv_options o = ORTMEM_ORT_KV_OPTIONS_INIT;
    o.layers = TINY_LAYERS;
    o.kv_heads = TINY_HEADS;
    o.head_dim = TINY_HEAD_DIM;
    o.max_context = max_context;
    /* One granule at a time, so committed bytes are exact to compute. */
    o.extents.growth = ORTMEM_EXTENT_GRANULE;
    ortmem_ort_kv *kv = NULL;
    cr_assert_eq(ortmem_ort_kv_create(f->ort, f->authority, cpu, &o, &kv), ORTMEM_OK, "%s",
                 ortmem_last_error());
    api->ReleaseMemoryInfo(cpu);
    return kv;
}

static ortmem_ort_allocator *make_allocator(fixture *f)
{
    ortmem_ort_allocator_options o = ORTMEM_ORT_ALLOCATOR_OPTIONS_INIT;
    o.authority = f->authority;
    o.capacity = (uint64_t)256 << 20;
    ortmem_ort_allocator *a = NULL;
    cr_assert_eq(ortmem_ort_allocator_create(f->ort, NULL, &o, &a), ORTMEM_OK, "%s",
                 ortmem_last_error());
    cr_assert_eq(ortmem_ort_allocator_register(a, f->env), ORTMEM_OK, "%s", ortmem_last_error());
    return a;
}

static void release_allocator(fixture *f, ortmem_ort_allocator *a)
{
    ortmem_ort_allocator_stats s;
    s.struct_size = sizeof(s);
    cr_assert_eq(ortmem_ort_allocator_stats_get(a, &s), ORTMEM_OK);
    cr_expect_eq(s.live, 0, "%llu blocks still live after the session", (unsigned long long)s.live);
    cr_assert_eq(ortmem_ort_allocator_unregister(a, f->env), ORTMEM_OK, "%s", ortmem_last_error());
    cr_assert_eq(ortmem_ort_allocator_destroy(a), ORTMEM_OK, "%s", ortmem_last_error());
}

#define STEPS 24u

Test(ort_adapter, outputs_identical_with_and_without_ortmem)
{
    fixture f;
    open_or_skip(&f, (uint64_t)256 << 20);
    int64_t plain_tokens[STEPS + 1], om_tokens[STEPS + 1];
    static float plain_logits[STEPS * TINY_VOCAB], om_logits[STEPS * TINY_VOCAB];

    ort_decode_run run = {.ort = f.ort,
                          .env = f.env,
                          .model_path = f.model,
                          .steps = STEPS,
                          .first_token = 7,
                          .tokens = plain_tokens,
                          .logits = plain_logits};
    cr_assert_eq(ort_decode_plain(&run), ORTMEM_OK, "%s", ortmem_last_error());

    ortmem_ort_allocator *a = make_allocator(&f);
    ortmem_ort_kv *kv = make_kv(&f, 1024);
    run.use_env_allocators = 1;
    run.kv = kv;
    run.tokens = om_tokens;
    run.logits = om_logits;
    cr_assert_eq(ort_decode_ortmem(&run), ORTMEM_OK, "%s", ortmem_last_error());

    cr_assert_arr_eq(om_tokens, plain_tokens, sizeof(plain_tokens), "greedy tokens differ");
    for (uint32_t step = 0; step < STEPS; step++)
        cr_assert_arr_eq(om_logits + step * TINY_VOCAB, plain_logits + step * TINY_VOCAB,
                         TINY_VOCAB * sizeof(float), "logits differ at step %u", step);
    /* The greedy path is not stuck on one token: the comparison sees variety. */
    int distinct = 0;
    for (uint32_t i = 1; i <= STEPS && !distinct; i++)
        distinct = om_tokens[i] != om_tokens[1];
    cr_expect(distinct, "every step chose token %lld", (long long)om_tokens[1]);

    /* ORT allocated through ortmem, and gave everything back. */
    ortmem_ort_allocator_stats s;
    s.struct_size = sizeof(s);
    cr_assert_eq(ortmem_ort_allocator_stats_get(a, &s), ORTMEM_OK);
    cr_expect_gt(s.allocs, 0, "ORT never called the registered allocator");
    cr_expect_eq(s.allocs, s.frees, "allocs %llu, frees %llu", (unsigned long long)s.allocs,
                 (unsigned long long)s.frees);
    cr_expect_eq(s.failed, 0);
    uint64_t length = 0;
    cr_assert_eq(ortmem_ort_kv_length(kv, &length), ORTMEM_OK);
    cr_expect_eq(length, STEPS);
    cr_assert_eq(ortmem_ort_kv_destroy(kv), ORTMEM_OK, "%s", ortmem_last_error());
    release_allocator(&f, a);
    close_fixture(&f);
}

typedef struct growth_probe {
    ortmem_ort_kv *kv;
    void *bases[KV_BINDINGS];
    uint64_t committed[STEPS * 3];
    int failed;
} growth_probe;

static void probe_step(void *user, uint32_t step)
{
    growth_probe *p = user;
    ortmem_kv_stats s;
    s.struct_size = sizeof(s);
    if (ortmem_ort_kv_stats(p->kv, &s) != ORTMEM_OK) {
        p->failed = 1;
        return;
    }
    p->committed[step] = s.committed_bytes;
    /* In place: no binding ever moves, nothing is copied to grow. */
    for (uint32_t slot = 0; slot < KV_BINDINGS; slot++) {
        ortmem_kv_binding b;
        b.struct_size = sizeof(b);
        if (ortmem_ort_kv_binding(p->kv, slot / 2u, (int)(slot % 2u), &b) != ORTMEM_OK ||
            b.base != p->bases[slot] || b.generation != 0)
            p->failed = 1;
    }
    if (s.growth_copied_bytes != 0 || s.cow_copied_bytes != 0 || s.generations_bumped != 0)
        p->failed = 1;
}

Test(ort_adapter, kv_committed_bytes_follow_live_tokens)
{
    fixture f;
    open_or_skip(&f, (uint64_t)256 << 20);
    /* 64 Ki tokens of context: 16 MiB of VA per binding, committed only
     * where tokens are. */
    const uint64_t max_context = (uint64_t)1 << 16;
    growth_probe probe = {.kv = make_kv(&f, max_context)};
    for (uint32_t slot = 0; slot < KV_BINDINGS; slot++) {
        ortmem_kv_binding b;
        b.struct_size = sizeof(b);
        cr_assert_eq(ortmem_ort_kv_binding(probe.kv, slot / 2u, (int)(slot % 2u), &b), ORTMEM_OK);
        probe.bases[slot] = b.base;
    }
    const uint32_t steps = STEPS * 3; /* 72 tokens: 4.5 granules per binding */
    int64_t tokens[STEPS * 3 + 1];
    static float logits[STEPS * 3 * TINY_VOCAB];
    ort_decode_run run = {.ort = f.ort,
                          .env = f.env,
                          .model_path = f.model,
                          .steps = steps,
                          .first_token = 11,
                          .tokens = tokens,
                          .logits = logits,
                          .kv = probe.kv,
                          .after_step = probe_step,
                          .user = &probe};
    cr_assert_eq(ort_decode_ortmem(&run), ORTMEM_OK, "%s", ortmem_last_error());
    cr_assert_eq(probe.failed, 0, "a binding moved or growth copied bytes");

    for (uint32_t step = 0; step < steps; step++) {
        uint64_t live_tokens = step + 1u;
        uint64_t per_binding =
            (live_tokens * BINDING_TOKEN_BYTES + GRANULE - 1) / GRANULE * GRANULE;
        cr_assert_eq(probe.committed[step], KV_BINDINGS * per_binding,
                     "after %llu tokens: committed %llu, live tokens need %llu",
                     (unsigned long long)live_tokens, (unsigned long long)probe.committed[step],
                     (unsigned long long)(KV_BINDINGS * per_binding));
    }
    cr_assert_gt(probe.committed[steps - 1], probe.committed[0]);
    /* Against the context the cache could hold: a small fraction of it. */
    uint64_t full = KV_BINDINGS * max_context * BINDING_TOKEN_BYTES;
    cr_assert_lt(probe.committed[steps - 1] * 100u, full, "committed %llu of %llu",
                 (unsigned long long)probe.committed[steps - 1], (unsigned long long)full);

    /* Truncating gives back what no live token touches. */
    cr_assert_eq(ortmem_ort_kv_truncate(probe.kv, 16), ORTMEM_OK, "%s", ortmem_last_error());
    ortmem_kv_stats s;
    s.struct_size = sizeof(s);
    cr_assert_eq(ortmem_ort_kv_stats(probe.kv, &s), ORTMEM_OK);
    cr_assert_eq(s.committed_bytes, KV_BINDINGS * GRANULE);
    cr_assert_eq(ortmem_ort_kv_destroy(probe.kv), ORTMEM_OK, "%s", ortmem_last_error());
    close_fixture(&f);
}

Test(ort_adapter, kv_budget_breach_is_a_clean_error)
{
    fixture f;
    /* 16 granules: 4 per binding, 64 tokens; the 65th needs 4 more at once. */
    open_or_skip(&f, 16 * GRANULE);
    ortmem_ort_kv *kv = make_kv(&f, 1024);
    int64_t tokens[81];
    static float logits[80 * TINY_VOCAB];
    ort_decode_run run = {.ort = f.ort,
                          .env = f.env,
                          .model_path = f.model,
                          .steps = 80,
                          .first_token = 5,
                          .tokens = tokens,
                          .logits = logits,
                          .kv = kv};
    cr_assert_eq(ort_decode_ortmem(&run), ORTMEM_E_BUDGET, "%s", ortmem_last_error());
    const char *detail = ortmem_last_error();
    cr_expect(strstr(detail, "requested 16384 bytes") != NULL, "%s", detail);
    cr_expect(strstr(detail, "available 0") != NULL, "%s", detail);
    cr_expect(strstr(detail, "limit 65536") != NULL, "%s", detail);
    /* Nothing changed: the 64 tokens that fit are live, no more. */
    uint64_t length = 0;
    cr_assert_eq(ortmem_ort_kv_length(kv, &length), ORTMEM_OK);
    cr_expect_eq(length, 64);
    cr_expect_eq(owned_bytes(&f), 16 * GRANULE);
    cr_assert_eq(ortmem_ort_kv_destroy(kv), ORTMEM_OK, "%s", ortmem_last_error());
    close_fixture(&f);
}

Test(ort_adapter, allocator_budget_breach_is_a_clean_error)
{
    fixture f;
    /* The model's weights alone are about 540 KiB: 256 KiB cannot hold them. */
    open_or_skip(&f, (uint64_t)256 << 10);
    ortmem_ort_allocator *a = make_allocator(&f);
    int64_t tokens[5];
    static float logits[4 * TINY_VOCAB];
    ort_decode_run run = {.ort = f.ort,
                          .env = f.env,
                          .model_path = f.model,
                          .steps = 4,
                          .first_token = 5,
                          .tokens = tokens,
                          .logits = logits,
                          .use_env_allocators = 1};
    /* A KV cache of its own, on a backend the small budget does not govern. */
    ortmem_backend *kv_backend = NULL;
    ortmem_authority *kv_authority = NULL;
    cr_assert_eq(ortmem_cpu_backend_create(NULL, &kv_backend), ORTMEM_OK);
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = (uint64_t)64 << 20;
    cr_assert_eq(ortmem_authority_create(kv_backend, &ao, &kv_authority), ORTMEM_OK);
    fixture kv_side = f;
    kv_side.authority = kv_authority;
    run.kv = make_kv(&kv_side, 64);

    ortmem_status st = ort_decode_ortmem(&run);
    cr_assert_eq(st, ORTMEM_E_BACKEND, "ORT did not fail: %s %s", ortmem_status_str(st),
                 ortmem_last_error());
    char detail[512];
    ortmem_ort_allocator_last_error(a, detail, sizeof(detail));
    cr_expect(strstr(detail, "refused: ORTMEM_E_BUDGET") != NULL, "%s", detail);
    cr_log_info("allocator: %s; ORT: %s", detail, ortmem_last_error());
    cr_expect(strstr(detail, "requested") != NULL, "%s", detail);
    cr_expect(strstr(detail, "available") != NULL, "%s", detail);
    cr_expect(strstr(detail, "limit 262144") != NULL, "%s", detail);
    ortmem_ort_allocator_stats s;
    s.struct_size = sizeof(s);
    cr_assert_eq(ortmem_ort_allocator_stats_get(a, &s), ORTMEM_OK);
    cr_expect_gt(s.failed, 0);
    /* Nothing leaked: ORT freed every block it got, the ledger empties. */
    cr_expect_eq(s.allocs, s.frees, "allocs %llu, frees %llu", (unsigned long long)s.allocs,
                 (unsigned long long)s.frees);
    release_allocator(&f, a);
    cr_assert_eq(ortmem_ort_kv_destroy(run.kv), ORTMEM_OK, "%s", ortmem_last_error());
    cr_assert_eq(ortmem_authority_destroy(kv_authority), ORTMEM_OK);
    cr_assert_eq(ortmem_backend_destroy(kv_backend), ORTMEM_OK);
    close_fixture(&f);
}

Test(ort_adapter, open_names_a_missing_library)
{
    /* Needs no ONNX Runtime: the loader's refusal is a status with the reason. */
    ortmem_ort *ort = NULL;
    cr_assert_eq(ortmem_ort_open("/nonexistent/libonnxruntime.so", &ort), ORTMEM_E_UNAVAILABLE);
    cr_assert_null(ort);
    cr_expect(strstr(ortmem_last_error(), "/nonexistent/libonnxruntime.so") != NULL, "%s",
              ortmem_last_error());
}

Test(ort_adapter, kv_refuses_memory_of_another_device)
{
    fixture f;
    open_or_skip(&f, (uint64_t)64 << 20);
    const OrtApi *api = ortmem_ort_api(f.ort);
    OrtMemoryInfo *cuda = NULL;
    cr_assert_null(api->CreateMemoryInfo("Cuda", OrtDeviceAllocator, 0, OrtMemTypeDefault, &cuda));
    ortmem_ort_kv_options o = ORTMEM_ORT_KV_OPTIONS_INIT;
    o.layers = TINY_LAYERS;
    o.kv_heads = TINY_HEADS;
    o.head_dim = TINY_HEAD_DIM;
    o.max_context = 64;
    ortmem_ort_kv *kv = NULL;
    cr_assert_eq(ortmem_ort_kv_create(f.ort, f.authority, cuda, &o, &kv), ORTMEM_E_INVALID);
    cr_assert_null(kv);
    cr_expect(strstr(ortmem_last_error(), "CUDA memory but the authority's backend is 'cpu'") !=
                  NULL,
              "%s", ortmem_last_error());
    ortmem_ort_allocator_options ao = ORTMEM_ORT_ALLOCATOR_OPTIONS_INIT;
    ao.authority = f.authority;
    ortmem_ort_allocator *a = NULL;
    cr_assert_eq(ortmem_ort_allocator_create(f.ort, cuda, &ao, &a), ORTMEM_E_INVALID);
    cr_assert_null(a);
    api->ReleaseMemoryInfo(cuda);
    close_fixture(&f);
}

Test(ort_adapter, allocator_destroy_waits_for_live_blocks)
{
    fixture f;
    open_or_skip(&f, (uint64_t)64 << 20);
    ortmem_ort_allocator_options o = ORTMEM_ORT_ALLOCATOR_OPTIONS_INIT;
    o.authority = f.authority;
    o.capacity = (uint64_t)16 << 20;
    o.cache_bytes = 0; /* decommit an emptied extent at once */
    ortmem_ort_allocator *a = NULL;
    cr_assert_eq(ortmem_ort_allocator_create(f.ort, NULL, &o, &a), ORTMEM_OK, "%s",
                 ortmem_last_error());
    OrtAllocator *ort_allocator = ortmem_ort_allocator_ort(a);
    cr_assert_eq(ort_allocator->version, ORT_API_VERSION);
    void *block = ort_allocator->Alloc(ort_allocator, 100000);
    void *reserved = ort_allocator->Reserve(ort_allocator, 3000);
    cr_assert_not_null(block);
    cr_assert_not_null(reserved);
    memset(block, 0x5a, 100000);
    cr_assert_gt(owned_bytes(&f), 0);
    ortmem_ort_allocator_stats s;
    s.struct_size = sizeof(s);
    cr_assert_eq(ortmem_ort_allocator_stats_get(a, &s), ORTMEM_OK);
    cr_expect_eq(s.allocs, 2);
    cr_expect_eq(s.reserves, 1);
    cr_expect_eq(s.live, 2);
    cr_expect_eq(s.live_bytes, 103000);
    /* Live blocks: destroy refuses and changes nothing. */
    cr_assert_eq(ortmem_ort_allocator_destroy(a), ORTMEM_E_BUSY);
    ort_allocator->Free(ort_allocator, block);
    ort_allocator->Free(ort_allocator, reserved);
    ort_allocator->Free(ort_allocator, NULL);
    cr_assert_eq(ortmem_ort_allocator_stats_get(a, &s), ORTMEM_OK);
    cr_expect_eq(s.frees, 2);
    cr_expect_eq(s.live, 0);
    cr_assert_eq(ortmem_ort_allocator_destroy(a), ORTMEM_OK, "%s", ortmem_last_error());
    close_fixture(&f);
}
