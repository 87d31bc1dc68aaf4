/* The workload: requests with varied prompt and generation lengths, drawn
 * from one seed, and the number of decode steps continuous batching takes
 * for them when nothing is refused. */
#include "kvdemo.h"

#include <stdlib.h>
#include <string.h>

#define KD_VOCAB 151936 /* Qwen2.5's vocabulary: token values look like real ones */

static uint64_t splitmix(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double unit(uint64_t *state)
{
    return (double)(splitmix(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* min .. max, skewed towards short (the product of two uniforms): most
 * requests are short, a few are long, as in serving traffic. */
static uint64_t skewed(uint64_t *state, uint64_t min, uint64_t max)
{
    if (max <= min)
        return min;
    double u = unit(state) * unit(state);
    uint64_t v = min + (uint64_t)(u * (double)(max - min + 1));
    return v > max ? max : v;
}

const char *kd_kind_name(kd_kind kind)
{
    static const char *const names[KD_KIND_COUNT] = {"plain", "fork", "prefix"};
    return (unsigned)kind < KD_KIND_COUNT ? names[kind] : "?";
}

/* Continuous batching without refusals: each step admits requests while
 * fewer than batch are live, appends one token to every live one, and
 * retires those that generated all their tokens. */
static uint64_t count_steps(const kd_workload *w, uint64_t batch)
{
    uint64_t *left = calloc(batch, sizeof *left);
    if (!left)
        return 0;
    uint64_t steps = 0, live = 0;
    size_t next = 0;
    while (next < w->count || live) {
        steps++;
        for (uint64_t i = 0; i < batch && next < w->count; i++) {
            if (!left[i]) {
                left[i] = w->requests[next++].gen;
                live++;
            }
        }
        for (uint64_t i = 0; i < batch; i++) {
            if (left[i] && --left[i] == 0)
                live--;
        }
    }
    free(left);
    return steps;
}

bool kd_workload_make(const kd_options *o, kd_workload *w, char *why, size_t why_size)
{
    memset(w, 0, sizeof *w);
    uint64_t state = o->seed;
    w->system_tokens = o->system_tokens;
    w->count = (size_t)o->requests;
    w->requests = calloc(w->count, sizeof *w->requests);
    w->system = malloc((w->system_tokens ? w->system_tokens : 1) * sizeof *w->system);
    if (!w->requests || !w->system) {
        snprintf(why, why_size, "out of memory for %zu requests", w->count);
        kd_workload_free(w);
        return false;
    }
    for (uint64_t t = 0; t < w->system_tokens; t++)
        w->system[t] = (int32_t)(splitmix(&state) % KD_VOCAB);
    uint64_t live_sum = 0;
    for (size_t i = 0; i < w->count; i++) {
        kd_request *q = &w->requests[i];
        /* Every other request has a prompt of its own; of the rest, half
         * fork the system prompt's sequence, half come through the prefix
         * cache. */
        static const kd_kind cycle[4] = {KD_PLAIN, KD_FORK, KD_PLAIN, KD_PREFIX};
        q->kind = w->system_tokens ? cycle[i % 4] : KD_PLAIN;
        uint64_t shared = q->kind == KD_PLAIN ? 0 : w->system_tokens;
        uint64_t own_max =
            o->prompt_max > shared + o->prompt_min ? o->prompt_max - shared : o->prompt_min;
        q->prompt = shared + skewed(&state, o->prompt_min, own_max);
        if (q->prompt >= o->max_context)
            q->prompt = o->max_context - 1;
        q->gen = skewed(&state, o->gen_min, o->gen_max);
        if (q->prompt + q->gen > o->max_context)
            q->gen = o->max_context - q->prompt;
        q->tokens = malloc((q->prompt + q->gen) * sizeof *q->tokens);
        if (!q->tokens) {
            snprintf(why, why_size, "out of memory for request %zu", i);
            kd_workload_free(w);
            return false;
        }
        for (uint64_t t = 0; t < q->prompt + q->gen; t++)
            q->tokens[t] = t < shared ? w->system[t] : (int32_t)(splitmix(&state) % KD_VOCAB);
        w->kinds[q->kind]++;
        w->prompt_tokens += q->prompt;
        w->gen_tokens += q->gen;
        live_sum += q->prompt + q->gen / 2;
    }
    w->expected_tokens = w->count ? live_sum / w->count : 1;
    w->steps = count_steps(w, o->batch);
    if (!w->steps) {
        snprintf(why, why_size, "out of memory scheduling %zu requests", w->count);
        kd_workload_free(w);
        return false;
    }
    return true;
}

void kd_workload_free(kd_workload *w)
{
    for (size_t i = 0; w->requests && i < w->count; i++)
        free(w->requests[i].tokens);
    free(w->requests);
    free(w->system);
    memset(w, 0, sizeof *w);
}
