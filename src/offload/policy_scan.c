/* Scan-resistant: a stable subset that fits the budget stays resident, the
 * rest streams through the cache's ring slots. The subset is decided from
 * the accesses as they come: a missed tensor is admitted while the stable
 * set has room for it, or in place of members that are worth less per byte
 * of budget (value / size: a tensor's own bytes per granule-rounded byte),
 * lowest first, when those alone make room; otherwise it streams, and
 * nothing is evicted for it. Over decode's fixed order the subset settles
 * within the first step to the densest tensors that fit (first fit among
 * equals) and then never changes: each step hits the subset's bytes and
 * streams the rest (docs/memory/OFFLOAD.md, "Scan-resistant"). */
#include "offload/policy.h"

#include "core/alloc.h"
#include "core/error.h"
#include "offload/policy_list.h"

typedef struct scan_state {
    const uint64_t *bytes, *value;
    uint64_t budget, resident_bytes;
    om_plist stable; /* head: the most recently admitted */
} scan_state;

static ortmem_status scan_create(const om_policy_config *config, void **state)
{
    scan_state *s = om_calloc(1, sizeof *s);
    if (!s || !om_plist_init(&s->stable, config->tensors)) {
        om_free(s);
        return OM_ERR(ORTMEM_E_NOMEM, "scan-resistant policy: no memory for %u tensors",
                      (unsigned)config->tensors);
    }
    s->bytes = config->bytes;
    s->value = config->value ? config->value : config->bytes;
    s->budget = config->budget_bytes;
    *state = s;
    return ORTMEM_OK;
}

static void scan_destroy(void *state)
{
    scan_state *s = state;
    om_plist_free(&s->stable);
    om_free(s);
}

static void scan_accessed(void *state, uint32_t tensor, uint64_t pos, bool resident)
{
    (void)state, (void)tensor, (void)pos, (void)resident;
}

/* Whether a is worth less per byte of budget than b (exact: value <= size
 * < 2^64, compared as 128-bit products). */
static bool denser(const scan_state *s, uint32_t a, uint32_t b)
{
    return (unsigned __int128)s->value[a] * s->bytes[b] >
           (unsigned __int128)s->value[b] * s->bytes[a];
}

/* The least dense member for which evictable says true; among equals the
 * one admitted last, so the longest-held part of the subset stays. */
static uint32_t least_dense(const scan_state *s, om_policy_evictable_fn evictable, void *ctx)
{
    uint32_t best = OM_POLICY_NONE;
    for (uint32_t t = s->stable.head; t != OM_POLICY_NONE; t = s->stable.next[t]) {
        if (evictable && !evictable(ctx, t))
            continue;
        if (best == OM_POLICY_NONE || denser(s, best, t))
            best = t;
    }
    return best;
}

static bool scan_admit(void *state, uint32_t tensor, uint64_t pos)
{
    (void)pos;
    scan_state *s = state;
    uint64_t room = s->budget - s->resident_bytes;
    for (uint32_t t = s->stable.head; t != OM_POLICY_NONE && room < s->bytes[tensor];
         t = s->stable.next[t])
        if (denser(s, tensor, t))
            room += s->bytes[t];
    return room >= s->bytes[tensor];
}

/* Asked when the cache needs room: for an admission, the members worth
 * least go first; under pressure too. */
static uint32_t scan_victim(void *state, uint64_t pos, om_policy_evictable_fn evictable, void *ctx)
{
    (void)pos;
    return least_dense(state, evictable, ctx);
}

static void scan_inserted(void *state, uint32_t tensor)
{
    scan_state *s = state;
    if (!s->stable.in[tensor]) {
        om_plist_push_head(&s->stable, tensor);
        s->resident_bytes += s->bytes[tensor];
    }
}

static void scan_removed(void *state, uint32_t tensor)
{
    scan_state *s = state;
    if (s->stable.in[tensor]) {
        om_plist_unlink(&s->stable, tensor);
        s->resident_bytes -= s->bytes[tensor];
    }
}

const om_policy_ops om_policy_scan_resistant = {
    .kind = ORTMEM_RESIDENCY_SCAN_RESISTANT,
    .create = scan_create,
    .destroy = scan_destroy,
    .accessed = scan_accessed,
    .admit = scan_admit,
    .victim = scan_victim,
    .inserted = scan_inserted,
    .removed = scan_removed,
};
