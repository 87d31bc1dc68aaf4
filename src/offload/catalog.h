/* Internal side of the weight catalog: what the residency cache reads. */
#ifndef ORTMEM_OFFLOAD_CATALOG_H
#define ORTMEM_OFFLOAD_CATALOG_H

#include <ortmem/offload.h>

/* Marks the catalog used by a cache (destroy answers ORTMEM_E_BUSY until
 * om_catalog_unuse). */
void om_catalog_use(ortmem_weight_catalog *catalog);
void om_catalog_unuse(ortmem_weight_catalog *catalog);

/* The tensor's bytes (id < count). */
uint64_t om_catalog_bytes(const ortmem_weight_catalog *catalog, uint32_t id);
const char *om_catalog_name(const ortmem_weight_catalog *catalog, uint32_t id);

/* The host bytes to copy from, after checking that a file catalog's file is
 * unchanged since open (ORTMEM_E_IO naming the numbers otherwise). */
ortmem_status om_catalog_source(ortmem_weight_catalog *catalog, uint32_t id, const void **host);

#endif
