/* Reports: a short table for people, one JSON object for scripts. */
#include "replay.h"

#include "common/json.h"

#include <inttypes.h>
#include <string.h>

static double mib(uint64_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

/* "2 MiB", "64 KiB", "1000 B": exact when the unit divides, else bytes. */
static const char *human_bytes(uint64_t bytes, char *buf, size_t size)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    unsigned u = 0;
    uint64_t v = bytes;
    while (u < 4 && v && v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    snprintf(buf, size, "%" PRIu64 " %s", v, units[u]);
    return buf;
}

/* Prints text line by line, indented like the rest of the report. */
static void print_indented(FILE *out, const char *text)
{
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (len)
            fprintf(out, "  %.*s\n", (int)len, line);
        else
            fputc('\n', out);
        line += len + (nl != NULL);
    }
}

static const char *plural(uint64_t n)
{
    return n == 1 ? "" : "s";
}

static void ledger_row(FILE *out, const char *label, uint64_t bytes)
{
    fprintf(out, "  %-24s %12.2f %16" PRIu64 "\n", label, mib(bytes), bytes);
}

void replay_report_text(FILE *out, const char *trace_path, const replay_trace *trace,
                        const replay_config *config, const replay_result *r)
{
    char a[48], b[48], c[48], d[48];
    const ortmem_vmm_stats *fin = &r->final, *end = &r->at_trace_end;
    fprintf(out, "ortmem-replay %s\n", trace_path);
    fprintf(out, "  backend %s, granule %s, pool cap %s, ", r->backend_name,
            human_bytes(r->granule, a, sizeof a), human_bytes(config->pool_cap, b, sizeof b));
    if (r->arena_count == 0)
        fputs("no arena (no alloc lines)\n", out);
    else if (r->arena_count == 1)
        fprintf(out, "arena %s of VA (cache %s)\n", human_bytes(r->arena_capacity, c, sizeof c),
                human_bytes(config->arena_cache, d, sizeof d));
    else
        fprintf(out, "%zu arenas, %s of VA (cache %s each)\n", r->arena_count,
                human_bytes(r->arena_capacity, c, sizeof c),
                human_bytes(config->arena_cache, d, sizeof d));
    if (r->budget_set)
        fprintf(out, "  budget %s of owned bytes, %zu holder%s\n",
                human_bytes(r->budget_bytes, a, sizeof a), trace->holder_count,
                plural(trace->holder_count));
    else
        fprintf(out,
                "  no budget (--budget): %zu holder%s, charged to an authority without a limit\n",
                trace->holder_count, plural(trace->holder_count));
    if (config->fault) {
        const ortmem_fault_options *f = &config->fault_options;
        fprintf(out, "  fault injection: %s calls", ortmem_backend_op_name(f->op));
        if (f->fail_at)
            fprintf(out, ", fail call %" PRIu64, f->fail_at);
        if (f->probability > 0.0)
            fprintf(out, ", fail each with probability %g (seed %" PRIu64 ")", f->probability,
                    f->seed);
        fputc('\n', out);
    }

    fprintf(out, "\n  %-10s %10s %10s %10s %10s\n", "operation", "in trace", "failed", "refused",
            "skipped");
    for (unsigned k = 0; k < REPLAY_KIND_COUNT; k++)
        fprintf(out, "  %-10s %10zu %10" PRIu64 " %10" PRIu64 " %10" PRIu64 "\n",
                replay_kind_name((replay_kind)k), trace->kind_counts[k], r->failed[k],
                r->refused[k], r->skipped[k]);
    fprintf(out, "  %-10s %10zu %10" PRIu64 " %10" PRIu64 " %10" PRIu64 "\n", "total",
            trace->op_count, r->failed_ops, r->budget_refusals, r->skipped_ops);

    fprintf(out, "\n  %-24s %12s %16s\n", "ledger", "MiB", "bytes");
    ledger_row(out, "peak owned", fin->owned_peak_bytes);
    ledger_row(out, "peak mapped", fin->mapped_peak_bytes);
    ledger_row(out, "owned at trace end", end->owned_bytes);
    ledger_row(out, "mapped at trace end", end->mapped_bytes);
    ledger_row(out, "final owned", fin->owned_bytes);
    ledger_row(out, "final mapped", fin->mapped_bytes);
    ledger_row(out, "quarantined (owned)", fin->quarantined_bytes);
    ledger_row(out, "quarantined (mapped)", fin->quarantined_mapped_bytes);
    if (fin->leaked_va_bytes)
        ledger_row(out, "VA leaked on purpose", fin->leaked_va_bytes);
    fprintf(out, "  ledger balanced: %s (after teardown, owned and mapped %s the quarantine)\n",
            r->ledger_balanced ? "yes" : "NO", r->ledger_balanced ? "equal" : "differ from");
    if (r->budget_set)
        fprintf(out,
                "  within budget: %s (peak owned %s the budget of %s); %" PRIu64
                " op%s refused for budget\n",
                r->within_budget ? "yes" : "NO", r->within_budget ? "within" : "ABOVE",
                human_bytes(r->budget_bytes, a, sizeof a), r->budget_refusals,
                plural(r->budget_refusals));
    for (size_t i = 0; i < trace->holder_count; i++) {
        const replay_holder *h = &trace->holders[i];
        const replay_holder_result *hr = &r->holders[i];
        if (!h->reclaimable)
            continue;
        fprintf(out,
                "  pressure on '%s': %" PRIu64 " call%s, %.2f MiB decommitted in %" PRIu64
                " region%s, %.2f MiB reclaimed\n",
                h->name, hr->pressure_calls, plural(hr->pressure_calls),
                mib(hr->pressure_decommitted_bytes), hr->pressure_regions,
                plural(hr->pressure_regions), mib(hr->pressure_reclaimed_bytes));
    }

    /* The authority's own table (ortmem_authority_format), at the peak (the
     * steady state) and at trace end. */
    if (r->peak_ledger_table) {
        fprintf(out, "\n  ledger by holder at peak owned (after op %zu)\n", r->ledger_peak_op);
        print_indented(out, r->peak_ledger_table);
    }
    if (r->ledger_table) {
        fputs("\n  ledger by holder at trace end\n", out);
        print_indented(out, r->ledger_table);
    }

    fprintf(out, "\n  backend calls   ");
    for (unsigned op = 0; op < ORTMEM_OP_COUNT; op++) {
        fprintf(out, "%s %" PRIu64, ortmem_backend_op_name((ortmem_backend_op)op), fin->calls[op]);
        if (fin->failures[op])
            fprintf(out, " (%" PRIu64 " failed)", fin->failures[op]);
        fputs(op + 1 < ORTMEM_OP_COUNT ? (op == 4 ? ",\n                  " : ", ") : "\n", out);
    }
    fprintf(out, "  pool            %" PRIu64 " hits, %" PRIu64 " misses; pooled %s at trace end\n",
            fin->pool_hits, fin->pool_misses, human_bytes(end->pool_bytes, a, sizeof a));
    fprintf(out,
            "  checks          %" PRIu64 " overlaps, %" PRIu64 " corruptions, %" PRIu64
            " misplaced\n",
            r->overlaps, r->corruptions, r->misplaced);
    fprintf(out,
            "  checked         %" PRIu64 " allocation%s, %" PRIu64 " granule%s, %" PRIu64
            " alias%s; %.1f MiB read back\n",
            r->checked_allocations, plural(r->checked_allocations), r->checked_granules,
            plural(r->checked_granules), r->checked_shares, r->checked_shares == 1 ? "" : "es",
            mib(r->checked_bytes));
    fprintf(out,
            "  live at end     %" PRIu64 " allocations, %" PRIu64
            " regions (torn down by the replay)\n",
            r->live_allocations_at_end, r->live_regions_at_end);
    fprintf(out, "  time            parse %.3f s, replay %.3f s, teardown %.3f s\n",
            r->parse_seconds, r->run_seconds, r->teardown_seconds);
    if (r->timeline_path) {
        fprintf(out, "  timeline        %s (%" PRIu64 " row%s, ", r->timeline_path,
                r->timeline_rows, plural(r->timeline_rows));
        if (r->timeline_every == 1)
            fputs("one per op)\n", out);
        else
            fprintf(out, "one per %zu ops)\n", r->timeline_every);
    }
    if (r->plot_path)
        fprintf(out, "  plot            %s\n", r->plot_path);

    uint64_t op_failures = r->failed_ops + r->budget_refusals + r->pressure_failures;
    uint64_t failures = op_failures + r->teardown_failures;
    if (op_failures) {
        size_t shown = 0;
        const char *title = r->budget_refusals ? "failed and refused ops" : "failed ops";
        if (op_failures > 20)
            fprintf(out, "\n%s (the first 20 of %" PRIu64 "):\n", title, op_failures);
        else
            fprintf(out, "\n%s (%" PRIu64 "):\n", title, op_failures);
        for (size_t i = 0; i < r->failures_kept && shown < 20; i++) {
            const replay_failure *f = &r->failures[i];
            if (!f->line)
                continue;
            shown++;
            fprintf(out, "  line %" PRIu32 ": %s\n    %s: %s\n", f->line, f->what,
                    ortmem_status_str(f->status), f->detail[0] ? f->detail : "(no detail)");
        }
        if (r->pressure_failures)
            fprintf(out,
                    "  (%" PRIu64 " of them: decommits by a pressure callback, listed under the op "
                    "that asked)\n",
                    r->pressure_failures);
        if (r->skipped_ops)
            fprintf(out,
                    "  %" PRIu64 " later ops depended on failed, refused or reclaimed ones and "
                    "were skipped\n",
                    r->skipped_ops);
    }
    if (r->teardown_failures) {
        fprintf(out, "\nteardown failures (%" PRIu64 "):\n", r->teardown_failures);
        for (size_t i = 0; i < r->failures_kept; i++) {
            const replay_failure *f = &r->failures[i];
            if (f->line == 0)
                fprintf(out, "  %s\n    %s: %s\n", f->what, ortmem_status_str(f->status),
                        f->detail[0] ? f->detail : "(no detail)");
        }
    }

    if (replay_result_clean(r)) {
        fprintf(out, "\nresult: OK%s\n",
                failures ? " (the failures above were survived: no overlap, no corruption, "
                           "ledger balanced)"
                         : "");
    } else {
        fprintf(out,
                "\nresult: FAILED (%" PRIu64 " overlaps, %" PRIu64 " corruptions, %" PRIu64
                " misplaced, ledger %s%s)\n",
                r->overlaps, r->corruptions, r->misplaced,
                r->ledger_balanced ? "balanced" : "NOT balanced",
                r->budget_set && !r->within_budget ? ", budget EXCEEDED" : "");
    }
}

/* A JSON string literal; the replay's reports write \n, \r and \t by name. */
static void json_string(FILE *out, const char *s)
{
    json_put_string(out, s, JSON_CONTROLS_NAMED);
}

static void json_u64(FILE *out, const char *key, uint64_t value, bool comma)
{
    fprintf(out, "  \"%s\": %" PRIu64 "%s\n", key, value, comma ? "," : "");
}

void replay_report_json(FILE *out, const char *trace_path, const replay_trace *trace,
                        const replay_config *config, const replay_result *r)
{
    const ortmem_vmm_stats *fin = &r->final, *end = &r->at_trace_end;
    fputs("{\n  \"trace\": ", out);
    json_string(out, trace_path);
    fputs(",\n  \"backend\": ", out);
    json_string(out, r->backend_name);
    fputs(",\n", out);
    json_u64(out, "granule_bytes", r->granule, true);
    json_u64(out, "pool_cap_bytes", config->pool_cap, true);
    json_u64(out, "arena_capacity_bytes", r->arena_capacity, true);
    json_u64(out, "arena_cache_bytes", config->arena_cache, true);
    if (config->fault) {
        const ortmem_fault_options *f = &config->fault_options;
        fputs("  \"fault\": {\"op\": ", out);
        json_string(out, ortmem_backend_op_name(f->op));
        fprintf(out,
                ", \"fail_at\": %" PRIu64 ", \"probability\": %.17g, \"seed\": %" PRIu64 "},\n",
                f->fail_at, f->probability, f->seed);
    } else {
        fputs("  \"fault\": null,\n", out);
    }
    if (r->budget_set) {
        json_u64(out, "budget_bytes", r->budget_bytes, true);
        fprintf(out, "  \"within_budget\": %s,\n", r->within_budget ? "true" : "false");
    } else {
        fputs("  \"budget_bytes\": null,\n  \"within_budget\": null,\n", out);
    }
    json_u64(out, "budget_refusals", r->budget_refusals, true);
    json_u64(out, "pressure_failures", r->pressure_failures, true);
    json_u64(out, "arena_count", r->arena_count, true);
    json_u64(out, "ops", trace->op_count, true);
    uint64_t executed = 0;
    for (unsigned k = 0; k < REPLAY_KIND_COUNT; k++)
        executed += r->executed[k];
    json_u64(out, "executed_ops", executed, true);
    json_u64(out, "failed_ops", r->failed_ops, true);
    json_u64(out, "skipped_ops", r->skipped_ops, true);
    json_u64(out, "teardown_failures", r->teardown_failures, true);
    fputs("  \"ops_by_kind\": {", out);
    for (unsigned k = 0; k < REPLAY_KIND_COUNT; k++)
        fprintf(out,
                "%s\"%s\": {\"ops\": %zu, \"failed\": %" PRIu64 ", \"refused\": %" PRIu64
                ", \"skipped\": %" PRIu64 "}",
                k ? ", " : "", replay_kind_name((replay_kind)k), trace->kind_counts[k],
                r->failed[k], r->refused[k], r->skipped[k]);
    fputs("},\n", out);
    json_u64(out, "peak_owned_bytes", fin->owned_peak_bytes, true);
    json_u64(out, "peak_mapped_bytes", fin->mapped_peak_bytes, true);
    json_u64(out, "owned_at_trace_end_bytes", end->owned_bytes, true);
    json_u64(out, "mapped_at_trace_end_bytes", end->mapped_bytes, true);
    json_u64(out, "pool_at_trace_end_bytes", end->pool_bytes, true);
    json_u64(out, "final_owned_bytes", fin->owned_bytes, true);
    json_u64(out, "final_mapped_bytes", fin->mapped_bytes, true);
    json_u64(out, "quarantined_bytes", fin->quarantined_bytes, true);
    json_u64(out, "quarantined_mapped_bytes", fin->quarantined_mapped_bytes, true);
    json_u64(out, "quarantined_granules", fin->quarantined_granules, true);
    json_u64(out, "leaked_va_bytes", fin->leaked_va_bytes, true);
    fprintf(out, "  \"ledger_balanced\": %s,\n", r->ledger_balanced ? "true" : "false");
    json_u64(out, "pool_hits", fin->pool_hits, true);
    json_u64(out, "pool_misses", fin->pool_misses, true);
    const char *sections[2] = {"calls", "call_failures"};
    for (int s = 0; s < 2; s++) {
        fprintf(out, "  \"%s\": {", sections[s]);
        for (unsigned op = 0; op < ORTMEM_OP_COUNT; op++) {
            fprintf(out, "%s", op ? ", " : "");
            json_string(out, ortmem_backend_op_name((ortmem_backend_op)op));
            fprintf(out, ": %" PRIu64, s == 0 ? fin->calls[op] : fin->failures[op]);
        }
        fputs("},\n", out);
    }
    json_u64(out, "overlaps", r->overlaps, true);
    json_u64(out, "corruptions", r->corruptions, true);
    json_u64(out, "misplaced", r->misplaced, true);
    json_u64(out, "checked_allocations", r->checked_allocations, true);
    json_u64(out, "checked_granules", r->checked_granules, true);
    json_u64(out, "checked_shares", r->checked_shares, true);
    json_u64(out, "checked_bytes", r->checked_bytes, true);
    json_u64(out, "live_allocations_at_end", r->live_allocations_at_end, true);
    json_u64(out, "live_regions_at_end", r->live_regions_at_end, true);
    fputs("  \"holders\": [", out);
    for (size_t i = 0; i < trace->holder_count; i++) {
        const replay_holder *h = &trace->holders[i];
        const replay_holder_result *hr = &r->holders[i];
        fprintf(out, "%s\n    {\"name\": ", i ? "," : "");
        json_string(out, h->name);
        fprintf(out,
                ", \"role\": \"%s\", \"priority\": %d, \"reclaimable\": %s, \"declared\": %s, "
                "\"line\": %" PRIu32 ", \"regions\": %" PRIu64 ", \"allocations\": %" PRIu64
                ", \"arena_capacity_bytes\": %zu, \"pressure_calls\": %" PRIu64
                ", \"pressure_regions\": %" PRIu64 ", \"pressure_decommitted_bytes\": %" PRIu64
                ", \"pressure_reclaimed_bytes\": %" PRIu64 "}",
                ortmem_role_name(h->role), h->priority, h->reclaimable ? "true" : "false",
                h->declared ? "true" : "false", h->line, h->regions, h->allocations,
                hr->arena_capacity, hr->pressure_calls, hr->pressure_regions,
                hr->pressure_decommitted_bytes, hr->pressure_reclaimed_bytes);
    }
    fputs(trace->holder_count ? "\n  ],\n" : "],\n", out);
    /* The authority's ledger at trace end and at peak owned, as
     * ortmem_authority_format writes it. */
    fprintf(out, "  \"ledger\": %s,\n", r->ledger_json ? r->ledger_json : "null");
    fprintf(out, "  \"ledger_at_peak\": %s,\n", r->peak_ledger_json ? r->peak_ledger_json : "null");
    fprintf(out, "  \"ledger_peak_op\": %zu,\n", r->ledger_peak_op);
    fputs("  \"failures\": [", out);
    for (size_t i = 0; i < r->failures_kept; i++) {
        const replay_failure *f = &r->failures[i];
        fprintf(out, "%s\n    {\"line\": %" PRIu32 ", \"op\": ", i ? "," : "", f->line);
        json_string(out, f->what);
        fputs(", \"status\": ", out);
        json_string(out, ortmem_status_str(f->status));
        fputs(", \"detail\": ", out);
        json_string(out, f->detail);
        fputc('}', out);
    }
    fputs(r->failures_kept ? "\n  ],\n" : "],\n", out);
    if (r->timeline_path) {
        fputs("  \"timeline\": {\"path\": ", out);
        json_string(out, r->timeline_path);
        fprintf(out, ", \"rows\": %" PRIu64 ", \"every_ops\": %zu},\n", r->timeline_rows,
                r->timeline_every);
    } else {
        fputs("  \"timeline\": null,\n", out);
    }
    fputs("  \"plot\": ", out);
    if (r->plot_path)
        json_string(out, r->plot_path);
    else
        fputs("null", out);
    fputs(",\n", out);
    fprintf(out,
            "  \"parse_seconds\": %.6f,\n  \"run_seconds\": %.6f,\n"
            "  \"teardown_seconds\": %.6f,\n",
            r->parse_seconds, r->run_seconds, r->teardown_seconds);
    fprintf(out, "  \"clean\": %s\n}\n", replay_result_clean(r) ? "true" : "false");
}
