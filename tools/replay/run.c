/* Replay execution: the trace's ops in order, each outcome counted, the peak
 * ledger and the timeline sampled after every op. The ops, the checks, the
 * authority and the setup are in run_*.c (run.h). */
#include "run.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the run ---- */

static double seconds_since(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

/* The timeline row after op number index (1-based). A failed stats call
 * stops the timeline: a row with made-up numbers would be worse than none.
 * The arena columns add up every holder's arena. */
static void timeline_row(runner *rn, size_t index, const replay_op *op)
{
    replay_result *res = rn->result;
    if (res->timeline_failed)
        return;
    ortmem_vmm_stats vmm;
    memset(&vmm, 0, sizeof vmm);
    vmm.struct_size = sizeof vmm;
    ortmem_arena_stats total;
    memset(&total, 0, sizeof total);
    total.struct_size = sizeof total;
    bool any_arena = false;
    ortmem_status st = ortmem_backend_stats(rn->top, &vmm);
    for (size_t i = 0; st == ORTMEM_OK && i < rn->trace->holder_count; i++) {
        if (!rn->holders[i].arena)
            continue;
        ortmem_arena_stats arena;
        memset(&arena, 0, sizeof arena);
        arena.struct_size = sizeof arena;
        st = ortmem_arena_stats_get(rn->holders[i].arena, &arena);
        total.allocated_bytes += arena.allocated_bytes;
        total.committed_bytes += arena.committed_bytes;
        any_arena = true;
    }
    if (st != ORTMEM_OK) {
        fprintf(rn->err, "ortmem-replay: timeline stopped at line %" PRIu32 ": %s: %s\n", op->line,
                ortmem_status_str(st), ortmem_last_error());
        res->timeline_failed = true;
        return;
    }
    replay_timeline_row(rn->config->timeline, index, op, &vmm, any_arena ? &total : NULL);
    res->timeline_rows++;
}

static size_t round_up(uint64_t v, size_t to)
{
    if (v > SIZE_MAX - to)
        return SIZE_MAX / to * to;
    return (size_t)((v + to - 1) / to * to);
}

/* Enough VA that fragmentation never starves a holder's arena: four times its
 * peak of live bytes plus two of its largest request, at least 256 MiB. VA is
 * reserved, not committed, so generosity costs nothing but page tables. */
static size_t arena_capacity_for(const replay_holder *h, size_t granule)
{
    const uint64_t floor = (uint64_t)256 << 20;
    uint64_t want = h->alloc_peak_bytes > UINT64_MAX / 8 ? UINT64_MAX / 2 : h->alloc_peak_bytes * 4;
    uint64_t largest =
        h->alloc_largest_bytes > UINT64_MAX / 8 ? UINT64_MAX / 4 : h->alloc_largest_bytes * 2;
    want = want > UINT64_MAX - largest ? UINT64_MAX / 2 : want + largest;
    if (want < floor)
        want = floor;
    return round_up(want, granule ? granule : ((size_t)2 << 20));
}

bool replay_run(const replay_trace *trace, const replay_config *config, replay_result *result,
                FILE *err)
{
    double parse_seconds = result->parse_seconds;
    memset(result, 0, sizeof *result);
    result->parse_seconds = parse_seconds;
    result->budget_set = config->budget_set;
    result->budget_bytes = config->budget_set ? config->budget : 0;
    result->failures =
        calloc(REPLAY_FAILURES_KEPT + REPLAY_TEARDOWN_FAILURES_KEPT, sizeof *result->failures);
    size_t holders = trace->holder_count ? trace->holder_count : 1;
    result->holders = calloc(holders, sizeof *result->holders);
    runner rn = {.trace = trace, .config = config, .result = result, .err = err};
    rn.objects = calloc(trace->object_count ? trace->object_count : 1, sizeof *rn.objects);
    rn.holders = calloc(holders, sizeof *rn.holders);
    if (!result->failures || !result->holders || !rn.objects || !rn.holders) {
        fprintf(err, "ortmem-replay: out of memory for %zu objects\n", trace->object_count);
        free(rn.objects);
        free(rn.holders);
        replay_result_free(result);
        return false;
    }
    if (!open_backend(&rn)) {
        free(rn.objects);
        free(rn.holders);
        replay_result_free(result);
        return false;
    }
    for (size_t h = 0; h < trace->holder_count; h++) {
        if (trace->holders[h].allocations == 0)
            continue;
        size_t capacity = config->arena_capacity
                              ? config->arena_capacity
                              : arena_capacity_for(&trace->holders[h], result->granule);
        result->holders[h].arena_capacity = capacity;
        result->arena_capacity += capacity;
        result->arena_count++;
    }
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    size_t next_progress = 1;
    result->timeline_every = replay_timeline_every(trace->op_count);
    for (size_t i = 0; i < trace->op_count; i++) {
        const replay_op *op = &trace->ops[i];
        rn.current_line = op->line;
        outcome out = SKIPPED;
        switch ((replay_kind)op->kind) {
        case REPLAY_ALLOC: out = op_alloc(&rn, op); break;
        case REPLAY_FREE: out = op_free(&rn, op); break;
        case REPLAY_REGION: out = op_region(&rn, op); break;
        case REPLAY_COMMIT: out = op_commit(&rn, op); break;
        case REPLAY_DECOMMIT: out = op_decommit(&rn, op); break;
        case REPLAY_SHARE: out = op_share(&rn, op); break;
        case REPLAY_DESTROY: out = op_destroy(&rn, op); break;
        case REPLAY_KIND_COUNT: break;
        }
        if (out == SKIPPED) {
            result->skipped[op->kind]++;
            result->skipped_ops++;
        } else {
            result->executed[op->kind]++;
            if (out == FAILED) {
                result->failed[op->kind]++;
                result->failed_ops++;
            } else if (out == REFUSED) {
                result->refused[op->kind]++;
                result->budget_refusals++;
            }
        }
        capture_peak_ledger(&rn, i + 1);
        /* Every K ops, and the last so the timeline ends where the report's
         * "at trace end" does. */
        if (config->timeline && ((i + 1) % result->timeline_every == 0 || i + 1 == trace->op_count))
            timeline_row(&rn, i + 1, op);
        if (config->progress && (i + 1) * 10 >= next_progress * trace->op_count) {
            while ((i + 1) * 10 >= next_progress * trace->op_count && next_progress <= 10)
                next_progress++;
            fprintf(stderr, "ortmem-replay: %3zu%% (%zu of %zu ops, %.2f s)\n",
                    (i + 1) * 100 / trace->op_count, i + 1, trace->op_count, seconds_since(&start));
        }
    }
    rn.current_line = 0;
    result->run_seconds = seconds_since(&start);
    (void)stats_of(&rn, &result->at_trace_end);
    report_ledger(&rn);
    clock_gettime(CLOCK_MONOTONIC, &start);
    teardown(&rn);
    result->teardown_seconds = seconds_since(&start);
    free(rn.objects);
    free(rn.holders);
    free(rn.allocations.items);
    free(rn.regions.items);
    return true;
}

void replay_result_free(replay_result *result)
{
    free(result->failures);
    result->failures = NULL;
    result->failures_kept = 0;
    free(result->holders);
    result->holders = NULL;
    free(result->ledger_table);
    free(result->ledger_json);
    result->ledger_table = result->ledger_json = NULL;
    free(result->peak_ledger_table);
    free(result->peak_ledger_json);
    result->peak_ledger_table = result->peak_ledger_json = NULL;
}

bool replay_result_clean(const replay_result *result)
{
    return result->overlaps == 0 && result->corruptions == 0 && result->misplaced == 0 &&
           result->ledger_balanced && (!result->budget_set || result->within_budget);
}
