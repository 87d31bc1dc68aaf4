/* ortmem-kvdemo: KV paging under a serving-like workload, once per layout and
 * strategy. Public headers only. */
#ifndef ORTMEM_TOOLS_KVDEMO_H
#define ORTMEM_TOOLS_KVDEMO_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <ortmem/ortmem.h>

#define KD_CONFIGS (3 * 2) /* layouts x {stable, bucket} */

typedef struct kd_options {
    const char *model, *plot;
    bool json, inject_corruption;
    uint64_t granule, requests, batch, max_context, prompt_min, prompt_max, gen_min, gen_max,
        system_tokens, seed, budget, verify_samples;
} kd_options;

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
    double seconds;
    bool prefix_cache;     /* the cache kept published prefixes */
    char prefix_note[600]; /* why not, or what publishing said */
    ortmem_kv_strategy auto_strategy;
    char explain[600]; /* an auto cache on this layout, for this workload */
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

/* Runs the workload on a fresh CPU backend and authority; progress lines go
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
