#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "vmm/backend.h"

/* Class of an extent of granules granules: log2, or -1 for no class. */
static int pool_class(const ortmem_backend *b, uint32_t granules)
{
    if (!granules || (granules & (granules - 1)) != 0)
        return -1;
    int c = 0;
    while ((1u << c) < granules)
        c++;
    return (unsigned)c <= b->pool.max_class ? c : -1;
}

void om_pool_init(ortmem_backend *b)
{
    unsigned max = 0;
    while (max + 1 < ORTMEM_POOL_CLASSES_MAX &&
           ((size_t)b->granule << (max + 1)) <= ORTMEM_POOL_MAX_EXTENT_DEFAULT)
        max++;
    b->pool.max_class = max;
}

void om_pool_count_miss_locked(ortmem_backend *b, uint32_t granules)
{
    int c = pool_class(b, granules);
    if (c >= 0)
        b->pool.misses[c]++;
}

/* Removes items[i], keeping the order (oldest first): the newer ones move
 * down (a take is usually the newest: nothing moves). */
static om_phys *pool_remove_at(om_pool *pool, size_t i)
{
    om_phys *p = pool->items[i];
    memmove(&pool->items[i], &pool->items[i + 1], (pool->count - i - 1) * sizeof *pool->items);
    pool->count--;
    pool->bytes -= p->size;
    if (pool->head == pool->count)
        pool->head = pool->count = 0;
    return p;
}

om_phys *om_pool_take_locked(ortmem_backend *b, uint32_t granules)
{
    om_pool *pool = &b->pool;
    int c = pool_class(b, granules);
    if (c < 0)
        return NULL;
    /* Newest first: its pages are the warmest. */
    for (size_t i = pool->count; pool->class_count[c] && i-- > pool->head;) {
        if (pool->items[i]->granules != granules)
            continue;
        pool->class_count[c]--;
        pool->hits[c]++;
        return pool_remove_at(pool, i);
    }
    pool->misses[c]++;
    return NULL;
}

/* The oldest pooled extent of any class, or NULL. */
static om_phys *pool_take_oldest_locked(ortmem_backend *b)
{
    om_pool *pool = &b->pool;
    if (pool->head == pool->count)
        return NULL;
    /* O(1): the oldest is at head, so a trim of many never moves the rest. */
    om_phys *p = pool->items[pool->head++];
    pool->class_count[pool_class(b, p->granules)]--;
    pool->bytes -= p->size;
    if (pool->head == pool->count)
        pool->head = pool->count = 0;
    return p;
}

/* Takes the newest pooled extent of granules granules back out (a fill that
 * failed), counting no hit; NULL when there is none. */
static om_phys *pool_take_newest_locked(ortmem_backend *b, uint32_t granules)
{
    om_pool *pool = &b->pool;
    int c = pool_class(b, granules);
    for (size_t i = pool->count; c >= 0 && pool->class_count[c] && i-- > pool->head;) {
        if (pool->items[i]->granules != granules)
            continue;
        pool->class_count[c]--;
        return pool_remove_at(pool, i);
    }
    return NULL;
}

/* Takes p back out of the pool (a fill that failed); false when not there. */
static bool pool_remove_locked(ortmem_backend *b, om_phys *p)
{
    om_pool *pool = &b->pool;
    for (size_t i = pool->count; i-- > pool->head;) {
        if (pool->items[i] != p)
            continue;
        pool->class_count[pool_class(b, p->granules)]--;
        (void)pool_remove_at(pool, i);
        return true;
    }
    return false;
}

bool om_pool_put_locked(ortmem_backend *b, om_phys *p)
{
    om_pool *pool = &b->pool;
    int c = pool_class(b, p->granules);
    if (c < 0) {
        pool->unpoolable_releases++;
        return false;
    }
    if (pool->bytes + p->size > pool->cap_bytes)
        return false;
    if (pool->count == pool->capacity_items && pool->head > 0) {
        /* Room left by trimmed items: move the live ones down first. */
        memmove(pool->items, &pool->items[pool->head],
                (pool->count - pool->head) * sizeof *pool->items);
        pool->count -= pool->head;
        pool->head = 0;
    }
    if (pool->count == pool->capacity_items) {
        size_t ncap = pool->capacity_items ? pool->capacity_items * 2 : 16;
        om_phys **grown = om_realloc(pool->items, ncap * sizeof *grown);
        if (!grown)
            return false;
        pool->items = grown;
        pool->capacity_items = ncap;
    }
    pool->items[pool->count++] = p;
    pool->class_count[c]++;
    pool->bytes += p->size;
    return true;
}

/* Releases pooled extents, oldest first, until at most keep bytes stay;
 * caller has no lock. */
static ortmem_status om_pool_shrink(ortmem_backend *b, size_t keep, size_t *released)
{
    ortmem_status result = ORTMEM_OK;
    om_error_saved first; /* the first failed release is the one reported */
    size_t freed = 0, stuck = 0;
    for (;;) {
        pthread_mutex_lock(&b->lock);
        om_phys *p = b->pool.bytes > keep ? pool_take_oldest_locked(b) : NULL;
        pthread_mutex_unlock(&b->lock);
        if (!p)
            break;
        size_t size = p->size;
        /* Release outside the lock: a backend call may be slow. */
        ortmem_status st = om_phys_release(b, p);
        if (st == ORTMEM_OK) {
            freed += size;
        } else {
            if (!stuck++)
                om_error_save(&first);
            result = st;
        }
    }
    if (stuck > 1)
        result =
            om_error_wrap(om_error_restore(&first, result),
                          "pool: %zu extents quarantined after failed releases, the first", stuck);
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
    b->pool.head = b->pool.count = 0;
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
    size_t added = 0;
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
        added++;
    }
    if (st != ORTMEM_OK) {
        /* The newest granules are the ones added: a trim to the bytes held
         * before would release the oldest extents, of any class, instead. */
        om_error_saved first;
        om_error_save(&first);
        size_t stuck = 0;
        for (; added > 0; added--) {
            pthread_mutex_lock(&b->lock);
            om_phys *p = pool_take_newest_locked(b, 1);
            pthread_mutex_unlock(&b->lock);
            if (!p) /* taken by a commit meanwhile */
                break;
            stuck += om_phys_release(b, p) != ORTMEM_OK;
        }
        st = om_error_restore(&first, st);
        if (stuck)
            st = om_error_wrap(st, "pool fill: %zu granule%s quarantined in the rollback", stuck,
                               stuck == 1 ? "" : "s");
    }
    om_backend_unpin(b);
    return st;
}

ortmem_status ortmem_pool_fill_extents(ortmem_backend *b, size_t extent_bytes, size_t count)
{
    om_error_clear();
    ortmem_status st = om_backend_pin(b, "pool fill extents");
    if (st != ORTMEM_OK)
        return st;
    size_t g = b->granule, k = extent_bytes / g;
    pthread_mutex_lock(&b->lock);
    size_t cap = b->pool.cap_bytes, held = b->pool.bytes;
    bool classed = extent_bytes % g == 0 && k <= UINT32_MAX && pool_class(b, (uint32_t)k) >= 0;
    pthread_mutex_unlock(&b->lock);
    om_phys **added = NULL;
    if (!classed)
        st = OM_ERR(ORTMEM_E_INVALID,
                    "pool fill extents: %zu bytes is no pool class (granule %zu times a power of "
                    "two, at most %zu bytes)",
                    extent_bytes, g, g << b->pool.max_class);
    else if (count == 0 || count > (cap - (held < cap ? held : cap)) / extent_bytes)
        st = OM_ERR(ORTMEM_E_RANGE,
                    "pool fill extents: %zu extents of %zu bytes do not fit: the pool keeps %zu "
                    "of its %zu-byte cap",
                    count, extent_bytes, held, cap);
    else if (!(added = om_calloc(count, sizeof *added)))
        st = OM_ERR(ORTMEM_E_NOMEM, "pool fill extents: bookkeeping for %zu extents", count);
    size_t made = 0;
    for (; st == ORTMEM_OK && made < count; made++) {
        /* Pooled extents are charged to the pool's account like any other. */
        st = om_account_hold(&b->pool_account, extent_bytes, 0);
        if (st == ORTMEM_OK) {
            st = om_phys_create(b, 0, &b->pool_account, (uint32_t)k, &added[made]);
            if (st != ORTMEM_OK)
                om_account_unhold(&b->pool_account, extent_bytes, 0);
        }
        if (st != ORTMEM_OK)
            break;
        pthread_mutex_lock(&b->lock);
        bool kept = om_pool_put_locked(b, added[made]);
        pthread_mutex_unlock(&b->lock);
        if (!kept) {
            (void)om_phys_release(b, added[made]);
            st = OM_ERR(ORTMEM_E_NOMEM, "pool fill extents: the pool could not keep extent %zu",
                        made);
        }
    }
    if (st != ORTMEM_OK && added) {
        /* All or nothing: the extents this call added go again. */
        om_error_saved first;
        om_error_save(&first);
        size_t stuck = 0;
        for (size_t i = made; i-- > 0;) {
            pthread_mutex_lock(&b->lock);
            bool mine = pool_remove_locked(b, added[i]);
            pthread_mutex_unlock(&b->lock);
            if (mine) /* not taken by a commit meanwhile */
                stuck += om_phys_release(b, added[i]) != ORTMEM_OK;
        }
        st = om_error_restore(&first, st);
        if (stuck)
            st = om_error_wrap(st, "pool fill extents: %zu extent%s quarantined in the rollback",
                               stuck, stuck == 1 ? "" : "s");
    }
    om_free(added);
    om_backend_unpin(b);
    return st;
}

ortmem_status ortmem_pool_stats_get(ortmem_backend *b, ortmem_pool_stats *stats)
{
    om_error_clear();
    ortmem_status st = OM_STRUCT_CHECK("pool stats", "stats", stats);
    if (st != ORTMEM_OK)
        return st;
    st = om_backend_pin(b, "pool stats");
    if (st != ORTMEM_OK)
        return st;
    ortmem_pool_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = stats->struct_size;
    pthread_mutex_lock(&b->lock);
    s.classes = b->pool.max_class + 1;
    for (unsigned c = 0; c < ORTMEM_POOL_CLASSES_MAX; c++) {
        s.extents[c] = b->pool.class_count[c];
        s.hits[c] = b->pool.hits[c];
        s.misses[c] = b->pool.misses[c];
    }
    s.unpoolable_releases = b->pool.unpoolable_releases;
    pthread_mutex_unlock(&b->lock);
    memcpy(stats, &s, stats->struct_size);
    om_backend_unpin(b);
    return ORTMEM_OK;
}
