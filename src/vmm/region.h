/* Internal region entry points for other vmm parts (the arena). */
#ifndef ORTMEM_SRC_VMM_REGION_H
#define ORTMEM_SRC_VMM_REGION_H

#include <stdbool.h>
#include <ortmem/vmm.h>

/* As ortmem_region_create. An arena's region passes traced = false (the
 * arena records its allocations instead) and report_requested = false (the
 * arena reports its allocated bytes as the requested content). */
ortmem_status om_region_create(ortmem_backend *backend, const ortmem_region_options *options,
                               bool traced, bool report_requested, ortmem_region **out);

#endif
