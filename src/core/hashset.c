#include "core/hashset.h"

#include "core/alloc.h"

#define OM_HASHSET_MIN_SLOTS 16

static size_t om_hashset_home(uint64_t key, size_t capacity)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (size_t)key & (capacity - 1);
}

/* Slot holding key (not 0), or the free slot that ends its probe run. */
static size_t om_hashset_slot(const om_hashset *set, uint64_t key)
{
    size_t mask = set->capacity - 1;
    for (size_t i = om_hashset_home(key, set->capacity);; i = (i + 1) & mask) {
        if (set->slots[i] == key || set->slots[i] == 0)
            return i;
    }
}

static bool om_hashset_grow(om_hashset *set)
{
    size_t capacity = set->capacity ? set->capacity * 2 : OM_HASHSET_MIN_SLOTS;
    if (capacity <= set->capacity)
        return false;
    uint64_t *fresh = om_calloc(capacity, sizeof *fresh);
    if (!fresh)
        return false;
    uint64_t *old = set->slots;
    size_t old_capacity = set->capacity;
    set->slots = fresh;
    set->capacity = capacity;
    for (size_t i = 0; i < old_capacity; i++) {
        if (old[i])
            set->slots[om_hashset_slot(set, old[i])] = old[i];
    }
    om_free(old);
    return true;
}

bool om_hashset_insert(om_hashset *set, uint64_t key)
{
    if (key == 0) {
        set->has_zero = true;
        return true;
    }
    if (om_hashset_contains(set, key))
        return true;
    /* At least one slot stays free, so that every probe run ends. */
    if ((set->count + 1) * 2 > set->capacity && !om_hashset_grow(set) &&
        set->count + 1 >= set->capacity)
        return false;
    set->slots[om_hashset_slot(set, key)] = key;
    set->count++;
    return true;
}

bool om_hashset_contains(const om_hashset *set, uint64_t key)
{
    if (key == 0)
        return set->has_zero;
    return set->capacity && set->slots[om_hashset_slot(set, key)] == key;
}

bool om_hashset_remove(om_hashset *set, uint64_t key)
{
    if (key == 0) {
        bool had = set->has_zero;
        set->has_zero = false;
        return had;
    }
    if (!set->capacity)
        return false;
    size_t mask = set->capacity - 1;
    size_t hole = om_hashset_slot(set, key);
    if (set->slots[hole] != key)
        return false;
    set->slots[hole] = 0;
    set->count--;
    /* Backward shift: a key later in the run moves into the hole when that
     * brings it nearer its home slot, so every run stays unbroken. */
    for (size_t j = (hole + 1) & mask; set->slots[j]; j = (j + 1) & mask) {
        size_t home = om_hashset_home(set->slots[j], set->capacity);
        if (((hole - home) & mask) < ((j - home) & mask)) {
            set->slots[hole] = set->slots[j];
            set->slots[j] = 0;
            hole = j;
        }
    }
    return true;
}

size_t om_hashset_size(const om_hashset *set)
{
    return set->count + (set->has_zero ? 1 : 0);
}

bool om_hashset_next(const om_hashset *set, size_t *cursor, uint64_t *key)
{
    /* Cursor 0 is key 0; cursor i + 1 is slot i. */
    if (*cursor == 0) {
        *cursor = 1;
        if (set->has_zero) {
            *key = 0;
            return true;
        }
    }
    while (*cursor - 1 < set->capacity) {
        uint64_t k = set->slots[*cursor - 1];
        (*cursor)++;
        if (k) {
            *key = k;
            return true;
        }
    }
    return false;
}

void om_hashset_release(om_hashset *set)
{
    om_free(set->slots);
    *set = (om_hashset){NULL, 0, 0, false};
}
