/* An op-sequence fuzzer of the public API on the CPU backend. Every input
 * builds a fresh backend and authority (the limit from the first byte) with
 * three holders (regions, the arena, grants) and a KV cache (and, by a bit
 * of the first byte, a pool), then reads ops from the bytes: regions
 * (create, destroy, commit, commit_ranges, decommit, decommit_ex strict or
 * not, share, protect), the arena (alloc, free, a foreign free, trim),
 * grants (prepare, charge, abort, refund), leases (acquire, drop) and KV
 * sequences (create, append, truncate, fork, finish). A reference model kept here says what must be true after EVERY
 * op, and a mismatch traps:
 *   - the backend's owned and mapped bytes are the model's regions' granules
 *     plus what the arena and the KV cache report committed and mapped;
 *   - the ledger's owned bytes are the backend's plus the grants' charges,
 *     never above the limit;
 *   - a failed call changed nothing (the same sums before and after);
 *   - every committed granule reads its own tag (a fresh one reads zeros),
 *     an alias reads its source's; live allocations lie inside the arena,
 *     never overlap, and keep the bytes written to them; every live KV token
 *     keeps its byte through appends, forks and truncates elsewhere;
 *   - teardown returns every byte: owned, mapped and reserved all 0. */
#include <ortmem/ortmem.h>
#include <stdbool.h>
#include <string.h>

#include "common.h"

#define G ((size_t)64 << 10) /* the backend's granule: small, so inputs run fast */
#define MAX_REGIONS 4
#define REGION_GRANULES 16
#define MAX_ALLOCS 48
#define ARENA_BYTES ((size_t)2 << 20)
#define MAX_SEQS 4
#define MAX_CONTEXT 512
#define MAX_GRANTS 4
#define MAX_OPS 256
#define MAX_PHYS (MAX_OPS * REGION_GRANULES + 1)

typedef struct input {
    const uint8_t *p;
    size_t left;
} input;

static unsigned take(input *in)
{
    if (!in->left)
        return 0;
    in->left--;
    return *in->p++;
}

static unsigned take16(input *in)
{
    unsigned lo = take(in);
    return lo | take(in) << 8;
}

typedef struct slot {
    uint32_t phys; /* 0: unmapped; else the physical granule's number (its tag) */
    uint8_t access;
} slot;

typedef struct mregion {
    ortmem_region *r;
    uint8_t *base;
    uint32_t granules;
    slot s[REGION_GRANULES];
} mregion;

typedef struct alloc {
    uint8_t *ptr;
    size_t size;
    uint8_t stamp;
} alloc;

typedef struct mseq {
    ortmem_kv_seq *s;
    uint64_t len;
    uint8_t pattern[MAX_CONTEXT]; /* byte 0 of every token of (layer 0, K) */
} mseq;

typedef struct grant {
    ortmem_grant *g;
    uint64_t bytes;
} grant;

typedef struct world {
    ortmem_backend *backend;
    ortmem_authority *authority;
    ortmem_holder *h_regions, *h_arena, *h_grants;
    ortmem_account a_regions, a_arena;
    ortmem_arena *arena;
    ortmem_kv_cache *kv;
    uint64_t limit;
    mregion reg[MAX_REGIONS];
    alloc al[MAX_ALLOCS];
    size_t n_allocs;
    mseq seq[MAX_SEQS];
    grant gr[MAX_GRANTS];
    ortmem_lease *lease[2];
    bool pool; /* the backend keeps decommitted granules: a commit may reuse old bytes */
    uint64_t grant_charged;  /* charged through grants and not refunded */
    uint32_t refs[MAX_PHYS]; /* mappings of each model granule */
    uint32_t next_phys;
    uint64_t owned_granules, mapped_granules;
    uint8_t next_stamp;
    ortmem_status failed; /* the op's call that was refused, ORTMEM_OK when none */
} world;

static world w;

/* Records a refusal, so the run can check it changed nothing. */
static ortmem_status seen(ortmem_status st)
{
    if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED)
        w.failed = st;
    return st;
}

#define OK(call)                                                                                   \
    do {                                                                                           \
        ortmem_status st_ = (call);                                                                \
        FUZZ_CHECK(st_ == ORTMEM_OK, "%s: %s", ortmem_status_str(st_), ortmem_last_error());       \
    } while (0)

/* ---- the checks ---- */

typedef struct sums {
    uint64_t owned, mapped, ledger_owned, arena_allocated, live_tokens, seqs;
} sums;

static sums measure(void)
{
    ortmem_vmm_stats vs = {.struct_size = sizeof vs};
    OK(ortmem_backend_stats(w.backend, &vs));
    ortmem_authority_report ar = {.struct_size = sizeof ar};
    OK(ortmem_authority_report_get(w.authority, &ar, NULL, 0));
    ortmem_arena_stats as = {.struct_size = sizeof as};
    OK(ortmem_arena_stats_get(w.arena, &as));
    ortmem_kv_stats ks = {.struct_size = sizeof ks};
    OK(ortmem_kv_cache_stats(w.kv, &ks));

    uint64_t want_owned = w.owned_granules * G + as.committed_bytes + ks.committed_bytes;
    uint64_t want_mapped = w.mapped_granules * G + as.committed_bytes + ks.mapped_bytes;
    FUZZ_CHECK(vs.owned_bytes == want_owned + vs.pool_bytes,
               "backend owns %llu; model %llu (regions %llu granules, arena %llu, kv %llu, "
               "pool %llu)",
               (unsigned long long)vs.owned_bytes, (unsigned long long)want_owned,
               (unsigned long long)w.owned_granules, (unsigned long long)as.committed_bytes,
               (unsigned long long)ks.committed_bytes, (unsigned long long)vs.pool_bytes);
    FUZZ_CHECK(vs.mapped_bytes == want_mapped, "backend maps %llu; model %llu",
               (unsigned long long)vs.mapped_bytes, (unsigned long long)want_mapped);
    FUZZ_CHECK(vs.quarantined_bytes == 0, "%llu bytes quarantined on the CPU backend",
               (unsigned long long)vs.quarantined_bytes);
    FUZZ_CHECK(ar.owned_bytes == vs.owned_bytes + w.grant_charged,
               "ledger owns %llu; backend %llu + grants %llu", (unsigned long long)ar.owned_bytes,
               (unsigned long long)vs.owned_bytes, (unsigned long long)w.grant_charged);
    FUZZ_CHECK(ar.owned_bytes <= w.limit, "ledger owns %llu over the limit %llu",
               (unsigned long long)ar.owned_bytes, (unsigned long long)w.limit);
    FUZZ_CHECK(ar.owned_bytes + ar.claimed_bytes <= w.limit,
               "owned %llu + claimed %llu over the limit %llu", (unsigned long long)ar.owned_bytes,
               (unsigned long long)ar.claimed_bytes, (unsigned long long)w.limit);

    uint64_t allocated = 0;
    for (size_t i = 0; i < w.n_allocs; i++)
        allocated += w.al[i].size;
    FUZZ_CHECK(as.live_allocations == w.n_allocs && as.allocated_bytes == allocated,
               "arena: %llu live, %llu bytes; model %zu, %llu",
               (unsigned long long)as.live_allocations, (unsigned long long)as.allocated_bytes,
               w.n_allocs, (unsigned long long)allocated);

    uint64_t tokens = 0, seqs = 0;
    for (int i = 0; i < MAX_SEQS; i++) {
        if (!w.seq[i].s)
            continue;
        uint64_t len;
        OK(ortmem_kv_seq_length(w.seq[i].s, &len));
        FUZZ_CHECK(len == w.seq[i].len, "seq %d: length %llu, model %llu", i,
                   (unsigned long long)len, (unsigned long long)w.seq[i].len);
        tokens += len;
        seqs++;
    }
    FUZZ_CHECK(ks.sequences == seqs && ks.live_tokens == tokens, "kv: %llu seqs %llu tokens",
               (unsigned long long)ks.sequences, (unsigned long long)ks.live_tokens);
    return (sums){vs.owned_bytes,     vs.mapped_bytes, ar.owned_bytes,
                  as.allocated_bytes, ks.live_tokens,  ks.sequences};
}

static void check_contents(void)
{
    for (int r = 0; r < MAX_REGIONS; r++) {
        mregion *m = &w.reg[r];
        for (uint32_t g = 0; m->r && g < m->granules; g++) {
            if (!m->s[g].phys || !(m->s[g].access & ORTMEM_ACCESS_READ))
                continue;
            uint32_t tag;
            memcpy(&tag, m->base + g * G, sizeof tag);
            FUZZ_CHECK(tag == m->s[g].phys, "region %d granule %u reads tag %u, not %u", r, g, tag,
                       m->s[g].phys);
        }
    }
    for (size_t i = 0; i < w.n_allocs; i++) {
        const alloc *a = &w.al[i];
        FUZZ_CHECK(a->ptr[0] == a->stamp && a->ptr[a->size - 1] == a->stamp,
                   "allocation %p (%zu bytes) lost its stamp", (void *)a->ptr, a->size);
    }
    for (int i = 0; i < MAX_SEQS; i++) {
        mseq *q = &w.seq[i];
        if (!q->s || !q->len)
            continue;
        ortmem_kv_binding b = {.struct_size = sizeof b};
        OK(ortmem_kv_seq_binding(q->s, 0, 0, &b));
        const volatile uint8_t *base = b.base;
        for (uint64_t t = 0; t < q->len; t++)
            FUZZ_CHECK(base[t * b.token_stride] == q->pattern[t],
                       "seq %d token %llu reads %u, not %u", i, (unsigned long long)t,
                       base[t * b.token_stride], q->pattern[t]);
    }
}

/* ---- region ops ---- */

static void unmap_slot(slot *s)
{
    if (--w.refs[s->phys] == 0)
        w.owned_granules--;
    w.mapped_granules--;
    s->phys = 0;
}

static void op_region_create(input *in)
{
    int r = (int)(take(in) % MAX_REGIONS);
    if (w.reg[r].r)
        return;
    ortmem_region_options o = ORTMEM_REGION_OPTIONS_INIT;
    uint32_t granules = 1 + take(in) % REGION_GRANULES;
    o.size = granules * G;
    o.account = &w.a_regions;
    if (seen(ortmem_region_create(w.backend, &o, &w.reg[r].r)) != ORTMEM_OK)
        return;
    w.reg[r].granules = granules;
    w.reg[r].base = ortmem_region_base(w.reg[r].r);
    FUZZ_CHECK(ortmem_region_size(w.reg[r].r) == o.size, "size");
    memset(w.reg[r].s, 0, sizeof w.reg[r].s);
}

static void op_region_destroy(input *in)
{
    mregion *m = &w.reg[take(in) % MAX_REGIONS];
    if (!m->r)
        return;
    OK(ortmem_region_destroy(m->r));
    for (uint32_t g = 0; g < m->granules; g++)
        if (m->s[g].phys)
            unmap_slot(&m->s[g]);
    m->r = NULL;
}

/* A byte range around the region: mostly inside, sometimes past its end or
 * unaligned. */
static void byte_range(input *in, const mregion *m, size_t *off, size_t *len)
{
    unsigned mode = take(in);
    size_t span = (size_t)(m->granules + 1) * G;
    *off = (size_t)take16(in) * (span >> 16) + (mode & 1 ? take(in) : 0);
    *len = (size_t)take16(in) * (span >> 16) + (mode & 2 ? take(in) : 0);
    if (mode & 4) { /* whole granules */
        *off -= *off % G;
        *len -= *len % G;
    }
}

static void map_fresh(mregion *m, size_t off, size_t len);

static void op_commit(input *in)
{
    mregion *m = &w.reg[take(in) % MAX_REGIONS];
    if (!m->r)
        return;
    size_t off, len;
    byte_range(in, m, &off, &len);
    ortmem_status st = seen(ortmem_region_commit(m->r, off, len));
    bool inside = len > 0 && off < (size_t)m->granules * G && len <= m->granules * G - off;
    FUZZ_CHECK(st != ORTMEM_OK || inside, "commit [%zu, +%zu) of %u granules succeeded", off, len,
               m->granules);
    if (st == ORTMEM_OK)
        map_fresh(m, off, len);
}

/* The model of a commit that succeeded: every unmapped granule that
 * [off, off+len) touches gets a new physical granule, tagged. */
static void map_fresh(mregion *m, size_t off, size_t len)
{
    for (size_t g = off / G; g * G < off + len; g++) {
        slot *s = &m->s[g];
        if (s->phys)
            continue;
        FUZZ_CHECK(w.next_phys < MAX_PHYS, "model out of granule numbers");
        s->phys = w.next_phys++;
        s->access = ORTMEM_ACCESS_READ_WRITE;
        w.refs[s->phys] = 1;
        w.owned_granules++;
        w.mapped_granules++;
        uint8_t *p = m->base + g * G;
        for (size_t i = 0; !w.pool && i < G; i += 4096)
            FUZZ_CHECK(p[i] == 0 && p[G - 1] == 0, "fresh granule %zu not zero at %zu", g, i);
        memcpy(p, &s->phys, sizeof s->phys);
    }
}

static void unmap_inside(mregion *m, size_t off, size_t len);

static void op_decommit(input *in)
{
    mregion *m = &w.reg[take(in) % MAX_REGIONS];
    if (!m->r)
        return;
    size_t off, len;
    byte_range(in, m, &off, &len);
    if (seen(ortmem_region_decommit(m->r, off, len)) == ORTMEM_OK)
        unmap_inside(m, off, len);
}

/* The model of a decommit that succeeded: one granule per extent (the
 * default policy), so the mapped granules wholly inside [off, off+len). */
static void unmap_inside(mregion *m, size_t off, size_t len)
{
    for (size_t g = (off + G - 1) / G; (g + 1) * G <= off + len && g < m->granules; g++)
        if (m->s[g].phys)
            unmap_slot(&m->s[g]);
}

/* Two ranges at once: commit_ranges, or decommit_ex (strict or not). */
static void op_ranges(input *in)
{
    mregion *m = &w.reg[take(in) % MAX_REGIONS];
    unsigned what = take(in) % 3;
    if (!m->r)
        return;
    ortmem_range r[2];
    byte_range(in, m, &r[0].offset, &r[0].length);
    byte_range(in, m, &r[1].offset, &r[1].length);
    if (what == 0) {
        if (seen(ortmem_region_commit_ranges(m->r, r, 2)) != ORTMEM_OK)
            return;
        for (int i = 0; i < 2; i++)
            map_fresh(m, r[i].offset, r[i].length);
        return;
    }
    bool strict = what == 2;
    ortmem_status st =
        seen(ortmem_region_decommit_ex(m->r, r, 2, strict ? ORTMEM_DECOMMIT_STRICT : 0));
    if (st != ORTMEM_OK)
        return;
    for (int i = 0; i < 2 && strict; i++) { /* no mapped granule cut at either end */
        size_t lo = r[i].offset, hi = r[i].offset + r[i].length;
        FUZZ_CHECK(lo % G == 0 || lo / G >= m->granules || !m->s[lo / G].phys,
                   "strict decommit cut the granule at %zu", lo / G * G);
        FUZZ_CHECK(hi % G == 0 || hi / G >= m->granules || !m->s[hi / G].phys,
                   "strict decommit cut the granule at %zu", hi / G * G);
    }
    for (int i = 0; i < 2; i++)
        unmap_inside(m, r[i].offset, r[i].length);
}

static const ortmem_access accesses[3] = {ORTMEM_ACCESS_NONE, ORTMEM_ACCESS_READ,
                                          ORTMEM_ACCESS_READ_WRITE};

static void op_share(input *in)
{
    mregion *d = &w.reg[take(in) % MAX_REGIONS];
    mregion *s = &w.reg[take(in) % MAX_REGIONS];
    size_t doff = take(in) % (REGION_GRANULES + 1), soff = take(in) % (REGION_GRANULES + 1);
    size_t n = take(in) % (REGION_GRANULES + 1);
    ortmem_access access = accesses[1 + take(in) % 2];
    if (!d->r || !s->r)
        return;
    if (seen(ortmem_region_share(d->r, doff * G, s->r, soff * G, n * G, access)) != ORTMEM_OK)
        return;
    FUZZ_CHECK(n > 0 && doff + n <= d->granules && soff + n <= s->granules,
               "share of %zu at %zu from %zu succeeded", n, doff, soff);
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(s->s[soff + i].phys && !d->s[doff + i].phys,
                   "share over a mapped or from an unmapped granule succeeded");
        d->s[doff + i].phys = s->s[soff + i].phys;
        d->s[doff + i].access = (uint8_t)access;
        w.refs[d->s[doff + i].phys]++;
        w.mapped_granules++;
    }
}

static void op_protect(input *in)
{
    mregion *m = &w.reg[take(in) % MAX_REGIONS];
    size_t off = take(in) % (REGION_GRANULES + 1), n = take(in) % (REGION_GRANULES + 1);
    ortmem_access access = accesses[take(in) % 3];
    if (!m->r || seen(ortmem_region_protect(m->r, off * G, n * G, access)) != ORTMEM_OK)
        return;
    for (size_t g = off; g < off + n && g < m->granules; g++)
        if (m->s[g].phys)
            m->s[g].access = (uint8_t)access;
}

/* ---- arena ops ---- */

static void op_alloc(input *in)
{
    size_t size = 1 + (size_t)take16(in) * (take(in) % 8 + 1);
    unsigned shift = take(in) % 18;
    size_t align = shift == 17 ? 0 : (size_t)1 << shift;
    void *ptr = NULL;
    if (w.n_allocs == MAX_ALLOCS ||
        seen(ortmem_arena_alloc(w.arena, size, align, &ptr)) != ORTMEM_OK)
        return;
    uint8_t *p = ptr, *lo = ortmem_region_base(ortmem_arena_region(w.arena));
    FUZZ_CHECK(p >= lo && size <= ARENA_BYTES && (size_t)(p - lo) <= ARENA_BYTES - size,
               "allocation %p +%zu outside the arena [%p, +%zu)", ptr, size, (void *)lo,
               ARENA_BYTES);
    FUZZ_CHECK(!align || (uintptr_t)p % align == 0, "%p not aligned to %zu", ptr, align);
    for (size_t i = 0; i < w.n_allocs; i++)
        FUZZ_CHECK(p + size <= w.al[i].ptr || w.al[i].ptr + w.al[i].size <= p,
                   "allocation %p +%zu overlaps %p +%zu", ptr, size, (void *)w.al[i].ptr,
                   w.al[i].size);
    alloc *a = &w.al[w.n_allocs++];
    *a = (alloc){p, size, ++w.next_stamp};
    p[0] = p[size - 1] = a->stamp;
}

static void op_free(input *in)
{
    unsigned pick = take(in);
    if (pick & 0x80) { /* a pointer the arena did not hand out, or one freed */
        uint8_t *lo = ortmem_region_base(ortmem_arena_region(w.arena));
        uint8_t *bogus = lo + (size_t)take16(in) * 31;
        for (size_t i = 0; i < w.n_allocs; i++)
            if (w.al[i].ptr == bogus)
                return;
        ortmem_status st = seen(ortmem_arena_free(w.arena, bogus));
        FUZZ_CHECK(st == ORTMEM_E_NOT_FOUND || st == ORTMEM_E_DOUBLE_FREE,
                   "free of %p not handed out: %s", (void *)bogus, ortmem_status_str(st));
        return;
    }
    if (!w.n_allocs)
        return;
    size_t i = pick % w.n_allocs;
    OK(ortmem_arena_free(w.arena, w.al[i].ptr));
    w.al[i] = w.al[--w.n_allocs];
}

static void op_trim(input *in)
{
    OK(ortmem_arena_trim(w.arena, (size_t)(take(in) % 4) * G));
}

/* ---- grants ---- */

static void op_grant(input *in)
{
    grant *g = &w.gr[take(in) % MAX_GRANTS];
    unsigned what = take(in) % 4;
    uint64_t bytes = (uint64_t)take16(in) * 64;
    if (!g->g) {
        if (what != 3 && seen(ortmem_grant_prepare(w.h_grants, bytes, &g->g)) == ORTMEM_OK)
            g->bytes = bytes;
        else if (what == 3 && bytes <= w.grant_charged &&
                 seen(ortmem_holder_refund(w.h_grants, bytes)) == ORTMEM_OK)
            w.grant_charged -= bytes;
        return;
    }
    if (what == 0) {
        OK(ortmem_grant_abort(g->g));
    } else {
        uint64_t actual = bytes <= g->bytes ? bytes : g->bytes;
        OK(ortmem_grant_charge(g->g, actual));
        w.grant_charged += actual;
    }
    g->g = NULL;
}

static void op_lease(input *in)
{
    ortmem_lease **l = &w.lease[take(in) % 2];
    uint64_t bytes = (uint64_t)take16(in) * 64;
    if (*l) {
        OK(ortmem_lease_drop(*l));
        *l = NULL;
    } else if (seen(ortmem_lease_acquire(w.h_grants, bytes, l)) != ORTMEM_OK) {
        *l = NULL;
    }
}

/* ---- KV sequences ---- */

static void write_tokens(mseq *q, uint64_t from, uint64_t to)
{
    ortmem_kv_binding b = {.struct_size = sizeof b};
    OK(ortmem_kv_seq_binding(q->s, 0, 0, &b));
    volatile uint8_t *base = b.base;
    for (uint64_t t = from; t < to; t++) {
        q->pattern[t] = (uint8_t)(++w.next_stamp | 1);
        base[t * b.token_stride] = q->pattern[t];
    }
}

static void op_kv(input *in)
{
    mseq *q = &w.seq[take(in) % MAX_SEQS];
    unsigned what = take(in) % 5;
    unsigned n = take16(in) % (MAX_CONTEXT + 64);
    if (!q->s) {
        if (seen(ortmem_kv_seq_create(w.kv, &q->s)) == ORTMEM_OK)
            q->len = 0;
        else
            q->s = NULL;
        return;
    }
    ortmem_status st;
    switch (what) {
    case 0: /* append */
        st = seen(ortmem_kv_seq_append(q->s, n % 200 + 1));
        if (q->len + n % 200 + 1 > MAX_CONTEXT)
            FUZZ_CHECK(st == ORTMEM_E_RANGE, "append past max_context: %s", ortmem_status_str(st));
        if (st == ORTMEM_OK) {
            write_tokens(q, q->len, q->len + n % 200 + 1);
            q->len += n % 200 + 1;
        }
        break;
    case 1: /* truncate */
        st = seen(ortmem_kv_seq_truncate(q->s, n));
        if (n > q->len)
            FUZZ_CHECK(st != ORTMEM_OK, "truncate to %u of %llu succeeded", n,
                       (unsigned long long)q->len);
        if (st == ORTMEM_OK)
            q->len = n;
        break;
    case 2: { /* fork into a free slot */
        mseq *c = NULL;
        for (int i = 0; i < MAX_SEQS && !c; i++)
            if (!w.seq[i].s)
                c = &w.seq[i];
        if (c && seen(ortmem_kv_seq_fork(q->s, &c->s)) == ORTMEM_OK) {
            c->len = q->len;
            memcpy(c->pattern, q->pattern, sizeof c->pattern);
        } else if (c) {
            c->s = NULL;
        }
        break;
    }
    default: /* finish */
        OK(ortmem_kv_seq_destroy(q->s));
        q->s = NULL;
        q->len = 0;
    }
}

/* ---- the run ---- */

static void setup(unsigned first)
{
    memset(&w, 0, sizeof w);
    w.next_phys = 1;
    ortmem_cpu_options co = ORTMEM_CPU_OPTIONS_INIT;
    co.granule = G;
    OK(ortmem_cpu_backend_create(&co, &w.backend));
    w.pool = first & 4;
    if (w.pool)
        OK(ortmem_pool_set_cap(w.backend, 4 * G));
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    w.limit = (uint64_t)(8 + first % 56) * G;
    ao.limit_bytes = w.limit;
    OK(ortmem_authority_create(w.backend, &ao, &w.authority));
    ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
    ho.name = "regions";
    ho.priority = 2;
    OK(ortmem_holder_register(w.authority, &ho, &w.h_regions));
    ho.name = "arena";
    ho.role = ORTMEM_ROLE_WORKSPACE;
    ho.priority = 0;
    OK(ortmem_holder_register(w.authority, &ho, &w.h_arena));
    ho.name = "grants";
    ho.role = ORTMEM_ROLE_WEIGHTS;
    ho.priority = 3;
    OK(ortmem_holder_register(w.authority, &ho, &w.h_grants));
    w.a_regions.struct_size = w.a_arena.struct_size = sizeof(ortmem_account);
    OK(ortmem_holder_account(w.h_regions, &w.a_regions));
    OK(ortmem_holder_account(w.h_arena, &w.a_arena));
    ortmem_arena_options aro = ORTMEM_ARENA_OPTIONS_INIT;
    aro.capacity = ARENA_BYTES;
    aro.cache_bytes = (size_t)(first >> 6) * G;
    aro.account = &w.a_arena;
    OK(ortmem_arena_create(w.backend, &aro, &w.arena));
    OK(ortmem_holder_set_pressure(w.h_arena, ortmem_arena_pressure, w.arena));

    ortmem_kv_cache_options ko = ORTMEM_KV_CACHE_OPTIONS_INIT;
    ko.geometry.layers = 2;
    ko.geometry.kv_heads = 2;
    ko.geometry.head_dim = 64;
    ko.geometry.layout = ORTMEM_KV_TOKEN_MAJOR;
    ko.strategy = (first >> 3) % 2 ? ORTMEM_KV_BUCKET : ORTMEM_KV_STABLE;
    ko.max_context = MAX_CONTEXT;
    ko.min_bucket = 64;
    if ((first >> 4) % 2)
        ko.warm_max_bytes = 0;
    OK(ortmem_kv_cache_create(w.authority, &ko, &w.kv));
}

static void teardown(void)
{
    for (int i = 0; i < MAX_SEQS; i++)
        if (w.seq[i].s)
            OK(ortmem_kv_seq_destroy(w.seq[i].s));
    OK(ortmem_kv_cache_destroy(w.kv));
    for (size_t i = 0; i < w.n_allocs; i++)
        OK(ortmem_arena_free(w.arena, w.al[i].ptr));
    OK(ortmem_arena_destroy(w.arena, 0));
    for (int r = 0; r < MAX_REGIONS; r++)
        if (w.reg[r].r)
            OK(ortmem_region_destroy(w.reg[r].r));
    for (int i = 0; i < MAX_GRANTS; i++)
        if (w.gr[i].g)
            OK(ortmem_grant_abort(w.gr[i].g));
    if (w.grant_charged)
        OK(ortmem_holder_refund(w.h_grants, w.grant_charged));
    for (int i = 0; i < 2; i++)
        if (w.lease[i])
            OK(ortmem_lease_drop(w.lease[i]));
    OK(ortmem_holder_unregister(w.h_regions));
    OK(ortmem_holder_unregister(w.h_arena));
    OK(ortmem_holder_unregister(w.h_grants));
    OK(ortmem_authority_destroy(w.authority));
    size_t released;
    OK(ortmem_pool_trim(w.backend, 0, &released)); /* the pool's granules are the backend's */
    ortmem_vmm_stats vs = {.struct_size = sizeof vs};
    OK(ortmem_backend_stats(w.backend, &vs));
    FUZZ_CHECK(vs.owned_bytes == 0 && vs.mapped_bytes == 0 && vs.reserved_va_bytes == 0,
               "after teardown: owned %llu mapped %llu reserved %llu",
               (unsigned long long)vs.owned_bytes, (unsigned long long)vs.mapped_bytes,
               (unsigned long long)vs.reserved_va_bytes);
    OK(ortmem_backend_destroy(w.backend));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    input in = {data, size};
    setup(take(&in));
    for (int ops = 0; ops < MAX_OPS && in.left; ops++) {
        unsigned op = take(&in) % 14;
        sums before = measure();
        w.failed = ORTMEM_OK;
        switch (op) {
        case 0: op_region_create(&in); break;
        case 1: op_region_destroy(&in); break;
        case 2: op_commit(&in); break;
        case 3: op_decommit(&in); break;
        case 4: op_share(&in); break;
        case 5: op_protect(&in); break;
        case 6:
        case 7: op_alloc(&in); break;
        case 8: op_free(&in); break;
        case 9: op_trim(&in); break;
        case 10: op_grant(&in); break;
        case 11: op_ranges(&in); break;
        case 12: op_lease(&in); break;
        default: op_kv(&in); break;
        }
        sums after = measure();
        if (w.failed != ORTMEM_OK) {
            /* A refusal changes nothing; only a budget refusal may have
             * made room first (pressure: the arena's cache, warm ranges, the
             * pool), and the pool moves owned bytes on its own. */
            FUZZ_CHECK(after.arena_allocated == before.arena_allocated &&
                           after.live_tokens == before.live_tokens && after.seqs == before.seqs,
                       "op %u refused (%s) but changed allocations or tokens", op,
                       ortmem_status_str(w.failed));
            if (w.failed != ORTMEM_E_BUDGET && !w.pool)
                FUZZ_CHECK(after.owned == before.owned && after.mapped == before.mapped &&
                               after.ledger_owned == before.ledger_owned,
                           "op %u refused (%s) but owned %llu -> %llu, mapped %llu -> %llu", op,
                           ortmem_status_str(w.failed), (unsigned long long)before.owned,
                           (unsigned long long)after.owned, (unsigned long long)before.mapped,
                           (unsigned long long)after.mapped);
        }
        check_contents();
    }
    teardown();
    return 0;
}
