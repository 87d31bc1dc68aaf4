/* libortmem_torch against its header contract (adapters/pytorch/ortmem_torch.h)
 * on the CPU backend, as PyTorch would call it: the two pluggable allocator
 * functions, then the control API. Granules are 64 KiB and the arenas keep no
 * cache, so the ledger reads 0 once everything is freed. Each Criterion test
 * runs in its own process: the library's state starts empty every time. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "../ortmem_torch.h"

#define KiB ((uint64_t)1024)
#define MiB (KiB * 1024)
#define G (64 * KiB)

static void init_cpu(uint64_t budget)
{
    ortmem_torch_options o = ORTMEM_TORCH_OPTIONS_INIT;
    o.backend = ORTMEM_TORCH_BACKEND_CPU;
    o.budget_bytes = budget;
    o.cache_bytes = 0;
    o.granule_bytes = G;
    o.arena_bytes = 64 * MiB;
    cr_assert_eq(ortmem_torch_init(&o), 0, "%s", ortmem_torch_last_error());
}

static ortmem_torch_stats stats(const char *tag)
{
    ortmem_torch_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    cr_assert_eq(ortmem_torch_stats_get(0, tag, &s), 0, "%s", ortmem_torch_last_error());
    return s;
}

static void fill(void *p, size_t n, unsigned seed)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(seed * 131 + i * 7 + 1);
}

static size_t mismatch(const void *p, size_t n, unsigned seed)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(seed * 131 + i * 7 + 1))
            return i;
    return n;
}

TestSuite(pytorch_adapter);

Test(pytorch_adapter, alloc_and_free_as_pytorch_calls_them)
{
    init_cpu(16 * MiB);
    void *stream = NULL;
    cr_assert_null(ortmem_torch_alloc(0, 0, stream), "a zero-byte tensor has no storage");
    void *a = ortmem_torch_alloc(1000, 0, stream);
    void *b = ortmem_torch_alloc((ssize_t)(3 * MiB + 5), 0, stream);
    cr_assert_not_null(a, "%s", ortmem_torch_last_error());
    cr_assert_not_null(b, "%s", ortmem_torch_last_error());
    cr_assert_eq((uintptr_t)a % 512, 0, "PyTorch's alignment");
    fill(a, 1000, 1);
    fill(b, 3 * MiB + 5, 2);
    ortmem_torch_stats s = stats("other");
    cr_assert_eq(s.live_allocations, 2);
    cr_assert_eq(s.allocated_bytes, 1000 + 3 * MiB + 5);
    cr_assert_geq(s.reserved_bytes, s.allocated_bytes);
    cr_assert_eq(s.owned_bytes, s.reserved_bytes, "the ledger owns what is reserved");
    cr_assert_eq(mismatch(a, 1000, 1), 1000);
    ortmem_torch_free(a, 1000, 0, stream);
    ortmem_torch_free(b, (ssize_t)(3 * MiB + 5), 0, stream);
    s = stats(NULL);
    cr_assert_eq(s.live_allocations, 0);
    cr_assert_eq(s.owned_bytes, 0, "owned %llu", (unsigned long long)s.owned_bytes);
    cr_assert_eq(s.device_owned_bytes, 0);
    cr_assert_eq(ortmem_torch_failures(), 0);
    cr_assert_eq(ortmem_torch_shutdown(), 0, "%s", ortmem_torch_last_error());
}

Test(pytorch_adapter, a_budget_breach_is_null_with_requested_available_and_limit)
{
    init_cpu(2 * MiB);
    void *a = ortmem_torch_alloc((ssize_t)MiB, 0, NULL);
    cr_assert_not_null(a, "%s", ortmem_torch_last_error());
    void *big = ortmem_torch_alloc((ssize_t)(2 * MiB), 0, NULL);
    cr_assert_null(big);
    cr_assert_eq(ortmem_torch_failures(), 1);
    const char *e = ortmem_torch_last_error();
    cr_assert(strstr(e, "requested") && strstr(e, "available") && strstr(e, "limit"), "%s", e);
    cr_assert(strstr(e, "ORTMEM_E_BUDGET") && strstr(e, "2097152"), "%s", e);
    ortmem_torch_stats s = stats("other");
    cr_assert_eq(s.live_allocations, 1);
    cr_assert_eq(s.failed_allocs, 1);
    ortmem_torch_free(a, (ssize_t)MiB, 0, NULL);
    s = stats(NULL);
    cr_assert_eq(s.owned_bytes, 0, "nothing leaked: owned %llu", (unsigned long long)s.owned_bytes);
    cr_assert_eq(s.device_owned_bytes, 0);
    /* The budget moves at run time. */
    cr_assert_eq(ortmem_torch_set_budget(0, 4 * MiB), 0);
    big = ortmem_torch_alloc((ssize_t)(2 * MiB), 0, NULL);
    cr_assert_not_null(big, "%s", ortmem_torch_last_error());
    cr_assert_eq(stats(NULL).limit_bytes, 4 * MiB);
    ortmem_torch_free(big, (ssize_t)(2 * MiB), 0, NULL);
    cr_assert_eq(ortmem_torch_shutdown(), 0);
}

Test(pytorch_adapter, each_tag_has_its_arena_and_its_line_in_the_ledger)
{
    init_cpu(64 * MiB);
    cr_assert_str_eq(ortmem_torch_get_tag(), "other");
    cr_assert_eq(ortmem_torch_set_tag("weights"), 0);
    void *w = ortmem_torch_alloc((ssize_t)(2 * MiB), 0, NULL);
    cr_assert_eq(ortmem_torch_set_tag("kv"), 0);
    void *k = ortmem_torch_alloc((ssize_t)MiB, 0, NULL);
    cr_assert_eq(ortmem_torch_set_tag(NULL), 0);
    void *o = ortmem_torch_alloc(100, 0, NULL);
    cr_assert(w && k && o, "%s", ortmem_torch_last_error());
    cr_assert_neq(ortmem_torch_set_tag("bogus"), 0);
    cr_assert(strstr(ortmem_torch_last_error(), "bogus"), "%s", ortmem_torch_last_error());
    cr_assert_str_eq(ortmem_torch_get_tag(), "other", "a refused tag changes nothing");
    ortmem_torch_stats sw = stats("weights"), sk = stats("kv"), so = stats("other");
    cr_assert_eq(sw.allocated_bytes, 2 * MiB);
    cr_assert_eq(sk.allocated_bytes, MiB);
    cr_assert_eq(so.allocated_bytes, 100);
    cr_assert_eq(sw.owned_bytes, 2 * MiB, "weights own %llu", (unsigned long long)sw.owned_bytes);
    cr_assert_eq(stats(NULL).owned_bytes, sw.owned_bytes + sk.owned_bytes + so.owned_bytes);
    /* A free finds its arena by address, whatever the thread's tag. */
    ortmem_torch_free(w, (ssize_t)(2 * MiB), 0, NULL);
    ortmem_torch_free(k, (ssize_t)MiB, 0, NULL);
    ortmem_torch_free(o, 100, 0, NULL);
    cr_assert_eq(stats(NULL).owned_bytes, 0);
    int x = 0;
    ortmem_torch_free(&x, 4, 0, NULL);
    cr_assert(strstr(ortmem_torch_last_error(), "not an allocation"), "%s",
              ortmem_torch_last_error());
    cr_assert_eq(ortmem_torch_shutdown(), 0);
}

Test(pytorch_adapter, sleep_with_backup_then_wake_keeps_addresses_and_bytes)
{
    init_cpu(64 * MiB);
    cr_assert_eq(ortmem_torch_set_tag("weights"), 0);
    enum { N = 5 };
    void *p[N];
    size_t n[N] = {1000, 3 * MiB, 700 * KiB, 512, MiB + 3};
    for (int i = 0; i < N; i++) {
        p[i] = ortmem_torch_alloc((ssize_t)n[i], 0, NULL);
        cr_assert_not_null(p[i], "%s", ortmem_torch_last_error());
        fill(p[i], n[i], (unsigned)i);
    }
    cr_assert_eq(ortmem_torch_set_tag("kv"), 0);
    void *kv = ortmem_torch_alloc((ssize_t)MiB, 0, NULL);
    ortmem_torch_stats before = stats("weights");
    cr_assert_eq(ortmem_torch_sleep(0, "weights", 1), 0, "%s", ortmem_torch_last_error());
    ortmem_torch_stats asleep = stats("weights");
    cr_assert_eq(asleep.asleep, 1);
    cr_assert_eq(asleep.owned_bytes, 0, "the authority has the weights' bytes back");
    cr_assert_eq(asleep.reserved_bytes, 0);
    cr_assert_geq(asleep.backup_bytes, before.allocated_bytes);
    cr_assert_eq(stats(NULL).device_owned_bytes, stats("kv").owned_bytes);
    /* Allocs in the sleeping tag fail; the others go on. */
    cr_assert_eq(ortmem_torch_set_tag("weights"), 0);
    cr_assert_null(ortmem_torch_alloc(100, 0, NULL));
    cr_assert(strstr(ortmem_torch_last_error(), "asleep"), "%s", ortmem_torch_last_error());
    cr_assert_eq(ortmem_torch_set_tag("kv"), 0);
    void *kv2 = ortmem_torch_alloc(100, 0, NULL);
    cr_assert_not_null(kv2);
    cr_assert_eq(ortmem_torch_wake(0, "weights"), 0, "%s", ortmem_torch_last_error());
    ortmem_torch_stats awake = stats("weights");
    cr_assert_eq(awake.asleep, 0);
    cr_assert_eq(awake.owned_bytes, before.owned_bytes);
    cr_assert_eq(awake.live_allocations, N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(mismatch(p[i], n[i], (unsigned)i), n[i], "allocation %d at %p", i, p[i]);
    /* The same addresses: PyTorch's pointers are freed as they were handed out. */
    for (int i = 0; i < N; i++)
        ortmem_torch_free(p[i], (ssize_t)n[i], 0, NULL);
    ortmem_torch_free(kv, (ssize_t)MiB, 0, NULL);
    ortmem_torch_free(kv2, 100, 0, NULL);
    ortmem_torch_stats end = stats(NULL);
    cr_assert_eq(end.live_allocations, 0);
    cr_assert_eq(end.owned_bytes, 0);
    cr_assert_eq(ortmem_torch_failures(), 1, "the refused alloc while asleep only");
    cr_assert_eq(ortmem_torch_shutdown(), 0);
}

Test(pytorch_adapter, sleep_without_backup_gives_the_bytes_back_and_wake_charges_them_again)
{
    init_cpu(8 * MiB);
    cr_assert_eq(ortmem_torch_set_tag("kv"), 0);
    void *p = ortmem_torch_alloc((ssize_t)(4 * MiB), 0, NULL);
    cr_assert_not_null(p);
    fill(p, 4 * MiB, 9);
    uint64_t owned = stats("kv").owned_bytes;
    cr_assert_eq(ortmem_torch_sleep(0, "kv", 0), 0, "%s", ortmem_torch_last_error());
    ortmem_torch_stats s = stats("kv");
    cr_assert_eq(s.owned_bytes, 0);
    cr_assert_eq(s.backup_bytes, 0);
    cr_assert_eq(s.available_bytes, 8 * MiB, "the whole budget is free while asleep");
    cr_assert_neq(ortmem_torch_sleep(0, "kv", 0), 0, "asleep already");
    /* A budget breach at wake is a status and changes nothing. */
    cr_assert_eq(ortmem_torch_set_budget(0, 2 * MiB), 0);
    cr_assert_neq(ortmem_torch_wake(0, "kv"), 0);
    cr_assert(strstr(ortmem_torch_last_error(), "limit"), "%s", ortmem_torch_last_error());
    cr_assert_eq(stats("kv").asleep, 1);
    cr_assert_eq(ortmem_torch_set_budget(0, 8 * MiB), 0);
    cr_assert_eq(ortmem_torch_wake(0, "kv"), 0, "%s", ortmem_torch_last_error());
    cr_assert_eq(stats("kv").owned_bytes, owned);
    cr_assert_neq(mismatch(p, 4 * MiB, 9), 4 * MiB, "not backed up: the old bytes are gone");
    cr_assert_eq(ortmem_torch_shutdown(), 7 /* ORTMEM_E_BUSY */, "busy while an allocation lives");
    ortmem_torch_free(p, (ssize_t)(4 * MiB), 0, NULL);
    cr_assert_eq(ortmem_torch_shutdown(), 0);
}

Test(pytorch_adapter, frees_wait_behind_their_stream_in_the_release_queue)
{
    ortmem_torch_options o = ORTMEM_TORCH_OPTIONS_INIT;
    o.backend = ORTMEM_TORCH_BACKEND_CPU;
    o.cache_bytes = 0;
    o.granule_bytes = G;
    o.arena_bytes = 64 * MiB;
    o.ordered_frees = 1; /* the CUDA path; the CPU backend's events complete at once */
    cr_assert_eq(ortmem_torch_init(&o), 0, "%s", ortmem_torch_last_error());
    void *stream = (void *)0; /* the default stream */
    void *p = ortmem_torch_alloc((ssize_t)MiB, 0, stream);
    void *q = ortmem_torch_alloc((ssize_t)MiB, 0, stream);
    cr_assert(p && q, "%s", ortmem_torch_last_error());
    ortmem_torch_free(p, (ssize_t)MiB, 0, stream);
    ortmem_torch_free(q, (ssize_t)MiB, 0, stream);
    ortmem_torch_stats s = stats(NULL);
    cr_assert_eq(s.pending_frees, 2, "batched behind one event");
    cr_assert_eq(s.live_allocations, 2, "not carried out before the event");
    cr_assert_gt(s.owned_bytes, 0);
    cr_assert_eq(ortmem_torch_flush(0), 0, "%s", ortmem_torch_last_error());
    s = stats(NULL);
    cr_assert_eq(s.pending_frees, 0);
    cr_assert_eq(s.live_allocations, 0);
    cr_assert_eq(s.owned_bytes, 0);
    /* Without a flush, the allocs that follow poll the queue. */
    for (int i = 0; i < 40; i++) {
        void *r = ortmem_torch_alloc(4096, 0, stream);
        cr_assert_not_null(r);
        ortmem_torch_free(r, 4096, 0, stream);
    }
    s = stats(NULL);
    cr_assert_lt(s.live_allocations, 40, "the queue was polled: %llu live",
                 (unsigned long long)s.live_allocations);
    /* A free on another stream closes the batch. */
    void *a = ortmem_torch_alloc(4096, 0, stream);
    ortmem_torch_free(a, 4096, 0, (void *)0x1);
    cr_assert_eq(ortmem_torch_shutdown(), 0, "%s", ortmem_torch_last_error());
}
