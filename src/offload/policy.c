#include "offload/policy.h"

#include <string.h>

#include "core/error.h"

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
