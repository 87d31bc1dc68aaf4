/* ortmem_residency_simulate: a policy replayed over an access trace with no
 * memory touched. The simulator is the cache's stand-in: it disposes of
 * what the policy proposes exactly as the residency cache does (admit and
 * evict until the tensor fits, or stream it through a ring slot), so the
 * counters are the ones a cache would report. */
#include <ortmem/offload.h>

#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "offload/policy.h"

typedef struct sim_view {
    const bool *resident;
    uint32_t current; /* the tensor being accessed may not go */
} sim_view;

static bool sim_evictable(void *ctx, uint32_t tensor)
{
    const sim_view *v = ctx;
    return tensor != v->current && v->resident[tensor];
}

/* Rounded sizes, their sum and the largest; on failure a detail is set. */
static ortmem_status round_sizes(const uint64_t *bytes, uint32_t count, uint64_t granule,
                                 uint64_t *rounded, uint64_t *total, uint32_t *largest)
{
    *total = 0;
    *largest = 0;
    for (uint32_t t = 0; t < count; t++) {
        if (bytes[t] == 0)
            return OM_ERR(ORTMEM_E_INVALID, "residency simulate: tensor %u has 0 bytes",
                          (unsigned)t);
        uint64_t granules = bytes[t] / granule + (bytes[t] % granule != 0);
        if (granules > UINT64_MAX / granule || granules * granule > UINT64_MAX - *total)
            return OM_ERR(ORTMEM_E_OVERFLOW,
                          "residency simulate: tensor %u of %llu bytes in granules of %llu "
                          "overflows 64 bits with the tensors before it",
                          (unsigned)t, (unsigned long long)bytes[t], (unsigned long long)granule);
        rounded[t] = granules * granule;
        *total += rounded[t];
        if (rounded[t] > rounded[*largest])
            *largest = t;
    }
    return ORTMEM_OK;
}

static ortmem_status check_input(const uint64_t *tensor_bytes, uint32_t count,
                                 const uint32_t *trace, uint64_t trace_len, uint64_t granule,
                                 ortmem_residency_policy policy,
                                 const ortmem_residency_sim_stats *stats)
{
    ortmem_status st = OM_STRUCT_CHECK("residency simulate", "stats", stats);
    if (st != ORTMEM_OK)
        return st;
    if (!tensor_bytes || count == 0 || (!trace && trace_len))
        return OM_ERR(ORTMEM_E_INVALID,
                      "residency simulate: tensor_bytes %p for %u tensors, trace %p of %llu "
                      "accesses (need tensors and a trace)",
                      (const void *)tensor_bytes, (unsigned)count, (const void *)trace,
                      (unsigned long long)trace_len);
    if (granule == 0)
        return OM_ERR(ORTMEM_E_INVALID, "residency simulate: granule of 0 bytes");
    if (!om_policy_ops_of(policy))
        return OM_ERR(ORTMEM_E_INVALID, "residency simulate: policy %d is not one of the %d kinds",
                      (int)policy, (int)ORTMEM_RESIDENCY_POLICY_COUNT);
    for (uint64_t pos = 0; pos < trace_len; pos++)
        if (trace[pos] >= count)
            return OM_ERR(ORTMEM_E_RANGE,
                          "residency simulate: trace position %llu names tensor %u, but there "
                          "are %u tensors",
                          (unsigned long long)pos, (unsigned)trace[pos], (unsigned)count);
    return ORTMEM_OK;
}

ortmem_status ortmem_residency_simulate_steps(const uint64_t *tensor_bytes, uint32_t count,
                                              const uint32_t *trace, uint64_t trace_len,
                                              uint64_t granule, uint64_t budget_bytes,
                                              ortmem_residency_policy policy,
                                              ortmem_residency_sim_stats *stats,
                                              ortmem_residency_step_fn step, void *ctx)
{
    om_error_clear();
    ortmem_status st = check_input(tensor_bytes, count, trace, trace_len, granule, policy, stats);
    if (st != ORTMEM_OK)
        return st;
    uint64_t *size = om_malloc((size_t)count * sizeof *size);
    bool *resident = om_calloc(count, sizeof *resident);
    if (!size || !resident) {
        om_free(size);
        om_free(resident);
        return OM_ERR(ORTMEM_E_NOMEM, "residency simulate: no memory for %u tensors",
                      (unsigned)count);
    }
    uint64_t total = 0;
    uint32_t largest = 0;
    st = round_sizes(tensor_bytes, count, granule, size, &total, &largest);
    if (st == ORTMEM_OK && budget_bytes < size[largest])
        st = OM_ERR(ORTMEM_E_RANGE,
                    "residency simulate: budget %llu bytes is below the largest tensor (%u: "
                    "%llu bytes, %llu rounded to the %llu-byte granule)",
                    (unsigned long long)budget_bytes, (unsigned)largest,
                    (unsigned long long)tensor_bytes[largest], (unsigned long long)size[largest],
                    (unsigned long long)granule);
    const om_policy_ops *ops = om_policy_ops_of(policy);
    void *state = NULL;
    if (st == ORTMEM_OK) {
        om_policy_config config = {size, count, budget_bytes, trace, trace_len, tensor_bytes};
        st = ops->create(&config, &state);
    }
    if (st != ORTMEM_OK) {
        om_free(size);
        om_free(resident);
        return st;
    }
    ortmem_residency_sim_stats s;
    memset(&s, 0, sizeof s);
    s.weights_bytes = total;
    uint64_t resident_bytes = 0;
    sim_view view = {resident, 0};
    for (uint64_t pos = 0; pos < trace_len; pos++) {
        uint32_t t = trace[pos];
        ortmem_residency_step ev = {pos, t, resident[t], 0, 0, 0};
        s.accesses++;
        ops->accessed(state, t, pos, resident[t]);
        if (resident[t]) {
            s.hits++;
            s.hit_bytes += tensor_bytes[t];
        } else {
            s.misses++;
            s.miss_bytes += tensor_bytes[t];
            s.bytes_moved += tensor_bytes[t];
            bool admit = ops->admit(state, t, pos);
            view.current = t;
            while (admit && budget_bytes - resident_bytes < size[t]) {
                uint32_t v = ops->victim(state, pos, sim_evictable, &view);
                if (v >= count || !sim_evictable(&view, v)) {
                    admit = false; /* nothing may go: the tensor streams */
                    break;
                }
                resident[v] = false;
                resident_bytes -= size[v];
                ops->removed(state, v);
                s.evictions++;
                ev.evicted++;
            }
            if (admit) {
                resident[t] = true;
                resident_bytes += size[t];
                ops->inserted(state, t);
                s.page_ins++;
                ev.admitted = 1;
                if (resident_bytes > s.peak_resident_bytes)
                    s.peak_resident_bytes = resident_bytes;
            } else {
                s.streamed++;
            }
        }
        ev.resident_bytes = resident_bytes;
        if (step)
            step(ctx, &ev);
    }
    ops->destroy(state);
    om_free(size);
    om_free(resident);
    s.struct_size = stats->struct_size;
    memcpy(stats, &s, stats->struct_size);
    return ORTMEM_OK;
}

ortmem_status ortmem_residency_simulate(const uint64_t *tensor_bytes, uint32_t count,
                                        const uint32_t *trace, uint64_t trace_len, uint64_t granule,
                                        uint64_t budget_bytes, ortmem_residency_policy policy,
                                        ortmem_residency_sim_stats *stats)
{
    return ortmem_residency_simulate_steps(tensor_bytes, count, trace, trace_len, granule,
                                           budget_bytes, policy, stats, NULL, NULL);
}
