/* Choosing the next token from the logits: greedy, or temperature, top-k,
 * top-p, min-p and a repetition penalty over the recent tokens, with a
 * seeded generator (the same seed, logits and history give the same token). */
#ifndef ENGINE_SAMPLE_SAMPLE_H
#define ENGINE_SAMPLE_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct eng_sample_params {
    float temperature;     /* <= 0: greedy (argmax, lowest id on ties) */
    int32_t top_k;         /* <= 0: off */
    float top_p;           /* >= 1: off */
    float min_p;           /* <= 0: off */
    float repeat_penalty;  /* 1: off; applied as llama.cpp does (divide positive
                                 logits, multiply negative ones) */
    int32_t repeat_last_n; /* history tokens the penalty looks at */
    uint64_t seed;
} eng_sample_params;

#define ENG_SAMPLE_PARAMS_GREEDY                                                                   \
    {                                                                                              \
        0.0f, 0, 1.0f, 0.0f, 1.0f, 64, 0                                                           \
    }

typedef struct eng_sampler eng_sampler;

/* ORTMEM_E_INVALID naming the parameter that is out of range. */
ortmem_status eng_sampler_create(const eng_sample_params *params, size_t vocab, eng_sampler **out,
                                 eng_error *err);
void eng_sampler_destroy(eng_sampler *sampler);
/* Picks a token from logits (vocab floats, not changed) given the history
 * (the ids so far, oldest first). */
ortmem_status eng_sample(eng_sampler *sampler, const float *logits, const int32_t *history,
                         size_t history_len, int32_t *token, eng_error *err);

#endif
