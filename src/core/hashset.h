/* A set of 64-bit keys (addresses or integers): open addressing with linear
 * probing, and backward-shift removal so that no tombstones build up. Not
 * locked: its owner's lock guards it. Host memory through om_calloc/om_free. */
#ifndef ORTMEM_SRC_CORE_HASHSET_H
#define ORTMEM_SRC_CORE_HASHSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct om_hashset {
    uint64_t *slots; /* 0 marks a free slot; key 0 itself is held in has_zero */
    size_t capacity; /* a power of two, or 0 before the first insert */
    size_t count;    /* keys in slots (key 0 not included) */
    bool has_zero;
} om_hashset;

/* Adds key (a key already there changes nothing). Grows at half load; when a
 * grow finds no memory the key still goes in while a free slot would remain.
 * False (the set unchanged) only when neither was possible. */
bool om_hashset_insert(om_hashset *set, uint64_t key);

bool om_hashset_contains(const om_hashset *set, uint64_t key);

/* Takes key out; false when it was not there. Never allocates. */
bool om_hashset_remove(om_hashset *set, uint64_t key);

/* Keys held. */
size_t om_hashset_size(const om_hashset *set);

/* Visits every key once: *cursor starts at 0; false when none is left. The
 * set must not change during the visit. */
bool om_hashset_next(const om_hashset *set, size_t *cursor, uint64_t *key);

/* Frees the slots; the set is empty (and usable) again. */
void om_hashset_release(om_hashset *set);

#endif
