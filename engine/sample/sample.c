/* Sampling (sample.h). The chain keeps llama.cpp's common sampler order for
 * the filters offered here: repetition penalty, top-k, top-p, min-p, then
 * temperature and one draw. The filters see the penalised logits at
 * temperature 1, as llama.cpp's do; the temperature shapes the draw only.
 * Greedy is the argmax of the penalised logits (the filters always keep the
 * best token, so they cannot change it). The generator is xoshiro256**
 * seeded through splitmix64: a seed repeats this sampler's tokens, not
 * llama.cpp's, whose std::mt19937 stream is not reproduced. */
#include "sample/sample.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Top-p first sorts this many of the best candidates, and twice as many each
 * time those do not reach p: a full sort of the vocabulary is rarely needed. */
#define TOP_P_FIRST_SORT 256

typedef struct candidate {
    int32_t id;
    float logit;
} candidate;

struct eng_sampler {
    eng_sample_params params;
    size_t vocab;
    candidate *cands; /* vocab entries: what is left of the vocabulary */
    double *weights;  /* vocab entries: the draw's unnormalised probabilities */
    uint32_t *mark;   /* per token: == stamp when the token is in this call's window */
    uint32_t stamp;
    uint64_t rng[4];
};

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t xoshiro_next(uint64_t s[4])
{
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double uniform01(uint64_t s[4])
{
    return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53;
}

/* The candidates' order: higher logit first, the lower id first on ties (a
 * total order, so every sort below gives one answer). */
static bool comes_before(candidate a, candidate b)
{
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

/* Heap whose root is the candidate that comes last among its m. */
static void sift_down(candidate *heap, size_t m, size_t i)
{
    for (;;) {
        size_t worst = i, left = 2 * i + 1, right = left + 1;
        if (left < m && comes_before(heap[worst], heap[left]))
            worst = left;
        if (right < m && comes_before(heap[worst], heap[right]))
            worst = right;
        if (worst == i)
            return;
        candidate t = heap[i];
        heap[i] = heap[worst];
        heap[worst] = t;
        i = worst;
    }
}

/* Moves the m best of c[0..n) to the front, sorted; the rest keep no order.
 * O(n log m) in place (qsort may allocate): a heap of the best m so far,
 * replaced at its worst, then emptied worst first into the back of the m. */
static void sort_best(candidate *c, size_t n, size_t m)
{
    if (m > n)
        m = n;
    for (size_t i = m / 2; i-- > 0;)
        sift_down(c, m, i);
    for (size_t j = m; j < n; j++) {
        if (comes_before(c[j], c[0])) {
            candidate t = c[0];
            c[0] = c[j];
            c[j] = t;
            sift_down(c, m, 0);
        }
    }
    for (size_t end = m; end-- > 1;) {
        candidate t = c[0];
        c[0] = c[end];
        c[end] = t;
        sift_down(c, end, 0);
    }
}

static float max_logit(const candidate *c, size_t n, bool sorted)
{
    if (sorted)
        return c[0].logit;
    float best = c[0].logit;
    for (size_t i = 1; i < n; i++)
        if (c[i].logit > best)
            best = c[i].logit;
    return best;
}

/* llama.cpp's rule: a logit at or below zero is multiplied by the penalty, a
 * positive one divided, so a penalty above 1 always makes a token less
 * likely. */
static float penalise(float logit, float penalty)
{
    float v = logit <= 0.0f ? logit * penalty : logit / penalty;
    /* A penalty far from 1 on a huge logit must not make it infinite. */
    return isinf(v) && !isinf(logit) ? copysignf(FLT_MAX, v) : v;
}

static ortmem_status check_params(const eng_sample_params *p, eng_error *err)
{
    if (isnan(p->temperature) || isinf(p->temperature))
        return eng_fail(err, ORTMEM_E_INVALID,
                        "temperature is %g: must be a finite number (<= 0 for greedy)",
                        (double)p->temperature);
    if (isnan(p->top_p) || p->top_p <= 0.0f)
        return eng_fail(err, ORTMEM_E_INVALID, "top_p is %g: must be above 0 (>= 1 turns it off)",
                        (double)p->top_p);
    if (isnan(p->min_p) || p->min_p > 1.0f)
        return eng_fail(err, ORTMEM_E_INVALID, "min_p is %g: must be at most 1 (<= 0 turns it off)",
                        (double)p->min_p);
    if (isnan(p->repeat_penalty) || isinf(p->repeat_penalty) || p->repeat_penalty <= 0.0f)
        return eng_fail(err, ORTMEM_E_INVALID,
                        "repeat_penalty is %g: must be a finite number above 0 (1 turns it off)",
                        (double)p->repeat_penalty);
    if (p->repeat_last_n < 0)
        return eng_fail(err, ORTMEM_E_INVALID,
                        "repeat_last_n is %d: must be 0 or more (0 turns the penalty off)",
                        (int)p->repeat_last_n);
    return ORTMEM_OK;
}

ortmem_status eng_sampler_create(const eng_sample_params *params, size_t vocab, eng_sampler **out,
                                 eng_error *err)
{
    if (!params || !out)
        return eng_fail(err, ORTMEM_E_INVALID, "sampler create: params %p, out %p: need both",
                        (const void *)params, (void *)out);
    if (vocab == 0 || vocab > (size_t)INT32_MAX)
        return eng_fail(err, ORTMEM_E_INVALID,
                        "vocab is %zu: must be 1 to %d (token ids are int32)", vocab, INT32_MAX);
    ortmem_status st = check_params(params, err);
    if (st != ORTMEM_OK)
        return st;
    eng_sampler *s = calloc(1, sizeof *s);
    candidate *cands = calloc(vocab, sizeof *cands);
    double *weights = calloc(vocab, sizeof *weights);
    uint32_t *mark = calloc(vocab, sizeof *mark);
    if (!s || !cands || !weights || !mark) {
        free(s);
        free(cands);
        free(weights);
        free(mark);
        return eng_fail(err, ORTMEM_E_NOMEM, "sampler for a vocabulary of %zu: %zu bytes", vocab,
                        sizeof *s + vocab * (sizeof *cands + sizeof *weights + sizeof *mark));
    }
    s->params = *params;
    s->vocab = vocab;
    s->cands = cands;
    s->weights = weights;
    s->mark = mark;
    uint64_t seed_state = params->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&seed_state);
    *out = s;
    return ORTMEM_OK;
}

void eng_sampler_destroy(eng_sampler *sampler)
{
    if (!sampler)
        return;
    free(sampler->cands);
    free(sampler->weights);
    free(sampler->mark);
    free(sampler);
}

/* Marks the distinct tokens of the penalty's window; false when the penalty
 * is off for this call. */
static bool mark_window(eng_sampler *s, const int32_t *history, size_t start, size_t len)
{
    if (s->params.repeat_penalty == 1.0f || start == len)
        return false;
    if (++s->stamp == 0) {
        memset(s->mark, 0, s->vocab * sizeof *s->mark);
        s->stamp = 1;
    }
    for (size_t i = start; i < len; i++)
        s->mark[history[i]] = s->stamp;
    return true;
}

/* Samples from c[0..n) after the filters: top-k, top-p, min-p, temperature. */
static int32_t filter_and_draw(eng_sampler *s, size_t n)
{
    const eng_sample_params *p = &s->params;
    candidate *c = s->cands;
    bool sorted = false;

    if (p->top_k > 0 && (size_t)p->top_k < n) {
        sort_best(c, n, (size_t)p->top_k);
        n = (size_t)p->top_k;
        sorted = true;
    }

    if (p->top_p < 1.0f && n > 1) {
        /* Probabilities at temperature 1 over what top-k left; the smallest
         * set of the best whose mass reaches top_p is kept. */
        float top = max_logit(c, n, sorted);
        double total = 0.0;
        for (size_t i = 0; i < n; i++)
            total += exp((double)c[i].logit - top);
        double goal = (double)p->top_p * total, mass = 0.0;
        size_t ready = sorted ? n : (n < TOP_P_FIRST_SORT ? n : TOP_P_FIRST_SORT);
        if (!sorted)
            sort_best(c, n, ready);
        size_t keep = n;
        for (size_t i = 0; i < n; i++) {
            if (i == ready) {
                /* Twice as many; the first `ready` stay where they are. */
                ready = n - ready > ready ? 2 * ready : n;
                sort_best(c, n, ready);
            }
            mass += exp((double)c[i].logit - top);
            if (mass >= goal) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
        sorted = true;
    }

    if (p->min_p > 0.0f && n > 1) {
        /* p_i >= min_p * p_max, compared as logits; order is kept. */
        float floor_logit = max_logit(c, n, sorted) + logf(p->min_p);
        size_t kept = 0;
        for (size_t i = 0; i < n; i++)
            if (c[i].logit >= floor_logit)
                c[kept++] = c[i];
        n = kept;
    }

    /* The draw: weights exp((logit - max) / T) stay in [0, 1] for any T > 0. */
    float top = max_logit(c, n, sorted);
    double temperature = p->temperature, total = 0.0;
    for (size_t i = 0; i < n; i++) {
        s->weights[i] = exp(((double)c[i].logit - top) / temperature);
        total += s->weights[i];
    }
    double target = uniform01(s->rng) * total, run = 0.0;
    size_t last_possible = 0;
    for (size_t i = 0; i < n; i++) {
        if (s->weights[i] <= 0.0)
            continue;
        run += s->weights[i];
        last_possible = i;
        if (run > target)
            return c[i].id;
    }
    return c[last_possible].id; /* rounding left target at the very end */
}

ortmem_status eng_sample(eng_sampler *sampler, const float *logits, const int32_t *history,
                         size_t history_len, int32_t *token, eng_error *err)
{
    if (!sampler || !logits || !token || (!history && history_len > 0))
        return eng_fail(err, ORTMEM_E_INVALID,
                        "sample: sampler %p, logits %p, token %p, history %p with %zu ids",
                        (void *)sampler, (const void *)logits, (void *)token, (const void *)history,
                        history_len);
    eng_sampler *s = sampler;
    size_t window = (size_t)s->params.repeat_last_n;
    size_t start = history_len > window ? history_len - window : 0;
    for (size_t i = start; i < history_len; i++)
        if (history[i] < 0 || (size_t)history[i] >= s->vocab)
            return eng_fail(err, ORTMEM_E_INVALID,
                            "history[%zu] is %d: outside the vocabulary of %zu", i, (int)history[i],
                            s->vocab);
    bool any_finite = false;
    for (size_t i = 0; i < s->vocab; i++) {
        if (isnan(logits[i]) || (isinf(logits[i]) && logits[i] > 0))
            return eng_fail(err, ORTMEM_E_INVALID,
                            "logits[%zu] is %g: only numbers and -inf can be sampled", i,
                            (double)logits[i]);
        any_finite |= !isinf(logits[i]);
    }
    if (!any_finite)
        return eng_fail(err, ORTMEM_E_INVALID, "all %zu logits are -inf: no token can be chosen",
                        s->vocab);

    bool penalised = mark_window(s, history, start, history_len);
    float penalty = s->params.repeat_penalty;
    if (s->params.temperature <= 0.0f) {
        size_t best = 0;
        float best_logit = -INFINITY;
        for (size_t i = 0; i < s->vocab; i++) {
            float v = logits[i];
            if (penalised && s->mark[i] == s->stamp)
                v = penalise(v, penalty);
            if (v > best_logit) {
                best_logit = v;
                best = i;
            }
        }
        *token = (int32_t)best;
        return ORTMEM_OK;
    }

    size_t n = 0;
    for (size_t i = 0; i < s->vocab; i++) {
        float v = logits[i];
        if (isinf(v))
            continue; /* -inf: never drawn, so never a candidate */
        if (penalised && s->mark[i] == s->stamp)
            v = penalise(v, penalty);
        s->cands[n++] = (candidate){(int32_t)i, v};
    }
    *token = filter_and_draw(s, n);
    return ORTMEM_OK;
}
