/* ortmem-kvdemo: KV paging under a serving-like workload, once per layout and
 * strategy. Public headers only. */
#ifndef ORTMEM_TOOLS_KVDEMO_H
#define ORTMEM_TOOLS_KVDEMO_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <ortmem/ortmem.h>

#define KD_CONFIGS (3 * 2) /* layouts x {stable, bucket} */

typedef enum kd_backend { KD_BACKEND_CPU = 0, KD_BACKEND_CUDA } kd_backend;

typedef struct kd_options {
    const char *model, *plot;
    bool json, inject_corruption;
    kd_backend backend;
    uint64_t device; /* CUDA ordinal */
    const char *io;  /* --io as given, NULL: the backend's default */
    bool copy_io;    /* K/V bytes through the backend's copies (device memory), not stores */
    bool warm;       /* --warm on (default): stable caches keep finished ranges warm */
    bool prewarm;    /* --prewarm on (default): with warm ranges, pre-warm for the batch */
    bool warmup_set, device_set;
    uint64_t granule, requests, batch, max_context, prompt_min, prompt_max, gen_min, gen_max,
        system_tokens, seed, budget, verify_samples;
    uint64_t warmup; /* requests 0 .. warmup-1 are the warm-up */
} kd_options;

/* The backend calls the per-request accounting counts, in report order. */
#define KD_CALL_OPS 5
extern const ortmem_backend_op kd_call_ops[KD_CALL_OPS];
const char *kd_call_name(size_t op);

/* Backend calls from the backend's creation to the last request's end (the
 * teardown is not counted). Every call is charged to the request whose
 * library call made it (create, fork, append, destroy, publishing again) or,
 * outside any request's, to the warm-up (setup, the system prompt's
 * sequence). warmup + after == total per operation; after is what the
 * requests after the warm-up made, max the most one of them made. */
typedef struct kd_calls {
    uint64_t warmup_requests, after_requests; /* after_requests: count - warmup */
    uint64_t total[KD_CALL_OPS], warmup[KD_CALL_OPS], after[KD_CALL_OPS], max[KD_CALL_OPS];
    uint64_t total_all, warmup_all, after_all, max_all; /* the five summed (max: per request) */
    /* Steady state: create + map + unmap + release (the handle calls warm
     * ranges remove) of the requests after the warm-up, and the most one
     * of them made. */
    uint64_t steady_after, steady_max;
    uint64_t steady_none; /* requests after the warm-up that made no handle call */
} kd_calls;

/* The handle calls counted in the steady state (kd_call_ops indices). */
bool kd_call_is_handle(size_t op);

/* plain: a prompt of its own; fork: forks the sequence holding the system
 * prompt, then prefills its own part; prefix: a prompt that starts with the
 * system prompt, created through the prefix cache (what it reuses needs no
 * prefill; without a cache entry it prefills everything). */
typedef enum kd_kind { KD_PLAIN = 0, KD_FORK, KD_PREFIX, KD_KIND_COUNT } kd_kind;

typedef struct kd_request {
    kd_kind kind;
    uint64_t prompt, gen; /* tokens */
    int32_t *tokens;      /* prompt then generated, prompt + gen values */
} kd_request;

typedef struct kd_workload {
    kd_request *requests;
    size_t count;
    int32_t *system; /* the system prompt's tokens */
    uint64_t system_tokens;
    uint64_t steps; /* decode steps when nothing is refused */
    uint64_t kinds[KD_KIND_COUNT];
    uint64_t prompt_tokens, gen_tokens;
    uint64_t expected_tokens; /* mean live tokens of a request: prompt + gen / 2 */
} kd_workload;

/* One row of the timeline: a step's decode, before the finished requests go.
 * live: the cache's live bytes, every sequence's tokens (a shared token in
 * each sequence that holds it); unique: the system prompt counted once, in
 * the sequence that holds it (what no sharing can go below). */
typedef struct kd_sample {
    uint64_t step, sequences, live_tokens, live_bytes, unique_bytes, committed_bytes;
} kd_sample;

typedef struct kd_result {
    ortmem_kv_layout layout;
    ortmem_kv_strategy strategy;
    uint64_t steps, completed;
    uint64_t peak_committed, peak_live, peak_unique, ledger_peak_owned, shared_granules_at_peak;
    uint64_t peak_step;
    double mean_efficiency;
    ortmem_kv_stats stats;    /* the cache's counters at the end of the workload */
    uint64_t budget_refusals; /* the authority's count */
    uint64_t admission_waits, preemptions, dropped, prefix_misses;
    uint64_t tokens_written, tokens_verified, generation_changes, corruptions;
    uint64_t copies; /* copy_async calls of --io copy (writes and reads) */
    kd_calls calls;
    double seconds;
    bool prefix_cache;      /* the cache kept published prefixes */
    char prefix_note[600];  /* why not, or what publishing said */
    uint64_t prewarmed;     /* warm ranges pre-warmed at start (the cache's warm_prewarmed) */
    char prewarm_note[600]; /* what the prewarm calls made, or why one was refused */
    ortmem_kv_strategy auto_strategy;
    char explain[2048]; /* an auto cache on this layout, for this workload */
    char first_corruption[300];
    char error[600]; /* an unexpected library failure ended the run */
    kd_sample *samples;
    size_t sample_count, sample_capacity;
    char *ledger_table, *ledger_json; /* the authority's ledger at the end (malloc) */
} kd_result;

/* workload.c */
bool kd_workload_make(const kd_options *o, kd_workload *w, char *why, size_t why_size);
void kd_workload_free(kd_workload *w);
const char *kd_kind_name(kd_kind kind);

/* The backend o asks for, with o's granule (ORTMEM_E_UNAVAILABLE for CUDA
 * where there is no driver or device). */
ortmem_status kd_backend_create(const kd_options *o, ortmem_backend **out);
const char *kd_backend_label(const kd_options *o, char *buf, size_t size);

/* Runs the workload on a fresh backend and authority; progress lines go
 * to progress (NULL: none). false only when the run could not start (the
 * reason in r->error); failures during the run are in r. */
bool kd_run(const kd_options *o, const ortmem_kv_geometry *geometry, const kd_workload *w,
            ortmem_kv_layout layout, ortmem_kv_strategy strategy, FILE *progress, kd_result *r);
void kd_result_free(kd_result *r);

/* text.c: text wrapped at width columns, each line after indent spaces. */
void kd_put_wrapped(FILE *out, const char *text, int indent, size_t width);

/* plot.c */
bool kd_plot_draw(const kd_result *results, size_t count, int svg_fd, const char *title, FILE *err);

#endif
