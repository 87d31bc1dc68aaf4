#include "kernels/kernels_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* The OS's enabled register state (XCR0); only valid once OSXSAVE is set. */
static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static bool probe_avx2(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return false;
    const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28),
               f16c = c & (1u << 29);
    if (!(fma && osxsave && avx && f16c))
        return false;
    /* SSE (bit 1) and AVX (bit 2) state saved by the OS on context switch. */
    if ((read_xcr0() & 0x6u) != 0x6u)
        return false;
    if (__get_cpuid_max(0, NULL) < 7)
        return false;
    __cpuid_count(7, 0, a, b, c, d);
    return b & (1u << 5);
}
#else
static bool probe_avx2(void)
{
    return false;
}
#endif

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static bool hw_avx2;
static eng_isa detected;

static void detect(void)
{
    hw_avx2 = probe_avx2();
    detected = hw_avx2 ? ENG_ISA_AVX2 : ENG_ISA_SCALAR;
    const char *forced = getenv("ORTMEM_ENGINE_ISA");
    if (forced && strcmp(forced, "scalar") == 0)
        detected = ENG_ISA_SCALAR;
}

bool eng_isa_hw_avx2(void)
{
    pthread_once(&detect_once, detect);
    return hw_avx2;
}

eng_isa eng_isa_detect(void)
{
    pthread_once(&detect_once, detect);
    return detected;
}

const char *eng_isa_name(eng_isa isa)
{
    switch (isa) {
    case ENG_ISA_SCALAR: return "scalar";
    case ENG_ISA_AVX2: return "avx2";
    }
    return "unknown";
}
