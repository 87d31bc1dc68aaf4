/* The arena's free-block index and block nodes. Blocks tile the region in
 * address order (phys_prev/phys_next), so a free coalesces with both
 * neighbours in O(1); free blocks sit in TLSF segregated lists (first level:
 * power of two, second level: 32 linear steps) found through two bitmaps in
 * O(1). No byte of it lives in the managed memory (src/vmm/arena_internal.h). */
#include "core/alloc.h"
#include "vmm/arena_internal.h"

#include <string.h>

/* ---- size classes and the index ---- */

static void size_class(size_t size, unsigned *fl, unsigned *sl)
{
    if (size < OM_SL_COUNT) {
        *fl = 0;
        *sl = (unsigned)size;
        return;
    }
    unsigned log2 = om_floor_log2(size);
    *fl = log2 - OM_SL_LOG2 + 1;
    *sl = (unsigned)(size >> (log2 - OM_SL_LOG2)) - OM_SL_COUNT;
}

void om_index_insert(ortmem_arena *a, om_block *b)
{
    assert(b->is_free);
    unsigned fl, sl;
    size_class(b->size, &fl, &sl);
    om_block *head = a->heads[fl][sl];
    b->free_prev = NULL;
    b->free_next = head;
    if (head)
        head->free_prev = b;
    a->heads[fl][sl] = b;
    a->fl_bitmap |= (uint64_t)1 << fl;
    a->sl_bitmap[fl] |= (uint32_t)1 << sl;
}

static void index_remove(ortmem_arena *a, om_block *b)
{
    unsigned fl, sl;
    size_class(b->size, &fl, &sl);
    if (b->free_prev)
        b->free_prev->free_next = b->free_next;
    else
        a->heads[fl][sl] = b->free_next;
    if (b->free_next)
        b->free_next->free_prev = b->free_prev;
    b->free_prev = b->free_next = NULL;
    if (!a->heads[fl][sl]) {
        a->sl_bitmap[fl] &= ~((uint32_t)1 << sl);
        if (!a->sl_bitmap[fl])
            a->fl_bitmap &= ~((uint64_t)1 << fl);
    }
}

/* Head of the first non-empty list of class (fl, sl) or above. */
static om_block *index_first_at_or_above(const ortmem_arena *a, unsigned fl, unsigned sl)
{
    uint32_t sl_map = a->sl_bitmap[fl] & (~(uint32_t)0 << sl);
    if (!sl_map) {
        if (fl + 1 >= OM_FL_COUNT)
            return NULL;
        uint64_t fl_map = a->fl_bitmap & (~(uint64_t)0 << (fl + 1));
        if (!fl_map)
            return NULL;
        fl = (unsigned)__builtin_ctzll(fl_map);
        sl_map = a->sl_bitmap[fl];
    }
    return a->heads[fl][__builtin_ctz(sl_map)];
}

/* Offset at which b holds bytes aligned to align (absolute address), or OM_NONE. */
static size_t fit_offset(const ortmem_arena *a, const om_block *b, size_t bytes, size_t align)
{
    uintptr_t addr = a->base + b->offset;
    if (addr > UINTPTR_MAX - (align - 1))
        return OM_NONE;
    size_t pad = (size_t)(((addr + align - 1) & ~(uintptr_t)(align - 1)) - addr);
    if (pad > b->size || b->size - pad < bytes)
        return OM_NONE;
    return b->offset + pad;
}

/* Good fit in O(1): round the request plus its worst padding up to the next
 * class boundary; every block at or above that class fits. */
static om_block *find_good_fit(const ortmem_arena *a, size_t bytes, size_t align, size_t *start)
{
    size_t worst_pad = align > a->quantum ? align - a->quantum : 0;
    if (bytes > SIZE_MAX - worst_pad)
        return NULL;
    size_t want = bytes + worst_pad;
    size_t step = want >= OM_SL_COUNT ? (size_t)1 << (om_floor_log2(want) - OM_SL_LOG2) : 1;
    if (want > SIZE_MAX - (step - 1))
        return NULL;
    unsigned fl, sl;
    size_class(want + step - 1, &fl, &sl);
    om_block *b = index_first_at_or_above(a, fl, sl);
    size_t off = b ? fit_offset(a, b, bytes, align) : OM_NONE;
    if (off == OM_NONE)
        return NULL;
    *start = off;
    return b;
}

/* The first block of one list that holds bytes at align. */
static om_block *find_in_list(const ortmem_arena *a, om_block *head, size_t bytes, size_t align,
                              size_t *start)
{
    for (om_block *b = head; b; b = b->free_next) {
        size_t off = fit_offset(a, b, bytes, align);
        if (off != OM_NONE) {
            *start = off;
            return b;
        }
    }
    return NULL;
}

om_block *om_index_find(const ortmem_arena *a, size_t bytes, size_t align, size_t *start)
{
    om_block *b = find_good_fit(a, bytes, align, start);
    if (b)
        return b;
    /* Rounding skipped the classes just below it, whose blocks may still fit
     * (given their real padding). Scan them, so that ORTMEM_E_NOMEM means no
     * block fits at all. Classes above were empty, so this walk stays short
     * unless the alignment is large. */
    unsigned fl, sl;
    size_class(bytes, &fl, &sl);
    for (; fl < OM_FL_COUNT; fl++, sl = 0) {
        uint32_t sl_map = a->sl_bitmap[fl] & (~(uint32_t)0 << sl);
        for (; sl_map; sl_map &= sl_map - 1) {
            b = find_in_list(a, a->heads[fl][__builtin_ctz(sl_map)], bytes, align, start);
            if (b)
                return b;
        }
    }
    return NULL;
}

size_t om_index_largest(const ortmem_arena *a)
{
    if (!a->fl_bitmap)
        return 0;
    unsigned fl = 63u - (unsigned)__builtin_clzll(a->fl_bitmap);
    unsigned sl = 31u - (unsigned)__builtin_clz(a->sl_bitmap[fl]);
    size_t largest = 0;
    for (const om_block *b = a->heads[fl][sl]; b; b = b->free_next)
        largest = b->size > largest ? b->size : largest;
    return largest;
}

/* ---- block nodes ---- */

bool om_blocks_grow(ortmem_arena *a, size_t n)
{
    while (a->spare_count < n) {
        om_block *b = om_malloc(sizeof *b);
        if (!b)
            return false;
        b->phys_next = a->spare;
        a->spare = b;
        a->spare_count++;
    }
    return true;
}

static om_block *node_take(ortmem_arena *a)
{
    assert(a->spare_count > 0); /* made room for before the change began */
    om_block *b = a->spare;
    a->spare = b->phys_next;
    a->spare_count--;
    memset(b, 0, sizeof *b);
    return b;
}

static void node_give(ortmem_arena *a, om_block *b)
{
    if (a->spare_count >= OM_SPARE_NODES_MAX) {
        om_free(b);
        return;
    }
    b->phys_next = a->spare;
    a->spare = b;
    a->spare_count++;
}

void om_blocks_release(ortmem_arena *a)
{
    for (om_block *b = a->first, *next; b; b = next) {
        next = b->phys_next;
        for (om_freed *r = b->freed_head, *rn; r; r = rn) {
            rn = r->next;
            om_free(r);
        }
        om_free(b);
    }
    for (om_block *b = a->spare, *next; b; b = next) {
        next = b->phys_next;
        om_free(b);
    }
}

static void link_before(ortmem_arena *a, om_block *at, om_block *b)
{
    b->phys_prev = at->phys_prev;
    b->phys_next = at;
    if (at->phys_prev)
        at->phys_prev->phys_next = b;
    else
        a->first = b;
    at->phys_prev = b;
}

static void link_after(om_block *at, om_block *b)
{
    b->phys_prev = at;
    b->phys_next = at->phys_next;
    if (at->phys_next)
        at->phys_next->phys_prev = b;
    at->phys_next = b;
}

/* Unlinks b, which always has a lower neighbour (it is merged into it). */
static void unlink_block(om_block *b)
{
    b->phys_prev->phys_next = b->phys_next;
    if (b->phys_next)
        b->phys_next->phys_prev = b->phys_prev;
}

static void freed_append(om_block *dst, om_freed *head, om_freed *tail)
{
    if (!head)
        return;
    if (dst->freed_tail)
        dst->freed_tail->next = head;
    else
        dst->freed_head = head;
    dst->freed_tail = tail;
}

/* A free block [offset, offset + size) linked next to b (before or after). */
static om_block *split_off(ortmem_arena *a, om_block *b, size_t offset, size_t size, bool before)
{
    om_block *part = node_take(a);
    part->offset = offset;
    part->size = size;
    part->is_free = true;
    if (before)
        link_before(a, b, part);
    else
        link_after(b, part);
    return part;
}

/* Hands b's freed starts out to the parts: below start to left, inside
 * [start, end) forgotten, from end on to right. */
static void split_freed(ortmem_arena *a, om_block *b, om_block *left, om_block *right, size_t start,
                        size_t end)
{
    om_freed *r = b->freed_head, *tail = b->freed_tail;
    while (r && r->offset < start) {
        om_freed *next = r->next;
        r->next = NULL;
        freed_append(left, r, r);
        r = next;
    }
    while (r && r->offset < end) {
        om_freed *next = r->next;
        om_map_remove(&a->freed, r->offset);
        om_free(r);
        r = next;
    }
    if (r)
        freed_append(right, r, tail);
}

void om_block_carve(ortmem_arena *a, om_block *b, size_t start, size_t end)
{
    assert(b->is_free && start >= b->offset && end <= b->offset + b->size && start < end);
    index_remove(a, b);
    size_t block_end = b->offset + b->size;
    om_block *left = start > b->offset ? split_off(a, b, b->offset, start - b->offset, true) : NULL;
    om_block *right = end < block_end ? split_off(a, b, end, block_end - end, false) : NULL;
    split_freed(a, b, left, right, start, end);
    b->offset = start;
    b->size = end - start;
    b->is_free = false;
    b->freed_head = b->freed_tail = NULL;
    if (left)
        om_index_insert(a, left);
    if (right)
        om_index_insert(a, right);
}

/* Merges the free block hi into its lower neighbour lo. */
static void merge_into(ortmem_arena *a, om_block *lo, om_block *hi)
{
    lo->size += hi->size;
    freed_append(lo, hi->freed_head, hi->freed_tail);
    unlink_block(hi);
    node_give(a, hi);
}

void om_block_coalesce(ortmem_arena *a, om_block *b)
{
    om_block *prev = b->phys_prev;
    if (prev && prev->is_free) {
        index_remove(a, prev);
        merge_into(a, prev, b);
        b = prev;
    }
    om_block *next = b->phys_next;
    if (next && next->is_free) {
        index_remove(a, next);
        merge_into(a, b, next);
    }
    om_index_insert(a, b);
}
