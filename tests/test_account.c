/* The vmm accounting seam with a recording account: vmm takes a hold before it
 * creates or maps, charges out of the hold, moves charges between owner, pool
 * and quarantine, and keeps its account copies retained exactly while used. */
#include <stdatomic.h>

#include "support.h"

#define G TEST_GRANULE

typedef struct recorder {
    int64_t owned, mapped, held_owned, held_mapped, requested;
    int64_t retained;
    uint64_t holds, refusals;
    uint64_t refuse_above; /* refuse holds of more owned bytes than this */
    ortmem_region *region; /* what relieve looks at */
    uint64_t reliefs;
    bool stingy; /* relieve finds nothing to reclaim */
    uint64_t adopts, moves;
    bool declines_moves; /* its move answers 0: vmm refunds and adopts instead */
} recorder;

static ortmem_status rec_hold(void *self, uint64_t owned, uint64_t mapped)
{
    recorder *r = self;
    r->holds++;
    if (owned > r->refuse_above) {
        r->refusals++;
        return ortmem_error_set(ORTMEM_E_BUDGET, "recorder refuses %llu bytes",
                                (unsigned long long)owned);
    }
    r->held_owned += (int64_t)owned;
    r->held_mapped += (int64_t)mapped;
    return ORTMEM_OK;
}

static void rec_unhold(void *self, uint64_t owned, uint64_t mapped)
{
    recorder *r = self;
    r->held_owned -= (int64_t)owned;
    r->held_mapped -= (int64_t)mapped;
}

static void rec_charge(void *self, uint64_t owned, uint64_t mapped)
{
    recorder *r = self;
    /* A charge must come out of a hold the caller made. */
    cr_assert_geq(r->held_owned, (int64_t)owned, "charge of %llu owned without a hold",
                  (unsigned long long)owned);
    cr_assert_geq(r->held_mapped, (int64_t)mapped, "charge of %llu mapped without a hold",
                  (unsigned long long)mapped);
    r->held_owned -= (int64_t)owned;
    r->held_mapped -= (int64_t)mapped;
    r->owned += (int64_t)owned;
    r->mapped += (int64_t)mapped;
}

static void rec_adopt(void *self, uint64_t owned, uint64_t mapped)
{
    recorder *r = self;
    r->adopts++;
    r->owned += (int64_t)owned;
    r->mapped += (int64_t)mapped;
}

static void rec_refund(void *self, uint64_t owned, uint64_t mapped)
{
    recorder *r = self;
    r->owned -= (int64_t)owned;
    r->mapped -= (int64_t)mapped;
}

static void rec_requested(void *self, int64_t delta)
{
    ((recorder *)self)->requested += delta;
}

static void rec_retain(void *self)
{
    ((recorder *)self)->retained++;
}

static void rec_unretain(void *self)
{
    ((recorder *)self)->retained--;
}

static ortmem_account account_of(recorder *r)
{
    return (ortmem_account){.struct_size = sizeof(ortmem_account),
                            .self = r,
                            .hold = rec_hold,
                            .unhold = rec_unhold,
                            .charge = rec_charge,
                            .adopt = rec_adopt,
                            .refund = rec_refund,
                            .requested = rec_requested,
                            .retain = rec_retain,
                            .unretain = rec_unretain};
}

static int rec_move(void *self, void *to_self, uint64_t owned, uint64_t mapped)
{
    recorder *r = self, *to = to_self;
    if (r->declines_moves)
        return 0;
    r->moves++;
    r->owned -= (int64_t)owned;
    r->mapped -= (int64_t)mapped;
    to->owned += (int64_t)owned;
    to->mapped += (int64_t)mapped;
    return 1;
}

static ortmem_account moving_account_of(recorder *r)
{
    ortmem_account a = account_of(r);
    a.move = rec_move;
    return a;
}

static ortmem_region *charged_region(ortmem_backend *b, size_t size, const ortmem_account *acct)
{
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    opt.size = size;
    opt.account = acct;
    ortmem_region *r = NULL;
    OK(ortmem_region_create(b, &opt, &r));
    return r;
}

Test(account, commit_holds_then_charges_and_destroy_refunds_everything)
{
    ortmem_backend *b = test_backend();
    recorder rec = {.refuse_above = UINT64_MAX};
    ortmem_account acct = account_of(&rec);
    ortmem_region *r = charged_region(b, 4 * G, &acct);
    cr_assert_eq(rec.retained, 1, "the region keeps a retained copy");
    OK(ortmem_region_commit(r, 10, 2 * G)); /* touches granules 0..2 */
    cr_assert_eq(rec.holds, 1);
    cr_assert_eq(rec.owned, (int64_t)(3 * G));
    cr_assert_eq(rec.mapped, (int64_t)(3 * G));
    cr_assert_eq(rec.held_owned + rec.held_mapped, 0, "nothing stays held after the call");
    cr_assert_eq(rec.requested, (int64_t)(2 * G));
    cr_assert_eq(rec.retained, 1 + 3, "each owned granule keeps a copy");
    OK(ortmem_region_decommit(r, 0, G));
    cr_assert_eq(rec.owned, (int64_t)(2 * G));
    cr_assert_eq(rec.requested, (int64_t)(2 * G - (G - 10)));
    OK(ortmem_region_destroy(r));
    cr_assert_eq(rec.owned, 0);
    cr_assert_eq(rec.mapped, 0);
    cr_assert_eq(rec.requested, 0);
    cr_assert_eq(rec.retained, 0);
    OK(ortmem_backend_destroy(b));
}

Test(account, a_refused_hold_maps_nothing)
{
    ortmem_backend *b = test_backend();
    recorder rec = {.refuse_above = G};
    ortmem_account acct = account_of(&rec);
    ortmem_region *r = charged_region(b, 4 * G, &acct);
    EXPECT_STATUS(ortmem_region_commit(r, 0, 2 * G), ORTMEM_E_BUDGET);
    cr_assert(strstr(ortmem_last_error(), "recorder refuses 131072 bytes"), "%s",
              ortmem_last_error());
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.calls[ORTMEM_OP_CREATE] + s.calls[ORTMEM_OP_MAP], 0);
    cr_assert_eq(rec.owned + rec.mapped + rec.held_owned + rec.held_mapped, 0);
    OK(ortmem_region_commit(r, 0, G));
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(b));
}

Test(account, pooled_granules_move_their_charge_without_a_hold)
{
    ortmem_backend *b = test_backend();
    recorder pool = {.refuse_above = UINT64_MAX}, quarantine = pool, a = pool, c = pool;
    ortmem_account pool_acct = account_of(&pool), q_acct = account_of(&quarantine);
    OK(ortmem_backend_set_accounts(b, &pool_acct, &q_acct));
    EXPECT_STATUS(ortmem_backend_set_accounts(b, &pool_acct, &q_acct), ORTMEM_E_STATE);
    OK(ortmem_pool_set_cap(b, 4 * G));
    ortmem_account a_acct = account_of(&a), c_acct = account_of(&c);
    ortmem_region *ra = charged_region(b, 2 * G, &a_acct);
    OK(ortmem_region_commit(ra, 0, 2 * G));
    OK(ortmem_region_destroy(ra));
    cr_assert_eq(a.owned, 0);
    cr_assert_eq(pool.owned, (int64_t)(2 * G), "pooled granules are the pool's");
    c.refuse_above = 0; /* c may not create anything: only pooled granules fit */
    ortmem_region *rc = charged_region(b, 2 * G, &c_acct);
    OK(ortmem_region_commit(rc, 0, 2 * G));
    cr_assert_eq(c.owned, (int64_t)(2 * G));
    cr_assert_eq(pool.owned, 0);
    cr_assert_eq(stats_of(b).pool_hits, 2);
    OK(ortmem_region_destroy(rc));
    OK(ortmem_pool_set_cap(b, 0));
    cr_assert_eq(pool.owned, 0);
    OK(ortmem_backend_set_accounts(b, NULL, NULL));
    cr_assert_eq(pool.retained + quarantine.retained + a.retained + c.retained, 0);
    OK(ortmem_backend_destroy(b));
}

Test(account, a_failed_release_moves_the_charge_to_quarantine)
{
    ortmem_backend *cpu = test_backend();
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = ORTMEM_OP_RELEASE;
    fo.fail_at = 1;
    ortmem_backend *b;
    OK(ortmem_fault_backend_create(cpu, &fo, &b));
    recorder pool = {.refuse_above = UINT64_MAX}, quarantine = pool, a = pool;
    ortmem_account pool_acct = account_of(&pool), q_acct = account_of(&quarantine),
                   a_acct = account_of(&a);
    OK(ortmem_backend_set_accounts(b, &pool_acct, &q_acct));
    ortmem_region *r = charged_region(b, 2 * G, &a_acct);
    OK(ortmem_region_commit(r, 0, 2 * G));
    EXPECT_STATUS(ortmem_region_destroy(r), ORTMEM_E_QUARANTINED);
    cr_assert_eq(a.owned, 0, "the holder is free of the quarantined granule");
    cr_assert_eq(a.retained, 0);
    cr_assert_eq(quarantine.owned, (int64_t)G);
    cr_assert_eq(quarantine.retained, 2, "the backend's copy and the granule's");
    EXPECT_STATUS(ortmem_backend_destroy(b), ORTMEM_E_QUARANTINED);
    cr_assert_eq(quarantine.retained + pool.retained, 0);
    OK(ortmem_backend_destroy(cpu));
}

/* A move is one call when both accounts have the same move (governance
 * then moves under one lock); one that declines is a refund and an adopt. */
Test(account, a_failed_release_moves_the_charge_in_one_step)
{
    ortmem_backend *cpu = test_backend();
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = ORTMEM_OP_RELEASE;
    fo.fail_at = 1;
    ortmem_backend *b;
    OK(ortmem_fault_backend_create(cpu, &fo, &b));
    recorder pool = {.refuse_above = UINT64_MAX}, quarantine = pool, a = pool, d = pool;
    d.declines_moves = true;
    ortmem_account pool_acct = moving_account_of(&pool), q_acct = moving_account_of(&quarantine),
                   a_acct = moving_account_of(&a), d_acct = moving_account_of(&d);
    OK(ortmem_backend_set_accounts(b, &pool_acct, &q_acct));
    ortmem_region *ra = charged_region(b, 2 * G, &a_acct);
    OK(ortmem_region_commit(ra, 0, 2 * G));
    EXPECT_STATUS(ortmem_region_destroy(ra), ORTMEM_E_QUARANTINED);
    cr_assert_eq(a.moves, 1);
    cr_assert_eq(quarantine.adopts, 0, "moved in, not adopted");
    cr_assert_eq(a.owned, 0);
    cr_assert_eq(quarantine.owned, (int64_t)G);

    OK(ortmem_fault_backend_arm(b, &fo));
    ortmem_region *rd = charged_region(b, 2 * G, &d_acct);
    OK(ortmem_region_commit(rd, 0, 2 * G));
    EXPECT_STATUS(ortmem_region_destroy(rd), ORTMEM_E_QUARANTINED);
    cr_assert_eq(d.moves, 0);
    cr_assert_eq(quarantine.adopts, 1, "a declined move is a refund and an adopt");
    cr_assert_eq(d.owned, 0);
    cr_assert_eq(quarantine.owned, (int64_t)(2 * G));
    EXPECT_STATUS(ortmem_backend_destroy(b), ORTMEM_E_QUARANTINED);
    OK(ortmem_backend_destroy(cpu));
}

Test(account, shares_charge_mapped_bytes_to_the_destination_only)
{
    ortmem_backend *b = test_backend();
    recorder src = {.refuse_above = UINT64_MAX}, dst = src;
    ortmem_account s_acct = account_of(&src), d_acct = account_of(&dst);
    ortmem_region *rs = charged_region(b, 2 * G, &s_acct);
    ortmem_region *rd = charged_region(b, 2 * G, &d_acct);
    OK(ortmem_region_commit(rs, 0, 2 * G));
    OK(ortmem_region_share(rd, 0, rs, 0, 2 * G, ORTMEM_ACCESS_READ));
    cr_assert_eq(dst.owned, 0);
    cr_assert_eq(dst.mapped, (int64_t)(2 * G));
    cr_assert_eq(dst.requested, 0, "an alias asks for no content");
    cr_assert_eq(src.owned, (int64_t)(2 * G));
    OK(ortmem_region_cow(rd, 0, G));
    cr_assert_eq(dst.owned, (int64_t)G, "the private copy is the destination's");
    OK(ortmem_region_destroy(rs));
    cr_assert_eq(src.owned, (int64_t)G, "the still shared granule stays with its creator");
    OK(ortmem_region_destroy(rd));
    cr_assert_eq(src.owned + dst.owned + src.mapped + dst.mapped, 0);
    cr_assert_eq(src.retained + dst.retained, 0);
    OK(ortmem_backend_destroy(b));
}

Test(account, arenas_report_allocated_bytes_as_requested)
{
    ortmem_backend *b = test_backend();
    recorder rec = {.refuse_above = UINT64_MAX};
    ortmem_account acct = account_of(&rec);
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    opt.capacity = 8 * G;
    opt.account = &acct;
    ortmem_arena *a;
    OK(ortmem_arena_create(b, &opt, &a));
    void *p, *q;
    OK(ortmem_arena_alloc(a, 1000, 0, &p));
    OK(ortmem_arena_alloc(a, 3000, 0, &q));
    cr_assert_eq(rec.requested, 4000);
    cr_assert_eq(rec.owned, (int64_t)G);
    OK(ortmem_arena_free(a, p));
    cr_assert_eq(rec.requested, 3000);
    OK(ortmem_arena_destroy(a, 1));
    cr_assert_eq(rec.requested + rec.owned + rec.mapped + rec.retained, 0);
    OK(ortmem_backend_destroy(b));
}

Test(account, an_account_without_required_slots_is_refused)
{
    ortmem_backend *b = test_backend();
    recorder rec = {0};
    ortmem_account acct = account_of(&rec);
    acct.charge = NULL;
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    opt.size = G;
    opt.account = &acct;
    ortmem_region *r;
    EXPECT_STATUS(ortmem_region_create(b, &opt, &r), ORTMEM_E_INVALID);
    acct = account_of(&rec);
    acct.unretain = NULL;
    EXPECT_STATUS(ortmem_region_create(b, &opt, &r), ORTMEM_E_INVALID);
    cr_assert_eq(rec.retained, 0);
    OK(ortmem_backend_destroy(b));
}

/* Relieve runs with none of vmm's locks held: it may use the very region
 * whose commit was refused, then the commit is tried once more. */
static uint64_t rec_relieve(void *self, uint64_t owned, uint64_t mapped)
{
    recorder *r = self;
    (void)mapped;
    r->reliefs++;
    ortmem_granule_info info = {.struct_size = sizeof info};
    cr_assert_eq(ortmem_region_granule_info(r->region, 0, &info), ORTMEM_OK);
    if (r->stingy)
        return 0;
    r->refuse_above = owned; /* room was made */
    return owned;
}

Test(account, a_refusal_is_relieved_without_locks_and_retried_once, .timeout = 10)
{
    ortmem_backend *b = test_backend();
    recorder rec = {.refuse_above = 0};
    ortmem_account acct = account_of(&rec);
    acct.relieve = rec_relieve;
    rec.region = charged_region(b, 4 * G, &acct);
    OK(ortmem_region_commit(rec.region, 0, 2 * G));
    cr_assert_eq(rec.reliefs, 1);
    cr_assert_eq(rec.refusals, 1);
    cr_assert_eq(rec.owned, (int64_t)(2 * G));
    /* A refusal that relief cannot fix is final after one retry. */
    rec.refuse_above = 0;
    rec.stingy = true;
    EXPECT_STATUS(ortmem_region_commit(rec.region, 2 * G, G), ORTMEM_E_BUDGET);
    cr_assert_eq(rec.reliefs, 2);
    cr_assert_eq(rec.refusals, 3, "refused, relieved, refused again: no loop");
    OK(ortmem_region_destroy(rec.region));
    OK(ortmem_backend_destroy(b));
}
