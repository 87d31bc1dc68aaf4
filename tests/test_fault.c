/* Fault injection: each failure path leaves state unchanged or quarantined, and
 * a sweep fails every backend call of a scripted workload in turn. */
#include <stddef.h>
#include <unistd.h>

#include "backend_contract.h"
#include "support.h"

#define G TEST_GRANULE

/* ---- the contract, through a wrapper with no fault armed ---- */

static ortmem_backend *contract_inner; /* the wrapped CPU backend of this test */

static ortmem_backend *fault_contract_create(contract_granularity which)
{
    ortmem_cpu_options opt = ORTMEM_CPU_OPTIONS_INIT;
    if (which == CONTRACT_GRANULE_MINIMUM)
        opt.granule = (size_t)sysconf(_SC_PAGESIZE);
    OK(ortmem_cpu_backend_create(&opt, &contract_inner));
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    ortmem_backend *f = NULL;
    OK(ortmem_fault_backend_create(contract_inner, &fo, &f));
    return f;
}

/* Unarmed, the wrapper forwards each call once and counts it: its ledger's
 * calls and failures are the inner backend's, and the sum is its count. */
static void fault_contract_check(ortmem_backend *f, const char *when)
{
    ortmem_vmm_stats outer = stats_of(f), inner = stats_of(contract_inner);
    uint64_t sum = 0;
    for (int op = 0; op < ORTMEM_OP_COUNT; op++) {
        cr_assert_eq(outer.calls[op], inner.calls[op], "%s: %s calls %llu through, %llu inside",
                     when, ortmem_backend_op_name(op), (unsigned long long)outer.calls[op],
                     (unsigned long long)inner.calls[op]);
        cr_assert_eq(outer.failures[op], inner.failures[op], "%s: %s failures", when,
                     ortmem_backend_op_name(op));
        sum += outer.calls[op];
    }
    uint64_t counted, injected;
    OK(ortmem_fault_backend_counts(f, &counted, &injected));
    cr_assert_eq(counted, sum, "%s: the wrapper counted %llu of %llu calls", when,
                 (unsigned long long)counted, (unsigned long long)sum);
    cr_assert_eq(injected, 0, "%s", when);
}

static void fault_contract_destroy(ortmem_backend *f)
{
    fault_contract_check(f, "destroy");
    EXPECT_STATUS(ortmem_backend_destroy(contract_inner), ORTMEM_E_BUSY); /* held by the wrapper */
    OK(ortmem_backend_destroy(f));
    OK(ortmem_backend_destroy(contract_inner));
    contract_inner = NULL;
}

static const backend_contract *fault_contract(void)
{
    static backend_contract c;
    c = (backend_contract){
        .name = "fault(cpu)",
        .create = fault_contract_create,
        .destroy = fault_contract_destroy,
        .check = fault_contract_check,
        .granule_min = (size_t)sysconf(_SC_PAGESIZE),
        .granule_rec = 2 * MiB,
        .host_memory = 1,
    };
    return &c;
}

BACKEND_CONTRACT_TESTS(fault, *fault_contract())

/* ---- fault injection ---- */

static ortmem_backend *fault_on(ortmem_backend *inner, ortmem_backend_op op, uint64_t n)
{
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = op;
    fo.fail_at = n;
    ortmem_backend *f;
    OK(ortmem_fault_backend_create(inner, &fo, &f));
    return f;
}

Test(fault, options_are_validated_and_counts_reported)
{
    ortmem_backend *cpu = test_backend();
    ortmem_backend *f;
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.probability = 1.5;
    EXPECT_STATUS(ortmem_fault_backend_create(cpu, &fo, &f), ORTMEM_E_INVALID);
    fo.probability = 0;
    fo.op = (ortmem_backend_op)99;
    EXPECT_STATUS(ortmem_fault_backend_create(cpu, &fo, &f), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_fault_backend_counts(cpu, NULL, NULL), ORTMEM_E_HANDLE);
    f = fault_on(cpu, ORTMEM_OP_MAP, 2);
    cr_assert_str_eq(ortmem_backend_name(f), "fault(cpu)");
    ortmem_region *r = region_on(f, 4 * G, 0);
    OK(ortmem_region_commit(r, 0, G));
    EXPECT_STATUS(ortmem_region_commit(r, G, G), ORTMEM_E_BACKEND);
    cr_assert(strstr(ortmem_last_error(), "fault injected into map (counted call 2)"), "%s",
              ortmem_last_error());
    uint64_t calls, injected;
    OK(ortmem_fault_backend_counts(f, &calls, &injected));
    cr_assert_eq(calls, 2);
    cr_assert_eq(injected, 1);
    ortmem_fault_options again = ORTMEM_FAULT_OPTIONS_INIT;
    OK(ortmem_fault_backend_arm(f, &again));
    OK(ortmem_fault_backend_counts(f, &calls, &injected));
    cr_assert_eq(calls + injected, 0);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(f));
    OK(ortmem_backend_destroy(cpu));
}

Test(fault, probability_faults_are_deterministic_for_a_seed)
{
    uint64_t injected[2];
    for (int run = 0; run < 2; run++) {
        ortmem_backend *cpu = test_backend();
        ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
        fo.probability = 0.3;
        fo.seed = 1234;
        ortmem_backend *f;
        OK(ortmem_fault_backend_create(cpu, &fo, &f));
        ortmem_region *r = region_on(f, 64 * G, 0);
        for (size_t i = 0; i < 64; i++)
            (void)ortmem_region_commit(r, i * G, G);
        OK(ortmem_fault_backend_counts(f, NULL, &injected[run]));
        (void)ortmem_region_destroy(r);
        (void)ortmem_backend_destroy(f);
        (void)ortmem_backend_destroy(cpu);
    }
    cr_assert_gt(injected[0], 0);
    cr_assert_eq(injected[0], injected[1]);
}

static ortmem_backend *persistent_fault_on(ortmem_backend *inner, ortmem_backend_op op,
                                           uint64_t from)
{
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = op;
    fo.fail_at = from;
    fo.persistent = 1;
    ortmem_backend *f;
    OK(ortmem_fault_backend_create(inner, &fo, &f));
    return f;
}

Test(fault, persistent_mode_fails_every_call_of_the_op_from_the_nth_until_re_armed)
{
    ortmem_backend *cpu = test_backend();
    ortmem_backend *f = persistent_fault_on(cpu, ORTMEM_OP_MAP, 3);
    ortmem_region *r = region_on(f, 8 * G, 0);
    OK(ortmem_region_commit(r, 0, 2 * G)); /* maps 1 and 2 */
    ortmem_vmm_stats base = stats_of(f);
    cr_assert_eq(base.owned_bytes, 2 * G);
    cr_assert_eq(base.mapped_bytes, 2 * G);
    /* Every later map fails, each attempt in turn. */
    for (int attempt = 1; attempt <= 3; attempt++) {
        EXPECT_STATUS(ortmem_region_commit(r, 4 * G, 2 * G), ORTMEM_E_BACKEND);
        cr_assert(strstr(ortmem_last_error(), "failing persistently until re-armed"), "%s",
                  ortmem_last_error());
        uint64_t calls, injected;
        OK(ortmem_fault_backend_counts(f, &calls, &injected));
        cr_assert_eq(calls, 2 + (uint64_t)attempt, "attempt %d: calls %llu", attempt,
                     (unsigned long long)calls);
        cr_assert_eq(injected, (uint64_t)attempt, "attempt %d: injected %llu", attempt,
                     (unsigned long long)injected);
        ortmem_vmm_stats s = stats_of(f);
        cr_assert_eq(s.calls[ORTMEM_OP_MAP], 2 + (uint64_t)attempt);
        cr_assert_eq(s.failures[ORTMEM_OP_MAP], (uint64_t)attempt);
        cr_assert_eq(s.calls[ORTMEM_OP_CREATE], 2 + 2 * (uint64_t)attempt,
                     "each attempt created both granules before its first map");
        cr_assert_eq(s.calls[ORTMEM_OP_RELEASE], 2 * (uint64_t)attempt, "and rolled both back");
        /* The ledger is back at its baseline after each failed commit. */
        cr_assert_eq(s.owned_bytes, base.owned_bytes);
        cr_assert_eq(s.mapped_bytes, base.mapped_bytes);
        cr_assert_eq(s.owned_granules, base.owned_granules);
        cr_assert_eq(s.mapped_granules, base.mapped_granules);
        cr_assert_eq(s.quarantined_bytes, 0);
        cr_assert_eq(granule_info(r, 4 * G).state, ORTMEM_GRANULE_UNMAPPED);
        cr_assert_eq(granule_info(r, 5 * G).state, ORTMEM_GRANULE_UNMAPPED);
    }
    /* Other operations pass: decommit works while maps keep failing. */
    OK(ortmem_region_decommit(r, G, G));
    cr_assert_eq(stats_of(f).owned_bytes, G);
    /* Re-armed without a fault: maps work again and the counts start over. */
    ortmem_fault_options clear = ORTMEM_FAULT_OPTIONS_INIT;
    clear.op = ORTMEM_OP_MAP;
    OK(ortmem_fault_backend_arm(f, &clear));
    OK(ortmem_region_commit(r, 4 * G, 2 * G));
    uint64_t calls, injected;
    OK(ortmem_fault_backend_counts(f, &calls, &injected));
    cr_assert_eq(calls, 2);
    cr_assert_eq(injected, 0);
    cr_assert_eq(stats_of(f).mapped_bytes, 3 * G);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(f));
    OK(ortmem_backend_destroy(cpu));
}

Test(fault, persistent_mode_on_any_op_fails_everything_from_the_nth_call)
{
    ortmem_backend *cpu = test_backend();
    /* Calls 1 (reserve) and 2-4 (create, map, set_access of one granule) pass. */
    ortmem_backend *f = persistent_fault_on(cpu, ORTMEM_OP_ANY, 5);
    ortmem_region *r = region_on(f, 4 * G, 0);
    OK(ortmem_region_commit(r, 0, G));
    fill_pattern(ortmem_region_base(r), G, 11);
    ortmem_vmm_stats base = stats_of(f);
    EXPECT_STATUS(ortmem_region_commit(r, G, G), ORTMEM_E_BACKEND);   /* create */
    EXPECT_STATUS(ortmem_region_decommit(r, 0, G), ORTMEM_E_BACKEND); /* unmap */
    EXPECT_STATUS(ortmem_region_protect(r, 0, G, ORTMEM_ACCESS_READ), ORTMEM_E_BACKEND);
    uint64_t calls, injected;
    OK(ortmem_fault_backend_counts(f, &calls, &injected));
    cr_assert_eq(calls, 7);
    cr_assert_eq(injected, 3);
    ortmem_vmm_stats s = stats_of(f);
    cr_assert_eq(s.failures[ORTMEM_OP_CREATE], 1);
    cr_assert_eq(s.failures[ORTMEM_OP_UNMAP], 1);
    cr_assert_eq(s.failures[ORTMEM_OP_SET_ACCESS], 1);
    cr_assert_eq(s.owned_bytes, base.owned_bytes, "nothing changed");
    cr_assert_eq(s.mapped_bytes, base.mapped_bytes);
    cr_assert_eq(granule_info(r, 0).state, ORTMEM_GRANULE_MAPPED);
    cr_assert_eq(granule_info(r, 0).access, ORTMEM_ACCESS_READ_WRITE);
    cr_assert(check_pattern(ortmem_region_base(r), G, 11));
    ortmem_fault_options clear = ORTMEM_FAULT_OPTIONS_INIT;
    OK(ortmem_fault_backend_arm(f, &clear));
    OK(ortmem_region_decommit(r, 0, G));
    OK(ortmem_region_destroy(r));
    ortmem_vmm_stats end = stats_of(f);
    cr_assert_eq(end.owned_bytes, 0);
    cr_assert_eq(end.reserved_va_bytes, 0);
    OK(ortmem_backend_destroy(f));
    OK(ortmem_backend_destroy(cpu));
}

Test(fault, persistent_needs_a_first_call_and_old_option_sizes_mean_one_shot)
{
    ortmem_backend *cpu = test_backend();
    ortmem_backend *f = NULL;
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.persistent = 1;
    EXPECT_STATUS(ortmem_fault_backend_create(cpu, &fo, &f), ORTMEM_E_INVALID);
    cr_assert(strstr(ortmem_last_error(), "fail_at"), "%s", ortmem_last_error());
    cr_assert_null(f);
    /* A caller built before the field existed passes the shorter struct: the
     * field reads as 0, so the Nth call fails once. */
    fo.op = ORTMEM_OP_CREATE;
    fo.fail_at = 1;
    fo.struct_size = offsetof(ortmem_fault_options, persistent);
    OK(ortmem_fault_backend_create(cpu, &fo, &f));
    ortmem_region *r = region_on(f, 2 * G, 0);
    EXPECT_STATUS(ortmem_region_commit(r, 0, G), ORTMEM_E_BACKEND);
    OK(ortmem_region_commit(r, 0, G));
    OK(ortmem_region_commit(r, G, G));
    uint64_t injected;
    OK(ortmem_fault_backend_counts(f, NULL, &injected));
    cr_assert_eq(injected, 1);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(f));
    OK(ortmem_backend_destroy(cpu));
}

Test(fault, failed_map_or_set_access_leaves_the_region_unchanged)
{
    ortmem_backend_op ops[] = {ORTMEM_OP_CREATE, ORTMEM_OP_MAP, ORTMEM_OP_SET_ACCESS};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        ortmem_backend *cpu = test_backend();
        ortmem_backend *f = fault_on(cpu, ops[i], ops[i] == ORTMEM_OP_MAP ? 3 : 1);
        ortmem_region *r = region_on(f, 4 * G, 0);
        EXPECT_STATUS(ortmem_region_commit(r, 0, 4 * G), ORTMEM_E_BACKEND);
        ortmem_vmm_stats s = stats_of(f);
        cr_assert_eq(s.mapped_bytes, 0, "op %s", ortmem_backend_op_name(ops[i]));
        cr_assert_eq(s.owned_bytes, 0, "op %s", ortmem_backend_op_name(ops[i]));
        for (size_t g = 0; g < 4; g++)
            cr_assert_eq(granule_info(r, g * G).state, ORTMEM_GRANULE_UNMAPPED);
        OK(ortmem_region_commit(r, 0, 4 * G)); /* the fault was one call; now it works */
        OK(ortmem_region_destroy(r));
        OK(ortmem_backend_destroy(f));
        OK(ortmem_backend_destroy(cpu));
    }
}

Test(fault, failed_unmap_in_decommit_restores_the_runs_already_unmapped)
{
    ortmem_backend *cpu = test_backend();
    ortmem_backend *f = fault_on(cpu, ORTMEM_OP_UNMAP, 2);
    ortmem_region *r = region_on(f, 4 * G, 0);
    OK(ortmem_region_commit(r, 0, G));
    OK(ortmem_region_commit(r, 2 * G, G));
    fill_pattern(ortmem_region_base(r), G, 3);
    fill_pattern((uint8_t *)ortmem_region_base(r) + 2 * G, G, 4);
    EXPECT_STATUS(ortmem_region_decommit(r, 0, 4 * G), ORTMEM_E_BACKEND);
    cr_assert(strstr(ortmem_last_error(), "nothing changed"), "%s", ortmem_last_error());
    cr_assert_eq(granule_info(r, 0).state, ORTMEM_GRANULE_MAPPED);
    cr_assert_eq(granule_info(r, 2 * G).state, ORTMEM_GRANULE_MAPPED);
    cr_assert(check_pattern(ortmem_region_base(r), G, 3), "restored run keeps its bytes");
    cr_assert(check_pattern((uint8_t *)ortmem_region_base(r) + 2 * G, G, 4));
    ortmem_vmm_stats s = stats_of(f);
    cr_assert_eq(s.mapped_bytes, 2 * G);
    cr_assert_eq(s.quarantined_bytes, 0);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(f));
    OK(ortmem_backend_destroy(cpu));
}

Test(fault, failed_release_quarantines_the_granule_forever)
{
    ortmem_backend *cpu = test_backend();
    ortmem_backend *f = fault_on(cpu, ORTMEM_OP_RELEASE, 1);
    ortmem_region *r = region_on(f, 2 * G, 0);
    OK(ortmem_region_commit(r, 0, 2 * G));
    EXPECT_STATUS(ortmem_region_decommit(r, 0, 2 * G), ORTMEM_E_QUARANTINED);
    ortmem_vmm_stats s = stats_of(f);
    cr_assert_eq(s.mapped_bytes, 0, "the unmap itself succeeded");
    cr_assert_eq(s.owned_bytes, G, "the quarantined granule stays charged");
    cr_assert_eq(s.quarantined_bytes, G);
    cr_assert_eq(s.quarantined_granules, 1);
    OK(ortmem_region_commit(r, 0, 2 * G));
    cr_assert_eq(stats_of(f).calls[ORTMEM_OP_CREATE], 4, "never reused");
    OK(ortmem_region_destroy(r));
    EXPECT_STATUS(ortmem_backend_destroy(f), ORTMEM_E_QUARANTINED);
    OK(ortmem_backend_destroy(cpu));
}

Test(fault, failed_unmap_in_destroy_leaks_the_va_on_purpose)
{
    ortmem_backend *cpu = test_backend();
    ortmem_backend *f = fault_on(cpu, ORTMEM_OP_UNMAP, 1);
    ortmem_region *r = region_on(f, 4 * G, 0);
    OK(ortmem_region_commit(r, 0, G));
    OK(ortmem_region_commit(r, 2 * G, 2 * G));
    EXPECT_STATUS(ortmem_region_destroy(r), ORTMEM_E_QUARANTINED);
    cr_assert(strstr(ortmem_last_error(), "stays reserved on purpose"), "%s", ortmem_last_error());
    ortmem_vmm_stats s = stats_of(f);
    cr_assert_eq(s.quarantined_bytes, G);
    cr_assert_eq(s.quarantined_mapped_bytes, G);
    cr_assert_eq(s.owned_bytes, s.quarantined_bytes);
    cr_assert_eq(s.mapped_bytes, s.quarantined_mapped_bytes);
    cr_assert_eq(s.leaked_va_bytes, 4 * G);
    cr_assert_eq(s.calls[ORTMEM_OP_UNRESERVE], 0);
    EXPECT_STATUS(ortmem_region_destroy(r), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_backend_destroy(f), ORTMEM_E_QUARANTINED);
    OK(ortmem_backend_destroy(cpu));
}

/* ---- the sweep ---- */

enum { SWEEP_REGIONS = 4, SWEEP_GRANULES = 8 };

typedef struct sweep_model {
    ortmem_region *regions[SWEEP_REGIONS];
    uint64_t seed[SWEEP_REGIONS][SWEEP_GRANULES]; /* 0: no bytes we rely on */
    uint64_t next_seed;
    int corruptions;
    int failures;
} sweep_model;

static uint8_t *granule_va(sweep_model *m, int r, size_t g)
{
    return (uint8_t *)ortmem_region_base(m->regions[r]) + g * G;
}

/* Every granule the model relies on is mapped and holds its bytes. */
static void sweep_verify(sweep_model *m)
{
    for (int r = 0; r < SWEEP_REGIONS; r++) {
        for (size_t g = 0; g < SWEEP_GRANULES; g++) {
            if (!m->seed[r][g])
                continue;
            ortmem_granule_info info = granule_info(m->regions[r], g * G);
            if (info.state != ORTMEM_GRANULE_MAPPED ||
                !check_pattern(granule_va(m, r, g), G, m->seed[r][g]))
                m->corruptions++;
        }
    }
}

static void sweep_commit(sweep_model *m, int r, size_t g0, size_t n)
{
    bool fresh[SWEEP_GRANULES] = {0};
    for (size_t g = g0; g < g0 + n; g++)
        fresh[g] = granule_info(m->regions[r], g * G).state == ORTMEM_GRANULE_UNMAPPED;
    if (ortmem_region_commit(m->regions[r], g0 * G, n * G) != ORTMEM_OK) {
        m->failures++;
        return;
    }
    for (size_t g = g0; g < g0 + n; g++) {
        if (!fresh[g])
            continue;
        m->seed[r][g] = ++m->next_seed;
        fill_pattern(granule_va(m, r, g), G, m->seed[r][g]);
    }
}

static void sweep_decommit(sweep_model *m, int r, size_t g0, size_t n)
{
    ortmem_status st = ortmem_region_decommit(m->regions[r], g0 * G, n * G);
    if (st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED) {
        for (size_t g = g0; g < g0 + n; g++)
            m->seed[r][g] = 0;
    }
    m->failures += st != ORTMEM_OK;
}

static void sweep_share(sweep_model *m, int dst, size_t dg, int src, size_t sg, size_t n)
{
    if (ortmem_region_share(m->regions[dst], dg * G, m->regions[src], sg * G, n * G,
                            ORTMEM_ACCESS_READ) != ORTMEM_OK) {
        m->failures++;
        return;
    }
    for (size_t k = 0; k < n; k++)
        m->seed[dst][dg + k] = m->seed[src][sg + k];
}

static void sweep_cow_and_write(sweep_model *m, int r, size_t g)
{
    if (!m->seed[r][g])
        return; /* an earlier failure left it unmapped: cow has nothing to copy */
    ortmem_status st = ortmem_region_cow(m->regions[r], g * G, G);
    m->failures += st != ORTMEM_OK;
    if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED)
        return;
    /* Private now: rewrite without disturbing the sharer. */
    m->seed[r][g] = ++m->next_seed;
    fill_pattern(granule_va(m, r, g), G, m->seed[r][g]);
}

static void sweep_export_import(sweep_model *m, int src, size_t sg, int dst, size_t dg)
{
    int fd = -1;
    if (ortmem_region_export(m->regions[src], sg * G, &fd) != ORTMEM_OK) {
        m->failures++;
        return;
    }
    if (ortmem_region_import(m->regions[dst], dg * G, fd, ORTMEM_ACCESS_READ) == ORTMEM_OK)
        m->seed[dst][dg] = m->seed[src][sg];
    else
        m->failures++;
    close(fd);
}

/* Region 3 is exportable; the pool is on so the pool paths run too. */
static void sweep_workload(ortmem_backend *b, sweep_model *m)
{
    memset(m, 0, sizeof *m);
    OK(ortmem_pool_set_cap(b, 2 * G));
    for (int r = 0; r < SWEEP_REGIONS; r++) {
        ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
        opt.size = SWEEP_GRANULES * G;
        opt.flags = r == 3 ? ORTMEM_REGION_EXPORTABLE : 0;
        if (ortmem_region_create(b, &opt, &m->regions[r]) != ORTMEM_OK) {
            m->failures++;
            m->regions[r] = NULL;
        }
    }
    for (int r = 0; r < SWEEP_REGIONS; r++) {
        if (!m->regions[r])
            goto teardown;
    }
    sweep_commit(m, 0, 0, 4);
    sweep_verify(m);
    sweep_commit(m, 1, 1, 2);
    sweep_verify(m);
    sweep_share(m, 1, 4, 0, 0, 3);
    sweep_verify(m);
    sweep_cow_and_write(m, 1, 5);
    sweep_verify(m);
    sweep_decommit(m, 0, 0, 2);
    sweep_verify(m);
    sweep_commit(m, 0, 5, 3);
    sweep_verify(m);
    sweep_commit(m, 3, 0, 2);
    sweep_verify(m);
    sweep_export_import(m, 3, 1, 2, 6);
    sweep_verify(m);
    sweep_decommit(m, 1, 0, 8);
    sweep_verify(m);
    sweep_commit(m, 1, 0, 8);
    sweep_verify(m);
    if (ortmem_region_protect(m->regions[0], 5 * G, 3 * G, ORTMEM_ACCESS_READ) != ORTMEM_OK)
        m->failures++;
    sweep_verify(m);
teardown:
    for (int r = 0; r < SWEEP_REGIONS; r++) {
        if (m->regions[r] && ortmem_region_destroy(m->regions[r]) != ORTMEM_OK)
            m->failures++;
    }
    if (ortmem_pool_set_cap(b, 0) != ORTMEM_OK)
        m->failures++;
}

Test(fault, sweep_fails_every_backend_call_of_the_workload_in_turn)
{
    ortmem_backend *cpu = test_backend();
    ortmem_backend *clean = fault_on(cpu, ORTMEM_OP_ANY, 0);
    sweep_model m;
    sweep_workload(clean, &m);
    cr_assert_eq(m.failures, 0, "%s", ortmem_last_error());
    cr_assert_eq(m.corruptions, 0);
    uint64_t total;
    OK(ortmem_fault_backend_counts(clean, &total, NULL));
    cr_assert_gt(total, 60, "the workload makes %llu backend calls", (unsigned long long)total);
    OK(ortmem_backend_destroy(clean));
    OK(ortmem_backend_destroy(cpu));

    uint64_t quarantining_runs = 0;
    for (uint64_t n = 1; n <= total; n++) {
        cpu = test_backend();
        ortmem_backend *f = fault_on(cpu, ORTMEM_OP_ANY, n);
        sweep_workload(f, &m);
        uint64_t injected;
        OK(ortmem_fault_backend_counts(f, NULL, &injected));
        cr_assert_eq(injected, 1, "call %llu was reached and failed", (unsigned long long)n);
        cr_assert_gt(m.failures, 0, "call %llu: the failure was reported", (unsigned long long)n);
        cr_assert_eq(m.corruptions, 0, "call %llu: data corrupted", (unsigned long long)n);
        ortmem_vmm_stats s = stats_of(f);
        cr_assert_eq(s.owned_bytes, s.quarantined_bytes, "call %llu: owned %llu quarantined %llu",
                     (unsigned long long)n, (unsigned long long)s.owned_bytes,
                     (unsigned long long)s.quarantined_bytes);
        cr_assert_eq(s.mapped_bytes, s.quarantined_mapped_bytes, "call %llu: mapped %llu vs %llu",
                     (unsigned long long)n, (unsigned long long)s.mapped_bytes,
                     (unsigned long long)s.quarantined_mapped_bytes);
        quarantining_runs += s.quarantined_bytes > 0;
        (void)ortmem_backend_destroy(f);
        OK(ortmem_backend_destroy(cpu));
    }
    cr_assert_gt(quarantining_runs, 0, "some faults (release, unmap) must quarantine");
}
