/* The arena's offset -> entry maps (used blocks, freed starts): open
 * addressing with linear probing and backward-shift deletion, keyed by the
 * size_t each entry starts with (src/vmm/arena_internal.h). */
#include "core/alloc.h"
#include "vmm/arena_internal.h"

static size_t map_key(const void *entry)
{
    return *(const size_t *)entry;
}

static size_t map_hash(size_t key)
{
    uint64_t x = (uint64_t)key;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

/* Slot holding key, or the empty slot that ends its probe run. */
static size_t map_slot(const om_addr_map *m, size_t key)
{
    size_t mask = m->cap - 1;
    for (size_t i = map_hash(key) & mask;; i = (i + 1) & mask) {
        if (!m->slots[i] || map_key(m->slots[i]) == key)
            return i;
    }
}

void *om_map_find(const om_addr_map *m, size_t key)
{
    return m->cap ? m->slots[map_slot(m, key)] : NULL;
}

bool om_map_grow(om_addr_map *m)
{
    if ((m->count + 1) * 2 <= m->cap)
        return true;
    size_t ncap = m->cap ? m->cap * 2 : OM_MAP_MIN_SLOTS;
    if (ncap <= m->cap)
        return false;
    void **fresh = om_calloc(ncap, sizeof *fresh);
    if (!fresh)
        return false;
    void **old = m->slots;
    size_t ocap = m->cap;
    m->slots = fresh;
    m->cap = ncap;
    for (size_t i = 0; i < ocap; i++) {
        if (old[i])
            m->slots[map_slot(m, map_key(old[i]))] = old[i];
    }
    om_free(old);
    return true;
}

void om_map_insert(om_addr_map *m, void *entry)
{
    size_t i = map_slot(m, map_key(entry));
    assert(!m->slots[i] && (m->count + 1) * 2 <= m->cap); /* absent, room made */
    m->slots[i] = entry;
    m->count++;
}

void om_map_remove(om_addr_map *m, size_t key)
{
    if (!m->cap)
        return;
    size_t mask = m->cap - 1;
    size_t hole = map_slot(m, key);
    if (!m->slots[hole])
        return;
    m->slots[hole] = NULL;
    m->count--;
    /* Backward shift: entries later in the run move into the hole when that
     * brings them nearer home, so lookups never need tombstones. */
    for (size_t j = (hole + 1) & mask; m->slots[j]; j = (j + 1) & mask) {
        size_t home = map_hash(map_key(m->slots[j])) & mask;
        if (((hole - home) & mask) < ((j - home) & mask)) {
            m->slots[hole] = m->slots[j];
            m->slots[j] = NULL;
            hole = j;
        }
    }
}

void om_map_free(om_addr_map *m)
{
    om_free(m->slots);
    *m = (om_addr_map){NULL, 0, 0};
}
