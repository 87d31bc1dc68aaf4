/* Internal view of the KV cache, shared by the kv files.
 *
 * Lock order: sequence lock, then cache lock; the cache lock is held only for
 * short bookkeeping (the sequence list, prefix entries, counters) and never
 * across a vmm or governance call that may run pressure. A pressure callback
 * (the prefix holder's) takes the cache lock only. */
#ifndef ORTMEM_SRC_KV_KV_H
#define ORTMEM_SRC_KV_KV_H

#include <pthread.h>
#include <stdbool.h>
#include <ortmem/kv.h>

#include "core/handle.h"

typedef struct om_prefix om_prefix;
typedef struct om_warm om_warm;

struct ortmem_kv_seq {
    om_handle hdr;
    pthread_mutex_t lock;
    ortmem_kv_cache *cache;
    ortmem_kv_seq *prev, *next; /* the cache's list; cache lock */
    ortmem_region *region;      /* NULL for a bucket sequence before its first append */
    uint64_t capacity;          /* tokens the region is laid out for */
    uint64_t length;
    uint64_t generation;
    uint64_t shared_upto; /* below this token, granules may be shared: copy before writing */
    om_prefix *prefix;    /* the prefix entry it maps (referenced), or NULL */
    ortmem_region *host;  /* the swapped-out copy, or NULL */
    bool *zero_mapped;    /* per granule: the zero granule is mapped there */
    bool tail_missing;    /* the last zero-tail fill failed: the next append or truncate retries */
    size_t granules;      /* of region */
    /* What its shared granules come from, for the warm list (warm.c): a fork
     * records the parent's region id and length, a prefix start the entry's
     * token count (the entry itself is `prefix`). */
    uint64_t source_id;     /* fork: the parent region's id; 0 none */
    uint64_t source_tokens; /* tokens of the source it shares */
    /* Tokens below which the range may hold bytes written since it was
     * committed or last cleared (the longest length it reached): what a
     * finish clears before the range goes warm (warm.c). */
    uint64_t written;
};

struct om_prefix {
    om_prefix *prev, *next; /* LRU: head = least recently used */
    ortmem_region *region;  /* maps the prefix's whole granules, read-only */
    int32_t *tokens;
    uint64_t count; /* tokens covered */
    uint64_t hash;
    uint64_t refs;     /* live sequences mapping it */
    uint64_t granules; /* shared granules it maps */
};

struct ortmem_kv_cache {
    om_handle hdr;
    pthread_mutex_t lock;
    ortmem_authority *authority;
    ortmem_backend *backend;
    ortmem_holder *holder, *prefix_holder;
    ortmem_account account, prefix_account;
    ortmem_kv_geometry geometry;
    uint64_t bytes_per_token, fragments, contig;
    ortmem_kv_strategy strategy; /* the one in force */
    char reason[512];
    uint64_t max_context, min_bucket;
    uint32_t max_sequences;
    bool zero_tail, prefix_cache;
    ortmem_backend *host_backend;
    uint64_t stream;              /* bucket growth copies are ordered on it */
    ortmem_extent_policy extents; /* stable growth's extent policy */
    uint64_t overcommit_bound;    /* of one stable sequence at max_context under it */
    ortmem_region *zero;          /* one zeroed read-only granule (zero tail) */
    ortmem_kv_seq *seqs;
    uint64_t seq_count;
    om_prefix *lru_head, *lru_tail;
    uint64_t prefix_count;
    /* Counters (cache lock). */
    uint64_t growth_copied, cow_copied, generations, prefix_hits, prefix_tokens, prefix_saved,
        prefix_evicted, swaps_out, swaps_in;
    /* Warm ranges (warm.c): finished stable ranges kept mapped, oldest first. */
    ortmem_holder *warm_holder; /* "kv-warm"; NULL when warm ranges are off */
    ortmem_account warm_account;
    uint64_t warm_max_bytes, warm_max_ranges;
    om_warm *warm_head, *warm_tail; /* cache lock */
    uint64_t warm_count, warm_bytes, warm_hits, warm_misses, warm_reclaimed, warm_cleared;
    uint64_t warm_seq;       /* finish order */
    uint64_t warm_prewarmed; /* ranges a prewarm put on the list */
};

/* Fragment f's byte range in a sequence of capacity cap. */
ortmem_status om_kv_fragment(const ortmem_kv_cache *c, uint64_t cap, uint64_t f, uint64_t *offset,
                             uint64_t *length);
/* The region of one sequence of capacity cap, charged to the cache's holder. */
ortmem_status om_kv_region_create(ortmem_kv_cache *c, uint64_t cap, const ortmem_account *account,
                                  ortmem_region **out);
/* Per-fragment byte ranges of tokens [from, to) (to > from): fragments entries. */
ortmem_status om_kv_token_ranges(const ortmem_kv_cache *c, uint64_t cap, uint64_t from, uint64_t to,
                                 ortmem_range *ranges);
/* Granule k of a sequence laid out for cap holds how many live bytes when
 * `tokens` are live: fills live[] (granule count entries, zeroed by caller). */
ortmem_status om_kv_live_bytes_per_granule(const ortmem_kv_cache *c, uint64_t cap, uint64_t tokens,
                                           uint64_t *live, size_t granules);
/* Maps src's whole extents that are wholly live for `tokens` into dst
 * read-only (maximal runs, one share each); with copy_partial, the live
 * granules of an extent the live end cuts are committed in dst (exact
 * extents) and their live bytes copied (cow_copied). *shared gets the
 * granules mapped. prefix_cache.c. */
ortmem_status om_kv_share_prefix(ortmem_kv_cache *c, ortmem_region *dst, ortmem_region *src,
                                 uint64_t cap, uint64_t tokens, bool copy_partial,
                                 uint64_t *shared);
/* Zero tail: maps the zero granule over every unmapped granule of the
 * sequence region (after commits), or unmaps it from [from, to) tokens. */
ortmem_status om_kv_zero_fill(ortmem_kv_cache *c, ortmem_kv_seq *s);
ortmem_status om_kv_zero_clear(ortmem_kv_cache *c, ortmem_kv_seq *s, uint64_t from, uint64_t to);
/* Commits the unmapped granules ranges touch in exact extents of at most
 * cap_bytes (0 = no cap): a bucket, a swap-in (growth.c). */
ortmem_status om_kv_commit_exact(ortmem_region *r, const ortmem_range *ranges, size_t count,
                                 size_t cap_bytes);
/* The largest extent the cache's policy lays, in bytes (0 = none fits a size_t). */
size_t om_kv_extent_cap_bytes(const ortmem_kv_cache *c);
/* Gives s a region laid out for cap tokens (no zero tail yet; sequence.c). */
ortmem_status om_seq_attach(ortmem_kv_cache *c, ortmem_kv_seq *s, uint64_t cap);
/* Stable growth of s to `to` tokens over extents; bucket growth to the next
 * bucket that holds `to` (growth.c). Nothing changes on failure. */
ortmem_status om_kv_append_stable(ortmem_kv_cache *c, ortmem_kv_seq *s, uint64_t to);
ortmem_status om_kv_grow_bucket(ortmem_kv_cache *c, ortmem_kv_seq *s, uint64_t to);
/* Returns once the work enqueued on stream so far has completed (one event). */
ortmem_status om_kv_stream_wait(ortmem_backend *backend, uint64_t stream);

/* The over-commit bound of one stable sequence of capacity tokens under
 * policy, as ortmem_kv_growth_evaluate reports it (geometry.c). */
ortmem_status om_kv_overcommit_bound(const ortmem_kv_geometry *geometry,
                                     const ortmem_extent_policy *policy, uint64_t capacity,
                                     uint64_t *bound_bytes);

/* Prefix cache (prefix_cache.c). */
om_prefix *om_prefix_find(ortmem_kv_cache *c, const int32_t *tokens, size_t count);
void om_prefix_unref(ortmem_kv_cache *c, om_prefix *p);
uint64_t om_prefix_pressure(void *user, uint64_t want_bytes);
ortmem_status om_prefix_free_all(ortmem_kv_cache *c);
/* Tokens in one block whose bytes end on a granule in every fragment. */
uint64_t om_prefix_block_tokens(const ortmem_kv_cache *c);

/* Warm ranges (warm.c). Finish: a stable sequence being destroyed (unlinked,
 * unpinned by everyone else) gives its region to the warm list when it may;
 * true when it did (s->region and s->prefix are then the list's); *evicted:
 * ORTMEM_E_QUARANTINED when an older range released over the limits
 * quarantined. Forget and finish report only quarantines. Take: gives
 * s (new, no region yet) a warm range of the kind asked for — plain (source
 * NULL), a prefix start (prefix set) or a fork (parent set, locked) — best
 * fit for need_bytes of private committed bytes (UINT64_MAX: unknown, the
 * largest), with no backend call for a plain one; *taken false when none fits
 * (s unchanged). Finish with keep set (a prewarm): the range goes onto *keep
 * (next-linked), not the list, and nothing is evicted. */
bool om_warm_finish(ortmem_kv_cache *c, ortmem_kv_seq *s, ortmem_status *evicted, om_warm **keep);
ortmem_status om_warm_take(ortmem_kv_cache *c, ortmem_kv_seq *s, om_prefix *prefix,
                           ortmem_kv_seq *parent, uint64_t need_bytes, bool *taken);
/* A sequence whose region goes: the warm fork ranges of that parent can
 * never be taken again (a region id is never reused) and are released. */
ortmem_status om_warm_forget_source(ortmem_kv_cache *c, ortmem_region *parent);
uint64_t om_warm_pressure(void *user, uint64_t want_bytes);
/* Releases every warm range (teardown). */
ortmem_status om_warm_free_all(ortmem_kv_cache *c);

/* Sequence create, fork and destroy for a prewarm (sequence.c): take false
 * starts cold whatever the warm list holds; the fork's parent is locked
 * (om_seq_pin); destroy with keep set gives the range to *keep (*kept says
 * whether it did) instead of the warm list. */
ortmem_status om_seq_create_prompt(ortmem_kv_cache *c, const int32_t *tokens, size_t count,
                                   ortmem_kv_seq **out, uint64_t *reused_tokens, bool take);
ortmem_status om_seq_fork_locked(ortmem_kv_seq *parent, ortmem_kv_seq **child, bool take);
ortmem_status om_seq_destroy_keep(ortmem_kv_seq *s, om_warm **keep, bool *kept);

ortmem_status om_seq_pin(ortmem_kv_seq *s, const char *what);
void om_seq_unpin(ortmem_kv_seq *s);

#endif
