/* Share and copy between two regions of one backend. A share maps the
 * source's granules into the destination (each gains a mapper); a copy moves
 * bytes through the backend's copy primitive. Two regions are locked in id
 * order (src/vmm/region_internal.h). */
#include "core/alloc.h"
#include "vmm/region_internal.h"

#include "core/error.h"
#include "core/trace.h"

static void lock_pair(ortmem_region *a, ortmem_region *b)
{
    if (a == b) {
        pthread_mutex_lock(&a->lock);
    } else if (a->id < b->id) {
        pthread_mutex_lock(&a->lock);
        pthread_mutex_lock(&b->lock);
    } else {
        pthread_mutex_lock(&b->lock);
        pthread_mutex_lock(&a->lock);
    }
}

/* Pins both handles and locks both regions; on failure nothing stays pinned. */
static ortmem_status pin_pair(ortmem_region *dst, ortmem_region *src, const char *dst_what,
                              const char *src_what)
{
    ortmem_status st = om_handle_pin(dst, OM_KIND_REGION, dst_what);
    if (st != ORTMEM_OK)
        return st;
    st = om_handle_pin(src, OM_KIND_REGION, src_what);
    if (st != ORTMEM_OK)
        om_handle_unpin(&dst->hdr);
    else
        lock_pair(dst, src);
    return st;
}

static void unpin_pair(ortmem_region *dst, ortmem_region *src)
{
    pthread_mutex_unlock(&dst->lock);
    if (dst != src)
        pthread_mutex_unlock(&src->lock);
    om_handle_unpin(&src->hdr);
    om_handle_unpin(&dst->hdr);
}

/* ---- share ---- */

/* Every source granule mapped, every destination granule free, the source a
 * union of whole extents. */
static ortmem_status check_share_slots(const ortmem_region *dst, size_t dst_offset,
                                       const ortmem_region *src, size_t src_offset, size_t len)
{
    const char *what = "region share";
    size_t n = len / dst->granule;
    for (size_t k = 0; k < n; k++) {
        size_t si = src_offset / src->granule + k, di = dst_offset / dst->granule + k;
        if (src->slots[si].state != ORTMEM_GRANULE_MAPPED)
            return OM_ERR(ORTMEM_E_STATE, "%s: source granule at offset %zu is not mapped", what,
                          si * src->granule);
        if (dst->slots[di].state != ORTMEM_GRANULE_UNMAPPED)
            return OM_ERR(ORTMEM_E_STATE,
                          "%s: destination granule at offset %zu is already committed", what,
                          di * dst->granule);
    }
    /* Whole extents only: the first source granule starts one, the last ends one. */
    size_t first = src_offset / src->granule, last = first + n - 1;
    const om_slot *lo = &src->slots[first], *hi = &src->slots[last];
    if (lo->index != 0)
        return OM_ERR(ORTMEM_E_RANGE,
                      "%s: source [%zu, +%zu) cuts the extent [%zu, +%zu); extents are shared "
                      "whole",
                      what, src_offset, len, om_extent_first(src, first) * src->granule,
                      lo->phys->size);
    if (hi->index + 1 != hi->phys->granules)
        return OM_ERR(ORTMEM_E_RANGE,
                      "%s: source [%zu, +%zu) cuts the extent [%zu, +%zu); extents are shared "
                      "whole",
                      what, src_offset, len, om_extent_first(src, last) * src->granule,
                      hi->phys->size);
    return ORTMEM_OK;
}

static ortmem_status check_share(const ortmem_region *dst, size_t dst_offset,
                                 const ortmem_region *src, size_t src_offset, size_t len)
{
    const char *what = "region share";
    ortmem_status st = om_region_check_range(dst, dst_offset, len, "region share (destination)");
    if (st == ORTMEM_OK)
        st = om_region_check_range(src, src_offset, len, "region share (source)");
    if (st == ORTMEM_OK)
        st = om_region_check_aligned(dst, dst_offset, len, "region share (destination)");
    if (st == ORTMEM_OK)
        st = om_region_check_aligned(src, src_offset, len, "region share (source)");
    if (st != ORTMEM_OK)
        return st;
    if (dst->backend != src->backend)
        return OM_ERR(ORTMEM_E_INVALID, "%s: regions live on different backends ('%s', '%s')", what,
                      dst->backend->ops.name, src->backend->ops.name);
    if (dst == src && dst_offset < src_offset + len && src_offset < dst_offset + len)
        return OM_ERR(ORTMEM_E_RANGE, "%s: [%zu, +%zu) and [%zu, +%zu) overlap in one region", what,
                      dst_offset, len, src_offset, len);
    return check_share_slots(dst, dst_offset, src, src_offset, len);
}

static const char *access_name(ortmem_access access)
{
    return access == ORTMEM_ACCESS_READ_WRITE ? "rw" : access == ORTMEM_ACCESS_READ ? "ro" : "none";
}

#define SHARE_FEW 8

/* Maps the checked source granules into the destination, charging dst's account. */
static ortmem_status share_locked(ortmem_region *dst, size_t dst_offset, ortmem_region *src,
                                  size_t src_offset, size_t len, ortmem_access access)
{
    size_t n = len / dst->granule, g0 = dst_offset / dst->granule;
    /* A share of a few granules needs no host memory: a rollback that maps a
     * granule back by sharing it (the KV zero tail) cannot fail for it. */
    om_phys *few[SHARE_FEW];
    om_phys **phys = n <= SHARE_FEW ? few : om_calloc(n, sizeof *phys);
    if (!phys)
        return OM_ERR(ORTMEM_E_NOMEM, "region share: bookkeeping for %zu granules", n);
    for (size_t k = 0; k < n; k++)
        phys[k] = src->slots[src_offset / src->granule + k].phys;
    om_hold hold;
    ortmem_status st = om_region_hold(dst, 0, (uint64_t)len, &hold);
    if (st == ORTMEM_OK) {
        st = om_region_map(dst, g0, n, phys, access, &hold);
        assert(st != ORTMEM_OK || hold.mapped == 0);
        om_region_unhold_rest(dst, &hold);
    }
    if (st != ORTMEM_OK)
        st = om_error_wrap(st, "region share of %zu granules", n);
    else if (dst->traced && src->traced)
        om_trace_line("share r%llu %zu r%llu %zu %zu %s", (unsigned long long)dst->id, dst_offset,
                      (unsigned long long)src->id, src_offset, len, access_name(access));
    assert(st != ORTMEM_OK || om_slots_in_state(dst, g0, n, ORTMEM_GRANULE_MAPPED));
    assert(om_slots_consistent(dst, g0, n));
    if (phys != few)
        om_free(phys);
    return st;
}

static ortmem_status region_share_once(ortmem_region *dst, size_t dst_offset, ortmem_region *src,
                                       size_t src_offset, size_t len, ortmem_access access,
                                       om_relief *relief)
{
    om_error_clear();
    if (!om_access_known(access))
        return OM_ERR(ORTMEM_E_INVALID, "region share: unknown access %d", (int)access);
    ortmem_status st = pin_pair(dst, src, "region share (destination)", "region share (source)");
    if (st != ORTMEM_OK)
        return st;
    dst->relief = relief;
    st = check_share(dst, dst_offset, src, src_offset, len);
    if (st == ORTMEM_OK)
        st = share_locked(dst, dst_offset, src, src_offset, len, access);
    dst->relief = NULL;
    unpin_pair(dst, src);
    return st;
}

ortmem_status ortmem_region_share(ortmem_region *dst, size_t dst_offset, ortmem_region *src,
                                  size_t src_offset, size_t len, ortmem_access access)
{
    om_relief relief = {0};
    ortmem_status st = region_share_once(dst, dst_offset, src, src_offset, len, access, &relief);
    if (om_relief_run(&relief, st))
        st = region_share_once(dst, dst_offset, src, src_offset, len, access, NULL);
    return st;
}

/* ---- copy ---- */

static ortmem_status check_accessible(const ortmem_region *r, size_t offset, size_t len,
                                      ortmem_access need, const char *what)
{
    size_t first = offset / r->granule, last = (offset + len - 1) / r->granule;
    for (size_t k = first; k <= last; k++) {
        const om_slot *s = &r->slots[k];
        if (s->state != ORTMEM_GRANULE_MAPPED || (s->access & need) != need)
            return OM_ERR(ORTMEM_E_STATE, "%s: granule at offset %zu is not mapped %s", what,
                          k * r->granule, need == ORTMEM_ACCESS_READ ? "readable" : "writable");
    }
    return ORTMEM_OK;
}

static ortmem_status copy_locked(ortmem_region *dst, size_t dst_offset, ortmem_region *src,
                                 size_t src_offset, size_t len)
{
    ortmem_status st = om_region_check_range(dst, dst_offset, len, "region copy (destination)");
    if (st == ORTMEM_OK)
        st = om_region_check_range(src, src_offset, len, "region copy (source)");
    if (st == ORTMEM_OK && dst->backend != src->backend)
        st = OM_ERR(ORTMEM_E_INVALID, "region copy: regions live on different backends");
    if (st == ORTMEM_OK)
        st = check_accessible(src, src_offset, len, ORTMEM_ACCESS_READ, "region copy (source)");
    if (st == ORTMEM_OK)
        st = check_accessible(dst, dst_offset, len, ORTMEM_ACCESS_READ_WRITE,
                              "region copy (destination)");
    if (st == ORTMEM_OK)
        st = om_backend_copy(dst->backend, dst->base + dst_offset, src->base + src_offset, len);
    return st;
}

ortmem_status ortmem_region_copy(ortmem_region *dst, size_t dst_offset, ortmem_region *src,
                                 size_t src_offset, size_t len)
{
    om_error_clear();
    ortmem_status st = pin_pair(dst, src, "region copy (destination)", "region copy (source)");
    if (st != ORTMEM_OK)
        return st;
    st = copy_locked(dst, dst_offset, src, src_offset, len);
    unpin_pair(dst, src);
    return st;
}
