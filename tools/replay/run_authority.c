/* The replay's authority: one holder per trace holder, the pressure callback
 * of the reclaimable ones, and the ledger captured at its peak and at the end. */
#include "run.h"

#include <stdlib.h>
#include <string.h>

/* ---- pressure: what a reclaimable holder gives back ----
 *
 * Asked for want bytes, a reclaimable holder decommits its regions' committed
 * granules, the most recently created region first, one region's committed
 * runs at a time, until the backend's owned bytes fell by want or it ran out
 * of regions. A granule that another region still maps (a prefix shared into
 * a sequence) is left alone: unmapping it here would release nothing while
 * the other mapping lives. The model follows every decommit, and a region
 * that lost granules this way is "degraded", so a later share from it is
 * skipped rather than failed, as after a failed op. */

static uint64_t owned_now(runner *rn)
{
    ortmem_vmm_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    return ortmem_backend_stats(rn->top, &s) == ORTMEM_OK ? s.owned_bytes : 0;
}

/* Whether granule g of a region is mapped by it alone. */
static bool granule_private(object_run *r, size_t g)
{
    ortmem_granule_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    return ortmem_region_granule_info(r->region, g * r->granule, &info) == ORTMEM_OK &&
           info.state == ORTMEM_GRANULE_MAPPED && info.mappers == 1;
}

/* Decommits the private mapped granules [g0, g1) of region object as one
 * call; false (listed as a failure under the op that asked) when it failed. */
static bool pressure_decommit_run(runner *rn, holder_run *h, uint32_t object, size_t g0, size_t g1)
{
    object_run *r = &rn->objects[object];
    for (size_t g = g0; g < g1; g++)
        check_granule(rn, object, g, "before a decommit under pressure", rn->current_line);
    size_t offset = g0 * r->granule, len = (g1 - g0) * r->granule;
    ortmem_status st = ortmem_region_decommit(r->region, offset, len);
    r->degraded = true;
    if (st != ORTMEM_OK) {
        char what[160];
        snprintf(what, sizeof what, "pressure on holder '%s': decommit %s %zu %zu",
                 rn->trace->holders[h->index].name, replay_object_name(rn->trace, object), offset,
                 len);
        rn->result->pressure_failures++;
        record_failure(rn, rn->current_line, what, st);
        resync(rn, object, g0, g1);
        return false;
    }
    rn->result->holders[h->index].pressure_decommitted_bytes += len;
    for (size_t g = g0; g < g1; g++)
        r->model[g].state = GRANULE_UNMAPPED;
    return true;
}

static uint64_t on_pressure(void *user, uint64_t want_bytes)
{
    holder_run *h = user;
    runner *rn = h->rn;
    replay_holder_result *hr = &rn->result->holders[h->index];
    hr->pressure_calls++;
    uint64_t before = owned_now(rn), reclaimed = 0;
    for (uint32_t object = (uint32_t)rn->trace->object_count;
         object-- > 0 && reclaimed < want_bytes;) {
        const replay_object *o = &rn->trace->objects[object];
        object_run *r = &rn->objects[object];
        if (!o->is_region || o->holder != h->index || r->state != OBJECT_LIVE)
            continue;
        bool touched = false;
        for (size_t g = 0; g < r->granules;) {
            if (r->model[g].state != GRANULE_MAPPED || !granule_private(r, g)) {
                g++;
                continue;
            }
            size_t end = g + 1;
            while (end < r->granules && r->model[end].state == GRANULE_MAPPED &&
                   granule_private(r, end))
                end++;
            touched |= pressure_decommit_run(rn, h, object, g, end);
            g = end;
        }
        if (touched)
            hr->pressure_regions++;
        uint64_t now = owned_now(rn);
        reclaimed = before > now ? before - now : 0;
    }
    hr->pressure_reclaimed_bytes += reclaimed;
    return reclaimed;
}

/* ---- the authority and its holders ---- */

/* The authority on the replay's backend and one holder per trace holder.
 * Without --budget its limit is REPLAY_UNLIMITED_BYTES: nothing is refused,
 * but the ledger by holder is kept all the same. */
bool open_authority(runner *rn)
{
    ortmem_authority_options opt = ORTMEM_AUTHORITY_OPTIONS_INIT;
    opt.limit_bytes = rn->config->budget_set ? rn->config->budget : REPLAY_UNLIMITED_BYTES;
    ortmem_status st = ortmem_authority_create(rn->top, &opt, &rn->authority);
    if (st != ORTMEM_OK) {
        fprintf(rn->err, "ortmem-replay: authority: %s: %s\n", ortmem_status_str(st),
                ortmem_last_error());
        rn->authority = NULL;
        return false;
    }
    for (size_t i = 0; i < rn->trace->holder_count; i++) {
        const replay_holder *th = &rn->trace->holders[i];
        holder_run *h = &rn->holders[i];
        h->rn = rn;
        h->index = (uint16_t)i;
        ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
        ho.name = th->name;
        ho.role = th->role;
        ho.priority = th->priority;
        if (th->reclaimable) {
            ho.on_pressure = on_pressure;
            ho.user = h;
        }
        st = ortmem_holder_register(rn->authority, &ho, &h->holder);
        if (st == ORTMEM_OK)
            st = ortmem_holder_account(h->holder, &h->account);
        if (st != ORTMEM_OK) {
            fprintf(rn->err, "ortmem-replay: holder '%s': %s: %s\n", th->name,
                    ortmem_status_str(st), ortmem_last_error());
            return false;
        }
    }
    return true;
}

void close_authority(runner *rn, bool record)
{
    if (!rn->authority)
        return;
    char what[200];
    for (size_t i = 0; i < rn->trace->holder_count; i++) {
        if (!rn->holders[i].holder)
            continue;
        ortmem_status st = ortmem_holder_unregister(rn->holders[i].holder);
        if (st != ORTMEM_OK && record) {
            snprintf(what, sizeof what, "teardown: unregister holder '%s'",
                     rn->trace->holders[i].name);
            record_teardown_failure(rn, what, st);
        }
        rn->holders[i].holder = NULL;
    }
    ortmem_status st = ortmem_authority_destroy(rn->authority);
    if (st != ORTMEM_OK && record)
        record_teardown_failure(rn, "teardown: destroy the authority", st);
    rn->authority = NULL;
}

/* ---- the ledger ---- */

/* The ledger as ortmem_authority_format writes it, malloc'd; NULL on failure.
 * The JSON loses its trailing newline so it embeds as a value. */
static char *format_ledger(runner *rn, ortmem_report_format format)
{
    size_t needed = 0;
    ortmem_status st = ortmem_authority_format(rn->authority, format, NULL, 0, &needed);
    char *text = NULL;
    for (int attempt = 0; attempt < 3 && (st == ORTMEM_OK || st == ORTMEM_E_RANGE); attempt++) {
        char *grown = realloc(text, needed ? needed : 1);
        if (!grown)
            break;
        text = grown;
        size_t capacity = needed ? needed : 1;
        st = ortmem_authority_format(rn->authority, format, text, capacity, &needed);
        if (st == ORTMEM_OK) {
            size_t len = strlen(text);
            if (format == ORTMEM_REPORT_JSON)
                while (len && (text[len - 1] == '\n' || text[len - 1] == ' '))
                    text[--len] = '\0';
            return text;
        }
    }
    record_teardown_failure(
        rn, format == ORTMEM_REPORT_JSON ? "ledger report (JSON)" : "ledger report (table)", st);
    free(text);
    return NULL;
}

/* Captures the ledger when the authority's owned bytes reach a new peak. */
void capture_peak_ledger(runner *rn, size_t op_index)
{
    replay_result *res = rn->result;
    ortmem_authority_report now = {.struct_size = sizeof now};
    if (ortmem_authority_report_get(rn->authority, &now, NULL, 0) != ORTMEM_OK ||
        now.owned_bytes <= res->ledger_peak_owned)
        return;
    char *table = format_ledger(rn, ORTMEM_REPORT_TABLE);
    char *json = format_ledger(rn, ORTMEM_REPORT_JSON);
    if (!table || !json) {
        free(table);
        free(json);
        return;
    }
    free(res->peak_ledger_table);
    free(res->peak_ledger_json);
    res->peak_ledger_table = table;
    res->peak_ledger_json = json;
    res->ledger_peak_owned = now.owned_bytes;
    res->ledger_peak_op = op_index;
}

/* The authority's ledger at trace end, before teardown changes it. */
void report_ledger(runner *rn)
{
    replay_result *res = rn->result;
    memset(&res->authority, 0, sizeof res->authority);
    res->authority.struct_size = sizeof res->authority;
    ortmem_status st = ortmem_authority_report_get(rn->authority, &res->authority, NULL, 0);
    if (st == ORTMEM_OK)
        res->authority_reported = true;
    else
        record_teardown_failure(rn, "ledger report", st);
    res->ledger_table = format_ledger(rn, ORTMEM_REPORT_TABLE);
    res->ledger_json = format_ledger(rn, ORTMEM_REPORT_JSON);
}
