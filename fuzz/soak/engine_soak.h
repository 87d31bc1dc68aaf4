/* The soak's engine workload (engine_soak.c): the decode loop of the
 * reference engine (engine/model) on T threads, each with its own context of
 * one model, over a CPU backend wrapped by the fault backend. */
#ifndef ORTMEM_FUZZ_SOAK_ENGINE_SOAK_H
#define ORTMEM_FUZZ_SOAK_ENGINE_SOAK_H

#include <stdbool.h>
#include <stdint.h>

typedef struct engine_soak_options {
    double seconds; /* of decoding, once the model is loaded and the references made */
    unsigned threads;
    uint64_t one_in; /* each backend call fails with probability 1/one_in */
    uint64_t seed;
    unsigned steps; /* greedy tokens per request */
} engine_soak_options;

typedef struct engine_soak_result {
    bool skipped;    /* no model file: why says where it looked */
    bool setup_died; /* setup failed with faults off: why says what */
    char why[512];
    char model[512]; /* the file decoded */
    unsigned prompts;
    uint64_t requests_done, requests_dropped;
    uint64_t ops;          /* engine calls: context create, decode, truncate, destroy */
    uint64_t decode_calls; /* eng_context_decode calls, failed ones included */
    uint64_t tokens;       /* tokens decoded by successful calls (prompts and greedy steps) */
    uint64_t backend_calls, injected;
    uint64_t failed_calls; /* engine calls that returned a failure, budget refusals apart */
    uint64_t budget_refusals;
    uint64_t failed_create, failed_decode, failed_truncate,
        failed_destroy;     /* budget refusals too */
    uint64_t survived;      /* failed decodes or truncates after which the sequence was unchanged */
    uint64_t leaked_bytes;  /* backend bytes owned outside quarantine and the pool at the end */
    uint64_t leaked_mapped; /* backend bytes still mapped outside quarantine at the end */
    uint64_t ledger_left;   /* KV and workspace bytes in the ledger once every context was gone */
    uint64_t ledger_kept;   /* the pool's and the quarantine's bytes in the ledger then */
    uint64_t quarantined_bytes;
    char teardown[256]; /* the model's destroy's failure, when it failed */
    uint64_t
        corruptions; /* a token other than the reference's, or a failed call that changed the sequence */
    char first_corruption[256];
    uint64_t budget_violations, samples;
} engine_soak_result;

/* Loads the default model (engine/common/model_path.h) over a fault-wrapped
 * CPU backend with the faults off, decodes every prompt once for its
 * reference tokens, arms the faults and runs the threads until seconds have
 * passed; then disarms, destroys everything and measures what is left. */
void engine_soak_run(const engine_soak_options *options, engine_soak_result *result);
/* Prints the figures as the kvdemo part does (one line when skipped). */
void engine_soak_print(const engine_soak_options *options, const engine_soak_result *result);
/* A leak, a corruption, a budget violation or a failed teardown. */
bool engine_soak_failed(const engine_soak_result *result);

#endif
