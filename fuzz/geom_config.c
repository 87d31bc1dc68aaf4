/* ortmem-geom's config.json reader (tools/geom/config.c) on arbitrary
 * bytes: a refusal is a message; an accepted config has positive
 * dimensions, and its geometry goes through ortmem's own checks. */
#include <string.h>

#include "../tools/geom/geom.h"
#include "common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_as_file(data, size);
    if (!path)
        return 0;
    geom_config c;
    char err[256] = "";
    if (!geom_config_read(path, &c, err, sizeof err)) {
        /* geom.h promises one line without a newline; jansson's parse
         * errors quote the input, newlines included (reported, not fixed
         * here: tools/geom/config.c is not the fuzzer's), so only a message
         * is checked. */
        FUZZ_CHECK(err[0] != '\0' && memchr(err, '\0', sizeof err), "refusal without a message");
        return 0;
    }
    FUZZ_CHECK(c.layers > 0 && c.kv_heads > 0 && c.head_dim > 0, "dims %u %u %u", c.layers,
               c.kv_heads, c.head_dim);
    FUZZ_CHECK(memchr(c.dtype, '\0', sizeof c.dtype) != NULL, "dtype not terminated");
    ortmem_kv_geometry g = ORTMEM_KV_GEOMETRY_INIT;
    g.layers = c.layers;
    g.kv_heads = c.kv_heads;
    g.head_dim = c.head_dim;
    g.granule = 2u << 20;
    ortmem_kv_dtype dtype;
    if (geom_torch_dtype(c.dtype, &dtype))
        g.dtype = dtype;
    /* ortmem_kv_evaluate walks every fragment (2 x layers x heads head-major):
     * a config with a billion layers makes it run for minutes (a finding in
     * src/kv/geometry.c, fuzz/findings/geom_evaluate_slow.json), so the
     * fuzzer evaluates only geometries of at most 2^16 fragments. */
    if ((uint64_t)g.layers * g.kv_heads <= (1u << 15) &&
        ortmem_kv_geometry_check(&g) == ORTMEM_OK) {
        ortmem_kv_eval e = {.struct_size = sizeof e};
        ortmem_status st = ortmem_kv_evaluate(&g, 1000, 4096, 2, 100, 0, &e);
        FUZZ_CHECK(st == ORTMEM_OK || st == ORTMEM_E_OVERFLOW, "evaluate: %s", ortmem_last_error());
    }
    return 0;
}
