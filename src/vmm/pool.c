#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "vmm/backend.h"

/* Takes the newest pooled extent of exactly granules granules (0: of any
 * size), or NULL. An extent is never split nor composed: a handle cannot be. */
om_phys *om_pool_take_locked(ortmem_backend *b, uint32_t granules)
{
    om_pool *pool = &b->pool;
    for (size_t i = pool->count; i-- > 0;) {
        om_phys *p = pool->items[i];
        if (granules && p->granules != granules)
            continue;
        memmove(&pool->items[i], &pool->items[i + 1], (pool->count - i - 1) * sizeof *pool->items);
        pool->count--;
        pool->bytes -= p->size;
        return p;
    }
    return NULL;
}

bool om_pool_put_locked(ortmem_backend *b, om_phys *p)
{
    om_pool *pool = &b->pool;
    /* Only power-of-two extents are kept, so a commit can find its size again. */
    if ((p->granules & (p->granules - 1)) != 0 || pool->bytes + p->size > pool->cap_bytes)
        return false;
    if (pool->count == pool->capacity_items) {
        size_t ncap = pool->capacity_items ? pool->capacity_items * 2 : 16;
        om_phys **grown = om_realloc(pool->items, ncap * sizeof *grown);
        if (!grown)
            return false;
        pool->items = grown;
        pool->capacity_items = ncap;
    }
    pool->items[pool->count++] = p;
    pool->bytes += p->size;
    return true;
}

/* Releases pooled granules until at most keep bytes stay; caller has no lock. */
static ortmem_status om_pool_shrink(ortmem_backend *b, size_t keep, size_t *released)
{
    ortmem_status result = ORTMEM_OK;
    size_t freed = 0;
    for (;;) {
        pthread_mutex_lock(&b->lock);
        om_phys *p = b->pool.bytes > keep ? om_pool_take_locked(b, 0) : NULL;
        pthread_mutex_unlock(&b->lock);
        if (!p)
            break;
        size_t size = p->size;
        /* Release outside the lock: a backend call may be slow. */
        ortmem_status st = om_phys_release(b, p);
        if (st == ORTMEM_OK)
            freed += size;
        else
            result = st;
    }
    if (released)
        *released = freed;
    return result;
}

void om_pool_teardown(ortmem_backend *b)
{
    (void)om_pool_shrink(b, 0, NULL);
    om_free(b->pool.items);
    b->pool.items = NULL;
    b->pool.capacity_items = 0;
}

ortmem_status ortmem_pool_set_cap(ortmem_backend *b, size_t cap_bytes)
{
    om_error_clear();
    ortmem_status st = om_backend_pin(b, "pool set cap");
    if (st != ORTMEM_OK)
        return st;
    pthread_mutex_lock(&b->lock);
    b->pool.cap_bytes = cap_bytes;
    pthread_mutex_unlock(&b->lock);
    st = om_pool_shrink(b, cap_bytes, NULL);
    om_backend_unpin(b);
    return st;
}

ortmem_status ortmem_pool_trim(ortmem_backend *b, size_t keep_bytes, size_t *released_bytes)
{
    om_error_clear();
    ortmem_status st = om_backend_pin(b, "pool trim");
    if (st != ORTMEM_OK)
        return st;
    st = om_pool_shrink(b, keep_bytes, released_bytes);
    om_backend_unpin(b);
    return st;
}

ortmem_status ortmem_pool_fill(ortmem_backend *b, size_t bytes)
{
    om_error_clear();
    ortmem_status st = om_backend_pin(b, "pool fill");
    if (st != ORTMEM_OK)
        return st;
    pthread_mutex_lock(&b->lock);
    size_t cap = b->pool.cap_bytes;
    pthread_mutex_unlock(&b->lock);
    if (bytes > cap) {
        om_backend_unpin(b);
        return OM_ERR(ORTMEM_E_RANGE, "pool fill: %zu bytes requested above the cap of %zu", bytes,
                      cap);
    }
    /* All or nothing: on a failure the granules this call added are released. */
    pthread_mutex_lock(&b->lock);
    size_t held_before = b->pool.bytes;
    pthread_mutex_unlock(&b->lock);
    for (;;) {
        pthread_mutex_lock(&b->lock);
        bool want = b->pool.bytes + b->granule <= bytes;
        pthread_mutex_unlock(&b->lock);
        if (!want)
            break;
        /* Pooled granules are charged to the pool's account like any other. */
        st = om_account_hold(&b->pool_account, b->granule, 0);
        om_phys *p = NULL;
        if (st == ORTMEM_OK) {
            st = om_phys_create(b, 0, &b->pool_account, 1, &p);
            if (st != ORTMEM_OK)
                om_account_unhold(&b->pool_account, b->granule, 0);
        }
        if (st != ORTMEM_OK) {
            st = om_error_wrap(st, "pool fill");
            break;
        }
        pthread_mutex_lock(&b->lock);
        bool over_cap = b->pool.bytes + p->size > b->pool.cap_bytes;
        bool kept = om_pool_put_locked(b, p);
        size_t items = b->pool.capacity_items;
        pthread_mutex_unlock(&b->lock);
        if (!kept) {
            (void)om_phys_release(b, p);
            if (!over_cap) /* the list could not grow; a lowered cap only ends the loop */
                st = OM_ERR(ORTMEM_E_NOMEM, "pool fill: list of %zu pooled granules", items);
            break;
        }
    }
    if (st != ORTMEM_OK) {
        char detail[256];
        snprintf(detail, sizeof detail, "%s", ortmem_last_error());
        (void)om_pool_shrink(b, held_before, NULL);
        st = OM_ERR(st, "%s", detail);
    }
    om_backend_unpin(b);
    return st;
}
