#include "offload/policy.h"

#include <string.h>

#include "core/error.h"

extern const om_policy_ops om_policy_lru, om_policy_scan_resistant, om_policy_adaptive,
    om_policy_belady;

static const om_policy_ops *const om_policy_table[ORTMEM_RESIDENCY_POLICY_COUNT] = {
    [ORTMEM_RESIDENCY_LRU] = &om_policy_lru,
    [ORTMEM_RESIDENCY_SCAN_RESISTANT] = &om_policy_scan_resistant,
    [ORTMEM_RESIDENCY_ADAPTIVE] = &om_policy_adaptive,
    [ORTMEM_RESIDENCY_BELADY] = &om_policy_belady,
};

const om_policy_ops *om_policy_ops_of(ortmem_residency_policy kind)
{
    return (unsigned)kind < ORTMEM_RESIDENCY_POLICY_COUNT ? om_policy_table[kind] : NULL;
}

static const char *const om_policy_names[ORTMEM_RESIDENCY_POLICY_COUNT] = {
    [ORTMEM_RESIDENCY_LRU] = "lru",
    [ORTMEM_RESIDENCY_SCAN_RESISTANT] = "scan-resistant",
    [ORTMEM_RESIDENCY_ADAPTIVE] = "adaptive",
    [ORTMEM_RESIDENCY_BELADY] = "belady",
};

const char *ortmem_residency_policy_name(ortmem_residency_policy policy)
{
    return (unsigned)policy < ORTMEM_RESIDENCY_POLICY_COUNT ? om_policy_names[policy] : "unknown";
}

ortmem_status ortmem_residency_policy_parse(const char *name, ortmem_residency_policy *policy)
{
    om_error_clear();
    if (!name || !policy)
        return OM_ERR(ORTMEM_E_INVALID, "residency policy parse: name %p, policy %p",
                      (const void *)name, (void *)policy);
    for (unsigned k = 0; k < ORTMEM_RESIDENCY_POLICY_COUNT; k++)
        if (strcmp(name, om_policy_names[k]) == 0) {
            *policy = (ortmem_residency_policy)k;
            return ORTMEM_OK;
        }
    return OM_ERR(ORTMEM_E_INVALID,
                  "residency policy '%s' is not one of lru, scan-resistant, adaptive, belady",
                  name);
}
