/* Internal region entry points for other vmm parts (the arena). */
#ifndef ORTMEM_SRC_VMM_REGION_H
#define ORTMEM_SRC_VMM_REGION_H

#include <stdbool.h>
#include <ortmem/vmm.h>

/* As ortmem_region_create; traced = false keeps the region's operations out of
 * a recorded trace (an arena records its allocations instead). */
ortmem_status om_region_create(ortmem_backend *backend, const ortmem_region_options *options,
                               bool traced, ortmem_region **out);

#endif
