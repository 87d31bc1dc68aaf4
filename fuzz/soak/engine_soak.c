/* The soak's engine workload: one model (the default SmolLM2 file) over a
 * CPU backend wrapped by the fault backend; T threads, each creating its own
 * context, decoding a prompt and then greedy tokens, rewinding two of them
 * half-way and decoding them again, and destroying the context. Before the
 * faults are armed every prompt is decoded once for its reference tokens.
 *
 * Checks: every greedy token equals the reference's (a difference is a
 * corruption); a failed decode or truncate leaves the context's length and
 * the KV sequence's live tokens as they were, and is retried; a sampler
 * thread counts the moments the ledger owns more than its limit (which each
 * context raises by its KV cache's bound); once every context is destroyed
 * the KV owns nothing in the ledger, and once the model is destroyed the
 * backend owns and maps nothing outside quarantine and its pool. */
#include "engine_soak.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ortmem/ortmem.h>

#include "common/model_path.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#define N_CTX 128
#define N_BATCH 16 /* the longer prompts decode in several passes */
#define GRANULE 4096
#define RETRIES 8
#define MAX_PROMPT 64
#define MAX_STEPS 64

static const char *const prompt_texts[] = {
    "The capital of France is",
    "def fibonacci(n):",
    "Write a short poem about the sea.",
    "List three prime numbers greater than one hundred:",
    "Once upon a time, in a small village at the foot of a mountain, there lived a clockmaker",
    "Memory for a language model is managed in pages because",
};
#define PROMPTS (sizeof prompt_texts / sizeof *prompt_texts)

typedef enum call_kind {
    CALL_CREATE,
    CALL_DECODE,
    CALL_TRUNCATE,
    CALL_DESTROY,
    CALL_KINDS
} call_kind;

typedef struct prompt {
    int32_t ids[MAX_PROMPT];
    size_t n;
    int32_t reference[MAX_STEPS];
} prompt;

typedef struct esoak {
    const engine_soak_options *o;
    engine_soak_result *r;
    eng_model *model;
    ortmem_authority *authority;
    uint32_t vocab;
    prompt prompts[PROMPTS];
    double deadline;
    atomic_bool stop;
    atomic_uint_fast64_t next_request, ops, decode_calls, tokens, failed_calls, budget_refusals,
        survived, corruptions, done, dropped, violations, samples;
    atomic_uint_fast64_t failed_by[CALL_KINDS];
    pthread_mutex_t lock;
} esoak;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The largest logit's id, the lowest on ties. */
static int32_t argmax(const float *logits, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return (int32_t)best;
}

__attribute__((format(printf, 2, 3))) static void corrupt(esoak *s, const char *fmt, ...)
{
    if (atomic_fetch_add(&s->corruptions, 1) != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&s->lock);
    vsnprintf(s->r->first_corruption, sizeof s->r->first_corruption, fmt, ap);
    pthread_mutex_unlock(&s->lock);
    va_end(ap);
}

/* The tokens the KV sequence holds, as the library counts them. */
static uint64_t kv_live_tokens(eng_context *c)
{
    ortmem_kv_stats ks;
    eng_error err = {0};
    return eng_context_kv_stats(c, &ks, &err) == ORTMEM_OK ? ks.live_tokens : UINT64_MAX;
}

/* A failed call on c: count it, check it changed nothing. */
static void failed(esoak *s, call_kind kind, eng_context *c, uint64_t before, ortmem_status st)
{
    static const char *const what[CALL_KINDS] = {"context create", "decode", "truncate",
                                                 "context destroy"};
    atomic_fetch_add(&s->failed_by[kind], 1);
    if (st == ORTMEM_E_BUDGET)
        atomic_fetch_add(&s->budget_refusals, 1);
    else
        atomic_fetch_add(&s->failed_calls, 1);
    if (!c)
        return;
    uint64_t length = eng_context_length(c), live = kv_live_tokens(c);
    if (length != before || live != before)
        corrupt(s,
                "a failed %s (%s) changed the sequence: length %" PRIu64 ", KV %" PRIu64
                " tokens, was %" PRIu64,
                what[kind], ortmem_status_str(st), length, live, before);
    else if (st != ORTMEM_E_BUDGET)
        atomic_fetch_add(&s->survived, 1);
}

/* Decodes n tokens, retrying a failed call; false when it gave up. */
static bool decode(esoak *s, eng_context *c, const int32_t *tokens, size_t n)
{
    for (int attempt = 0; attempt < RETRIES; attempt++) {
        const uint64_t before = eng_context_length(c);
        eng_error err = {0};
        atomic_fetch_add(&s->ops, 1);
        atomic_fetch_add(&s->decode_calls, 1);
        ortmem_status st = eng_context_decode(c, tokens, n, &err);
        if (st == ORTMEM_OK) {
            atomic_fetch_add(&s->tokens, n);
            if (eng_context_length(c) != before + n || kv_live_tokens(c) != before + n)
                corrupt(
                    s, "a decode of %zu tokens after %" PRIu64 " left %" PRIu64 " (KV %" PRIu64 ")",
                    n, before, eng_context_length(c), kv_live_tokens(c));
            return true;
        }
        failed(s, CALL_DECODE, c, before, st);
    }
    return false;
}

static bool truncate_to(esoak *s, eng_context *c, uint64_t length)
{
    for (int attempt = 0; attempt < RETRIES; attempt++) {
        const uint64_t before = eng_context_length(c);
        eng_error err = {0};
        atomic_fetch_add(&s->ops, 1);
        ortmem_status st = eng_context_truncate(c, length, &err);
        if (st == ORTMEM_OK)
            return true;
        failed(s, CALL_TRUNCATE, c, before, st);
    }
    return false;
}

static void run_request(esoak *s, uint64_t serial)
{
    const prompt *p = &s->prompts[serial % PROMPTS];
    eng_context_options co = {N_CTX, N_BATCH, 1};
    eng_context *c = NULL;
    for (int attempt = 0; !c && attempt < RETRIES; attempt++) {
        eng_error err = {0};
        atomic_fetch_add(&s->ops, 1);
        ortmem_status st = eng_context_create(s->model, &co, &c, &err);
        if (st != ORTMEM_OK) {
            c = NULL;
            failed(s, CALL_CREATE, NULL, 0, st);
        }
    }
    if (!c) {
        atomic_fetch_add(&s->dropped, 1);
        return;
    }
    bool ok = decode(s, c, p->ids, p->n);
    const unsigned steps = s->o->steps, rewind_at = steps / 2;
    for (unsigned step = 0; ok && step < steps; step++) {
        /* Half-way, the last two tokens are refused and decoded again: the
         * logits must then predict the same token. */
        if (step == rewind_at && step >= 2)
            ok = truncate_to(s, c, eng_context_length(c) - 2) &&
                 decode(s, c, &p->reference[step - 2], 1) &&
                 decode(s, c, &p->reference[step - 1], 1);
        if (!ok)
            break;
        const float *logits = eng_context_logits(c);
        int32_t token = logits ? argmax(logits, s->vocab) : -1;
        if (token != p->reference[step]) {
            corrupt(s,
                    "prompt %zu, step %u: token %" PRId32 " where the reference has %" PRId32
                    " (-1: no logits)",
                    (size_t)(p - s->prompts), step, token, p->reference[step]);
            break;
        }
        if (step + 1 < steps)
            ok = decode(s, c, &token, 1);
    }
    eng_error err = {0};
    atomic_fetch_add(&s->ops, 1);
    ortmem_status st = eng_context_destroy(c, &err);
    if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED)
        failed(s, CALL_DESTROY, NULL, 0, st); /* the context is gone regardless */
    atomic_fetch_add(ok ? &s->done : &s->dropped, 1);
}

static void *worker(void *arg)
{
    esoak *s = arg;
    while (!atomic_load(&s->stop) && now() < s->deadline)
        run_request(s, atomic_fetch_add(&s->next_request, 1));
    return NULL;
}

static void *sampler(void *arg)
{
    esoak *s = arg;
    while (!atomic_load(&s->stop)) {
        ortmem_authority_report r = {.struct_size = sizeof r};
        if (ortmem_authority_report_get(s->authority, &r, NULL, 0) == ORTMEM_OK) {
            atomic_fetch_add(&s->samples, 1);
            if (r.owned_bytes > r.limit_bytes)
                atomic_fetch_add(&s->violations, 1);
        }
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return NULL;
}

/* The reference: each prompt decoded with the faults off, as the workers
 * decode it (same context options, the same calls). */
static ortmem_status make_references(esoak *s, eng_error *err)
{
    eng_tokenizer *tok = NULL;
    ortmem_status st = eng_tokenizer_create(eng_model_gguf(s->model), &tok, err);
    for (size_t i = 0; st == ORTMEM_OK && i < PROMPTS; i++) {
        prompt *p = &s->prompts[i];
        st = eng_tokenize(tok, prompt_texts[i], strlen(prompt_texts[i]), false, p->ids, MAX_PROMPT,
                          &p->n, err);
        eng_context_options co = {N_CTX, N_BATCH, 1};
        eng_context *c = NULL;
        if (st == ORTMEM_OK)
            st = eng_context_create(s->model, &co, &c, err);
        if (st == ORTMEM_OK)
            st = eng_context_decode(c, p->ids, p->n, err);
        for (unsigned step = 0; st == ORTMEM_OK && step < s->o->steps; step++) {
            p->reference[step] = argmax(eng_context_logits(c), s->vocab);
            if (step + 1 < s->o->steps)
                st = eng_context_decode(c, &p->reference[step], 1, err);
        }
        ortmem_status dst = eng_context_destroy(c, err);
        st = st == ORTMEM_OK ? dst : st;
    }
    eng_tokenizer_destroy(tok);
    return st;
}

static void setup_died(engine_soak_result *r, const char *what, const char *detail)
{
    r->setup_died = true;
    snprintf(r->why, sizeof r->why, "%s: %s", what, detail);
}

void engine_soak_run(const engine_soak_options *o, engine_soak_result *r)
{
    memset(r, 0, sizeof *r);
    eng_error err = {0};
    if (eng_default_model_path(r->model, sizeof r->model, &err) != ORTMEM_OK) {
        r->skipped = true;
        snprintf(r->why, sizeof r->why, "no model file: %s", err.message);
        return;
    }
    if (o->steps < 1 || o->steps > MAX_STEPS) {
        setup_died(r, "steps", "1 to 64 greedy tokens per request");
        return;
    }
    static esoak s; /* the prompts' tokens and the counters, shared by the threads */
    memset(&s, 0, sizeof s);
    s.o = o;
    s.r = r;
    pthread_mutex_init(&s.lock, NULL);

    ortmem_backend *cpu = NULL, *fault = NULL;
    ortmem_cpu_options cpo = ORTMEM_CPU_OPTIONS_INIT;
    cpo.granule = GRANULE;
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT; /* armed once set up */
    if (ortmem_cpu_backend_create(&cpo, &cpu) != ORTMEM_OK ||
        ortmem_fault_backend_create(cpu, &fo, &fault) != ORTMEM_OK) {
        setup_died(r, "the backends", ortmem_last_error());
        ortmem_backend_destroy(cpu);
        return;
    }
    eng_model_options mo = {0};
    mo.backend = fault;
    if (eng_model_load(r->model, &mo, &s.model, &err) != ORTMEM_OK) {
        setup_died(r, "the model", err.message);
        goto out;
    }
    s.authority = eng_model_authority(s.model);
    s.vocab = eng_model_hparams(s.model)->n_vocab;
    if (make_references(&s, &err) != ORTMEM_OK) {
        setup_died(r, "the reference decode", err.message);
        goto out;
    }
    r->prompts = PROMPTS;

    fo.probability = 1.0 / (double)o->one_in;
    fo.seed = o->seed;
    ortmem_fault_backend_arm(fault, &fo);
    s.deadline = now() + o->seconds;
    pthread_t *tids = calloc(o->threads, sizeof *tids), sampler_tid;
    pthread_create(&sampler_tid, NULL, sampler, &s);
    for (unsigned i = 0; i < o->threads; i++)
        pthread_create(&tids[i], NULL, worker, &s);
    for (unsigned i = 0; i < o->threads; i++)
        pthread_join(tids[i], NULL);
    atomic_store(&s.stop, true);
    pthread_join(sampler_tid, NULL);
    free(tids);

    ortmem_fault_backend_counts(fault, &r->backend_calls, &r->injected);
    ortmem_fault_options off = ORTMEM_FAULT_OPTIONS_INIT;
    ortmem_fault_backend_arm(fault, &off);
    /* Every context is gone: the ledger holds the weights, and the pool's
     * and the quarantine's granules (role "other"), never reused. */
    ortmem_authority_report ar = {.struct_size = sizeof ar};
    if (ortmem_authority_report_get(s.authority, &ar, NULL, 0) == ORTMEM_OK) {
        r->ledger_left = ar.by_role_owned[ORTMEM_ROLE_KV] + ar.by_role_owned[ORTMEM_ROLE_WORKSPACE];
        r->ledger_kept = ar.by_role_owned[ORTMEM_ROLE_OTHER];
    }
    ortmem_status st = eng_model_destroy(s.model, &err);
    s.model = NULL;
    /* The model's destroy names the bytes the ledger still owns: the
     * quarantine's are expected there. */
    if (st != ORTMEM_OK && !(st == ORTMEM_E_STATE && r->ledger_kept && !r->ledger_left))
        snprintf(r->teardown, sizeof r->teardown, "the model's destroy: %s", err.message);

    r->requests_done = s.done;
    r->requests_dropped = s.dropped;
    r->ops = s.ops;
    r->decode_calls = s.decode_calls;
    r->tokens = s.tokens;
    r->failed_calls = s.failed_calls;
    r->budget_refusals = s.budget_refusals;
    r->failed_create = s.failed_by[CALL_CREATE];
    r->failed_decode = s.failed_by[CALL_DECODE];
    r->failed_truncate = s.failed_by[CALL_TRUNCATE];
    r->failed_destroy = s.failed_by[CALL_DESTROY];
    r->survived = s.survived;
    r->corruptions = s.corruptions;
    r->budget_violations = s.violations;
    r->samples = s.samples;
out:
    if (s.model)
        eng_model_destroy(s.model, &err);
    ortmem_vmm_stats vs = {.struct_size = sizeof vs};
    if (ortmem_backend_stats(fault, &vs) == ORTMEM_OK) {
        r->leaked_bytes = vs.owned_bytes - vs.quarantined_bytes - vs.pool_bytes;
        r->leaked_mapped = vs.mapped_bytes - vs.quarantined_mapped_bytes;
        r->quarantined_bytes = vs.quarantined_bytes;
    }
    ortmem_backend_destroy(fault);
    ortmem_backend_destroy(cpu);
    pthread_mutex_destroy(&s.lock);
}

void engine_soak_print(const engine_soak_options *o, const engine_soak_result *r)
{
    if (r->skipped) {
        printf("engine: skipped: %s\n", r->why);
        return;
    }
    if (r->setup_died) {
        printf("engine: setup failed with the faults off: %s\n", r->why);
        return;
    }
    printf("engine: %.0f s, %u threads (a context each), 1 in %" PRIu64 " backend calls failed\n",
           o->seconds, o->threads, o->one_in);
    printf("  workload          %s: %u prompts cycled, %u greedy tokens each, 2 rewound "
           "half-way\n",
           r->model, r->prompts, o->steps);
    printf("  operations        %" PRIu64 " (decode calls %" PRIu64 ", tokens %" PRIu64
           "; requests done %" PRIu64 ", dropped %" PRIu64 ")\n",
           r->ops, r->decode_calls, r->tokens, r->requests_done, r->requests_dropped);
    printf("  backend calls     %" PRIu64 ", injected faults %" PRIu64 "\n", r->backend_calls,
           r->injected);
    printf("  failed calls      %" PRIu64 ", budget refusals %" PRIu64 " (both, by call: context "
           "create %" PRIu64 ", decode %" PRIu64 ", truncate %" PRIu64 ", context destroy %" PRIu64
           ")\n",
           r->failed_calls, r->budget_refusals, r->failed_create, r->failed_decode,
           r->failed_truncate, r->failed_destroy);
    printf("  survived faults   %" PRIu64 " (a failed decode or truncate that left the sequence "
           "as it was)\n",
           r->survived);
    printf("  bytes leaked      %" PRIu64 " (mapped %" PRIu64 "; the ledger after the contexts: KV "
           "%" PRIu64 ", pool and quarantine %" PRIu64 "; quarantined %" PRIu64 ")%s%s\n",
           r->leaked_bytes, r->leaked_mapped, r->ledger_left, r->ledger_kept, r->quarantined_bytes,
           r->teardown[0] ? "; " : "", r->teardown);
    printf("  corruptions       %" PRIu64 "%s%s\n", r->corruptions, r->corruptions ? ": " : "",
           r->first_corruption);
    printf("  budget violations %" PRIu64 " in %" PRIu64 " samples\n", r->budget_violations,
           r->samples);
}

bool engine_soak_failed(const engine_soak_result *r)
{
    return r->leaked_bytes || r->leaked_mapped || r->ledger_left || r->teardown[0] ||
           r->corruptions || r->budget_violations;
}
