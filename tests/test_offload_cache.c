/* The residency cache over a weight catalog (CPU backend): a model file
 * written here, paged into stable-VA slots, evicted and paged in again at the
 * same pointer, every byte and counter exact, the ledger exact at every step;
 * bad input refused with the numbers and nothing leaked; pressure from
 * another holder reclaims cold weights; every backend call failed once across
 * a page-in/evict/page-in workload leaves the ledger at baseline (or the
 * quarantine) and the bytes exact; and the same for host allocations.
 *
 * The policy is a test double passed through the cache's internal entry
 * (the policy table lives with the policies). */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "offload/residency.h"
#include "support.h"

static size_t G; /* granule: the page size */

/* ---- a test-double policy: admit unless told to stream, evict the least
 * recently accessed evictable tensor ---- */

#define MAXT 16

typedef struct double_policy {
    uint32_t n;
    uint64_t last[MAXT];
    bool resident[MAXT];
} double_policy;

static bool stream_mask[MAXT]; /* tensors the double streams */
static int policy_live;        /* created and not destroyed */

static ortmem_status dp_create(const om_policy_config *c, void **state)
{
    double_policy *p = calloc(1, sizeof *p);
    if (!p)
        return ORTMEM_E_NOMEM;
    p->n = c->tensors;
    *state = p;
    policy_live++;
    return ORTMEM_OK;
}

static void dp_destroy(void *s)
{
    free(s);
    policy_live--;
}

static void dp_accessed(void *s, uint32_t t, uint64_t pos, bool resident)
{
    double_policy *p = s;
    cr_assert_eq(p->resident[t], resident, "tensor %u: the cache says resident %d", t, resident);
    p->last[t] = pos + 1;
}

static bool dp_admit(void *s, uint32_t t, uint64_t pos)
{
    (void)s, (void)pos;
    return !stream_mask[t];
}

static uint32_t dp_victim(void *s, uint64_t pos, om_policy_evictable_fn evictable, void *ctx)
{
    (void)pos;
    double_policy *p = s;
    uint32_t best = OM_POLICY_NONE;
    for (uint32_t t = 0; t < p->n; t++)
        if (p->resident[t] && evictable(ctx, t) &&
            (best == OM_POLICY_NONE || p->last[t] < p->last[best]))
            best = t;
    return best;
}

static void dp_inserted(void *s, uint32_t t)
{
    double_policy *p = s;
    cr_assert(!p->resident[t]);
    p->resident[t] = true;
}

static void dp_removed(void *s, uint32_t t)
{
    double_policy *p = s;
    cr_assert(p->resident[t]);
    p->resident[t] = false;
}

static const om_policy_ops double_ops = {ORTMEM_RESIDENCY_LRU, dp_create, dp_destroy,
                                         dp_accessed,          dp_admit,  dp_victim,
                                         dp_inserted,          dp_removed};

/* ---- the model file ---- */

#define NT 4
#define TABLE 256 /* bytes of "header" before the first tensor */
static char path[64];
static ortmem_weight_tensor table[NT];
static uint64_t file_bytes;

static uint64_t tensor_bytes(uint32_t t)
{
    static const uint64_t mult[NT][2] = {{3, 100}, {2, 0}, {1, 0}, {0, 100}};
    uint64_t b = mult[t][0] * G + mult[t][1];
    return t == 2 ? b - 10 : b;
}

static uint64_t slot_bytes(uint32_t t)
{
    return (tensor_bytes(t) + G - 1) / G * G;
}

static uint8_t file_byte(uint64_t off)
{
    return pattern_byte(7, (size_t)off);
}

static void write_model(void)
{
    static const char *names[NT] = {"token_embd.weight", "blk.0.attn_q.weight",
                                    "blk.0.ffn_up.weight", "output_norm.weight"};
    static const ortmem_weight_role roles[NT] = {ORTMEM_WEIGHT_EMBEDDING, ORTMEM_WEIGHT_ATTENTION,
                                                 ORTMEM_WEIGHT_MLP, ORTMEM_WEIGHT_NORM};
    uint64_t off = TABLE;
    for (uint32_t t = 0; t < NT; t++) {
        table[t] = (ortmem_weight_tensor){names[t], off, tensor_bytes(t), t ? 0 : 0, roles[t], t};
        off += tensor_bytes(t) + 16;
    }
    file_bytes = off;
    snprintf(path, sizeof path, "/tmp/ortmem-offload-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    uint8_t *buf = malloc(file_bytes);
    for (uint64_t i = 0; i < file_bytes; i++)
        buf[i] = file_byte(i);
    cr_assert_eq(write(fd, buf, file_bytes), (ssize_t)file_bytes);
    free(buf);
    close(fd);
}

/* ---- the fixture ---- */

typedef struct fixture {
    ortmem_backend *cpu, *b; /* b: cpu or a fault wrapper */
    ortmem_authority *authority;
    ortmem_weight_catalog *catalog;
    ortmem_residency_cache *cache;
} fixture;

static fixture fx;

static void setup(void)
{
    G = (size_t)sysconf(_SC_PAGESIZE);
    memset(stream_mask, 0, sizeof stream_mask);
    write_model();
    fx.cpu = cpu_backend_with_granule(G);
    fx.b = fx.cpu;
}

static void teardown(void)
{
    unlink(path);
}

static void make_authority(uint64_t limit)
{
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = limit;
    OK(ortmem_authority_create(fx.b, &ao, &fx.authority));
}

static ortmem_status open_catalog(void)
{
    return ortmem_weight_catalog_open_file(path, table, NT, NULL, &fx.catalog);
}

static ortmem_status make_cache_on(uint64_t budget, uint32_t ring, uint64_t compute_stream)
{
    ortmem_residency_options o = ORTMEM_RESIDENCY_OPTIONS_INIT;
    o.budget_bytes = budget;
    o.ring_slots = ring;
    o.compute_stream = compute_stream;
    return om_residency_cache_create_with_ops(fx.authority, fx.catalog, &o, &double_ops, &fx.cache);
}

static ortmem_status make_cache(uint64_t budget, uint32_t ring)
{
    return make_cache_on(budget, ring, 0);
}

static ortmem_residency_stats cache_stats(void)
{
    ortmem_residency_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    OK(ortmem_residency_stats_get(fx.cache, &s));
    return s;
}

static ortmem_holder_report weights_report(void)
{
    ortmem_holder_report r;
    OK(ortmem_holder_report_get(ortmem_residency_holder(fx.cache), &r));
    return r;
}

/* The first byte of the device copy of tensor t at ptr that differs from the
 * file; the tensor's bytes when none does. */
static uint64_t mismatch(ortmem_backend *b, void *ptr, uint32_t t)
{
    uint64_t n = tensor_bytes(t);
    uint8_t *tmp = malloc(n);
    cr_assert_not_null(tmp);
    OK(ortmem_backend_copy(b, tmp, ptr, n));
    uint64_t bad = n;
    for (uint64_t i = 0; i < n && bad == n; i++)
        if (tmp[i] != file_byte(table[t].offset + i))
            bad = i;
    free(tmp);
    return bad;
}

/* Backend ledger, holder ledger and cache stats agree: mapped = owned =
 * resident + ring bytes. */
static void ledger_exact(uint64_t want_resident, uint64_t want_ring)
{
    ortmem_residency_stats s = cache_stats();
    cr_assert_eq(s.resident_bytes, want_resident, "resident %llu, want %llu",
                 (unsigned long long)s.resident_bytes, (unsigned long long)want_resident);
    cr_assert_eq(s.ring_bytes, want_ring, "ring %llu, want %llu", (unsigned long long)s.ring_bytes,
                 (unsigned long long)want_ring);
    ortmem_vmm_stats v = stats_of(fx.cpu);
    cr_assert_eq(v.owned_bytes, want_resident + want_ring, "owned %llu",
                 (unsigned long long)v.owned_bytes);
    cr_assert_eq(v.mapped_bytes, want_resident + want_ring);
    ortmem_holder_report h = weights_report();
    cr_assert_eq(h.owned_bytes, want_resident + want_ring);
    cr_assert_eq(h.mapped_bytes, want_resident + want_ring);
    cr_assert_eq(h.role, ORTMEM_ROLE_WEIGHTS);
    ortmem_authority_report a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    OK(ortmem_authority_report_get(fx.authority, &a, NULL, 0));
    cr_assert_eq(a.by_role_owned[ORTMEM_ROLE_WEIGHTS], want_resident + want_ring);
}

static void destroy_all(void)
{
    if (fx.cache)
        OK(ortmem_residency_cache_destroy(fx.cache));
    fx.cache = NULL;
    if (fx.catalog)
        OK(ortmem_weight_catalog_destroy(fx.catalog));
    fx.catalog = NULL;
    if (fx.authority)
        OK(ortmem_authority_destroy(fx.authority));
    fx.authority = NULL;
    ortmem_vmm_stats v = stats_of(fx.cpu);
    cr_assert_eq(v.owned_bytes, 0);
    cr_assert_eq(v.mapped_bytes, 0);
    cr_assert_eq(v.reserved_va_bytes, 0);
    if (fx.b != fx.cpu)
        OK(ortmem_backend_destroy(fx.b));
    OK(ortmem_backend_destroy(fx.cpu));
    cr_assert_eq(policy_live, 0);
}

static uint64_t all_slots(void)
{
    uint64_t s = 0;
    for (uint32_t t = 0; t < NT; t++)
        s += slot_bytes(t);
    return s;
}

TestSuite(offload_cache, .init = setup, .fini = teardown);

Test(offload_cache, page_in_evict_page_in_at_the_same_pointer)
{
    make_authority(64 * MiB);
    OK(open_catalog());
    OK(make_cache(all_slots() + slot_bytes(0), 1));
    cr_assert_eq(ortmem_weight_catalog_count(fx.catalog), NT);
    ortmem_weight_tensor info;
    OK(ortmem_weight_catalog_tensor(fx.catalog, 2, &info));
    cr_assert_str_eq(info.name, "blk.0.ffn_up.weight");
    cr_assert_eq(info.bytes, tensor_bytes(2));
    cr_assert_eq(info.offset, table[2].offset);
    cr_assert_str_eq(ortmem_weight_role_name(info.role), "mlp");
    EXPECT_STATUS(ortmem_weight_catalog_tensor(fx.catalog, NT, &info), ORTMEM_E_NOT_FOUND);
    void *slot[NT], *p;
    uint64_t want = 0, moved = 0;
    for (uint32_t t = 0; t < NT; t++) {
        OK(ortmem_residency_slot(fx.cache, t, &slot[t]));
        cr_assert(!ortmem_residency_is_resident(fx.cache, t));
        OK(ortmem_residency_acquire(fx.cache, t, &p));
        cr_assert_eq(p, slot[t]);
        cr_assert_eq(mismatch(fx.cpu, p, t), tensor_bytes(t), "tensor %u differs", t);
        want += slot_bytes(t);
        moved += tensor_bytes(t);
        ledger_exact(want, 0);
        OK(ortmem_residency_release(fx.cache, t));
    }
    ortmem_residency_stats s = cache_stats();
    cr_assert_eq(s.misses, NT);
    cr_assert_eq(s.miss_bytes, moved);
    cr_assert_eq(s.page_ins, NT);
    cr_assert_eq(s.bytes_moved, moved);
    cr_assert_eq(s.hits, 0);
    cr_assert_eq(s.evictions, 0);
    /* Hits copy nothing. */
    for (uint32_t t = 0; t < NT; t++) {
        OK(ortmem_residency_acquire(fx.cache, t, &p));
        cr_assert_eq(p, slot[t]);
        OK(ortmem_residency_release(fx.cache, t));
    }
    s = cache_stats();
    cr_assert_eq(s.hits, NT);
    cr_assert_eq(s.hit_bytes, moved);
    cr_assert_eq(s.bytes_moved, moved);
    /* Evict, the VA stays; page in again at the same pointer, same bytes. */
    OK(ortmem_residency_evict(fx.cache, 0));
    cr_assert(!ortmem_residency_is_resident(fx.cache, 0));
    ledger_exact(want - slot_bytes(0), 0);
    OK(ortmem_residency_slot(fx.cache, 0, &p));
    cr_assert_eq(p, slot[0]);
    OK(ortmem_residency_acquire(fx.cache, 0, &p));
    cr_assert_eq(p, slot[0]);
    cr_assert_eq(mismatch(fx.cpu, p, 0), tensor_bytes(0));
    ledger_exact(want, 0);
    OK(ortmem_residency_release(fx.cache, 0));
    s = cache_stats();
    cr_assert_eq(s.evictions, 1);
    cr_assert_eq(s.page_ins, NT + 1);
    cr_assert_eq(s.misses, NT + 1);
    cr_assert_eq(s.bytes_moved, moved + tensor_bytes(0));
    cr_assert_eq(s.stalls, 0); /* CPU events complete at once */
    cr_assert_eq(s.stall_ns, 0);
    EXPECT_STATUS(ortmem_residency_release(fx.cache, 0), ORTMEM_E_STATE);
    destroy_all();
}

Test(offload_cache, budget_evicts_the_policy_victim_and_streams_through_the_ring)
{
    make_authority(64 * MiB);
    OK(open_catalog());
    /* Room for tensor 0's slot and the ring's one slot (largest = tensor 0). */
    uint64_t resident_budget = slot_bytes(0) + slot_bytes(1);
    OK(make_cache(resident_budget + slot_bytes(0), 1));
    void *p, *s1;
    OK(ortmem_residency_acquire(fx.cache, 0, &p));
    OK(ortmem_residency_release(fx.cache, 0));
    OK(ortmem_residency_acquire(fx.cache, 1, &p));
    OK(ortmem_residency_release(fx.cache, 1));
    ledger_exact(resident_budget, 0);
    /* Tensor 2 does not fit: the least recently used (0) goes. */
    OK(ortmem_residency_acquire(fx.cache, 2, &p));
    cr_assert(!ortmem_residency_is_resident(fx.cache, 0));
    cr_assert_eq(mismatch(fx.cpu, p, 2), tensor_bytes(2));
    ledger_exact(slot_bytes(1) + slot_bytes(2), 0);
    /* While 2 is acquired, pinning 1 leaves nothing evictable for 0:
     * the cache streams 0 through the ring instead of refusing. */
    OK(ortmem_residency_pin(fx.cache, 1));
    OK(ortmem_residency_acquire(fx.cache, 0, &p));
    OK(ortmem_residency_slot(fx.cache, 0, &s1));
    cr_assert_neq(p, s1);
    cr_assert_eq(mismatch(fx.cpu, p, 0), tensor_bytes(0));
    ledger_exact(slot_bytes(1) + slot_bytes(2), slot_bytes(0));
    /* The ring's only slot is acquired: a second streamed tensor is refused. */
    stream_mask[3] = true;
    EXPECT_STATUS(ortmem_residency_acquire(fx.cache, 3, &p), ORTMEM_E_BUDGET);
    cr_assert(strstr(ortmem_last_error(), "1 ring slots"), "%s", ortmem_last_error());
    OK(ortmem_residency_release(fx.cache, 0));
    OK(ortmem_residency_acquire(fx.cache, 3, &p));
    cr_assert_eq(mismatch(fx.cpu, p, 3), tensor_bytes(3));
    OK(ortmem_residency_release(fx.cache, 3));
    OK(ortmem_residency_release(fx.cache, 2));
    ortmem_residency_stats s = cache_stats();
    cr_assert_eq(s.streamed, 2);
    cr_assert_eq(s.evictions, 1);
    cr_assert_eq(s.page_ins, 3);
    cr_assert_eq(s.misses, 5);
    cr_assert_eq(s.refusals, 1);
    cr_assert_eq(s.bytes_moved,
                 tensor_bytes(0) * 2 + tensor_bytes(1) + tensor_bytes(2) + tensor_bytes(3));
    ledger_exact(slot_bytes(1) + slot_bytes(2), slot_bytes(0));
    /* Evicting the pinned slot is refused with the pins named. */
    EXPECT_STATUS(ortmem_residency_evict(fx.cache, 1), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "pinned (1 pins)"), "%s", ortmem_last_error());
    cr_assert(ortmem_residency_is_resident(fx.cache, 1));
    EXPECT_STATUS(ortmem_residency_cache_destroy(fx.cache), ORTMEM_E_BUSY);
    OK(ortmem_residency_unpin(fx.cache, 1));
    EXPECT_STATUS(ortmem_residency_unpin(fx.cache, 1), ORTMEM_E_STATE);
    OK(ortmem_residency_evict(fx.cache, 1));
    ledger_exact(slot_bytes(2), slot_bytes(0));
    destroy_all();
}

/* A ring of slots smaller than the largest tensor: the ring costs less of
 * the budget, the small tensors stream through it, the large one must be
 * resident, and a budget where it fits neither is refused at create. */
Test(offload_cache, a_ring_smaller_than_the_largest_tensor_streams_the_rest)
{
    make_authority(64 * MiB);
    OK(open_catalog());
    ortmem_residency_options o = ORTMEM_RESIDENCY_OPTIONS_INIT;
    o.ring_slots = 2;
    o.ring_slot_bytes = slot_bytes(1); /* 2 granules: tensors 1, 2, 3 fit, 0 does not */
    /* Tensor 0 (4 granules) fits neither a ring slot nor 6 - 4 = 2 granules. */
    o.budget_bytes = 2 * slot_bytes(1) + slot_bytes(1);
    EXPECT_STATUS(
        om_residency_cache_create_with_ops(fx.authority, fx.catalog, &o, &double_ops, &fx.cache),
        ORTMEM_E_BUDGET);
    cr_assert(strstr(ortmem_last_error(), "fits neither a ring slot"), "%s", ortmem_last_error());
    cr_assert_null(fx.cache);
    /* Room for tensor 0 resident and the ring of two 2-granule slots. */
    o.budget_bytes = 2 * slot_bytes(1) + slot_bytes(0);
    OK(om_residency_cache_create_with_ops(fx.authority, fx.catalog, &o, &double_ops, &fx.cache));
    OK(ortmem_residency_pin(fx.cache, 0));
    stream_mask[1] = stream_mask[2] = stream_mask[3] = true;
    void *p1, *p2, *own;
    OK(ortmem_residency_acquire(fx.cache, 1, &p1));
    OK(ortmem_residency_acquire(fx.cache, 2, &p2));
    OK(ortmem_residency_slot(fx.cache, 1, &own));
    cr_assert_neq(p1, own, "tensor 1 was streamed, not paged into its own slot");
    cr_assert_eq(mismatch(fx.cpu, p1, 1), tensor_bytes(1));
    cr_assert_eq(mismatch(fx.cpu, p2, 2), tensor_bytes(2));
    OK(ortmem_residency_release(fx.cache, 1));
    OK(ortmem_residency_release(fx.cache, 2));
    ledger_exact(slot_bytes(0), 2 * slot_bytes(1));
    /* Unpinned and evicted, tensor 0 cannot stream: a clean refusal. */
    OK(ortmem_residency_unpin(fx.cache, 0));
    OK(ortmem_residency_evict(fx.cache, 0));
    stream_mask[0] = true;
    void *p0 = NULL;
    EXPECT_STATUS(ortmem_residency_acquire(fx.cache, 0, &p0), ORTMEM_E_BUDGET);
    cr_assert(strstr(ortmem_last_error(), "larger than a ring slot"), "%s", ortmem_last_error());
    cr_assert_null(p0);
    ledger_exact(0, 2 * slot_bytes(1));
    ortmem_residency_stats st = cache_stats();
    cr_assert_eq(st.streamed, 2);
    cr_assert_eq(st.refusals, 1);
    cr_assert_eq(st.bytes_moved, tensor_bytes(0) + tensor_bytes(1) + tensor_bytes(2));
    destroy_all();
}

/* Two acquires of a streamed tensor share its ring slot: releasing one never
 * frees the slot the other still reads (the slot went to the next streamed
 * tensor, and the first holder read its bytes). */
Test(offload_cache, two_acquires_of_a_streamed_tensor_share_its_ring_slot)
{
    make_authority(64 * MiB);
    OK(open_catalog());
    /* The resident budget holds tensor 2 alone; the ring has two slots. */
    OK(make_cache(slot_bytes(2) + 2 * slot_bytes(0), 2));
    OK(ortmem_residency_pin(fx.cache, 2));
    void *a1, *a2, *b, *own;
    OK(ortmem_residency_acquire(fx.cache, 0, &a1)); /* holder 1: streamed */
    OK(ortmem_residency_slot(fx.cache, 0, &own));
    cr_assert_neq(a1, own);
    OK(ortmem_residency_acquire(fx.cache, 0, &a2)); /* holder 2 */
    OK(ortmem_residency_release(fx.cache, 0));      /* holder 2 is done */
    OK(ortmem_residency_acquire(fx.cache, 1, &b));
    cr_assert_eq(mismatch(fx.cpu, b, 1), tensor_bytes(1));
    cr_assert_eq(mismatch(fx.cpu, a1, 0), tensor_bytes(0),
                 "holder 1 of tensor 0 reads other bytes at %p (tensor 1 went to %p)", a1, b);
    cr_assert_eq(a2, a1, "the second acquire took another ring slot");
    cr_assert_neq(b, a1);
    OK(ortmem_residency_release(fx.cache, 1));
    OK(ortmem_residency_release(fx.cache, 0)); /* holder 1 */
    EXPECT_STATUS(ortmem_residency_release(fx.cache, 0), ORTMEM_E_STATE);
    cr_assert(strstr(ortmem_last_error(), "is not acquired"), "%s", ortmem_last_error());
    ortmem_residency_stats s = cache_stats();
    cr_assert_eq(s.streamed, 2);
    cr_assert_eq(s.hits, 1); /* the shared acquire copied nothing */
    cr_assert_eq(s.misses, 2);
    cr_assert_eq(s.page_ins, 1);
    cr_assert_eq(s.bytes_moved, tensor_bytes(2) + tensor_bytes(0) + tensor_bytes(1));
    ledger_exact(slot_bytes(2), 2 * slot_bytes(0));
    OK(ortmem_residency_unpin(fx.cache, 2));
    destroy_all();
}

/* A tensor acquired in a ring slot and then pinned resident: acquires keep
 * sharing the ring slot until they are all released, so each release ends
 * the acquire it should; then acquires hit its own slot. */
Test(offload_cache, acquires_in_a_ring_slot_outlive_a_pin_and_releases_stay_unambiguous)
{
    make_authority(64 * MiB);
    OK(open_catalog());
    OK(make_cache(slot_bytes(0) + 2 * slot_bytes(0), 2));
    void *ring, *p, *own;
    OK(ortmem_residency_pin(fx.cache, 1));
    OK(ortmem_residency_pin(fx.cache, 2));
    /* 4 granules resident, 3 of them pinned: tensor 0 (4) streams. */
    OK(ortmem_residency_acquire(fx.cache, 0, &ring));
    OK(ortmem_residency_slot(fx.cache, 0, &own));
    cr_assert_neq(ring, own);
    OK(ortmem_residency_unpin(fx.cache, 1));
    OK(ortmem_residency_unpin(fx.cache, 2));
    OK(ortmem_residency_pin(fx.cache, 0)); /* evicts 1 and 2, pages 0 in */
    cr_assert(ortmem_residency_is_resident(fx.cache, 0));
    OK(ortmem_residency_acquire(fx.cache, 0, &p));
    cr_assert_eq(p, ring, "an acquire while it is acquired in the ring went to another slot");
    OK(ortmem_residency_release(fx.cache, 0));
    OK(ortmem_residency_release(fx.cache, 0));
    /* Released from the ring: the ring slot is free, acquires use the own slot. */
    OK(ortmem_residency_acquire(fx.cache, 0, &p));
    cr_assert_eq(p, own);
    cr_assert_eq(mismatch(fx.cpu, p, 0), tensor_bytes(0));
    stream_mask[3] = true;
    void *q;
    OK(ortmem_residency_acquire(fx.cache, 3, &q)); /* the freed ring slot takes it */
    cr_assert_eq(mismatch(fx.cpu, q, 3), tensor_bytes(3));
    OK(ortmem_residency_release(fx.cache, 3));
    OK(ortmem_residency_release(fx.cache, 0));
    EXPECT_STATUS(ortmem_residency_release(fx.cache, 0), ORTMEM_E_STATE);
    ortmem_residency_stats s = cache_stats();
    cr_assert_eq(s.streamed, 2);
    cr_assert_eq(s.hits, 2); /* the shared ring slot, then the own slot */
    cr_assert_eq(s.misses, 2);
    cr_assert_eq(s.page_ins, 3);
    cr_assert_eq(s.evictions, 2);
    cr_assert_eq(s.bytes_moved,
                 tensor_bytes(1) + tensor_bytes(2) + 2 * tensor_bytes(0) + tensor_bytes(3));
    OK(ortmem_residency_unpin(fx.cache, 0));
    ledger_exact(slot_bytes(0), 2 * slot_bytes(0));
    destroy_all();
}

Test(offload_cache, bad_input_is_refused_with_the_numbers_and_nothing_leaks)
{
    make_authority(64 * MiB);
    ortmem_vmm_stats base = stats_of(fx.cpu);
    /* A tensor past the end of the file (truncated before open). */
    ortmem_weight_tensor bad[NT];
    memcpy(bad, table, sizeof bad);
    bad[3].offset = file_bytes - 10;
    EXPECT_STATUS(ortmem_weight_catalog_open_file(path, bad, NT, NULL, &fx.catalog),
                  ORTMEM_E_RANGE);
    char want[128];
    snprintf(want, sizeof want, "is %llu bytes", (unsigned long long)file_bytes);
    cr_assert(strstr(ortmem_last_error(), want), "%s", ortmem_last_error());
    /* The size or the table's checksum expected and not found. */
    ortmem_weight_file_options fo = ORTMEM_WEIGHT_FILE_OPTIONS_INIT;
    fo.expected_file_bytes = file_bytes + 1;
    EXPECT_STATUS(ortmem_weight_catalog_open_file(path, table, NT, &fo, &fx.catalog), ORTMEM_E_IO);
    fo.expected_file_bytes = file_bytes;
    fo.checksum_bytes = TABLE;
    uint8_t head[TABLE];
    for (size_t i = 0; i < TABLE; i++)
        head[i] = file_byte(i);
    fo.expected_checksum = ortmem_weight_checksum(head, TABLE) + 1;
    EXPECT_STATUS(ortmem_weight_catalog_open_file(path, table, NT, &fo, &fx.catalog), ORTMEM_E_IO);
    cr_assert(strstr(ortmem_last_error(), "checksum"), "%s", ortmem_last_error());
    fo.expected_checksum--;
    OK(ortmem_weight_catalog_open_file(path, table, NT, &fo, &fx.catalog));
    /* An unknown name. */
    uint32_t id = 99;
    EXPECT_STATUS(ortmem_weight_catalog_find(fx.catalog, "blk.9.attn_k.weight", &id),
                  ORTMEM_E_NOT_FOUND);
    cr_assert(strstr(ortmem_last_error(), "'blk.9.attn_k.weight'"), "%s", ortmem_last_error());
    cr_assert_eq(id, 99);
    OK(ortmem_weight_catalog_find(fx.catalog, "blk.0.ffn_up.weight", &id));
    cr_assert_eq(id, 2);
    /* A budget below the largest tensor's slot. */
    EXPECT_STATUS(make_cache(slot_bytes(0) - G, 1), ORTMEM_E_BUDGET);
    snprintf(want, sizeof want, "'token_embd.weight' (%llu bytes",
             (unsigned long long)tensor_bytes(0));
    cr_assert(strstr(ortmem_last_error(), want), "%s", ortmem_last_error());
    cr_assert_null(fx.cache);
    cr_assert_eq(policy_live, 0);
    OK(make_cache(all_slots() + slot_bytes(0), 1));
    EXPECT_STATUS(ortmem_weight_catalog_destroy(fx.catalog), ORTMEM_E_BUSY);
    void *p;
    EXPECT_STATUS(ortmem_residency_acquire(fx.cache, NT, &p), ORTMEM_E_NOT_FOUND);
    OK(ortmem_residency_acquire(fx.cache, 1, &p));
    OK(ortmem_residency_release(fx.cache, 1));
    /* The file changes after open: a page-in is refused, naming the times. */
    struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
    cr_assert_eq(utimensat(AT_FDCWD, path, times, 0), 0);
    EXPECT_STATUS(ortmem_residency_acquire(fx.cache, 2, &p), ORTMEM_E_IO);
    cr_assert(strstr(ortmem_last_error(), "modified at 12345."), "%s", ortmem_last_error());
    /* A hit needs no file. */
    OK(ortmem_residency_acquire(fx.cache, 1, &p));
    OK(ortmem_residency_release(fx.cache, 1));
    /* Truncated after open: refused, naming both sizes, never read. */
    cr_assert_eq(truncate(path, (off_t)(file_bytes - 100)), 0);
    EXPECT_STATUS(ortmem_residency_acquire(fx.cache, 3, &p), ORTMEM_E_IO);
    snprintf(want, sizeof want, "%llu bytes now, %llu at open",
             (unsigned long long)(file_bytes - 100), (unsigned long long)file_bytes);
    cr_assert(strstr(ortmem_last_error(), want), "%s", ortmem_last_error());
    ortmem_residency_stats s = cache_stats();
    cr_assert_eq(s.refusals, 2);
    cr_assert_eq(s.misses, 1);
    cr_assert_eq(s.hits, 1);
    ledger_exact(slot_bytes(1), 0);
    /* Evicting a pinned slot. */
    OK(ortmem_residency_pin(fx.cache, 1));
    EXPECT_STATUS(ortmem_residency_evict(fx.cache, 1), ORTMEM_E_BUSY);
    OK(ortmem_residency_unpin(fx.cache, 1));
    OK(ortmem_residency_cache_destroy(fx.cache));
    fx.cache = NULL;
    ortmem_vmm_stats v = stats_of(fx.cpu);
    cr_assert_eq(v.owned_bytes, base.owned_bytes);
    cr_assert_eq(v.mapped_bytes, base.mapped_bytes);
    cr_assert_eq(v.reserved_va_bytes, base.reserved_va_bytes);
    destroy_all();
}

Test(offload_cache, pressure_from_another_holder_reclaims_cold_weights)
{
    uint64_t limit = all_slots() + slot_bytes(0);
    make_authority(limit);
    OK(open_catalog());
    OK(make_cache(limit, 1));
    void *p;
    for (uint32_t t = 0; t < NT; t++) {
        OK(ortmem_residency_acquire(fx.cache, t, &p));
        OK(ortmem_residency_release(fx.cache, t));
    }
    OK(ortmem_residency_pin(fx.cache, 0));
    ledger_exact(all_slots(), 0);
    ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
    ho.name = "kv";
    ho.role = ORTMEM_ROLE_KV;
    ho.priority = 10;
    ortmem_holder *kv = NULL;
    OK(ortmem_holder_register(fx.authority, &ho, &kv));
    /* The free room plus three granules: the coldest unpinned weights (1, two
     * granules, then 2, one) go; 0 is pinned and stays. */
    uint64_t want = limit - all_slots() + 3 * G;
    ortmem_grant *g = NULL;
    OK(ortmem_grant_prepare(kv, want, &g));
    OK(ortmem_grant_charge(g, want));
    cr_assert(ortmem_residency_is_resident(fx.cache, 0));
    cr_assert(!ortmem_residency_is_resident(fx.cache, 1));
    cr_assert(!ortmem_residency_is_resident(fx.cache, 2));
    cr_assert(ortmem_residency_is_resident(fx.cache, 3));
    ortmem_residency_stats s = cache_stats();
    cr_assert_eq(s.reclaimed_bytes, slot_bytes(1) + slot_bytes(2));
    cr_assert_eq(s.evictions, 2);
    ledger_exact(slot_bytes(0) + slot_bytes(3), 0);
    /* The weights cannot grow into what KV holds (KV is not reclaimable):
     * paging 1 back in evicts the cold 3 and is still short, so it is
     * refused with the numbers; the ring cannot take it either. */
    EXPECT_STATUS(ortmem_residency_acquire(fx.cache, 1, &p), ORTMEM_E_BUDGET);
    char num[96];
    snprintf(num, sizeof num, "available %llu of limit %llu", (unsigned long long)G,
             (unsigned long long)limit);
    cr_assert(strstr(ortmem_last_error(), num), "%s", ortmem_last_error());
    cr_assert(!ortmem_residency_is_resident(fx.cache, 3));
    ledger_exact(slot_bytes(0), 0);
    cr_assert_eq(cache_stats().refusals, 1);
    /* Once KV gives its bytes back, it fits. */
    OK(ortmem_holder_refund(kv, want));
    OK(ortmem_residency_acquire(fx.cache, 1, &p));
    cr_assert_eq(mismatch(fx.cpu, p, 1), tensor_bytes(1));
    OK(ortmem_residency_release(fx.cache, 1));
    ledger_exact(slot_bytes(0) + slot_bytes(1), 0);
    OK(ortmem_holder_unregister(kv));
    OK(ortmem_residency_unpin(fx.cache, 0));
    destroy_all();
}

/* ---- fault sweeps ---- */

static ortmem_backend *ledger_backend; /* where the slots' regions live */

/* The backend's ledger holds exactly the cache's slots: resident, ring and
 * evictions still pending, plus what it quarantined. */
static void ledger_matches_cache(void)
{
    ortmem_residency_stats s = cache_stats();
    ortmem_vmm_stats v = stats_of(ledger_backend);
    uint64_t slots = s.resident_bytes + s.ring_bytes + s.retiring_bytes;
    cr_assert_eq(v.mapped_bytes, slots + v.quarantined_mapped_bytes,
                 "mapped %llu, cache slots %llu, stuck %llu", (unsigned long long)v.mapped_bytes,
                 (unsigned long long)slots, (unsigned long long)v.quarantined_mapped_bytes);
    cr_assert_eq(v.owned_bytes, slots + v.quarantined_bytes, "owned %llu, slots %llu, q %llu",
                 (unsigned long long)v.owned_bytes, (unsigned long long)slots,
                 (unsigned long long)v.quarantined_bytes);
}

/* acquire, check the bytes when it succeeded, release */
static ortmem_status touch(uint32_t t, ortmem_backend *b)
{
    void *p = NULL;
    ortmem_status st = ortmem_residency_acquire(fx.cache, t, &p);
    cr_assert(st == ORTMEM_OK || ortmem_last_error()[0], "tensor %u: %s without a detail", t,
              ortmem_status_str(st));
    ledger_matches_cache();
    if (st != ORTMEM_OK)
        return st;
    cr_assert_eq(mismatch(b, p, t), tensor_bytes(t), "tensor %u differs after a fault", t);
    OK(ortmem_residency_release(fx.cache, t));
    return ORTMEM_OK;
}

static ortmem_residency_stats last_stats;

/* Page-in, eviction, streaming, page-in again, pin: every status checked to
 * carry a detail, every successful acquire's bytes checked. Returns the
 * failures seen. */
static int workload(ortmem_backend *b)
{
    int failures = 0;
    ortmem_status st = make_cache(slot_bytes(0) + slot_bytes(1) + slot_bytes(0), 1);
    if (st != ORTMEM_OK) {
        cr_assert_neq(ortmem_last_error()[0], '\0');
        fx.cache = NULL;
        return 1;
    }
    static const uint32_t order[] = {0, 1, 2, 3, 1, 0, 3, 2};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        failures += touch(order[i], b) != ORTMEM_OK;
    if (ortmem_residency_is_resident(fx.cache, 2) && ortmem_residency_evict(fx.cache, 2) != 0)
        failures++;
    ledger_matches_cache();
    failures += touch(2, b) != ORTMEM_OK;
    if (ortmem_residency_pin(fx.cache, 1) == ORTMEM_OK)
        OK(ortmem_residency_unpin(fx.cache, 1));
    else
        failures++;
    ledger_matches_cache();
    last_stats = cache_stats();
    return failures;
}

/* A failure no step reported was absorbed (a retirement retried by the next
 * poll, an event whose destroy failed after its copy landed): the run must
 * then count exactly what the unarmed run counted. */
static void same_counts(const ortmem_residency_stats *a, const ortmem_residency_stats *b,
                        const char *what, uint64_t n)
{
    cr_assert(a->hits == b->hits && a->misses == b->misses && a->page_ins == b->page_ins &&
                  a->evictions == b->evictions && a->bytes_moved == b->bytes_moved &&
                  a->streamed == b->streamed && a->resident_bytes == b->resident_bytes &&
                  a->ring_bytes == b->ring_bytes && a->refusals == b->refusals,
              "%s %llu: an absorbed failure changed the counts (page-ins %llu vs %llu, "
              "evictions %llu vs %llu)",
              what, (unsigned long long)n, (unsigned long long)a->page_ins,
              (unsigned long long)b->page_ins, (unsigned long long)a->evictions,
              (unsigned long long)b->evictions);
}

/* Destroys the cache and checks the ledger: nothing owned or mapped but
 * what the backend reports quarantined. */
static void end_run(ortmem_backend *b, const char *what, uint64_t n)
{
    if (fx.cache) {
        ortmem_status st = ortmem_residency_cache_destroy(fx.cache);
        cr_assert(st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED, "%s %llu: destroy -> %s: %s", what,
                  (unsigned long long)n, ortmem_status_str(st), ortmem_last_error());
        fx.cache = NULL;
    }
    cr_assert_eq(policy_live, 0);
    ortmem_vmm_stats v = stats_of(b);
    cr_assert_eq(v.owned_bytes, v.quarantined_bytes, "%s %llu: owned %llu, quarantined %llu", what,
                 (unsigned long long)n, (unsigned long long)v.owned_bytes,
                 (unsigned long long)v.quarantined_bytes);
    cr_assert_eq(v.mapped_bytes, v.quarantined_mapped_bytes, "%s %llu: mapped %llu", what,
                 (unsigned long long)n, (unsigned long long)v.mapped_bytes);
    ortmem_authority_report a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    OK(ortmem_authority_report_get(fx.authority, &a, NULL, 0));
    cr_assert_eq(a.by_role_owned[ORTMEM_ROLE_WEIGHTS], 0, "%s %llu: weights still own %llu", what,
                 (unsigned long long)n, (unsigned long long)a.by_role_owned[ORTMEM_ROLE_WEIGHTS]);
    cr_assert_eq(a.retirements_pending, 0);
}

Test(offload_cache, every_backend_call_failed_once_leaves_the_ledger_at_baseline)
{
    OK(open_catalog());
    stream_mask[3] = true;
    uint64_t calls = 0;
    ortmem_residency_stats unarmed;
    int absorbed = 0;
    for (int persistent = 0; persistent < 2; persistent++)
        for (uint64_t n = 0; n == 0 || n <= calls; n++) {
            ortmem_backend *cpu = cpu_backend_with_granule(G), *f = NULL;
            OK(ortmem_fault_backend_create(cpu, NULL, &f));
            ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
            ao.limit_bytes = 64 * MiB;
            OK(ortmem_authority_create(f, &ao, &fx.authority));
            ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
            fo.fail_at = n;
            fo.persistent = n ? persistent : 0;
            OK(ortmem_fault_backend_arm(f, &fo));
            ledger_backend = f;
            int failures = workload(cpu); /* read back past the fault wrapper */
            uint64_t injected = 0;
            if (n == 0) {
                OK(ortmem_fault_backend_counts(f, &calls, &injected));
                cr_assert_eq(failures, 0);
                cr_assert_gt(calls, 20);
                unarmed = last_stats;
            } else if (failures == 0) {
                OK(ortmem_fault_backend_counts(f, NULL, &injected));
                same_counts(&last_stats, &unarmed, persistent ? "persistent" : "once", n);
                absorbed += injected > 0;
            }
            ortmem_fault_options off = ORTMEM_FAULT_OPTIONS_INIT;
            OK(ortmem_fault_backend_arm(f, &off));
            end_run(f, persistent ? "persistent" : "once", n);
            ortmem_status st = ortmem_authority_destroy(fx.authority);
            cr_assert_eq(st, ORTMEM_OK, "authority destroy: %s", ortmem_last_error());
            fx.authority = NULL;
            st = ortmem_backend_destroy(f);
            cr_assert(st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED);
            st = ortmem_backend_destroy(cpu);
            cr_assert(st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED);
        }
    /* Most failures surface; the few absorbed are retried retirements and
     * event destroys. */
    cr_assert_lt(absorbed, calls / 2, "%d of %llu failures absorbed", absorbed,
                 (unsigned long long)calls);
    OK(ortmem_weight_catalog_destroy(fx.catalog));
    fx.catalog = NULL;
    OK(ortmem_backend_destroy(fx.cpu));
}

Test(offload_cache, every_host_allocation_failed_once_changes_nothing)
{
    OK(open_catalog());
    stream_mask[3] = true;
    make_authority(64 * MiB);
    ledger_backend = fx.cpu;
    uint64_t calls = 0;
    ortmem_residency_stats unarmed;
    for (uint64_t n = 0; n == 0 || n <= calls; n++) {
        ortmem_alloc_fault(n, 0);
        int failures = workload(fx.cpu);
        uint64_t counted = 0, failed = 0;
        ortmem_alloc_counts(&counted, &failed);
        ortmem_alloc_fault(0, 0);
        if (n == 0) {
            calls = counted;
            cr_assert_eq(failures, 0);
            cr_assert_gt(calls, 5);
            unarmed = last_stats;
        } else if (failures == 0)
            same_counts(&last_stats, &unarmed, "allocation", n);
        end_run(fx.cpu, "allocation", n);
    }
    destroy_all();
}

/* ---- pinned staging ---- */

static int registered, unregistered;
static size_t registered_bytes;

static ortmem_status count_register(void *user, void *ptr, size_t bytes)
{
    cr_assert_eq(user, &registered);
    cr_assert_eq((uintptr_t)ptr % G, 0);
    registered++;
    registered_bytes += bytes;
    return ORTMEM_OK;
}

static void count_unregister(void *user, void *ptr, size_t bytes)
{
    (void)user, (void)ptr;
    unregistered++;
    registered_bytes -= bytes;
}

/* Staging needs ortmem's private jemalloc (meson -Dstaging); a build
 * without it reports ORTMEM_E_UNAVAILABLE, and these tests skip saying so. */
static void staging_or_skip(void)
{
    ortmem_staging_options so = ORTMEM_STAGING_OPTIONS_INIT;
    ortmem_staging *st = NULL;
    ortmem_status s = ortmem_staging_create(&so, &st);
    if (s == ORTMEM_E_UNAVAILABLE)
        cr_skip_test("%s", ortmem_last_error());
    OK(s);
    OK(ortmem_staging_destroy(st));
}

Test(offload_cache, staging_pins_chunks_once_and_backs_a_host_catalog)
{
    staging_or_skip();
    /* ortmem's jemalloc is private: the process has no unprefixed mallocx. */
    cr_assert_null(dlsym(RTLD_DEFAULT, "mallocx"));
    ortmem_staging_options so = ORTMEM_STAGING_OPTIONS_INIT;
    so.chunk_bytes = 4 * MiB;
    so.host_register = count_register;
    so.host_unregister = count_unregister;
    so.user = &registered;
    ortmem_staging *st = NULL;
    OK(ortmem_staging_create(&so, &st));
    ortmem_weight_tensor host_table[NT];
    memcpy(host_table, table, sizeof host_table);
    OK(ortmem_weight_catalog_create_host(st, host_table, NT, &fx.catalog));
    cr_assert_eq(registered, 1, "chunks registered: %d", registered);
    ortmem_staging_stats ss = {sizeof ss, 0, 0, 0, 0};
    OK(ortmem_staging_stats_get(st, &ss));
    cr_assert_eq(ss.chunks, 1);
    cr_assert_eq(ss.chunk_bytes, registered_bytes);
    cr_assert_eq(ss.allocations, NT);
    uint64_t sum = 0;
    for (uint32_t t = 0; t < NT; t++)
        sum += tensor_bytes(t);
    cr_assert_geq(ss.allocated_bytes, sum);
    for (uint32_t t = 0; t < NT; t++) {
        void *h = NULL;
        OK(ortmem_weight_catalog_host(fx.catalog, t, &h));
        for (uint64_t i = 0; i < tensor_bytes(t); i++)
            ((uint8_t *)h)[i] = file_byte(table[t].offset + i);
    }
    EXPECT_STATUS(ortmem_staging_destroy(st), ORTMEM_E_BUSY);
    int stack_byte = 0;
    EXPECT_STATUS(ortmem_staging_free(st, &stack_byte), ORTMEM_E_NOT_FOUND);
    /* The cache pages in from pinned host memory as from the file. */
    make_authority(64 * MiB);
    OK(make_cache(all_slots() + slot_bytes(0), 1));
    void *p;
    for (uint32_t t = 0; t < NT; t++) {
        OK(ortmem_residency_acquire(fx.cache, t, &p));
        cr_assert_eq(mismatch(fx.cpu, p, t), tensor_bytes(t));
        OK(ortmem_residency_release(fx.cache, t));
    }
    OK(ortmem_weight_catalog_verify(fx.catalog));
    destroy_all();
    OK(ortmem_staging_stats_get(st, &ss));
    cr_assert_eq(ss.allocations, 0);
    cr_assert_eq(ss.allocated_bytes, 0);
    cr_assert_eq(unregistered, 0); /* chunks stay pinned until the staging goes */
    OK(ortmem_staging_destroy(st));
    cr_assert_eq(unregistered, 1);
    cr_assert_eq(registered_bytes, 0);
}

Test(offload_cache, staging_and_a_host_catalog_under_host_allocation_failures)
{
    staging_or_skip();
    uint64_t calls = 0;
    /* Persistent: jemalloc asks its hook again after a failed grow, so a
     * single failure is absorbed; from the nth on, every one fails. */
    for (uint64_t n = 0; n == 0 || n <= calls; n++) {
        ortmem_alloc_fault(n, n ? 1 : 0);
        ortmem_staging_options so = ORTMEM_STAGING_OPTIONS_INIT;
        so.chunk_bytes = 1 * MiB; /* several chunks: the hook's bookkeeping grows */
        ortmem_staging *st = NULL;
        ortmem_weight_catalog *cat = NULL;
        ortmem_status s1 = ortmem_staging_create(&so, &st);
        cr_assert(s1 == ORTMEM_OK || ortmem_last_error()[0]);
        ortmem_status s2 = s1;
        if (s1 == ORTMEM_OK) {
            ortmem_weight_tensor big[NT];
            memcpy(big, table, sizeof big);
            for (uint32_t t = 0; t < NT; t++)
                big[t].bytes = 3 * MiB * (t + 1);
            s2 = ortmem_weight_catalog_create_host(st, big, NT, &cat);
            cr_assert(s2 == ORTMEM_OK || ortmem_last_error()[0]);
        }
        uint64_t counted = 0;
        ortmem_alloc_counts(&counted, NULL);
        ortmem_alloc_fault(0, 0);
        if (n == 0) {
            calls = counted;
            cr_assert_eq(s2, ORTMEM_OK);
        }
        if (cat)
            OK(ortmem_weight_catalog_destroy(cat));
        if (st) {
            ortmem_staging_stats ss = {sizeof ss, 0, 0, 0, 0};
            OK(ortmem_staging_stats_get(st, &ss));
            cr_assert_eq(ss.allocations, 0, "failure %llu left %llu allocations",
                         (unsigned long long)n, (unsigned long long)ss.allocations);
            OK(ortmem_staging_destroy(st));
        }
    }
    cr_assert_gt(calls, 3);
    OK(ortmem_backend_destroy(fx.cpu));
}

/* ---- events that complete late (a device's streams, on the CPU) ---- */

typedef struct slow_events {
    ortmem_backend *inner;
    ortmem_backend_ops calls;
    int busy_left; /* event queries still answered "pending" */
    /* late_only: only the last event recorded on late_stream is late (the
     * compute stream); the others complete at once. */
    bool late_only, late_live;
    uint64_t late_stream, late_event;
    int late_records;      /* events recorded on late_stream */
    int early_copies;      /* copies issued while the late event was still pending */
    int fail_late_records; /* records on late_stream still to fail */
} slow_events;

static slow_events slow;

static ortmem_status se_granularity(void *s, size_t *m, size_t *r)
{
    return slow.calls.granularity(((slow_events *)s)->inner, m, r);
}
static ortmem_status se_reserve(void *s, size_t n, size_t a, uintptr_t *va)
{
    return slow.calls.reserve(((slow_events *)s)->inner, n, a, va);
}
static ortmem_status se_unreserve(void *s, uintptr_t va, size_t n)
{
    return slow.calls.unreserve(((slow_events *)s)->inner, va, n);
}
static ortmem_status se_create(void *s, size_t n, unsigned f, uint64_t *h)
{
    return slow.calls.create(((slow_events *)s)->inner, n, f, h);
}
static ortmem_status se_release(void *s, uint64_t h)
{
    return slow.calls.release(((slow_events *)s)->inner, h);
}
static ortmem_status se_map(void *s, uintptr_t va, size_t n, uint64_t h, size_t off)
{
    return slow.calls.map(((slow_events *)s)->inner, va, n, h, off);
}
static ortmem_status se_unmap(void *s, uintptr_t va, size_t n)
{
    return slow.calls.unmap(((slow_events *)s)->inner, va, n);
}
static ortmem_status se_set_access(void *s, uintptr_t va, size_t n, ortmem_access a)
{
    return slow.calls.set_access(((slow_events *)s)->inner, va, n, a);
}
static ortmem_status se_copy(void *s, uintptr_t d, uintptr_t src, size_t n)
{
    return slow.calls.copy(((slow_events *)s)->inner, d, src, n);
}
static ortmem_status se_copy_async(void *s, uintptr_t d, uintptr_t src, size_t n, uint64_t st)
{
    slow.early_copies += slow.late_only && slow.late_live;
    return slow.calls.copy_async(((slow_events *)s)->inner, d, src, n, st);
}
static ortmem_status se_record(void *s, uint64_t st, uint64_t *e)
{
    if (slow.late_only && st == slow.late_stream && slow.fail_late_records > 0) {
        slow.fail_late_records--;
        return ORTMEM_E_BACKEND;
    }
    ortmem_status r = slow.calls.event_record(((slow_events *)s)->inner, st, e);
    if (r == ORTMEM_OK && slow.late_only && st == slow.late_stream) {
        slow.late_event = *e;
        slow.late_live = true;
        slow.late_records++;
    }
    return r;
}
static ortmem_status se_query(void *s, uint64_t e)
{
    if (slow.late_only) {
        if (!slow.late_live || e != slow.late_event)
            return slow.calls.event_query(((slow_events *)s)->inner, e);
        if (slow.busy_left > 0) {
            slow.busy_left--;
            return ORTMEM_E_BUSY;
        }
        slow.late_live = false;
        return slow.calls.event_query(((slow_events *)s)->inner, e);
    }
    if (slow.busy_left > 0) {
        slow.busy_left--;
        return ORTMEM_E_BUSY;
    }
    return slow.calls.event_query(((slow_events *)s)->inner, e);
}
static ortmem_status se_event_destroy(void *s, uint64_t e)
{
    return slow.calls.event_destroy(((slow_events *)s)->inner, e);
}
static void se_destroy(void *s)
{
    (void)s;
}

static void make_slow_backend(void)
{
    memset(&slow, 0, sizeof slow);
    slow.inner = fx.cpu;
    OK(ortmem_backend_forwarding_ops(fx.cpu, &slow.calls));
    ortmem_backend_ops ops = {
        .struct_size = sizeof ops,
        .name = "slow-events",
        .granularity = se_granularity,
        .reserve = se_reserve,
        .unreserve = se_unreserve,
        .create = se_create,
        .release = se_release,
        .map = se_map,
        .unmap = se_unmap,
        .set_access = se_set_access,
        .copy = se_copy,
        .destroy = se_destroy,
        .copy_async = se_copy_async,
        .event_record = se_record,
        .event_query = se_query,
        .event_destroy = se_event_destroy,
    };
    OK(ortmem_backend_create_wrapper(fx.cpu, &ops, &slow, &fx.b));
}

Test(offload_cache, a_pending_copy_stalls_and_a_pending_eviction_keeps_its_bytes_until_its_fence)
{
    make_slow_backend();
    make_authority(64 * MiB);
    OK(open_catalog());
    OK(make_cache(all_slots() + slot_bytes(0), 1));
    ledger_backend = fx.b;
    /* The copy's event is pending twice: the acquire waits, one stall. */
    slow.busy_left = 2;
    void *p, *slot0;
    OK(ortmem_residency_acquire(fx.cache, 0, &p));
    cr_assert_eq(slow.busy_left, 0);
    cr_assert_eq(mismatch(fx.cpu, p, 0), tensor_bytes(0));
    OK(ortmem_residency_release(fx.cache, 0));
    cr_assert_eq(cache_stats().stalls, 1);
    uint64_t copy_stall_ns = cache_stats().stall_ns;
    cr_assert_gt(copy_stall_ns, 0, "the wait for the copy's event took no time");
    /* The compute stream has not finished: the evicted slot stays mapped and
     * charged, counted as retiring, not resident. */
    slow.busy_left = 1000000;
    OK(ortmem_residency_evict(fx.cache, 0));
    cr_assert(!ortmem_residency_is_resident(fx.cache, 0));
    ortmem_residency_stats s = cache_stats();
    cr_assert_eq(s.retiring_bytes, slot_bytes(0));
    cr_assert_eq(s.resident_bytes, 0);
    cr_assert_eq(stats_of(fx.b).mapped_bytes, slot_bytes(0));
    ledger_matches_cache();
    /* Acquiring it again waits for the decommit, then pages it in at the
     * same pointer. */
    slow.busy_left = 3;
    OK(ortmem_residency_acquire(fx.cache, 0, &p));
    OK(ortmem_residency_slot(fx.cache, 0, &slot0));
    cr_assert_eq(p, slot0);
    cr_assert_eq(mismatch(fx.cpu, p, 0), tensor_bytes(0));
    OK(ortmem_residency_release(fx.cache, 0));
    s = cache_stats();
    cr_assert_eq(s.retiring_bytes, 0);
    cr_assert_eq(s.resident_bytes, slot_bytes(0));
    cr_assert_eq(s.stalls, 2);
    cr_assert_gt(s.stall_ns, copy_stall_ns, "the wait for the eviction took no time");
    cr_assert_eq(s.page_ins, 2);
    cr_assert_eq(s.evictions, 1);
    ledger_matches_cache();
    destroy_all();
}

/* A released ring slot may still be read by kernels queued on the compute
 * stream: its refill waits for the event recorded there at the release (a
 * stall) and copies nothing before it has completed. */
Test(offload_cache, a_ring_slot_is_refilled_only_after_its_last_reader_on_the_compute_stream)
{
    enum { COMPUTE = 5 };
    make_slow_backend();
    slow.late_only = true;
    slow.late_stream = COMPUTE;
    make_authority(64 * MiB);
    OK(open_catalog());
    OK(make_cache_on(all_slots() + slot_bytes(0), 1, COMPUTE));
    ledger_backend = fx.b;
    stream_mask[0] = stream_mask[1] = true;
    void *p, *q;
    OK(ortmem_residency_acquire(fx.cache, 0, &p)); /* fills the ring's slot */
    OK(ortmem_residency_release(fx.cache, 0));
    cr_assert_eq(slow.late_records, 1, "the release recorded %d events on the compute stream",
                 slow.late_records);
    /* The reader's kernels are still running: the refill waits them out. */
    slow.busy_left = 3;
    OK(ortmem_residency_acquire(fx.cache, 1, &q));
    cr_assert_eq(q, p);
    cr_assert_eq(slow.early_copies, 0, "%d copies overwrote the slot before its reader finished",
                 slow.early_copies);
    cr_assert_eq(slow.busy_left, 0);
    cr_assert_eq(mismatch(fx.cpu, q, 1), tensor_bytes(1));
    ortmem_residency_stats s = cache_stats();
    cr_assert_eq(s.stalls, 1);
    cr_assert_eq(s.streamed, 2);
    OK(ortmem_residency_release(fx.cache, 1));
    cr_assert_eq(slow.late_records, 2);
    /* Its reader done already: the refill does not stall. */
    uint64_t reader_stall_ns = cache_stats().stall_ns;
    cr_assert_gt(reader_stall_ns, 0);
    OK(ortmem_residency_acquire(fx.cache, 0, &q));
    cr_assert_eq(mismatch(fx.cpu, q, 0), tensor_bytes(0));
    cr_assert_eq(cache_stats().stalls, 1);
    cr_assert_eq(cache_stats().stall_ns, reader_stall_ns);
    /* The release cannot record its event: it still succeeds, and the next
     * refill records one on the compute stream itself and waits for it. */
    slow.fail_late_records = 1;
    OK(ortmem_residency_release(fx.cache, 0));
    cr_assert_eq(ortmem_last_error()[0], '\0', "%s", ortmem_last_error());
    cr_assert_eq(slow.late_records, 2);
    slow.busy_left = 2;
    OK(ortmem_residency_acquire(fx.cache, 1, &q));
    cr_assert_eq(slow.late_records, 3);
    cr_assert_eq(slow.early_copies, 0);
    cr_assert_eq(slow.busy_left, 0);
    cr_assert_eq(mismatch(fx.cpu, q, 1), tensor_bytes(1));
    OK(ortmem_residency_release(fx.cache, 1));
    s = cache_stats();
    cr_assert_eq(s.stalls, 2);
    cr_assert_eq(slow.early_copies, 0);
    cr_assert_eq(s.bytes_moved, 2 * tensor_bytes(0) + 2 * tensor_bytes(1));
    cr_assert_eq(s.resident_bytes, 0);
    cr_assert_eq(s.ring_bytes, slot_bytes(0));
    cr_assert_eq(stats_of(fx.b).mapped_bytes, slot_bytes(0));
    ledger_matches_cache();
    destroy_all();
}

/* ---- the cache under the real policies agrees with the simulation ---- */

/* A decode-shaped cycle through the public create: every policy's decisions
 * in the cache (hits, page-ins, evictions, streams, bytes) equal what
 * ortmem_residency_simulate predicts for the same trace and resident budget
 * (the ring sits outside the simulated budget, as in the cache). */
Test(offload_cache, the_cache_disposes_as_the_simulated_policy_proposes)
{
    const ortmem_residency_policy kinds[] = {ORTMEM_RESIDENCY_LRU, ORTMEM_RESIDENCY_SCAN_RESISTANT,
                                             ORTMEM_RESIDENCY_ADAPTIVE};
    enum { STEPS = 8, RING = 1 };
    uint64_t bytes[NT];
    uint32_t trace[STEPS * NT];
    for (uint32_t t = 0; t < NT; t++)
        bytes[t] = tensor_bytes(t);
    for (uint32_t i = 0; i < STEPS * NT; i++)
        trace[i] = i % NT;
    const uint64_t ring_bytes = RING * slot_bytes(0); /* tensor 0 is the largest */
    const uint64_t resident = slot_bytes(0) + slot_bytes(1) + slot_bytes(3); /* 3 of 4 fit */
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        if (k)
            fx.cpu = cpu_backend_with_granule(G), fx.b = fx.cpu;
        make_authority(1ull << 30);
        OK(open_catalog());
        ortmem_residency_options o = ORTMEM_RESIDENCY_OPTIONS_INIT;
        o.policy = kinds[k];
        o.budget_bytes = resident + ring_bytes;
        o.ring_slots = RING;
        OK(ortmem_residency_cache_create(fx.authority, fx.catalog, &o, &fx.cache));
        for (uint32_t i = 0; i < STEPS * NT; i++) {
            void *p = NULL;
            OK(ortmem_residency_acquire(fx.cache, trace[i], &p));
            cr_assert_eq(mismatch(fx.b, p, trace[i]), tensor_bytes(trace[i]),
                         "tensor %u differs at access %u", trace[i], i);
            OK(ortmem_residency_release(fx.cache, trace[i]));
        }
        ortmem_residency_stats c = cache_stats();
        ortmem_residency_sim_stats m = {.struct_size = sizeof m};
        OK(ortmem_residency_simulate(bytes, NT, trace, STEPS * NT, G, resident, kinds[k], &m));
        const char *name = ortmem_residency_policy_name(kinds[k]);
        cr_assert_eq(c.hits, m.hits, "%s: hits %llu, simulated %llu", name,
                     (unsigned long long)c.hits, (unsigned long long)m.hits);
        cr_assert_eq(c.misses, m.misses, "%s", name);
        cr_assert_eq(c.hit_bytes, m.hit_bytes, "%s", name);
        cr_assert_eq(c.page_ins, m.page_ins, "%s", name);
        cr_assert_eq(c.evictions, m.evictions, "%s", name);
        cr_assert_eq(c.streamed, m.streamed, "%s", name);
        cr_assert_eq(c.bytes_moved, m.bytes_moved, "%s", name);
        cr_assert(k != 0 || c.hits == 0, "LRU's collapse on the cycle");
        cr_assert(k != 1 || c.hits > 0, "the scan-resistant policy keeps a subset");
        destroy_all();
    }
}

/* ---- a cache destroyed inside a pressure pass that picked its holder ---- */

static ortmem_status destroy_in_pass = ORTMEM_OK;
static int destroy_in_pass_armed;

static uint64_t destroys_the_cache(void *user, uint64_t want)
{
    (void)user;
    (void)want;
    if (destroy_in_pass_armed)
        destroy_in_pass = ortmem_residency_cache_destroy(fx.cache);
    destroy_in_pass_armed = 0;
    return 0;
}

/* An earlier holder's callback destroys the cache while the same pass has
 * picked "weights": refused, nothing changes (the pass then reclaims cold
 * weights through the cache it would otherwise have freed). */
Test(offload_cache, a_destroy_inside_a_pressure_pass_that_picked_the_weights_is_refused)
{
    uint64_t limit = all_slots() + slot_bytes(0);
    make_authority(limit);
    OK(open_catalog());
    OK(make_cache(limit, 1));
    void *p;
    for (uint32_t t = 0; t < NT; t++) {
        OK(ortmem_residency_acquire(fx.cache, t, &p));
        OK(ortmem_residency_release(fx.cache, t));
    }
    ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
    ho.name = "first";
    ho.priority = -100; /* asked before the weights */
    ho.on_pressure = destroys_the_cache;
    ortmem_holder *first = NULL, *kv = NULL;
    OK(ortmem_holder_register(fx.authority, &ho, &first));
    ortmem_grant *gf = NULL;
    OK(ortmem_grant_prepare(first, G, &gf)); /* something to give: it is asked */
    OK(ortmem_grant_charge(gf, G));
    ho.name = "kv";
    ho.priority = 10;
    ho.on_pressure = NULL;
    OK(ortmem_holder_register(fx.authority, &ho, &kv));
    uint64_t want = limit - all_slots() + 2 * G;
    destroy_in_pass_armed = 1;
    ortmem_grant *g = NULL;
    OK(ortmem_grant_prepare(kv, want, &g));
    OK(ortmem_grant_charge(g, want));
    cr_assert_eq(destroy_in_pass_armed, 0, "the first holder was asked");
    cr_assert_eq(destroy_in_pass, ORTMEM_E_BUSY, "%s", ortmem_status_str(destroy_in_pass));
    cr_assert_gt(cache_stats().evictions, 0, "the weights gave back through the live cache");
    OK(ortmem_holder_refund(kv, want));
    OK(ortmem_holder_refund(first, G));
    OK(ortmem_holder_unregister(kv));
    OK(ortmem_holder_unregister(first));
    destroy_all();
}

/* ---- a captured graph that reads a slot ---- */

/* The signature names the slot's tensor when an eviction invalidates the
 * graph; paged in again at the same VA, the graph is kept (remapped); a pinned
 * slot cannot be evicted under it. */
Test(offload_cache, a_graph_signature_names_the_evicted_slot_and_keeps_a_repaged_one)
{
    make_authority(64 * MiB);
    OK(open_catalog());
    OK(make_cache(all_slots() + slot_bytes(0), 1));
    void *p = NULL;
    ortmem_graph_signature *sig = NULL;
    OK(ortmem_graph_signature_create(&sig));
    EXPECT_STATUS(ortmem_graph_signature_add_slot(sig, fx.cache, 2), ORTMEM_E_STATE);
    cr_assert(strstr(ortmem_last_error(), "blk.0.ffn_up.weight"), "%s", ortmem_last_error());
    OK(ortmem_residency_acquire(fx.cache, 2, &p));
    OK(ortmem_residency_release(fx.cache, 2));
    OK(ortmem_graph_signature_add_slot(sig, fx.cache, 2));
    char reason[256];
    ortmem_graph_verdict v;
    OK(ortmem_graph_signature_check(sig, reason, sizeof reason, &v));
    cr_assert_eq(v, ORTMEM_GRAPH_KEEP, "%s", reason);
    OK(ortmem_residency_evict(fx.cache, 2));
    (void)cache_stats();                           /* lets a pending decommit finish */
    OK(ortmem_residency_acquire(fx.cache, 0, &p)); /* polls retirements */
    OK(ortmem_residency_release(fx.cache, 0));
    OK(ortmem_graph_signature_check(sig, reason, sizeof reason, &v));
    cr_assert_eq(v, ORTMEM_GRAPH_INVALIDATE, "%s", reason);
    cr_assert(strstr(reason, "slot of tensor 'blk.0.ffn_up.weight'"), "%s", reason);
    cr_assert(strstr(reason, "evicted"), "%s", reason);
    OK(ortmem_residency_acquire(fx.cache, 2, &p));
    OK(ortmem_residency_release(fx.cache, 2));
    OK(ortmem_graph_signature_check(sig, reason, sizeof reason, &v));
    cr_assert_eq(v, ORTMEM_GRAPH_KEEP, "paged in again at the same VA: %s", reason);
    cr_assert(strstr(reason, "remapped"), "%s", reason);
    OK(ortmem_residency_pin(fx.cache, 2));
    EXPECT_STATUS(ortmem_residency_evict(fx.cache, 2), ORTMEM_E_BUSY);
    OK(ortmem_residency_unpin(fx.cache, 2));
    OK(ortmem_graph_signature_destroy(sig));
    destroy_all();
}
