#include "core/handle.h"

#include <pthread.h>
#include <stdint.h>

#include "core/error.h"
#include "core/hashset.h"
#include "core/log.h"

static pthread_mutex_t om_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t om_reg_cv = PTHREAD_COND_INITIALIZER;
static om_hashset om_live_handles; /* addresses of the live handles */

ortmem_status om_handle_register(om_handle *h, om_kind kind)
{
    h->kind = kind;
    h->pins = 0;
    h->live = true;
    pthread_mutex_lock(&om_reg_lock);
    bool ok = om_hashset_insert(&om_live_handles, (uintptr_t)h);
    size_t live = om_hashset_size(&om_live_handles);
    pthread_mutex_unlock(&om_reg_lock);
    if (!ok)
        return OM_ERR(ORTMEM_E_NOMEM, "handle registry: no memory to track more than %zu handles",
                      live);
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
    if (!om_hashset_contains(&om_live_handles, (uintptr_t)ptr)) {
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
    (void)om_hashset_remove(&om_live_handles, (uintptr_t)h);
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
    /* retire freed a slot, so the insert succeeds without allocating. */
    (void)om_hashset_insert(&om_live_handles, (uintptr_t)h);
    pthread_mutex_unlock(&om_reg_lock);
}
