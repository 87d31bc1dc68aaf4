/* Deferred (fence-ordered) release: the memory stays mapped and charged until
 * the fence completes; poll and drain carry the release out then. The region
 * or arena must outlive its pending releases (a release whose handle is gone
 * by then is reported failed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"
#include "governance/fence.h"
#include "governance/holder.h"

typedef enum om_retirement_kind { OM_RETIRE_DECOMMIT, OM_RETIRE_ARENA_FREE } om_retirement_kind;

struct om_retirement {
    om_retirement *next;
    om_retirement_kind kind;
    ortmem_region *region;
    ortmem_arena *arena;
    size_t offset, len;
    void *ptr;
    ortmem_fence *fence;
    ortmem_holder *holder;
    bool running; /* a poller is carrying it out */
};

/* The holder (and so authority) that a region charges, pinned; or an error. */
static ortmem_status om_holder_of_region(ortmem_region *region, const char *what,
                                         ortmem_holder **out)
{
    ortmem_account account;
    ortmem_status st = ortmem_region_account(region, &account);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "%s: retirement needs a region charged to a holder", what);
    ortmem_holder *h = om_holder_of_account(&account);
    if (!h)
        return OM_ERR(ORTMEM_E_STATE, "%s: the region's account is not a holder's", what);
    st = om_holder_pin(h, what);
    if (st == ORTMEM_OK)
        *out = h;
    return st;
}

static ortmem_status om_retire(om_retirement *d, ortmem_region *region, ortmem_fence *fence,
                               const char *what)
{
    ortmem_holder *h = NULL;
    ortmem_status st = om_handle_pin(fence, OM_KIND_FENCE, what);
    if (st != ORTMEM_OK)
        return st;
    st = om_holder_of_region(region, what, &h);
    if (st != ORTMEM_OK) {
        om_handle_unpin((om_handle *)fence);
        return st;
    }
    om_retirement *entry = om_malloc(sizeof *entry);
    if (!entry) {
        om_holder_unpin(h);
        om_handle_unpin((om_handle *)fence);
        return OM_ERR(ORTMEM_E_NOMEM, "%s: bookkeeping", what);
    }
    *entry = *d;
    entry->fence = fence;
    entry->holder = h;
    entry->running = false;
    ortmem_authority *a = h->authority;
    om_fence_pin(fence);
    pthread_mutex_lock(&a->lock);
    entry->next = a->retirements;
    a->retirements = entry;
    a->retirement_count++;
    h->retirements_pending++;
    pthread_mutex_unlock(&a->lock);
    om_holder_unpin(h);
    om_handle_unpin((om_handle *)fence);
    return ORTMEM_OK;
}

ortmem_status ortmem_region_decommit_after(ortmem_region *region, size_t offset, size_t len,
                                           ortmem_fence *fence)
{
    om_error_clear();
    size_t size = ortmem_region_size(region);
    if (!size)
        return OM_ERR(ORTMEM_E_HANDLE, "region decommit after: %p is not a live region",
                      (void *)region);
    if (len == 0 || offset > size || len > size - offset)
        return OM_ERR(ORTMEM_E_RANGE, "region decommit after: [%zu, +%zu) outside %zu bytes",
                      offset, len, size);
    om_retirement d = {.kind = OM_RETIRE_DECOMMIT, .region = region, .offset = offset, .len = len};
    return om_retire(&d, region, fence, "region decommit after");
}

ortmem_status ortmem_arena_free_after(ortmem_arena *arena, void *ptr, ortmem_fence *fence)
{
    om_error_clear();
    if (!ptr)
        return OM_ERR(ORTMEM_E_INVALID, "arena free after: pointer is NULL");
    ortmem_region *region = ortmem_arena_region(arena);
    if (!region)
        return OM_ERR(ORTMEM_E_HANDLE, "arena free after: %p is not a live arena", (void *)arena);
    om_retirement d = {.kind = OM_RETIRE_ARENA_FREE, .arena = arena, .ptr = ptr};
    return om_retire(&d, region, fence, "arena free after");
}

static ortmem_status om_carry_out(om_retirement *d)
{
    if (d->kind == OM_RETIRE_DECOMMIT)
        return ortmem_region_decommit(d->region, d->offset, d->len);
    return ortmem_arena_free(d->arena, d->ptr);
}

ortmem_status ortmem_authority_poll(ortmem_authority *a, ortmem_retire_report *report)
{
    om_error_clear();
    ortmem_status st = report ? OM_STRUCT_CHECK("authority poll", "report", report) : ORTMEM_OK;
    if (st != ORTMEM_OK)
        return st;
    st = om_authority_pin(a, "authority poll");
    if (st != ORTMEM_OK)
        return st;
    /* Claim the idle entries, then work without the lock. */
    pthread_mutex_lock(&a->lock);
    size_t n = 0;
    for (om_retirement *d = a->retirements; d; d = d->next)
        n += !d->running;
    om_retirement **mine = n ? om_malloc(n * sizeof *mine) : NULL;
    size_t taken = 0;
    for (om_retirement *d = a->retirements; mine && d; d = d->next) {
        if (!d->running) {
            d->running = true;
            mine[taken++] = d;
        }
    }
    pthread_mutex_unlock(&a->lock);
    ortmem_retire_report r = {sizeof r, 0, 0, 0, 0, 0};
    ortmem_status first_failure = ORTMEM_OK;
    om_error_saved first_error = {""};
    bool *done = taken ? om_calloc(taken, sizeof *done) : NULL;
    /* Without the lists nothing is carried out: every release stays pending. */
    if (n && (!mine || !done)) {
        first_failure = ORTMEM_E_NOMEM;
        snprintf(first_error.detail, sizeof first_error.detail,
                 "no memory for the list of %zu retirements", n);
    }
    for (size_t i = 0; done && i < taken; i++) {
        om_retirement *d = mine[i];
        if (!om_fence_complete(d->fence))
            continue;
        ortmem_status out = om_carry_out(d);
        /* A release that failed for memory or in the backend changed nothing:
         * it stays pending, its memory mapped and charged, and the next poll
         * or drain tries it again. One whose region or arena is gone (or that
         * was refused) cannot succeed later and is dropped. */
        done[i] = out != ORTMEM_E_NOMEM && out != ORTMEM_E_BACKEND;
        if (out == ORTMEM_OK) {
            r.completed++;
            r.decommitted_bytes += d->kind == OM_RETIRE_DECOMMIT ? d->len : 0;
        } else if (out == ORTMEM_E_QUARANTINED) {
            r.quarantined++;
        } else {
            r.failed++;
            if (first_failure == ORTMEM_OK) {
                first_failure = out;
                om_error_save(&first_error);
            }
        }
    }
    pthread_mutex_lock(&a->lock);
    for (size_t i = 0; i < taken; i++) {
        om_retirement *d = mine[i];
        d->running = false;
        if (!done || !done[i])
            continue;
        om_retirement **link = &a->retirements;
        while (*link != d)
            link = &(*link)->next;
        *link = d->next;
        a->retirement_count--;
        d->holder->retirements_pending--;
        om_fence_unpin(d->fence);
        om_free(d);
    }
    r.pending = a->retirement_count;
    pthread_mutex_unlock(&a->lock);
    om_free(done);
    om_free(mine);
    if (report) {
        r.struct_size = report->struct_size;
        memcpy(report, &r, report->struct_size);
    }
    om_authority_unpin(a);
    if (first_failure == ORTMEM_E_NOMEM && r.failed == 0)
        return OM_ERR(first_failure, "authority poll: %s; nothing changed", first_error.detail);
    if (first_failure != ORTMEM_OK)
        return OM_ERR(first_failure,
                      "authority poll: %llu retirements failed and changed nothing (those that "
                      "failed for memory or in the backend stay pending); first: %s",
                      (unsigned long long)r.failed, first_error.detail);
    return ORTMEM_OK;
}

ortmem_status ortmem_authority_drain(ortmem_authority *a, int64_t timeout_ms,
                                     ortmem_retire_report *report)
{
    om_error_clear();
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    ortmem_retire_report total = {sizeof total, 0, 0, 0, 0, 0};
    ortmem_status st, failure = ORTMEM_OK;
    om_error_saved first_error = {""};
    for (;;) {
        ortmem_retire_report r = {sizeof r, 0, 0, 0, 0, 0};
        st = ortmem_authority_poll(a, &r);
        if (st != ORTMEM_OK && failure == ORTMEM_OK) {
            failure = st;
            om_error_save(&first_error);
        }
        total.completed += r.completed;
        total.quarantined += r.quarantined;
        total.failed += r.failed;
        total.decommitted_bytes += r.decommitted_bytes;
        total.pending = r.pending;
        /* A failed release is reported and the others are waited for; only a
         * poll that could not run at all (bad handle or report) ends early. */
        if ((st != ORTMEM_OK && r.failed == 0) || r.pending == 0)
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t waited =
            (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (timeout_ms >= 0 && waited >= timeout_ms) {
            st = OM_ERR(ORTMEM_E_TIMEOUT,
                        "authority drain: %llu retirements still pending after %lld ms",
                        (unsigned long long)r.pending, (long long)waited);
            break;
        }
        struct timespec pause = {0, 200000}; /* 0.2 ms between polls */
        nanosleep(&pause, NULL);
    }
    if (report && report->struct_size && report->struct_size <= sizeof total) {
        total.struct_size = report->struct_size;
        memcpy(report, &total, report->struct_size);
    }
    if (st == ORTMEM_OK && failure != ORTMEM_OK)
        return om_error_restore(&first_error, failure);
    return st;
}
