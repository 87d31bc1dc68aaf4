/* Export and import of one region granule as a file descriptor: export hands
 * out the granule under a mapped offset, import maps a granule received from
 * another process into an unmapped one (src/vmm/region_internal.h). */
#include "vmm/region_internal.h"

#include "core/error.h"

static ortmem_status export_locked(ortmem_region *r, size_t offset, int *fd)
{
    if (offset >= r->size)
        return OM_ERR(ORTMEM_E_RANGE, "region export: offset %zu outside %zu bytes", offset,
                      r->size);
    const om_slot *s = &r->slots[offset / r->granule];
    if (s->state != ORTMEM_GRANULE_MAPPED)
        return OM_ERR(ORTMEM_E_STATE, "region export: granule at offset %zu is not mapped", offset);
    if (s->index != 0)
        return OM_ERR(ORTMEM_E_RANGE,
                      "region export: offset %zu lies inside the extent [%zu, +%zu); an extent "
                      "is exported whole, from its first byte",
                      offset, om_extent_first(r, offset / r->granule) * r->granule, s->phys->size);
    if (!(s->phys->flags & (OM_PHYS_EXPORTABLE | OM_PHYS_IMPORTED)))
        return OM_ERR(ORTMEM_E_UNSUPPORTED,
                      "region export: region was not created with ORTMEM_REGION_EXPORTABLE");
    return om_backend_export(r->backend, s->phys->handle, fd);
}

ortmem_status ortmem_region_export(ortmem_region *r, size_t offset, int *fd)
{
    om_error_clear();
    if (!fd)
        return OM_ERR(ORTMEM_E_INVALID, "region export: fd output is NULL");
    ortmem_status st = om_region_lock(r, "region export");
    if (st != ORTMEM_OK)
        return st;
    st = export_locked(r, offset, fd);
    om_region_unlock(r);
    return st;
}

/* The granule at offset is whole, inside the region and unmapped. */
static ortmem_status check_import_slot(const ortmem_region *r, size_t offset)
{
    ortmem_status st = om_region_check_range(r, offset, r->granule, "region import");
    if (st == ORTMEM_OK)
        st = om_region_check_aligned(r, offset, r->granule, "region import");
    if (st == ORTMEM_OK && r->slots[offset / r->granule].state != ORTMEM_GRANULE_UNMAPPED)
        st = OM_ERR(ORTMEM_E_STATE, "region import: granule at offset %zu is already committed",
                    offset);
    return st;
}

/* Imports the granule behind fd (charged to the account) and maps it at gi. */
static ortmem_status import_locked(ortmem_region *r, size_t gi, int fd, ortmem_access access)
{
    om_hold hold;
    ortmem_status st = om_region_hold(r, r->granule, r->granule, &hold);
    if (st != ORTMEM_OK)
        return st;
    om_phys *p = NULL;
    st = om_phys_import(r->backend, fd, &r->account, &p);
    if (st == ORTMEM_OK) {
        hold.owned = 0; /* the import charged the granule */
        st = om_region_map(r, gi, 1, &p, access, &hold);
        if (st != ORTMEM_OK)
            om_region_give_back(r, 1, &p, 0);
        assert(st != ORTMEM_OK || hold.mapped == 0);
    }
    om_region_unhold_rest(r, &hold);
    assert(om_slots_consistent(r, gi, 1));
    return st;
}

static ortmem_status region_import_once(ortmem_region *r, size_t offset, int fd,
                                        ortmem_access access, om_relief *relief)
{
    om_error_clear();
    if (fd < 0)
        return OM_ERR(ORTMEM_E_INVALID, "region import: descriptor %d is negative", fd);
    if (!om_access_known(access))
        return OM_ERR(ORTMEM_E_INVALID, "region import: unknown access %d", (int)access);
    ortmem_status st = om_region_lock(r, "region import");
    if (st != ORTMEM_OK)
        return st;
    r->relief = relief;
    st = check_import_slot(r, offset);
    if (st == ORTMEM_OK)
        st = import_locked(r, offset / r->granule, fd, access);
    r->relief = NULL;
    om_region_unlock(r);
    return st;
}

ortmem_status ortmem_region_import(ortmem_region *r, size_t offset, int fd, ortmem_access access)
{
    om_relief relief = {0};
    ortmem_status st = region_import_once(r, offset, fd, access, &relief);
    if (om_relief_run(&relief, st))
        st = region_import_once(r, offset, fd, access, NULL);
    return st;
}
