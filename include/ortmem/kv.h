/* ortmem kv: KV-cache geometry and the paged KV cache.
 *
 * Geometry is pure arithmetic (docs/memory/KV_GEOMETRY.md): what a layout
 * commits for n live tokens, where a stable full-context range starts to pay
 * (the crossover), the bucket function, prefix sharing and capacity.
 *
 * The cache commits physical memory only where tokens live. Strategy STABLE
 * reserves the full context as VA and commits on demand (pointers never move);
 * BUCKET grows by power-of-two buckets and copies (pointers move, the binding
 * generation changes); AUTO picks by the crossover and the capture wish.
 * Every byte is charged to the cache's holder on its authority.
 *
 * Thread safety: geometry functions are pure. Cache functions are thread-safe;
 * calls on one sequence are serialised. */
#ifndef ORTMEM_KV_H
#define ORTMEM_KV_H

#include <ortmem/core.h>
#include <ortmem/governance.h>
#include <ortmem/vmm.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Geometry ---------------------------------------------------------------*/
typedef enum ortmem_kv_dtype {
    ORTMEM_KV_F32 = 0,
    ORTMEM_KV_F16,
    ORTMEM_KV_BF16,
    ORTMEM_KV_FP8,
    ORTMEM_KV_INT8,
    ORTMEM_KV_INT4,
    ORTMEM_KV_DTYPE_COUNT
} ortmem_kv_dtype;

typedef enum ortmem_kv_layout {
    ORTMEM_KV_HEAD_MAJOR = 0, /* [H][cap][D] per (layer, K|V) binding: 2L*H fragments */
    ORTMEM_KV_SEQ_MAJOR,      /* [cap][H][D] per binding: 2L fragments */
    ORTMEM_KV_TOKEN_MAJOR,    /* [cap][2L][H][D]: one fragment */
    ORTMEM_KV_LAYOUT_COUNT
} ortmem_kv_layout;

typedef struct ortmem_kv_geometry {
    size_t struct_size;
    uint32_t layers;   /* L */
    uint32_t kv_heads; /* H */
    uint32_t head_dim; /* D */
    ortmem_kv_dtype dtype;
    ortmem_kv_layout layout;
    uint64_t granule; /* bytes, a power of two (queried from the backend, never assumed) */
} ortmem_kv_geometry;

#define ORTMEM_KV_GEOMETRY_INIT                                                                    \
    {                                                                                              \
        sizeof(ortmem_kv_geometry), 0, 0, 0, ORTMEM_KV_F16, ORTMEM_KV_HEAD_MAJOR, 0                \
    }

/* "f32", "f16", "bf16", "fp8", "int8", "int4"; "head-major", "seq-major",
 * "token-major"; NULL when out of range. */
ORTMEM_API const char *ortmem_kv_dtype_name(ortmem_kv_dtype dtype);
ORTMEM_API const char *ortmem_kv_layout_name(ortmem_kv_layout layout);
ORTMEM_API ortmem_status ortmem_kv_dtype_parse(const char *name, ortmem_kv_dtype *dtype);
ORTMEM_API ortmem_status ortmem_kv_layout_parse(const char *name, ortmem_kv_layout *layout);
/* Bits per element: 32, 16, 16, 8, 8, 4; 0 when out of range. */
ORTMEM_API unsigned ortmem_kv_dtype_bits(ortmem_kv_dtype dtype);

/* Head rows per token (2 x layers x kv heads) a geometry may have: far above
 * any model's (a 200-layer model with 128 KV heads has 51,200). */
#define ORTMEM_KV_HEAD_ROWS_MAX (1ULL << 20)

/* ORTMEM_E_INVALID (zero dimension, unknown dtype or layout, granule not a
 * power of two, a head row that is not a whole number of bytes),
 * ORTMEM_E_OVERFLOW, or ORTMEM_E_RANGE for more than ORTMEM_KV_HEAD_ROWS_MAX
 * head rows per token, with the reason. */
ORTMEM_API ortmem_status ortmem_kv_geometry_check(const ortmem_kv_geometry *geometry);

/* Named presets: "qwen2.5-0.5b", "qwen2.5-7b", "qwen14b", "llama-3-8b",
 * "smollm2-135m" (fp16, head-major; granule left 0 to be filled). */
ORTMEM_API ortmem_status ortmem_kv_preset(const char *name, ortmem_kv_geometry *geometry);
/* The preset names, NULL-terminated. */
ORTMEM_API const char *const *ortmem_kv_preset_names(void);

/* Everything geometry says about one point (per sequence unless noted). */
typedef struct ortmem_kv_eval {
    size_t struct_size;
    uint64_t bytes_per_token;            /* whole model: 2*L*H*D*bits/8 */
    uint64_t fragments;                  /* contiguous ranges per sequence */
    uint64_t contiguous_bytes_per_token; /* of one fragment */
    uint64_t floor_bytes;                /* fragments * granule */
    uint64_t crossover_tokens;           /* ceil(granule / contiguous_bytes_per_token) */
    uint64_t committed_bytes;            /* stable layout, batch sequences, n tokens, cap */
    uint64_t live_bytes;                 /* batch * n * bytes_per_token */
    uint64_t bucket_tokens;              /* bucket(n), min bucket, hard max = capacity */
    uint64_t bucket_bytes;               /* batch * bucket_tokens * bytes_per_token */
    uint64_t bucket_committed_bytes;     /* batch * (bucket_bytes / batch rounded to the granule) */
    uint64_t sequence_reserved_bytes;    /* VA of one stable sequence at capacity */
    int shareable;                       /* prefix * contiguous >= granule */
    uint64_t share_granules;             /* per sequence: fragments * floor(P*contig / g) */
    uint64_t share_copy_bytes;           /* per sequence: the rest of the prefix, copied */
} ortmem_kv_eval;

/* tokens <= capacity (ORTMEM_E_RANGE otherwise), batch >= 1, prefix <= tokens
 * (0 = none); min_bucket 0 = 256. */
ORTMEM_API ortmem_status ortmem_kv_evaluate(const ortmem_kv_geometry *geometry, uint64_t tokens,
                                            uint64_t capacity, uint64_t batch, uint64_t prefix,
                                            uint64_t min_bucket, ortmem_kv_eval *eval);

/* Byte offset and length of fragment f (0..fragments-1) within one stable
 * sequence of the given capacity: binding bases are granule-aligned. */
ORTMEM_API ortmem_status ortmem_kv_fragment(const ortmem_kv_geometry *geometry, uint64_t capacity,
                                            uint64_t fragment, uint64_t *offset, uint64_t *length);

/* The same for a bucket: its bindings are packed one after another (it is
 * committed whole, so aligning them would only add granules). */
ORTMEM_API ortmem_status ortmem_kv_fragment_packed(const ortmem_kv_geometry *geometry,
                                                   uint64_t capacity, uint64_t fragment,
                                                   uint64_t *offset, uint64_t *length);

/* bucket(n) = 0 if hard_max is 0, else min(max(next_pow2(n), min_bucket), hard_max). */
ORTMEM_API uint64_t ortmem_kv_bucket(uint64_t tokens, uint64_t min_bucket, uint64_t hard_max);

/* How many sequences of `tokens` live tokens (stable, capacity) fit in
 * budget_bytes; with_prefix: when they share a prefix of `prefix` tokens whose
 * full granules are mapped once. */
ORTMEM_API ortmem_status ortmem_kv_capacity(const ortmem_kv_geometry *geometry,
                                            uint64_t budget_bytes, uint64_t tokens,
                                            uint64_t capacity, uint64_t prefix,
                                            uint64_t *without_prefix, uint64_t *with_prefix);

/* ---- Growth over extents ----------------------------------------------------
 * What growing one stable sequence costs under an extent policy: a pure model
 * of the commits (the cache's stable growth lays these extents), laid
 * fragment by fragment in ascending offset with ortmem_extent_layout
 * (below = the last extent laid at that fragment's tail,
 * room = up to the fragment's granule window end or the next committed
 * granule, need = the granules the new tokens touch that are not committed).
 * A granule two fragments share is committed once, by the first that needs it.
 * docs/memory/KV_GEOMETRY.md ("Growth over extents"). */
typedef struct ortmem_kv_growth_cost {
    size_t struct_size;
    uint64_t appends;                     /* the first one included */
    uint64_t extents;                     /* handles created */
    uint64_t calls_create, calls_map;     /* one each per extent */
    uint64_t calls_set_access;            /* one per contiguous run of extents
                                                           committed by one append */
    uint64_t calls_unmap;                 /* teardown: one per contiguous run */
    uint64_t calls_release;               /* teardown, no pool: one per extent */
    uint64_t committed_bytes, live_bytes; /* at tokens */
    uint64_t overcommit_max_bytes;        /* the largest committed - live after
                                                           any append */
    uint64_t overcommit_bound_bytes;      /* sum over fragments of the largest
                                                           extent that fits its window (cap;
                                                           GRANULE: one granule), plus one
                                                           granule per fragment whose base is
                                                           not on a granule */
    uint64_t largest_extent_bytes;
    uint64_t unaligned_fragments; /* fragment bases not on a granule */
} ortmem_kv_growth_cost;

/* Grows one stable sequence of capacity tokens from 0 to tokens: a first
 * append of first_tokens (clipped to tokens), then appends of step_tokens (the
 * last one clipped). No zero tail and no pool are modelled. ORTMEM_E_INVALID
 * (bad geometry or policy, capacity 0, first_tokens or step_tokens 0 while
 * tokens > 0), ORTMEM_E_RANGE (tokens above capacity; more than 2^30
 * fragment-appends to simulate), ORTMEM_E_OVERFLOW, ORTMEM_E_NOMEM. */
ORTMEM_API ortmem_status ortmem_kv_growth_evaluate(const ortmem_kv_geometry *geometry,
                                                   const ortmem_extent_policy *policy,
                                                   uint64_t capacity, uint64_t first_tokens,
                                                   uint64_t step_tokens, uint64_t tokens,
                                                   ortmem_kv_growth_cost *cost);

/* ---- The KV cache -----------------------------------------------------------*/
typedef struct ortmem_kv_cache ortmem_kv_cache;
typedef struct ortmem_kv_seq ortmem_kv_seq;

typedef enum ortmem_kv_strategy {
    ORTMEM_KV_STABLE = 0, /* full context reserved as VA, committed on demand; pointers fixed */
    ORTMEM_KV_BUCKET,     /* power-of-two buckets, copied on growth; pointers move */
    ORTMEM_KV_AUTO,       /* chosen at create by the crossover and the capture wish */
    ORTMEM_KV_STRATEGY_COUNT
} ortmem_kv_strategy;

ORTMEM_API const char *ortmem_kv_strategy_name(ortmem_kv_strategy strategy);
ORTMEM_API ortmem_status ortmem_kv_strategy_parse(const char *name, ortmem_kv_strategy *strategy);

typedef struct ortmem_kv_cache_options {
    size_t struct_size;
    ortmem_kv_geometry geometry; /* granule 0 = the backend's granule */
    ortmem_kv_strategy strategy;
    uint64_t max_context;         /* tokens per sequence */
    uint32_t max_sequences;       /* live sequences at once; 0 = no limit */
    int graph_capture;            /* captured graphs will hold the binding pointers */
    uint64_t expected_tokens;     /* typical live tokens per sequence (auto); 0 = max_context/4 */
    uint64_t min_bucket;          /* 0 = 256 */
    int zero_tail;                /* map one read-only zero granule over the uncommitted tail */
    int prefix_cache;             /* keep published prefixes for reuse (stable strategy) */
    int priority;                 /* of the cache's holders */
    ortmem_backend *host_backend; /* swap tier; NULL = no swap */
    uint64_t stream;              /* bucket growth copies on this stream (0 = default) */
    ortmem_extent_policy extents; /* stable growth's extent policy [GEOMETRIC, 32 MiB cap]:
                                     each append commits the extents it lays per fragment
                                     (docs/memory/KV_GEOMETRY.md "Growth over extents");
                                     ORTMEM_EXTENT_GRANULE = the per-granule baseline */
    /* Warm ranges (stable strategy): a finished sequence's range stays mapped,
     * cleared, on a warm list charged to the reclaimable holder "kv-warm", and
     * a new sequence takes one with no backend call (docs/memory/KV_CACHE.md,
     * "Warm ranges"). */
    uint64_t warm_max_bytes;  /* committed bytes the list keeps [ORTMEM_KV_WARM_UNLIMITED:
                                 bounded by the budget through pressure]; 0 = off */
    uint32_t warm_max_ranges; /* ranges the list keeps [0 = max_sequences, or 64 when that
                                 is 0] */
} ortmem_kv_cache_options;

#define ORTMEM_KV_WARM_UNLIMITED UINT64_MAX

#define ORTMEM_KV_CACHE_OPTIONS_INIT                                                               \
    {                                                                                              \
        sizeof(ortmem_kv_cache_options), ORTMEM_KV_GEOMETRY_INIT, ORTMEM_KV_AUTO, 0, 0, 0, 0, 0,   \
            0, 0, 0, NULL, 0,                                                                      \
            {sizeof(ortmem_extent_policy), ORTMEM_EXTENT_GEOMETRIC, ORTMEM_EXTENT_CAP_DEFAULT},    \
            ORTMEM_KV_WARM_UNLIMITED, 0                                                            \
    }

/* Creates a cache on the authority's backend. It registers the holders "kv"
 * (role kv: the sequences), with warm ranges (stable, warm_max_bytes > 0)
 * "kv-warm" (role kv, priority - 2, reclaimable: under pressure it releases
 * warm ranges, oldest first) and, with prefix_cache, "kv-prefix" (role kv,
 * priority - 1, reclaimable: under pressure it evicts unreferenced prefixes,
 * least recently used first). */
ORTMEM_API ortmem_status ortmem_kv_cache_create(ortmem_authority *authority,
                                                const ortmem_kv_cache_options *options,
                                                ortmem_kv_cache **out);
/* ORTMEM_E_BUSY (nothing changes) while sequences live. ORTMEM_E_QUARANTINED:
 * destroyed, but granules were quarantined (see the backend stats). */
ORTMEM_API ortmem_status ortmem_kv_cache_destroy(ortmem_kv_cache *cache);

/* The strategy in force and, in words with the numbers, why (auto's choice). */
ORTMEM_API ortmem_status ortmem_kv_cache_explain(ortmem_kv_cache *cache,
                                                 ortmem_kv_strategy *strategy, char *buffer,
                                                 size_t capacity);

/* Where one (layer, K|V) tensor of a sequence lives. A kernel reads only
 * tokens [0, length). generation changes exactly when base or a stride
 * changes (bucket growth); capacity is in tokens. */
typedef struct ortmem_kv_binding {
    size_t struct_size;
    void *base;
    uint64_t token_stride; /* bytes from token t to t+1 of one head */
    uint64_t head_stride;  /* bytes from head h to h+1 at one token */
    uint64_t capacity;
    uint64_t generation;
} ortmem_kv_binding;

ORTMEM_API ortmem_status ortmem_kv_seq_create(ortmem_kv_cache *cache, ortmem_kv_seq **out);
/* A sequence whose prompt starts with a published prefix maps that prefix's
 * granules instead of recomputing it: *reused_tokens (may be 0) are live at
 * once and need no prefill. */
ORTMEM_API ortmem_status ortmem_kv_seq_create_with_prompt(ortmem_kv_cache *cache,
                                                          const int32_t *tokens, size_t count,
                                                          ortmem_kv_seq **out,
                                                          uint64_t *reused_tokens);
/* Grows the sequence by tokens (committing, or moving to the next bucket).
 * A refusal (ORTMEM_E_BUDGET, ORTMEM_E_RANGE past max_context) leaves the
 * sequence unchanged and says why. ORTMEM_E_QUARANTINED: the append took
 * effect, but a granule or VA on the way was quarantined (the old bucket, a
 * copy-on-write scratch range). */
ORTMEM_API ortmem_status ortmem_kv_seq_append(ortmem_kv_seq *seq, uint64_t tokens);
/* Rewinds to length tokens; stable sequences decommit the extents that hold
 * no live byte any more (an extent the new length cuts stays committed, its
 * bytes past the end as they were). Once extents were decommitted the
 * truncate has taken effect: ORTMEM_E_QUARANTINED or a failure to map the
 * zero tail over them is reported with the new length in force (the tail is
 * mapped again by the next append or truncate). */
ORTMEM_API ortmem_status ortmem_kv_seq_truncate(ortmem_kv_seq *seq, uint64_t length);
/* A child with the parent's tokens: every extent that holds live bytes only
 * is shared read-only (no new owned bytes); the live granules of an extent
 * the length cuts are committed for the child and their live bytes copied.
 * Writes after the fork never leak between the two (appends copy shared
 * extents first). */
ORTMEM_API ortmem_status ortmem_kv_seq_fork(ortmem_kv_seq *seq, ortmem_kv_seq **child);
/* Prewarm (stable caches with warm ranges): builds `count` ranges of one kind
 * at once, as cold sequences grown to `tokens` (the zero tail mapped past
 * them) and finished — cleared, charged to "kv-warm", newest last on the warm
 * list — so that a later create, create with a prompt or fork of that kind
 * takes one with no create, map, unmap or release, and growth up to `tokens`
 * makes none either. An engine calls them at start-up, sized to its batch and
 * its longest request (count = the batch, tokens = the most a request may
 * hold). Kinds: ortmem_kv_cache_prewarm plain ranges;
 * ortmem_kv_cache_prewarm_prompt ranges that map the published prefix entry
 * prompt finds (ORTMEM_E_NOT_FOUND: none); ortmem_kv_seq_prewarm_forks ranges
 * of forks of parent at its current length. Each range is built in a
 * sequence slot of its own, one at a time (ORTMEM_E_BUSY at max_sequences).
 * Refused, with the numbers and nothing changed: ORTMEM_E_STATE (no warm
 * ranges: bucket strategy or warm_max_bytes 0), ORTMEM_E_RANGE (tokens above
 * max_context; the ranges would not fit warm_max_ranges or warm_max_bytes
 * beside those on the list), ORTMEM_E_BUDGET (their private bytes exceed the
 * authority's available bytes; plain ranges are checked against the growth
 * model before any call, fork and prefix ranges once the first one is built:
 * then that one is released again). A failure while building releases the
 * ranges built so far. count 0: nothing. */
ORTMEM_API ortmem_status ortmem_kv_cache_prewarm(ortmem_kv_cache *cache, uint32_t count,
                                                 uint64_t tokens);
ORTMEM_API ortmem_status ortmem_kv_cache_prewarm_prompt(ortmem_kv_cache *cache,
                                                        const int32_t *prompt, size_t prompt_tokens,
                                                        uint32_t count, uint64_t tokens);
ORTMEM_API ortmem_status ortmem_kv_seq_prewarm_forks(ortmem_kv_seq *parent, uint32_t count,
                                                     uint64_t tokens);

/* A stable sequence's range may stay warm for the next sequence (see
 * ortmem_kv_cache_options). ORTMEM_E_QUARANTINED: destroyed, but its granules,
 * or those of a warm range released on the way, were quarantined. */
ORTMEM_API ortmem_status ortmem_kv_seq_destroy(ortmem_kv_seq *seq);
ORTMEM_API ortmem_status ortmem_kv_seq_length(ortmem_kv_seq *seq, uint64_t *length);
/* value 0: the K tensor of layer, 1: the V tensor. */
ORTMEM_API ortmem_status ortmem_kv_seq_binding(ortmem_kv_seq *seq, uint32_t layer, int value,
                                               ortmem_kv_binding *binding);
/* Offers the sequence's first tokens to the prefix cache: the longest prefix
 * of whole granule blocks that tokens and the sequence cover. */
ORTMEM_API ortmem_status ortmem_kv_seq_publish(ortmem_kv_seq *seq, const int32_t *tokens,
                                               size_t count);
/* Copies the live bytes to the host tier and decommits the device granules
 * (the VA stays reserved); swap_in commits and copies them back, byte for
 * byte, and on failure leaves the sequence swapped out. A swapped-out
 * sequence refuses every other operation but destroy. */
ORTMEM_API ortmem_status ortmem_kv_seq_swap_out(ortmem_kv_seq *seq);
ORTMEM_API ortmem_status ortmem_kv_seq_swap_in(ortmem_kv_seq *seq);

typedef struct ortmem_kv_stats {
    size_t struct_size;
    uint64_t sequences;
    uint64_t live_tokens;
    uint64_t live_bytes; /* live tokens * bytes per token */
    uint64_t
        committed_bytes; /* committed for the cache's sequences, prefixes and warm ranges, each granule once (the holders' owned bytes) */
    uint64_t mapped_bytes;      /* mapped by them (aliases count again) */
    uint64_t reserved_va_bytes; /* VA of the sequences' regions */
    uint64_t committed_granules;
    uint64_t shared_granules;     /* sequence granules mapped elsewhere too */
    uint64_t growth_copied_bytes; /* bucket growth */
    uint64_t cow_copied_bytes;    /* appends into shared granules, fork boundaries */
    uint64_t generations_bumped;
    uint64_t prefix_entries;
    uint64_t prefix_hits;
    uint64_t prefix_tokens_reused;
    uint64_t prefix_bytes_saved; /* granules mapped instead of committed */
    uint64_t prefix_evicted;     /* entries evicted under pressure */
    uint64_t swaps_out, swaps_in;
    uint64_t zero_tail_mapped_bytes; /* the zero granule's aliases */
    uint64_t overcommit_bytes;       /* committed - live of the resident stable sequences, plus
                                        the zero granule */
    uint64_t overcommit_bound_bytes; /* their bounds (as ortmem_kv_growth_evaluate states
                                        them under the cache's policy), plus the zero granule */
    uint64_t warm_ranges;            /* on the warm list now */
    uint64_t warm_bytes;             /* their private committed bytes (kv-warm's owned bytes) */
    uint64_t warm_hits;              /* sequences that started in a warm range */
    uint64_t warm_misses;            /* stable sequences that found none and started cold */
    uint64_t warm_reclaimed_bytes;   /* given back by warm ranges released (pressure, limits) */
    uint64_t warm_cleared_bytes;     /* zeroed at finish so no old token is ever read */
    uint64_t warm_prewarmed;         /* ranges a prewarm put on the warm list */
} ortmem_kv_stats;

ORTMEM_API ortmem_status ortmem_kv_cache_stats(ortmem_kv_cache *cache, ortmem_kv_stats *stats);

#ifdef __cplusplus
}
#endif

#endif /* ORTMEM_KV_H */
