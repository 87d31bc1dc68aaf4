/* The ledger report: per holder and role, as numbers, a table or JSON. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "governance/holder.h"

static int om_by_owned_desc(const void *x, const void *y)
{
    const ortmem_holder_report *a = x, *b = y;
    if (a->owned_bytes != b->owned_bytes)
        return (a->owned_bytes < b->owned_bytes) - (a->owned_bytes > b->owned_bytes);
    return strcmp(a->name, b->name);
}

static void om_holder_report_fill(const ortmem_holder *h, ortmem_holder_report *r)
{
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", h->name);
    r->role = h->role;
    r->priority = h->priority;
    r->owned_bytes = h->owned;
    r->owned_peak_bytes = h->owned_peak;
    r->mapped_bytes = h->mapped;
    r->requested_bytes = h->requested;
    r->overhead_bytes = h->owned > h->requested ? h->owned - h->requested : 0;
    r->held_bytes = h->held_owned;
    r->leased_bytes = h->leased;
}

ortmem_status ortmem_holder_report_get(ortmem_holder *h, ortmem_holder_report *report)
{
    om_error_clear();
    if (!report)
        return OM_ERR(ORTMEM_E_INVALID, "holder report: output is NULL");
    ortmem_status st = om_holder_pin(h, "holder report");
    if (st != ORTMEM_OK)
        return st;
    pthread_mutex_lock(&h->authority->lock);
    om_holder_report_fill(h, report);
    pthread_mutex_unlock(&h->authority->lock);
    om_holder_unpin(h);
    return ORTMEM_OK;
}

/* Snapshot under the lock: the report and every holder, largest first. */
static ortmem_status om_snapshot(ortmem_authority *a, ortmem_authority_report *rep,
                                 ortmem_holder_report **holders, size_t *count)
{
    pthread_mutex_lock(&a->lock);
    size_t n = a->holder_count;
    ortmem_holder_report *all = om_calloc(n ? n : 1, sizeof *all);
    if (!all) {
        pthread_mutex_unlock(&a->lock);
        return OM_ERR(ORTMEM_E_NOMEM, "authority report: %zu holders", n);
    }
    memset(rep, 0, sizeof *rep);
    rep->struct_size = sizeof *rep;
    rep->limit_bytes = a->limit;
    rep->mapped_allowance_bytes = a->mapped_allowance;
    rep->owned_bytes = a->owned_total;
    rep->owned_peak_bytes = a->owned_peak;
    rep->mapped_bytes = a->mapped_total;
    rep->claimed_bytes = a->used > a->owned_total ? a->used - a->owned_total : 0;
    rep->available_bytes = a->used < a->limit ? a->limit - a->used : 0;
    rep->refusals = a->refusals;
    rep->pressure_calls = a->pressure_calls;
    rep->pressure_reclaimed_bytes = a->pressure_reclaimed;
    rep->retirements_pending = a->retirement_count;
    rep->holder_count = n;
    for (size_t i = 0; i < n; i++) {
        const ortmem_holder *h = a->holders[i];
        om_holder_report_fill(h, &all[i]);
        rep->tickets_waiting += h->tickets_waiting;
        rep->by_role_owned[h->role] += h->owned;
        rep->by_role_mapped[h->role] += h->mapped;
        rep->by_role_requested[h->role] += h->requested;
    }
    pthread_mutex_unlock(&a->lock);
    qsort(all, n, sizeof *all, om_by_owned_desc);
    *holders = all;
    *count = n;
    return ORTMEM_OK;
}

ortmem_status ortmem_authority_report_get(ortmem_authority *a, ortmem_authority_report *report,
                                          ortmem_holder_report *holders, size_t holder_capacity)
{
    om_error_clear();
    ortmem_status st = OM_STRUCT_CHECK("authority report", "report", report);
    if (st != ORTMEM_OK)
        return st;
    st = om_authority_pin(a, "authority report");
    if (st != ORTMEM_OK)
        return st;
    ortmem_authority_report rep;
    ortmem_holder_report *all = NULL;
    size_t n = 0;
    st = om_snapshot(a, &rep, &all, &n);
    if (st == ORTMEM_OK) {
        rep.struct_size = report->struct_size;
        memcpy(report, &rep, report->struct_size);
        if (holders)
            memcpy(holders, all, (n < holder_capacity ? n : holder_capacity) * sizeof *holders);
    }
    om_free(all);
    om_authority_unpin(a);
    return st;
}

/* ---- text ---- */

typedef struct om_text {
    char *buf;
    size_t cap, len; /* len counts what would have been written */
} om_text;

static void om_put(om_text *t, const char *fmt, ...) ORTMEM_PRINTF(2, 3);

static void om_put(om_text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = t->len < t->cap ? t->cap - t->len : 0;
    int n = vsnprintf(room ? t->buf + t->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->len += (size_t)n;
}

static double om_mib(uint64_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

static void om_json_string(om_text *t, const char *s)
{
    om_put(t, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            om_put(t, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f) /* UTF-8 names pass through as they are */
            om_put(t, "\\u%04x", *p);
        else
            om_put(t, "%c", *p);
    }
    om_put(t, "\"");
}

static void om_format_table(om_text *t, const ortmem_authority_report *r,
                            const ortmem_holder_report *h, size_t n)
{
    /* A limit this large stands for "no budget" (an authority kept for its
     * ledger alone): say so rather than print 8 million TiB. */
    bool unlimited = r->limit_bytes >= ((uint64_t)1 << 62);
    char limit[48] = "none", available[48] = "unlimited";
    if (!unlimited) {
        snprintf(limit, sizeof limit, "%.2f MiB", om_mib(r->limit_bytes));
        snprintf(available, sizeof available, "%.2f MiB", om_mib(r->available_bytes));
    }
    om_put(t,
           "authority: limit %s, owned %.2f MiB (peak %.2f), claimed %.2f MiB, available %s, "
           "mapped %.2f MiB\n",
           limit, om_mib(r->owned_bytes), om_mib(r->owned_peak_bytes), om_mib(r->claimed_bytes),
           available, om_mib(r->mapped_bytes));
    om_put(t,
           "refusals %llu, pressure calls %llu (reclaimed %.2f MiB), tickets waiting %llu, "
           "retirements pending %llu\n\n",
           (unsigned long long)r->refusals, (unsigned long long)r->pressure_calls,
           om_mib(r->pressure_reclaimed_bytes), (unsigned long long)r->tickets_waiting,
           (unsigned long long)r->retirements_pending);
    om_put(t, "%-20s %-9s %11s %12s %12s %12s %12s %12s %12s\n", "holder", "role", "prio",
           "owned MiB", "peak MiB", "mapped MiB", "request MiB", "overhead MiB", "leased MiB");
    for (size_t i = 0; i < n; i++)
        om_put(t, "%-20.20s %-9s %11d %12.2f %12.2f %12.2f %12.2f %12.2f %12.2f\n", h[i].name,
               ortmem_role_name(h[i].role), h[i].priority, om_mib(h[i].owned_bytes),
               om_mib(h[i].owned_peak_bytes), om_mib(h[i].mapped_bytes),
               om_mib(h[i].requested_bytes), om_mib(h[i].overhead_bytes),
               om_mib(h[i].leased_bytes));
    om_put(t, "\n%-20s %12s %12s %12s %12s\n", "role", "owned MiB", "mapped MiB", "request MiB",
           "overhead MiB");
    for (unsigned role = 0; role < ORTMEM_ROLE_COUNT; role++) {
        uint64_t owned = r->by_role_owned[role], requested = r->by_role_requested[role];
        om_put(t, "%-20s %12.2f %12.2f %12.2f %12.2f\n", ortmem_role_name((ortmem_role)role),
               om_mib(owned), om_mib(r->by_role_mapped[role]), om_mib(requested),
               om_mib(owned > requested ? owned - requested : 0));
    }
}

static void om_format_json(om_text *t, const ortmem_authority_report *r,
                           const ortmem_holder_report *h, size_t n)
{
    om_put(t,
           "{\"limit_bytes\": %llu, \"mapped_allowance_bytes\": %llu, \"owned_bytes\": %llu, "
           "\"owned_peak_bytes\": %llu, \"mapped_bytes\": %llu, \"claimed_bytes\": %llu, "
           "\"available_bytes\": %llu, \"refusals\": %llu, \"pressure_calls\": %llu, "
           "\"pressure_reclaimed_bytes\": %llu, \"tickets_waiting\": %llu, "
           "\"retirements_pending\": %llu, \"roles\": {",
           (unsigned long long)r->limit_bytes, (unsigned long long)r->mapped_allowance_bytes,
           (unsigned long long)r->owned_bytes, (unsigned long long)r->owned_peak_bytes,
           (unsigned long long)r->mapped_bytes, (unsigned long long)r->claimed_bytes,
           (unsigned long long)r->available_bytes, (unsigned long long)r->refusals,
           (unsigned long long)r->pressure_calls, (unsigned long long)r->pressure_reclaimed_bytes,
           (unsigned long long)r->tickets_waiting, (unsigned long long)r->retirements_pending);
    for (unsigned role = 0; role < ORTMEM_ROLE_COUNT; role++) {
        uint64_t owned = r->by_role_owned[role], requested = r->by_role_requested[role];
        om_put(t,
               "%s\"%s\": {\"owned_bytes\": %llu, \"mapped_bytes\": %llu, "
               "\"requested_bytes\": %llu, \"overhead_bytes\": %llu}",
               role ? ", " : "", ortmem_role_name((ortmem_role)role), (unsigned long long)owned,
               (unsigned long long)r->by_role_mapped[role], (unsigned long long)requested,
               (unsigned long long)(owned > requested ? owned - requested : 0));
    }
    om_put(t, "}, \"holders\": [");
    for (size_t i = 0; i < n; i++) {
        om_put(t, "%s{\"name\": ", i ? ", " : "");
        om_json_string(t, h[i].name);
        om_put(t,
               ", \"role\": \"%s\", \"priority\": %d, \"owned_bytes\": %llu, "
               "\"owned_peak_bytes\": %llu, \"mapped_bytes\": %llu, \"requested_bytes\": %llu, "
               "\"overhead_bytes\": %llu, \"held_bytes\": %llu, \"leased_bytes\": %llu}",
               ortmem_role_name(h[i].role), h[i].priority, (unsigned long long)h[i].owned_bytes,
               (unsigned long long)h[i].owned_peak_bytes, (unsigned long long)h[i].mapped_bytes,
               (unsigned long long)h[i].requested_bytes, (unsigned long long)h[i].overhead_bytes,
               (unsigned long long)h[i].held_bytes, (unsigned long long)h[i].leased_bytes);
    }
    om_put(t, "]}\n");
}

ortmem_status ortmem_authority_format(ortmem_authority *a, ortmem_report_format format,
                                      char *buffer, size_t capacity, size_t *needed)
{
    om_error_clear();
    if ((!buffer && capacity) || (format != ORTMEM_REPORT_TABLE && format != ORTMEM_REPORT_JSON))
        return OM_ERR(ORTMEM_E_INVALID, "authority format: NULL buffer or unknown format %d",
                      (int)format);
    ortmem_status st = om_authority_pin(a, "authority format");
    if (st != ORTMEM_OK)
        return st;
    ortmem_authority_report rep;
    ortmem_holder_report *all = NULL;
    size_t n = 0;
    st = om_snapshot(a, &rep, &all, &n);
    if (st == ORTMEM_OK) {
        om_text t = {buffer, capacity, 0};
        if (capacity)
            buffer[0] = '\0';
        if (format == ORTMEM_REPORT_TABLE)
            om_format_table(&t, &rep, all, n);
        else
            om_format_json(&t, &rep, all, n);
        if (needed)
            *needed = t.len + 1;
        if (t.len >= capacity)
            st = OM_ERR(ORTMEM_E_RANGE, "authority format: %zu bytes needed, buffer holds %zu",
                        t.len + 1, capacity);
    }
    om_free(all);
    om_authority_unpin(a);
    return st;
}
