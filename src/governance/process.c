/* The process manager: a registry of devices, each a backend with its
 * authority, created on first use and torn down explicitly. Ids carry a
 * generation, so an id kept across a teardown is detected as stale (no ABA).
 * The registry lock is never held across a backend call: a device is built
 * outside it and inserted afterwards (the first insert wins). */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "vmm/backend.h"
#include <ortmem/governance.h>

#define OM_DEVICE_SLOTS 64
#define OM_CPU_DEFAULT_LIMIT ((uint64_t)16 << 30)

typedef struct om_device {
    bool live;
    uint32_t generation;
    ortmem_device_kind kind;
    int ordinal;
    ortmem_backend *backend;
    ortmem_authority *authority;
} om_device;

static pthread_mutex_t om_devices_lock = PTHREAD_MUTEX_INITIALIZER;
static om_device om_devices[OM_DEVICE_SLOTS];
static bool om_tearing_down; /* a teardown is running: no device may be built */

static bool om_find_locked(ortmem_device_kind kind, int ordinal, ortmem_device_id *id)
{
    for (uint32_t i = 0; i < OM_DEVICE_SLOTS; i++) {
        if (om_devices[i].live && om_devices[i].kind == kind && om_devices[i].ordinal == ordinal) {
            *id = (ortmem_device_id){i, om_devices[i].generation};
            return true;
        }
    }
    return false;
}

static ortmem_status om_build(ortmem_device_kind kind, int ordinal,
                              const ortmem_device_options *opt, ortmem_backend **backend,
                              ortmem_authority **authority)
{
    ortmem_status st;
    if (kind == ORTMEM_DEVICE_CUDA) {
        ortmem_cuda_options cuda = ORTMEM_CUDA_OPTIONS_INIT;
        cuda.ordinal = ordinal;
        cuda.granule = opt->granule;
        st = ortmem_cuda_backend_create(&cuda, backend);
    } else if (ordinal != 0) {
        return OM_ERR(ORTMEM_E_RANGE, "device get: CPU device %d (only ordinal 0 exists)", ordinal);
    } else {
        ortmem_cpu_options cpu = ORTMEM_CPU_OPTIONS_INIT;
        cpu.granule = opt->granule;
        st = ortmem_cpu_backend_create(&cpu, backend);
    }
    if (st != ORTMEM_OK)
        return st;
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = opt->limit_bytes ? opt->limit_bytes : OM_CPU_DEFAULT_LIMIT;
    st = ortmem_authority_create(*backend, &ao, authority);
    if (st != ORTMEM_OK) {
        /* The destroy clears the thread's detail: keep the authority's. */
        char detail[256];
        snprintf(detail, sizeof detail, "%s", ortmem_last_error());
        (void)ortmem_backend_destroy(*backend);
        return OM_ERR(st, "%s", detail);
    }
    return st;
}

ortmem_status ortmem_device_get(ortmem_device_kind kind, int ordinal,
                                const ortmem_device_options *options, ortmem_device_id *id)
{
    om_error_clear();
    if (!id)
        return OM_ERR(ORTMEM_E_INVALID, "device get: id output is NULL");
    if (kind != ORTMEM_DEVICE_CPU && kind != ORTMEM_DEVICE_CUDA)
        return OM_ERR(ORTMEM_E_INVALID, "device get: unknown kind %d", (int)kind);
    ortmem_device_options opt = ORTMEM_DEVICE_OPTIONS_INIT;
    if (options) {
        if (options->struct_size == 0 || options->struct_size > sizeof opt)
            return OM_ERR(ORTMEM_E_INVALID, "device get: options struct_size %zu (knows %zu)",
                          options->struct_size, sizeof opt);
        memcpy(&opt, options, options->struct_size);
    }
    pthread_mutex_lock(&om_devices_lock);
    bool found = om_find_locked(kind, ordinal, id);
    bool tearing_down = om_tearing_down;
    pthread_mutex_unlock(&om_devices_lock);
    if (found)
        return ORTMEM_OK;
    if (tearing_down)
        return OM_ERR(ORTMEM_E_BUSY, "device get: a process teardown is running; ask again after");
    ortmem_backend *backend = NULL;
    ortmem_authority *authority = NULL;
    ortmem_status st = om_build(kind, ordinal, &opt, &backend, &authority);
    if (st != ORTMEM_OK)
        return st;
    pthread_mutex_lock(&om_devices_lock);
    bool raced = om_find_locked(kind, ordinal, id) || om_tearing_down;
    uint32_t slot = OM_DEVICE_SLOTS;
    for (uint32_t i = 0; !raced && i < OM_DEVICE_SLOTS && slot == OM_DEVICE_SLOTS; i++) {
        if (!om_devices[i].live)
            slot = i;
    }
    if (!raced && slot < OM_DEVICE_SLOTS) {
        om_device *d = &om_devices[slot];
        d->live = true;
        d->generation++;
        d->kind = kind;
        d->ordinal = ordinal;
        d->backend = backend;
        d->authority = authority;
        *id = (ortmem_device_id){slot, d->generation};
    }
    pthread_mutex_unlock(&om_devices_lock);
    if (raced || slot == OM_DEVICE_SLOTS) {
        (void)ortmem_authority_destroy(authority);
        (void)ortmem_backend_destroy(backend);
        if (!raced)
            return OM_ERR(ORTMEM_E_NOMEM, "device get: all %d device slots are in use",
                          OM_DEVICE_SLOTS);
        pthread_mutex_lock(&om_devices_lock);
        found = om_find_locked(kind, ordinal, id);
        pthread_mutex_unlock(&om_devices_lock);
        if (!found)
            return OM_ERR(ORTMEM_E_BUSY,
                          "device get: a process teardown is running; ask again after");
    }
    return ORTMEM_OK;
}

static ortmem_status om_lookup(ortmem_device_id id, const char *what, om_device *out)
{
    ortmem_status st = ORTMEM_OK;
    pthread_mutex_lock(&om_devices_lock);
    if (id.slot >= OM_DEVICE_SLOTS || !om_devices[id.slot].live ||
        om_devices[id.slot].generation != id.generation)
        st = OM_ERR(ORTMEM_E_HANDLE, "%s: device id {slot %u, generation %u} is stale or unknown",
                    what, id.slot, id.generation);
    else
        *out = om_devices[id.slot];
    pthread_mutex_unlock(&om_devices_lock);
    return st;
}

ortmem_status ortmem_device_backend(ortmem_device_id id, ortmem_backend **backend)
{
    om_error_clear();
    if (!backend)
        return OM_ERR(ORTMEM_E_INVALID, "device backend: output is NULL");
    om_device d = {0};
    ortmem_status st = om_lookup(id, "device backend", &d);
    if (st == ORTMEM_OK)
        *backend = d.backend;
    return st;
}

ortmem_status ortmem_device_authority(ortmem_device_id id, ortmem_authority **authority)
{
    om_error_clear();
    if (!authority)
        return OM_ERR(ORTMEM_E_INVALID, "device authority: output is NULL");
    om_device d = {0};
    ortmem_status st = om_lookup(id, "device authority", &d);
    if (st == ORTMEM_OK)
        *authority = d.authority;
    return st;
}

/* Users of a device's backend besides its own authority (regions, arenas,
 * wrapping backends). Checked before the authority goes, so that a device
 * whose backend cannot be destroyed stays whole. */
static uint64_t om_backend_other_users(ortmem_backend *b)
{
    uint64_t users = 0;
    if (om_backend_user_count(b, "process teardown", &users) != ORTMEM_OK)
        return 0;
    return users > 1 ? users - 1 : 0;
}

ortmem_status ortmem_process_teardown(void)
{
    om_error_clear();
    /* Take the devices out of the registry first, so nobody finds them while
     * they go; a device still in use goes back in, untouched. */
    om_device taken[OM_DEVICE_SLOTS];
    pthread_mutex_lock(&om_devices_lock);
    if (om_tearing_down) {
        pthread_mutex_unlock(&om_devices_lock);
        return OM_ERR(ORTMEM_E_BUSY, "process teardown: another teardown is running");
    }
    om_tearing_down = true;
    for (uint32_t i = 0; i < OM_DEVICE_SLOTS; i++) {
        taken[i] = om_devices[i];
        om_devices[i].live = false;
    }
    pthread_mutex_unlock(&om_devices_lock);
    ortmem_status result = ORTMEM_OK;
    char detail[256] = "";
    for (uint32_t i = 0; i < OM_DEVICE_SLOTS; i++) {
        if (!taken[i].live)
            continue;
        uint64_t others = om_backend_other_users(taken[i].backend);
        ortmem_status st =
            others ? OM_ERR(ORTMEM_E_BUSY,
                            "device %u: backend '%s' still has %llu users besides its "
                            "authority (regions, arenas or wrapping backends)",
                            i, ortmem_backend_name(taken[i].backend), (unsigned long long)others)
                   : ortmem_authority_destroy(taken[i].authority);
        if (st == ORTMEM_OK) {
            st = ortmem_backend_destroy(taken[i].backend);
            if (st == ORTMEM_E_QUARANTINED)
                st = ORTMEM_OK; /* destroyed; the quarantine is reported in the detail */
            taken[i].live = false;
        }
        if (st != ORTMEM_OK && result == ORTMEM_OK) {
            result = st;
            snprintf(detail, sizeof detail, "%s", ortmem_last_error());
        }
    }
    pthread_mutex_lock(&om_devices_lock);
    for (uint32_t i = 0; i < OM_DEVICE_SLOTS; i++) {
        if (taken[i].live)
            om_devices[i].live = true; /* still in use: back in the registry */
    }
    om_tearing_down = false;
    pthread_mutex_unlock(&om_devices_lock);
    if (result != ORTMEM_OK)
        return OM_ERR(result,
                      "process teardown: devices still in use stay registered (idle ones are "
                      "gone): %s",
                      detail);
    return ORTMEM_OK;
}
