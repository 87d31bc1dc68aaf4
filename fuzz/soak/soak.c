/* ortmem-soak: two workloads at the same time, each over a CPU backend
 * wrapped by the fault backend failing each backend call with probability
 * 1/N, each checked for leaks, corruption and budget violations.
 *
 * kvdemo (this file): the kvdemo workload (tools/kvdemo/workload.c: plain
 * requests, forks of the system prompt's sequence and prompts through the
 * prefix cache) on T threads sharing one KV cache. Every call that fails must
 * change nothing: the sequence keeps its length and every live token its
 * byte; the request then retries, or ends. A sampler thread checks the
 * ledger never owns more than the limit. At the end the faults are disarmed,
 * everything is destroyed, and what the backend still owns outside
 * quarantine is a leak.
 *
 * engine (engine_soak.c): the reference engine's decode loop on T threads,
 * a context each, over one model; greedy tokens against a fault-free
 * reference. Skipped, in one line, when the model file is not there.
 *
 *   ortmem-soak [--seconds S] [--threads T] [--one-in N] [--seed X] [--budget-mib M]
 *               [--workload both|kvdemo|engine] [--engine-steps K] [--engine-one-in N]
 *
 * Prints, per workload, operations, injected faults, failed calls, survived
 * faults, bytes leaked, corruptions and budget violations; exits 1 when any
 * of the last three is not 0 in either, 2 when a setup failed. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../tools/kvdemo/kvdemo.h"
#include "engine_soak.h"

#define MAX_CONTEXT 1024
#define GRANULE ((size_t)64 << 10)
#define RETRIES 8
#define PREFILL_CHUNK 64

typedef struct soak {
    ortmem_backend *cpu, *fault;
    ortmem_authority *authority;
    ortmem_kv_cache *cache;
    ortmem_kv_seq *system; /* the system prompt's sequence (forks start from it) */
    bool published;
    kd_workload w;
    uint64_t limit;
    double deadline;
    atomic_bool stop;
    atomic_uint_fast64_t next_request, ops, failed_calls, survived, budget_refusals, corruptions,
        requests_done, requests_dropped, budget_violations, samples;
    char first_corruption[256];
    char first_violation[256];
    pthread_mutex_t lock;
} soak;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The byte token t holds: its owner's (0: the system prompt) pattern. */
static uint8_t pattern(uint64_t owner, uint64_t t)
{
    uint64_t z = (owner + 1) * 0x9E3779B97F4A7C15ULL ^ (t + 1) * 0xBF58476D1CE4E5B9ULL;
    z ^= z >> 29;
    return (uint8_t)(z | 1);
}

typedef struct live {
    ortmem_kv_seq *seq;
    uint64_t len, shared; /* tokens [0, shared) are the system prompt's */
    uint64_t owner;
} live;

static uint8_t expected(const live *lv, uint64_t t)
{
    return pattern(t < lv->shared ? 0 : lv->owner, t);
}

static void corrupt(soak *s, const char *fmt, uint64_t a, uint64_t b)
{
    if (atomic_fetch_add(&s->corruptions, 1) == 0) {
        pthread_mutex_lock(&s->lock);
        snprintf(s->first_corruption, sizeof s->first_corruption, fmt, a, b);
        pthread_mutex_unlock(&s->lock);
    }
}

/* Every live token keeps its byte; the length is what the model says. */
static void verify(soak *s, const live *lv)
{
    uint64_t len = 0;
    atomic_fetch_add(&s->ops, 1);
    if (ortmem_kv_seq_length(lv->seq, &len) != ORTMEM_OK || len != lv->len) {
        corrupt(s, "length %" PRIu64 ", expected %" PRIu64, len, lv->len);
        return;
    }
    ortmem_kv_binding b = {.struct_size = sizeof b};
    atomic_fetch_add(&s->ops, 1);
    if (!lv->len || ortmem_kv_seq_binding(lv->seq, 0, 0, &b) != ORTMEM_OK)
        return;
    const volatile uint8_t *base = b.base;
    for (uint64_t t = 0; t < lv->len; t++)
        if (base[t * b.token_stride] != expected(lv, t)) {
            corrupt(s, "token %" PRIu64 " of a sequence of %" PRIu64 " lost its byte", t, lv->len);
            return;
        }
}

/* A failed call: count it, check it changed nothing. */
static void failed(soak *s, const live *lv, ortmem_status st)
{
    if (st == ORTMEM_E_BUDGET)
        atomic_fetch_add(&s->budget_refusals, 1);
    else
        atomic_fetch_add(&s->failed_calls, 1);
    if (lv && lv->seq) {
        uint64_t before = atomic_load(&s->corruptions);
        verify(s, lv);
        if (atomic_load(&s->corruptions) == before && st != ORTMEM_E_BUDGET)
            atomic_fetch_add(&s->survived, 1);
    }
}

static void write_tokens(soak *s, live *lv, uint64_t from, uint64_t to)
{
    ortmem_kv_binding b = {.struct_size = sizeof b};
    atomic_fetch_add(&s->ops, 1);
    if (ortmem_kv_seq_binding(lv->seq, 0, 0, &b) != ORTMEM_OK) {
        corrupt(s, "no binding at length %" PRIu64 "%" PRIu64, lv->len, 0);
        return;
    }
    volatile uint8_t *base = b.base;
    for (uint64_t t = from; t < to; t++)
        base[t * b.token_stride] = expected(lv, t);
}

/* Grows by n tokens, retrying a failed append; false when it gave up. */
static bool grow(soak *s, live *lv, uint64_t n)
{
    for (int attempt = 0; attempt < RETRIES; attempt++) {
        atomic_fetch_add(&s->ops, 1);
        ortmem_status st = ortmem_kv_seq_append(lv->seq, n);
        if (st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED) {
            write_tokens(s, lv, lv->len, lv->len + n);
            lv->len += n;
            return true;
        }
        failed(s, lv, st);
    }
    return false;
}

static void finish(soak *s, live *lv)
{
    for (int attempt = 0; lv->seq && attempt < 100; attempt++) {
        atomic_fetch_add(&s->ops, 1);
        ortmem_status st = ortmem_kv_seq_destroy(lv->seq);
        if (st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED)
            lv->seq = NULL;
        else
            failed(s, NULL, st);
    }
    if (lv->seq)
        corrupt(s, "a sequence of %" PRIu64 " tokens could not be destroyed%" PRIu64, lv->len, 0);
}

static void run_request(soak *s, uint64_t serial)
{
    const kd_request *q = &s->w.requests[serial % s->w.count];
    live lv = {.owner = serial + 1};
    kd_kind kind = q->kind;
    if (kind == KD_PREFIX && !s->published)
        kind = KD_PLAIN;
    for (int attempt = 0; !lv.seq && attempt < RETRIES; attempt++) {
        ortmem_status st;
        uint64_t reused = 0;
        atomic_fetch_add(&s->ops, 1);
        if (kind == KD_FORK) {
            st = ortmem_kv_seq_fork(s->system, &lv.seq);
            lv.len = lv.shared = s->w.system_tokens;
        } else if (kind == KD_PREFIX) {
            st = ortmem_kv_seq_create_with_prompt(s->cache, q->tokens, q->prompt, &lv.seq, &reused);
            lv.len = reused;
            lv.shared = s->w.system_tokens;
        } else {
            st = ortmem_kv_seq_create(s->cache, &lv.seq);
            lv.len = lv.shared = 0;
        }
        if (st != ORTMEM_OK) {
            lv.seq = NULL;
            failed(s, NULL, st);
        }
    }
    if (!lv.seq) {
        atomic_fetch_add(&s->requests_dropped, 1);
        return;
    }
    verify(s, &lv);
    bool ok = true;
    while (ok && lv.len < q->prompt) {
        uint64_t n = q->prompt - lv.len < PREFILL_CHUNK ? q->prompt - lv.len : PREFILL_CHUNK;
        ok = grow(s, &lv, n);
    }
    for (uint64_t g = 0; ok && g < q->gen; g++) {
        ok = grow(s, &lv, 1);
        /* Now and then a rewind (speculative tokens refused) and regrowth. */
        if (ok && g % 37 == 36 && lv.len > lv.shared + 8) {
            atomic_fetch_add(&s->ops, 1);
            ortmem_status st = ortmem_kv_seq_truncate(lv.seq, lv.len - 4);
            if (st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED)
                lv.len -= 4;
            else
                failed(s, &lv, st);
        }
    }
    verify(s, &lv);
    finish(s, &lv);
    atomic_fetch_add(ok ? &s->requests_done : &s->requests_dropped, 1);
}

static void *worker(void *arg)
{
    soak *s = arg;
    while (!atomic_load(&s->stop) && now() < s->deadline)
        run_request(s, atomic_fetch_add(&s->next_request, 1));
    return NULL;
}

static void *sampler(void *arg)
{
    soak *s = arg;
    while (!atomic_load(&s->stop)) {
        ortmem_authority_report r = {.struct_size = sizeof r};
        if (ortmem_authority_report_get(s->authority, &r, NULL, 0) == ORTMEM_OK) {
            atomic_fetch_add(&s->samples, 1);
            if (r.owned_bytes > s->limit && atomic_fetch_add(&s->budget_violations, 1) == 0)
                snprintf(s->first_violation, sizeof s->first_violation,
                         "owned %" PRIu64 " (KV %" PRIu64 ", pool and quarantine %" PRIu64
                         "), claimed %" PRIu64,
                         r.owned_bytes, r.by_role_owned[ORTMEM_ROLE_KV],
                         r.by_role_owned[ORTMEM_ROLE_OTHER], r.claimed_bytes);
        }
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return NULL;
}

typedef struct engine_run {
    engine_soak_options options;
    engine_soak_result result;
} engine_run;

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--seconds S] [--threads T] [--one-in N] [--seed X] [--budget-mib M]\n"
            "          [--workload both|kvdemo|engine] [--engine-steps K] [--engine-one-in N]\n",
            argv0);
    return 2;
}

static int die(const char *what, ortmem_status st)
{
    fprintf(stderr, "ortmem-soak: %s: %s: %s\n", what, ortmem_status_str(st), ortmem_last_error());
    return 2;
}

/* Retries a setup call the faults may refuse. */
#define SETUP(call)                                                                                \
    do {                                                                                           \
        ortmem_status st_ = ORTMEM_E_BACKEND;                                                      \
        for (int i_ = 0; i_ < 1000 && (st_ = (call)) != ORTMEM_OK; i_++)                           \
            ;                                                                                      \
        if (st_ != ORTMEM_OK)                                                                      \
            return die(#call, st_);                                                                \
    } while (0)

/* The kvdemo workload: prints its figures; 0, 1 (a leak, a corruption or
 * a violation) or 2 (setup failed). */
static int kvdemo_soak(double seconds, unsigned threads, uint64_t one_in, uint64_t seed,
                       uint64_t budget_mib)
{
    static soak s;
    pthread_mutex_init(&s.lock, NULL);
    kd_options o = {.requests = 256,
                    .batch = threads,
                    .max_context = MAX_CONTEXT,
                    .prompt_min = 8,
                    .prompt_max = 384,
                    .gen_min = 4,
                    .gen_max = 192,
                    .system_tokens = 100,
                    .seed = seed};
    char why[200];
    if (!kd_workload_make(&o, &s.w, why, sizeof why)) {
        fprintf(stderr, "ortmem-soak: %s\n", why);
        return 2;
    }

    ortmem_cpu_options co = ORTMEM_CPU_OPTIONS_INIT;
    co.granule = GRANULE;
    ortmem_status st = ortmem_cpu_backend_create(&co, &s.cpu);
    if (st != ORTMEM_OK)
        return die("cpu backend", st);
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    st = ortmem_fault_backend_create(s.cpu, &fo, &s.fault); /* armed once set up */
    if (st != ORTMEM_OK)
        return die("fault backend", st);
    s.limit = budget_mib << 20;
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = s.limit;
    SETUP(ortmem_authority_create(s.fault, &ao, &s.authority));
    ortmem_kv_cache_options ko = ORTMEM_KV_CACHE_OPTIONS_INIT;
    ko.geometry.layers = 4;
    ko.geometry.kv_heads = 2;
    ko.geometry.head_dim = 64;
    ko.geometry.layout = ORTMEM_KV_TOKEN_MAJOR;
    ko.strategy = ORTMEM_KV_STABLE;
    ko.max_context = MAX_CONTEXT;
    ko.prefix_cache = 1;
    SETUP(ortmem_kv_cache_create(s.authority, &ko, &s.cache));
    SETUP(ortmem_kv_seq_create(s.cache, &s.system));
    SETUP(ortmem_kv_seq_append(s.system, s.w.system_tokens));
    live sys = {.seq = s.system, .len = s.w.system_tokens, .shared = s.w.system_tokens};
    write_tokens(&s, &sys, 0, sys.len);
    s.published = ortmem_kv_seq_publish(s.system, s.w.system, s.w.system_tokens) == ORTMEM_OK;

    fo.probability = 1.0 / (double)one_in;
    fo.seed = seed;
    SETUP(ortmem_fault_backend_arm(s.fault, &fo));
    s.deadline = now() + seconds;
    pthread_t *tids = calloc(threads, sizeof *tids), sampler_tid;
    pthread_create(&sampler_tid, NULL, sampler, &s);
    for (unsigned i = 0; i < threads; i++)
        pthread_create(&tids[i], NULL, worker, &s);
    for (unsigned i = 0; i < threads; i++)
        pthread_join(tids[i], NULL);
    atomic_store(&s.stop, true);
    pthread_join(sampler_tid, NULL);
    free(tids);
    verify(&s, &sys);

    uint64_t calls = 0, injected = 0;
    ortmem_fault_backend_counts(s.fault, &calls, &injected);
    ortmem_fault_options off = ORTMEM_FAULT_OPTIONS_INIT;
    SETUP(ortmem_fault_backend_arm(s.fault, &off));
    st = ortmem_kv_seq_destroy(s.system);
    if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED)
        return die("destroy the system sequence", st);
    st = ortmem_kv_cache_destroy(s.cache);
    if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED)
        return die("destroy the cache", st);
    SETUP(ortmem_authority_destroy(s.authority));
    ortmem_vmm_stats vs = {.struct_size = sizeof vs};
    ortmem_backend_stats(s.fault, &vs);
    uint64_t leaked = vs.owned_bytes - vs.quarantined_bytes - vs.pool_bytes;
    ortmem_backend_destroy(s.fault);
    ortmem_backend_destroy(s.cpu);
    size_t requests = s.w.count;
    kd_workload_free(&s.w);

    printf("kvdemo: %.0f s, %u threads, 1 in %" PRIu64 " backend calls failed, limit %" PRIu64
           " MiB\n",
           seconds, threads, one_in, budget_mib);
    printf("  workload          kvdemo's, %zu requests cycled; prefix requests %s\n", requests,
           s.published ? "through the prefix cache" : "plain (publishing failed)");
    printf("  operations        %" PRIu64 " (requests done %" PRIu64 ", dropped %" PRIu64 ")\n",
           (uint64_t)s.ops, (uint64_t)s.requests_done, (uint64_t)s.requests_dropped);
    printf("  backend calls     %" PRIu64 ", injected faults %" PRIu64 "\n", calls, injected);
    printf("  failed calls      %" PRIu64 " (budget refusals %" PRIu64 " apart)\n",
           (uint64_t)s.failed_calls, (uint64_t)s.budget_refusals);
    printf("  survived faults   %" PRIu64 " (a failed call on a live sequence that changed "
           "nothing)\n",
           (uint64_t)s.survived);
    printf("  bytes leaked      %" PRIu64 " (quarantined %" PRIu64 ")\n", leaked,
           vs.quarantined_bytes);
    printf("  corruptions       %" PRIu64 "%s%s\n", (uint64_t)s.corruptions,
           s.corruptions ? ": " : "", s.first_corruption);
    printf("  budget violations %" PRIu64 " in %" PRIu64 " samples%s%s\n",
           (uint64_t)s.budget_violations, (uint64_t)s.samples,
           s.budget_violations ? "; the first: " : "", s.first_violation);
    return leaked || s.corruptions || s.budget_violations ? 1 : 0;
}

static void *engine_thread(void *arg)
{
    engine_run *e = arg;
    engine_soak_run(&e->options, &e->result);
    return NULL;
}

int main(int argc, char **argv)
{
    double seconds = 60;
    unsigned threads = 8, steps = 16;
    uint64_t one_in = 1000, engine_one_in = 0, seed = 1, budget_mib = 48;
    const char *workload = "both";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            threads = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--one-in"))
            one_in = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--seed"))
            seed = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--budget-mib"))
            budget_mib = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--workload"))
            workload = argv[i + 1];
        else if (!strcmp(argv[i], "--engine-steps"))
            steps = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--engine-one-in"))
            engine_one_in = strtoull(argv[i + 1], NULL, 10);
        else
            return usage(argv[0]);
    }
    if (argc % 2 == 0)
        return usage(argv[0]);
    bool run_kvdemo = !strcmp(workload, "both") || !strcmp(workload, "kvdemo");
    bool run_engine = !strcmp(workload, "both") || !strcmp(workload, "engine");
    if (threads < 1 || threads > 64 || one_in < 1 || (!run_kvdemo && !run_engine) || steps < 1 ||
        steps > 64) {
        fprintf(stderr, "ortmem-soak: --threads 1..64, --one-in >= 1, --workload "
                        "both|kvdemo|engine, --engine-steps 1..64\n");
        return 2;
    }

    /* The two workloads run at the same time, each on its own backend. */
    static engine_run e;
    e.options = (engine_soak_options){.seconds = seconds,
                                      .threads = threads,
                                      .one_in = engine_one_in ? engine_one_in : one_in,
                                      .seed = seed,
                                      .steps = steps};
    pthread_t engine_tid;
    if (run_engine)
        pthread_create(&engine_tid, NULL, engine_thread, &e);
    int status = run_kvdemo ? kvdemo_soak(seconds, threads, one_in, seed, budget_mib) : 0;
    if (run_engine) {
        pthread_join(engine_tid, NULL);
        engine_soak_print(&e.options, &e.result);
        if (e.result.setup_died && status == 0)
            status = 2;
        else if (engine_soak_failed(&e.result))
            status = 1;
    }
    return status;
}
