#include "core/alloc.h"
#include "vmm/backend.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static const char *const om_op_names[ORTMEM_OP_COUNT + 1] = {
    [ORTMEM_OP_RESERVE] = "reserve",
    [ORTMEM_OP_UNRESERVE] = "unreserve",
    [ORTMEM_OP_CREATE] = "create",
    [ORTMEM_OP_RELEASE] = "release",
    [ORTMEM_OP_MAP] = "map",
    [ORTMEM_OP_UNMAP] = "unmap",
    [ORTMEM_OP_SET_ACCESS] = "set_access",
    [ORTMEM_OP_EXPORT] = "export",
    [ORTMEM_OP_IMPORT] = "import",
    [ORTMEM_OP_COPY] = "copy",
    [ORTMEM_OP_COPY_ASYNC] = "copy_async",
    [ORTMEM_OP_MEMSET_ASYNC] = "memset_async",
    [ORTMEM_OP_EVENT_RECORD] = "event_record",
    [ORTMEM_OP_EVENT_QUERY] = "event_query",
    [ORTMEM_OP_EVENT_DESTROY] = "event_destroy",
    [ORTMEM_OP_ANY] = "any",
};

const char *ortmem_backend_op_name(ortmem_backend_op op)
{
    if ((unsigned)op > ORTMEM_OP_ANY)
        return NULL;
    return om_op_names[op];
}

ortmem_status ortmem_backend_op_parse(const char *name, ortmem_backend_op *op)
{
    if (!name || !op)
        return OM_ERR(ORTMEM_E_INVALID, "backend op parse: name or output is NULL");
    for (unsigned i = 0; i <= ORTMEM_OP_ANY; i++) {
        if (strcmp(name, om_op_names[i]) == 0) {
            *op = (ortmem_backend_op)i;
            return ORTMEM_OK;
        }
    }
    return OM_ERR(ORTMEM_E_INVALID,
                  "backend op parse: unknown operation '%s' (reserve, unreserve, create, "
                  "release, map, unmap, set_access, export, import, copy, copy_async, "
                  "memset_async, event_record, event_query, event_destroy, any)",
                  name);
}

static bool om_is_pow2(size_t v)
{
    return v && !(v & (v - 1));
}

/* Destroys the events still live (nothing else can name them now). */
static void om_events_teardown(ortmem_backend *b)
{
    uint64_t event;
    for (size_t cursor = 0; om_hashset_next(&b->events.live, &cursor, &event);) {
        if (b->ops.event_destroy)
            (void)b->ops.event_destroy(b->self, event);
    }
    om_hashset_release(&b->events.live);
}

ortmem_status ortmem_backend_create(const ortmem_backend_ops *ops, void *self, ortmem_backend **out)
{
    om_error_clear();
    if (!ops || !out)
        return OM_ERR(ORTMEM_E_INVALID, "backend create: ops or out is NULL");
    /* The required slots end with set_access; a newer caller's extra slots are not read. */
    ortmem_status st = om_struct_check("backend create", "ops", &ops->struct_size,
                                       OM_SIZE_THROUGH(ortmem_backend_ops, set_access), SIZE_MAX);
    if (st != ORTMEM_OK)
        return st;
    ortmem_backend_ops copy;
    memset(&copy, 0, sizeof copy);
    memcpy(&copy, ops, ops->struct_size < sizeof copy ? ops->struct_size : sizeof copy);
    copy.struct_size = sizeof copy;
    if (!copy.granularity || !copy.reserve || !copy.unreserve || !copy.create || !copy.release ||
        !copy.map || !copy.unmap || !copy.set_access)
        return OM_ERR(ORTMEM_E_INVALID,
                      "backend create: a required slot (granularity, reserve, unreserve, "
                      "create, release, map, unmap, set_access) is NULL");
    size_t minimum = 0, recommended = 0;
    st = copy.granularity(self, &minimum, &recommended);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "backend create: granularity query failed");
    if (!om_is_pow2(minimum) || !om_is_pow2(recommended) || recommended < minimum)
        return OM_ERR(ORTMEM_E_INVALID,
                      "backend create: granularity minimum %zu / recommended %zu must be "
                      "powers of two with recommended >= minimum",
                      minimum, recommended);
    ortmem_backend *b = om_calloc(1, sizeof *b);
    if (!b)
        return OM_ERR(ORTMEM_E_NOMEM, "backend create: %zu bytes of bookkeeping", sizeof *b);
    b->ops = copy;
    if (!b->ops.name)
        b->ops.name = "custom";
    b->self = self;
    b->granule_min = minimum;
    b->granule = recommended;
    om_pool_init(b);
    pthread_mutex_init(&b->lock, NULL);
    pthread_mutex_init(&b->events.lock, NULL);
    st = om_handle_register(&b->hdr, OM_KIND_BACKEND);
    if (st != ORTMEM_OK) {
        pthread_mutex_destroy(&b->events.lock);
        pthread_mutex_destroy(&b->lock);
        om_free(b);
        return st;
    }
    *out = b;
    return ORTMEM_OK;
}

ortmem_status om_backend_pin(ortmem_backend *b, const char *what)
{
    return om_handle_pin(b, OM_KIND_BACKEND, what);
}

void om_backend_unpin(ortmem_backend *b)
{
    om_handle_unpin(&b->hdr);
}

void om_backend_use(ortmem_backend *b)
{
    pthread_mutex_lock(&b->lock);
    b->users++;
    pthread_mutex_unlock(&b->lock);
}

void om_backend_unuse(ortmem_backend *b)
{
    pthread_mutex_lock(&b->lock);
    b->users--;
    pthread_mutex_unlock(&b->lock);
}

ortmem_status om_backend_user_count(ortmem_backend *b, const char *what, uint64_t *users)
{
    ortmem_status st = om_backend_pin(b, what);
    if (st != ORTMEM_OK)
        return st;
    pthread_mutex_lock(&b->lock);
    *users = b->users;
    pthread_mutex_unlock(&b->lock);
    om_backend_unpin(b);
    return ORTMEM_OK;
}

ortmem_status ortmem_backend_destroy(ortmem_backend *b)
{
    om_error_clear();
    ortmem_status st = om_backend_pin(b, "backend destroy");
    if (st != ORTMEM_OK)
        return st;
    st = om_handle_retire(&b->hdr, "backend destroy");
    if (st != ORTMEM_OK) {
        om_backend_unpin(b);
        return st;
    }
    pthread_mutex_lock(&b->lock);
    uint64_t users = b->users;
    pthread_mutex_unlock(&b->lock);
    if (users) {
        om_handle_revive(&b->hdr);
        om_backend_unpin(b);
        return OM_ERR(ORTMEM_E_BUSY,
                      "backend destroy: '%s' still has %llu users (regions, arenas or "
                      "wrapping backends); destroy them first",
                      b->ops.name, (unsigned long long)users);
    }
    om_pool_teardown(b);
    uint64_t quarantined = om_counter_get(&b->ledger.quarantined);
    uint64_t granules = om_counter_get(&b->ledger.quarantined_granules);
    if (quarantined)
        st = OM_ERR(ORTMEM_E_QUARANTINED,
                    "backend destroy: '%s' leaves %llu quarantined bytes in %llu granules "
                    "deliberately leaked",
                    b->ops.name, (unsigned long long)quarantined, (unsigned long long)granules);
    for (size_t i = 0; i < b->quarantine_count; i++) {
        om_account_drop(&b->quarantine[i]->owner);
        om_free(b->quarantine[i]);
    }
    om_free(b->quarantine);
    om_account_drop(&b->pool_account);
    om_account_drop(&b->quarantine_account);
    om_events_teardown(b);
    if (b->ops.destroy)
        b->ops.destroy(b->self);
    if (b->inner)
        om_backend_unuse(b->inner);
    pthread_mutex_destroy(&b->events.lock);
    pthread_mutex_destroy(&b->lock);
    om_free(b);
    om_handle_end_destroy();
    return st;
}

ortmem_status ortmem_backend_set_accounts(ortmem_backend *b, const ortmem_account *pool,
                                          const ortmem_account *quarantine)
{
    om_error_clear();
    ortmem_status st = om_backend_pin(b, "backend set accounts");
    if (st != ORTMEM_OK)
        return st;
    om_account pool_account, quarantine_account;
    st = om_account_init(&pool_account, pool, "backend set accounts (pool)");
    if (st == ORTMEM_OK)
        st = om_account_init(&quarantine_account, quarantine, "backend set accounts (quarantine)");
    pthread_mutex_lock(&b->lock);
    bool clearing = !pool && !quarantine;
    if (st == ORTMEM_OK && !clearing && (b->pool_account.set || b->quarantine_account.set))
        st = OM_ERR(ORTMEM_E_STATE, "backend set accounts: '%s' has accounts already", b->ops.name);
    if (st == ORTMEM_OK) {
        /* Granules already pooled or quarantined move to the new accounts. */
        uint64_t stuck_mapped = om_counter_get(&b->ledger.quarantined_mapped);
        om_account_move(&b->pool_account, &pool_account, b->pool.bytes, 0);
        for (size_t i = b->pool.head; i < b->pool.count; i++)
            om_phys_set_owner(b->pool.items[i], &pool_account);
        uint64_t quarantined = 0;
        for (size_t i = 0; i < b->quarantine_count; i++) {
            quarantined += b->quarantine[i]->size;
            om_phys_set_owner(b->quarantine[i], &quarantine_account);
        }
        om_account_move(&b->quarantine_account, &quarantine_account, quarantined, stuck_mapped);
        om_account_drop(&b->pool_account);
        om_account_drop(&b->quarantine_account);
        b->pool_account = pool_account;
        b->quarantine_account = quarantine_account;
    } else {
        om_account_drop(&pool_account);
        om_account_drop(&quarantine_account);
    }
    pthread_mutex_unlock(&b->lock);
    om_backend_unpin(b);
    return st;
}

const char *ortmem_backend_name(const ortmem_backend *backend)
{
    if (om_handle_pin(backend, OM_KIND_BACKEND, "backend name") != ORTMEM_OK)
        return "(invalid backend)";
    const char *name = backend->ops.name;
    om_handle_unpin((om_handle *)&backend->hdr);
    return name;
}

ortmem_status ortmem_backend_granule(ortmem_backend *b, size_t *granule)
{
    om_error_clear();
    if (!granule)
        return OM_ERR(ORTMEM_E_INVALID, "backend granule: output is NULL");
    ortmem_status st = om_backend_pin(b, "backend granule");
    if (st != ORTMEM_OK)
        return st;
    *granule = b->granule;
    om_backend_unpin(b);
    return ORTMEM_OK;
}

/* ---- counted calls ---- */

ortmem_status om_backend_counted(ortmem_backend *b, ortmem_backend_op op, ortmem_status st)
{
    om_ledger_count(&b->ledger.calls[op], 1, b);
    if (st != ORTMEM_OK) {
        om_ledger_count(&b->ledger.failures[op], 1, b);
        return om_error_wrap(st, "backend '%s' %s", b->ops.name, om_op_names[op]);
    }
    return st;
}

ortmem_status om_backend_reserve(ortmem_backend *b, size_t size, size_t align, uintptr_t *va)
{
    return om_backend_counted(b, ORTMEM_OP_RESERVE, b->ops.reserve(b->self, size, align, va));
}

ortmem_status om_backend_unreserve(ortmem_backend *b, uintptr_t va, size_t size)
{
    return om_backend_counted(b, ORTMEM_OP_UNRESERVE, b->ops.unreserve(b->self, va, size));
}

ortmem_status om_backend_create_granule(ortmem_backend *b, size_t size, unsigned flags,
                                        uint64_t *handle)
{
    return om_backend_counted(b, ORTMEM_OP_CREATE, b->ops.create(b->self, size, flags, handle));
}

ortmem_status om_backend_release_granule(ortmem_backend *b, uint64_t handle)
{
    return om_backend_counted(b, ORTMEM_OP_RELEASE, b->ops.release(b->self, handle));
}

ortmem_status om_backend_map(ortmem_backend *b, uintptr_t va, size_t size, uint64_t handle,
                             size_t handle_offset)
{
    return om_backend_counted(b, ORTMEM_OP_MAP,
                              b->ops.map(b->self, va, size, handle, handle_offset));
}

ortmem_status om_backend_unmap(ortmem_backend *b, uintptr_t va, size_t size)
{
    return om_backend_counted(b, ORTMEM_OP_UNMAP, b->ops.unmap(b->self, va, size));
}

ortmem_status om_backend_set_access(ortmem_backend *b, uintptr_t va, size_t size,
                                    ortmem_access access)
{
    return om_backend_counted(b, ORTMEM_OP_SET_ACCESS,
                              b->ops.set_access(b->self, va, size, access));
}

ortmem_status om_backend_export(ortmem_backend *b, uint64_t handle, int *fd)
{
    if (!b->ops.export_fd)
        return OM_ERR(ORTMEM_E_UNSUPPORTED, "backend '%s' cannot export granules", b->ops.name);
    return om_backend_counted(b, ORTMEM_OP_EXPORT, b->ops.export_fd(b->self, handle, fd));
}

ortmem_status om_backend_import(ortmem_backend *b, int fd, size_t size, uint64_t *handle)
{
    if (!b->ops.import_fd)
        return OM_ERR(ORTMEM_E_UNSUPPORTED, "backend '%s' cannot import granules", b->ops.name);
    return om_backend_counted(b, ORTMEM_OP_IMPORT, b->ops.import_fd(b->self, fd, size, handle));
}

bool om_backend_can_copy(const ortmem_backend *b)
{
    return b->ops.copy != NULL;
}

ortmem_status ortmem_backend_copy(ortmem_backend *b, void *dst, const void *src, size_t len)
{
    om_error_clear();
    if (!dst || !src || !len)
        return OM_ERR(ORTMEM_E_INVALID, "backend copy: NULL address or zero length");
    ortmem_status st = om_backend_pin(b, "backend copy");
    if (st != ORTMEM_OK)
        return st;
    st = om_backend_copy(b, (uintptr_t)dst, (uintptr_t)src, len);
    om_backend_unpin(b);
    return st;
}

ortmem_status om_backend_copy(ortmem_backend *b, uintptr_t dst, uintptr_t src, size_t size)
{
    if (!b->ops.copy)
        return OM_ERR(ORTMEM_E_UNSUPPORTED, "backend '%s' has no copy primitive", b->ops.name);
    return om_backend_counted(b, ORTMEM_OP_COPY, b->ops.copy(b->self, dst, src, size));
}
