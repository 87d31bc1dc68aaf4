/* ortmem capture: graph signatures, and the capture gate (gate.h).
 *
 * The process-global capture gate keeps driver calls that synchronize the
 * device out of stream captures; it is declared in <ortmem/gate.h>, included
 * here, because it sits at the core level (the vmm backends take it).
 *
 * A graph signature records what a captured graph depends on: VA ranges of
 * regions with their mapping epochs and KV bindings with their generations.
 * Checking it answers KEEP (every pointer the graph holds still reaches mapped
 * memory at the same VA) or INVALIDATE, with the reason in words.
 *
 * Thread safety: every function is thread-safe. */
#ifndef ORTMEM_CAPTURE_H
#define ORTMEM_CAPTURE_H

#include <ortmem/core.h>
#include <ortmem/gate.h>
#include <ortmem/kv.h>
#include <ortmem/offload.h>
#include <ortmem/vmm.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Graph signatures -------------------------------------------------------*/
typedef struct ortmem_graph_signature ortmem_graph_signature;

typedef enum ortmem_graph_verdict {
    ORTMEM_GRAPH_KEEP = 0,   /* replay is safe: every recorded pointer is still valid */
    ORTMEM_GRAPH_INVALIDATE, /* re-capture (or recommit first): the reason says what moved */
    ORTMEM_GRAPH_VERDICT_COUNT
} ortmem_graph_verdict;

/* "keep", "invalidate"; NULL when out of range. */
ORTMEM_API const char *ortmem_graph_verdict_name(ortmem_graph_verdict verdict);

/* An empty signature: record what the graph uses right after capturing it. */
ORTMEM_API ortmem_status ortmem_graph_signature_create(ortmem_graph_signature **out);
ORTMEM_API ortmem_status ortmem_graph_signature_destroy(ortmem_graph_signature *signature);

/* Records that the graph uses region bytes [offset, offset+len), with the
 * mapping epoch of every granule the range touches (ortmem_region_range_state).
 * ORTMEM_E_STATE when a granule of the range is not mapped now: a captured
 * graph may reference mapped memory only. The signature keeps the region
 * pointer but no reference: a region destroyed later invalidates the graph. */
ORTMEM_API ortmem_status ortmem_graph_signature_add_range(ortmem_graph_signature *signature,
                                                          ortmem_region *region, size_t offset,
                                                          size_t len);

/* Records that the graph reads tensor's residency slot: its range, as
 * add_range, named in the check's reason ("slot of tensor 'NAME': ... unmapped
 * (evicted since capture)"). ORTMEM_E_STATE when the tensor is not resident
 * now. A slot paged in again at the same VA keeps the graph (remapped); an
 * engine that must not re-capture pins the tensor for the graph's life
 * (ortmem_residency_pin). */
ORTMEM_API ortmem_status ortmem_graph_signature_add_slot(ortmem_graph_signature *signature,
                                                         ortmem_residency_cache *cache,
                                                         uint32_t tensor);

/* Records that the graph holds the pointers of binding (layer, value: 0 = K,
 * 1 = V) of seq: its base, strides, capacity and generation, as the engine
 * read them before capturing (binding NULL: read them now). The check reads
 * the binding again through ortmem_kv_seq_binding. */
ORTMEM_API ortmem_status ortmem_graph_signature_add_binding(ortmem_graph_signature *signature,
                                                            ortmem_kv_seq *seq, uint32_t layer,
                                                            int value,
                                                            const ortmem_kv_binding *binding);

/* Compares what the signature recorded with now. KEEP when every range is
 * still mapped at the same VA (remapped granules included: a graph follows
 * the VA, not the physical memory, DESIGN.md section 3) and every binding's
 * base, strides, capacity and generation are unchanged; INVALIDATE otherwise.
 * reason (may be NULL when capacity is 0) gets one line, truncated to
 * capacity: the first cause of an INVALIDATE (and how many more there are),
 * the remapped ranges of a KEEP, or "unchanged since capture". ORTMEM_OK
 * whenever a verdict was reached; the memory the graph writes into after a
 * remap is the new granule's, and its content is the engine's business. */
ORTMEM_API ortmem_status ortmem_graph_signature_check(ortmem_graph_signature *signature,
                                                      char *reason, size_t capacity,
                                                      ortmem_graph_verdict *verdict);

#ifdef __cplusplus
}
#endif

#endif /* ORTMEM_CAPTURE_H */
