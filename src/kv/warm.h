/* Internal to src/kv: a warm range and the list operations that warm.c
 * (finish, take, pressure) and prewarm.c (ranges built up front) share. */
#ifndef ORTMEM_KV_WARM_H
#define ORTMEM_KV_WARM_H

#include "kv/kv.h"

/* Per granule, what a finished range holds there. */
enum { OM_WARM_UNMAPPED = 0, OM_WARM_ZERO, OM_WARM_PRIVATE, OM_WARM_SHARED };

struct om_warm {
    om_warm *prev, *next; /* by finish: head = oldest */
    ortmem_region *region;
    bool *zero_mapped;
    uint8_t *kind; /* OM_WARM_* per granule */
    size_t granules;
    uint64_t capacity;
    uint64_t committed;     /* private bytes mapped */
    om_prefix *prefix;      /* the entry its shared granules map (a reference), or NULL */
    uint64_t source_id;     /* fork: the parent region's id; 0 none */
    uint64_t source_tokens; /* tokens of the prefix or parent it shares */
    uint64_t finished;      /* finish order */
};

/* Cache lock held: w leaves the list / becomes its newest range. */
void om_warm_unlink(ortmem_kv_cache *c, om_warm *w);
void om_warm_link_tail(ortmem_kv_cache *c, om_warm *w);
/* An unlinked range (list) goes: its clear's memsets complete first, then
 * every extent (no_pool: to the backend). Only a quarantine is reported. */
ortmem_status om_warm_release(ortmem_kv_cache *c, om_warm *w, bool no_pool);
ortmem_status om_warm_release_list(ortmem_kv_cache *c, om_warm *gone);

#endif
