/* A recency list over tensor ids 0..n-1 for the policies: doubly linked
 * through two index arrays, O(1) push at either end, unlink and peek. The
 * head is the most recently used end, the tail the least. */
#ifndef ORTMEM_OFFLOAD_POLICY_LIST_H
#define ORTMEM_OFFLOAD_POLICY_LIST_H

#include <stdbool.h>
#include <stdint.h>

#include "core/alloc.h"
#include "offload/policy.h"

typedef struct om_plist {
    uint32_t *prev, *next; /* OM_POLICY_NONE ends a chain */
    bool *in;              /* whether the tensor is on the list */
    uint32_t head, tail;
    uint32_t count;
} om_plist;

/* n >= 1; false when the arrays could not be allocated (nothing kept). */
static inline bool om_plist_init(om_plist *l, uint32_t n)
{
    l->prev = om_malloc(n * sizeof *l->prev);
    l->next = om_malloc(n * sizeof *l->next);
    l->in = om_calloc(n, sizeof *l->in);
    l->head = l->tail = OM_POLICY_NONE;
    l->count = 0;
    if (l->prev && l->next && l->in)
        return true;
    om_free(l->prev);
    om_free(l->next);
    om_free(l->in);
    return false;
}

static inline void om_plist_free(om_plist *l)
{
    om_free(l->prev);
    om_free(l->next);
    om_free(l->in);
}

/* t on the list. */
static inline void om_plist_unlink(om_plist *l, uint32_t t)
{
    uint32_t p = l->prev[t], n = l->next[t];
    if (p != OM_POLICY_NONE)
        l->next[p] = n;
    else
        l->head = n;
    if (n != OM_POLICY_NONE)
        l->prev[n] = p;
    else
        l->tail = p;
    l->in[t] = false;
    l->count--;
}

/* t not on the list: it becomes the most recently used. */
static inline void om_plist_push_head(om_plist *l, uint32_t t)
{
    l->prev[t] = OM_POLICY_NONE;
    l->next[t] = l->head;
    if (l->head != OM_POLICY_NONE)
        l->prev[l->head] = t;
    else
        l->tail = t;
    l->head = t;
    l->in[t] = true;
    l->count++;
}

/* t not on the list: it becomes the least recently used (first to go). */
static inline void om_plist_push_tail(om_plist *l, uint32_t t)
{
    l->next[t] = OM_POLICY_NONE;
    l->prev[t] = l->tail;
    if (l->tail != OM_POLICY_NONE)
        l->next[l->tail] = t;
    else
        l->head = t;
    l->tail = t;
    l->in[t] = true;
    l->count++;
}

/* Moves t (on the list or not) to the most recently used end. */
static inline void om_plist_touch(om_plist *l, uint32_t t)
{
    if (l->in[t])
        om_plist_unlink(l, t);
    om_plist_push_head(l, t);
}

/* The least recently used tensor for which evictable says true (NULL: any),
 * or OM_POLICY_NONE. */
static inline uint32_t om_plist_oldest(const om_plist *l, om_policy_evictable_fn evictable,
                                       void *ctx)
{
    for (uint32_t t = l->tail; t != OM_POLICY_NONE; t = l->prev[t])
        if (!evictable || evictable(ctx, t))
            return t;
    return OM_POLICY_NONE;
}

/* The most recently used (or pushed) tensor for which evictable says true
 * (NULL: any), or OM_POLICY_NONE. */
static inline uint32_t om_plist_newest(const om_plist *l, om_policy_evictable_fn evictable,
                                       void *ctx)
{
    for (uint32_t t = l->head; t != OM_POLICY_NONE; t = l->next[t])
        if (!evictable || evictable(ctx, t))
            return t;
    return OM_POLICY_NONE;
}

#endif
