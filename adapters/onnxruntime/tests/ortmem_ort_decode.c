/* ortmem-ort-decode: decodes the tiny test model greedily twice, plainly and
 * on ortmem (allocators registered, KV bound to an ortmem KV cache), says
 * whether the outputs are equal and prints how KV bytes grew against what a
 * model whose present is the concatenated past would have ORT allocate.
 *
 *   ortmem-ort-decode --model M.onnx [--lib libonnxruntime.so] [--device cpu|cuda]
 *                     [--steps N] [--max-context N] [--granule BYTES] [--every N]
 *                     [--per-granule]
 *
 * --lib defaults as the tests find it (ORTMEM_ORT_LIB, ORTMEM_ORT_VENV).
 * --granule sets the CPU backend's granule (default 2 MiB); the CUDA backend
 * uses the driver's. --per-granule grows the KV one granule at a time
 * (ORTMEM_EXTENT_GRANULE) instead of the cache's default geometric extents.
 * Exit status 0 when the outputs are equal. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ort_decode.h"

typedef struct report {
    ortmem_ort_kv *kv;
    uint32_t every, steps;
    uint64_t concat_total;
} report;

static void print_step(void *user, uint32_t step)
{
    report *r = user;
    uint64_t bpt = ortmem_ort_kv_bytes_per_token(r->kv);
    uint64_t live_tokens = step + 1u;
    /* A present of past + new tokens, every layer K and V, allocated each step. */
    r->concat_total += live_tokens * bpt;
    if (live_tokens % r->every != 0 && live_tokens != 1 && live_tokens != r->steps)
        return;
    ortmem_kv_stats s;
    s.struct_size = sizeof(s);
    if (ortmem_ort_kv_stats(r->kv, &s) != ORTMEM_OK)
        return;
    printf("%6" PRIu64 " %12" PRIu64 " %15" PRIu64 " %14" PRIu64 " %16" PRIu64 " %15" PRIu64 "\n",
           live_tokens, s.live_bytes, s.committed_bytes, live_tokens * bpt,
           (2 * live_tokens - 1) * bpt, r->concat_total);
}

static int usage(void)
{
    fprintf(stderr, "usage: ortmem-ort-decode --model M.onnx [--lib L] [--device cpu|cuda] "
                    "[--steps N] [--max-context N] [--granule BYTES] [--every N] "
                    "[--per-granule]\n");
    return 2;
}

static int fail(const char *what)
{
    fprintf(stderr, "ortmem-ort-decode: %s: %s\n", what, ortmem_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    const char *model = getenv("ORTMEM_ORT_MODEL"), *device = "cpu";
    char *lib = ort_decode_library_path();
    uint32_t steps = 64, every = 16;
    uint64_t max_context = 4096, granule = 0;
    int per_granule = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(arg, "--per-granule") == 0) {
            per_granule = 1;
            continue;
        }
        if (value == NULL)
            return usage();
        if (strcmp(arg, "--model") == 0)
            model = value;
        else if (strcmp(arg, "--lib") == 0) {
            free(lib);
            lib = strdup(value);
        } else if (strcmp(arg, "--device") == 0)
            device = value;
        else if (strcmp(arg, "--steps") == 0)
            steps = (uint32_t)strtoul(value, NULL, 10);
        else if (strcmp(arg, "--max-context") == 0)
            max_context = strtoull(value, NULL, 10);
        else if (strcmp(arg, "--granule") == 0)
            granule = strtoull(value, NULL, 10);
        else if (strcmp(arg, "--every") == 0)
            every = (uint32_t)strtoul(value, NULL, 10);
        else
            return usage();
        i++;
    }
    int cuda = strcmp(device, "cuda") == 0;
    if (model == NULL || lib == NULL || steps == 0 || steps >= TINY_POSITIONS || every == 0 ||
        (!cuda && strcmp(device, "cpu") != 0))
        return usage();

    ortmem_ort *ort = NULL;
    if (ortmem_ort_open(lib, &ort) != ORTMEM_OK)
        return fail("open");
    const OrtApi *api = ortmem_ort_api(ort);
    OrtEnv *env = NULL;
    if (ortmem_ort_check(ort, api->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "ortmem", &env),
                         "CreateEnv") != ORTMEM_OK)
        return fail("env");

    int64_t *plain_tokens = calloc(steps + 1u, sizeof(int64_t));
    int64_t *om_tokens = calloc(steps + 1u, sizeof(int64_t));
    float *plain_logits = calloc((size_t)steps * TINY_VOCAB, sizeof(float));
    float *om_logits = calloc((size_t)steps * TINY_VOCAB, sizeof(float));
    if (!plain_tokens || !om_tokens || !plain_logits || !om_logits)
        return fail("calloc");
    ort_decode_run run = {.ort = ort,
                          .env = env,
                          .model_path = model,
                          .cuda = cuda,
                          .steps = steps,
                          .first_token = 7,
                          .tokens = plain_tokens,
                          .logits = plain_logits};
    if (ort_decode_plain(&run) != ORTMEM_OK)
        return fail("plain decode");

    /* The devices' authorities: the process registry's, CPU with the granule asked. */
    ortmem_device_options dopt = ORTMEM_DEVICE_OPTIONS_INIT;
    dopt.granule = cuda ? 0 : granule;
    ortmem_device_id cpu_id, kv_id;
    ortmem_authority *kv_authority = NULL;
    if (ortmem_device_get(ORTMEM_DEVICE_CPU, 0, &dopt, &cpu_id) != ORTMEM_OK)
        return fail("CPU device");
    kv_id = cpu_id;
    if (cuda && ortmem_device_get(ORTMEM_DEVICE_CUDA, 0, NULL, &kv_id) != ORTMEM_OK)
        return fail("CUDA device");
    if (ortmem_device_authority(kv_id, &kv_authority) != ORTMEM_OK)
        return fail("authority");

    OrtMemoryInfo *kv_info = NULL;
    if (ortmem_ort_check(ort,
                         api->CreateMemoryInfo(cuda ? "Cuda" : "Cpu", OrtDeviceAllocator, 0,
                                               OrtMemTypeDefault, &kv_info),
                         "CreateMemoryInfo") != ORTMEM_OK)
        return fail("memory info");
    /* Host memory ORT allocates goes through ortmem; device memory too on CUDA. */
    ortmem_ort_allocator *host_alloc = NULL, *device_alloc = NULL;
    if (ortmem_ort_allocator_create(ort, NULL, NULL, &host_alloc) != ORTMEM_OK ||
        ortmem_ort_allocator_register(host_alloc, env) != ORTMEM_OK)
        return fail("host allocator");
    if (cuda) {
        /* Not every ORT build takes a device allocator from the environment:
         * then ORT keeps its own for device workspace and only the KV is ortmem's. */
        if (ortmem_ort_allocator_create(ort, kv_info, NULL, &device_alloc) != ORTMEM_OK)
            return fail("device allocator");
        if (ortmem_ort_allocator_register(device_alloc, env) != ORTMEM_OK) {
            printf("device allocator: not registered: %s\n", ortmem_last_error());
            ortmem_ort_allocator_destroy(device_alloc);
            device_alloc = NULL;
        }
    }
    ortmem_ort_kv_options ko = ORTMEM_ORT_KV_OPTIONS_INIT;
    ko.layers = TINY_LAYERS;
    ko.kv_heads = TINY_HEADS;
    ko.head_dim = TINY_HEAD_DIM;
    ko.max_context = max_context;
    if (per_granule)
        ko.extents.growth = ORTMEM_EXTENT_GRANULE;
    ortmem_ort_kv *kv = NULL;
    if (ortmem_ort_kv_create(ort, kv_authority, kv_info, &ko, &kv) != ORTMEM_OK)
        return fail("KV cache");

    size_t g = 0;
    ortmem_backend_granule(ortmem_authority_backend(kv_authority), &g);
    printf("ortmem-ort-decode: ONNX Runtime %s, device %s, %u steps, max context %" PRIu64
           ", KV granule %zu, %" PRIu64 " KV bytes per token\n",
           ortmem_ort_version(ort), device, steps, max_context, g,
           ortmem_ort_kv_bytes_per_token(kv));
    printf("%6s %12s %15s %14s %16s %15s\n", "tokens", "live_bytes", "committed_bytes",
           "concat_present", "concat_peak_live", "concat_total");
    report r = {.kv = kv, .every = every, .steps = steps};
    run.use_env_allocators = 1;
    run.kv = kv;
    run.tokens = om_tokens;
    run.logits = om_logits;
    run.after_step = print_step;
    run.user = &r;
    if (ort_decode_ortmem(&run) != ORTMEM_OK)
        return fail("ortmem decode");

    int equal = memcmp(plain_tokens, om_tokens, (steps + 1u) * sizeof(int64_t)) == 0 &&
                memcmp(plain_logits, om_logits, (size_t)steps * TINY_VOCAB * sizeof(float)) == 0;
    printf("outputs: %s (%u steps: greedy tokens and logits, bit for bit, plain ORT vs "
           "ortmem)\n",
           equal ? "equal" : "DIFFERENT", steps);
    if (!equal) {
        double worst = 0;
        long first = -1;
        for (size_t i = 0; i < (size_t)steps * TINY_VOCAB; i++) {
            double d = fabs((double)plain_logits[i] - (double)om_logits[i]);
            if (d > 0 && first < 0)
                first = (long)(i / TINY_VOCAB);
            worst = d > worst ? d : worst;
        }
        printf("first step whose logits differ: %ld; largest difference %g\n", first, worst);
    }
    printf("tokens:");
    for (uint32_t i = 0; i <= steps && i < 24; i++)
        printf(" %" PRId64, om_tokens[i]);
    printf("%s\n", steps >= 24 ? " ..." : "");
    ortmem_ort_allocator *allocs[2] = {host_alloc, device_alloc};
    for (int i = 0; i < 2; i++) {
        if (allocs[i] == NULL)
            continue;
        ortmem_ort_allocator_stats s;
        s.struct_size = sizeof(s);
        ortmem_ort_allocator_stats_get(allocs[i], &s);
        printf("allocator %s: allocs %" PRIu64 " (reserves %" PRIu64 "), frees %" PRIu64
               ", failed %" PRIu64 ", live %" PRIu64 ", peak %" PRIu64 " bytes, committed %" PRIu64
               " bytes\n",
               i == 0 ? "Cpu" : "Cuda", s.allocs, s.reserves, s.frees, s.failed, s.live,
               s.peak_bytes, s.committed_bytes);
    }

    int rc = equal ? 0 : 1;
    if (ortmem_ort_kv_destroy(kv) != ORTMEM_OK)
        rc = fail("KV destroy");
    for (int i = 0; i < 2; i++)
        if (allocs[i] != NULL && (ortmem_ort_allocator_unregister(allocs[i], env) != ORTMEM_OK ||
                                  ortmem_ort_allocator_destroy(allocs[i]) != ORTMEM_OK))
            rc = fail("allocator destroy");
    api->ReleaseMemoryInfo(kv_info);
    api->ReleaseEnv(env);
    ortmem_ort_close(ort);
    ortmem_process_teardown();
    free(plain_tokens);
    free(om_tokens);
    free(plain_logits);
    free(om_logits);
    free(lib);
    return rc;
}
