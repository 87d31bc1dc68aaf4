/* The KV cache: creation, the strategy choice, layout helpers shared by the
 * sequence code, the zero tail and the stats. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "governance/authority.h"
#include "kv/kv.h"

static const char *const om_strategy_names[ORTMEM_KV_STRATEGY_COUNT] = {"stable", "bucket", "auto"};

const char *ortmem_kv_strategy_name(ortmem_kv_strategy s)
{
    return (unsigned)s < ORTMEM_KV_STRATEGY_COUNT ? om_strategy_names[s] : NULL;
}

ortmem_status ortmem_kv_strategy_parse(const char *name, ortmem_kv_strategy *s)
{
    for (unsigned i = 0; name && s && i < ORTMEM_KV_STRATEGY_COUNT; i++) {
        if (strcmp(name, om_strategy_names[i]) == 0) {
            *s = (ortmem_kv_strategy)i;
            return ORTMEM_OK;
        }
    }
    return OM_ERR(ORTMEM_E_INVALID, "unknown strategy '%s' (stable, bucket, auto)",
                  name ? name : "(null)");
}

/* ---- layout helpers ---- */

ortmem_status om_kv_fragment(const ortmem_kv_cache *c, uint64_t cap, uint64_t f, uint64_t *offset,
                             uint64_t *length)
{
    if (c->strategy == ORTMEM_KV_BUCKET)
        return ortmem_kv_fragment_packed(&c->geometry, cap, f, offset, length);
    return ortmem_kv_fragment(&c->geometry, cap, f, offset, length);
}

ortmem_status om_kv_region_create(ortmem_kv_cache *c, uint64_t cap, const ortmem_account *account,
                                  ortmem_region **out)
{
    ortmem_kv_eval e = {.struct_size = sizeof e};
    ortmem_status st = ortmem_kv_evaluate(&c->geometry, 0, cap, 1, 0, 0, &e);
    if (st != ORTMEM_OK)
        return st;
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    /* A bucket is packed: just its bytes, rounded up by the region. */
    opt.size = (size_t)(c->strategy == ORTMEM_KV_BUCKET ? cap * c->bytes_per_token
                                                        : e.sequence_reserved_bytes);
    opt.account = account;
    return ortmem_region_create(c->backend, &opt, out);
}

ortmem_status om_kv_token_ranges(const ortmem_kv_cache *c, uint64_t cap, uint64_t from, uint64_t to,
                                 ortmem_range *ranges)
{
    for (uint64_t f = 0; f < c->fragments; f++) {
        uint64_t off, len;
        ortmem_status st = om_kv_fragment(c, cap, f, &off, &len);
        if (st != ORTMEM_OK)
            return st;
        ranges[f] =
            (ortmem_range){(size_t)(off + from * c->contig), (size_t)((to - from) * c->contig)};
    }
    return ORTMEM_OK;
}

ortmem_status om_kv_live_bytes_per_granule(const ortmem_kv_cache *c, uint64_t cap, uint64_t tokens,
                                           uint64_t *live, size_t granules)
{
    uint64_t g = c->geometry.granule;
    for (uint64_t f = 0; tokens && f < c->fragments; f++) {
        uint64_t off, len;
        ortmem_status st = om_kv_fragment(c, cap, f, &off, &len);
        if (st != ORTMEM_OK)
            return st;
        uint64_t end = off + tokens * c->contig;
        for (uint64_t k = off / g; k < granules && k * g < end; k++) {
            uint64_t lo = k * g > off ? k * g : off;
            uint64_t hi = (k + 1) * g < end ? (k + 1) * g : end;
            live[k] += hi - lo;
        }
    }
    return ORTMEM_OK;
}

/* ---- zero tail ---- */

ortmem_status om_kv_zero_fill(ortmem_kv_cache *c, ortmem_kv_seq *s)
{
    if (!c->zero_tail || !s->region)
        return ORTMEM_OK;
    uint64_t g = c->geometry.granule;
    for (size_t k = 0; k < s->granules; k++) {
        ortmem_granule_info info = {.struct_size = sizeof info};
        ortmem_status st = ortmem_region_granule_info(s->region, k * g, &info);
        if (st != ORTMEM_OK)
            return st;
        if (info.state != ORTMEM_GRANULE_UNMAPPED)
            continue;
        st = ortmem_region_share(s->region, k * g, c->zero, 0, g, ORTMEM_ACCESS_READ);
        s->tail_missing = st != ORTMEM_OK;
        if (st != ORTMEM_OK)
            return om_error_wrap(st, "kv zero tail");
        s->zero_mapped[k] = true;
    }
    s->tail_missing = false;
    return ORTMEM_OK;
}

ortmem_status om_kv_zero_clear(ortmem_kv_cache *c, ortmem_kv_seq *s, uint64_t from, uint64_t to)
{
    if (!c->zero_tail || !s->region || to <= from)
        return ORTMEM_OK;
    uint64_t g = c->geometry.granule;
    ortmem_range *ranges = om_calloc(s->granules ? s->granules : 1, sizeof *ranges);
    uint64_t *live = om_calloc(s->granules ? s->granules : 1, sizeof *live);
    ortmem_status st = ranges && live ? ORTMEM_OK : OM_ERR(ORTMEM_E_NOMEM, "kv zero tail");
    /* The granules tokens [from, to) will land in: live for `to` tokens. */
    if (st == ORTMEM_OK)
        st = om_kv_live_bytes_per_granule(c, s->capacity, to, live, s->granules);
    size_t n = 0;
    for (size_t k = 0; st == ORTMEM_OK && k < s->granules; k++) {
        if (live[k] && s->zero_mapped[k])
            ranges[n++] = (ortmem_range){k * g, g};
    }
    if (st == ORTMEM_OK && n)
        st = ortmem_region_decommit_ranges(s->region, ranges, n);
    for (size_t i = 0; (st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED) && i < n; i++)
        s->zero_mapped[ranges[i].offset / g] = false;
    om_free(ranges);
    om_free(live);
    return st;
}

/* ---- the strategy ---- */

static void om_choose(ortmem_kv_cache *c, const ortmem_kv_cache_options *o)
{
    uint64_t expected = o->expected_tokens ? o->expected_tokens : c->max_context / 4;
    if (expected > c->max_context)
        expected = c->max_context;
    ortmem_kv_eval e = {.struct_size = sizeof e};
    (void)ortmem_kv_evaluate(&c->geometry, expected, c->max_context, 1, 0, c->min_bucket, &e);
    const char *layout = ortmem_kv_layout_name(c->geometry.layout);
    if (o->strategy != ORTMEM_KV_AUTO) {
        c->strategy = o->strategy;
        snprintf(c->reason, sizeof c->reason, "%s was asked for%s", om_strategy_names[o->strategy],
                 o->strategy == ORTMEM_KV_BUCKET && o->graph_capture
                     ? "; graph capture is wanted, so every bucket growth (a new generation) "
                       "invalidates the graphs that hold the old pointers"
                     : "");
        return;
    }
    if (o->graph_capture) {
        c->strategy = ORTMEM_KV_STABLE;
        snprintf(c->reason, sizeof c->reason,
                 "stable: graph capture is wanted and captured graphs hold the binding pointers, "
                 "which bucket growth would move; the full context of %llu tokens is reserved as "
                 "VA and %llu bytes are committed for %llu typical tokens",
                 (unsigned long long)c->max_context, (unsigned long long)e.committed_bytes,
                 (unsigned long long)expected);
    } else if (expected >= e.crossover_tokens) {
        c->strategy = ORTMEM_KV_STABLE;
        snprintf(c->reason, sizeof c->reason,
                 "stable: typical sequences of %llu tokens reach the crossover of %llu tokens "
                 "(%s, %llu contiguous bytes per token per fragment, granule %llu): a stable range "
                 "commits %llu bytes for them against %llu for a %llu-token bucket",
                 (unsigned long long)expected, (unsigned long long)e.crossover_tokens, layout,
                 (unsigned long long)c->contig, (unsigned long long)c->geometry.granule,
                 (unsigned long long)e.committed_bytes,
                 (unsigned long long)e.bucket_committed_bytes, (unsigned long long)e.bucket_tokens);
    } else {
        c->strategy = ORTMEM_KV_BUCKET;
        snprintf(c->reason, sizeof c->reason,
                 "bucket: typical sequences of %llu tokens stay below the crossover of %llu tokens "
                 "(%s, %llu contiguous bytes per token per fragment, granule %llu): a stable range "
                 "would commit %llu bytes for them against %llu for a %llu-token bucket, and "
                 "no graph capture needs fixed pointers",
                 (unsigned long long)expected, (unsigned long long)e.crossover_tokens, layout,
                 (unsigned long long)c->contig, (unsigned long long)c->geometry.granule,
                 (unsigned long long)e.committed_bytes,
                 (unsigned long long)e.bucket_committed_bytes, (unsigned long long)e.bucket_tokens);
    }
}

/* ---- lifetime ---- */

/* Zeroes memory the host may not touch (device memory): a memset on the
 * default stream, waited for through an event. A pooled granule keeps its old
 * bytes, so the zero granule is zeroed explicitly. */
static ortmem_status om_zero_granule(ortmem_backend *backend, void *base, size_t len)
{
    ortmem_status st = ortmem_backend_memset_async(backend, base, 0, len, 0);
    return st == ORTMEM_OK ? om_kv_stream_wait(backend, 0) : st;
}

static ortmem_status om_register_holder(ortmem_kv_cache *c, const char *name, int priority,
                                        ortmem_pressure_fn fn, ortmem_holder **h,
                                        ortmem_account *account)
{
    ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
    ho.name = name;
    ho.role = ORTMEM_ROLE_KV;
    ho.priority = priority;
    ho.on_pressure = fn;
    ho.user = c;
    ortmem_status st = ortmem_holder_register(c->authority, &ho, h);
    if (st == ORTMEM_OK)
        st = ortmem_holder_account(*h, account);
    return st;
}

/* ORTMEM_E_QUARANTINED when the zero granule was quarantined. */
static ortmem_status om_cache_free(ortmem_kv_cache *c)
{
    ortmem_status st = c->zero ? ortmem_region_destroy(c->zero) : ORTMEM_OK;
    om_error_saved failure;
    om_error_save(&failure);
    if (c->warm_holder)
        (void)ortmem_holder_unregister(c->warm_holder);
    if (c->prefix_holder)
        (void)ortmem_holder_unregister(c->prefix_holder);
    if (c->holder)
        (void)ortmem_holder_unregister(c->holder);
    pthread_mutex_destroy(&c->lock);
    om_free(c);
    return st == ORTMEM_OK ? st : om_error_restore(&failure, st);
}

ortmem_status ortmem_kv_cache_create(ortmem_authority *authority,
                                     const ortmem_kv_cache_options *options, ortmem_kv_cache **out)
{
    om_error_clear();
    if (!options || !out)
        return OM_ERR(ORTMEM_E_INVALID, "kv cache create: options or out is NULL");
    ortmem_status st = OM_STRUCT_CHECK("kv cache create", "options", options);
    if (st != ORTMEM_OK)
        return st;
    ortmem_kv_cache_options o = ORTMEM_KV_CACHE_OPTIONS_INIT;
    memcpy(&o, options, options->struct_size);
    if ((unsigned)o.strategy >= ORTMEM_KV_STRATEGY_COUNT)
        return OM_ERR(ORTMEM_E_INVALID, "kv cache create: unknown strategy %d", (int)o.strategy);
    if (o.max_context == 0)
        return OM_ERR(ORTMEM_E_INVALID, "kv cache create: max_context is 0");
    ortmem_backend *backend = ortmem_authority_backend(authority);
    if (!backend)
        return OM_ERR(ORTMEM_E_HANDLE, "kv cache create: %p is not a live authority",
                      (void *)authority);
    size_t granule = 0;
    st = ortmem_backend_granule(backend, &granule);
    if (st != ORTMEM_OK)
        return st;
    if (o.geometry.granule == 0)
        o.geometry.granule = granule;
    if (o.geometry.granule != granule)
        return OM_ERR(ORTMEM_E_INVALID,
                      "kv cache create: geometry granule %llu differs from the backend's %zu",
                      (unsigned long long)o.geometry.granule, granule);
    st = ortmem_kv_geometry_check(&o.geometry);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "kv cache create");
    ortmem_kv_eval e = {.struct_size = sizeof e};
    st = ortmem_kv_evaluate(&o.geometry, 0, o.max_context, 1, 0, o.min_bucket, &e);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "kv cache create");
    /* o started from the INIT values: an older, shorter options struct gets
     * the default policy. */
    uint64_t bound = 0;
    st = om_kv_overcommit_bound(&o.geometry, &o.extents, o.max_context, &bound);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "kv cache create: extent policy");
    ortmem_kv_cache *c = om_calloc(1, sizeof *c);
    if (!c)
        return OM_ERR(ORTMEM_E_NOMEM, "kv cache create: bookkeeping");
    pthread_mutex_init(&c->lock, NULL);
    c->authority = authority;
    c->backend = backend;
    c->geometry = o.geometry;
    c->bytes_per_token = e.bytes_per_token;
    c->fragments = e.fragments;
    c->contig = e.contiguous_bytes_per_token;
    c->max_context = o.max_context;
    c->min_bucket = o.min_bucket ? o.min_bucket : 256;
    c->max_sequences = o.max_sequences;
    c->zero_tail = o.zero_tail != 0;
    c->host_backend = o.host_backend;
    c->stream = o.stream;
    c->extents = o.extents;
    c->overcommit_bound = bound;
    om_choose(c, &o);
    c->prefix_cache = o.prefix_cache && c->strategy == ORTMEM_KV_STABLE;
    if (o.prefix_cache && !c->prefix_cache)
        st = OM_ERR(ORTMEM_E_UNSUPPORTED,
                    "kv cache create: the prefix cache needs the stable strategy (a bucket "
                    "sequence's layout changes with its bucket); %s",
                    c->reason);
    if (st == ORTMEM_OK && c->zero_tail && c->strategy != ORTMEM_KV_STABLE)
        st = OM_ERR(ORTMEM_E_UNSUPPORTED,
                    "kv cache create: the zero tail needs the stable strategy (a bucket is "
                    "committed whole); %s",
                    c->reason);
    /* Prefix sharing and the zero tail work on whole granules of one
     * fragment: every fragment must start on a granule. */
    for (uint64_t f = 0; st == ORTMEM_OK && (c->prefix_cache || c->zero_tail) && f < c->fragments;
         f++) {
        uint64_t off, len;
        st = om_kv_fragment(c, c->max_context, f, &off, &len);
        if (st == ORTMEM_OK && off % granule)
            st = OM_ERR(ORTMEM_E_UNSUPPORTED,
                        "kv cache create: fragment %llu starts at byte %llu, not on a granule of "
                        "%zu (max_context %llu * %llu contiguous bytes); the prefix cache and the "
                        "zero tail need granule-aligned fragments",
                        (unsigned long long)f, (unsigned long long)off, granule,
                        (unsigned long long)c->max_context, (unsigned long long)c->contig);
    }
    if (st == ORTMEM_OK)
        st = om_register_holder(c, "kv", o.priority, NULL, &c->holder, &c->account);
    /* Warm ranges: asked under pressure after the pool, before kv-prefix
     * (a warm range of a prefix holds that entry). */
    c->warm_max_bytes = o.warm_max_bytes;
    c->warm_max_ranges = o.warm_max_ranges ? o.warm_max_ranges
                         : o.max_sequences ? o.max_sequences
                                           : 64;
    if (st == ORTMEM_OK && c->strategy == ORTMEM_KV_STABLE && c->warm_max_bytes)
        st = om_register_holder(c, "kv-warm", o.priority - 2, om_warm_pressure, &c->warm_holder,
                                &c->warm_account);
    if (st == ORTMEM_OK && c->prefix_cache)
        st = om_register_holder(c, "kv-prefix", o.priority - 1, om_prefix_pressure,
                                &c->prefix_holder, &c->prefix_account);
    if (st == ORTMEM_OK && c->zero_tail) {
        ortmem_region_options ro = ORTMEM_REGION_OPTIONS_INIT;
        ro.size = granule;
        ro.account = &c->account;
        st = ortmem_region_create(backend, &ro, &c->zero);
        if (st == ORTMEM_OK)
            st = ortmem_region_commit(c->zero, 0, granule);
        if (st == ORTMEM_OK)
            st = om_zero_granule(backend, ortmem_region_base(c->zero), granule);
        if (st == ORTMEM_OK)
            st = ortmem_region_protect(c->zero, 0, granule, ORTMEM_ACCESS_READ);
    }
    if (st == ORTMEM_OK)
        st = om_handle_register(&c->hdr, OM_KIND_KV_CACHE);
    if (st != ORTMEM_OK) {
        om_error_saved failure;
        om_error_save(&failure);
        (void)om_cache_free(c);
        return om_error_restore(&failure, st);
    }
    *out = c;
    return ORTMEM_OK;
}

ortmem_status ortmem_kv_cache_destroy(ortmem_kv_cache *c)
{
    om_error_clear();
    ortmem_status st = om_handle_pin(c, OM_KIND_KV_CACHE, "kv cache destroy");
    if (st != ORTMEM_OK)
        return st;
    pthread_mutex_lock(&c->lock);
    uint64_t live = c->seq_count;
    pthread_mutex_unlock(&c->lock);
    if (live) {
        om_handle_unpin(&c->hdr);
        return OM_ERR(ORTMEM_E_BUSY, "kv cache destroy: %llu sequences still live",
                      (unsigned long long)live);
    }
    /* The pressure callbacks name c: none may run on it once it is freed. */
    ortmem_holder *reclaimable[2] = {c->warm_holder, c->prefix_holder};
    bool quiet[2] = {false, false};
    for (size_t i = 0; st == ORTMEM_OK && i < 2; i++) {
        if (reclaimable[i])
            st = om_holder_quiesce(reclaimable[i], "kv cache destroy");
        quiet[i] = reclaimable[i] && st == ORTMEM_OK;
    }
    if (st == ORTMEM_OK)
        st = om_handle_retire(&c->hdr, "kv cache destroy");
    if (st != ORTMEM_OK) {
        for (size_t i = 0; i < 2; i++)
            if (quiet[i])
                om_holder_unquiesce(reclaimable[i]);
        om_handle_unpin(&c->hdr);
        return st;
    }
    /* Gone either way; a quarantine on the way is reported. Warm ranges go
     * first: they hold prefix entries. */
    st = om_warm_free_all(c);
    ortmem_status pst = om_prefix_free_all(c);
    st = st == ORTMEM_OK ? pst : st;
    om_error_saved failure;
    om_error_save(&failure);
    ortmem_status fst = om_cache_free(c);
    om_handle_end_destroy();
    if (st != ORTMEM_OK)
        return ortmem_error_set(st, "kv cache destroy: %s", failure.detail);
    return fst;
}

static const char *om_growth_name(ortmem_extent_growth growth)
{
    return growth == ORTMEM_EXTENT_GRANULE ? "granule"
           : growth == ORTMEM_EXTENT_EXACT ? "exact"
                                           : "geometric";
}

#define OM_EXPLAIN_STEP 1024 /* tokens per append in the modelled growth (the GPU bench's) */

/* "<name> E extents: C create + M map + S set-access, teardown U unmap + R release" */
static int om_explain_cost(char *out, size_t capacity, const char *name,
                           const ortmem_kv_growth_cost *k)
{
    return snprintf(out, capacity,
                    "%s %llu extents: %llu create + %llu map + %llu set-access, teardown %llu "
                    "unmap + %llu release, over-commit at most %llu bytes, largest extent %llu "
                    "bytes",
                    name, (unsigned long long)k->extents, (unsigned long long)k->calls_create,
                    (unsigned long long)k->calls_map, (unsigned long long)k->calls_set_access,
                    (unsigned long long)k->calls_unmap, (unsigned long long)k->calls_release,
                    (unsigned long long)k->overcommit_max_bytes,
                    (unsigned long long)k->largest_extent_bytes);
}

/* Appends the extent policy, the over-commit bound with its numbers and the
 * modelled growth cost to max_context under the policy and per granule. */
static void om_explain_growth(ortmem_kv_cache *c, char *out, size_t capacity)
{
    uint64_t cap = 0, g = c->geometry.granule;
    (void)ortmem_extent_cap_granules(&c->extents, (size_t)g, &cap); /* checked at create */
    if (c->strategy != ORTMEM_KV_STABLE) {
        snprintf(out, capacity,
                 ". Extent policy %s: it applies to stable growth; bucket sequences commit "
                 "whole buckets",
                 om_growth_name(c->extents.growth));
        return;
    }
    int n =
        snprintf(out, capacity,
                 ". Stable growth: extent policy %s, largest extent %llu granules of %llu "
                 "bytes; appends commit the extents it lays per fragment, an append inside "
                 "committed extents makes no backend call. Over-commit bound: committed - live "
                 "<= %llu bytes "
                 "per stable sequence (%llu fragments, each at most its largest extent, plus "
                 "a granule per fragment base off the granule)%s",
                 om_growth_name(c->extents.growth), (unsigned long long)cap, (unsigned long long)g,
                 (unsigned long long)c->overcommit_bound, (unsigned long long)c->fragments,
                 c->zero_tail ? ", plus the zero granule once per cache" : "");
    if (n < 0 || (size_t)n >= capacity)
        return;
    out += n;
    capacity -= (size_t)n;
    ortmem_extent_policy granule = {sizeof granule, ORTMEM_EXTENT_GRANULE, 0};
    ortmem_kv_growth_cost policy_cost = {.struct_size = sizeof policy_cost};
    ortmem_kv_growth_cost granule_cost = {.struct_size = sizeof granule_cost};
    uint64_t step = c->max_context < OM_EXPLAIN_STEP ? c->max_context : OM_EXPLAIN_STEP;
    if (ortmem_kv_growth_evaluate(&c->geometry, &c->extents, c->max_context, step, step,
                                  c->max_context, &policy_cost) != ORTMEM_OK ||
        ortmem_kv_growth_evaluate(&c->geometry, &granule, c->max_context, step, step,
                                  c->max_context, &granule_cost) != ORTMEM_OK) {
        snprintf(out, capacity, ". Growth cost not modelled: %s", ortmem_last_error());
        om_error_clear();
        return;
    }
    n = snprintf(out, capacity, ". Growth 0 -> %llu tokens in appends of %llu (modelled): ",
                 (unsigned long long)c->max_context, (unsigned long long)step);
    if (n < 0 || (size_t)n >= capacity)
        return;
    out += n;
    capacity -= (size_t)n;
    n = om_explain_cost(out, capacity, om_growth_name(c->extents.growth), &policy_cost);
    if (n < 0 || (size_t)n >= capacity)
        return;
    out += n;
    capacity -= (size_t)n;
    n = snprintf(out, capacity, "; ");
    if (n < 0 || (size_t)n >= capacity)
        return;
    (void)om_explain_cost(out + n, capacity - (size_t)n, "per granule", &granule_cost);
}

/* Appends the warm-range settings. */
static void om_explain_warm(ortmem_kv_cache *c, char *out, size_t capacity)
{
    if (!c->warm_holder) {
        snprintf(out, capacity, ". Warm ranges: off (%s)",
                 c->strategy != ORTMEM_KV_STABLE ? "bucket sequences are not kept"
                                                 : "warm_max_bytes is 0");
        return;
    }
    char bytes[64] = "unlimited bytes (bounded by the budget through pressure)";
    if (c->warm_max_bytes != ORTMEM_KV_WARM_UNLIMITED)
        snprintf(bytes, sizeof bytes, "%llu bytes", (unsigned long long)c->warm_max_bytes);
    snprintf(out, capacity,
             ". Warm ranges: on, at most %llu ranges and %s, cleared at finish (private granules "
             "zeroed on the cache stream), taken with no backend call; holder kv-warm releases "
             "them oldest first under pressure",
             (unsigned long long)c->warm_max_ranges, bytes);
}

ortmem_status ortmem_kv_cache_explain(ortmem_kv_cache *c, ortmem_kv_strategy *strategy,
                                      char *buffer, size_t capacity)
{
    om_error_clear();
    ortmem_status st = om_handle_pin(c, OM_KIND_KV_CACHE, "kv cache explain");
    if (st != ORTMEM_OK)
        return st;
    if (strategy)
        *strategy = c->strategy;
    if (buffer && capacity) {
        int n = snprintf(buffer, capacity, "%s", c->reason);
        if (n >= 0 && (size_t)n < capacity)
            om_explain_growth(c, buffer + n, capacity - (size_t)n);
        size_t used = strlen(buffer);
        if (used + 1 < capacity)
            om_explain_warm(c, buffer + used, capacity - used);
    }
    om_handle_unpin(&c->hdr);
    return ORTMEM_OK;
}

/* ---- stats ---- */

static void om_add_holder(ortmem_holder *h, ortmem_kv_stats *s)
{
    ortmem_holder_report r;
    if (h && ortmem_holder_report_get(h, &r) == ORTMEM_OK) {
        s->committed_bytes += r.owned_bytes;
        s->mapped_bytes += r.mapped_bytes;
    }
}

ortmem_status ortmem_kv_cache_stats(ortmem_kv_cache *c, ortmem_kv_stats *stats)
{
    om_error_clear();
    ortmem_status st = OM_STRUCT_CHECK("kv cache stats", "stats", stats);
    if (st != ORTMEM_OK)
        return st;
    st = om_handle_pin(c, OM_KIND_KV_CACHE, "kv cache stats");
    if (st != ORTMEM_OK)
        return st;
    ortmem_kv_stats s;
    memset(&s, 0, sizeof s);
    uint64_t g = c->geometry.granule;
    /* Pin the sequences under the cache lock, then read each under its own
     * lock (sequence before cache is the lock order). */
    pthread_mutex_lock(&c->lock);
    size_t n = 0;
    ortmem_kv_seq **seqs = om_malloc((c->seq_count ? c->seq_count : 1) * sizeof *seqs);
    if (!seqs) {
        /* Without the list the sums would silently miss every sequence. */
        size_t count = (size_t)c->seq_count;
        pthread_mutex_unlock(&c->lock);
        om_handle_unpin(&c->hdr);
        return OM_ERR(ORTMEM_E_NOMEM, "kv cache stats: list of %zu sequences", count);
    }
    for (ortmem_kv_seq *q = c->seqs; q; q = q->next) {
        if (om_handle_pin(q, OM_KIND_KV_SEQ, "kv cache stats") == ORTMEM_OK)
            seqs[n++] = q;
    }
    s.sequences = c->seq_count;
    s.growth_copied_bytes = c->growth_copied;
    s.cow_copied_bytes = c->cow_copied;
    s.generations_bumped = c->generations;
    s.prefix_entries = c->prefix_count;
    s.prefix_hits = c->prefix_hits;
    s.prefix_tokens_reused = c->prefix_tokens;
    s.prefix_bytes_saved = c->prefix_saved;
    s.prefix_evicted = c->prefix_evicted;
    s.swaps_out = c->swaps_out;
    s.swaps_in = c->swaps_in;
    s.warm_ranges = c->warm_count;
    s.warm_bytes = c->warm_bytes;
    s.warm_hits = c->warm_hits;
    s.warm_misses = c->warm_misses;
    s.warm_reclaimed_bytes = c->warm_reclaimed;
    s.warm_cleared_bytes = c->warm_cleared;
    s.warm_prewarmed = c->warm_prewarmed;
    pthread_mutex_unlock(&c->lock);
    for (size_t i = 0; i < n; i++) {
        ortmem_kv_seq *q = seqs[i];
        pthread_mutex_lock(&q->lock);
        s.live_tokens += q->length;
        if (q->region && !q->host) {
            s.reserved_va_bytes += ortmem_region_size(q->region);
            uint64_t mapped = 0; /* granules holding the sequence's bytes (not the zero tail) */
            for (size_t k = 0; k < q->granules; k++) {
                ortmem_granule_info info = {.struct_size = sizeof info};
                if (q->zero_mapped[k])
                    s.zero_tail_mapped_bytes += g;
                else if (ortmem_region_granule_info(q->region, k * g, &info) == ORTMEM_OK &&
                         info.state == ORTMEM_GRANULE_MAPPED) {
                    mapped++;
                    s.shared_granules += info.mappers > 1;
                }
            }
            uint64_t live = q->length * c->bytes_per_token, bound = c->overcommit_bound;
            if (c->strategy == ORTMEM_KV_STABLE) {
                if (q->capacity != c->max_context)
                    (void)om_kv_overcommit_bound(&c->geometry, &c->extents, q->capacity, &bound);
                s.overcommit_bytes += mapped * g > live ? mapped * g - live : 0;
                s.overcommit_bound_bytes += bound;
            }
        }
        pthread_mutex_unlock(&q->lock);
        om_handle_unpin(&q->hdr);
    }
    om_free(seqs);
    s.live_bytes = s.live_tokens * c->bytes_per_token;
    om_add_holder(c->holder, &s);
    om_add_holder(c->prefix_holder, &s);
    om_add_holder(c->warm_holder, &s);
    s.committed_granules = s.committed_bytes / g;
    if (c->zero) { /* the zero granule holds no live byte */
        s.overcommit_bytes += g;
        s.overcommit_bound_bytes += g;
    }
    s.struct_size = stats->struct_size;
    memcpy(stats, &s, stats->struct_size);
    om_handle_unpin(&c->hdr);
    return ORTMEM_OK;
}
