/* Internal region entry points for other vmm parts (the arena). */
#ifndef ORTMEM_SRC_VMM_REGION_H
#define ORTMEM_SRC_VMM_REGION_H

#include <stdbool.h>
#include <ortmem/vmm.h>

#include "vmm/account.h"

/* As ortmem_region_create. An arena's region passes traced = false (the
 * arena records its allocations instead) and report_requested = false (the
 * arena reports its allocated bytes as the requested content). */
ortmem_status om_region_create(ortmem_backend *backend, const ortmem_region_options *options,
                               bool traced, bool report_requested, ortmem_region **out);

/* ortmem_region_commit without relief: a refused hold is noted in
 * relief for a caller that still holds locks of its own (the arena) and must
 * drop them before relieving. */
ortmem_status om_region_commit_for(ortmem_region *r, const ortmem_range *ranges, size_t count,
                                   om_relief *relief);
/* ortmem_region_commit_extents without relief, likewise. */
ortmem_status om_region_commit_extents_for(ortmem_region *r, const ortmem_range *extents,
                                           size_t count, om_relief *relief);

#endif
