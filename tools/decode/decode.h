/* ortmem-decode's shared parts: the options, the run's result and the
 * helpers main.c (the CPU engine) and gpu.c (the engine on a CUDA device)
 * both use. */
#ifndef TOOLS_DECODE_DECODE_H
#define TOOLS_DECODE_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ortmem/ortmem.h>

#include "sample/sample.h"
#include "tokenizer/tokenizer.h"

#define PROGRAM "ortmem-decode"
#define EXIT_FAILED 1
#define EXIT_USAGE 2

typedef struct options {
    const char *prompt, *model;
    bool chat, stats, json, help;
    uint64_t n_predict, threads, n_ctx;
    eng_sample_params sample;
    bool cuda; /* --device cuda[:N] */
    int cuda_ordinal;
    uint64_t batch;         /* --batch B (cuda): sequences decoded together */
    bool no_graphs;         /* --no-graphs (cuda): launch the step's kernels every time */
    uint64_t device_budget; /* --device-budget: the weights' residency budget; 0 = all resident */
} options;

typedef struct text_buf {
    char *bytes;
    size_t len, cap, flushed;
} text_buf;

typedef struct run_result {
    int32_t *prompt_ids, *ids;
    size_t n_prompt, n_ids;
    text_buf text;
    double prefill_s, decode_s;
    uint64_t decode_tokens;
    ortmem_kv_stats kv;
    uint64_t weights_resident;
    ortmem_kv_strategy strategy;
    ortmem_kv_layout layout;
    char explain[4096];
    char *ledger_table, *ledger_json;
    const char *stop;                 /* why generation ended */
    ortmem_residency_stats residency; /* the weights' residency cache at the end */
    uint64_t bytes_moved_at_load;     /* its bytes_moved once the model was loaded */
    /* --device cuda */
    bool cuda;
    uint64_t batch;
    uint64_t captures, recaptures, replays, kv_checks, kv_driver_calls, kernels_per_step;
} run_result;

double seconds_now(void);
/* The load's progress line on a terminal (eng_load_progress_fn). */
void load_progress(void *user, size_t done, size_t total, uint64_t bytes_done, uint64_t bytes);
bool text_append(text_buf *t, const char *s, size_t n);
/* Writes what is complete since the last flush (all of it when final). */
void text_stream(text_buf *t, bool final);
char *ledger_text(ortmem_authority *a, ortmem_report_format format);
uint64_t peak_rss_bytes(void);
/* The prompt's ids into r (rendered as a chat when asked, BOS first when the
 * model adds one); 0, or the exit status after one line on stderr. */
int tokenize_prompt(const options *o, const eng_tokenizer *tok, run_result *r);

/* A generated token: its id kept in r and its bytes appended to the text
 * (streamed to stdout unless --json); 0, or the exit status after one line
 * on stderr. */
int emit_token(const options *o, const eng_tokenizer *tok, run_result *r, int32_t id);

/* --device cuda: loads the model on the device, decodes and fills r; 0, or
 * the exit status after one line on stderr. */
int gpu_run(const options *o, const char *path, run_result *r);

#endif
