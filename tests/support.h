/* Shared helpers for the Criterion suites: small-granule CPU backends, ledger
 * snapshots and byte patterns. Public API only. */
#ifndef ORTMEM_TESTS_SUPPORT_H
#define ORTMEM_TESTS_SUPPORT_H

#include <criterion/criterion.h>
#include <ortmem/ortmem.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KiB ((size_t)1024)
#define MiB (KiB * 1024)
#define TEST_GRANULE (64 * KiB)

#define OK(call)                                                                                   \
    do {                                                                                           \
        ortmem_status ok_st_ = (call);                                                             \
        cr_assert_eq(ok_st_, ORTMEM_OK, "%s -> %s: %s", #call, ortmem_status_str(ok_st_),          \
                     ortmem_last_error());                                                         \
    } while (0)

#define EXPECT_STATUS(call, want)                                                                  \
    do {                                                                                           \
        ortmem_status ex_st_ = (call);                                                             \
        cr_assert_eq(ex_st_, (want), "%s -> %s (want %s): %s", #call, ortmem_status_str(ex_st_),   \
                     ortmem_status_str(want), ortmem_last_error());                                \
    } while (0)

static inline ortmem_backend *cpu_backend_with_granule(size_t granule)
{
    ortmem_cpu_options opt = ORTMEM_CPU_OPTIONS_INIT;
    opt.granule = granule;
    ortmem_backend *b = NULL;
    OK(ortmem_cpu_backend_create(&opt, &b));
    return b;
}

static inline ortmem_backend *test_backend(void)
{
    return cpu_backend_with_granule(TEST_GRANULE);
}

static inline ortmem_vmm_stats stats_of(ortmem_backend *b)
{
    ortmem_vmm_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    OK(ortmem_backend_stats(b, &s));
    return s;
}

static inline ortmem_arena_stats arena_stats(ortmem_arena *a)
{
    ortmem_arena_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    OK(ortmem_arena_stats_get(a, &s));
    return s;
}

static inline void *alloc_ok(ortmem_arena *a, size_t size, size_t align)
{
    void *p = NULL;
    OK(ortmem_arena_alloc(a, size, align, &p));
    cr_assert_not_null(p);
    return p;
}

static inline ortmem_region *region_on(ortmem_backend *b, size_t size, unsigned flags)
{
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    opt.size = size;
    opt.flags = flags;
    ortmem_region *r = NULL;
    OK(ortmem_region_create(b, &opt, &r));
    return r;
}

static inline ortmem_granule_info granule_info(ortmem_region *r, size_t offset)
{
    ortmem_granule_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    OK(ortmem_region_granule_info(r, offset, &info));
    return info;
}

static inline uint8_t pattern_byte(uint64_t seed, size_t i)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + i * 0xbf58476d1ce4e5b9ULL;
    return (uint8_t)(x >> 56) | 1; /* never 0, so a zeroed page never passes */
}

/* Volatile: the same bytes are often read back through another mapping, which
 * the compiler cannot know aliases this one. */
static inline void fill_pattern(volatile void *p, size_t len, uint64_t seed)
{
    volatile uint8_t *b = p;
    for (size_t i = 0; i < len; i += 64)
        b[i] = pattern_byte(seed, i);
}

static inline int check_pattern(const volatile void *p, size_t len, uint64_t seed)
{
    const volatile uint8_t *b = p;
    for (size_t i = 0; i < len; i += 64) {
        if (b[i] != pattern_byte(seed, i))
            return 0;
    }
    return 1;
}

/* Device memory is written and read only through the backend's copy, as on a
 * GPU: the pattern goes through a host buffer. */
static inline void backend_put_pattern(ortmem_backend *b, void *dst, size_t len, uint64_t seed)
{
    uint8_t *tmp = malloc(len);
    cr_assert_not_null(tmp);
    for (size_t i = 0; i < len; i++)
        tmp[i] = pattern_byte(seed, i);
    OK(ortmem_backend_copy(b, dst, tmp, len));
    free(tmp);
}

/* The first byte of src that differs from the pattern; len when none does. */
static inline size_t backend_pattern_mismatch(ortmem_backend *b, const void *src, size_t len,
                                              uint64_t seed)
{
    uint8_t *tmp = malloc(len);
    cr_assert_not_null(tmp);
    OK(ortmem_backend_copy(b, tmp, src, len));
    size_t bad = len;
    for (size_t i = 0; i < len && bad == len; i++)
        if (tmp[i] != pattern_byte(seed, i))
            bad = i;
    free(tmp);
    return bad;
}

#endif
