/* engine/sample takes all its memory at create: eng_sample allocates
 * nothing, whatever the filters (a library sort may allocate, so the sampler
 * sorts by itself). The executable's malloc family counts the calls made
 * while a draw runs (interposed over glibc's, which it forwards to) and so
 * also sees allocations made inside libc. Under a sanitizer, which brings its
 * own allocator, the count is not taken. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sample/sample.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define COUNTS_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||                         \
    __has_feature(memory_sanitizer)
#define COUNTS_ALLOCATIONS 0
#endif
#endif
#ifndef COUNTS_ALLOCATIONS
#define COUNTS_ALLOCATIONS 1
#endif

#if COUNTS_ALLOCATIONS
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void __libc_free(void *ptr);

static volatile bool counting;
static volatile unsigned allocations;

void *malloc(size_t size)
{
    allocations += counting;
    return __libc_malloc(size);
}

void *calloc(size_t count, size_t size)
{
    allocations += counting;
    return __libc_calloc(count, size);
}

void *realloc(void *ptr, size_t size)
{
    allocations += counting;
    return __libc_realloc(ptr, size);
}

void free(void *ptr)
{
    __libc_free(ptr);
}
#endif

Test(engine_sample_alloc, a_draw_allocates_nothing)
{
#if !COUNTS_ALLOCATIONS
    cr_skip_test("a sanitizer's allocator is in place: calls are not counted");
#else
    enum { VOCAB = 4000 };
    static float logits[VOCAB];
    for (int id = 0; id < VOCAB; id++)
        logits[id] = -0.002f * (float)((id * 7919) % VOCAB); /* top-p sorts past 256 */
    const int32_t history[] = {5, 17, 5, 3999};
    eng_sample_params settings[4] = {ENG_SAMPLE_PARAMS_GREEDY, ENG_SAMPLE_PARAMS_GREEDY,
                                     ENG_SAMPLE_PARAMS_GREEDY, ENG_SAMPLE_PARAMS_GREEDY};
    settings[0].repeat_penalty = 1.2f;
    settings[1].temperature = 0.8f;
    settings[1].top_p = 0.5f;
    settings[1].repeat_penalty = 1.2f;
    settings[2].temperature = 1.0f;
    settings[2].top_k = 40;
    settings[2].top_p = 0.9f;
    settings[2].min_p = 0.05f;
    settings[3].temperature = 1.5f;
    for (int k = 0; k < 4; k++) {
        allocations = 0;
        counting = true;
        eng_sampler *s = NULL;
        eng_error err = {0};
        ortmem_status st = eng_sampler_create(&settings[k], VOCAB, &s, &err);
        counting = false;
        cr_assert_eq(st, ORTMEM_OK, "%s", err.message);
        cr_assert_gt(allocations, 0u, "create's allocations are counted");
        for (int i = 0; i < 50; i++) {
            int32_t token = -1;
            allocations = 0;
            counting = true;
            st = eng_sample(s, logits, history, 4, &token, &err);
            counting = false;
            cr_assert_eq(st, ORTMEM_OK, "%s", err.message);
            cr_assert_eq(allocations, 0u, "settings %d, draw %d: %u allocations", k, i,
                         allocations);
        }
        eng_sampler_destroy(s);
    }
#endif
}
