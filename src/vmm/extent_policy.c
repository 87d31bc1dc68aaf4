/* The extent layout policy: pure arithmetic over granule counts, no backend. */
#include <ortmem/vmm.h>

#include "core/error.h"

static uint64_t pow2_floor(uint64_t v)
{
    uint64_t p = 1;
    while (p <= v / 2)
        p *= 2;
    return p;
}

static ortmem_status check_policy(const ortmem_extent_policy *policy, size_t granule,
                                  const char *what)
{
    ortmem_status st = OM_STRUCT_CHECK(what, "policy", policy);
    if (st != ORTMEM_OK)
        return st;
    if (granule == 0 || (granule & (granule - 1)) != 0)
        return OM_ERR(ORTMEM_E_INVALID, "%s: granule %zu is not a power of two", what, granule);
    if (policy->growth != ORTMEM_EXTENT_GRANULE && policy->growth != ORTMEM_EXTENT_EXACT &&
        policy->growth != ORTMEM_EXTENT_GEOMETRIC)
        return OM_ERR(ORTMEM_E_INVALID, "%s: unknown growth %d", what, (int)policy->growth);
    if (policy->cap_bytes != 0 && policy->cap_bytes < granule)
        return OM_ERR(ORTMEM_E_INVALID, "%s: cap %zu bytes is below the granule of %zu", what,
                      policy->cap_bytes, granule);
    return ORTMEM_OK;
}

static uint64_t cap_granules(const ortmem_extent_policy *policy, size_t granule)
{
    switch (policy->growth) {
    case ORTMEM_EXTENT_GRANULE: return 1;
    case ORTMEM_EXTENT_EXACT:
        return policy->cap_bytes ? pow2_floor(policy->cap_bytes / granule)
                                 : pow2_floor(UINT64_MAX / granule);
    default: {
        size_t cap = policy->cap_bytes ? policy->cap_bytes : ORTMEM_EXTENT_CAP_DEFAULT;
        return cap < granule ? 1 : pow2_floor(cap / granule);
    }
    }
}

ortmem_status ortmem_extent_cap_granules(const ortmem_extent_policy *policy, size_t granule,
                                         uint64_t *granules)
{
    om_error_clear();
    ortmem_status st = check_policy(policy, granule, "extent cap");
    if (st != ORTMEM_OK)
        return st;
    if (!granules)
        return OM_ERR(ORTMEM_E_INVALID, "extent cap: granules is NULL");
    *granules = cap_granules(policy, granule);
    return ORTMEM_OK;
}

/* Appends the power-of-two pieces of n (largest first, each <= cap). */
static size_t lay_pieces(uint64_t n, uint64_t cap, uint64_t *sizes, size_t capacity, size_t at)
{
    while (n > 0) {
        uint64_t piece = n >= cap ? cap : pow2_floor(n);
        if (at < capacity)
            sizes[at] = piece;
        at++;
        n -= piece;
    }
    return at;
}

ortmem_status ortmem_extent_layout(const ortmem_extent_policy *policy, size_t granule,
                                   uint64_t below, uint64_t need, uint64_t room, uint64_t *sizes,
                                   size_t capacity, size_t *count)
{
    om_error_clear();
    ortmem_status st = check_policy(policy, granule, "extent layout");
    if (st != ORTMEM_OK)
        return st;
    if (!count || (capacity && !sizes))
        return OM_ERR(ORTMEM_E_INVALID, "extent layout: count or sizes is NULL");
    if (room < need)
        return OM_ERR(ORTMEM_E_RANGE, "extent layout: %llu granules wanted but only %llu fit",
                      (unsigned long long)need, (unsigned long long)room);
    uint64_t cap = cap_granules(policy, granule);
    size_t n = 0;
    if (policy->growth == ORTMEM_EXTENT_GEOMETRIC && need > 0) {
        /* The tail doubles the extent below it; an ask of at least that much
         * is known and laid exactly. */
        uint64_t next = below == 0 ? 1 : (below >= cap / 2 ? cap : below * 2);
        if (need < next && next <= room) {
            if (capacity)
                sizes[0] = next;
            n = 1;
        } else {
            n = lay_pieces(need, cap, sizes, capacity, 0);
        }
    } else {
        n = lay_pieces(need, cap, sizes, capacity, 0);
    }
    *count = n;
    if (n > capacity)
        return OM_ERR(ORTMEM_E_RANGE, "extent layout: %zu extents laid, room for %zu", n, capacity);
    return ORTMEM_OK;
}
