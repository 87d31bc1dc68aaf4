/* Backend-fault sweep over the extent paths and the pool: every scripted
 * workload below runs once unarmed through a fault backend, counting the
 * backend calls each step makes per operation. Then, for every operation
 * (and ORTMEM_OP_ANY) and every index n up to its count, it runs twice more:
 * with the nth call failed once, and with the nth and every later one failed
 * (persistent). The failure must surface in the step the unarmed pass
 * predicts, as a failed status with a detail, and the step's outcome is
 * compared with the step before it (or, when it answered
 * ORTMEM_E_QUARANTINED, with what the unarmed step did): every granule is as
 * it was or quarantined, and the ledger is equal or differs by no more than
 * what the ledger reports quarantined. After every step of every run the
 * ledger is rebuilt from the granules: owned bytes are the distinct live
 * extents plus the pool plus the quarantine, mapped bytes the mapped granules
 * plus the stuck mappings, each extent's granules agree on it, and every byte
 * written reads back. A failure that quarantined nothing is retried and the
 * run goes on, each step then equal to the unarmed one; otherwise (and after
 * a persistent failure) only the tear-down steps run. Once everything is
 * destroyed nothing is owned but the quarantine. */
#include <stdio.h>
#include <unistd.h>

#include "support.h"

#define GR 32 /* granules per region */
#define REGIONS 3
#define MAX_STEPS 16
#define MAX_RANGES 5
#define MAX_IDS 256
#define OPS (ORTMEM_OP_COUNT + 1) /* every operation, then ORTMEM_OP_ANY */

static size_t G; /* the page size: small granules keep leaked quarantine small */

/* ---- the scripts ---- */

typedef enum step_kind {
    S_CREATE,      /* region r, flags, growth a */
    S_DESTROY,     /* region r (skipped when it is gone) */
    S_POOL_CAP,    /* cap a granules */
    S_COMMIT,      /* ranges in r, laid by the region's policy */
    S_COMMIT_EXT,  /* ranges in r */
    S_COMMIT_GROW, /* ranges in r, each with a window end */
    S_DECOMMIT,    /* ranges in r, flags */
    S_SHARE,       /* r at off[0] <- r2 at off[1], len[0] granules */
    S_COW,         /* r [off[0], +len[0]) */
    S_EXPORT,      /* the extent of r at off[0] */
    S_IMPORT,      /* the exported descriptor at r off[0] */
    S_CLOSE,       /* closes the exported descriptor */
    S_FILL,        /* count extents of a granules into the pool */
    S_TRIM,        /* trims the pool to a granules */
    S_REFILL       /* fills the pool with granules until it keeps a granules */
} step_kind;

typedef struct step {
    step_kind kind;
    int r, r2;
    size_t count; /* ranges */
    size_t off[MAX_RANGES], len[MAX_RANGES], win[MAX_RANGES];
    size_t a;
    unsigned flags;
    ortmem_status expect; /* what the unarmed step answers */
    int teardown;         /* runs even after a failure stopped the script */
} step;

typedef struct workload {
    const char *name;
    step steps[MAX_STEPS];
} workload;

/* ---- accounts that count what vmm charges them ---- */

typedef struct tally {
    int64_t owned, mapped, held_owned, held_mapped;
} tally;

static ortmem_status tally_hold(void *self, uint64_t owned, uint64_t mapped)
{
    tally *t = self;
    t->held_owned += (int64_t)owned;
    t->held_mapped += (int64_t)mapped;
    return ORTMEM_OK;
}

static void tally_unhold(void *self, uint64_t owned, uint64_t mapped)
{
    tally *t = self;
    t->held_owned -= (int64_t)owned;
    t->held_mapped -= (int64_t)mapped;
}

static void tally_charge(void *self, uint64_t owned, uint64_t mapped)
{
    tally_unhold(self, owned, mapped);
    tally *t = self;
    t->owned += (int64_t)owned;
    t->mapped += (int64_t)mapped;
}

static void tally_adopt(void *self, uint64_t owned, uint64_t mapped)
{
    tally *t = self;
    t->owned += (int64_t)owned;
    t->mapped += (int64_t)mapped;
}

static void tally_refund(void *self, uint64_t owned, uint64_t mapped)
{
    tally *t = self;
    t->owned -= (int64_t)owned;
    t->mapped -= (int64_t)mapped;
}

static ortmem_account tally_account(tally *t)
{
    ortmem_account a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.self = t;
    a.hold = tally_hold;
    a.unhold = tally_unhold;
    a.charge = tally_charge;
    a.adopt = tally_adopt;
    a.refund = tally_refund;
    return a;
}

/* ---- the model: an id per physical extent, the bytes it holds ---- */

typedef struct env {
    ortmem_backend *inner, *f;
    ortmem_region *r[REGIONS];
    uint32_t id[REGIONS][GR]; /* 0: unmapped */
    uint32_t granules[MAX_IDS];
    uint64_t seed[MAX_IDS]; /* 0: no bytes relied on */
    uint32_t next_id;
    uint32_t exported; /* id of the extent behind fd */
    int fd;
    int failed_destroy; /* a destroy left quarantined mappings behind */
    /* Every region charges regions; the backend's pool and quarantine theirs. */
    tally regions, pool, quarantine;
    ortmem_account region_account;
} env;

/* What is compared around a call. */
typedef struct view {
    int alive[REGIONS];
    ortmem_granule_info info[REGIONS][GR];
    uint64_t epochs[REGIONS]; /* mapping epochs summed over the region */
    ortmem_vmm_stats s;
    ortmem_pool_stats p;
} view;

static void snap(const env *e, view *v)
{
    memset(v, 0, sizeof *v);
    for (int i = 0; i < REGIONS; i++) {
        v->alive[i] = e->r[i] != NULL;
        for (size_t g = 0; e->r[i] && g < GR; g++)
            v->info[i][g] = granule_info(e->r[i], g * G);
        ortmem_range_state range;
        memset(&range, 0, sizeof range);
        range.struct_size = sizeof range;
        if (e->r[i])
            OK(ortmem_region_range_state(e->r[i], 0, GR * G, &range));
        v->epochs[i] = range.epoch_sum;
    }
    v->s = stats_of(e->f);
    v->p.struct_size = sizeof v->p;
    OK(ortmem_pool_stats_get(e->f, &v->p));
}

static uint8_t *granule_va(const env *e, int i, size_t g)
{
    return (uint8_t *)ortmem_region_base(e->r[i]) + g * G;
}

static uint64_t granule_seed(uint64_t seed, size_t index)
{
    return seed * 1024 + index;
}

static void ranges_of(const step *s, ortmem_range *out)
{
    for (size_t i = 0; i < s->count; i++)
        out[i] = (ortmem_range){s->off[i] * G, s->len[i] * G};
}

static ortmem_status run_step(env *e, const step *s)
{
    ortmem_range ranges[MAX_RANGES];
    ranges_of(s, ranges);
    ortmem_region *r = s->r >= 0 ? e->r[s->r] : NULL;
    switch (s->kind) {
    case S_CREATE: {
        ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
        opt.size = GR * G;
        opt.flags = s->flags;
        opt.account = &e->region_account;
        opt.extents.growth = (ortmem_extent_growth)s->a;
        ortmem_status st = ortmem_region_create(e->f, &opt, &e->r[s->r]);
        if (st != ORTMEM_OK)
            e->r[s->r] = NULL;
        return st;
    }
    case S_DESTROY: {
        if (!r)
            return ORTMEM_OK;
        ortmem_status st = ortmem_region_destroy(r);
        e->r[s->r] = NULL; /* gone either way */
        e->failed_destroy |= st != ORTMEM_OK;
        return st;
    }
    case S_POOL_CAP: return ortmem_pool_set_cap(e->f, s->a * G);
    case S_COMMIT: return ortmem_region_commit_ranges(r, ranges, s->count);
    case S_COMMIT_EXT: return ortmem_region_commit_extents(r, ranges, s->count);
    case S_COMMIT_GROW: {
        ortmem_commit_range grow[MAX_RANGES];
        for (size_t i = 0; i < s->count; i++)
            grow[i] = (ortmem_commit_range){s->off[i] * G, s->len[i] * G, s->win[i] * G};
        ortmem_extent_policy geo = {sizeof geo, ORTMEM_EXTENT_GEOMETRIC, 8 * G};
        return ortmem_region_commit_grow(r, grow, s->count, &geo);
    }
    case S_DECOMMIT: return ortmem_region_decommit_ex(r, ranges, s->count, s->flags);
    case S_SHARE:
        return ortmem_region_share(r, s->off[0] * G, e->r[s->r2], s->off[1] * G, s->len[0] * G,
                                   ORTMEM_ACCESS_READ);
    case S_COW: return ortmem_region_cow(r, s->off[0] * G, s->len[0] * G);
    case S_EXPORT: {
        int fd = -1;
        ortmem_status st = ortmem_region_export(r, s->off[0] * G, &fd);
        if (st == ORTMEM_OK) {
            e->fd = fd;
            e->exported = e->id[s->r][s->off[0]];
        }
        return st;
    }
    case S_IMPORT: return ortmem_region_import(r, s->off[0] * G, e->fd, ORTMEM_ACCESS_READ);
    case S_CLOSE:
        if (e->fd >= 0)
            close(e->fd);
        e->fd = -1;
        return ORTMEM_OK;
    case S_FILL: return ortmem_pool_fill_extents(e->f, s->a * G, s->count);
    case S_REFILL: return ortmem_pool_fill(e->f, s->a * G);
    case S_TRIM: {
        size_t released = 0;
        return ortmem_pool_trim(e->f, s->a * G, &released);
    }
    }
    return ORTMEM_E_INVALID;
}

/* The id of a granule that shows a new extent after step s. */
static uint32_t new_id(env *e, const step *s, ortmem_status st, int i, size_t g,
                       const ortmem_granule_info *before, const ortmem_granule_info *now)
{
    if (s->kind == S_SHARE && s->r == i) /* mapped, or stuck quarantined by a rollback */
        return e->id[s->r2][s->off[1] + (g - s->off[0])];
    cr_assert_lt(e->next_id + 1, MAX_IDS, "model: more extents than ids");
    uint32_t id = ++e->next_id;
    e->granules[id] = now->extent_granules;
    e->seed[id] = 0;
    if (s->kind == S_COW && s->r == i && before->mappers >= 2 && now->mappers < 2)
        e->seed[id] = e->seed[e->id[i][g]]; /* the private copy holds the shared bytes */
    else if (s->kind == S_IMPORT && s->r == i)
        e->seed[id] = e->seed[e->exported]; /* the exported extent's first granule */
    else if (st == ORTMEM_OK && now->state == ORTMEM_GRANULE_MAPPED &&
             now->access == ORTMEM_ACCESS_READ_WRITE) {
        e->seed[id] = id;
        for (uint32_t j = 0; j < now->extent_granules; j++)
            fill_pattern(granule_va(e, i, g + j), G, granule_seed(id, j));
    }
    return id;
}

/* Follows the step in the model: which granules hold which extents. */
static void sync_model(env *e, const step *s, ortmem_status st, const view *before, const view *now)
{
    for (int i = 0; i < REGIONS; i++) {
        if (!now->alive[i]) {
            memset(e->id[i], 0, sizeof e->id[i]);
            continue;
        }
        uint32_t ids[GR] = {0};
        for (size_t g = 0; g < GR; g++) {
            const ortmem_granule_info *n = &now->info[i][g], *b = &before->info[i][g];
            if (n->state == ORTMEM_GRANULE_UNMAPPED)
                continue;
            size_t first = n->extent_offset / G;
            if (first != g) {
                ids[g] = ids[first];
                continue;
            }
            bool same = before->alive[i] && b->state != ORTMEM_GRANULE_UNMAPPED &&
                        b->extent_offset == n->extent_offset &&
                        b->extent_granules == n->extent_granules;
            bool copied = s->kind == S_COW && s->r == i && b->mappers >= 2 && n->mappers < 2;
            ids[g] = same && !copied ? e->id[i][g] : new_id(e, s, st, i, g, b, n);
        }
        memcpy(e->id[i], ids, sizeof ids);
    }
}

/* ---- the ledger rebuilt from the granules ---- */

static void verify(const env *e, const view *v, const char *ctx)
{
    const ortmem_vmm_stats *s = &v->s;
    cr_assert_eq(s->owned_bytes, s->owned_granules * G, "%s: owned", ctx);
    cr_assert_eq(s->mapped_bytes, s->mapped_granules * G, "%s: mapped", ctx);
    cr_assert_eq(s->quarantined_bytes, s->quarantined_granules * G, "%s: quarantined", ctx);
    uint64_t pool_bytes = 0, pool_extents = 0;
    for (unsigned c = 0; c < ORTMEM_POOL_CLASSES_MAX; c++) {
        pool_bytes += v->p.extents[c] * ((uint64_t)G << c);
        pool_extents += v->p.extents[c];
    }
    cr_assert_eq(s->pool_bytes, pool_bytes, "%s: pool bytes %llu, classes hold %llu", ctx,
                 (unsigned long long)s->pool_bytes, (unsigned long long)pool_bytes);

    uint32_t seen[MAX_IDS] = {0}, mappers[MAX_IDS] = {0};
    bool quarantined[MAX_IDS] = {0}, mapped[MAX_IDS] = {0};
    uint64_t mapped_granules = 0, mapped_extents = 0;
    for (int i = 0; i < REGIONS; i++) {
        for (size_t g = 0; v->alive[i] && g < GR; g++) {
            const ortmem_granule_info *n = &v->info[i][g];
            uint32_t id = e->id[i][g];
            if (n->state == ORTMEM_GRANULE_UNMAPPED) {
                cr_assert(n->extent_granules == 0 && n->extent_offset == 0 && id == 0,
                          "%s: region %d granule %zu unmapped but names an extent", ctx, i, g);
                continue;
            }
            /* No overlap: the granule lies in its extent and every granule of
             * the extent names the same one. */
            uint32_t k = n->extent_granules;
            size_t first = n->extent_offset / G;
            cr_assert(k && (k & (k - 1)) == 0 && n->extent_offset % G == 0 && first <= g &&
                          g < first + k && first + k <= GR,
                      "%s: region %d granule %zu in extent [%zu, +%u granules)", ctx, i, g, first,
                      k);
            const ortmem_granule_info *f = &v->info[i][first];
            cr_assert(f->state == n->state && f->extent_offset == n->extent_offset &&
                          f->extent_granules == k && f->mappers == n->mappers &&
                          f->access == n->access && e->id[i][first] == id && id,
                      "%s: region %d granule %zu disagrees with its extent's first granule", ctx, i,
                      g);
            if (g == first) {
                cr_assert_eq(e->granules[id], k, "%s: extent %u changed size", ctx, id);
                cr_assert(!mappers[id] || mappers[id] == n->mappers,
                          "%s: extent %u reports %u and %u mappers", ctx, id, mappers[id],
                          n->mappers);
                mappers[id] = n->mappers;
                seen[id]++;
            }
            if (n->state == ORTMEM_GRANULE_QUARANTINED) {
                quarantined[id] = true;
                continue;
            }
            mapped[id] = true;
            mapped_granules++;
            mapped_extents += g == first;
            if (n->access == ORTMEM_ACCESS_READ_WRITE) {
                /* Writable as reported (a wrong protection faults here). */
                volatile uint8_t *byte = granule_va(e, i, g);
                *byte = *byte;
            }
            if (e->seed[id] && (n->access & ORTMEM_ACCESS_READ))
                cr_assert(
                    check_pattern(granule_va(e, i, g), G, granule_seed(e->seed[id], g - first)),
                    "%s: region %d granule %zu lost its bytes", ctx, i, g);
        }
    }
    uint64_t live_bytes = 0, live_extents = 0;
    for (uint32_t id = 1; id <= e->next_id; id++) {
        if (!seen[id])
            continue;
        cr_assert_geq(mappers[id], seen[id], "%s: extent %u has %u mappers in %u mappings", ctx, id,
                      mappers[id], seen[id]);
        if (mappers[id] > seen[id]) { /* a destroyed region's stuck mapping */
            cr_assert(e->failed_destroy, "%s: extent %u has %u mappers in %u mappings", ctx, id,
                      mappers[id], seen[id]);
            quarantined[id] = true;
        }
        if (mapped[id] && !quarantined[id]) {
            live_bytes += (uint64_t)e->granules[id] * G;
            live_extents++;
        }
    }
    cr_assert_eq(s->owned_bytes, live_bytes + s->pool_bytes + s->quarantined_bytes,
                 "%s: owned %llu = live %llu + pool %llu + quarantined %llu", ctx,
                 (unsigned long long)s->owned_bytes, (unsigned long long)live_bytes,
                 (unsigned long long)s->pool_bytes, (unsigned long long)s->quarantined_bytes);
    cr_assert_eq(s->owned_extents, live_extents + pool_extents + s->quarantined_extents,
                 "%s: owned extents %llu = live %llu + pool %llu + quarantined %llu", ctx,
                 (unsigned long long)s->owned_extents, (unsigned long long)live_extents,
                 (unsigned long long)pool_extents, (unsigned long long)s->quarantined_extents);
    cr_assert_eq(s->mapped_bytes, mapped_granules * G + s->quarantined_mapped_bytes,
                 "%s: mapped %llu = %llu granules mapped + stuck %llu", ctx,
                 (unsigned long long)s->mapped_bytes, (unsigned long long)mapped_granules,
                 (unsigned long long)s->quarantined_mapped_bytes);
    /* The accounts hold nothing between calls and are charged what the ledger counts. */
    const tally *t[3] = {&e->regions, &e->pool, &e->quarantine};
    for (int i = 0; i < 3; i++)
        cr_assert(t[i]->held_owned == 0 && t[i]->held_mapped == 0,
                  "%s: account %d still holds %lld owned, %lld mapped", ctx, i,
                  (long long)t[i]->held_owned, (long long)t[i]->held_mapped);
    cr_assert(e->regions.owned == (int64_t)live_bytes &&
                  e->regions.mapped == (int64_t)(mapped_granules * G),
              "%s: regions charged %lld owned, %lld mapped for %llu live, %llu mapped", ctx,
              (long long)e->regions.owned, (long long)e->regions.mapped,
              (unsigned long long)live_bytes, (unsigned long long)(mapped_granules * G));
    cr_assert(e->pool.owned == (int64_t)s->pool_bytes && e->pool.mapped == 0,
              "%s: pool charged %lld owned, %lld mapped for %llu pooled", ctx,
              (long long)e->pool.owned, (long long)e->pool.mapped,
              (unsigned long long)s->pool_bytes);
    cr_assert(e->quarantine.owned == (int64_t)s->quarantined_bytes &&
                  e->quarantine.mapped == (int64_t)s->quarantined_mapped_bytes,
              "%s: quarantine charged %lld owned, %lld mapped for %llu and %llu", ctx,
              (long long)e->quarantine.owned, (long long)e->quarantine.mapped,
              (unsigned long long)s->quarantined_bytes,
              (unsigned long long)s->quarantined_mapped_bytes);
    cr_assert(s->mapped_extents >= mapped_extents &&
                  (s->mapped_extents - mapped_extents) * G <= s->quarantined_mapped_bytes,
              "%s: mapped extents %llu for %llu mapped and %llu stuck bytes", ctx,
              (unsigned long long)s->mapped_extents, (unsigned long long)mapped_extents,
              (unsigned long long)s->quarantined_mapped_bytes);
}

/* ---- comparisons ---- */

#define SAME(field)                                                                                \
    cr_assert_eq(a->field, b->field, "%s: " #field " %llu, expected %llu", ctx,                    \
                 (unsigned long long)b->field, (unsigned long long)a->field)

/* leaked: the VA left reserved may have grown (a failed call reports it). */
static void same_ledger(const view *ref, const view *now, bool leaked, const char *ctx)
{
    const ortmem_vmm_stats *a = &ref->s, *b = &now->s;
    SAME(owned_bytes);
    SAME(owned_granules);
    SAME(owned_extents);
    SAME(mapped_bytes);
    SAME(mapped_granules);
    SAME(mapped_extents);
    SAME(quarantined_bytes);
    SAME(quarantined_mapped_bytes);
    SAME(quarantined_granules);
    SAME(quarantined_extents);
    SAME(pool_bytes);
    SAME(pool_cap_bytes);
    SAME(reserved_va_bytes);
    if (!leaked)
        SAME(leaked_va_bytes);
    for (unsigned c = 0; c < ORTMEM_POOL_CLASSES_MAX; c++)
        cr_assert_eq(ref->p.extents[c], now->p.extents[c], "%s: pool class %u holds %llu, not %llu",
                     ctx, c, (unsigned long long)now->p.extents[c],
                     (unsigned long long)ref->p.extents[c]);
}

/* Every granule as in ref, or (loose) quarantined now; returns how many
 * granules were quarantined since ref. */
static size_t same_granules(const view *ref, const view *now, bool loose, const char *ctx)
{
    size_t newly = 0;
    for (int i = 0; i < REGIONS; i++) {
        cr_assert_eq(ref->alive[i], now->alive[i], "%s: region %d alive", ctx, i);
        /* A call that changed nothing leaves the mapping epochs alone. */
        cr_assert(loose || ref->epochs[i] == now->epochs[i], "%s: region %d epochs %llu, not %llu",
                  ctx, i, (unsigned long long)now->epochs[i], (unsigned long long)ref->epochs[i]);
        for (size_t g = 0; now->alive[i] && g < GR; g++) {
            const ortmem_granule_info *a = &ref->info[i][g], *b = &now->info[i][g];
            if (loose && b->state == ORTMEM_GRANULE_QUARANTINED &&
                a->state != ORTMEM_GRANULE_QUARANTINED) {
                newly++;
                continue;
            }
            cr_assert(a->state == b->state && a->access == b->access &&
                          a->extent_offset == b->extent_offset &&
                          a->extent_granules == b->extent_granules &&
                          (loose || a->mappers == b->mappers),
                      "%s: region %d granule %zu: state %d access %d extent [%zu, +%u) mappers "
                      "%u, expected %d %d [%zu, +%u) %u",
                      ctx, i, g, b->state, b->access, b->extent_offset / G, b->extent_granules,
                      b->mappers, a->state, a->access, a->extent_offset / G, a->extent_granules,
                      a->mappers);
        }
    }
    return newly;
}

/* A failed call against ref (the state before it, or what the unarmed call
 * did when it answered ORTMEM_E_QUARANTINED): equal, or differing only by
 * what the ledger reports quarantined. */
static void compare_failed(const view *ref, const view *now, const char *ctx)
{
    const ortmem_vmm_stats *a = &ref->s, *b = &now->s;
    cr_assert_geq(b->quarantined_bytes, a->quarantined_bytes, "%s", ctx);
    uint64_t dq = b->quarantined_bytes - a->quarantined_bytes;
    size_t newly = same_granules(ref, now, dq > 0, ctx);
    if (dq == 0) {
        same_ledger(ref, now, true, ctx);
        return;
    }
    uint64_t dq_extents = b->quarantined_extents - a->quarantined_extents;
    cr_assert_geq(dq, newly * G, "%s: %zu granules quarantined, %llu bytes reported", ctx, newly,
                  (unsigned long long)dq);
    cr_assert(dq_extents >= 1 && dq_extents * G <= dq, "%s: %llu extents in %llu bytes", ctx,
              (unsigned long long)dq_extents, (unsigned long long)dq);
    cr_assert(b->owned_bytes >= a->owned_bytes && b->owned_bytes - a->owned_bytes <= dq,
              "%s: owned %llu -> %llu with %llu quarantined", ctx,
              (unsigned long long)a->owned_bytes, (unsigned long long)b->owned_bytes,
              (unsigned long long)dq);
    cr_assert(b->owned_extents >= a->owned_extents &&
                  b->owned_extents - a->owned_extents <= dq_extents,
              "%s: owned extents %llu -> %llu", ctx, (unsigned long long)a->owned_extents,
              (unsigned long long)b->owned_extents);
    cr_assert(b->pool_bytes <= a->pool_bytes && a->pool_bytes - b->pool_bytes <= dq,
              "%s: pool %llu -> %llu", ctx, (unsigned long long)a->pool_bytes,
              (unsigned long long)b->pool_bytes);
    SAME(reserved_va_bytes);
    SAME(pool_cap_bytes);
}

/* ---- runs ---- */

typedef struct unarmed {
    size_t steps;
    uint64_t calls[MAX_STEPS][OPS]; /* per step and operation */
    uint64_t total[OPS];
    view after[MAX_STEPS];
} unarmed;

typedef struct arming {
    ortmem_backend_op op; /* ORTMEM_OP_ANY for all */
    uint64_t fail_at;     /* 0: unarmed */
    int persistent;
} arming;

static size_t script_length(const workload *w)
{
    size_t n = 0;
    while (n < MAX_STEPS && (w->steps[n].kind != S_CREATE || w->steps[n].r >= 0))
        n++;
    return n;
}

static void env_open(env *e)
{
    memset(e, 0, sizeof *e);
    e->fd = -1;
    e->inner = cpu_backend_with_granule(G);
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    OK(ortmem_fault_backend_create(e->inner, &fo, &e->f));
    e->region_account = tally_account(&e->regions);
    ortmem_account pool = tally_account(&e->pool), quarantine = tally_account(&e->quarantine);
    OK(ortmem_backend_set_accounts(e->f, &pool, &quarantine));
}

static uint64_t injected_of(const env *e)
{
    uint64_t injected = 0;
    OK(ortmem_fault_backend_counts(e->f, NULL, &injected));
    return injected;
}

/* Everything is gone: nothing owned but the quarantine. */
static void env_close(env *e, const char *ctx)
{
    for (int i = 0; i < REGIONS; i++)
        cr_assert_null(e->r[i], "%s: region %d left", ctx, i);
    cr_assert_eq(e->fd, -1, "%s: descriptor left", ctx);
    ortmem_vmm_stats s = stats_of(e->f);
    cr_assert_eq(s.owned_bytes, s.quarantined_bytes, "%s: owned %llu, quarantined %llu", ctx,
                 (unsigned long long)s.owned_bytes, (unsigned long long)s.quarantined_bytes);
    cr_assert_eq(s.owned_extents, s.quarantined_extents, "%s", ctx);
    cr_assert_eq(s.mapped_bytes, s.quarantined_mapped_bytes, "%s: mapped %llu, stuck %llu", ctx,
                 (unsigned long long)s.mapped_bytes,
                 (unsigned long long)s.quarantined_mapped_bytes);
    cr_assert_eq(s.pool_bytes, 0, "%s", ctx);
    cr_assert_eq(s.reserved_va_bytes, 0, "%s", ctx);
    ortmem_fault_options off = ORTMEM_FAULT_OPTIONS_INIT;
    OK(ortmem_fault_backend_arm(e->f, &off));
    EXPECT_STATUS(ortmem_backend_destroy(e->f),
                  s.quarantined_extents ? ORTMEM_E_QUARANTINED : ORTMEM_OK);
    OK(ortmem_backend_destroy(e->inner));
}

static void unarmed_pass(const workload *w, unarmed *u)
{
    memset(u, 0, sizeof *u);
    u->steps = script_length(w);
    env e;
    env_open(&e);
    view before;
    snap(&e, &before);
    for (size_t k = 0; k < u->steps; k++) {
        char ctx[128];
        snprintf(ctx, sizeof ctx, "%s unarmed, step %zu", w->name, k);
        ortmem_status st = run_step(&e, &w->steps[k]);
        cr_assert_eq(st, w->steps[k].expect, "%s: %s: %s", ctx, ortmem_status_str(st),
                     ortmem_last_error());
        snap(&e, &u->after[k]);
        sync_model(&e, &w->steps[k], st, &before, &u->after[k]);
        verify(&e, &u->after[k], ctx);
        for (int op = 0; op < ORTMEM_OP_COUNT; op++) {
            u->calls[k][op] = u->after[k].s.calls[op] - before.s.calls[op];
            u->calls[k][ORTMEM_OP_ANY] += u->calls[k][op];
            u->total[op] += u->calls[k][op];
        }
        u->total[ORTMEM_OP_ANY] += u->calls[k][ORTMEM_OP_ANY];
        before = u->after[k];
    }
    cr_assert_eq(injected_of(&e), 0);
    env_close(&e, w->name);
}

/* The step whose calls of op hold the nth one. */
static size_t predicted_step(const unarmed *u, ortmem_backend_op op, uint64_t n)
{
    uint64_t seen = 0;
    for (size_t k = 0; k < u->steps; k++) {
        seen += u->calls[k][op];
        if (seen >= n)
            return k;
    }
    cr_assert_fail("call %llu of %s is past the script", (unsigned long long)n,
                   ortmem_backend_op_name(op));
    return 0;
}

/* The detail of a failed call names the failure injected (the first one,
 * for a one-shot fault) and says what it quarantined or left reserved. */
static void check_detail(const step *s, arming arm, const char *detail, const view *before,
                         const view *now, const char *ctx)
{
    char cause[64];
    snprintf(cause, sizeof cause, "(counted call %llu)", (unsigned long long)arm.fail_at);
    /* region destroy words its own outcome, the last failure's (src/vmm/region.c) */
    if (s->kind == S_DESTROY && arm.persistent)
        return;
    if (s->kind != S_DESTROY)
        cr_assert(strstr(detail, arm.persistent ? "fault injected" : cause),
                  "%s: the detail does not name the fault: %s", ctx, detail);
    if (now->s.quarantined_bytes != before->s.quarantined_bytes)
        cr_assert(strstr(detail, "quarantined"),
                  "%s: the detail does not say what it quarantined: %s", ctx, detail);
    if (now->s.leaked_va_bytes != before->s.leaked_va_bytes)
        cr_assert(strstr(detail, "reserved") || strstr(detail, "leaked"),
                  "%s: the detail does not say what VA it left reserved: %s", ctx, detail);
}

/* One armed run; returns the failures injected. */
static uint64_t armed_run(const workload *w, const unarmed *u, arming arm)
{
    env e;
    env_open(&e);
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = arm.op;
    fo.fail_at = arm.fail_at;
    fo.persistent = arm.persistent;
    OK(ortmem_fault_backend_arm(e.f, &fo));
    size_t predicted = predicted_step(u, arm.op, arm.fail_at);
    bool failed = false, stopped = false;
    static view before, now, again;
    snap(&e, &before);
    char ctx[192], detail[512];
    for (size_t k = 0; k < u->steps; k++) {
        const step *s = &w->steps[k];
        if (stopped && !s->teardown)
            continue;
        snprintf(ctx, sizeof ctx, "%s, %s call %llu failed%s, step %zu", w->name,
                 ortmem_backend_op_name(arm.op), (unsigned long long)arm.fail_at,
                 arm.persistent ? " persistently" : " once", k);
        uint64_t injected = injected_of(&e);
        ortmem_status st = run_step(&e, s);
        snprintf(detail, sizeof detail, "%s", ortmem_last_error());
        bool hit = injected_of(&e) != injected;
        snap(&e, &now);
        sync_model(&e, s, st, &before, &now);
        verify(&e, &now, ctx);
        if (stopped) {
            /* Tear-down after a failure: what cannot be given back is quarantined. */
            cr_assert(st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED, "%s: %s: %s", ctx,
                      ortmem_status_str(st), detail);
        } else if (!hit) {
            cr_assert(failed || k != predicted, "%s: the predicted call did not fail", ctx);
            cr_assert_eq(st, s->expect, "%s: %s: %s", ctx, ortmem_status_str(st), detail);
            same_granules(&u->after[k], &now, false, ctx);
            same_ledger(&u->after[k], &now, false, ctx);
        } else {
            cr_assert(!failed, "%s: a second failure after a one-shot fault", ctx);
            cr_assert_eq(k, predicted, "%s: failed in step %zu, predicted %zu", ctx, k, predicted);
            cr_assert_neq(st, ORTMEM_OK, "%s: the failure was not reported", ctx);
            cr_assert(detail[0], "%s: %s without a detail", ctx, ortmem_status_str(st));
            failed = true;
            check_detail(s, arm, detail, &before, &now, ctx);
            compare_failed(st == ORTMEM_E_QUARANTINED ? &u->after[k] : &before, &now, ctx);
            stopped = arm.persistent || st == ORTMEM_E_QUARANTINED ||
                      now.s.quarantined_bytes != before.s.quarantined_bytes ||
                      now.s.leaked_va_bytes != before.s.leaked_va_bytes;
            if (!stopped) {
                /* Nothing was lost: the same call again does what it did unarmed. */
                st = run_step(&e, s);
                cr_assert_eq(st, s->expect, "%s: retried: %s: %s", ctx, ortmem_status_str(st),
                             ortmem_last_error());
                snap(&e, &again);
                sync_model(&e, s, st, &now, &again);
                verify(&e, &again, ctx);
                same_granules(&u->after[k], &again, false, ctx);
                same_ledger(&u->after[k], &again, false, ctx);
                now = again;
            }
        }
        before = now;
    }
    cr_assert(failed, "%s: the failure predicted in step %zu never came", w->name, predicted);
    uint64_t injected = injected_of(&e);
    cr_assert(arm.persistent ? injected >= 1 : injected == 1, "%s: %llu failures injected", ctx,
              (unsigned long long)injected);
    env_close(&e, ctx);
    return injected;
}

static void sweep(const workload *w, uint64_t min_calls)
{
    G = (size_t)sysconf(_SC_PAGESIZE);
    static unarmed u;
    unarmed_pass(w, &u);
    cr_assert_geq(u.total[ORTMEM_OP_ANY], min_calls, "%s makes %llu backend calls", w->name,
                  (unsigned long long)u.total[ORTMEM_OP_ANY]);
    uint64_t runs = 0, once = 0, persistent_runs = 0, predicted = 0;
    for (int op = 0; op < OPS; op++) {
        predicted += 2 * u.total[op];
        for (uint64_t n = 1; n <= u.total[op]; n++) {
            for (int persistent = 0; persistent < 2; persistent++) {
                arming arm = {(ortmem_backend_op)op, n, persistent};
                uint64_t injected = armed_run(w, &u, arm);
                runs++;
                if (persistent)
                    persistent_runs += injected >= 1;
                else
                    once += injected;
            }
        }
    }
    /* Each operation's calls counted unarmed, each failed once and persistently. */
    cr_assert_eq(runs, predicted, "%s: %llu runs for %llu predicted", w->name,
                 (unsigned long long)runs, (unsigned long long)predicted);
    cr_assert_eq(once, u.total[ORTMEM_OP_ANY] * 2, "%s: one failure per one-shot run", w->name);
    cr_assert_eq(persistent_runs, u.total[ORTMEM_OP_ANY] * 2, "%s", w->name);
}

/* ---- the workloads ---- */

#define CREATE(i, fl)                                                                              \
    {                                                                                              \
        .kind = S_CREATE, .r = (i), .flags = (fl)                                                  \
    }
#define DESTROY(i)                                                                                 \
    {                                                                                              \
        .kind = S_DESTROY, .r = (i), .teardown = 1                                                 \
    }
#define POOL_CAP(n, down)                                                                          \
    {                                                                                              \
        .kind = S_POOL_CAP, .r = -1, .a = (n), .teardown = (down)                                  \
    }
#define END                                                                                        \
    {                                                                                              \
        .kind = S_CREATE, .r = -1                                                                  \
    }

static const workload w_commit_extents_of_mixed_sizes = {
    "commit extents",
    {CREATE(0, 0),
     {.kind = S_COMMIT_EXT, .r = 0, .count = 1, .off = {8}, .len = {2}},
     /* 1, 2, 4 and 16 granules in one call, two runs */
     {.kind = S_COMMIT_EXT, .r = 0, .count = 4, .off = {0, 2, 4, 16}, .len = {1, 2, 4, 16}},
     /* the gaps, next to what is mapped */
     {.kind = S_COMMIT_EXT, .r = 0, .count = 3, .off = {1, 10, 12}, .len = {1, 2, 4}},
     DESTROY(0),
     END}};

Test(extent_faults, commit_extents_of_mixed_sizes)
{
    sweep(&w_commit_extents_of_mixed_sizes, 20);
}

static const workload w_commit_grow_with_growth_windows = {
    "commit grow",
    {CREATE(0, 0),
     {.kind = S_COMMIT_GROW, .r = 0, .count = 1, .off = {0}, .len = {1}, .win = {32}},
     {.kind = S_COMMIT_GROW, .r = 0, .count = 1, .off = {1}, .len = {2}, .win = {32}},
     {.kind = S_COMMIT_GROW, .r = 0, .count = 1, .off = {3}, .len = {3}, .win = {32}},
     /* two growing ranges at once, one window clipped */
     {.kind = S_COMMIT_GROW, .r = 0, .count = 2, .off = {7, 20}, .len = {1, 3}, .win = {16, 24}},
     DESTROY(0),
     END}};

Test(extent_faults, commit_grow_with_growth_windows)
{
    sweep(&w_commit_grow_with_growth_windows, 20);
}

static const workload w_commit_then_decommit_plain_strict_and_no_pool = {
    "decommit",
    {POOL_CAP(16, 0),
     CREATE(0, 0),
     {.kind = S_COMMIT_EXT, .r = 0, .count = 5, .off = {0, 4, 6, 8, 16}, .len = {4, 1, 2, 4, 2}},
     /* two runs into the pool; [4, 8) holds them whole */
     {.kind = S_DECOMMIT, .r = 0, .count = 1, .off = {4}, .len = {4}},
     /* a cut extent: refused, no backend call */
     {.kind = S_DECOMMIT,
      .r = 0,
      .count = 1,
      .off = {0},
      .len = {2},
      .flags = ORTMEM_DECOMMIT_STRICT,
      .expect = ORTMEM_E_RANGE},
     {.kind = S_DECOMMIT,
      .r = 0,
      .count = 2,
      .off = {0, 8},
      .len = {4, 4},
      .flags = ORTMEM_DECOMMIT_STRICT},
     {.kind = S_DECOMMIT,
      .r = 0,
      .count = 1,
      .off = {16},
      .len = {2},
      .flags = ORTMEM_DECOMMIT_NO_POOL},
     /* served from three pool classes */
     {.kind = S_COMMIT_EXT, .r = 0, .count = 3, .off = {0, 4, 8}, .len = {4, 1, 2}},
     /* two runs of three extents back to the backend */
     {.kind = S_DECOMMIT,
      .r = 0,
      .count = 2,
      .off = {0, 8},
      .len = {5, 2},
      .flags = ORTMEM_DECOMMIT_NO_POOL},
     DESTROY(0),
     POOL_CAP(0, 1),
     END}};

Test(extent_faults, commit_then_decommit_plain_strict_and_no_pool)
{
    sweep(&w_commit_then_decommit_plain_strict_and_no_pool, 30);
}

static const workload w_share_whole_extents_then_cow = {
    "share and cow",
    {CREATE(0, 0),
     CREATE(1, 0),
     {.kind = S_COMMIT_EXT, .r = 0, .count = 3, .off = {0, 4, 8}, .len = {4, 2, 1}},
     {.kind = S_SHARE, .r = 1, .r2 = 0, .off = {0, 0}, .len = {6}},
     {.kind = S_SHARE, .r = 1, .r2 = 0, .off = {8, 8}, .len = {1}},
     /* one granule asked: the whole 4-granule extent is copied */
     {.kind = S_COW, .r = 1, .off = {1}, .len = {1}},
     /* the other two, in two runs */
     {.kind = S_COW, .r = 1, .off = {0}, .len = {10}},
     /* a copy shared back */
     {.kind = S_SHARE, .r = 0, .r2 = 1, .off = {16, 0}, .len = {4}},
     DESTROY(0),
     DESTROY(1),
     END}};

Test(extent_faults, share_whole_extents_then_cow)
{
    sweep(&w_share_whole_extents_then_cow, 30);
}

static const workload w_export_and_import_of_an_extent = {
    "export and import",
    {CREATE(0, ORTMEM_REGION_EXPORTABLE),
     CREATE(1, 0),
     {.kind = S_COMMIT_EXT, .r = 0, .count = 2, .off = {0, 4}, .len = {2, 1}},
     {.kind = S_EXPORT, .r = 0, .off = {0}},
     {.kind = S_IMPORT, .r = 1, .off = {3}},
     /* the imported extent shared back, copied on write, its import dropped */
     {.kind = S_SHARE, .r = 0, .r2 = 1, .off = {8, 3}, .len = {1}},
     {.kind = S_COW, .r = 0, .off = {8}, .len = {1}},
     {.kind = S_SHARE, .r = 0, .r2 = 1, .off = {12, 3}, .len = {1}},
     {.kind = S_DECOMMIT, .r = 1, .count = 1, .off = {0}, .len = {8}},
     {.kind = S_CLOSE, .r = -1, .teardown = 1},
     DESTROY(1),
     DESTROY(0),
     END}};

Test(extent_faults, export_and_import_of_an_extent)
{
    sweep(&w_export_and_import_of_an_extent, 15);
}

static const workload w_pool_fill_take_and_trim = {
    "pool",
    {POOL_CAP(32, 0),
     {.kind = S_FILL, .r = -1, .a = 4, .count = 2},
     {.kind = S_FILL, .r = -1, .a = 1, .count = 3},
     CREATE(0, 0),
     /* two 4-granule extents and one granule from the pool, a 2 created */
     {.kind = S_COMMIT_EXT, .r = 0, .count = 4, .off = {0, 4, 8, 12}, .len = {4, 1, 4, 2}},
     {.kind = S_TRIM, .r = -1, .a = 0},
     {.kind = S_DECOMMIT, .r = 0, .count = 2, .off = {0, 8}, .len = {4, 4}},
     {.kind = S_TRIM, .r = -1, .a = 4},
     /* refilled with granules until it keeps 7 granules */
     {.kind = S_REFILL, .r = -1, .a = 7},
     /* one from the pool, one created */
     {.kind = S_COMMIT_EXT, .r = 0, .count = 2, .off = {0, 8}, .len = {4, 4}},
     DESTROY(0),
     POOL_CAP(0, 1),
     END}};

Test(extent_faults, pool_fill_take_and_trim)
{
    sweep(&w_pool_fill_take_and_trim, 20);
}

static const workload w_region_destroy_with_extents_mapped = {
    "destroy",
    {POOL_CAP(8, 0),
     CREATE(0, 0),
     CREATE(1, 0),
     {.kind = S_COMMIT_EXT, .r = 0, .count = 4, .off = {0, 4, 8, 12}, .len = {4, 1, 2, 4}},
     {.kind = S_SHARE, .r = 1, .r2 = 0, .off = {0, 0}, .len = {4}},
     /* three runs, one extent shared, some pooled and some released */
     DESTROY(0),
     DESTROY(1),
     POOL_CAP(0, 1),
     END}};

Test(extent_faults, region_destroy_with_extents_mapped)
{
    sweep(&w_region_destroy_with_extents_mapped, 20);
}

static const workload w_aliases_in_one_region_pool_and_region_policy = {
    "aliases",
    {POOL_CAP(16, 0),
     {.kind = S_CREATE, .r = 0, .a = ORTMEM_EXTENT_EXACT},
     CREATE(1, 0),
     /* EXACT lays 4 + 2 + 1 */
     {.kind = S_COMMIT, .r = 0, .count = 1, .off = {0}, .len = {7}},
     /* an alias inside the region, and one elsewhere */
     {.kind = S_SHARE, .r = 0, .r2 = 0, .off = {16, 0}, .len = {6}},
     {.kind = S_SHARE, .r = 1, .r2 = 0, .off = {0, 4}, .len = {2}},
     {.kind = S_COW, .r = 0, .off = {16}, .len = {6}},
     /* the 4 and the 1 go to the pool, the 2 lives on in region 1 */
     {.kind = S_DECOMMIT, .r = 0, .count = 1, .off = {0}, .len = {8}},
     /* growth served from the pool where the sizes match */
     {.kind = S_COMMIT_GROW, .r = 0, .count = 1, .off = {0}, .len = {3}, .win = {8}},
     {.kind = S_COMMIT, .r = 0, .count = 2, .off = {8, 24}, .len = {5, 4}},
     {.kind = S_DECOMMIT,
      .r = 0,
      .count = 2,
      .off = {8, 16},
      .len = {5, 16},
      .flags = ORTMEM_DECOMMIT_NO_POOL},
     DESTROY(1),
     DESTROY(0),
     POOL_CAP(0, 1),
     END}};

Test(extent_faults, aliases_in_one_region_pool_and_region_policy)
{
    sweep(&w_aliases_in_one_region_pool_and_region_policy, 40);
}

static const workload w_pool_classes_under_a_cap = {
    "pool classes",
    {POOL_CAP(12, 0),
     {.kind = S_CREATE, .r = 0, .a = ORTMEM_EXTENT_EXACT},
     {.kind = S_COMMIT_EXT, .r = 0, .count = 5, .off = {0, 8, 12, 14, 15}, .len = {8, 4, 2, 1, 1}},
     /* the 8 and the 4 fill the cap, the rest is released */
     {.kind = S_DECOMMIT, .r = 0, .count = 1, .off = {0}, .len = {16}},
     /* a lowered cap releases the oldest, the 8 */
     POOL_CAP(6, 0),
     {.kind = S_REFILL, .r = -1, .a = 6},
     /* EXACT lays 4 + 2 + 1: the 4 from the pool, the rest created */
     {.kind = S_COMMIT, .r = 0, .count = 1, .off = {0}, .len = {7}},
     {.kind = S_TRIM, .r = -1, .a = 1},
     {.kind = S_COMMIT_GROW, .r = 0, .count = 1, .off = {7}, .len = {2}, .win = {16}},
     {.kind = S_DECOMMIT,
      .r = 0,
      .count = 1,
      .off = {0},
      .len = {16},
      .flags = ORTMEM_DECOMMIT_STRICT},
     DESTROY(0),
     POOL_CAP(0, 1),
     END}};

Test(extent_faults, pool_classes_under_a_cap)
{
    sweep(&w_pool_classes_under_a_cap, 30);
}

static const workload *const every_workload[] = {
    &w_pool_classes_under_a_cap,
    &w_commit_extents_of_mixed_sizes,
    &w_commit_grow_with_growth_windows,
    &w_commit_then_decommit_plain_strict_and_no_pool,
    &w_share_whole_extents_then_cow,
    &w_export_and_import_of_an_extent,
    &w_pool_fill_take_and_trim,
    &w_region_destroy_with_extents_mapped,
    &w_aliases_in_one_region_pool_and_region_policy,
};

/* Random faults on every operation (ORTMEM_OP_ANY, probability 1/8, many
 * seeds), the script run to its end whatever each step answers, so failures
 * land on state earlier failures left (rollbacks of rollbacks, commits next
 * to quarantined granules): after every step the ledger still rebuilds from
 * the granules, and the tear-down leaves nothing owned but the quarantine. */
Test(extent_faults, random_faults_run_every_script_to_its_end)
{
    G = (size_t)sysconf(_SC_PAGESIZE);
    uint64_t injected_total = 0;
    for (size_t wi = 0; wi < sizeof every_workload / sizeof every_workload[0]; wi++) {
        const workload *w = every_workload[wi];
        size_t steps = script_length(w);
        for (uint64_t seed = 1; seed <= 64; seed++) {
            env e;
            env_open(&e);
            ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
            fo.probability = 0.125;
            fo.seed = seed;
            OK(ortmem_fault_backend_arm(e.f, &fo));
            static view before, now;
            snap(&e, &before);
            char ctx[160];
            for (size_t k = 0; k < steps; k++) {
                snprintf(ctx, sizeof ctx, "%s, random faults seed %llu, step %zu", w->name,
                         (unsigned long long)seed, k);
                ortmem_status st = run_step(&e, &w->steps[k]);
                cr_assert(st == ORTMEM_OK || ortmem_last_error()[0], "%s: %s without a detail", ctx,
                          ortmem_status_str(st));
                snap(&e, &now);
                sync_model(&e, &w->steps[k], st, &before, &now);
                verify(&e, &now, ctx);
                before = now;
            }
            /* Scripts whose tear-down was refused end here. */
            for (int i = 0; i < REGIONS; i++) {
                if (e.r[i])
                    (void)ortmem_region_destroy(e.r[i]);
                e.r[i] = NULL;
            }
            if (e.fd >= 0)
                close(e.fd);
            e.fd = -1;
            (void)ortmem_pool_set_cap(e.f, 0);
            injected_total += injected_of(&e);
            env_close(&e, ctx);
        }
    }
    cr_assert_gt(injected_total, 500, "random faults injected %llu failures",
                 (unsigned long long)injected_total);
}

/* ---- rollbacks that fail too ---- */

static void arm_any_from(ortmem_backend *f, uint64_t fail_at)
{
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.fail_at = fail_at;
    fo.persistent = 1;
    OK(ortmem_fault_backend_arm(f, &fo));
}

static void detail_has(const char *want)
{
    cr_assert(strstr(ortmem_last_error(), want), "want '%s' in: %s", want, ortmem_last_error());
}

/* The failure reported is the first one, and the detail says what the
 * rollback quarantined (a share, a decommit, a pool trim). */
Test(extent_faults, a_failed_rollback_keeps_the_first_failure_and_names_the_quarantine)
{
    G = (size_t)sysconf(_SC_PAGESIZE);
    ortmem_backend *inner = cpu_backend_with_granule(G), *f = NULL;
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    OK(ortmem_fault_backend_create(inner, &fo, &f));
    OK(ortmem_pool_set_cap(f, 8 * G));
    ortmem_region *a = region_on(f, 16 * G, 0), *c = region_on(f, 16 * G, 0);
    ortmem_range ext[3] = {{0, 4 * G}, {4 * G, 2 * G}, {8 * G, G}};
    OK(ortmem_region_commit_extents(a, ext, 3));

    /* Share: the second map fails, then the rollback's unmap of the first. */
    arm_any_from(f, 2);
    EXPECT_STATUS(ortmem_region_share(c, 0, a, 0, 6 * G, ORTMEM_ACCESS_READ), ORTMEM_E_BACKEND);
    detail_has("fault injected into map (counted call 2,");
    detail_has("4 granules quarantined: the rollback could not unmap them");
    cr_assert_eq(granule_info(c, 0).state, ORTMEM_GRANULE_QUARANTINED);

    /* Decommit of two runs: the second unmap fails, then mapping the first back. */
    OK(ortmem_fault_backend_arm(f, &fo));
    arm_any_from(f, 2);
    ortmem_range runs[2] = {{4 * G, 2 * G}, {8 * G, G}};
    EXPECT_STATUS(ortmem_region_decommit_ex(a, runs, 2, 0), ORTMEM_E_BACKEND);
    detail_has("region decommit of 2 ranges: failed: 2 granules quarantined: they could not be "
               "mapped back: ");
    detail_has("fault injected into unmap (counted call 2,");
    cr_assert(!strstr(ortmem_last_error(), "nothing changed"), "%s", ortmem_last_error());

    /* Two pooled extents whose releases both fail: the first is reported. */
    OK(ortmem_fault_backend_arm(f, &fo));
    OK(ortmem_pool_fill_extents(f, G, 2));
    arm_any_from(f, 1);
    EXPECT_STATUS(ortmem_pool_trim(f, 0, NULL), ORTMEM_E_QUARANTINED);
    detail_has("pool: 2 extents quarantined after failed releases, the first: ");
    detail_has("fault injected into release (counted call 1,");

    OK(ortmem_fault_backend_arm(f, &fo));
    EXPECT_STATUS(ortmem_region_destroy(c), ORTMEM_E_QUARANTINED);
    EXPECT_STATUS(ortmem_region_destroy(a), ORTMEM_E_QUARANTINED);
    EXPECT_STATUS(ortmem_backend_destroy(f), ORTMEM_E_QUARANTINED);
    OK(ortmem_backend_destroy(inner));
}

/* A pool fill that fails gives back the granules it added, not the oldest
 * pooled extents: a trim to the bytes held before released a 4-granule
 * extent of another class and kept the new granule. */
Test(extent_faults, a_failed_pool_fill_releases_only_the_granules_it_added)
{
    G = (size_t)sysconf(_SC_PAGESIZE);
    ortmem_backend *inner = cpu_backend_with_granule(G), *f = NULL;
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    OK(ortmem_fault_backend_create(inner, &fo, &f));
    OK(ortmem_pool_set_cap(f, 16 * G));
    OK(ortmem_pool_fill_extents(f, 4 * G, 1));
    ortmem_vmm_stats s0 = stats_of(f);

    fo.op = ORTMEM_OP_CREATE;
    fo.fail_at = 2; /* the second of the three granules */
    OK(ortmem_fault_backend_arm(f, &fo));
    EXPECT_STATUS(ortmem_pool_fill(f, 7 * G), ORTMEM_E_BACKEND);
    detail_has("fault injected into create (counted call 2)");
    ortmem_vmm_stats s = stats_of(f);
    ortmem_pool_stats p = {.struct_size = sizeof p};
    OK(ortmem_pool_stats_get(f, &p));
    cr_assert_eq(p.extents[2], 1, "the 4-granule extent stays pooled");
    cr_assert_eq(p.extents[0], 0, "the granule added went again");
    cr_assert_eq(s.pool_bytes, 4 * G);
    cr_assert_eq(s.owned_bytes, s0.owned_bytes);
    cr_assert_eq(s.owned_extents, s0.owned_extents);
    cr_assert_eq(s.calls[ORTMEM_OP_RELEASE] - s0.calls[ORTMEM_OP_RELEASE], 1);

    OK(ortmem_pool_fill(f, 7 * G)); /* one-shot: now it fills */
    OK(ortmem_pool_stats_get(f, &p));
    cr_assert_eq(p.extents[2], 1);
    cr_assert_eq(p.extents[0], 3);
    OK(ortmem_pool_set_cap(f, 0));
    cr_assert_eq(stats_of(f).owned_bytes, 0);
    OK(ortmem_backend_destroy(f));
    OK(ortmem_backend_destroy(inner));
}
