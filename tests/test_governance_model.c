/* A reference model of the governance ledger, checked against the real one
 * after every operation of long random sequences: grants (prepare, partial
 * commit, abort), refunds, leases, region commit/decommit/create/destroy under
 * holder accounts, pressure callbacks that decommit their own regions or
 * release nothing, limit changes, and deferred decommits whose fences are
 * signalled later, all over a fault-injecting backend.
 *
 * The model predicts every status. Backend faults cannot be predicted, so a
 * call the model expects to succeed may instead fail with ORTMEM_E_BACKEND
 * (only if a fault was injected): it must then have changed nothing, except
 * granules that a failed rollback quarantined. Those, and ORTMEM_E_QUARANTINED
 * outcomes, are re-read from the region's granule states; the user holders'
 * charges are never re-read: they must equal what the model derives from the
 * granule states (owned = mapped = grant-charged bytes + one granule per mapped
 * granule), and the quarantine holder must hold exactly what the backend
 * reports as quarantined. Pressure is predicted as well (which holders are
 * asked, in which order, for how much), and owned + reserved never passes the
 * limit through a reservation. */
#include <stdbool.h>
#include <stdio.h>

#include "support.h"

#define G ((uint64_t)TEST_GRANULE)
#define NH 5     /* user holders */
#define NR 2     /* regions per holder */
#define RG 12    /* granules per region */
#define MAXG 4   /* open grants per holder */
#define MAXL 3   /* leases per holder */
#define MAXD 24  /* pending retirements */
#define NF 3     /* fences */
#define OPS 5000 /* per seed */

enum slot { S_UNMAPPED = ORTMEM_GRANULE_UNMAPPED, S_MAPPED, S_QUARANTINED };

typedef enum policy {
    P_NONE,     /* not reclaimable */
    P_DECOMMIT, /* decommits its own granules, one at a time */
    P_STINGY,   /* reclaimable, but releases 0 */
    P_REFUND,   /* refunds grant-charged bytes first, then decommits */
} policy;

typedef struct mregion {
    ortmem_region *r; /* NULL: no region in this slot */
    uint8_t slot[RG];
    bool pending[RG]; /* covered by a pending deferred decommit */
} mregion;

typedef struct mholder {
    ortmem_holder *h;
    char name[16];
    int priority;
    policy policy;
    uint64_t grant_owned; /* charged through grants (owned and mapped alike) */
    ortmem_grant *grant[MAXG];
    uint64_t grant_bytes[MAXG];
    size_t ngrants;
    ortmem_lease *lease[MAXL];
    uint64_t lease_bytes[MAXL];
    size_t nleases;
    mregion reg[NR];
} mholder;

typedef struct mretirement {
    int holder, region;
    size_t g0, n;
    int fence;
} mretirement;

typedef struct mfence {
    ortmem_fence *f;
    bool signalled;
} mfence;

/* Pressure the model expects: callbacks in priority order, each asked for
 * what is still missing, until enough was reported or everyone was asked. */
typedef struct episode {
    bool active;
    uint64_t want, reclaimed;
    int order[NH];
    int n, idx;
} episode;

typedef struct model {
    uint64_t seed;
    int op;
    const char *what;
    uint64_t rng;
    ortmem_backend *cpu, *fault;
    ortmem_authority *a;
    mholder h[NH];
    uint64_t limit;
    uint64_t q_owned, q_mapped; /* the quarantine holder: mirrors the backend */
    mretirement d[MAXD];
    size_t nd;
    mfence f[NF];
    episode ep;
    /* What the run exercised, for the closing log line. */
    uint64_t n_budget, n_backend, n_quarantined, n_pressure, n_callbacks, n_retire_done;
    uint64_t n_retire_failed, n_retire_quarantined;
    uint64_t pressure_reclaimed; /* what the callbacks reported */
} model;

static model *M; /* the pressure callbacks' way back into the model */

#define MCHECK(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            char mcheck_buf_[512];                                                                 \
            snprintf(mcheck_buf_, sizeof mcheck_buf_, __VA_ARGS__);                                \
            cr_assert_fail("seed %llu, op %d (%s): %s [%s] (last error: %s)",                      \
                           (unsigned long long)M->seed, M->op, M->what, mcheck_buf_, #cond,        \
                           ortmem_last_error());                                                   \
        }                                                                                          \
    } while (0)

#define MSTATUS(st, want)                                                                          \
    MCHECK((st) == (want), "status %s, want %s", ortmem_status_str(st), ortmem_status_str(want))

static uint64_t rnd(void)
{
    uint64_t x = M->rng += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t below(uint64_t n)
{
    return n ? rnd() % n : 0;
}

/* ---- the model's arithmetic (mirrors the documented rules) ---- */

static uint64_t max64(uint64_t x, uint64_t y)
{
    return x > y ? x : y;
}

static size_t mapped_slots(const mholder *mh)
{
    size_t n = 0;
    for (int r = 0; r < NR; r++) {
        for (int i = 0; mh->reg[r].r && i < RG; i++)
            n += mh->reg[r].slot[i] == S_MAPPED;
    }
    return n;
}

static uint64_t owned_of(const mholder *mh)
{
    return mh->grant_owned + G * mapped_slots(mh);
}

static uint64_t held_of(const mholder *mh)
{
    uint64_t s = 0;
    for (size_t i = 0; i < mh->ngrants; i++)
        s += mh->grant_bytes[i];
    return s;
}

static uint64_t leased_of(const mholder *mh)
{
    uint64_t s = 0;
    for (size_t i = 0; i < mh->nleases; i++)
        s += mh->lease_bytes[i];
    return s;
}

static uint64_t footprint(const mholder *mh, uint64_t extra)
{
    return max64(owned_of(mh) + held_of(mh) + extra, leased_of(mh));
}

static uint64_t used(void)
{
    uint64_t u = M->q_owned;
    for (int k = 0; k < NH; k++)
        u += footprint(&M->h[k], 0);
    return u;
}

/* A reservation fits if the footprint does not grow or used stays <= limit. */
static bool fits(int k, uint64_t extra)
{
    uint64_t old = footprint(&M->h[k], 0), grown = footprint(&M->h[k], extra);
    return grown <= old || used() - old + grown <= M->limit;
}

static uint64_t shortfall(int k, uint64_t extra)
{
    uint64_t old = footprint(&M->h[k], 0), grown = footprint(&M->h[k], extra);
    return used() - old + grown - M->limit;
}

/* ---- observing the real thing ---- */

static ortmem_vmm_stats vmm(void)
{
    return stats_of(M->fault);
}

static uint64_t injected(void)
{
    uint64_t n = 0;
    OK(ortmem_fault_backend_counts(M->fault, NULL, &n));
    return n;
}

static uint8_t real_slot(ortmem_region *r, size_t g)
{
    return (uint8_t)granule_info(r, g * G).state;
}

/* The quarantine only grows; the model follows the backend's count of it. */
static void sync_quarantine(void)
{
    ortmem_vmm_stats s = vmm();
    MCHECK(s.quarantined_bytes >= M->q_owned, "quarantine shrank: %llu -> %llu",
           (unsigned long long)M->q_owned, (unsigned long long)s.quarantined_bytes);
    MCHECK(s.quarantined_mapped_bytes >= M->q_mapped, "stuck mappings shrank");
    if (s.quarantined_bytes > M->q_owned)
        M->n_quarantined++;
    M->q_owned = s.quarantined_bytes;
    M->q_mapped = s.quarantined_mapped_bytes;
}

static const ortmem_holder_report *find(const ortmem_holder_report *hs, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(hs[i].name, name) == 0)
            return &hs[i];
    }
    MCHECK(0, "holder '%s' missing from the report", name);
    return NULL;
}

/* Everything the model knows, compared with the report, the backend's ledger
 * and every granule's state. */
static void check_all(void)
{
    ortmem_authority_report rep;
    memset(&rep, 0, sizeof rep);
    rep.struct_size = sizeof rep;
    ortmem_holder_report hs[NH + 2];
    OK(ortmem_authority_report_get(M->a, &rep, hs, NH + 2));
    MCHECK(rep.holder_count == NH + 2, "%zu holders", rep.holder_count);
    uint64_t owned = M->q_owned, mapped = M->q_mapped;
    for (int k = 0; k < NH; k++) {
        const mholder *mh = &M->h[k];
        const ortmem_holder_report *hr = find(hs, NH + 2, mh->name);
        uint64_t o = owned_of(mh);
        MCHECK(hr->owned_bytes == o, "%s owned %llu, model %llu", mh->name,
               (unsigned long long)hr->owned_bytes, (unsigned long long)o);
        MCHECK(hr->mapped_bytes == o, "%s mapped %llu, model %llu", mh->name,
               (unsigned long long)hr->mapped_bytes, (unsigned long long)o);
        MCHECK(hr->held_bytes == held_of(mh), "%s reserved %llu, model %llu", mh->name,
               (unsigned long long)hr->held_bytes, (unsigned long long)held_of(mh));
        MCHECK(hr->leased_bytes == leased_of(mh), "%s leased %llu, model %llu", mh->name,
               (unsigned long long)hr->leased_bytes, (unsigned long long)leased_of(mh));
        MCHECK(hr->requested_bytes == G * mapped_slots(mh), "%s requested %llu, model %llu",
               mh->name, (unsigned long long)hr->requested_bytes,
               (unsigned long long)(G * mapped_slots(mh)));
        owned += o;
        mapped += o;
    }
    const ortmem_holder_report *q = find(hs, NH + 2, "quarantine");
    MCHECK(q->owned_bytes == M->q_owned && q->mapped_bytes == M->q_mapped,
           "quarantine holder %llu owned / %llu mapped, backend quarantined %llu / %llu",
           (unsigned long long)q->owned_bytes, (unsigned long long)q->mapped_bytes,
           (unsigned long long)M->q_owned, (unsigned long long)M->q_mapped);
    const ortmem_holder_report *pool = find(hs, NH + 2, "pool");
    MCHECK(pool->owned_bytes == 0 && pool->mapped_bytes == 0, "pool holder charged");
    MCHECK(rep.limit_bytes == M->limit, "limit %llu, model %llu",
           (unsigned long long)rep.limit_bytes, (unsigned long long)M->limit);
    MCHECK(rep.owned_bytes == owned, "owned %llu, model %llu", (unsigned long long)rep.owned_bytes,
           (unsigned long long)owned);
    MCHECK(rep.mapped_bytes == mapped, "mapped %llu, model %llu",
           (unsigned long long)rep.mapped_bytes, (unsigned long long)mapped);
    uint64_t u = used();
    MCHECK(rep.owned_bytes + rep.claimed_bytes == u, "owned + reserved %llu, model used %llu",
           (unsigned long long)(rep.owned_bytes + rep.claimed_bytes), (unsigned long long)u);
    MCHECK(rep.available_bytes == (u < M->limit ? M->limit - u : 0), "available %llu",
           (unsigned long long)rep.available_bytes);
    MCHECK(rep.retirements_pending == M->nd, "retirements pending %llu, model %zu",
           (unsigned long long)rep.retirements_pending, M->nd);
    MCHECK(rep.tickets_waiting == 0, "tickets waiting");
    MCHECK(rep.refusals == M->n_budget, "%llu refusals, model %llu",
           (unsigned long long)rep.refusals, (unsigned long long)M->n_budget);
    MCHECK(rep.pressure_reclaimed_bytes == M->pressure_reclaimed,
           "pressure released %llu, the callbacks reported %llu",
           (unsigned long long)rep.pressure_reclaimed_bytes,
           (unsigned long long)M->pressure_reclaimed);
    /* The backend knows what regions map; grants cover memory mapped elsewhere. */
    uint64_t granted = 0;
    for (int k = 0; k < NH; k++)
        granted += M->h[k].grant_owned;
    ortmem_vmm_stats s = vmm();
    MCHECK(s.owned_bytes + granted == rep.owned_bytes, "backend owns %llu, authority %llu",
           (unsigned long long)s.owned_bytes, (unsigned long long)rep.owned_bytes);
    MCHECK(s.mapped_bytes + granted == rep.mapped_bytes, "backend maps %llu, authority %llu",
           (unsigned long long)s.mapped_bytes, (unsigned long long)rep.mapped_bytes);
    MCHECK(s.pool_bytes == 0, "pool holds %llu", (unsigned long long)s.pool_bytes);
    for (int k = 0; k < NH; k++) {
        for (int r = 0; r < NR; r++) {
            const mregion *mr = &M->h[k].reg[r];
            for (size_t i = 0; mr->r && i < RG; i++)
                MCHECK(real_slot(mr->r, i) == mr->slot[i], "%s region %d granule %zu: %d, model %d",
                       M->h[k].name, r, i, real_slot(mr->r, i), mr->slot[i]);
        }
    }
}

/* ---- pressure ---- */

static void expect_pressure(int exclude, uint64_t want)
{
    episode *ep = &M->ep;
    MCHECK(!ep->active, "nested pressure");
    *ep = (episode){true, want, 0, {0}, 0, 0};
    /* Reclaimable holders with something charged or held, lowest priority
     * first (the priorities differ). */
    for (int p = -1000; p <= 1000; p++) {
        for (int k = 0; k < NH; k++) {
            if (k != exclude && M->h[k].policy != P_NONE && M->h[k].priority == p &&
                footprint(&M->h[k], 0) > 0)
                ep->order[ep->n++] = k;
        }
    }
    M->n_pressure++;
}

static void pressure_done(void)
{
    episode *ep = &M->ep;
    MCHECK(ep->idx == ep->n || ep->reclaimed >= ep->want,
           "pressure stopped after %d of %d holders with %llu of %llu released", ep->idx, ep->n,
           (unsigned long long)ep->reclaimed, (unsigned long long)ep->want);
    ep->active = false;
}

/* ---- region operations (used at top level and from callbacks) ---- */

static bool range_pending(const mregion *mr, size_t g0, size_t n)
{
    for (size_t i = g0; i < g0 + n; i++) {
        if (mr->pending[i])
            return true;
    }
    return false;
}

/* Region commit of granules [g0, g0+n). */
static void op_commit(int k, int r, size_t g0, size_t n)
{
    mregion *mr = &M->h[k].reg[r];
    bool quarantined = false;
    size_t wanted = 0;
    uint8_t before[RG];
    memcpy(before, mr->slot, sizeof before);
    for (size_t i = g0; i < g0 + n; i++) {
        quarantined |= mr->slot[i] == S_QUARANTINED;
        wanted += mr->slot[i] == S_UNMAPPED;
    }
    uint64_t inj = injected();
    bool pressure = !quarantined && wanted && !fits(k, wanted * G);
    if (pressure)
        expect_pressure(k, shortfall(k, wanted * G));
    ortmem_status st = ortmem_region_commit(mr->r, g0 * G, n * G);
    if (pressure)
        pressure_done();
    if (quarantined) {
        MSTATUS(st, ORTMEM_E_STATE);
    } else if (!wanted) {
        MSTATUS(st, ORTMEM_OK);
    } else if (!fits(k, wanted * G)) {
        MSTATUS(st, ORTMEM_E_BUDGET);
        M->n_budget++;
    } else if (st != ORTMEM_OK) {
        MSTATUS(st, ORTMEM_E_BACKEND);
        MCHECK(injected() > inj, "a backend failure without an injected fault");
        M->n_backend++;
    }
    for (size_t i = g0; i < g0 + n; i++) {
        uint8_t now = real_slot(mr->r, i);
        if (st == ORTMEM_OK)
            MCHECK(now == S_MAPPED, "granule %zu not mapped after a commit", i);
        else if (st == ORTMEM_E_BACKEND && before[i] == S_UNMAPPED)
            MCHECK(now == S_UNMAPPED || now == S_QUARANTINED, "granule %zu: %d", i, now);
        else
            MCHECK(now == before[i], "granule %zu changed (%d -> %d) in a refused commit", i,
                   before[i], now);
        mr->slot[i] = now;
    }
    /* Callbacks quarantined what they did already (they sync themselves). */
    uint64_t q = M->q_owned;
    sync_quarantine();
    if (st != ORTMEM_E_BACKEND)
        MCHECK(M->q_owned == q, "a commit that did not fail quarantined memory");
}

/* Region decommit of [g0, g0+n); returns the granules that left the holder. */
static size_t op_decommit(int k, int r, size_t g0, size_t n, ortmem_status *out)
{
    mregion *mr = &M->h[k].reg[r];
    uint8_t before[RG];
    memcpy(before, mr->slot, sizeof before);
    size_t sel = 0;
    for (size_t i = g0; i < g0 + n; i++)
        sel += mr->slot[i] == S_MAPPED;
    uint64_t inj = injected(), q = M->q_owned;
    ortmem_status st = ortmem_region_decommit(mr->r, g0 * G, n * G);
    if (out)
        *out = st;
    if (st != ORTMEM_OK) {
        MCHECK(sel > 0, "decommit of nothing failed");
        MCHECK(st == ORTMEM_E_QUARANTINED || st == ORTMEM_E_BACKEND, "status %s",
               ortmem_status_str(st));
        MCHECK(injected() > inj, "a failure without an injected fault");
        M->n_backend += st == ORTMEM_E_BACKEND;
    }
    for (size_t i = g0; i < g0 + n; i++) {
        uint8_t now = real_slot(mr->r, i);
        if (before[i] != S_MAPPED)
            MCHECK(now == before[i], "granule %zu outside the selection changed", i);
        else if (st == ORTMEM_E_BACKEND)
            MCHECK(now == S_MAPPED || now == S_QUARANTINED,
                   "granule %zu: %d after a failed decommit", i, now);
        else
            MCHECK(now == S_UNMAPPED, "granule %zu: %d after a decommit", i, now);
        mr->slot[i] = now;
    }
    sync_quarantine();
    if (st == ORTMEM_OK)
        MCHECK(M->q_owned == q, "a successful decommit quarantined memory");
    if (st == ORTMEM_E_QUARANTINED)
        MCHECK(M->q_owned > q, "ORTMEM_E_QUARANTINED but the quarantine did not grow");
    return st == ORTMEM_E_BACKEND ? 0 : sel;
}

static void op_create(int k, int r)
{
    mregion *mr = &M->h[k].reg[r];
    ortmem_account acct;
    OK(ortmem_holder_account(M->h[k].h, &acct));
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    opt.size = RG * G;
    opt.account = &acct;
    uint64_t inj = injected();
    ortmem_status st = ortmem_region_create(M->fault, &opt, &mr->r);
    if (st != ORTMEM_OK) {
        MSTATUS(st, ORTMEM_E_BACKEND);
        MCHECK(injected() > inj, "a failure without an injected fault");
        mr->r = NULL;
        return;
    }
    memset(mr->slot, S_UNMAPPED, sizeof mr->slot);
    memset(mr->pending, 0, sizeof mr->pending);
}

static void op_destroy(int k, int r)
{
    mregion *mr = &M->h[k].reg[r];
    bool quarantined = false;
    for (size_t i = 0; i < RG; i++)
        quarantined |= mr->slot[i] == S_QUARANTINED;
    uint64_t inj = injected(), q = M->q_owned;
    ortmem_status st = ortmem_region_destroy(mr->r);
    /* Quarantined granules stay, so their VA does: that is reported every time. */
    if (quarantined)
        MSTATUS(st, ORTMEM_E_QUARANTINED);
    else if (st != ORTMEM_OK) {
        MSTATUS(st, ORTMEM_E_QUARANTINED);
        MCHECK(injected() > inj, "a failure without an injected fault");
    }
    mr->r = NULL;
    sync_quarantine();
    if (st == ORTMEM_OK)
        MCHECK(M->q_owned == q, "a clean destroy quarantined memory");
}

/* ---- the pressure callback ---- */

static uint64_t on_pressure(void *user, uint64_t want)
{
    mholder *mh = user;
    int k = (int)(mh - M->h);
    episode *ep = &M->ep;
    MCHECK(ep->active, "%s asked outside any expected pressure", mh->name);
    MCHECK(ep->idx < ep->n && ep->order[ep->idx] == k, "%s asked out of order (position %d)",
           mh->name, ep->idx);
    MCHECK(want == ep->want - ep->reclaimed, "%s asked for %llu, expected %llu", mh->name,
           (unsigned long long)want, (unsigned long long)(ep->want - ep->reclaimed));
    ep->idx++;
    M->n_callbacks++;
    uint64_t got = 0;
    if (mh->policy == P_REFUND && mh->grant_owned) {
        uint64_t x = mh->grant_owned < want ? mh->grant_owned : want;
        OK(ortmem_holder_refund(mh->h, x));
        mh->grant_owned -= x;
        got += x;
    }
    if (mh->policy == P_DECOMMIT || mh->policy == P_REFUND) {
        bool stop = false;
        for (int r = 0; r < NR && !stop; r++) {
            mregion *mr = &mh->reg[r];
            for (size_t i = 0; mr->r && i < RG && got < want && !stop; i++) {
                if (mr->slot[i] != S_MAPPED || mr->pending[i])
                    continue;
                ortmem_status st;
                got += G * op_decommit(k, r, i, 1, &st);
                stop = st == ORTMEM_E_BACKEND;
            }
        }
    }
    ep->reclaimed += got;
    M->pressure_reclaimed += got;
    return got;
}

/* ---- the other operations ---- */

static void op_grant_prepare(int k)
{
    mholder *mh = &M->h[k];
    if (mh->ngrants == MAXG)
        return;
    uint64_t bytes = (1 + below(6 * 16)) * 4096;
    bool pressure = !fits(k, bytes);
    if (pressure)
        expect_pressure(k, shortfall(k, bytes));
    ortmem_grant *g = NULL;
    ortmem_status st = ortmem_grant_prepare(mh->h, bytes, &g);
    if (pressure)
        pressure_done();
    if (fits(k, bytes)) {
        MSTATUS(st, ORTMEM_OK);
        mh->grant[mh->ngrants] = g;
        mh->grant_bytes[mh->ngrants++] = bytes;
    } else {
        MSTATUS(st, ORTMEM_E_BUDGET);
        MCHECK(strstr(ortmem_last_error(), "requested") && strstr(ortmem_last_error(), "limit"),
               "the refusal does not name the numbers");
        M->n_budget++;
    }
}

static void drop_grant(mholder *mh, size_t i)
{
    mh->grant[i] = mh->grant[--mh->ngrants];
    mh->grant_bytes[i] = mh->grant_bytes[mh->ngrants];
}

static void op_grant_end(int k)
{
    mholder *mh = &M->h[k];
    if (!mh->ngrants)
        return;
    size_t i = below(mh->ngrants);
    uint64_t bytes = mh->grant_bytes[i];
    switch (below(4)) {
    case 0:
        OK(ortmem_grant_abort(mh->grant[i]));
        drop_grant(mh, i);
        break;
    case 1:
        /* More than prepared is refused and the grant stays open. */
        EXPECT_STATUS(ortmem_grant_charge(mh->grant[i], bytes + 1), ORTMEM_E_RANGE);
        break;
    default: {
        uint64_t actual = below(bytes + 1);
        OK(ortmem_grant_charge(mh->grant[i], actual));
        mh->grant_owned += actual;
        drop_grant(mh, i);
    }
    }
}

static void op_refund(int k)
{
    mholder *mh = &M->h[k];
    if (below(5) == 0) {
        EXPECT_STATUS(ortmem_holder_refund(mh->h, owned_of(mh) + 1), ORTMEM_E_RANGE);
        return;
    }
    if (!mh->grant_owned)
        return;
    uint64_t x = 1 + below(mh->grant_owned);
    OK(ortmem_holder_refund(mh->h, x));
    mh->grant_owned -= x;
}

static void op_lease(int k)
{
    mholder *mh = &M->h[k];
    if (mh->nleases && (mh->nleases == MAXL || below(2))) {
        size_t i = below(mh->nleases);
        ortmem_lease *l = mh->lease[i];
        OK(ortmem_lease_drop(l));
        mh->lease[i] = mh->lease[--mh->nleases];
        mh->lease_bytes[i] = mh->lease_bytes[mh->nleases];
        if (below(4) == 0)
            EXPECT_STATUS(ortmem_lease_drop(l), ORTMEM_E_DOUBLE_FREE);
        return;
    }
    uint64_t bytes = (1 + below(10)) * G;
    uint64_t charged = owned_of(mh) + held_of(mh);
    uint64_t grown = max64(leased_of(mh) + bytes, charged);
    bool ok = used() + (grown - footprint(mh, 0)) <= M->limit;
    ortmem_lease *l = NULL;
    ortmem_status st = ortmem_lease_acquire(mh->h, bytes, &l);
    if (ok) {
        MSTATUS(st, ORTMEM_OK);
        mh->lease[mh->nleases] = l;
        mh->lease_bytes[mh->nleases++] = bytes;
    } else {
        MSTATUS(st, ORTMEM_E_BUDGET);
        M->n_budget++;
    }
}

static void op_set_limit(void)
{
    /* Around what is charged, quarantine included, so that the run neither
     * starves nor stops refusing as the quarantine grows. */
    uint64_t limit = M->q_owned + (24 + below(49)) * G;
    uint64_t u = used();
    if (u > limit)
        expect_pressure(-1, u - limit);
    ortmem_limit_outcome out = {sizeof out, 0, 0, 0, 0, 0};
    ortmem_status st = ortmem_authority_set_limit(M->a, limit, &out);
    uint64_t reclaimed = M->ep.active ? M->ep.reclaimed : 0;
    if (M->ep.active)
        pressure_done();
    MSTATUS(st, ORTMEM_OK);
    MCHECK(out.old_limit_bytes == M->limit && out.new_limit_bytes == limit, "outcome limits");
    MCHECK(out.reclaimed_bytes == reclaimed, "reclaimed %llu, callbacks released %llu",
           (unsigned long long)out.reclaimed_bytes, (unsigned long long)reclaimed);
    M->limit = limit;
    MCHECK(out.charged_bytes == used(), "charged %llu, model %llu",
           (unsigned long long)out.charged_bytes, (unsigned long long)used());
    MCHECK(!out.within_limit == (used() > limit), "holds %d with %llu of %llu", out.within_limit,
           (unsigned long long)used(), (unsigned long long)limit);
}

/* ---- retirement ---- */

static void op_defer(int k, int r, size_t g0, size_t n)
{
    mregion *mr = &M->h[k].reg[r];
    if (M->nd == MAXD || range_pending(mr, g0, n))
        return;
    int fi = (int)below(NF);
    if (!M->f[fi].f) {
        OK(ortmem_fence_create(&M->f[fi].f));
        M->f[fi].signalled = false;
    }
    OK(ortmem_region_decommit_after(mr->r, g0 * G, n * G, M->f[fi].f));
    for (size_t i = g0; i < g0 + n; i++)
        mr->pending[i] = true;
    M->d[M->nd++] = (mretirement){k, r, g0, n, fi};
}

static size_t fence_users(int fi)
{
    size_t n = 0;
    for (size_t i = 0; i < M->nd; i++)
        n += M->d[i].fence == fi;
    return n;
}

static void op_fence(void)
{
    int fi = (int)below(NF);
    mfence *f = &M->f[fi];
    if (!f->f)
        return;
    if (!f->signalled && below(3)) {
        EXPECT_STATUS(ortmem_fence_query(f->f), ORTMEM_E_BUSY);
        OK(ortmem_fence_signal(f->f));
        f->signalled = true;
        OK(ortmem_fence_query(f->f));
        return;
    }
    if (fence_users(fi)) {
        EXPECT_STATUS(ortmem_fence_destroy(f->f), ORTMEM_E_BUSY);
        return;
    }
    OK(ortmem_fence_destroy(f->f));
    f->f = NULL;
}

/* Poll (or a drain that does not wait): the releases whose fences completed
 * are carried out; each either left (every mapped granule unmapped: completed
 * or quarantined) or failed (nothing unmapped; restore failures quarantined) and
 * stays pending. */
static void op_poll(bool drain)
{
    uint64_t q = M->q_owned;
    ortmem_retire_report rr;
    memset(&rr, 0, sizeof rr);
    rr.struct_size = sizeof rr;
    uint8_t before[MAXD][RG];
    for (size_t j = 0; j < M->nd; j++)
        memcpy(before[j], M->h[M->d[j].holder].reg[M->d[j].region].slot, RG);
    ortmem_status st =
        drain ? ortmem_authority_drain(M->a, 0, &rr) : ortmem_authority_poll(M->a, &rr);
    size_t left = 0, failed = 0, kept = 0;
    uint64_t left_bytes = 0;
    for (size_t j = 0; j < M->nd; j++) {
        mretirement d = M->d[j];
        if (!M->f[d.fence].signalled) {
            M->d[kept++] = d;
            continue;
        }
        mregion *mr = &M->h[d.holder].reg[d.region];
        size_t unmapped = 0, sel = 0;
        for (size_t i = d.g0; i < d.g0 + d.n; i++) {
            uint8_t now = real_slot(mr->r, i);
            if (before[j][i] == S_MAPPED) {
                sel++;
                unmapped += now == S_UNMAPPED;
            } else {
                MCHECK(now == before[j][i], "granule %zu outside the release changed", i);
            }
            mr->slot[i] = now;
        }
        MCHECK(unmapped == 0 || unmapped == sel, "a release unmapped %zu of %zu granules", unmapped,
               sel);
        if (unmapped == sel) {
            left++;
            left_bytes += d.n * G;
            for (size_t i = d.g0; i < d.g0 + d.n; i++)
                mr->pending[i] = false;
        } else {
            failed++;
            M->d[kept++] = d; /* it stays pending: the next poll retries it */
        }
    }
    M->nd = kept;
    M->n_retire_done += left;
    M->n_retire_failed += failed;
    M->n_retire_quarantined += rr.quarantined;
    sync_quarantine();
    MCHECK(rr.completed + rr.quarantined == left && rr.failed == failed,
           "report %llu completed, %llu quarantined, %llu failed; model %zu left, %zu failed",
           (unsigned long long)rr.completed, (unsigned long long)rr.quarantined,
           (unsigned long long)rr.failed, left, failed);
    MCHECK(rr.pending == M->nd, "pending %llu, model %zu", (unsigned long long)rr.pending, M->nd);
    if (rr.quarantined)
        MCHECK(M->q_owned > q, "releases quarantined but the quarantine did not grow");
    if (M->q_owned > q)
        MCHECK(rr.quarantined + rr.failed > 0, "the quarantine grew but no release says so");
    if (!rr.quarantined)
        MCHECK(rr.decommitted_bytes == left_bytes, "released %llu, model %llu",
               (unsigned long long)rr.decommitted_bytes, (unsigned long long)left_bytes);
    if (drain && M->nd)
        MSTATUS(st, ORTMEM_E_TIMEOUT);
    else if (failed)
        MSTATUS(st, ORTMEM_E_BACKEND);
    else
        MSTATUS(st, ORTMEM_OK);
}

/* ---- driver ---- */

static void pick_range(size_t *g0, size_t *n)
{
    *g0 = below(RG);
    *n = 1 + below(RG - *g0 < 4 ? RG - *g0 : 4);
}

static void step(void)
{
    int k = (int)below(NH);
    int r = (int)below(NR);
    mregion *mr = &M->h[k].reg[r];
    size_t g0, n;
    pick_range(&g0, &n);
    uint64_t roll = below(100);
    if (roll < 22) {
        M->what = "region commit";
        if (mr->r && !range_pending(mr, g0, n))
            op_commit(k, r, g0, n);
        else if (!mr->r)
            op_create(k, r);
    } else if (roll < 32) {
        M->what = "region decommit";
        if (mr->r && !range_pending(mr, g0, n))
            (void)op_decommit(k, r, g0, n, NULL);
    } else if (roll < 35) {
        M->what = "region destroy";
        if (mr->r && !range_pending(mr, 0, RG))
            op_destroy(k, r);
    } else if (roll < 47) {
        M->what = "grant prepare";
        op_grant_prepare(k);
    } else if (roll < 57) {
        M->what = "grant charge/abort";
        op_grant_end(k);
    } else if (roll < 62) {
        M->what = "holder refund";
        op_refund(k);
    } else if (roll < 70) {
        M->what = "lease";
        op_lease(k);
    } else if (roll < 74) {
        M->what = "set limit";
        op_set_limit();
    } else if (roll < 82) {
        M->what = "decommit after";
        if (mr->r)
            op_defer(k, r, g0, n);
    } else if (roll < 90) {
        M->what = "fence";
        op_fence();
    } else {
        M->what = roll < 96 ? "poll" : "drain";
        op_poll(roll >= 96);
    }
}

static void run_model(uint64_t seed)
{
    model m;
    memset(&m, 0, sizeof m);
    M = &m;
    m.seed = seed;
    m.rng = seed;
    m.what = "setup";
    m.cpu = test_backend();
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = ORTMEM_OP_ANY;
    fo.probability = 0.02;
    fo.seed = seed;
    OK(ortmem_fault_backend_create(m.cpu, &fo, &m.fault));
    m.limit = 48 * G;
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = m.limit;
    OK(ortmem_authority_create(m.fault, &ao, &m.a));
    const policy policies[NH] = {P_DECOMMIT, P_STINGY, P_REFUND, P_NONE, P_NONE};
    const int priorities[NH] = {10, -5, 20, 0, 30};
    for (int k = 0; k < NH; k++) {
        mholder *mh = &m.h[k];
        snprintf(mh->name, sizeof mh->name, "h%d", k);
        mh->priority = priorities[k];
        mh->policy = policies[k];
        ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
        ho.name = mh->name;
        ho.role = (ortmem_role)(k % ORTMEM_ROLE_COUNT);
        ho.priority = mh->priority;
        ho.on_pressure = mh->policy == P_NONE ? NULL : on_pressure;
        ho.user = mh;
        OK(ortmem_holder_register(m.a, &ho, &mh->h));
    }
    check_all();
    for (m.op = 0; m.op < OPS; m.op++) {
        ortmem_authority_report before;
        memset(&before, 0, sizeof before);
        before.struct_size = sizeof before;
        OK(ortmem_authority_report_get(m.a, &before, NULL, 0));
        uint64_t q = m.q_owned;
        step();
        check_all();
        /* Nothing goes over the limit through a reservation: used grows past
         * it only by memory that was quarantined in this very step. */
        uint64_t u = used(), was = before.owned_bytes + before.claimed_bytes;
        MCHECK(u <= max64(m.limit, was) + (m.q_owned - q),
               "used %llu over the limit %llu (before %llu)", (unsigned long long)u,
               (unsigned long long)m.limit, (unsigned long long)was);
    }

    /* Teardown: everything goes back; only the quarantine stays charged. */
    m.what = "teardown";
    for (int fi = 0; fi < NF; fi++) {
        if (m.f[fi].f && !m.f[fi].signalled) {
            OK(ortmem_fence_signal(m.f[fi].f));
            m.f[fi].signalled = true;
        }
    }
    op_poll(false);
    for (int fi = 0; fi < NF; fi++) {
        if (m.f[fi].f)
            OK(ortmem_fence_destroy(m.f[fi].f));
    }
    for (int k = 0; k < NH; k++) {
        mholder *mh = &m.h[k];
        while (mh->ngrants) {
            OK(ortmem_grant_abort(mh->grant[0]));
            drop_grant(mh, 0);
        }
        for (size_t i = 0; i < mh->nleases; i++)
            OK(ortmem_lease_drop(mh->lease[i]));
        mh->nleases = 0;
        if (mh->grant_owned)
            OK(ortmem_holder_refund(mh->h, mh->grant_owned));
        mh->grant_owned = 0;
        for (int r = 0; r < NR; r++) {
            if (mh->reg[r].r)
                op_destroy(k, r);
        }
    }
    check_all();
    for (int k = 0; k < NH; k++)
        OK(ortmem_holder_unregister(m.h[k].h));
    OK(ortmem_authority_destroy(m.a));
    uint64_t faults = injected();
    ortmem_status st = ortmem_backend_destroy(m.fault);
    cr_assert(st == (m.q_owned ? ORTMEM_E_QUARANTINED : ORTMEM_OK), "%s", ortmem_status_str(st));
    OK(ortmem_backend_destroy(m.cpu));
    cr_log_info("seed %llu: %llu faults injected, %llu budget refusals, %llu backend failures, "
                "%llu quarantine events (%llu bytes), %llu pressure episodes, %llu callbacks, "
                "%llu retirements done (%llu quarantined, %llu failed)",
                (unsigned long long)seed, (unsigned long long)faults,
                (unsigned long long)m.n_budget, (unsigned long long)m.n_backend,
                (unsigned long long)m.n_quarantined, (unsigned long long)m.q_owned,
                (unsigned long long)m.n_pressure, (unsigned long long)m.n_callbacks,
                (unsigned long long)m.n_retire_done, (unsigned long long)m.n_retire_quarantined,
                (unsigned long long)m.n_retire_failed);
    M = NULL;
}

#define SEED_TEST(name, seed)                                                                      \
    Test(governance_model, name, .timeout = 300)                                                   \
    {                                                                                              \
        run_model(seed);                                                                           \
    }

SEED_TEST(seed_1, 1)
SEED_TEST(seed_5eed2, 0x5eed2)
SEED_TEST(seed_decafbad, 0xdecafbad)
SEED_TEST(seed_424242, 424242)
SEED_TEST(seed_77, 77)
SEED_TEST(seed_123456789abcdef, 0x123456789abcdefULL)
