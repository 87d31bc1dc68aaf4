/* engine/sample: greedy ties, each filter's kept set and renormalised
 * frequencies over many draws, the chain's order, the penalty's sign rule,
 * seed determinism and the parameters refused. Every draw comes from a fixed
 * seed, so the counts below are the same on every run; the chi-square bounds
 * (0.1% critical values) are what a correct sampler passes. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "sample/sample.h"

#define DRAWS 20000
#define SMALL_VOCAB 8

/* The crafted distribution: by id, ranked 1, 4, 3, 6, 0, 7, 2, 5. */
static const double crafted_p[SMALL_VOCAB] = {0.08, 0.30, 0.03, 0.15, 0.25, 0.02, 0.12, 0.05};

static void crafted_logits(float *logits)
{
    for (int i = 0; i < SMALL_VOCAB; i++)
        logits[i] = (float)log(crafted_p[i]);
}

static eng_sample_params sampling(float temperature)
{
    eng_sample_params p = ENG_SAMPLE_PARAMS_GREEDY;
    p.temperature = temperature;
    p.seed = 20261203;
    return p;
}

static eng_sampler *make(const eng_sample_params *p, size_t vocab)
{
    eng_sampler *s = NULL;
    eng_error err = {0};
    cr_assert_eq(eng_sampler_create(p, vocab, &s, &err), ORTMEM_OK, "%s", err.message);
    return s;
}

static int32_t pick(eng_sampler *s, const float *logits, const int32_t *history, size_t len)
{
    int32_t token = -1;
    eng_error err = {0};
    cr_assert_eq(eng_sample(s, logits, history, len, &token, &err), ORTMEM_OK, "%s", err.message);
    return token;
}

static void draw_n_counts(int draws, const eng_sample_params *p, const float *logits, size_t vocab,
                          const int32_t *history, size_t len, unsigned *counts)
{
    eng_sampler *s = make(p, vocab);
    memset(counts, 0, vocab * sizeof *counts);
    for (int i = 0; i < draws; i++) {
        int32_t t = pick(s, logits, history, len);
        cr_assert(t >= 0 && (size_t)t < vocab, "token %d", t);
        counts[t]++;
    }
    eng_sampler_destroy(s);
}

static void draw_counts(const eng_sample_params *p, const float *logits, size_t vocab,
                        const int32_t *history, size_t len, unsigned *counts)
{
    draw_n_counts(DRAWS, p, logits, vocab, history, len, counts);
}

/* Chi-square critical values at 0.1% by degrees of freedom 1..7. */
static const double chi2_999[8] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32};

/* The tokens drawn are exactly `kept`, at frequencies that fit the crafted
 * probabilities renormalised over kept at the given temperature. */
static void assert_kept_and_fit(const unsigned *counts, const bool *kept, double temperature)
{
    double q[SMALL_VOCAB], total = 0.0;
    int n_kept = 0;
    for (int i = 0; i < SMALL_VOCAB; i++) {
        q[i] = kept[i] ? pow(crafted_p[i], 1.0 / temperature) : 0.0;
        total += q[i];
        n_kept += kept[i];
    }
    double chi2 = 0.0;
    for (int i = 0; i < SMALL_VOCAB; i++) {
        if (!kept[i]) {
            cr_assert_eq(counts[i], 0u, "token %d is filtered out yet drawn %u times", i,
                         counts[i]);
            continue;
        }
        cr_assert_gt(counts[i], 0u, "token %d is kept yet never drawn", i);
        double expected = DRAWS * q[i] / total;
        chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
    }
    cr_assert(n_kept >= 2 && n_kept <= 8);
    cr_assert_lt(chi2, chi2_999[n_kept - 1], "chi-square %.2f over %d kept tokens", chi2, n_kept);
}

static void kept_set(bool *kept, const int *ids, int n)
{
    memset(kept, 0, SMALL_VOCAB * sizeof *kept);
    for (int i = 0; i < n; i++)
        kept[ids[i]] = true;
}

Test(engine_sample_greedy, argmax_with_lowest_id_on_ties)
{
    eng_sample_params p = ENG_SAMPLE_PARAMS_GREEDY;
    eng_sampler *s = make(&p, 5);
    cr_assert_eq(pick(s, (const float[]){1, 5, 3, 5, 5}, NULL, 0), 1);
    cr_assert_eq(pick(s, (const float[]){2, 2, 2, 2, 2}, NULL, 0), 0);
    cr_assert_eq(pick(s, (const float[]){-INFINITY, -3, -1, -1, -7}, NULL, 0), 2);
    cr_assert_eq(pick(s, (const float[]){-INFINITY, -INFINITY, -INFINITY, -INFINITY, -9}, NULL, 0),
                 4);
    eng_sampler_destroy(s);
}

/* Greedy picks the same token whatever the seed: it draws nothing. */
Test(engine_sample_greedy, ignores_the_seed)
{
    float logits[SMALL_VOCAB];
    crafted_logits(logits);
    for (uint64_t seed = 0; seed < 4; seed++) {
        eng_sample_params p = ENG_SAMPLE_PARAMS_GREEDY;
        p.seed = seed;
        p.top_k = 3;
        eng_sampler *s = make(&p, SMALL_VOCAB);
        for (int i = 0; i < 10; i++)
            cr_assert_eq(pick(s, logits, NULL, 0), 1);
        eng_sampler_destroy(s);
    }
}

/* llama.cpp's rule: positive logits are divided by the penalty, zero and
 * negative ones multiplied, once per distinct token in the window. */
Test(engine_sample_penalty, sign_rule)
{
    eng_sample_params p = ENG_SAMPLE_PARAMS_GREEDY;
    p.repeat_penalty = 2.0f;
    eng_sampler *s = make(&p, 2);
    const int32_t saw0[] = {0};
    /* 3 / 2 = 1.5 < 2: dividing demotes token 0 (multiplying would keep it) */
    cr_assert_eq(pick(s, (const float[]){3.0f, 2.0f}, saw0, 1), 1);
    /* -1 * 2 = -2 < -1.5: multiplying demotes it (dividing, -0.5, would not) */
    cr_assert_eq(pick(s, (const float[]){-1.0f, -1.5f}, saw0, 1), 1);
    /* 0 stays 0 > -0.1 */
    cr_assert_eq(pick(s, (const float[]){0.0f, -0.1f}, saw0, 1), 0);
    /* not in the history: untouched */
    cr_assert_eq(pick(s, (const float[]){3.0f, 2.0f}, (const int32_t[]){1}, 1), 0);
    /* three repeats count once: 3 / 2 = 1.5 > 1.4 (three times would be 0.375) */
    cr_assert_eq(pick(s, (const float[]){3.0f, 1.4f}, (const int32_t[]){0, 0, 0}, 3), 0);
    eng_sampler_destroy(s);

    p.repeat_penalty = 0.5f; /* below 1 it favours what was seen */
    s = make(&p, 2);
    cr_assert_eq(pick(s, (const float[]){1.0f, 1.5f}, saw0, 1), 0);
    cr_assert_eq(pick(s, (const float[]){-1.0f, -0.6f}, saw0, 1), 0);
    eng_sampler_destroy(s);
}

Test(engine_sample_penalty, looks_at_the_last_repeat_last_n_only)
{
    eng_sample_params p = ENG_SAMPLE_PARAMS_GREEDY;
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 2;
    eng_sampler *s = make(&p, 3);
    const float logits[] = {3.0f, 2.5f, 2.0f};
    /* token 0 is older than the last two: not penalised */
    cr_assert_eq(pick(s, logits, (const int32_t[]){0, 1, 1}, 3), 0);
    cr_assert_eq(pick(s, logits, (const int32_t[]){1, 0, 1}, 3), 2);
    eng_sampler_destroy(s);
    p.repeat_last_n = 0; /* off */
    s = make(&p, 3);
    cr_assert_eq(pick(s, logits, (const int32_t[]){0}, 1), 0);
    eng_sampler_destroy(s);
}

/* In a draw the penalty reshapes the distribution: logits ln 4 and 0 give
 * 0.8 and 0.2; token 0 penalised by 2 becomes ln 2, so 2/3 and 1/3. */
Test(engine_sample_penalty, reshapes_the_draw)
{
    eng_sample_params p = sampling(1.0f);
    p.repeat_penalty = 2.0f;
    const float logits[] = {(float)log(4.0), 0.0f};
    unsigned counts[2];
    draw_counts(&p, logits, 2, (const int32_t[]){0}, 1, counts);
    double e0 = DRAWS * 2.0 / 3.0, e1 = DRAWS / 3.0;
    double chi2 =
        (counts[0] - e0) * (counts[0] - e0) / e0 + (counts[1] - e1) * (counts[1] - e1) / e1;
    cr_assert_lt(chi2, chi2_999[1], "counts %u %u, chi-square %.2f", counts[0], counts[1], chi2);
}

/* A penalty below 1 on a huge logit saturates at FLT_MAX instead of turning
 * it infinite: two such tokens stay an even draw (infinities would leave
 * the weights undefined). */
Test(engine_sample_penalty, saturates_instead_of_overflowing)
{
    eng_sample_params p = sampling(1.0f);
    p.repeat_penalty = 0.5f;
    const float logits[] = {3e38f, 2.5e38f, 0.0f};
    unsigned counts[3];
    draw_n_counts(1000, &p, logits, 3, (const int32_t[]){0, 1}, 2, counts);
    cr_assert(counts[0] > 400 && counts[1] > 400 && counts[2] == 0, "counts %u %u %u", counts[0],
              counts[1], counts[2]);
}

Test(engine_sample_filters, temperature_alone_keeps_everything)
{
    float logits[SMALL_VOCAB];
    crafted_logits(logits);
    unsigned counts[SMALL_VOCAB];
    bool kept[SMALL_VOCAB];
    kept_set(kept, (const int[]){0, 1, 2, 3, 4, 5, 6, 7}, 8);
    eng_sample_params p = sampling(1.0f);
    draw_counts(&p, logits, SMALL_VOCAB, NULL, 0, counts);
    assert_kept_and_fit(counts, kept, 1.0);
    p = sampling(0.5f);
    draw_counts(&p, logits, SMALL_VOCAB, NULL, 0, counts);
    assert_kept_and_fit(counts, kept, 0.5);
}

Test(engine_sample_filters, top_k)
{
    float logits[SMALL_VOCAB];
    crafted_logits(logits);
    unsigned counts[SMALL_VOCAB];
    bool kept[SMALL_VOCAB];
    eng_sample_params p = sampling(1.0f);
    p.top_k = 3;
    draw_counts(&p, logits, SMALL_VOCAB, NULL, 0, counts);
    kept_set(kept, (const int[]){1, 4, 3}, 3);
    assert_kept_and_fit(counts, kept, 1.0);
}

/* Cumulative 0.30, 0.55, 0.70, 0.82: top_p 0.75 keeps four. */
Test(engine_sample_filters, top_p)
{
    float logits[SMALL_VOCAB];
    crafted_logits(logits);
    unsigned counts[SMALL_VOCAB];
    bool kept[SMALL_VOCAB];
    eng_sample_params p = sampling(1.0f);
    p.top_p = 0.75f;
    draw_counts(&p, logits, SMALL_VOCAB, NULL, 0, counts);
    kept_set(kept, (const int[]){1, 4, 3, 6}, 4);
    assert_kept_and_fit(counts, kept, 1.0);
}

/* min_p 0.2 of the best 0.30 is 0.06: five tokens reach it. */
Test(engine_sample_filters, min_p)
{
    float logits[SMALL_VOCAB];
    crafted_logits(logits);
    unsigned counts[SMALL_VOCAB];
    bool kept[SMALL_VOCAB];
    eng_sample_params p = sampling(1.0f);
    p.min_p = 0.2f;
    draw_counts(&p, logits, SMALL_VOCAB, NULL, 0, counts);
    kept_set(kept, (const int[]){1, 4, 3, 6, 0}, 5);
    assert_kept_and_fit(counts, kept, 1.0);
}

/* Top-p renormalises over what top-k kept: over the best four (mass 0.82)
 * the cumulative is 0.37, 0.67, 0.85, so top_p 0.8 keeps three (over the
 * whole vocabulary it would keep four). */
Test(engine_sample_chain, top_p_after_top_k)
{
    float logits[SMALL_VOCAB];
    crafted_logits(logits);
    unsigned counts[SMALL_VOCAB];
    bool kept[SMALL_VOCAB];
    eng_sample_params p = sampling(1.0f);
    p.top_k = 4;
    p.top_p = 0.8f;
    draw_counts(&p, logits, SMALL_VOCAB, NULL, 0, counts);
    kept_set(kept, (const int[]){1, 4, 3}, 3);
    assert_kept_and_fit(counts, kept, 1.0);
}

/* Min-p looks at temperature-1 probabilities, the temperature comes last: at
 * temperature 3 min_p 0.2 still keeps five (applied to the flattened
 * distribution it would keep all eight), drawn in proportion to p^(1/3). */
Test(engine_sample_chain, temperature_after_min_p)
{
    float logits[SMALL_VOCAB];
    crafted_logits(logits);
    unsigned counts[SMALL_VOCAB];
    bool kept[SMALL_VOCAB];
    eng_sample_params p = sampling(3.0f);
    p.min_p = 0.2f;
    draw_counts(&p, logits, SMALL_VOCAB, NULL, 0, counts);
    kept_set(kept, (const int[]){1, 4, 3, 6, 0}, 5);
    assert_kept_and_fit(counts, kept, 3.0);
}

/* A flat vocabulary of 1000: the ties go to the lower ids, and top-p needs
 * more than its first partial sort (256) to reach the mass. */
Test(engine_sample_filters, ties_and_a_large_top_p_set)
{
    enum { VOCAB = 1000 };
    static float logits[VOCAB];
    static unsigned counts[VOCAB];
    for (int i = 0; i < VOCAB; i++)
        logits[i] = 0.5f;
    eng_sample_params p = sampling(1.0f);
    p.top_p = 0.4995f;
    draw_counts(&p, logits, VOCAB, NULL, 0, counts);
    for (int i = 0; i < VOCAB; i++) {
        if (i < 500)
            cr_assert_gt(counts[i], 0u, "token %d never drawn", i);
        else
            cr_assert_eq(counts[i], 0u, "token %d drawn %u times", i, counts[i]);
    }
    p = sampling(1.0f);
    p.top_k = 10;
    draw_counts(&p, logits, VOCAB, NULL, 0, counts);
    for (int i = 0; i < VOCAB; i++)
        cr_assert_eq(counts[i] > 0, i < 10, "token %d drawn %u times", i, counts[i]);
}

/* Distinct logits in a scrambled order over 2000 ids; the rank-r token has
 * logit -slope r, so top_p 0.5 keeps the best ranks up to the first whose
 * cumulative mass reaches half (computed here from the ranks). At the gentler
 * slope that is more tokens than top-p's first partial sort (256) holds. */
static void assert_top_p_scrambled(float slope, int expected_keep)
{
    enum { VOCAB = 2000 };
    static float logits[VOCAB];
    static unsigned counts[VOCAB];
    for (int id = 0; id < VOCAB; id++)
        logits[id] = -slope * (float)((id * 7919) % VOCAB);
    double total = 0.0, mass = 0.0;
    for (int r = 0; r < VOCAB; r++)
        total += exp((double)-slope * r);
    int keep = 0;
    while (mass < 0.5 * total)
        mass += exp((double)-slope * keep++);
    cr_assert_eq(keep, expected_keep);
    eng_sample_params p = sampling(1.0f);
    p.top_p = 0.5f;
    /* the least kept token is drawn 13 times in 10000 on average */
    draw_n_counts(10000, &p, logits, VOCAB, NULL, 0, counts);
    for (int id = 0; id < VOCAB; id++) {
        int rank = (id * 7919) % VOCAB;
        cr_assert_eq(counts[id] > 0, rank < keep, "id %d of rank %d drawn %u times", id, rank,
                     counts[id]);
    }
}

Test(engine_sample_filters, top_p_over_a_scrambled_vocabulary)
{
    assert_top_p_scrambled(0.05f, 14);
    assert_top_p_scrambled(0.0025f, 275);
}

Test(engine_sample_seed, same_seed_same_tokens_and_a_failed_call_changes_nothing)
{
    float logits[SMALL_VOCAB];
    crafted_logits(logits);
    float broken[SMALL_VOCAB];
    crafted_logits(broken);
    broken[5] = NAN;
    eng_sample_params p = sampling(1.0f);
    p.seed = 7;
    eng_sampler *a = make(&p, SMALL_VOCAB), *b = make(&p, SMALL_VOCAB);
    p.seed = 8;
    eng_sampler *c = make(&p, SMALL_VOCAB);
    int differ = 0;
    for (int i = 0; i < 1000; i++) {
        int32_t t = -1;
        eng_error err = {0};
        cr_assert_eq(eng_sample(a, broken, NULL, 0, &t, &err), ORTMEM_E_INVALID);
        cr_assert_eq(t, -1);
        int32_t ta = pick(a, logits, NULL, 0), tb = pick(b, logits, NULL, 0);
        cr_assert_eq(ta, tb, "draw %d: %d and %d from the same seed", i, ta, tb);
        differ += pick(c, logits, NULL, 0) != ta;
    }
    cr_assert_gt(differ, 100, "another seed matched %d of 1000 draws", 1000 - differ);
    eng_sampler_destroy(a);
    eng_sampler_destroy(b);
    eng_sampler_destroy(c);
}

static void assert_create_refused(eng_sample_params p, size_t vocab, const char *named)
{
    eng_sampler *untouched = (eng_sampler *)&p;
    eng_sampler *out = untouched;
    eng_error err = {0};
    cr_assert_eq(eng_sampler_create(&p, vocab, &out, &err), ORTMEM_E_INVALID, "%s", named);
    cr_assert_eq(err.status, ORTMEM_E_INVALID);
    cr_assert(strstr(err.message, named), "message \"%s\" does not name %s", err.message, named);
    cr_assert_eq(out, untouched);
}

Test(engine_sample_invalid, parameters_named)
{
    eng_sample_params p = sampling(1.0f);
    assert_create_refused(p, 0, "vocab is 0");
    assert_create_refused(p, (size_t)INT32_MAX + 1, "vocab is 2147483648");
    p.temperature = NAN;
    assert_create_refused(p, 8, "temperature is nan");
    p.temperature = INFINITY;
    assert_create_refused(p, 8, "temperature is inf");
    p = sampling(1.0f);
    p.top_p = 0.0f;
    assert_create_refused(p, 8, "top_p is 0");
    p.top_p = NAN;
    assert_create_refused(p, 8, "top_p is nan");
    p = sampling(1.0f);
    p.min_p = 1.5f;
    assert_create_refused(p, 8, "min_p is 1.5");
    p = sampling(1.0f);
    p.repeat_penalty = 0.0f;
    assert_create_refused(p, 8, "repeat_penalty is 0");
    p.repeat_penalty = -1.1f;
    assert_create_refused(p, 8, "repeat_penalty is -1.1");
    p = sampling(1.0f);
    p.repeat_last_n = -1;
    assert_create_refused(p, 8, "repeat_last_n is -1");
    eng_error err = {0};
    cr_assert_eq(eng_sampler_create(NULL, 8, NULL, &err), ORTMEM_E_INVALID);
    cr_assert(strstr(err.message, "params"), "%s", err.message);
}

static void assert_sample_refused(eng_sampler *s, const float *logits, const int32_t *history,
                                  size_t len, const char *named)
{
    int32_t token = 77;
    eng_error err = {0};
    cr_assert_eq(eng_sample(s, logits, history, len, &token, &err), ORTMEM_E_INVALID, "%s", named);
    cr_assert(strstr(err.message, named), "message \"%s\" does not name %s", err.message, named);
    cr_assert_eq(token, 77);
}

Test(engine_sample_invalid, inputs_named)
{
    eng_sample_params p = sampling(1.0f);
    p.repeat_penalty = 1.3f;
    p.repeat_last_n = 2;
    for (int greedy = 0; greedy < 2; greedy++) {
        p.temperature = greedy ? 0.0f : 1.0f;
        eng_sampler *s = make(&p, 4);
        assert_sample_refused(s, (const float[]){0, 1, NAN, 2}, NULL, 0, "logits[2] is nan");
        assert_sample_refused(s, (const float[]){0, INFINITY, 1, 2}, NULL, 0, "logits[1] is inf");
        assert_sample_refused(s, (const float[]){-INFINITY, -INFINITY, -INFINITY, -INFINITY}, NULL,
                              0, "all 4 logits are -inf");
        assert_sample_refused(s, (const float[]){0, 1, 2, 3}, (const int32_t[]){9, 1, 4}, 3,
                              "history[2] is 4");
        assert_sample_refused(s, (const float[]){0, 1, 2, 3}, (const int32_t[]){0, -2}, 2,
                              "history[1] is -2");
        assert_sample_refused(s, (const float[]){0, 1, 2, 3}, NULL, 3, "history");
        /* outside the window: never looked at */
        cr_assert_geq(pick(s, (const float[]){0, 1, 2, 3}, (const int32_t[]){9, 1, 3}, 3), 0);
        eng_sampler_destroy(s);
    }
}
