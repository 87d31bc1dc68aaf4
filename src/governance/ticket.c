/* Tickets: requests waiting for capacity. Served in order of effective
 * priority (priority + aging per second waited), then arrival; the head of the
 * queue is served first and a request behind it waits its turn. A ticket's
 * budget is held (as a grant) under the authority lock before its waiter
 * wakes, so nobody can steal it; grant, cancel and timeout are decided under
 * that lock, so exactly one of them wins. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"
#include "governance/holder.h"

typedef enum om_ticket_state {
    OM_TICKET_WAITING,
    OM_TICKET_GRANTED,
    OM_TICKET_CANCELLED
} om_ticket_state;

struct ortmem_ticket {
    om_handle hdr;
    ortmem_holder *holder;
    uint64_t bytes;
    int priority;
    uint64_t seq;
    struct timespec submitted;
    om_ticket_state state;
    ortmem_grant *grant; /* set when granted */
    unsigned waiters;    /* threads inside ortmem_ticket_wait */
    bool consumed;       /* handed back: freed by the last waiter */
    bool no_bookkeeping; /* its turn came but the grant could not be allocated */
    ortmem_ticket *next;
};

static double om_seconds_since(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t->tv_sec) + (double)(now.tv_nsec - t->tv_nsec) * 1e-9;
}

static ortmem_ticket *om_queue_head(ortmem_authority *a)
{
    return a->tickets;
}

static void om_queue_remove(ortmem_authority *a, ortmem_ticket *t)
{
    ortmem_ticket **link = &a->tickets;
    while (*link && *link != t)
        link = &(*link)->next;
    if (*link)
        *link = t->next;
    t->next = NULL;
    t->holder->tickets_waiting--;
}

/* The waiting ticket to serve next: highest effective priority, then oldest. */
static ortmem_ticket *om_next_ticket(ortmem_authority *a)
{
    ortmem_ticket *best = NULL;
    double best_priority = 0;
    for (ortmem_ticket *t = om_queue_head(a); t; t = t->next) {
        double p = t->priority + a->aging_per_second * om_seconds_since(&t->submitted);
        if (!best || p > best_priority || (p == best_priority && t->seq < best->seq)) {
            best = t;
            best_priority = p;
        }
    }
    return best;
}

void om_tickets_serve_locked(ortmem_authority *a)
{
    for (;;) {
        ortmem_ticket *t = om_next_ticket(a);
        if (!t || !om_fits_locked(a, t->holder, t->bytes, t->bytes))
            return;
        ortmem_holder *h = t->holder;
        ortmem_grant *g = NULL;
        t->no_bookkeeping = om_grant_new(h, t->bytes, &g) != ORTMEM_OK;
        if (t->no_bookkeeping)
            return; /* the ticket keeps waiting; its wait reports ORTMEM_E_NOMEM */
        h->held_owned += t->bytes;
        h->held_mapped += t->bytes;
        a->mapped_used += t->bytes;
        om_holder_restate(a, h);
        om_queue_remove(a, t);
        t->state = OM_TICKET_GRANTED;
        t->grant = g;
        pthread_cond_broadcast(&a->changed);
    }
}

ortmem_status ortmem_ticket_submit(ortmem_holder *h, uint64_t bytes, int priority,
                                   ortmem_ticket **out)
{
    om_error_clear();
    if (!out || bytes == 0)
        return OM_ERR(ORTMEM_E_INVALID, "ticket submit: out is NULL or bytes is 0");
    ortmem_status st = om_holder_pin(h, "ticket submit");
    if (st != ORTMEM_OK)
        return st;
    ortmem_authority *a = h->authority;
    ortmem_ticket *t = om_calloc(1, sizeof *t);
    if (!t) {
        om_holder_unpin(h);
        return OM_ERR(ORTMEM_E_NOMEM, "ticket submit: bookkeeping");
    }
    t->holder = h;
    t->bytes = bytes;
    t->priority = priority;
    clock_gettime(CLOCK_MONOTONIC, &t->submitted);
    st = om_handle_register(&t->hdr, OM_KIND_TICKET);
    if (st != ORTMEM_OK) {
        om_free(t);
        om_holder_unpin(h);
        return st;
    }
    pthread_mutex_lock(&a->lock);
    if (a->limit < bytes)
        st = OM_ERR(ORTMEM_E_BUDGET,
                    "ticket submit: '%s' asks %llu bytes, more than the limit %llu could ever give",
                    h->name, (unsigned long long)bytes, (unsigned long long)a->limit);
    else if (a->mapped_allowance && a->mapped_allowance < bytes)
        st = OM_ERR(ORTMEM_E_BUDGET,
                    "ticket submit: '%s' asks %llu bytes, more than the mapped allowance %llu "
                    "could ever give",
                    h->name, (unsigned long long)bytes, (unsigned long long)a->mapped_allowance);
    if (st == ORTMEM_OK) {
        t->seq = ++a->ticket_seq;
        ortmem_ticket **link = &a->tickets;
        while (*link)
            link = &(*link)->next;
        *link = t;
        h->tickets_waiting++;
        om_tickets_serve_locked(a);
    }
    pthread_mutex_unlock(&a->lock);
    if (st != ORTMEM_OK) {
        om_handle_pin(t, OM_KIND_TICKET, "ticket submit");
        (void)om_handle_retire(&t->hdr, "ticket submit");
        om_free(t);
        om_handle_end_destroy();
    } else {
        *out = t;
    }
    om_holder_unpin(h);
    return st;
}

/* Ends the ticket handle once decided; the last thread inside wait frees it. */
static void om_ticket_consume_locked(ortmem_ticket *t)
{
    t->consumed = true;
}

static void om_ticket_finish(ortmem_ticket *t, bool last)
{
    if (!last)
        return;
    (void)om_handle_retire(&t->hdr, "ticket");
    om_free(t);
    om_handle_end_destroy();
}

ortmem_status ortmem_ticket_wait(ortmem_ticket *t, int64_t timeout_ms, ortmem_grant **grant)
{
    om_error_clear();
    if (!grant)
        return OM_ERR(ORTMEM_E_INVALID, "ticket wait: grant output is NULL");
    ortmem_status st = om_handle_pin(t, OM_KIND_TICKET, "ticket wait");
    if (st != ORTMEM_OK)
        return st;
    ortmem_authority *a = t->holder->authority;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    if (timeout_ms > 0) {
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&a->lock);
    if (t->consumed) {
        pthread_mutex_unlock(&a->lock);
        om_handle_unpin(&t->hdr);
        return OM_ERR(ORTMEM_E_HANDLE, "ticket wait: the ticket was consumed already");
    }
    t->waiters++;
    for (;;) {
        /* Aging may have moved this ticket up since capacity last changed. */
        om_tickets_serve_locked(a);
        if (t->state != OM_TICKET_WAITING || timeout_ms == 0 || t->no_bookkeeping)
            break;
        int rc = timeout_ms < 0 ? pthread_cond_wait(&a->changed, &a->lock)
                                : pthread_cond_timedwait(&a->changed, &a->lock, &deadline);
        if (rc == ETIMEDOUT && t->state == OM_TICKET_WAITING)
            break;
    }
    bool decided = t->state != OM_TICKET_WAITING && !t->consumed;
    if (t->state == OM_TICKET_GRANTED && decided) {
        *grant = t->grant;
        st = ORTMEM_OK;
    } else if (t->state == OM_TICKET_CANCELLED) {
        st = OM_ERR(ORTMEM_E_CANCELLED, "ticket wait: the ticket for %llu bytes was cancelled",
                    (unsigned long long)t->bytes);
    } else if (t->state == OM_TICKET_GRANTED) {
        st = OM_ERR(ORTMEM_E_HANDLE, "ticket wait: another waiter took the grant");
    } else if (t->no_bookkeeping) {
        /* Waiting on would never end: nobody signals capacity that is there. */
        st = OM_ERR(ORTMEM_E_NOMEM,
                    "ticket wait: %llu bytes for '%s' are available but the grant's "
                    "bookkeeping could not be allocated; the ticket still waits",
                    (unsigned long long)t->bytes, t->holder->name);
    } else {
        st = OM_ERR(ORTMEM_E_TIMEOUT,
                    "ticket wait: %llu bytes for '%s' not available within %lld ms (available "
                    "%llu of limit %llu); the ticket still waits",
                    (unsigned long long)t->bytes, t->holder->name, (long long)timeout_ms,
                    (unsigned long long)(a->used < a->limit ? a->limit - a->used : 0),
                    (unsigned long long)a->limit);
    }
    if (decided)
        om_ticket_consume_locked(t);
    bool last = --t->waiters == 0 && t->consumed;
    pthread_mutex_unlock(&a->lock);
    if (last) {
        om_ticket_finish(t, true);
        return st;
    }
    om_handle_unpin(&t->hdr);
    return st;
}

ortmem_status ortmem_ticket_cancel(ortmem_ticket *t)
{
    om_error_clear();
    ortmem_status st = om_handle_pin(t, OM_KIND_TICKET, "ticket cancel");
    if (st != ORTMEM_OK)
        return st;
    ortmem_authority *a = t->holder->authority;
    pthread_mutex_lock(&a->lock);
    if (t->consumed) {
        pthread_mutex_unlock(&a->lock);
        om_handle_unpin(&t->hdr);
        return OM_ERR(ORTMEM_E_HANDLE, "ticket cancel: the ticket was consumed already");
    }
    ortmem_grant *abandoned = NULL;
    if (t->state == OM_TICKET_WAITING) {
        om_queue_remove(a, t);
    } else if (t->state == OM_TICKET_GRANTED) {
        abandoned = t->grant; /* cancel wins: the grant is aborted below */
        t->grant = NULL;
    }
    t->state = OM_TICKET_CANCELLED;
    pthread_cond_broadcast(&a->changed);
    bool last = t->waiters == 0;
    if (last)
        om_ticket_consume_locked(t);
    pthread_mutex_unlock(&a->lock);
    if (abandoned)
        (void)ortmem_grant_abort(abandoned);
    if (last) {
        om_ticket_finish(t, true);
        return ORTMEM_OK;
    }
    om_handle_unpin(&t->hdr);
    return ORTMEM_OK;
}
