/* LRU: admit every miss, evict the least recently used resident tensor.
 * Over decode's fixed order it evicts exactly the tensor needed next once
 * the weights exceed the budget (docs/memory/OFFLOAD.md, "LRU"); it is here
 * as the baseline every cache is compared with. */
#include "offload/policy.h"

#include "core/alloc.h"
#include "core/error.h"
#include "offload/policy_list.h"

typedef struct lru_state {
    om_plist resident; /* head: most recently used */
} lru_state;

static ortmem_status lru_create(const om_policy_config *config, void **state)
{
    lru_state *s = om_calloc(1, sizeof *s);
    if (!s || !om_plist_init(&s->resident, config->tensors)) {
        om_free(s);
        return OM_ERR(ORTMEM_E_NOMEM, "lru policy: no memory for %u tensors",
                      (unsigned)config->tensors);
    }
    *state = s;
    return ORTMEM_OK;
}

static void lru_destroy(void *state)
{
    lru_state *s = state;
    om_plist_free(&s->resident);
    om_free(s);
}

static void lru_accessed(void *state, uint32_t tensor, uint64_t pos, bool resident)
{
    (void)pos;
    lru_state *s = state;
    if (resident && s->resident.in[tensor])
        om_plist_touch(&s->resident, tensor);
}

static bool lru_admit(void *state, uint32_t tensor, uint64_t pos)
{
    (void)state, (void)tensor, (void)pos;
    return true;
}

static uint32_t lru_victim(void *state, uint64_t pos, om_policy_evictable_fn evictable, void *ctx)
{
    (void)pos;
    lru_state *s = state;
    return om_plist_oldest(&s->resident, evictable, ctx);
}

static void lru_inserted(void *state, uint32_t tensor)
{
    lru_state *s = state;
    om_plist_touch(&s->resident, tensor);
}

static void lru_removed(void *state, uint32_t tensor)
{
    lru_state *s = state;
    if (s->resident.in[tensor])
        om_plist_unlink(&s->resident, tensor);
}

const om_policy_ops om_policy_lru = {
    .kind = ORTMEM_RESIDENCY_LRU,
    .create = lru_create,
    .destroy = lru_destroy,
    .accessed = lru_accessed,
    .admit = lru_admit,
    .victim = lru_victim,
    .inserted = lru_inserted,
    .removed = lru_removed,
};
