/* Internal entry of the residency cache: create it over any policy ops (a
 * test double, or a policy not in the table yet). */
#ifndef ORTMEM_OFFLOAD_RESIDENCY_H
#define ORTMEM_OFFLOAD_RESIDENCY_H

#include "offload/policy.h"

/* As ortmem_residency_cache_create with ops in place of options->policy
 * (ops must outlive the cache). */
ortmem_status om_residency_cache_create_with_ops(ortmem_authority *authority,
                                                 ortmem_weight_catalog *catalog,
                                                 const ortmem_residency_options *options,
                                                 const om_policy_ops *ops,
                                                 ortmem_residency_cache **out);

#endif
