/* CPU backend: behaves like CUDA's virtual memory management on host memory.
 * VA: mmap(PROT_NONE, MAP_NORESERVE). Physical handle: a pre-allocated extent
 * of k granules of one shared memfd (or its own memfd when exportable), so one
 * handle can be mapped at several VAs. Release punches a hole over the whole
 * extent: the pages go back to the OS, and the hole is reused by a later
 * create of the same size. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ortmem/vmm.h>

#include "core/alloc.h"
#include "core/error.h"

#ifdef ORTMEM_HAVE_HWLOC
#include <hwloc.h>
#endif

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif

typedef struct cpu_granule {
    int fd;
    off_t offset;
    size_t size;
    bool own_fd;
    /* Live granules are listed so that destroy frees the bookkeeping of
     * granules the layers above quarantined and never released. */
    struct cpu_granule *prev, *next;
} cpu_granule;

typedef struct cpu_hole {
    off_t offset;
    size_t size;
} cpu_hole;

typedef struct cpu_backend {
    size_t page;
    size_t granule;
    int numa_node;
    int populate;
    pthread_mutex_t lock; /* shared memfd extents */
    int shared_fd;
    off_t shared_end;
    cpu_hole *holes; /* extents punched and free for reuse by a create of their size */
    size_t hole_count, hole_capacity;
    /* Extents carved from the file, live or holes: the hole list has room for
     * all of them, so a release never needs memory. */
    size_t carved_extents;
    cpu_granule *live;
    _Atomic uint64_t next_event; /* starts at 1 */
#ifdef ORTMEM_HAVE_HWLOC
    hwloc_topology_t topology;
    hwloc_nodeset_t nodeset;
#endif
} cpu_backend;

static ortmem_status cpu_errno(const char *what, int err, size_t size)
{
    ortmem_status st = (err == ENOMEM || err == ENOSPC) ? ORTMEM_E_NOMEM : ORTMEM_E_BACKEND;
    return OM_ERR(st, "%s of %zu bytes failed: %s (errno %d)", what, size, strerror(err), err);
}

/* shmem's fallocate stops with EINTR when a signal is pending (seen under a
 * parallel test run): it is safe to ask again for the same range. */
static int cpu_fallocate(int fd, int mode, off_t offset, off_t len)
{
    int rc;
    do {
        rc = fallocate(fd, mode, offset, len);
    } while (rc != 0 && errno == EINTR);
    return rc;
}

static void cpu_track(cpu_backend *c, cpu_granule *g)
{
    pthread_mutex_lock(&c->lock);
    g->prev = NULL;
    g->next = c->live;
    if (c->live)
        c->live->prev = g;
    c->live = g;
    pthread_mutex_unlock(&c->lock);
}

/* Caller holds c->lock. */
static void cpu_untrack_locked(cpu_backend *c, cpu_granule *g)
{
    if (g->prev)
        g->prev->next = g->next;
    else
        c->live = g->next;
    if (g->next)
        g->next->prev = g->prev;
}

static ortmem_status cpu_granularity(void *self, size_t *minimum, size_t *recommended)
{
    cpu_backend *c = self;
    *minimum = c->page;
    *recommended = c->granule;
    return ORTMEM_OK;
}

static ortmem_status cpu_reserve(void *self, size_t size, size_t align, uintptr_t *va)
{
    cpu_backend *c = self;
    if (align < c->page)
        align = c->page;
    if (size > SIZE_MAX - align)
        return OM_ERR(ORTMEM_E_OVERFLOW, "reserve: %zu bytes + alignment %zu overflows", size,
                      align);
    size_t span = size + align - c->page;
    void *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return cpu_errno("reserve (mmap PROT_NONE)", errno, size);
    uintptr_t start = (uintptr_t)p;
    uintptr_t aligned = (start + align - 1) & ~(uintptr_t)(align - 1);
    if (aligned > start)
        munmap(p, aligned - start);
    uintptr_t end = start + span;
    if (end > aligned + size)
        munmap((void *)(aligned + size), end - (aligned + size));
    *va = aligned;
    return ORTMEM_OK;
}

static ortmem_status cpu_unreserve(void *self, uintptr_t va, size_t size)
{
    (void)self;
    if (munmap((void *)va, size) != 0)
        return cpu_errno("unreserve (munmap)", errno, size);
    return ORTMEM_OK;
}

#ifdef ORTMEM_HAVE_HWLOC
/* Allocates the extent's pages under a temporary thread binding to the node. */
static int cpu_fallocate_on_node(cpu_backend *c, int fd, off_t offset, size_t size)
{
    if (c->numa_node < 0)
        return cpu_fallocate(fd, 0, offset, (off_t)size);
    hwloc_nodeset_t saved = hwloc_bitmap_alloc();
    hwloc_membind_policy_t policy = HWLOC_MEMBIND_DEFAULT;
    int have_saved =
        saved && hwloc_get_membind(c->topology, saved, &policy,
                                   HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) == 0;
    (void)hwloc_set_membind(c->topology, c->nodeset, HWLOC_MEMBIND_BIND,
                            HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET);
    int rc = cpu_fallocate(fd, 0, offset, (off_t)size);
    int err = errno;
    if (have_saved)
        (void)hwloc_set_membind(c->topology, saved, policy,
                                HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET);
    hwloc_bitmap_free(saved);
    errno = err;
    return rc;
}
#else
static int cpu_fallocate_on_node(cpu_backend *c, int fd, off_t offset, size_t size)
{
    (void)c;
    return cpu_fallocate(fd, 0, offset, (off_t)size);
}
#endif

static ortmem_status cpu_create_exportable(cpu_backend *c, size_t size, cpu_granule *g)
{
    int fd = memfd_create("ortmem-granule", MFD_CLOEXEC);
    if (fd < 0)
        return cpu_errno("create (memfd_create)", errno, size);
    if (ftruncate(fd, (off_t)size) != 0 || cpu_fallocate_on_node(c, fd, 0, size) != 0) {
        int err = errno;
        close(fd);
        return cpu_errno("create (exportable memfd allocate)", err, size);
    }
    g->fd = fd;
    g->offset = 0;
    g->own_fd = true;
    return ORTMEM_OK;
}

static ortmem_status cpu_create_extent(cpu_backend *c, size_t size, cpu_granule *g)
{
    pthread_mutex_lock(&c->lock);
    ortmem_status st = ORTMEM_OK;
    if (c->shared_fd < 0) {
        c->shared_fd = memfd_create("ortmem-granules", MFD_CLOEXEC);
        if (c->shared_fd < 0) {
            st = cpu_errno("create (memfd_create)", errno, size);
            goto out;
        }
    }
    /* The newest hole of exactly this size: extents of one size come and go together. */
    size_t hole = c->hole_count;
    while (hole > 0 && c->holes[hole - 1].size != size)
        hole--;
    bool from_hole = hole > 0;
    if (!from_hole && c->carved_extents == c->hole_capacity) {
        size_t ncap = c->hole_capacity ? c->hole_capacity * 2 : 64;
        cpu_hole *grown = om_realloc(c->holes, ncap * sizeof *grown);
        if (!grown) {
            st = OM_ERR(ORTMEM_E_NOMEM, "create: hole list of %zu entries", ncap);
            goto out;
        }
        c->holes = grown;
        c->hole_capacity = ncap;
    }
    off_t offset = from_hole ? c->holes[hole - 1].offset : c->shared_end;
    if (!from_hole && ftruncate(c->shared_fd, offset + (off_t)size) != 0) {
        st = cpu_errno("create (grow memfd)", errno, size);
        goto out;
    }
    if (cpu_fallocate_on_node(c, c->shared_fd, offset, size) != 0) {
        int err = errno;
        /* Best effort: a file left longer than needed holds no pages. */
        if (!from_hole && ftruncate(c->shared_fd, c->shared_end) != 0)
            err = err ? err : errno;
        st = cpu_errno("create (fallocate)", err, size);
        goto out;
    }
    if (from_hole) {
        memmove(&c->holes[hole - 1], &c->holes[hole], (c->hole_count - hole) * sizeof *c->holes);
        c->hole_count--;
    } else {
        c->shared_end = offset + (off_t)size;
        c->carved_extents++;
    }
    g->fd = c->shared_fd;
    g->offset = offset;
    g->own_fd = false;
out:
    pthread_mutex_unlock(&c->lock);
    return st;
}

static ortmem_status cpu_create(void *self, size_t size, unsigned flags, uint64_t *handle)
{
    cpu_backend *c = self;
    if (!size || size % c->page)
        return OM_ERR(ORTMEM_E_ALIGN, "create: %zu bytes is not a multiple of the page (%zu)", size,
                      c->page);
    cpu_granule *g = om_calloc(1, sizeof *g);
    if (!g)
        return OM_ERR(ORTMEM_E_NOMEM, "create: granule bookkeeping");
    g->size = size;
    ortmem_status st = (flags & ORTMEM_CREATE_EXPORTABLE) ? cpu_create_exportable(c, size, g)
                                                          : cpu_create_extent(c, size, g);
    if (st != ORTMEM_OK) {
        om_free(g);
        return st;
    }
    cpu_track(c, g);
    *handle = (uint64_t)(uintptr_t)g;
    return ORTMEM_OK;
}

static ortmem_status cpu_release(void *self, uint64_t handle)
{
    cpu_backend *c = self;
    cpu_granule *g = (cpu_granule *)(uintptr_t)handle;
    pthread_mutex_lock(&c->lock);
    ortmem_status st = ORTMEM_OK;
    if (g->own_fd) {
        cpu_untrack_locked(c, g);
        close(g->fd);
        om_free(g);
        goto out;
    }
    /* Its hole slot was set aside when the extent was carved. */
    assert(c->hole_count < c->hole_capacity);
    if (cpu_fallocate(c->shared_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, g->offset,
                      (off_t)g->size) != 0) {
        st = cpu_errno("release (punch hole)", errno, g->size);
        goto out;
    }
    c->holes[c->hole_count++] = (cpu_hole){g->offset, g->size};
    cpu_untrack_locked(c, g);
    om_free(g);
out:
    pthread_mutex_unlock(&c->lock);
    return st;
}

static ortmem_status cpu_map(void *self, uintptr_t va, size_t size, uint64_t handle,
                             size_t handle_offset)
{
    (void)self;
    cpu_granule *g = (cpu_granule *)(uintptr_t)handle;
    if (handle_offset > g->size || size > g->size - handle_offset)
        return OM_ERR(ORTMEM_E_RANGE, "map: %zu bytes at offset %zu of a %zu-byte granule", size,
                      handle_offset, g->size);
    void *p = mmap((void *)va, size, PROT_NONE, MAP_SHARED | MAP_FIXED, g->fd,
                   g->offset + (off_t)handle_offset);
    if (p == MAP_FAILED)
        return cpu_errno("map (mmap MAP_FIXED)", errno, size);
    return ORTMEM_OK;
}

static ortmem_status cpu_unmap(void *self, uintptr_t va, size_t size)
{
    (void)self;
    /* Replacing the mapping with a fresh PROT_NONE one keeps the VA reserved. */
    void *p = mmap((void *)va, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED)
        return cpu_errno("unmap (mmap PROT_NONE over the run)", errno, size);
    return ORTMEM_OK;
}

static ortmem_status cpu_set_access(void *self, uintptr_t va, size_t size, ortmem_access access)
{
    cpu_backend *c = self;
    int prot = access == ORTMEM_ACCESS_READ_WRITE ? PROT_READ | PROT_WRITE
               : access == ORTMEM_ACCESS_READ     ? PROT_READ
                                                  : PROT_NONE;
    if (mprotect((void *)va, size, prot) != 0)
        return cpu_errno("set_access (mprotect)", errno, size);
    if (c->populate && access != ORTMEM_ACCESS_NONE) {
        /* Page tables filled now instead of on first touch; best effort. */
        (void)madvise((void *)va, size,
                      access == ORTMEM_ACCESS_READ_WRITE ? MADV_POPULATE_WRITE
                                                         : MADV_POPULATE_READ);
    }
    return ORTMEM_OK;
}

static ortmem_status cpu_export(void *self, uint64_t handle, int *fd)
{
    (void)self;
    cpu_granule *g = (cpu_granule *)(uintptr_t)handle;
    if (!g->own_fd)
        return OM_ERR(ORTMEM_E_UNSUPPORTED,
                      "export: granule was not created exportable (ORTMEM_CREATE_EXPORTABLE)");
    int dup_fd = fcntl(g->fd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0)
        return cpu_errno("export (dup)", errno, g->size);
    *fd = dup_fd;
    return ORTMEM_OK;
}

static ortmem_status cpu_import(void *self, int fd, size_t size, uint64_t *handle)
{
    cpu_backend *c = self;
    struct stat st;
    if (fstat(fd, &st) != 0)
        return cpu_errno("import (fstat)", errno, size);
    if (st.st_size < 0 || (uint64_t)st.st_size < size)
        return OM_ERR(ORTMEM_E_RANGE, "import: descriptor holds %lld bytes, granule needs %zu",
                      (long long)st.st_size, size);
    cpu_granule *g = om_calloc(1, sizeof *g);
    if (!g)
        return OM_ERR(ORTMEM_E_NOMEM, "import: granule bookkeeping");
    g->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (g->fd < 0) {
        int err = errno;
        om_free(g);
        return cpu_errno("import (dup)", err, size);
    }
    g->size = size;
    g->own_fd = true;
    cpu_track(c, g);
    *handle = (uint64_t)(uintptr_t)g;
    return ORTMEM_OK;
}

static ortmem_status cpu_copy(void *self, uintptr_t dst, uintptr_t src, size_t size)
{
    (void)self;
    memmove((void *)dst, (const void *)src, size);
    return ORTMEM_OK;
}

/* Streams and events: the CPU has no queues, so the work happens at once and
 * every event is complete when it is handed out. Event values are a counter,
 * never 0, so each one names a distinct record. */
static ortmem_status cpu_copy_async(void *self, uintptr_t dst, uintptr_t src, size_t size,
                                    uint64_t stream)
{
    (void)stream;
    return cpu_copy(self, dst, src, size);
}

static ortmem_status cpu_memset_async(void *self, uintptr_t dst, int value, size_t size,
                                      uint64_t stream)
{
    (void)self;
    (void)stream;
    memset((void *)dst, value, size);
    return ORTMEM_OK;
}

static ortmem_status cpu_event_record(void *self, uint64_t stream, uint64_t *event)
{
    cpu_backend *c = self;
    (void)stream;
    *event = atomic_fetch_add(&c->next_event, 1);
    return ORTMEM_OK;
}

static ortmem_status cpu_event_query(void *self, uint64_t event)
{
    (void)self;
    (void)event;
    return ORTMEM_OK;
}

static ortmem_status cpu_event_destroy(void *self, uint64_t event)
{
    (void)self;
    (void)event;
    return ORTMEM_OK;
}

static void cpu_destroy(void *self)
{
    cpu_backend *c = self;
    /* Granules still listed were quarantined above: their mappings (if any)
     * keep the memory; only the bookkeeping and descriptors go. */
    while (c->live) {
        cpu_granule *g = c->live;
        c->live = g->next;
        if (g->own_fd)
            close(g->fd);
        om_free(g);
    }
    if (c->shared_fd >= 0)
        close(c->shared_fd);
    om_free(c->holes);
#ifdef ORTMEM_HAVE_HWLOC
    if (c->nodeset)
        hwloc_bitmap_free(c->nodeset);
    if (c->topology)
        hwloc_topology_destroy(c->topology);
#endif
    pthread_mutex_destroy(&c->lock);
    om_free(c);
}

static const ortmem_backend_ops cpu_ops = {
    .struct_size = sizeof(ortmem_backend_ops),
    .name = "cpu",
    .granularity = cpu_granularity,
    .reserve = cpu_reserve,
    .unreserve = cpu_unreserve,
    .create = cpu_create,
    .release = cpu_release,
    .map = cpu_map,
    .unmap = cpu_unmap,
    .set_access = cpu_set_access,
    .export_fd = cpu_export,
    .import_fd = cpu_import,
    .copy = cpu_copy,
    .destroy = cpu_destroy,
    .copy_async = cpu_copy_async,
    .memset_async = cpu_memset_async,
    .event_record = cpu_event_record,
    .event_query = cpu_event_query,
    .event_destroy = cpu_event_destroy,
};

static ortmem_status cpu_bind_numa(cpu_backend *c)
{
#ifdef ORTMEM_HAVE_HWLOC
    if (hwloc_topology_init(&c->topology) != 0 || hwloc_topology_load(c->topology) != 0)
        return OM_ERR(ORTMEM_E_UNAVAILABLE, "cpu backend: hwloc topology could not be loaded");
    int nodes = hwloc_get_nbobjs_by_type(c->topology, HWLOC_OBJ_NUMANODE);
    hwloc_obj_t node = NULL;
    for (int i = 0; i < nodes; i++) {
        hwloc_obj_t candidate = hwloc_get_obj_by_type(c->topology, HWLOC_OBJ_NUMANODE, (unsigned)i);
        if (candidate && candidate->os_index == (unsigned)c->numa_node)
            node = candidate;
    }
    if (!node)
        return OM_ERR(ORTMEM_E_RANGE, "cpu backend: NUMA node %d not present (%d nodes)",
                      c->numa_node, nodes);
    c->nodeset = hwloc_bitmap_dup(node->nodeset);
    if (!c->nodeset)
        return OM_ERR(ORTMEM_E_NOMEM, "cpu backend: NUMA nodeset");
    return ORTMEM_OK;
#else
    return OM_ERR(ORTMEM_E_UNSUPPORTED,
                  "cpu backend: NUMA node %d requested but ortmem was built without hwloc",
                  c->numa_node);
#endif
}

/* populate relies on MADV_POPULATE_WRITE (Linux 5.14); refuse it up front
 * rather than silently not populating. */
static ortmem_status cpu_probe_populate(cpu_backend *c)
{
    void *p = mmap(NULL, c->page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return cpu_errno("cpu backend create: populate probe (mmap)", errno, c->page);
    int rc = madvise(p, c->page, MADV_POPULATE_WRITE);
    int err = errno;
    munmap(p, c->page);
    if (rc != 0)
        return OM_ERR(ORTMEM_E_UNSUPPORTED,
                      "cpu backend create: populate needs MADV_POPULATE_WRITE, which this "
                      "kernel refuses: %s",
                      strerror(err));
    return ORTMEM_OK;
}

ortmem_status ortmem_cpu_backend_create(const ortmem_cpu_options *options, ortmem_backend **out)
{
    om_error_clear();
    if (!out)
        return OM_ERR(ORTMEM_E_INVALID, "cpu backend create: out is NULL");
    ortmem_cpu_options opt = ORTMEM_CPU_OPTIONS_INIT;
    if (options) {
        if (options->struct_size == 0 || options->struct_size > sizeof opt)
            return OM_ERR(ORTMEM_E_INVALID,
                          "cpu backend create: options struct_size %zu (this library knows %zu)",
                          options->struct_size, sizeof opt);
        memcpy(&opt, options, options->struct_size);
    }
    long page = sysconf(_SC_PAGESIZE);
    size_t granule = opt.granule ? opt.granule : (size_t)2 << 20;
    if (granule & (granule - 1) || granule < (size_t)page)
        return OM_ERR(ORTMEM_E_INVALID,
                      "cpu backend create: granule %zu must be a power of two >= the page (%ld)",
                      granule, page);
    cpu_backend *c = om_calloc(1, sizeof *c);
    if (!c)
        return OM_ERR(ORTMEM_E_NOMEM, "cpu backend create: bookkeeping");
    c->page = (size_t)page;
    c->granule = granule;
    c->numa_node = opt.numa_node;
    c->populate = opt.populate;
    c->shared_fd = -1;
    atomic_init(&c->next_event, 1);
    pthread_mutex_init(&c->lock, NULL);
    ortmem_status st = c->numa_node >= 0 ? cpu_bind_numa(c) : ORTMEM_OK;
    if (st == ORTMEM_OK && c->populate)
        st = cpu_probe_populate(c);
    if (st == ORTMEM_OK)
        st = ortmem_backend_create(&cpu_ops, c, out);
    if (st != ORTMEM_OK)
        cpu_destroy(c);
    return st;
}
