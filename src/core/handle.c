#include "core/alloc.h"
#include "core/handle.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/log.h"

/* Open-addressing set of live handle addresses. */
#define OM_SLOT_EMPTY ((uintptr_t)0)
#define OM_SLOT_TOMB ((uintptr_t)1)

static pthread_mutex_t om_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t om_reg_cv = PTHREAD_COND_INITIALIZER;
static uintptr_t *om_slots;
static size_t om_cap;  /* power of two */
static size_t om_used; /* live + tombstones */
static size_t om_live;

static size_t om_hash(uintptr_t p)
{
    uint64_t x = (uint64_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

static size_t om_find(uintptr_t p)
{
    size_t mask = om_cap - 1;
    for (size_t i = om_hash(p) & mask;; i = (i + 1) & mask) {
        if (om_slots[i] == p || om_slots[i] == OM_SLOT_EMPTY)
            return i;
    }
}

static bool om_grow(void)
{
    size_t ncap = om_cap ? om_cap * 2 : 64;
    while (ncap < (om_live + 1) * 4)
        ncap *= 2;
    uintptr_t *old = om_slots;
    size_t ocap = om_cap;
    uintptr_t *fresh = om_calloc(ncap, sizeof *fresh);
    if (!fresh)
        return false;
    om_slots = fresh;
    om_cap = ncap;
    om_used = 0;
    for (size_t i = 0; i < ocap; i++) {
        if (old[i] > OM_SLOT_TOMB) {
            om_slots[om_find(old[i])] = old[i];
            om_used++;
        }
    }
    om_free(old);
    return true;
}

static bool om_insert(uintptr_t p)
{
    /* Grow at half load; a failed grow still inserts while a slot is free. */
    if ((om_used + 1) * 2 > om_cap && !om_grow() && om_used + 1 >= om_cap)
        return false;
    size_t i = om_find(p);
    if (om_slots[i] == OM_SLOT_EMPTY)
        om_used++;
    om_slots[i] = p;
    om_live++;
    return true;
}

static void om_remove(uintptr_t p)
{
    if (!om_cap)
        return;
    size_t i = om_find(p);
    if (om_slots[i] == p) {
        om_slots[i] = OM_SLOT_TOMB;
        om_live--;
    }
}

static bool om_contains(uintptr_t p)
{
    return om_cap && om_slots[om_find(p)] == p;
}

ortmem_status om_handle_register(om_handle *h, om_kind kind)
{
    h->kind = kind;
    h->pins = 0;
    h->live = true;
    pthread_mutex_lock(&om_reg_lock);
    bool ok = om_insert((uintptr_t)h);
    pthread_mutex_unlock(&om_reg_lock);
    if (!ok)
        return OM_ERR(ORTMEM_E_NOMEM, "handle registry: cannot grow past %zu slots", om_cap);
    return ORTMEM_OK;
}

static const char *om_kind_name(om_kind kind)
{
    switch (kind) {
    case OM_KIND_BACKEND: return "backend";
    case OM_KIND_REGION: return "region";
    case OM_KIND_ARENA: return "arena";
    case OM_KIND_AUTHORITY: return "authority";
    case OM_KIND_HOLDER: return "holder";
    case OM_KIND_LEASE: return "lease";
    case OM_KIND_GRANT: return "grant";
    case OM_KIND_TICKET: return "ticket";
    case OM_KIND_FENCE: return "fence";
    case OM_KIND_KV_CACHE: return "kv cache";
    case OM_KIND_KV_SEQ: return "kv sequence";
    case OM_KIND_GRAPH_SIGNATURE: return "graph signature";
    }
    return "handle";
}

ortmem_status om_handle_pin(const void *ptr, om_kind kind, const char *what)
{
    if (!ptr)
        return OM_ERR(ORTMEM_E_INVALID, "%s: %s handle is NULL", what, om_kind_name(kind));
    ortmem_status st = ORTMEM_OK;
    pthread_mutex_lock(&om_reg_lock);
    if (!om_contains((uintptr_t)ptr)) {
        st = OM_ERR(ORTMEM_E_HANDLE, "%s: %p is not a live %s handle (destroyed or foreign)", what,
                    ptr, om_kind_name(kind));
    } else {
        om_handle *h = (om_handle *)ptr;
        if (h->kind != kind)
            st = OM_ERR(ORTMEM_E_HANDLE, "%s: %p is a %s handle, not a %s handle", what, ptr,
                        om_kind_name(h->kind), om_kind_name(kind));
        else
            h->pins++;
    }
    pthread_mutex_unlock(&om_reg_lock);
    if (st == ORTMEM_OK)
        om_log_enter_call();
    return st;
}

void om_handle_end_destroy(void)
{
    om_log_leave_call();
}

void om_handle_unpin(om_handle *h)
{
    pthread_mutex_lock(&om_reg_lock);
    h->pins--;
    if (!h->live)
        pthread_cond_broadcast(&om_reg_cv);
    pthread_mutex_unlock(&om_reg_lock);
    om_log_leave_call();
}

ortmem_status om_handle_retire(om_handle *h, const char *what)
{
    pthread_mutex_lock(&om_reg_lock);
    if (!h->live) {
        pthread_mutex_unlock(&om_reg_lock);
        return OM_ERR(ORTMEM_E_HANDLE, "%s: %p is being destroyed by another call", what,
                      (void *)h);
    }
    om_remove((uintptr_t)h);
    h->live = false;
    while (h->pins > 1)
        pthread_cond_wait(&om_reg_cv, &om_reg_lock);
    pthread_mutex_unlock(&om_reg_lock);
    return ORTMEM_OK;
}

void om_handle_revive(om_handle *h)
{
    pthread_mutex_lock(&om_reg_lock);
    h->live = true;
    /* retire left a tombstone, so a free slot exists and insert succeeds. */
    (void)om_insert((uintptr_t)h);
    pthread_mutex_unlock(&om_reg_lock);
}
