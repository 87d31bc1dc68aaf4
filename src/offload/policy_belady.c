/* Belady: the oracle reference. With the whole access stream known, a miss
 * compares next uses. Each resident tensor is ranked by what keeping it is
 * worth: the bytes its next hit saves (value) per byte of budget it holds
 * (size) per access until that hit (distance), value / (size * distance);
 * never used again ranks 0. The victims are taken lowest rank first until
 * the missed tensor fits, and the missed tensor is admitted only when its
 * own rank beats every one of those victims'; otherwise it streams
 * (bypass) and nothing is evicted. A tensor that fits in free room is
 * always admitted.
 *
 * When every tensor's value equals its size and the sizes are equal, the
 * rank is 1 / distance: evict the farthest next use, bypass a tensor used
 * later than every victim. That is Belady's MIN with bypass, the optimum.
 * With sizes or values that differ, minimising missed bytes is NP-hard in
 * general; this ranking is then a strong heuristic bound, not a proven one
 * (docs/memory/OFFLOAD.md, "Belady"). */
#include "offload/policy.h"

#include <stdlib.h>

#include "core/alloc.h"
#include "core/error.h"

#define NEVER UINT64_MAX

typedef struct use_rank {
    double rank; /* value / (size * distance); 0: never used again */
    uint64_t bytes;
    uint32_t tensor;
} use_rank;

typedef struct belady_state {
    const uint64_t *bytes, *value;
    uint64_t budget, resident_bytes;
    const uint32_t *future;
    uint64_t future_len;
    uint64_t *next_after; /* [pos]: the next position of future[pos]'s tensor, or NEVER */
    uint64_t *next_use;   /* [tensor]: its next use after its last access, or NEVER */
    uint32_t *resident;   /* the resident tensors, unordered */
    uint32_t *slot;       /* [tensor]: its index in resident, or OM_POLICY_NONE */
    uint32_t resident_count;
    use_rank *scratch; /* admit's ranking */
    bool by_density;   /* the victims admit counted on: lowest density first */
} belady_state;

static void belady_destroy(void *state)
{
    belady_state *s = state;
    om_free(s->next_after);
    om_free(s->next_use);
    om_free(s->resident);
    om_free(s->slot);
    om_free(s->scratch);
    om_free(s);
}

static ortmem_status belady_create(const om_policy_config *config, void **state)
{
    if (!config->future && config->future_len)
        return OM_ERR(ORTMEM_E_INVALID, "belady policy: future_len %llu without a future",
                      (unsigned long long)config->future_len);
    uint32_t n = config->tensors;
    belady_state *s = om_calloc(1, sizeof *s);
    bool ok = s != NULL;
    if (ok && config->future_len > SIZE_MAX / sizeof(uint64_t))
        ok = false;
    if (ok) {
        s->next_after = om_malloc((config->future_len ? config->future_len : 1) * sizeof(uint64_t));
        s->next_use = om_malloc(n * sizeof *s->next_use);
        s->resident = om_malloc(n * sizeof *s->resident);
        s->slot = om_malloc(n * sizeof *s->slot);
        s->scratch = om_malloc(n * sizeof *s->scratch);
        ok = s->next_after && s->next_use && s->resident && s->slot && s->scratch;
    }
    if (!ok) {
        if (s)
            belady_destroy(s);
        return OM_ERR(ORTMEM_E_NOMEM, "belady policy: no memory for %u tensors over %llu accesses",
                      (unsigned)n, (unsigned long long)config->future_len);
    }
    s->bytes = config->bytes;
    s->value = config->value ? config->value : config->bytes;
    s->budget = config->budget_bytes;
    s->future = config->future;
    s->future_len = config->future_len;
    /* next_use doubles as "last position seen" while walking back. */
    for (uint32_t t = 0; t < n; t++) {
        s->next_use[t] = NEVER;
        s->slot[t] = OM_POLICY_NONE;
    }
    for (uint64_t pos = s->future_len; pos-- > 0;) {
        uint32_t t = s->future[pos];
        if (t >= n) {
            s->next_after[pos] = NEVER;
            continue;
        }
        s->next_after[pos] = s->next_use[t];
        s->next_use[t] = pos;
    }
    *state = s;
    return ORTMEM_OK;
}

/* A stream that leaves the recorded future gets NEVER: no later use known. */
static void belady_accessed(void *state, uint32_t tensor, uint64_t pos, bool resident)
{
    (void)resident;
    belady_state *s = state;
    bool on_record = pos < s->future_len && s->future[pos] == tensor;
    s->by_density = false; /* a victim asked outside an admission: next use */
    s->next_use[tensor] = on_record ? s->next_after[pos] : NEVER;
}

static use_rank rank_of(const belady_state *s, uint32_t t, uint64_t pos)
{
    uint64_t next = s->next_use[t];
    double rank = 0.0;
    if (next != NEVER) {
        double distance = next > pos ? (double)(next - pos) : 1.0;
        rank = (double)s->value[t] / ((double)s->bytes[t] * distance);
    }
    return (use_rank){rank, s->bytes[t], t};
}

/* Lowest rank first; equal ranks: the larger tensor first, then the lower
 * id, so the order is total and the run repeatable. */
static int lowest_first(const void *a, const void *b)
{
    const use_rank *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return (x->tensor > y->tensor) - (x->tensor < y->tensor);
}

/* Whether the victims, taken in scratch's order (lowest first by key),
 * make room for tensor before one of them keys at or above own. */
static bool room_below(const belady_state *s, uint32_t count, uint64_t room, uint64_t need,
                       double own)
{
    for (uint32_t i = 0; i < count && room < need; i++) {
        if (s->scratch[i].rank >= own)
            return false;
        room += s->scratch[i].bytes;
    }
    return room >= need;
}

static double density_of(const belady_state *s, uint32_t t)
{
    return (double)s->value[t] / (double)s->bytes[t];
}

static bool belady_admit(void *state, uint32_t tensor, uint64_t pos)
{
    belady_state *s = state;
    s->by_density = false;
    uint64_t room = s->budget - s->resident_bytes, need = s->bytes[tensor];
    if (need <= room)
        return true;
    if (s->next_use[tensor] == NEVER)
        return false;
    uint32_t k = s->resident_count;
    /* The upgrade first: members worth less per byte of budget make room. */
    for (uint32_t i = 0; i < k; i++) {
        s->scratch[i] = rank_of(s, s->resident[i], pos);
        s->scratch[i].rank = density_of(s, s->resident[i]);
    }
    qsort(s->scratch, k, sizeof *s->scratch, lowest_first);
    s->by_density = room_below(s, k, room, need, density_of(s, tensor));
    if (s->by_density)
        return true;
    for (uint32_t i = 0; i < k; i++)
        s->scratch[i] = rank_of(s, s->resident[i], pos);
    qsort(s->scratch, k, sizeof *s->scratch, lowest_first);
    return room_below(s, k, room, need, rank_of(s, tensor, pos).rank);
}

static uint32_t belady_victim(void *state, uint64_t pos, om_policy_evictable_fn evictable,
                              void *ctx)
{
    belady_state *s = state;
    uint32_t best = OM_POLICY_NONE;
    use_rank lowest = {0, 0, 0};
    for (uint32_t i = 0; i < s->resident_count; i++) {
        uint32_t t = s->resident[i];
        if (evictable && !evictable(ctx, t))
            continue;
        use_rank r = rank_of(s, t, pos);
        if (s->by_density)
            r.rank = density_of(s, t);
        if (best == OM_POLICY_NONE || lowest_first(&r, &lowest) < 0) {
            best = t;
            lowest = r;
        }
    }
    return best;
}

static void belady_inserted(void *state, uint32_t tensor)
{
    belady_state *s = state;
    if (s->slot[tensor] != OM_POLICY_NONE)
        return;
    s->by_density = false;
    s->slot[tensor] = s->resident_count;
    s->resident[s->resident_count++] = tensor;
    s->resident_bytes += s->bytes[tensor];
}

static void belady_removed(void *state, uint32_t tensor)
{
    belady_state *s = state;
    uint32_t i = s->slot[tensor];
    if (i == OM_POLICY_NONE)
        return;
    uint32_t last = s->resident[--s->resident_count];
    s->resident[i] = last;
    s->slot[last] = i;
    s->slot[tensor] = OM_POLICY_NONE;
    s->resident_bytes -= s->bytes[tensor];
}

const om_policy_ops om_policy_belady = {
    .kind = ORTMEM_RESIDENCY_BELADY,
    .create = belady_create,
    .destroy = belady_destroy,
    .accessed = belady_accessed,
    .admit = belady_admit,
    .victim = belady_victim,
    .inserted = belady_inserted,
    .removed = belady_removed,
};
