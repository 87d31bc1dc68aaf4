/* Pinned staging: a jemalloc arena whose extent hooks carve host memory out
 * of large chunks, each mapped, bound to a NUMA node and pinned once, and
 * kept until the staging is destroyed (jemalloc retains freed extents and
 * reuses them, so nothing is unpinned and pinned again). jemalloc here is a
 * private copy with every entry point renamed om_jemalloc_* (see
 * private_jemalloc.py): the process's malloc is untouched. */
#include <ortmem/offload.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"

#ifdef ORTMEM_HAVE_JEMALLOC
/* Types and flag macros only: the functions are the renamed copies below. */
#define JEMALLOC_NO_RENAME
#include <jemalloc/jemalloc.h>
#ifdef ORTMEM_HAVE_HWLOC
#include <hwloc.h>
#endif

void *om_jemalloc_mallocx(size_t size, int flags);
void om_jemalloc_dallocx(void *ptr, int flags);
size_t om_jemalloc_sallocx(const void *ptr, int flags);
int om_jemalloc_mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

#define OM_STAGING_CHUNK_DEFAULT ((size_t)64 << 20)

typedef struct om_chunk {
    char *base;
    size_t bytes, used;
    bool registered, locked;
} om_chunk;

struct ortmem_staging {
    extent_hooks_t hooks; /* first: the hooks pointer jemalloc passes back is the staging */
    unsigned arena;
    pthread_mutex_t lock;
    ortmem_staging_options o;
    size_t page;
    om_chunk *chunks;
    size_t nchunks, cap;
    uint64_t chunk_bytes;
    uint64_t allocated_bytes, allocations;
#ifdef ORTMEM_HAVE_HWLOC
    hwloc_topology_t topology;
    hwloc_nodeset_t nodeset;
#endif
};

/* Maps, binds and pins a chunk of at least size bytes; false on failure
 * (jemalloc then reports the allocation failed). */
static bool om_staging_grow(ortmem_staging *s, size_t size)
{
    size_t bytes = size > s->o.chunk_bytes ? size : s->o.chunk_bytes;
    bytes = (bytes + s->page - 1) / s->page * s->page;
    if (s->nchunks == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 2;
        om_chunk *grown = om_realloc(s->chunks, cap * sizeof *grown);
        if (!grown)
            return false;
        s->chunks = grown;
        s->cap = cap;
    }
    char *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return false;
#ifdef ORTMEM_HAVE_HWLOC
    if (s->nodeset)
        (void)hwloc_set_area_membind(s->topology, base, bytes, s->nodeset, HWLOC_MEMBIND_BIND,
                                     HWLOC_MEMBIND_BYNODESET);
#endif
    om_chunk c = {base, bytes, 0, false, false};
    if (s->o.host_register) {
        if (s->o.host_register(s->o.user, base, bytes) != ORTMEM_OK) {
            munmap(base, bytes);
            return false;
        }
        c.registered = true;
    } else if (s->o.lock_pages) {
        if (mlock(base, bytes) != 0) {
            munmap(base, bytes);
            return false;
        }
        c.locked = true;
    }
    s->chunks[s->nchunks++] = c;
    s->chunk_bytes += bytes;
    return true;
}

static void *om_hook_alloc(extent_hooks_t *hooks, void *new_addr, size_t size, size_t alignment,
                           bool *zero, bool *commit, unsigned arena)
{
    (void)arena;
    ortmem_staging *s = (ortmem_staging *)hooks;
    if (new_addr || alignment == 0 || size > SIZE_MAX - alignment)
        return NULL; /* only fresh extents are handed out */
    pthread_mutex_lock(&s->lock);
    void *out = NULL;
    for (int attempt = 0; attempt < 2 && !out; attempt++) {
        om_chunk *c = s->nchunks ? &s->chunks[s->nchunks - 1] : NULL;
        if (c) {
            uintptr_t start = (uintptr_t)c->base + c->used;
            uintptr_t aligned = (start + alignment - 1) & ~(uintptr_t)(alignment - 1);
            if (aligned + size <= (uintptr_t)c->base + c->bytes) {
                c->used = aligned + size - (uintptr_t)c->base;
                out = (void *)aligned;
                break;
            }
        }
        if (attempt == 0 && !om_staging_grow(s, size + alignment))
            break;
    }
    pthread_mutex_unlock(&s->lock);
    if (out) {
        *zero = true; /* carved once from a fresh anonymous mapping */
        *commit = true;
    }
    return out;
}

/* Opt out of returning extents: jemalloc retains them for reuse, pinned. */
static bool om_hook_dalloc(extent_hooks_t *h, void *a, size_t n, bool committed, unsigned ar)
{
    (void)h, (void)a, (void)n, (void)committed, (void)ar;
    return true;
}

static void om_hook_destroy(extent_hooks_t *h, void *a, size_t n, bool committed, unsigned ar)
{
    (void)h, (void)a, (void)n, (void)committed, (void)ar; /* chunks go with the staging */
}

static bool om_hook_commit(extent_hooks_t *h, void *a, size_t n, size_t off, size_t len,
                           unsigned ar)
{
    (void)h, (void)a, (void)n, (void)off, (void)len, (void)ar;
    return false; /* always committed */
}

static bool om_hook_split(extent_hooks_t *h, void *a, size_t n, size_t na, size_t nb, bool c,
                          unsigned ar)
{
    (void)h, (void)a, (void)n, (void)na, (void)nb, (void)c, (void)ar;
    return false;
}

/* Merges only inside one chunk: each chunk is pinned on its own. */
static bool om_hook_merge(extent_hooks_t *h, void *a, size_t na, void *b, size_t nb, bool c,
                          unsigned ar)
{
    (void)nb, (void)c, (void)ar;
    ortmem_staging *s = (ortmem_staging *)h;
    bool same = false;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->nchunks && !same; i++) {
        char *lo = s->chunks[i].base, *hi = lo + s->chunks[i].bytes;
        same = (char *)a >= lo && (char *)a + na <= hi && (char *)b >= lo && (char *)b < hi;
    }
    pthread_mutex_unlock(&s->lock);
    return !same;
}

static void om_staging_release_chunks(ortmem_staging *s)
{
    for (size_t i = 0; i < s->nchunks; i++) {
        om_chunk *c = &s->chunks[i];
        if (c->registered && s->o.host_unregister)
            s->o.host_unregister(s->o.user, c->base, c->bytes);
        if (c->locked)
            (void)munlock(c->base, c->bytes);
        munmap(c->base, c->bytes);
    }
    om_free(s->chunks);
#ifdef ORTMEM_HAVE_HWLOC
    if (s->nodeset)
        hwloc_bitmap_free(s->nodeset);
    if (s->topology)
        hwloc_topology_destroy(s->topology);
#endif
}

static ortmem_status om_staging_bind(ortmem_staging *s)
{
    if (s->o.numa_node < 0)
        return ORTMEM_OK;
#ifdef ORTMEM_HAVE_HWLOC
    if (hwloc_topology_init(&s->topology) != 0 || hwloc_topology_load(s->topology) != 0)
        return OM_ERR(ORTMEM_E_UNAVAILABLE, "staging: hwloc topology could not be loaded");
    int nodes = hwloc_get_nbobjs_by_type(s->topology, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < nodes && !s->nodeset; i++) {
        hwloc_obj_t n = hwloc_get_obj_by_type(s->topology, HWLOC_OBJ_NUMANODE, (unsigned)i);
        if (n && n->os_index == (unsigned)s->o.numa_node)
            s->nodeset = hwloc_bitmap_dup(n->nodeset);
    }
    if (!s->nodeset)
        return OM_ERR(ORTMEM_E_RANGE, "staging: NUMA node %d not present (%d nodes)",
                      s->o.numa_node, nodes);
    return ORTMEM_OK;
#else
    return OM_ERR(ORTMEM_E_UNSUPPORTED,
                  "staging: NUMA node %d requested but ortmem was built without hwloc",
                  s->o.numa_node);
#endif
}

ortmem_status ortmem_staging_create(const ortmem_staging_options *options, ortmem_staging **out)
{
    om_error_clear();
    static const char what[] = "staging create";
    ortmem_staging_options o = ORTMEM_STAGING_OPTIONS_INIT;
    if (options) {
        ortmem_status st = OM_STRUCT_CHECK(what, "options", options);
        if (st != ORTMEM_OK)
            return st;
        memcpy(&o, options, options->struct_size);
    }
    if (!out)
        return OM_ERR(ORTMEM_E_INVALID, "%s: out is NULL", what);
    if (!o.host_register != !o.host_unregister)
        return OM_ERR(ORTMEM_E_INVALID, "%s: host_register and host_unregister come together",
                      what);
    if (!o.chunk_bytes)
        o.chunk_bytes = OM_STAGING_CHUNK_DEFAULT;
    ortmem_staging *s = om_calloc(1, sizeof *s);
    if (!s)
        return OM_ERR(ORTMEM_E_NOMEM, "%s: bookkeeping", what);
    s->o = o;
    s->page = (size_t)sysconf(_SC_PAGESIZE);
    pthread_mutex_init(&s->lock, NULL);
    ortmem_status st = om_staging_bind(s);
    if (st != ORTMEM_OK) {
        om_staging_release_chunks(s);
        pthread_mutex_destroy(&s->lock);
        om_free(s);
        return om_error_wrap(st, "%s", what);
    }
    s->hooks =
        (extent_hooks_t){om_hook_alloc, om_hook_dalloc, om_hook_destroy, om_hook_commit, NULL,
                         NULL,          NULL,           om_hook_split,   om_hook_merge};
    extent_hooks_t *hooks = &s->hooks;
    size_t len = sizeof s->arena;
    int err = om_jemalloc_mallctl("arenas.create", &s->arena, &len, &hooks, sizeof hooks);
    if (err) {
        om_staging_release_chunks(s);
        pthread_mutex_destroy(&s->lock);
        om_free(s);
        return OM_ERR(err == ENOMEM ? ORTMEM_E_NOMEM : ORTMEM_E_UNAVAILABLE,
                      "%s: jemalloc arenas.create: %s", what, strerror(err));
    }
    *out = s;
    return ORTMEM_OK;
}

ortmem_status ortmem_staging_destroy(ortmem_staging *s)
{
    om_error_clear();
    if (!s)
        return OM_ERR(ORTMEM_E_INVALID, "staging destroy: staging is NULL");
    pthread_mutex_lock(&s->lock);
    uint64_t live = s->allocations, bytes = s->allocated_bytes;
    pthread_mutex_unlock(&s->lock);
    if (live)
        return OM_ERR(ORTMEM_E_BUSY, "staging destroy: %llu allocations (%llu bytes) are live",
                      (unsigned long long)live, (unsigned long long)bytes);
    char name[64];
    snprintf(name, sizeof name, "arena.%u.destroy", s->arena);
    int err = om_jemalloc_mallctl(name, NULL, NULL, NULL, 0);
    if (err)
        return OM_ERR(ORTMEM_E_STATE, "staging destroy: jemalloc %s: %s", name, strerror(err));
    om_staging_release_chunks(s);
    pthread_mutex_destroy(&s->lock);
    om_free(s);
    return ORTMEM_OK;
}

ortmem_status ortmem_staging_alloc(ortmem_staging *s, size_t bytes, size_t align, void **ptr)
{
    om_error_clear();
    if (!s || !ptr || bytes == 0)
        return OM_ERR(ORTMEM_E_INVALID, "staging alloc: staging %p, %zu bytes, ptr %p", (void *)s,
                      bytes, (void *)ptr);
    if (!align)
        align = 64;
    if (align & (align - 1))
        return OM_ERR(ORTMEM_E_ALIGN, "staging alloc: alignment %zu is not a power of two", align);
    void *p = om_jemalloc_mallocx(bytes, MALLOCX_ARENA(s->arena) | MALLOCX_TCACHE_NONE |
                                             MALLOCX_ALIGN(align));
    if (!p)
        return OM_ERR(ORTMEM_E_NOMEM,
                      "staging alloc: %zu bytes aligned to %zu (%llu bytes in %zu pinned chunks)",
                      bytes, align, (unsigned long long)s->chunk_bytes, s->nchunks);
    size_t usable = om_jemalloc_sallocx(p, 0);
    pthread_mutex_lock(&s->lock);
    s->allocations++;
    s->allocated_bytes += usable;
    pthread_mutex_unlock(&s->lock);
    *ptr = p;
    return ORTMEM_OK;
}

ortmem_status ortmem_staging_free(ortmem_staging *s, void *ptr)
{
    om_error_clear();
    if (!s || !ptr)
        return OM_ERR(ORTMEM_E_INVALID, "staging free: staging %p, ptr %p", (void *)s, ptr);
    bool ours = false;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->nchunks && !ours; i++)
        ours = (char *)ptr >= s->chunks[i].base &&
               (char *)ptr < s->chunks[i].base + s->chunks[i].bytes;
    pthread_mutex_unlock(&s->lock);
    if (!ours)
        return OM_ERR(ORTMEM_E_NOT_FOUND, "staging free: %p is in none of its %zu chunks", ptr,
                      s->nchunks);
    size_t usable = om_jemalloc_sallocx(ptr, 0);
    om_jemalloc_dallocx(ptr, MALLOCX_TCACHE_NONE);
    pthread_mutex_lock(&s->lock);
    s->allocations--;
    s->allocated_bytes -= usable;
    pthread_mutex_unlock(&s->lock);
    return ORTMEM_OK;
}

ortmem_status ortmem_staging_stats_get(ortmem_staging *s, ortmem_staging_stats *stats)
{
    om_error_clear();
    ortmem_status st = OM_STRUCT_CHECK("staging stats", "stats", stats);
    if (st != ORTMEM_OK)
        return st;
    if (!s)
        return OM_ERR(ORTMEM_E_INVALID, "staging stats: staging is NULL");
    pthread_mutex_lock(&s->lock);
    ortmem_staging_stats out = {stats->struct_size, s->nchunks, s->chunk_bytes, s->allocated_bytes,
                                s->allocations};
    pthread_mutex_unlock(&s->lock);
    memcpy(stats, &out, stats->struct_size);
    return ORTMEM_OK;
}

#else /* built without jemalloc */

static ortmem_status om_no_staging(const char *what)
{
    return OM_ERR(ORTMEM_E_UNAVAILABLE,
                  "%s: ortmem was built without jemalloc (libjemalloc-dev, its PIC archive)", what);
}

ortmem_status ortmem_staging_create(const ortmem_staging_options *options, ortmem_staging **out)
{
    (void)options, (void)out;
    om_error_clear();
    return om_no_staging("staging create");
}

ortmem_status ortmem_staging_destroy(ortmem_staging *s)
{
    (void)s;
    om_error_clear();
    return om_no_staging("staging destroy");
}

ortmem_status ortmem_staging_alloc(ortmem_staging *s, size_t bytes, size_t align, void **ptr)
{
    (void)s, (void)bytes, (void)align, (void)ptr;
    om_error_clear();
    return om_no_staging("staging alloc");
}

ortmem_status ortmem_staging_free(ortmem_staging *s, void *ptr)
{
    (void)s, (void)ptr;
    om_error_clear();
    return om_no_staging("staging free");
}

ortmem_status ortmem_staging_stats_get(ortmem_staging *s, ortmem_staging_stats *stats)
{
    (void)s, (void)stats;
    om_error_clear();
    return om_no_staging("staging stats");
}

#endif
