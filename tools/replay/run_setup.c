/* The replay's backends (the cpu backend, the fault-injection wrapper, the
 * pool cap) and the teardown that checks the ledger balances afterwards. */
#include "run.h"

#include <inttypes.h>
#include <string.h>

bool stats_of(runner *rn, ortmem_vmm_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    stats->struct_size = sizeof *stats;
    ortmem_status st = ortmem_backend_stats(rn->top, stats);
    if (st != ORTMEM_OK) {
        record_teardown_failure(rn, "backend stats", st);
        return false;
    }
    return true;
}

static void destroy_backends(runner *rn)
{
    if (rn->top != rn->cpu)
        (void)ortmem_backend_destroy(rn->top);
    (void)ortmem_backend_destroy(rn->cpu);
}

bool open_backend(runner *rn)
{
    ortmem_cpu_options cpu = ORTMEM_CPU_OPTIONS_INIT;
    cpu.granule = rn->config->granule;
    ortmem_status st = ortmem_cpu_backend_create(&cpu, &rn->cpu);
    if (st != ORTMEM_OK) {
        fprintf(rn->err, "ortmem-replay: cpu backend: %s: %s\n", ortmem_status_str(st),
                ortmem_last_error());
        return false;
    }
    rn->top = rn->cpu;
    if (rn->config->fault) {
        st = ortmem_fault_backend_create(rn->cpu, &rn->config->fault_options, &rn->top);
        if (st != ORTMEM_OK) {
            fprintf(rn->err, "ortmem-replay: fault backend: %s: %s\n", ortmem_status_str(st),
                    ortmem_last_error());
            (void)ortmem_backend_destroy(rn->cpu);
            return false;
        }
    }
    if (rn->config->pool_cap) {
        st = ortmem_pool_set_cap(rn->top, rn->config->pool_cap);
        if (st != ORTMEM_OK) {
            fprintf(rn->err, "ortmem-replay: pool cap: %s: %s\n", ortmem_status_str(st),
                    ortmem_last_error());
            destroy_backends(rn);
            return false;
        }
    }
    if (!open_authority(rn)) {
        close_authority(rn, false);
        destroy_backends(rn);
        return false;
    }
    snprintf(rn->result->backend_name, sizeof rn->result->backend_name, "%s",
             ortmem_backend_name(rn->top));
    (void)ortmem_backend_granule(rn->top, &rn->result->granule);
    return true;
}

void teardown(runner *rn)
{
    const replay_trace *t = rn->trace;
    char what[200];
    for (uint32_t i = 0; i < t->object_count; i++) {
        object_run *o = &rn->objects[i];
        if (t->objects[i].is_region || (o->state != OBJECT_LIVE && o->state != OBJECT_STUCK))
            continue;
        rn->result->live_allocations_at_end++;
        check_allocation(rn, i, "live at the end", t->objects[i].line);
        ortmem_status st = ortmem_arena_free(holder_of(rn, i)->arena, o->ptr);
        if (st != ORTMEM_OK) {
            snprintf(what, sizeof what, "teardown: free %s (allocated at line %" PRIu32 ")",
                     replay_object_name(t, i), t->objects[i].line);
            record_teardown_failure(rn, what, st);
        }
        interval_remove(&rn->allocations, (uintptr_t)o->ptr, i);
        o->state = OBJECT_GONE;
    }
    for (size_t h = 0; h < t->holder_count; h++) {
        if (!rn->holders[h].arena)
            continue;
        /* force: allocations whose free failed go with the arena. */
        ortmem_status st = ortmem_arena_destroy(rn->holders[h].arena, 1);
        if (st != ORTMEM_OK) {
            snprintf(what, sizeof what, "teardown: destroy the arena of holder '%s'",
                     t->holders[h].name);
            record_teardown_failure(rn, what, st);
        }
        rn->holders[h].arena = NULL;
    }
    for (uint32_t i = 0; i < t->object_count; i++) {
        object_run *o = &rn->objects[i];
        if (!t->objects[i].is_region || (o->state != OBJECT_LIVE && o->state != OBJECT_STUCK))
            continue;
        rn->result->live_regions_at_end++;
        check_region(rn, i, "live at the end", t->objects[i].line);
        ortmem_status st = ortmem_region_destroy(o->region);
        if (st != ORTMEM_OK) {
            snprintf(what, sizeof what, "teardown: destroy %s (created at line %" PRIu32 ")",
                     replay_object_name(t, i), t->objects[i].line);
            record_teardown_failure(rn, what, st);
        }
        forget_region(rn, i);
    }
    /* Pooled granules are owned but belong to no object: empty the pool so the
     * ledger can be held against the quarantine alone. */
    size_t released = 0;
    ortmem_status st = ortmem_pool_trim(rn->top, 0, &released);
    if (st != ORTMEM_OK)
        record_teardown_failure(rn, "teardown: empty the pool", st);
    ortmem_vmm_stats *fin = &rn->result->final;
    if (stats_of(rn, fin))
        rn->result->ledger_balanced = fin->owned_bytes == fin->quarantined_bytes &&
                                      fin->mapped_bytes == fin->quarantined_mapped_bytes;
    /* The budget held when neither the authority nor the backend ever owned
     * more than it (teardown only gives back, so the peaks are the run's). */
    replay_result *res = rn->result;
    if (res->budget_set) {
        ortmem_authority_report rep;
        memset(&rep, 0, sizeof rep);
        rep.struct_size = sizeof rep;
        st = ortmem_authority_report_get(rn->authority, &rep, NULL, 0);
        if (st != ORTMEM_OK)
            record_teardown_failure(rn, "teardown: authority report", st);
        res->within_budget = st == ORTMEM_OK && rep.owned_peak_bytes <= res->budget_bytes &&
                             fin->owned_peak_bytes <= res->budget_bytes;
    }
    /* Holders, then the authority, then the backend it answers for. */
    close_authority(rn, true);
    /* Destroying a backend with quarantined granules reports them again
     * (ORTMEM_E_QUARANTINED); the ledger above already holds that. */
    if (rn->top != rn->cpu) {
        st = ortmem_backend_destroy(rn->top);
        if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED)
            record_teardown_failure(rn, "teardown: destroy the fault backend", st);
    }
    st = ortmem_backend_destroy(rn->cpu);
    if (st != ORTMEM_OK && st != ORTMEM_E_QUARANTINED)
        record_teardown_failure(rn, "teardown: destroy the cpu backend", st);
}
