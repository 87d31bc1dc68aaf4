/* Tickets (waiting for capacity: priority, FIFO, aging, cancel, the
 * timeout/grant race) and deferred, fence-ordered release (decommit and arena
 * free after a fence, poll, drain, failed and quarantined outcomes, lifetimes).
 * Sizes are in units of one 64 KiB granule; the issue's scenario (tickets of
 * 10 and 8 GB under a full budget) keeps its proportions with a 20-unit limit. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "support.h"

#define G TEST_GRANULE
#define U ((uint64_t)G) /* one unit */

/* ---- helpers ---- */

typedef struct gov {
    ortmem_backend *cpu;
    ortmem_backend *backend; /* cpu, or a fault wrapper around it */
    ortmem_authority *authority;
} gov;

static gov gov_on(ortmem_backend *cpu, ortmem_backend *backend, uint64_t limit_units, double aging)
{
    ortmem_authority_options opt = ORTMEM_AUTHORITY_OPTIONS_INIT;
    opt.limit_bytes = limit_units * U;
    opt.aging_per_second = aging;
    gov g = {cpu, backend, NULL};
    OK(ortmem_authority_create(backend, &opt, &g.authority));
    return g;
}

static gov gov_new(uint64_t limit_units, double aging)
{
    ortmem_backend *cpu = test_backend();
    return gov_on(cpu, cpu, limit_units, aging);
}

static void gov_free(gov *g)
{
    OK(ortmem_authority_destroy(g->authority));
    if (g->backend != g->cpu)
        (void)ortmem_backend_destroy(g->backend);
    (void)ortmem_backend_destroy(g->cpu);
}

static ortmem_holder *holder_new(gov *g, const char *name)
{
    ortmem_holder_options opt = ORTMEM_HOLDER_OPTIONS_INIT;
    opt.name = name;
    ortmem_holder *h = NULL;
    OK(ortmem_holder_register(g->authority, &opt, &h));
    return h;
}

static ortmem_authority_report report_of(gov *g)
{
    ortmem_authority_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    OK(ortmem_authority_report_get(g->authority, &r, NULL, 0));
    return r;
}

static ortmem_holder_report holder_report(gov *g, const char *name)
{
    ortmem_authority_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    ortmem_holder_report hs[16];
    OK(ortmem_authority_report_get(g->authority, &r, hs, 16));
    for (size_t i = 0; i < r.holder_count && i < 16; i++) {
        if (strcmp(hs[i].name, name) == 0)
            return hs[i];
    }
    cr_assert_fail("no holder '%s' in the report", name);
    ortmem_holder_report none;
    memset(&none, 0, sizeof none);
    return none;
}

/* Charges units to h through a grant (memory the engine maps itself). */
static void charge(ortmem_holder *h, uint64_t units)
{
    ortmem_grant *gr = NULL;
    OK(ortmem_grant_prepare(h, units * U, &gr));
    OK(ortmem_grant_charge(gr, units * U));
}

/* The granted ticket's grant, or NULL when wait(0) says it still waits. */
static ortmem_grant *poll_ticket(ortmem_ticket *t)
{
    ortmem_grant *gr = NULL;
    ortmem_status st = ortmem_ticket_wait(t, 0, &gr);
    cr_assert(st == ORTMEM_OK || st == ORTMEM_E_TIMEOUT, "ticket wait(0) -> %s: %s",
              ortmem_status_str(st), ortmem_last_error());
    if (st == ORTMEM_OK)
        cr_assert_not_null(gr);
    return st == ORTMEM_OK ? gr : NULL;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static ortmem_region *region_for(gov *g, ortmem_holder *h, size_t size)
{
    ortmem_account acct;
    OK(ortmem_holder_account(h, &acct));
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    opt.size = size;
    opt.account = &acct;
    ortmem_region *r = NULL;
    OK(ortmem_region_create(g->backend, &opt, &r));
    return r;
}

static ortmem_retire_report retire_report(void)
{
    ortmem_retire_report rr;
    memset(&rr, 0, sizeof rr);
    rr.struct_size = sizeof rr;
    return rr;
}

/* ---- the issue's scenario ---- */

Test(tickets, the_issue_scenario_grants_exactly_one_and_nobody_steals_it)
{
    gov g = gov_new(20, 0);
    ortmem_holder *filler = holder_new(&g, "filler");
    ortmem_holder *ha = holder_new(&g, "ten");
    ortmem_holder *hb = holder_new(&g, "eight");
    ortmem_holder *hc = holder_new(&g, "thief");
    charge(filler, 20);
    cr_assert_eq(report_of(&g).available_bytes, 0);

    ortmem_ticket *t10 = NULL, *t8 = NULL;
    OK(ortmem_ticket_submit(ha, 10 * U, 0, &t10));
    OK(ortmem_ticket_submit(hb, 8 * U, 0, &t8));
    cr_assert_null(poll_ticket(t10));
    cr_assert_null(poll_ticket(t8));
    ortmem_authority_report r = report_of(&g);
    cr_assert_eq(r.tickets_waiting, 2);
    cr_assert_eq(r.claimed_bytes, 0);

    /* A release of 12 grants exactly the 10-unit ticket, charged before anyone wakes. */
    OK(ortmem_holder_refund(filler, 12 * U));
    r = report_of(&g);
    cr_assert_eq(r.owned_bytes, 8 * U);
    cr_assert_eq(r.claimed_bytes, 10 * U);
    cr_assert_eq(r.available_bytes, 2 * U);
    cr_assert_eq(r.tickets_waiting, 1);
    cr_assert_eq(holder_report(&g, "ten").held_bytes, 10 * U);
    cr_assert_eq(holder_report(&g, "eight").held_bytes, 0);

    /* A fresh 12-unit request cannot steal it, and its refusal changes nothing. */
    ortmem_grant *stolen = NULL;
    EXPECT_STATUS(ortmem_grant_prepare(hc, 12 * U, &stolen), ORTMEM_E_BUDGET);
    cr_assert(strstr(ortmem_last_error(), "requested 786432"), "%s", ortmem_last_error());
    cr_assert(strstr(ortmem_last_error(), "available 131072"), "%s", ortmem_last_error());
    cr_assert(strstr(ortmem_last_error(), "limit 1310720"), "%s", ortmem_last_error());
    ortmem_authority_report after = report_of(&g);
    cr_assert_eq(after.owned_bytes, r.owned_bytes);
    cr_assert_eq(after.claimed_bytes, r.claimed_bytes);
    cr_assert_eq(after.refusals, r.refusals + 1);

    ortmem_grant *g10 = poll_ticket(t10);
    cr_assert_not_null(g10, "the 10-unit ticket was granted");
    cr_assert_null(poll_ticket(t8), "the 8-unit ticket still waits");
    /* The ticket is consumed by the wait that handed out its grant. */
    ortmem_grant *again = NULL;
    EXPECT_STATUS(ortmem_ticket_wait(t10, 0, &again), ORTMEM_E_HANDLE);

    /* A further release of 6 grants the 8-unit ticket. */
    OK(ortmem_holder_refund(filler, 6 * U));
    ortmem_grant *g8 = poll_ticket(t8);
    cr_assert_not_null(g8);
    r = report_of(&g);
    cr_assert_eq(r.tickets_waiting, 0);
    cr_assert_eq(r.owned_bytes, 2 * U);
    cr_assert_eq(r.claimed_bytes, 18 * U);
    cr_assert_eq(r.available_bytes, 0);

    OK(ortmem_grant_charge(g10, 10 * U));
    OK(ortmem_grant_charge(g8, 7 * U)); /* partial: one unit refunded */
    r = report_of(&g);
    cr_assert_eq(r.owned_bytes, 19 * U);
    cr_assert_eq(r.claimed_bytes, 0);
    cr_assert_eq(r.available_bytes, U);

    OK(ortmem_holder_refund(filler, 2 * U));
    OK(ortmem_holder_refund(ha, 10 * U));
    OK(ortmem_holder_refund(hb, 7 * U));
    OK(ortmem_holder_unregister(filler));
    OK(ortmem_holder_unregister(ha));
    OK(ortmem_holder_unregister(hb));
    OK(ortmem_holder_unregister(hc));
    gov_free(&g);
}

Test(tickets, a_ticket_that_fits_is_granted_at_submit)
{
    gov g = gov_new(20, 0);
    ortmem_holder *h = holder_new(&g, "h");
    ortmem_ticket *t = NULL;
    OK(ortmem_ticket_submit(h, 5 * U, 0, &t));
    cr_assert_eq(report_of(&g).claimed_bytes, 5 * U);
    ortmem_grant *gr = poll_ticket(t);
    cr_assert_not_null(gr);
    OK(ortmem_grant_abort(gr));
    cr_assert_eq(report_of(&g).available_bytes, 20 * U);
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

Test(tickets, bad_input_and_a_ticket_above_the_limit_are_refused_at_submit)
{
    gov g = gov_new(20, 0);
    ortmem_holder *h = holder_new(&g, "h");
    ortmem_ticket *t = NULL;
    EXPECT_STATUS(ortmem_ticket_submit(h, 0, 0, &t), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_ticket_submit(h, U, 0, NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_ticket_submit(NULL, U, 0, &t), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_ticket_submit(h, 21 * U, 0, &t), ORTMEM_E_BUDGET);
    cr_assert(strstr(ortmem_last_error(), "more than the limit"), "%s", ortmem_last_error());
    cr_assert_null(t);
    ortmem_authority_report r = report_of(&g);
    cr_assert_eq(r.tickets_waiting, 0);
    cr_assert_eq(r.claimed_bytes, 0);
    ortmem_grant *gr = NULL;
    EXPECT_STATUS(ortmem_ticket_wait(NULL, 0, &gr), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_ticket_cancel(NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_ticket_wait((ortmem_ticket *)h, 0, &gr), ORTMEM_E_HANDLE);
    /* Exactly the limit is a legal (if patient) request. */
    OK(ortmem_ticket_submit(h, 20 * U, 0, &t));
    EXPECT_STATUS(ortmem_ticket_wait(t, 0, NULL), ORTMEM_E_INVALID);
    gr = poll_ticket(t);
    cr_assert_not_null(gr);
    OK(ortmem_grant_abort(gr));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

Test(tickets, a_ticket_above_the_mapped_allowance_is_refused_at_submit)
{
    ortmem_backend *cpu = test_backend();
    ortmem_authority_options opt = ORTMEM_AUTHORITY_OPTIONS_INIT;
    opt.limit_bytes = 20 * U;
    opt.mapped_allowance_bytes = 10 * U;
    gov g = {cpu, cpu, NULL};
    OK(ortmem_authority_create(cpu, &opt, &g.authority));
    ortmem_holder *h = holder_new(&g, "h");
    ortmem_ticket *t = NULL;
    /* It could never be served: waiting for it would block the queue for good. */
    EXPECT_STATUS(ortmem_ticket_submit(h, 11 * U, 0, &t), ORTMEM_E_BUDGET);
    cr_assert(strstr(ortmem_last_error(), "mapped allowance"), "%s", ortmem_last_error());
    cr_assert_eq(report_of(&g).tickets_waiting, 0);
    OK(ortmem_ticket_submit(h, 10 * U, 0, &t));
    ortmem_grant *gr = poll_ticket(t);
    cr_assert_not_null(gr);
    OK(ortmem_grant_abort(gr));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

/* ---- order ---- */

Test(tickets, priority_comes_before_arrival)
{
    gov g = gov_new(20, 1e-9); /* aging too slow to matter */
    ortmem_holder *filler = holder_new(&g, "filler");
    ortmem_holder *h = holder_new(&g, "h");
    charge(filler, 20);
    ortmem_ticket *low = NULL, *high = NULL;
    OK(ortmem_ticket_submit(h, 5 * U, 0, &low));
    OK(ortmem_ticket_submit(h, 5 * U, 10, &high));
    OK(ortmem_holder_refund(filler, 5 * U));
    ortmem_grant *gh = poll_ticket(high);
    cr_assert_not_null(gh, "the higher priority goes first although it came second");
    cr_assert_null(poll_ticket(low));
    OK(ortmem_holder_refund(filler, 5 * U));
    ortmem_grant *gl = poll_ticket(low);
    cr_assert_not_null(gl);
    OK(ortmem_grant_abort(gh));
    OK(ortmem_grant_abort(gl));
    OK(ortmem_holder_refund(filler, 10 * U));
    OK(ortmem_holder_unregister(filler));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

Test(tickets, equal_priorities_are_served_in_arrival_order_and_the_head_blocks)
{
    gov g = gov_new(20, 1e-9);
    ortmem_holder *filler = holder_new(&g, "filler");
    ortmem_holder *h = holder_new(&g, "h");
    charge(filler, 20);
    ortmem_ticket *t[3];
    uint64_t units[3] = {10, 2, 3};
    for (int i = 0; i < 3; i++)
        OK(ortmem_ticket_submit(h, units[i] * U, 5, &t[i]));
    /* 5 free units would serve the 2- and 3-unit tickets, but the 10-unit head waits first. */
    OK(ortmem_holder_refund(filler, 5 * U));
    for (int i = 0; i < 3; i++)
        cr_assert_null(poll_ticket(t[i]), "ticket %d must wait behind the head", i);
    cr_assert_eq(report_of(&g).available_bytes, 5 * U);
    OK(ortmem_holder_refund(filler, 5 * U));
    ortmem_grant *g0 = poll_ticket(t[0]);
    cr_assert_not_null(g0);
    cr_assert_null(poll_ticket(t[1]));
    OK(ortmem_holder_refund(filler, 2 * U));
    ortmem_grant *g1 = poll_ticket(t[1]);
    cr_assert_not_null(g1);
    cr_assert_null(poll_ticket(t[2]));
    OK(ortmem_holder_refund(filler, 3 * U));
    ortmem_grant *g2 = poll_ticket(t[2]);
    cr_assert_not_null(g2);
    OK(ortmem_grant_abort(g0));
    OK(ortmem_grant_abort(g1));
    OK(ortmem_grant_abort(g2));
    OK(ortmem_holder_refund(filler, 5 * U));
    OK(ortmem_holder_unregister(filler));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

Test(tickets, aging_lets_a_low_priority_overtake_after_waiting)
{
    /* One million priority points per second: 10 ms of waiting outweighs a
     * priority lead of 1000. Only the order is asserted. */
    gov g = gov_new(20, 1e6);
    ortmem_holder *filler = holder_new(&g, "filler");
    ortmem_holder *h = holder_new(&g, "h");
    charge(filler, 20);
    ortmem_ticket *old_low = NULL, *new_high = NULL;
    OK(ortmem_ticket_submit(h, 4 * U, 0, &old_low));
    sleep_ms(20);
    OK(ortmem_ticket_submit(h, 4 * U, 1000, &new_high));
    OK(ortmem_holder_refund(filler, 4 * U));
    ortmem_grant *gl = poll_ticket(old_low);
    cr_assert_not_null(gl, "the aged low-priority ticket goes first");
    cr_assert_null(poll_ticket(new_high));
    OK(ortmem_holder_refund(filler, 4 * U));
    ortmem_grant *gh = poll_ticket(new_high);
    cr_assert_not_null(gh);
    OK(ortmem_grant_abort(gl));
    OK(ortmem_grant_abort(gh));
    OK(ortmem_holder_refund(filler, 12 * U));
    OK(ortmem_holder_unregister(filler));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

Test(tickets, raising_the_limit_serves_waiting_tickets)
{
    gov g = gov_new(10, 0);
    ortmem_holder *filler = holder_new(&g, "filler");
    ortmem_holder *h = holder_new(&g, "h");
    charge(filler, 10);
    ortmem_ticket *t = NULL;
    OK(ortmem_ticket_submit(h, 5 * U, 0, &t));
    cr_assert_null(poll_ticket(t));
    ortmem_limit_outcome lo = {sizeof lo, 0, 0, 0, 0, 0};
    OK(ortmem_authority_set_limit(g.authority, 15 * U, &lo));
    cr_assert(lo.within_limit);
    ortmem_grant *gr = poll_ticket(t);
    cr_assert_not_null(gr);
    OK(ortmem_grant_charge(gr, 5 * U));
    OK(ortmem_holder_refund(h, 5 * U));
    OK(ortmem_holder_refund(filler, 10 * U));
    OK(ortmem_holder_unregister(filler));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

/* ---- waiting, cancel and the races ---- */

typedef struct waiter {
    ortmem_ticket *ticket;
    int64_t timeout_ms;
    atomic_int started;
    ortmem_status status;
    ortmem_grant *grant;
} waiter;

static void *wait_ticket(void *arg)
{
    waiter *w = arg;
    atomic_store(&w->started, 1);
    w->status = ortmem_ticket_wait(w->ticket, w->timeout_ms, &w->grant);
    return NULL;
}

Test(tickets, a_waiter_wakes_with_the_grant_when_capacity_comes)
{
    gov g = gov_new(20, 0);
    ortmem_holder *filler = holder_new(&g, "filler");
    ortmem_holder *h = holder_new(&g, "h");
    charge(filler, 20);
    waiter w = {NULL, -1, 0, ORTMEM_E_STATE, NULL};
    OK(ortmem_ticket_submit(h, 6 * U, 0, &w.ticket));
    pthread_t th;
    pthread_create(&th, NULL, wait_ticket, &w);
    while (!atomic_load(&w.started))
        sched_yield();
    sleep_ms(10);
    OK(ortmem_holder_refund(filler, 6 * U));
    pthread_join(th, NULL);
    cr_assert_eq(w.status, ORTMEM_OK, "%s", ortmem_status_str(w.status));
    cr_assert_not_null(w.grant);
    OK(ortmem_grant_abort(w.grant));
    OK(ortmem_holder_refund(filler, 14 * U));
    OK(ortmem_holder_unregister(filler));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

Test(tickets, cancel_wakes_a_waiter_in_another_thread_with_cancelled)
{
    gov g = gov_new(20, 0);
    ortmem_holder *filler = holder_new(&g, "filler");
    ortmem_holder *h = holder_new(&g, "h");
    charge(filler, 20);
    /* The waiter must be inside ortmem_ticket_wait when the cancel comes;
     * there is no way to see that from outside, so a run where the cancel
     * came first (the ticket was gone: ORTMEM_E_HANDLE) is tried again. */
    int cancelled = 0;
    for (int attempt = 0; attempt < 5 && !cancelled; attempt++) {
        waiter w = {NULL, -1, 0, ORTMEM_E_STATE, NULL};
        OK(ortmem_ticket_submit(h, 4 * U, 0, &w.ticket));
        pthread_t th;
        pthread_create(&th, NULL, wait_ticket, &w);
        while (!atomic_load(&w.started))
            sched_yield();
        sleep_ms(50);
        OK(ortmem_ticket_cancel(w.ticket));
        pthread_join(th, NULL);
        cr_assert(w.status == ORTMEM_E_CANCELLED || w.status == ORTMEM_E_HANDLE, "%s",
                  ortmem_status_str(w.status));
        cr_assert_null(w.grant);
        cancelled = w.status == ORTMEM_E_CANCELLED;
        ortmem_authority_report r = report_of(&g);
        cr_assert_eq(r.tickets_waiting, 0);
        cr_assert_eq(r.claimed_bytes, 0);
        /* The cancelled ticket is gone. */
        ortmem_grant *gr = NULL;
        EXPECT_STATUS(ortmem_ticket_wait(w.ticket, 0, &gr), ORTMEM_E_HANDLE);
        EXPECT_STATUS(ortmem_ticket_cancel(w.ticket), ORTMEM_E_HANDLE);
    }
    cr_assert(cancelled, "no waiter saw ORTMEM_E_CANCELLED in 5 attempts");
    OK(ortmem_holder_refund(filler, 20 * U));
    OK(ortmem_holder_unregister(filler));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

Test(tickets, cancel_after_the_grant_aborts_it_and_the_capacity_returns)
{
    gov g = gov_new(20, 0);
    ortmem_holder *filler = holder_new(&g, "filler");
    ortmem_holder *h = holder_new(&g, "h");
    ortmem_holder *other = holder_new(&g, "other");
    charge(filler, 20);
    ortmem_ticket *t = NULL;
    OK(ortmem_ticket_submit(h, 5 * U, 0, &t));
    OK(ortmem_holder_refund(filler, 5 * U));
    cr_assert_eq(holder_report(&g, "h").held_bytes, 5 * U, "granted meanwhile");
    cr_assert_eq(report_of(&g).available_bytes, 0);
    OK(ortmem_ticket_cancel(t));
    ortmem_authority_report r = report_of(&g);
    cr_assert_eq(r.claimed_bytes, 0);
    cr_assert_eq(r.available_bytes, 5 * U);
    cr_assert_eq(holder_report(&g, "h").held_bytes, 0);
    ortmem_grant *gr = NULL;
    EXPECT_STATUS(ortmem_ticket_wait(t, 0, &gr), ORTMEM_E_HANDLE);
    /* The capacity is free for anyone now; h has no open grant left. */
    OK(ortmem_grant_prepare(other, 5 * U, &gr));
    OK(ortmem_grant_abort(gr));
    OK(ortmem_holder_unregister(h));
    OK(ortmem_holder_refund(filler, 15 * U));
    OK(ortmem_holder_unregister(filler));
    OK(ortmem_holder_unregister(other));
    gov_free(&g);
}

typedef struct refunder {
    ortmem_holder *holder;
    uint64_t bytes;
    atomic_int *go;
    long delay_us; /* after go */
} refunder;

static void *refund_when_told(void *arg)
{
    refunder *r = arg;
    while (!atomic_load(r->go))
        sched_yield();
    if (r->delay_us) {
        struct timespec ts = {0, r->delay_us * 1000L};
        nanosleep(&ts, NULL);
    }
    (void)ortmem_holder_refund(r->holder, r->bytes);
    return NULL;
}

Test(tickets, a_timeout_racing_a_grant_has_exactly_one_winner)
{
    gov g = gov_new(20, 0);
    ortmem_holder *filler = holder_new(&g, "filler");
    ortmem_holder *h = holder_new(&g, "h");
    charge(filler, 20);
    int won = 0, timed_out = 0;
    for (int i = 0; i < 300; i++) {
        atomic_int go = 0;
        /* A 1 ms timeout against a refund 0 to 2 ms later (and a few polls). */
        waiter w = {NULL, i % 10 ? 1 : 0, 0, ORTMEM_E_STATE, NULL};
        OK(ortmem_ticket_submit(h, 4 * U, 0, &w.ticket));
        refunder rf = {filler, 4 * U, &go, (long)((unsigned)i * 7919u % 2000u)};
        pthread_t tw, tr;
        pthread_create(&tr, NULL, refund_when_told, &rf);
        pthread_create(&tw, NULL, wait_ticket, &w);
        while (!atomic_load(&w.started))
            sched_yield();
        atomic_store(&go, 1);
        pthread_join(tw, NULL);
        pthread_join(tr, NULL);
        /* The refund always grants the ticket: the capacity is reserved to it
         * exactly once, whichever way the race went. */
        ortmem_authority_report r = report_of(&g);
        cr_assert_eq(r.claimed_bytes, 4 * U, "iteration %d: reserved %llu", i,
                     (unsigned long long)r.claimed_bytes);
        cr_assert_eq(r.available_bytes, 0);
        cr_assert_eq(r.tickets_waiting, 0);
        ortmem_grant *late = NULL;
        ortmem_status again = ortmem_ticket_wait(w.ticket, 0, &late);
        if (w.status == ORTMEM_OK) {
            /* The waiter won: the ticket is consumed and nobody else has it. */
            won++;
            cr_assert_not_null(w.grant);
            cr_assert_eq(again, ORTMEM_E_HANDLE, "iteration %d: %s", i, ortmem_status_str(again));
            OK(ortmem_grant_charge(w.grant, 4 * U));
        } else {
            /* The timeout won: the grant still sits with the ticket, untaken. */
            timed_out++;
            cr_assert_eq(w.status, ORTMEM_E_TIMEOUT, "iteration %d: %s", i,
                         ortmem_status_str(w.status));
            cr_assert_null(w.grant);
            cr_assert_eq(again, ORTMEM_OK, "iteration %d: %s", i, ortmem_status_str(again));
            OK(ortmem_grant_charge(late, 4 * U));
        }
        r = report_of(&g);
        cr_assert_eq(r.claimed_bytes, 0);
        cr_assert_eq(r.owned_bytes, 20 * U);
        /* Back to the start: the capacity returns to the filler. */
        OK(ortmem_holder_refund(h, 4 * U));
        charge(filler, 4);
    }
    cr_assert_eq(won + timed_out, 300);
    cr_log_info("timeout/grant race: the waiter won %d times, the timeout %d", won, timed_out);
    OK(ortmem_holder_refund(filler, 20 * U));
    OK(ortmem_holder_unregister(filler));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

typedef struct canceller {
    ortmem_ticket *ticket;
    atomic_int *go;
    ortmem_status status;
} canceller;

static void *cancel_when_told(void *arg)
{
    canceller *c = arg;
    while (!atomic_load(c->go))
        sched_yield();
    c->status = ortmem_ticket_cancel(c->ticket);
    return NULL;
}

Test(tickets, a_cancel_racing_a_grant_has_exactly_one_winner)
{
    gov g = gov_new(20, 0);
    ortmem_holder *filler = holder_new(&g, "filler");
    ortmem_holder *h = holder_new(&g, "h");
    charge(filler, 20);
    int granted = 0, cancelled = 0;
    for (int i = 0; i < 300; i++) {
        atomic_int go = 0;
        waiter w = {NULL, -1, 0, ORTMEM_E_STATE, NULL};
        OK(ortmem_ticket_submit(h, 4 * U, 0, &w.ticket));
        refunder rf = {filler, 4 * U, &go, 0};
        canceller cn = {w.ticket, &go, ORTMEM_E_STATE};
        pthread_t tw, tr, tc;
        pthread_create(&tw, NULL, wait_ticket, &w);
        pthread_create(&tr, NULL, refund_when_told, &rf);
        pthread_create(&tc, NULL, cancel_when_told, &cn);
        while (!atomic_load(&w.started))
            sched_yield();
        atomic_store(&go, 1);
        pthread_join(tc, NULL);
        pthread_join(tr, NULL);
        pthread_join(tw, NULL);
        ortmem_authority_report r = report_of(&g);
        cr_assert_eq(r.tickets_waiting, 0);
        if (w.status == ORTMEM_OK) {
            /* The grant won: the cancel found the ticket consumed. */
            granted++;
            cr_assert_eq(cn.status, ORTMEM_E_HANDLE, "iteration %d: %s", i,
                         ortmem_status_str(cn.status));
            cr_assert_eq(r.claimed_bytes, 4 * U);
            OK(ortmem_grant_abort(w.grant));
        } else {
            /* The cancel won (the waiter saw it, or came after the ticket was
             * gone): any grant made meanwhile was aborted. */
            cancelled++;
            cr_assert(w.status == ORTMEM_E_CANCELLED || w.status == ORTMEM_E_HANDLE,
                      "iteration %d: %s", i, ortmem_status_str(w.status));
            cr_assert_null(w.grant);
            cr_assert_eq(cn.status, ORTMEM_OK, "iteration %d: %s", i, ortmem_status_str(cn.status));
            cr_assert_eq(r.claimed_bytes, 0, "iteration %d: reserved %llu", i,
                         (unsigned long long)r.claimed_bytes);
        }
        r = report_of(&g);
        cr_assert_eq(r.claimed_bytes, 0);
        cr_assert_eq(r.available_bytes, 4 * U);
        charge(filler, 4);
    }
    cr_assert_eq(granted + cancelled, 300);
    cr_log_info("cancel/grant race: the grant won %d times, the cancel %d", granted, cancelled);
    OK(ortmem_holder_refund(filler, 20 * U));
    OK(ortmem_holder_unregister(filler));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

Test(tickets, a_waiting_ticket_keeps_its_holder_and_authority)
{
    gov g = gov_new(20, 0);
    ortmem_holder *h = holder_new(&g, "h");
    ortmem_holder *filler = holder_new(&g, "filler");
    charge(filler, 20);
    ortmem_ticket *t = NULL;
    OK(ortmem_ticket_submit(h, U, 0, &t));
    EXPECT_STATUS(ortmem_holder_unregister(h), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "a ticket is waiting"), "%s", ortmem_last_error());
    EXPECT_STATUS(ortmem_authority_destroy(g.authority), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "a ticket is waiting"), "%s", ortmem_last_error());
    OK(ortmem_holder_refund(filler, 20 * U));
    OK(ortmem_holder_unregister(filler));
    /* Granted but not taken: the open grant keeps both. */
    EXPECT_STATUS(ortmem_holder_unregister(h), ORTMEM_E_BUSY);
    EXPECT_STATUS(ortmem_authority_destroy(g.authority), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "a grant is open"), "%s", ortmem_last_error());
    OK(ortmem_ticket_cancel(t));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

/* ---- retirement ---- */

Test(retire, decommit_after_keeps_memory_until_the_fence_is_signalled_and_polled)
{
    gov g = gov_new(20, 0);
    ortmem_holder *h = holder_new(&g, "kv");
    ortmem_region *r = region_for(&g, h, 8 * G);
    OK(ortmem_region_commit(r, 0, 4 * G));
    ortmem_fence *f = NULL;
    OK(ortmem_fence_create(&f));
    EXPECT_STATUS(ortmem_fence_query(f), ORTMEM_E_BUSY);
    OK(ortmem_region_decommit_after(r, 0, 4 * G, f));

    ortmem_authority_report rep = report_of(&g);
    cr_assert_eq(rep.retirements_pending, 1);
    cr_assert_eq(rep.owned_bytes, 4 * G);
    cr_assert_eq(rep.mapped_bytes, 4 * G);
    /* Poll before the signal releases nothing. */
    ortmem_retire_report rr = retire_report();
    OK(ortmem_authority_poll(g.authority, &rr));
    cr_assert_eq(rr.pending, 1);
    cr_assert_eq(rr.completed + rr.quarantined + rr.failed, 0);
    cr_assert_eq(rr.decommitted_bytes, 0);
    ortmem_vmm_stats s = stats_of(g.backend);
    cr_assert_eq(s.owned_bytes, 4 * G);
    cr_assert_eq(s.mapped_bytes, 4 * G);
    cr_assert_eq(holder_report(&g, "kv").owned_bytes, 4 * G);
    for (size_t i = 0; i < 4; i++)
        cr_assert_eq(granule_info(r, i * G).state, ORTMEM_GRANULE_MAPPED);

    /* The signal alone changes nothing either: the poll carries it out. */
    OK(ortmem_fence_signal(f));
    OK(ortmem_fence_query(f));
    cr_assert_eq(report_of(&g).owned_bytes, 4 * G);
    cr_assert_eq(stats_of(g.backend).mapped_bytes, 4 * G);
    rr = retire_report();
    OK(ortmem_authority_poll(g.authority, &rr));
    cr_assert_eq(rr.completed, 1);
    cr_assert_eq(rr.pending, 0);
    cr_assert_eq(rr.decommitted_bytes, 4 * G);
    rep = report_of(&g);
    cr_assert_eq(rep.owned_bytes, 0);
    cr_assert_eq(rep.mapped_bytes, 0);
    cr_assert_eq(rep.retirements_pending, 0);
    s = stats_of(g.backend);
    cr_assert_eq(s.owned_bytes, 0);
    cr_assert_eq(s.mapped_bytes, 0);
    cr_assert_eq(granule_info(r, 0).state, ORTMEM_GRANULE_UNMAPPED);
    /* Nothing is left to do. */
    rr = retire_report();
    OK(ortmem_authority_poll(g.authority, &rr));
    cr_assert_eq(rr.completed + rr.pending, 0);

    OK(ortmem_fence_destroy(f));
    OK(ortmem_region_destroy(r));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

Test(retire, bad_input_is_refused_and_changes_nothing)
{
    gov g = gov_new(20, 0);
    ortmem_holder *h = holder_new(&g, "kv");
    ortmem_region *r = region_for(&g, h, 4 * G);
    ortmem_region *plain = region_on(g.backend, 4 * G, 0);
    ortmem_fence *f = NULL;
    OK(ortmem_fence_create(&f));
    EXPECT_STATUS(ortmem_fence_create(NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_fence_create_query(NULL, NULL, &f), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_region_decommit_after(NULL, 0, G, f), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_region_decommit_after(r, 0, 0, f), ORTMEM_E_RANGE);
    EXPECT_STATUS(ortmem_region_decommit_after(r, 2 * G, 4 * G, f), ORTMEM_E_RANGE);
    EXPECT_STATUS(ortmem_region_decommit_after(r, 0, G, NULL), ORTMEM_E_INVALID);
    /* Retirement needs a region charged to a holder. */
    EXPECT_STATUS(ortmem_region_decommit_after(plain, 0, G, f), ORTMEM_E_STATE);
    EXPECT_STATUS(ortmem_arena_free_after(NULL, (void *)&g, f), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_authority_poll(NULL, NULL), ORTMEM_E_INVALID);
    ortmem_retire_report bad = {0, 0, 0, 0, 0, 0};
    EXPECT_STATUS(ortmem_authority_poll(g.authority, &bad), ORTMEM_E_INVALID);
    cr_assert_eq(report_of(&g).retirements_pending, 0);
    OK(ortmem_fence_destroy(f));
    EXPECT_STATUS(ortmem_fence_destroy(f), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_fence_signal(f), ORTMEM_E_HANDLE);
    OK(ortmem_region_destroy(plain));
    OK(ortmem_region_destroy(r));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

static int query_answer(void *user)
{
    atomic_int *state = user;
    atomic_fetch_add(&state[1], 1); /* calls */
    return atomic_load(&state[0]);
}

Test(retire, a_query_fence_completes_when_its_callback_says_so)
{
    gov g = gov_new(20, 0);
    ortmem_holder *h = holder_new(&g, "kv");
    ortmem_region *r = region_for(&g, h, 4 * G);
    OK(ortmem_region_commit(r, 0, 2 * G));
    atomic_int state[2] = {0, 0}; /* answer, calls */
    ortmem_fence *f = NULL;
    OK(ortmem_fence_create_query(query_answer, state, &f));
    EXPECT_STATUS(ortmem_fence_signal(f), ORTMEM_E_STATE);
    OK(ortmem_region_decommit_after(r, 0, 2 * G, f));
    ortmem_retire_report rr = retire_report();
    OK(ortmem_authority_poll(g.authority, &rr));
    cr_assert_eq(rr.pending, 1);
    cr_assert_geq(atomic_load(&state[1]), 1, "the poll asked the callback");
    cr_assert_eq(report_of(&g).owned_bytes, 2 * G);
    EXPECT_STATUS(ortmem_fence_query(f), ORTMEM_E_BUSY);
    atomic_store(&state[0], 1);
    rr = retire_report();
    OK(ortmem_authority_poll(g.authority, &rr));
    cr_assert_eq(rr.completed, 1);
    cr_assert_eq(rr.pending, 0);
    cr_assert_eq(report_of(&g).owned_bytes, 0);
    /* A completed fence stays complete even if the callback changes its mind. */
    atomic_store(&state[0], 0);
    OK(ortmem_fence_query(f));
    OK(ortmem_fence_destroy(f));
    OK(ortmem_region_destroy(r));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

Test(retire, arena_free_after_frees_the_block_once_the_fence_completes)
{
    gov g = gov_new(20, 0);
    ortmem_holder *h = holder_new(&g, "workspace");
    ortmem_account acct;
    OK(ortmem_holder_account(h, &acct));
    ortmem_arena_options ao = ORTMEM_ARENA_OPTIONS_INIT;
    ao.capacity = 8 * G;
    ao.cache_bytes = 0; /* the retired free decommits at once */
    ao.account = &acct;
    ortmem_arena *arena = NULL;
    OK(ortmem_arena_create(g.backend, &ao, &arena));
    void *keep = NULL, *later = NULL;
    OK(ortmem_arena_alloc(arena, G, 0, &keep));
    OK(ortmem_arena_alloc(arena, 2 * G, 0, &later));
    uint64_t owned = report_of(&g).owned_bytes;
    cr_assert_eq(owned, 3 * G);
    ortmem_fence *f = NULL;
    OK(ortmem_fence_create(&f));
    OK(ortmem_arena_free_after(arena, later, f));
    ortmem_arena_stats as;
    memset(&as, 0, sizeof as);
    as.struct_size = sizeof as;
    ortmem_retire_report rr = retire_report();
    OK(ortmem_authority_poll(g.authority, &rr));
    cr_assert_eq(rr.pending, 1);
    OK(ortmem_arena_stats_get(arena, &as));
    cr_assert_eq(as.live_allocations, 2);
    cr_assert_eq(report_of(&g).owned_bytes, 3 * G);
    OK(ortmem_fence_signal(f));
    rr = retire_report();
    OK(ortmem_authority_poll(g.authority, &rr));
    cr_assert_eq(rr.completed, 1);
    cr_assert_eq(rr.pending, 0);
    OK(ortmem_arena_stats_get(arena, &as));
    cr_assert_eq(as.live_allocations, 1);
    cr_assert_eq(report_of(&g).owned_bytes, G, "the freed block's granules were decommitted");
    EXPECT_STATUS(ortmem_arena_free(arena, later), ORTMEM_E_DOUBLE_FREE);
    OK(ortmem_arena_free(arena, keep));
    OK(ortmem_fence_destroy(f));
    OK(ortmem_arena_destroy(arena, 0));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

typedef struct signaller {
    ortmem_fence *fence;
    long delay_ms;
} signaller;

static void *signal_later(void *arg)
{
    signaller *s = arg;
    sleep_ms(s->delay_ms);
    (void)ortmem_fence_signal(s->fence);
    return NULL;
}

Test(retire, drain_times_out_while_pending_and_returns_once_signalled)
{
    gov g = gov_new(20, 0);
    ortmem_holder *h = holder_new(&g, "kv");
    ortmem_region *r = region_for(&g, h, 4 * G);
    OK(ortmem_region_commit(r, 0, 3 * G));
    ortmem_fence *f = NULL;
    OK(ortmem_fence_create(&f));
    OK(ortmem_region_decommit_after(r, 0, 3 * G, f));
    ortmem_retire_report rr = retire_report();
    EXPECT_STATUS(ortmem_authority_drain(g.authority, 0, &rr), ORTMEM_E_TIMEOUT);
    cr_assert_eq(rr.pending, 1);
    rr = retire_report();
    EXPECT_STATUS(ortmem_authority_drain(g.authority, 20, &rr), ORTMEM_E_TIMEOUT);
    cr_assert_eq(rr.pending, 1);
    cr_assert_eq(rr.completed, 0);
    cr_assert_eq(report_of(&g).owned_bytes, 3 * G);

    signaller sg = {f, 30};
    pthread_t th;
    pthread_create(&th, NULL, signal_later, &sg);
    rr = retire_report();
    OK(ortmem_authority_drain(g.authority, -1, &rr));
    pthread_join(th, NULL);
    cr_assert_eq(rr.completed, 1);
    cr_assert_eq(rr.pending, 0);
    cr_assert_eq(rr.decommitted_bytes, 3 * G);
    cr_assert_eq(report_of(&g).owned_bytes, 0);
    /* Nothing pending: drain returns at once. */
    OK(ortmem_authority_drain(g.authority, 0, NULL));
    OK(ortmem_fence_destroy(f));
    OK(ortmem_region_destroy(r));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

Test(retire, drain_waits_for_the_others_when_one_retirement_fails)
{
    gov g = gov_new(20, 0);
    ortmem_holder *h = holder_new(&g, "kv");
    ortmem_region *gone = region_for(&g, h, 2 * G);
    ortmem_region *r = region_for(&g, h, 2 * G);
    OK(ortmem_region_commit(r, 0, 2 * G));
    ortmem_fence *done = NULL, *later = NULL;
    OK(ortmem_fence_create(&done));
    OK(ortmem_fence_create(&later));
    OK(ortmem_region_decommit_after(gone, 0, 2 * G, done));
    OK(ortmem_region_decommit_after(r, 0, 2 * G, later));
    /* The first release's region goes before its fence completes: it fails. */
    OK(ortmem_region_destroy(gone));
    OK(ortmem_fence_signal(done));
    signaller sg = {later, 30};
    pthread_t th;
    pthread_create(&th, NULL, signal_later, &sg);
    ortmem_retire_report rr = retire_report();
    ortmem_status st = ortmem_authority_drain(g.authority, 5000, &rr);
    pthread_join(th, NULL);
    cr_assert_eq(st, ORTMEM_E_HANDLE, "%s: %s", ortmem_status_str(st), ortmem_last_error());
    cr_assert_eq(rr.failed, 1);
    cr_assert_eq(rr.completed, 1, "drain returned with the other release still pending");
    cr_assert_eq(rr.pending, 0);
    cr_assert_eq(report_of(&g).owned_bytes, 0);
    OK(ortmem_fence_destroy(done));
    OK(ortmem_fence_destroy(later));
    OK(ortmem_region_destroy(r));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

static gov fault_gov(ortmem_backend_op op, uint64_t fail_at, ortmem_backend **fault)
{
    ortmem_backend *cpu = test_backend();
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = op;
    fo.fail_at = fail_at;
    OK(ortmem_fault_backend_create(cpu, &fo, fault));
    return gov_on(cpu, *fault, 20, 0);
}

Test(retire, a_failed_unmap_at_release_time_is_reported_failed_changes_nothing_and_stays_pending)
{
    ortmem_backend *fault = NULL;
    gov g = fault_gov(ORTMEM_OP_UNMAP, 1, &fault);
    ortmem_holder *h = holder_new(&g, "kv");
    ortmem_region *r = region_for(&g, h, 4 * G);
    OK(ortmem_region_commit(r, 0, 4 * G));
    ortmem_fence *f = NULL;
    OK(ortmem_fence_create(&f));
    OK(ortmem_region_decommit_after(r, 0, 4 * G, f));
    OK(ortmem_fence_signal(f));
    ortmem_retire_report rr = retire_report();
    EXPECT_STATUS(ortmem_authority_poll(g.authority, &rr), ORTMEM_E_BACKEND);
    cr_assert(strstr(ortmem_last_error(), "failed and changed nothing"), "%s", ortmem_last_error());
    cr_assert_eq(rr.failed, 1);
    cr_assert_eq(rr.completed + rr.quarantined, 0);
    cr_assert_eq(rr.pending, 1, "a release that failed in the backend is dropped");
    cr_assert_eq(report_of(&g).retirements_pending, 1);
    ortmem_holder_report hr = holder_report(&g, "kv");
    cr_assert_eq(hr.owned_bytes, 4 * G);
    cr_assert_eq(hr.mapped_bytes, 4 * G);
    ortmem_vmm_stats s = stats_of(fault);
    cr_assert_eq(s.owned_bytes, 4 * G);
    cr_assert_eq(s.mapped_bytes, 4 * G);
    cr_assert_eq(s.quarantined_bytes, 0);
    for (size_t i = 0; i < 4; i++)
        cr_assert_eq(granule_info(r, i * G).state, ORTMEM_GRANULE_MAPPED);
    cr_assert_eq(holder_report(&g, "quarantine").owned_bytes, 0);
    /* The memory is intact and the next poll releases it (the fault fired once). */
    rr = retire_report();
    OK(ortmem_authority_poll(g.authority, &rr));
    cr_assert_eq(rr.completed, 1);
    cr_assert_eq(rr.failed + rr.pending, 0);
    cr_assert_eq(rr.decommitted_bytes, 4 * G);
    cr_assert_eq(report_of(&g).retirements_pending, 0);
    cr_assert_eq(report_of(&g).owned_bytes, 0);
    cr_assert_eq(stats_of(fault).mapped_bytes, 0);
    OK(ortmem_fence_destroy(f));
    OK(ortmem_region_destroy(r));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

Test(retire, a_failed_release_is_quarantined_with_its_charge_on_the_quarantine_holder)
{
    ortmem_backend *fault = NULL;
    gov g = fault_gov(ORTMEM_OP_RELEASE, 2, &fault);
    ortmem_holder *h = holder_new(&g, "kv");
    ortmem_region *r = region_for(&g, h, 4 * G);
    OK(ortmem_region_commit(r, 0, 3 * G));
    ortmem_fence *f = NULL;
    OK(ortmem_fence_create(&f));
    OK(ortmem_region_decommit_after(r, 0, 3 * G, f));
    OK(ortmem_fence_signal(f));
    ortmem_retire_report rr = retire_report();
    OK(ortmem_authority_poll(g.authority, &rr));
    cr_assert_eq(rr.quarantined, 1);
    cr_assert_eq(rr.completed + rr.failed + rr.pending, 0);
    /* Accounting applied: the holder is charged nothing... */
    ortmem_holder_report hr = holder_report(&g, "kv");
    cr_assert_eq(hr.owned_bytes, 0);
    cr_assert_eq(hr.mapped_bytes, 0);
    for (size_t i = 0; i < 3; i++)
        cr_assert_eq(granule_info(r, i * G).state, ORTMEM_GRANULE_UNMAPPED);
    /* ...memory retained: the one granule whose release failed stays owned,
     * charged to the built-in quarantine holder against the same budget. */
    ortmem_vmm_stats s = stats_of(fault);
    cr_assert_eq(s.quarantined_bytes, G);
    cr_assert_eq(s.owned_bytes, G);
    cr_assert_eq(s.mapped_bytes, 0);
    cr_assert_eq(holder_report(&g, "quarantine").owned_bytes, G);
    ortmem_authority_report rep = report_of(&g);
    cr_assert_eq(rep.owned_bytes, G);
    cr_assert_eq(rep.available_bytes, 19 * G);
    /* The user holder can go; the quarantine stays with the backend. */
    OK(ortmem_fence_destroy(f));
    OK(ortmem_region_destroy(r));
    OK(ortmem_holder_unregister(h));
    OK(ortmem_authority_destroy(g.authority));
    EXPECT_STATUS(ortmem_backend_destroy(fault), ORTMEM_E_QUARANTINED);
    OK(ortmem_backend_destroy(g.cpu));
}

Test(retire, fence_holder_and_authority_stay_while_a_retirement_waits)
{
    gov g = gov_new(20, 0);
    ortmem_holder *h = holder_new(&g, "kv");
    ortmem_region *r = region_for(&g, h, 2 * G);
    ortmem_fence *f = NULL;
    OK(ortmem_fence_create(&f));
    /* Nothing committed: once the region goes, only the pending release
     * keeps the holder. */
    OK(ortmem_region_decommit_after(r, 0, 2 * G, f));
    OK(ortmem_region_destroy(r));
    EXPECT_STATUS(ortmem_fence_destroy(f), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "1 retirements still wait"), "%s", ortmem_last_error());
    EXPECT_STATUS(ortmem_holder_unregister(h), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "retirement is pending"), "%s", ortmem_last_error());
    EXPECT_STATUS(ortmem_authority_destroy(g.authority), ORTMEM_E_BUSY);
    cr_assert(strstr(ortmem_last_error(), "retirements are pending"), "%s", ortmem_last_error());
    /* The fence is still usable after the refused destroy. */
    OK(ortmem_fence_signal(f));
    ortmem_retire_report rr = retire_report();
    /* The region went first: the release is reported failed. */
    EXPECT_STATUS(ortmem_authority_poll(g.authority, &rr), ORTMEM_E_HANDLE);
    cr_assert_eq(rr.failed, 1);
    cr_assert_eq(rr.pending, 0);
    OK(ortmem_fence_destroy(f));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

/* An event fence asks the backend about an event recorded on a stream: on
 * the CPU backend the work before it is done at once, so the next poll
 * releases; the event is recorded, queried and released through the backend. */
Test(retire, an_event_fence_lets_retirement_run_once_its_stream_event_completed)
{
    gov g = gov_new(20, 0);
    ortmem_holder *h = holder_new(&g, "kv");
    ortmem_region *r = region_for(&g, h, 4 * G);
    OK(ortmem_region_commit(r, 0, 2 * G));
    ortmem_fence *f = NULL;
    OK(ortmem_fence_create_event(g.backend, 0, &f));
    EXPECT_STATUS(ortmem_fence_signal(f), ORTMEM_E_STATE);
    OK(ortmem_region_decommit_after(r, 0, 2 * G, f));
    ortmem_retire_report rr = retire_report();
    OK(ortmem_authority_poll(g.authority, &rr));
    cr_assert_eq(rr.completed, 1);
    cr_assert_eq(report_of(&g).owned_bytes, 0);
    OK(ortmem_fence_destroy(f));
    ortmem_vmm_stats s = stats_of(g.backend);
    cr_assert_eq(s.calls[ORTMEM_OP_EVENT_RECORD], 1);
    cr_assert_geq(s.calls[ORTMEM_OP_EVENT_QUERY], 1);
    cr_assert_eq(s.calls[ORTMEM_OP_EVENT_DESTROY], 1);
    OK(ortmem_region_destroy(r));
    OK(ortmem_holder_unregister(h));
    gov_free(&g);
}

Test(retire, an_event_fence_that_cannot_record_is_refused)
{
    ortmem_backend *fault = NULL;
    gov g = fault_gov(ORTMEM_OP_EVENT_RECORD, 1, &fault);
    ortmem_fence *f = NULL;
    EXPECT_STATUS(ortmem_fence_create_event(fault, 0, &f), ORTMEM_E_BACKEND);
    cr_assert_null(f);
    cr_assert(strstr(ortmem_last_error(), "fence create (event on stream 0x0)"), "%s",
              ortmem_last_error());
    gov_free(&g);
}
