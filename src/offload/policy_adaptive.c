/* Adaptive: LRU or bimodal insertion, whichever recently hit more bytes
 * (set dueling, after the dynamic insertion policy of processor caches).
 *
 * Two shadow directories (ids and bytes only, no memory) replay every
 * access under the same budget, admitting every miss: one inserts at the
 * most recently used end (LRU), the other at the least recently used end,
 * except every 32nd insertion (bimodal). A hit promotes the tensor in both.
 * Each shadow's hit bytes decay over a window of two passes over the
 * tensors; the real list follows the shadow ahead, and its victim is always
 * its least recently used end. Where recency pays (a tensor read again
 * soon) LRU leads and every miss is admitted at the recent end. Over a
 * fixed order longer than the budget the bimodal side leads: a miss is
 * admitted at the far end only when newcomers (inserted there and not hit
 * since) and free room make room for it, and streams otherwise, so a
 * stable set stays; one miss in 32 is admitted at the recent end instead,
 * which lets that set drift toward what is read now. Sizes count, values
 * do not (docs/memory/OFFLOAD.md, "Adaptive"). */
#include "offload/policy.h"

#include "core/alloc.h"
#include "core/error.h"
#include "offload/policy_list.h"

#define BIMODAL_EVERY 32 /* one in this many goes to the recent end */

enum { SIDE_LRU = 0, SIDE_BIMODAL = 1, SIDES };

typedef struct shadow {
    om_plist list;
    uint64_t resident_bytes;
    double score; /* decayed hit bytes */
} shadow;

typedef struct adaptive_state {
    const uint64_t *bytes;
    uint64_t budget, resident_bytes;
    double decay; /* per access: 1 - 1/window */
    om_plist resident;
    bool *fresh; /* [tensor]: inserted at the far end, not hit since */
    shadow side[SIDES];
    uint64_t insertions[SIDES]; /* bimodal counting, per shadow */
    uint64_t bimodal_misses;    /* the real list's misses while bimodal leads */
    bool drift;                 /* the admission under way goes to the recent end */
} adaptive_state;

static bool bimodal_to_recent(uint64_t *insertions)
{
    return (*insertions)++ % BIMODAL_EVERY == BIMODAL_EVERY - 1;
}

static void insert_as(om_plist *list, int side, uint64_t *insertions, uint32_t tensor)
{
    if (side == SIDE_LRU || bimodal_to_recent(insertions))
        om_plist_push_head(list, tensor);
    else
        om_plist_push_tail(list, tensor);
}

static void adaptive_destroy(void *state)
{
    adaptive_state *s = state;
    om_plist_free(&s->resident);
    for (int k = 0; k < SIDES; k++)
        om_plist_free(&s->side[k].list);
    om_free(s->fresh);
    om_free(s);
}

static ortmem_status adaptive_create(const om_policy_config *config, void **state)
{
    adaptive_state *s = om_calloc(1, sizeof *s);
    bool ok = s && om_plist_init(&s->resident, config->tensors);
    int made = 0;
    while (ok && made < SIDES && om_plist_init(&s->side[made].list, config->tensors))
        made++;
    bool *fresh = ok && made == SIDES ? om_calloc(config->tensors, sizeof *fresh) : NULL;
    if (!fresh) {
        if (ok) {
            om_plist_free(&s->resident);
            while (made-- > 0)
                om_plist_free(&s->side[made].list);
        }
        om_free(s);
        return OM_ERR(ORTMEM_E_NOMEM, "adaptive policy: no memory for %u tensors",
                      (unsigned)config->tensors);
    }
    s->fresh = fresh;
    s->bytes = config->bytes;
    s->budget = config->budget_bytes;
    double window = 2.0 * config->tensors < 64 ? 64 : 2.0 * config->tensors;
    s->decay = 1.0 - 1.0 / window;
    *state = s;
    return ORTMEM_OK;
}

/* One shadow's view of an access: a hit scores the tensor's bytes; a miss
 * admits it, evicting from the least recently used end until it fits. */
static void shadow_access(adaptive_state *s, int k, uint32_t tensor)
{
    shadow *sh = &s->side[k];
    sh->score *= s->decay;
    if (sh->list.in[tensor]) {
        sh->score += (double)s->bytes[tensor];
        om_plist_touch(&sh->list, tensor);
        return;
    }
    while (s->budget - sh->resident_bytes < s->bytes[tensor] && sh->list.tail != OM_POLICY_NONE) {
        uint32_t old = sh->list.tail;
        om_plist_unlink(&sh->list, old);
        sh->resident_bytes -= s->bytes[old];
    }
    if (s->bytes[tensor] <= s->budget - sh->resident_bytes) {
        insert_as(&sh->list, k, &s->insertions[k], tensor);
        sh->resident_bytes += s->bytes[tensor];
    }
}

static int leading_side(const adaptive_state *s)
{
    return s->side[SIDE_BIMODAL].score > s->side[SIDE_LRU].score ? SIDE_BIMODAL : SIDE_LRU;
}

static void adaptive_accessed(void *state, uint32_t tensor, uint64_t pos, bool resident)
{
    (void)pos;
    adaptive_state *s = state;
    for (int k = 0; k < SIDES; k++)
        shadow_access(s, k, tensor);
    if (resident && s->resident.in[tensor]) {
        om_plist_touch(&s->resident, tensor);
        s->fresh[tensor] = false;
    }
}

static bool adaptive_admit(void *state, uint32_t tensor, uint64_t pos)
{
    (void)pos;
    adaptive_state *s = state;
    s->drift = false;
    if (leading_side(s) == SIDE_LRU)
        return true;
    if (s->bimodal_misses++ % BIMODAL_EVERY == BIMODAL_EVERY - 1) {
        s->drift = true;
        return true;
    }
    uint64_t room = s->budget - s->resident_bytes;
    for (uint32_t t = s->resident.tail; room < s->bytes[tensor]; t = s->resident.prev[t]) {
        if (t == OM_POLICY_NONE || !s->fresh[t])
            return false;
        room += s->bytes[t];
    }
    return true;
}

static uint32_t adaptive_victim(void *state, uint64_t pos, om_policy_evictable_fn evictable,
                                void *ctx)
{
    (void)pos;
    adaptive_state *s = state;
    return om_plist_oldest(&s->resident, evictable, ctx);
}

static void adaptive_inserted(void *state, uint32_t tensor)
{
    adaptive_state *s = state;
    if (s->resident.in[tensor])
        return;
    if (leading_side(s) == SIDE_LRU || s->drift)
        om_plist_push_head(&s->resident, tensor);
    else
        om_plist_push_tail(&s->resident, tensor);
    s->drift = false;
    s->fresh[tensor] = s->resident.tail == tensor && s->resident.count > 1;
    s->resident_bytes += s->bytes[tensor];
}

static void adaptive_removed(void *state, uint32_t tensor)
{
    adaptive_state *s = state;
    if (s->resident.in[tensor]) {
        om_plist_unlink(&s->resident, tensor);
        s->fresh[tensor] = false;
        s->resident_bytes -= s->bytes[tensor];
    }
}

const om_policy_ops om_policy_adaptive = {
    .kind = ORTMEM_RESIDENCY_ADAPTIVE,
    .create = adaptive_create,
    .destroy = adaptive_destroy,
    .accessed = adaptive_accessed,
    .admit = adaptive_admit,
    .victim = adaptive_victim,
    .inserted = adaptive_inserted,
    .removed = adaptive_removed,
};
