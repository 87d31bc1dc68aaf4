/* The weight catalog: tensors by name with their host backing, either a
 * read-only mmap of the model file or pinned staging memory. */
#include "offload/catalog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"

typedef struct om_catalog_entry {
    ortmem_weight_tensor t; /* t.name points into names */
    void *host;             /* host catalogs: the staging allocation */
} om_catalog_entry;

struct ortmem_weight_catalog {
    om_catalog_entry *entries;
    char *names;
    size_t count;
    ortmem_staging *staging; /* host catalogs */
    int fd;                  /* file catalogs; -1 otherwise */
    const unsigned char *map;
    uint64_t file_bytes;
    struct timespec mtime;
    atomic_uint users;
};

static const char *const om_weight_role_names[ORTMEM_WEIGHT_ROLE_COUNT] = {
    "attention", "mlp", "norm", "embedding", "output", "other",
};

const char *ortmem_weight_role_name(ortmem_weight_role role)
{
    return (unsigned)role < ORTMEM_WEIGHT_ROLE_COUNT ? om_weight_role_names[role] : "unknown";
}

uint64_t ortmem_weight_checksum(const void *bytes, size_t len)
{
    const unsigned char *p = bytes;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; p && i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Checks the table and copies it (names included) into a new catalog. */
static ortmem_status om_catalog_new(const char *what, const ortmem_weight_tensor *tensors,
                                    size_t count, ortmem_weight_catalog **out)
{
    if (!tensors || count == 0 || count > UINT32_MAX || !out)
        return OM_ERR(ORTMEM_E_INVALID, "%s: tensors %p, count %zu, out %p", what,
                      (const void *)tensors, count, (void *)out);
    size_t names_len = 0;
    for (size_t i = 0; i < count; i++) {
        const ortmem_weight_tensor *t = &tensors[i];
        if (!t->name || !t->name[0] || t->bytes == 0 ||
            (unsigned)t->role >= ORTMEM_WEIGHT_ROLE_COUNT)
            return OM_ERR(ORTMEM_E_INVALID, "%s: tensor %zu: name '%s', bytes %llu, role %d", what,
                          i, t->name ? t->name : "(null)", (unsigned long long)t->bytes,
                          (int)t->role);
        for (size_t j = 0; j < i; j++)
            if (strcmp(tensors[j].name, t->name) == 0)
                return OM_ERR(ORTMEM_E_INVALID, "%s: tensors %zu and %zu are both called '%s'",
                              what, j, i, t->name);
        names_len += strlen(t->name) + 1;
    }
    ortmem_weight_catalog *c = om_calloc(1, sizeof *c);
    om_catalog_entry *e = c ? om_calloc(count, sizeof *e) : NULL;
    char *names = e ? om_malloc(names_len) : NULL;
    if (!names) {
        om_free(e);
        om_free(c);
        return OM_ERR(ORTMEM_E_NOMEM, "%s: bookkeeping for %zu tensors", what, count);
    }
    char *n = names;
    for (size_t i = 0; i < count; i++) {
        size_t len = strlen(tensors[i].name) + 1;
        memcpy(n, tensors[i].name, len);
        e[i].t = tensors[i];
        e[i].t.name = n;
        n += len;
    }
    c->entries = e;
    c->names = names;
    c->count = count;
    c->fd = -1;
    atomic_init(&c->users, 0);
    *out = c;
    return ORTMEM_OK;
}

static void om_catalog_free(ortmem_weight_catalog *c)
{
    om_free(c->names);
    om_free(c->entries);
    om_free(c);
}

ortmem_status ortmem_weight_catalog_open_file(const char *path, const ortmem_weight_tensor *tensors,
                                              size_t count,
                                              const ortmem_weight_file_options *options,
                                              ortmem_weight_catalog **out)
{
    om_error_clear();
    static const char what[] = "weight catalog open";
    ortmem_weight_file_options o = ORTMEM_WEIGHT_FILE_OPTIONS_INIT;
    if (options) {
        ortmem_status st = OM_STRUCT_CHECK(what, "options", options);
        if (st != ORTMEM_OK)
            return st;
        memcpy(&o, options, options->struct_size);
    }
    if (!path)
        return OM_ERR(ORTMEM_E_INVALID, "%s: path is NULL", what);
    ortmem_weight_catalog *c = NULL;
    ortmem_status st = om_catalog_new(what, tensors, count, &c);
    if (st != ORTMEM_OK)
        return st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        om_catalog_free(c);
        return OM_ERR(ORTMEM_E_IO, "%s: open '%s': %s", what, path, strerror(err));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size <= 0) {
        st = OM_ERR(ORTMEM_E_IO, "%s: '%s' is empty or cannot be read (size %lld)", what, path,
                    (long long)sb.st_size);
        goto fail;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (o.expected_file_bytes && size != o.expected_file_bytes) {
        st =
            OM_ERR(ORTMEM_E_IO, "%s: '%s' is %llu bytes, expected %llu (truncated or changed)",
                   what, path, (unsigned long long)size, (unsigned long long)o.expected_file_bytes);
        goto fail;
    }
    for (size_t i = 0; i < count; i++) {
        const ortmem_weight_tensor *t = &tensors[i];
        if (t->offset > size || t->bytes > size - t->offset) {
            st = OM_ERR(ORTMEM_E_RANGE,
                        "%s: tensor '%s' ends at byte %llu (offset %llu + %llu) but '%s' is %llu "
                        "bytes (truncated?)",
                        what, t->name, (unsigned long long)(t->offset + t->bytes),
                        (unsigned long long)t->offset, (unsigned long long)t->bytes, path,
                        (unsigned long long)size);
            goto fail;
        }
    }
    if (o.checksum_bytes &&
        (o.checksum_offset > size || o.checksum_bytes > size - o.checksum_offset)) {
        st = OM_ERR(ORTMEM_E_RANGE, "%s: checksum range [%llu, +%llu) is outside '%s' (%llu bytes)",
                    what, (unsigned long long)o.checksum_offset,
                    (unsigned long long)o.checksum_bytes, path, (unsigned long long)size);
        goto fail;
    }
    if (size > SIZE_MAX) {
        st = OM_ERR(ORTMEM_E_OVERFLOW, "%s: '%s' is %llu bytes", what, path,
                    (unsigned long long)size);
        goto fail;
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        int err = errno;
        st = OM_ERR(ORTMEM_E_IO, "%s: mmap of '%s' (%llu bytes): %s", what, path,
                    (unsigned long long)size, strerror(err));
        goto fail;
    }
    if (o.checksum_bytes) {
        uint64_t sum = ortmem_weight_checksum((const unsigned char *)map + o.checksum_offset,
                                              (size_t)o.checksum_bytes);
        if (sum != o.expected_checksum) {
            munmap(map, (size_t)size);
            st = OM_ERR(ORTMEM_E_IO,
                        "%s: '%s' changed: checksum of [%llu, +%llu) is 0x%016llx, expected "
                        "0x%016llx",
                        what, path, (unsigned long long)o.checksum_offset,
                        (unsigned long long)o.checksum_bytes, (unsigned long long)sum,
                        (unsigned long long)o.expected_checksum);
            goto fail;
        }
    }
    c->fd = fd;
    c->map = map;
    c->file_bytes = size;
    c->mtime = sb.st_mtim;
    *out = c;
    return ORTMEM_OK;
fail:
    close(fd);
    om_catalog_free(c);
    return st;
}

ortmem_status ortmem_weight_catalog_create_host(ortmem_staging *staging,
                                                const ortmem_weight_tensor *tensors, size_t count,
                                                ortmem_weight_catalog **out)
{
    om_error_clear();
    static const char what[] = "weight catalog create (host)";
    if (!staging)
        return OM_ERR(ORTMEM_E_INVALID, "%s: staging is NULL", what);
    ortmem_weight_catalog *c = NULL;
    ortmem_status st = om_catalog_new(what, tensors, count, &c);
    if (st != ORTMEM_OK)
        return st;
    for (size_t i = 0; i < count; i++) {
        if (c->entries[i].t.bytes > SIZE_MAX)
            st = OM_ERR(ORTMEM_E_OVERFLOW, "%s: tensor '%s' is %llu bytes", what,
                        c->entries[i].t.name, (unsigned long long)c->entries[i].t.bytes);
        else
            st = ortmem_staging_alloc(staging, (size_t)c->entries[i].t.bytes, 0,
                                      &c->entries[i].host);
        if (st != ORTMEM_OK) {
            om_error_saved saved;
            om_error_save(&saved);
            for (size_t j = 0; j < i; j++)
                (void)ortmem_staging_free(staging, c->entries[j].host);
            om_catalog_free(c);
            (void)om_error_restore(&saved, st);
            return om_error_wrap(st, "%s: tensor %zu", what, i);
        }
    }
    c->staging = staging;
    *out = c;
    return ORTMEM_OK;
}

ortmem_status ortmem_weight_catalog_destroy(ortmem_weight_catalog *c)
{
    om_error_clear();
    if (!c)
        return OM_ERR(ORTMEM_E_INVALID, "weight catalog destroy: catalog is NULL");
    unsigned users = atomic_load(&c->users);
    if (users)
        return OM_ERR(ORTMEM_E_BUSY, "weight catalog destroy: %u residency cache(s) still use it",
                      users);
    if (c->map) {
        munmap((void *)c->map, (size_t)c->file_bytes);
        close(c->fd);
    }
    if (c->staging)
        for (size_t i = 0; i < c->count; i++)
            (void)ortmem_staging_free(c->staging, c->entries[i].host);
    om_catalog_free(c);
    return ORTMEM_OK;
}

size_t ortmem_weight_catalog_count(const ortmem_weight_catalog *c)
{
    return c ? c->count : 0;
}

ortmem_status ortmem_weight_catalog_find(const ortmem_weight_catalog *c, const char *name,
                                         uint32_t *id)
{
    om_error_clear();
    if (!c || !name || !id)
        return OM_ERR(ORTMEM_E_INVALID, "weight catalog find: catalog %p, name %p, id %p",
                      (const void *)c, (const void *)name, (void *)id);
    for (size_t i = 0; i < c->count; i++)
        if (strcmp(c->entries[i].t.name, name) == 0) {
            *id = (uint32_t)i;
            return ORTMEM_OK;
        }
    return OM_ERR(ORTMEM_E_NOT_FOUND, "weight catalog: no tensor called '%s' among its %zu", name,
                  c->count);
}

static ortmem_status om_catalog_check_id(const ortmem_weight_catalog *c, uint32_t id,
                                         const char *what)
{
    if (!c)
        return OM_ERR(ORTMEM_E_INVALID, "%s: catalog is NULL", what);
    if (id >= c->count)
        return OM_ERR(ORTMEM_E_NOT_FOUND, "%s: tensor id %u, the catalog has %zu", what, id,
                      c->count);
    return ORTMEM_OK;
}

ortmem_status ortmem_weight_catalog_tensor(const ortmem_weight_catalog *c, uint32_t id,
                                           ortmem_weight_tensor *tensor)
{
    om_error_clear();
    ortmem_status st = om_catalog_check_id(c, id, "weight catalog tensor");
    if (st == ORTMEM_OK && !tensor)
        st = OM_ERR(ORTMEM_E_INVALID, "weight catalog tensor: tensor is NULL");
    if (st == ORTMEM_OK)
        *tensor = c->entries[id].t;
    return st;
}

ortmem_status ortmem_weight_catalog_host(ortmem_weight_catalog *c, uint32_t id, void **host)
{
    om_error_clear();
    ortmem_status st = om_catalog_check_id(c, id, "weight catalog host");
    if (st == ORTMEM_OK && !host)
        st = OM_ERR(ORTMEM_E_INVALID, "weight catalog host: host is NULL");
    if (st == ORTMEM_OK)
        *host = c->map ? (void *)(c->map + c->entries[id].t.offset) : c->entries[id].host;
    return st;
}

ortmem_status ortmem_weight_catalog_verify(ortmem_weight_catalog *c)
{
    om_error_clear();
    if (!c)
        return OM_ERR(ORTMEM_E_INVALID, "weight catalog verify: catalog is NULL");
    if (!c->map)
        return ORTMEM_OK;
    struct stat sb;
    if (fstat(c->fd, &sb) != 0) {
        int err = errno;
        return OM_ERR(ORTMEM_E_IO, "weight catalog verify: fstat: %s", strerror(err));
    }
    if ((uint64_t)sb.st_size != c->file_bytes)
        return OM_ERR(ORTMEM_E_IO,
                      "weight catalog: the model file is %lld bytes now, %llu at open (truncated "
                      "or changed): refused",
                      (long long)sb.st_size, (unsigned long long)c->file_bytes);
    if (sb.st_mtim.tv_sec != c->mtime.tv_sec || sb.st_mtim.tv_nsec != c->mtime.tv_nsec)
        return OM_ERR(ORTMEM_E_IO,
                      "weight catalog: the model file was modified at %lld.%09ld, after open "
                      "(%lld.%09ld): refused",
                      (long long)sb.st_mtim.tv_sec, sb.st_mtim.tv_nsec, (long long)c->mtime.tv_sec,
                      c->mtime.tv_nsec);
    return ORTMEM_OK;
}

void om_catalog_use(ortmem_weight_catalog *c)
{
    atomic_fetch_add(&c->users, 1);
}

void om_catalog_unuse(ortmem_weight_catalog *c)
{
    atomic_fetch_sub(&c->users, 1);
}

uint64_t om_catalog_bytes(const ortmem_weight_catalog *c, uint32_t id)
{
    return c->entries[id].t.bytes;
}

const char *om_catalog_name(const ortmem_weight_catalog *c, uint32_t id)
{
    return c->entries[id].t.name;
}

ortmem_status om_catalog_source(ortmem_weight_catalog *c, uint32_t id, const void **host)
{
    ortmem_status st = ortmem_weight_catalog_verify(c);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "tensor '%s'", c->entries[id].t.name);
    *host = c->map ? (const void *)(c->map + c->entries[id].t.offset) : c->entries[id].host;
    return ORTMEM_OK;
}
