/* Regions: a reserved VA range whose granules are mapped only where bytes live.
 *
 * Invariants (docs/memory/ARCHITECTURE.md):
 * - every map is followed by set-access; a rollback restores recorded access;
 * - commit, decommit, share, cow and import are all-or-nothing;
 * - one unmap and one set-access per contiguous run of granules;
 * - a granule whose unmap or release failed is poisoned: it stays charged, is
 *   never reused and is reported; the VA is freed only when nothing stays. */
#include "core/alloc.h"
#include "vmm/region.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/trace.h"
#include "vmm/backend.h"

typedef struct om_slot {
    om_phys *phys;
    uint8_t state;  /* ortmem_granule_state */
    uint8_t access; /* ortmem_access */
    /* Bytes of this granule that commits asked for: the hull [lo, hi). */
    uint32_t requested_lo, requested_hi;
    /* Mapping epoch: +1 whenever this granule's mapping changes (map, unmap,
     * cow swap, poison); a rollback that restores the mapping keeps it.
     * Read by ortmem_region_range_state; wraps after 2^32 changes. */
    uint32_t epoch;
} om_slot;

/* What one call still holds of the capacity it reserved on its account. */
typedef struct om_hold {
    uint64_t owned, mapped;
} om_hold;

struct ortmem_region {
    om_handle hdr;
    ortmem_backend *backend;
    pthread_mutex_t lock;
    uintptr_t base;
    size_t size;
    size_t granule;
    size_t count;
    unsigned flags;
    bool traced;
    bool report_requested; /* an arena reports its allocations instead */
    uint64_t id;           /* lock order between regions, and the trace id */
    om_account account;
    om_relief *relief; /* where a refused reservation is noted, while locked */
    om_slot *slots;
};

static const om_account om_no_account;

static _Atomic uint64_t om_region_ids;

/* ---- helpers ---- */

static uintptr_t va_of(const ortmem_region *r, size_t index)
{
    return r->base + index * r->granule;
}

/* Next run of selected entries at or after *i (relative to sel); 0 when none. */
static size_t next_run(const bool *sel, size_t *i, size_t n)
{
    while (*i < n && !sel[*i])
        (*i)++;
    size_t start = *i;
    while (*i < n && sel[*i])
        (*i)++;
    size_t len = *i - start;
    *i = start;
    return len;
}

static ortmem_status pin_region(ortmem_region *r, const char *what)
{
    ortmem_status st = om_handle_pin(r, OM_KIND_REGION, what);
    if (st != ORTMEM_OK)
        return st;
    pthread_mutex_lock(&r->lock);
    return ORTMEM_OK;
}

static void unpin_region(ortmem_region *r)
{
    pthread_mutex_unlock(&r->lock);
    om_handle_unpin(&r->hdr);
}

/* Byte range [off, off+len) inside the region, len > 0. */
static ortmem_status check_range(const ortmem_region *r, size_t off, size_t len, const char *what)
{
    if (len == 0)
        return OM_ERR(ORTMEM_E_INVALID, "%s: length is 0", what);
    if (off > SIZE_MAX - len)
        return OM_ERR(ORTMEM_E_OVERFLOW, "%s: offset %zu + length %zu overflows", what, off, len);
    if (off + len > r->size)
        return OM_ERR(ORTMEM_E_RANGE, "%s: [%zu, %zu) outside the region of %zu bytes", what, off,
                      off + len, r->size);
    return ORTMEM_OK;
}

static ortmem_status check_aligned(const ortmem_region *r, size_t off, size_t len, const char *what)
{
    if (off % r->granule || len % r->granule)
        return OM_ERR(ORTMEM_E_ALIGN,
                      "%s: offset %zu and length %zu must be multiples of the granule %zu", what,
                      off, len, r->granule);
    return ORTMEM_OK;
}

static ortmem_status no_poison(const ortmem_region *r, size_t g0, size_t n, const char *what)
{
    for (size_t i = g0; i < g0 + n; i++) {
        if (r->slots[i].state == ORTMEM_GRANULE_POISONED)
            return OM_ERR(ORTMEM_E_STATE,
                          "%s: granule %zu (offset %zu) is quarantined after a failed backend "
                          "call and cannot be used",
                          what, i, i * r->granule);
    }
    return ORTMEM_OK;
}

/* Mapped bytes enter the ledger and the region's account: out of the call's
 * hold, or (hold NULL: a rollback mapping back what was there) adopted. */
static void mapped_in(ortmem_region *r, size_t bytes, om_hold *hold)
{
    om_ledger_mapped_add(r->backend, bytes);
    if (hold) {
        om_account_charge(&r->account, 0, bytes);
        hold->mapped -= bytes < hold->mapped ? bytes : hold->mapped;
    } else {
        om_account_adopt(&r->account, 0, bytes);
    }
}

static void mapped_out(ortmem_region *r, size_t bytes)
{
    om_ledger_mapped_sub(r->backend, bytes);
    om_account_refund(&r->account, 0, bytes);
}

static void release_hold(ortmem_region *r, om_hold *hold)
{
    om_account_unreserve(&r->account, hold->owned, hold->mapped);
    hold->owned = hold->mapped = 0;
}

/* Requested bytes of granule i dropped (decommit, destroy). */
static int64_t forget_requested(ortmem_region *r, size_t i)
{
    om_slot *s = &r->slots[i];
    int64_t gone = (int64_t)s->requested_hi - (int64_t)s->requested_lo;
    s->requested_lo = s->requested_hi = 0;
    return gone;
}

/* Marks slot i poisoned, holding p (whose mapper reference it keeps). */
static void poison_slot(ortmem_region *r, size_t i, om_phys *p, bool still_mapped)
{
    om_slot *s = &r->slots[i];
    int64_t requested = forget_requested(r, i);
    if (r->report_requested)
        om_account_requested(&r->account, -requested);
    s->state = ORTMEM_GRANULE_POISONED;
    s->epoch++;
    s->phys = p;
    s->access = ORTMEM_ACCESS_NONE;
    om_phys_poison(r->backend, p);
    if (still_mapped)
        om_quarantine_mapping(r->backend, &r->account, r->granule);
}

/* Gets a granule for every want[k]: pooled ones first (their charge moves in
 * and needs no capacity), then capacity for the rest, plus mapped_bytes of
 * mapping capacity, is reserved on the account and they are created. On
 * failure everything acquired goes back and nothing stays held. */
static ortmem_status acquire_granules(ortmem_region *r, size_t n, const bool *want, om_phys **phys,
                                      uint64_t mapped_bytes, om_hold *hold)
{
    ortmem_backend *b = r->backend;
    unsigned flags = (r->flags & ORTMEM_REGION_EXPORTABLE) ? OM_PHYS_EXPORTABLE : 0;
    size_t needed = 0, pooled = 0;
    for (size_t k = 0; k < n; k++) {
        if (!want[k])
            continue;
        needed++;
        phys[k] = om_phys_take_pooled(b, flags, &r->account);
        pooled += phys[k] != NULL;
    }
    *hold = (om_hold){(uint64_t)(needed - pooled) * r->granule, mapped_bytes};
    ortmem_status st = om_account_reserve(&r->account, hold->owned, hold->mapped);
    if (st != ORTMEM_OK) {
        if (st == ORTMEM_E_BUDGET)
            om_relief_note(r->relief, &r->account, hold->owned, hold->mapped);
        *hold = (om_hold){0, 0};
    }
    for (size_t k = 0; st == ORTMEM_OK && k < n; k++) {
        if (!want[k] || phys[k])
            continue;
        st = om_phys_create(b, flags, &r->account, &phys[k]);
        if (st == ORTMEM_OK)
            hold->owned -= r->granule;
    }
    if (st == ORTMEM_OK)
        return ORTMEM_OK;
    for (size_t k = 0; k < n; k++) {
        if (phys[k])
            (void)om_phys_discard(b, phys[k]);
        phys[k] = NULL;
    }
    release_hold(r, hold);
    return st;
}

/* Undoes mappings made by the failing call: unmaps each run of mapped[] and
 * gives the granules back. fresh: the granules were acquired by this call (and
 * carry no mapper yet); otherwise they are borrowed from another region. A
 * failed unmap poisons the run instead. */
static void rollback_new_mappings(ortmem_region *r, size_t g0, size_t n, const bool *mapped,
                                  om_phys **phys, bool fresh)
{
    ortmem_backend *b = r->backend;
    size_t i = 0;
    for (size_t len; (len = next_run(mapped, &i, n)) != 0; i += len) {
        size_t bytes = len * r->granule;
        if (om_backend_unmap(b, va_of(r, g0 + i), bytes) == ORTMEM_OK) {
            mapped_out(r, bytes);
            continue;
        }
        for (size_t k = i; k < i + len; k++) {
            atomic_fetch_add(&phys[k]->mappers, 1);
            poison_slot(r, g0 + k, phys[k], true);
            phys[k] = NULL;
        }
    }
    if (fresh) {
        for (size_t k = 0; k < n; k++) {
            if (phys[k])
                (void)om_phys_discard(b, phys[k]);
        }
    }
}

/* Maps phys[k] (where non-NULL) at granule g0+k and sets access per run. On
 * failure everything this call mapped is rolled back. */
static ortmem_status map_granules(ortmem_region *r, size_t g0, size_t n, om_phys **phys,
                                  ortmem_access access, bool fresh, om_hold *hold)
{
    ortmem_backend *b = r->backend;
    bool *mapped = om_calloc(n, sizeof *mapped);
    if (!mapped)
        return OM_ERR(ORTMEM_E_NOMEM, "run bookkeeping for %zu granules", n);
    ortmem_status st = ORTMEM_OK;
    for (size_t k = 0; k < n && st == ORTMEM_OK; k++) {
        if (!phys[k])
            continue;
        st = om_backend_map(b, va_of(r, g0 + k), r->granule, phys[k]->handle, 0);
        if (st == ORTMEM_OK) {
            mapped[k] = true;
            mapped_in(r, r->granule, hold);
        }
    }
    size_t i = 0;
    for (size_t len; st == ORTMEM_OK && (len = next_run(mapped, &i, n)) != 0; i += len)
        st = om_backend_set_access(b, va_of(r, g0 + i), len * r->granule, access);
    if (st != ORTMEM_OK) {
        rollback_new_mappings(r, g0, n, mapped, phys, fresh);
        om_free(mapped);
        return st;
    }
    for (size_t k = 0; k < n; k++) {
        if (!phys[k])
            continue;
        atomic_fetch_add(&phys[k]->mappers, 1);
        uint32_t epoch = r->slots[g0 + k].epoch + 1;
        r->slots[g0 + k] = (om_slot){phys[k], ORTMEM_GRANULE_MAPPED, (uint8_t)access, 0, 0, epoch};
    }
    om_free(mapped);
    return ORTMEM_OK;
}

/* Maps the recorded granules of sel[] back after a failed unmap elsewhere.
 * A granule that cannot be restored is poisoned (its physical memory is held). */
static void restore_runs(ortmem_region *r, size_t g0, size_t n, const bool *sel)
{
    ortmem_backend *b = r->backend;
    for (size_t k = 0; k < n; k++) {
        if (!sel[k])
            continue;
        om_slot *s = &r->slots[g0 + k];
        uintptr_t va = va_of(r, g0 + k);
        if (om_backend_map(b, va, r->granule, s->phys->handle, 0) != ORTMEM_OK) {
            poison_slot(r, g0 + k, s->phys, false);
            continue;
        }
        mapped_in(r, r->granule, NULL);
        if (om_backend_set_access(b, va, r->granule, (ortmem_access)s->access) != ORTMEM_OK)
            poison_slot(r, g0 + k, s->phys, true);
    }
}

/* Unmaps every run of sel[] (one call per run). On a failure the runs already
 * unmapped are mapped back and the error returned: nothing changed. */
static ortmem_status unmap_runs(ortmem_region *r, size_t g0, size_t n, const bool *sel)
{
    ortmem_backend *b = r->backend;
    size_t i = 0;
    for (size_t len; (len = next_run(sel, &i, n)) != 0; i += len) {
        size_t bytes = len * r->granule;
        ortmem_status st = om_backend_unmap(b, va_of(r, g0 + i), bytes);
        if (st != ORTMEM_OK) {
            bool *done = om_calloc(n, sizeof *done);
            if (done) {
                memcpy(done, sel, i * sizeof *done);
                restore_runs(r, g0, n, done);
                om_free(done);
            } else {
                for (size_t k = 0; k < i; k++) {
                    if (sel[k])
                        poison_slot(r, g0 + k, r->slots[g0 + k].phys, false);
                }
            }
            return st;
        }
        mapped_out(r, bytes);
    }
    return ORTMEM_OK;
}

/* After unmap_runs succeeded: clears the slots and drops their granules. */
static ortmem_status drop_unmapped(ortmem_region *r, size_t g0, size_t n, const bool *sel)
{
    ortmem_status result = ORTMEM_OK;
    for (size_t k = 0; k < n; k++) {
        if (!sel[k])
            continue;
        om_slot *s = &r->slots[g0 + k];
        om_phys *p = s->phys;
        int64_t requested = forget_requested(r, g0 + k);
        if (r->report_requested)
            om_account_requested(&r->account, -requested);
        *s = (om_slot){NULL, ORTMEM_GRANULE_UNMAPPED, ORTMEM_ACCESS_NONE, 0, 0, s->epoch + 1};
        ortmem_status st = om_phys_drop(r->backend, p);
        if (st != ORTMEM_OK)
            result = st;
    }
    return result;
}

/* ---- create / destroy ---- */

ortmem_status om_region_create(ortmem_backend *b, const ortmem_region_options *options, bool traced,
                               bool report_requested, ortmem_region **out)
{
    if (!options || !out)
        return OM_ERR(ORTMEM_E_INVALID, "region create: options or out is NULL");
    if (options->struct_size == 0 || options->struct_size > sizeof(ortmem_region_options))
        return OM_ERR(ORTMEM_E_INVALID,
                      "region create: options struct_size %zu (this library knows %zu)",
                      options->struct_size, sizeof(ortmem_region_options));
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    memcpy(&opt, options, options->struct_size);
    if (opt.size == 0)
        return OM_ERR(ORTMEM_E_INVALID, "region create: size is 0");
    if (opt.flags & ~(unsigned)ORTMEM_REGION_EXPORTABLE)
        return OM_ERR(ORTMEM_E_INVALID, "region create: unknown flags 0x%x", opt.flags);
    om_account account;
    ortmem_status st = om_account_init(&account, opt.account, "region create");
    if (st != ORTMEM_OK)
        return st;
    st = om_backend_pin(b, "region create");
    if (st != ORTMEM_OK) {
        om_account_drop(&account);
        return st;
    }
    size_t g = b->granule;
    if (g > UINT32_MAX) {
        om_backend_unpin(b);
        om_account_drop(&account);
        return OM_ERR(ORTMEM_E_UNSUPPORTED, "region create: granule %zu above 4 GiB", g);
    }
    if (opt.size > SIZE_MAX - (g - 1)) {
        om_backend_unpin(b);
        om_account_drop(&account);
        return OM_ERR(ORTMEM_E_OVERFLOW,
                      "region create: %zu bytes rounded to the granule %zu "
                      "overflows",
                      opt.size, g);
    }
    size_t align = opt.alignment ? opt.alignment : g;
    if (align & (align - 1) || align < g) {
        om_backend_unpin(b);
        om_account_drop(&account);
        return OM_ERR(ORTMEM_E_ALIGN,
                      "region create: alignment %zu must be a power of two >= the granule %zu",
                      opt.alignment, g);
    }
    size_t size = (opt.size + g - 1) & ~(g - 1);
    ortmem_region *r = om_calloc(1, sizeof *r);
    om_slot *slots = r ? om_calloc(size / g, sizeof *slots) : NULL;
    if (!r || !slots) {
        om_free(r);
        om_backend_unpin(b);
        om_account_drop(&account);
        return OM_ERR(ORTMEM_E_NOMEM, "region create: bookkeeping for %zu granules", size / g);
    }
    r->slots = slots;
    st = om_backend_reserve(b, size, align, &r->base);
    if (st != ORTMEM_OK) {
        om_free(slots);
        om_free(r);
        om_backend_unpin(b);
        om_account_drop(&account);
        return om_error_wrap(st, "region create (%zu bytes)", size);
    }
    r->backend = b;
    r->size = size;
    r->granule = g;
    r->count = size / g;
    r->flags = opt.flags;
    r->traced = traced;
    r->report_requested = report_requested;
    r->account = account;
    r->id = atomic_fetch_add(&om_region_ids, 1) + 1;
    pthread_mutex_init(&r->lock, NULL);
    st = om_handle_register(&r->hdr, OM_KIND_REGION);
    if (st != ORTMEM_OK) {
        (void)om_backend_unreserve(b, r->base, size);
        pthread_mutex_destroy(&r->lock);
        om_free(slots);
        om_free(r);
        om_backend_unpin(b);
        om_account_drop(&account);
        return st;
    }
    om_ledger_count(&b->ledger.reserved, size, b);
    om_backend_use(b);
    om_backend_unpin(b);
    if (traced)
        om_trace_line("region r%llu %zu", (unsigned long long)r->id, size);
    *out = r;
    return ORTMEM_OK;
}

ortmem_status ortmem_region_create(ortmem_backend *backend, const ortmem_region_options *options,
                                   ortmem_region **out)
{
    om_error_clear();
    return om_region_create(backend, options, true, true, out);
}

ortmem_status ortmem_region_destroy(ortmem_region *r)
{
    om_error_clear();
    ortmem_status st = om_handle_pin(r, OM_KIND_REGION, "region destroy");
    if (st != ORTMEM_OK)
        return st;
    st = om_handle_retire(&r->hdr, "region destroy");
    if (st != ORTMEM_OK) {
        om_handle_unpin(&r->hdr);
        return st;
    }
    ortmem_backend *b = r->backend;
    pthread_mutex_lock(&r->lock);
    bool *sel = om_calloc(r->count ? r->count : 1, sizeof *sel);
    ortmem_status result = ORTMEM_OK;
    size_t poisoned = 0;
    for (size_t i = 0; i < r->count; i++) {
        if (sel)
            sel[i] = r->slots[i].state == ORTMEM_GRANULE_MAPPED;
    }
    if (sel) {
        /* Unmap run by run; a run that fails is quarantined, the rest go on. */
        size_t i = 0;
        for (size_t len; (len = next_run(sel, &i, r->count)) != 0; i += len) {
            size_t bytes = len * r->granule;
            if (om_backend_unmap(b, va_of(r, i), bytes) == ORTMEM_OK) {
                mapped_out(r, bytes);
                if (drop_unmapped(r, i, len, sel + i) != ORTMEM_OK)
                    result = ORTMEM_E_QUARANTINED;
            } else {
                for (size_t k = i; k < i + len; k++)
                    poison_slot(r, k, r->slots[k].phys, true);
                result = ORTMEM_E_QUARANTINED;
            }
        }
    } else {
        result = OM_ERR(ORTMEM_E_NOMEM, "region destroy: run bookkeeping");
        for (size_t i = 0; i < r->count; i++) {
            if (r->slots[i].state == ORTMEM_GRANULE_MAPPED)
                poison_slot(r, i, r->slots[i].phys, true);
        }
    }
    for (size_t i = 0; i < r->count; i++)
        poisoned += r->slots[i].state == ORTMEM_GRANULE_POISONED;
    om_free(sel);
    if (poisoned) {
        om_ledger_count(&b->ledger.leaked_va, r->size, b);
        result = OM_ERR(ORTMEM_E_QUARANTINED,
                        "region destroy: %zu of %zu granules quarantined; the %zu-byte VA range "
                        "at %p stays reserved on purpose",
                        poisoned, r->count, r->size, (void *)r->base);
    } else if (om_backend_unreserve(b, r->base, r->size) != ORTMEM_OK) {
        om_ledger_count(&b->ledger.leaked_va, r->size, b);
        result =
            om_error_wrap(ORTMEM_E_QUARANTINED, "region destroy: VA of %zu bytes leaked", r->size);
    } else if (result == ORTMEM_E_QUARANTINED) {
        result = om_error_wrap(result, "region destroy: a granule release failed");
    }
    om_counter_sub(&b->ledger.reserved, r->size, &b->ledger.saturations);
    if (r->traced)
        om_trace_line("destroy r%llu", (unsigned long long)r->id);
    pthread_mutex_unlock(&r->lock);
    pthread_mutex_destroy(&r->lock);
    om_free(r->slots);
    om_backend_unuse(b);
    om_account_drop(&r->account);
    om_free(r);
    om_handle_end_destroy();
    return result;
}

/* ---- accessors ---- */

void *ortmem_region_base(ortmem_region *r)
{
    if (om_handle_pin(r, OM_KIND_REGION, "region base") != ORTMEM_OK)
        return NULL;
    void *base = (void *)r->base;
    om_handle_unpin(&r->hdr);
    return base;
}

size_t ortmem_region_size(ortmem_region *r)
{
    if (om_handle_pin(r, OM_KIND_REGION, "region size") != ORTMEM_OK)
        return 0;
    size_t size = r->size;
    om_handle_unpin(&r->hdr);
    return size;
}

size_t ortmem_region_granule(ortmem_region *r)
{
    if (om_handle_pin(r, OM_KIND_REGION, "region granule") != ORTMEM_OK)
        return 0;
    size_t g = r->granule;
    om_handle_unpin(&r->hdr);
    return g;
}

ortmem_status ortmem_region_granule_info(ortmem_region *r, size_t offset, ortmem_granule_info *info)
{
    om_error_clear();
    if (!info || info->struct_size == 0 || info->struct_size > sizeof *info)
        return OM_ERR(ORTMEM_E_INVALID, "region granule info: info NULL or struct_size unset");
    ortmem_status st = pin_region(r, "region granule info");
    if (st != ORTMEM_OK)
        return st;
    if (offset >= r->size) {
        st = OM_ERR(ORTMEM_E_RANGE, "region granule info: offset %zu outside %zu bytes", offset,
                    r->size);
    } else {
        om_slot *s = &r->slots[offset / r->granule];
        ortmem_granule_info out = {sizeof out, (ortmem_granule_state)s->state,
                                   (ortmem_access)s->access,
                                   s->phys ? atomic_load(&s->phys->mappers) : 0};
        out.struct_size = info->struct_size;
        memcpy(info, &out, info->struct_size);
    }
    unpin_region(r);
    return st;
}

ortmem_status ortmem_region_range_state(ortmem_region *r, size_t offset, size_t len,
                                        ortmem_range_state *out)
{
    om_error_clear();
    if (!out || out->struct_size == 0 || out->struct_size > sizeof *out)
        return OM_ERR(ORTMEM_E_INVALID, "region range state: out NULL or struct_size unset");
    ortmem_status st = pin_region(r, "region range state");
    if (st != ORTMEM_OK)
        return st;
    st = check_range(r, offset, len, "region range state");
    if (st == ORTMEM_OK) {
        ortmem_range_state res = {sizeof res, r->id, 0, 0, SIZE_MAX, 0, 1};
        size_t first = offset / r->granule, last = (offset + len - 1) / r->granule;
        for (size_t k = first; k <= last; k++) {
            const om_slot *s = &r->slots[k];
            res.granules++;
            res.epoch_sum += s->epoch;
            if (s->state == ORTMEM_GRANULE_MAPPED)
                continue;
            if (res.unmapped_granules++ == 0)
                res.first_unmapped_offset = k * r->granule;
            res.all_mapped = 0;
        }
        res.struct_size = out->struct_size;
        memcpy(out, &res, out->struct_size);
    }
    unpin_region(r);
    return st;
}

/* ---- commit / decommit ---- */

/* Widens each committed granule's requested hull by [offset, offset+len). */
static void note_requested(ortmem_region *r, size_t g0, size_t n, size_t offset, size_t len)
{
    if (!r->report_requested)
        return;
    int64_t delta = 0;
    for (size_t k = 0; k < n; k++) {
        om_slot *s = &r->slots[g0 + k];
        size_t start = (g0 + k) * r->granule, end = start + r->granule;
        uint32_t lo = (uint32_t)((offset > start ? offset : start) - start);
        uint32_t hi = (uint32_t)((offset + len < end ? offset + len : end) - start);
        uint32_t old = s->requested_hi - s->requested_lo;
        if (old) {
            lo = lo < s->requested_lo ? lo : s->requested_lo;
            hi = hi > s->requested_hi ? hi : s->requested_hi;
        }
        s->requested_lo = lo;
        s->requested_hi = hi;
        delta += (int64_t)(hi - lo) - (int64_t)old;
    }
    om_account_requested(&r->account, delta);
}

/* Granule span [*g0, *g0 + *n) touched by ranges, or an error naming the bad one. */
static ortmem_status ranges_span(const ortmem_region *r, const ortmem_range *ranges, size_t count,
                                 const char *what, size_t *g0, size_t *n)
{
    if (!ranges || count == 0)
        return OM_ERR(ORTMEM_E_INVALID, "%s: no ranges", what);
    size_t lo = SIZE_MAX, hi = 0;
    for (size_t i = 0; i < count; i++) {
        ortmem_status st = check_range(r, ranges[i].offset, ranges[i].length, what);
        if (st != ORTMEM_OK)
            return om_error_wrap(st, "range %zu of %zu", i, count);
        size_t first = ranges[i].offset / r->granule;
        size_t last = (ranges[i].offset + ranges[i].length - 1) / r->granule;
        lo = first < lo ? first : lo;
        hi = last > hi ? last : hi;
    }
    *g0 = lo;
    *n = hi - lo + 1;
    return ORTMEM_OK;
}

ortmem_status om_region_commit_for(ortmem_region *r, const ortmem_range *ranges, size_t count,
                                   om_relief *relief)
{
    om_error_clear();
    ortmem_status st = pin_region(r, "region commit");
    if (st != ORTMEM_OK)
        return st;
    r->relief = relief;
    size_t g0 = 0, n = 0;
    st = ranges_span(r, ranges, count, "region commit", &g0, &n);
    om_phys **phys = st == ORTMEM_OK ? om_calloc(n, sizeof *phys) : NULL;
    bool *want = phys ? om_calloc(n, sizeof *want) : NULL;
    if (st == ORTMEM_OK && !want)
        st = OM_ERR(ORTMEM_E_NOMEM, "region commit: bookkeeping for %zu granules", n);
    for (size_t i = 0; st == ORTMEM_OK && i < count; i++) {
        size_t first = ranges[i].offset / r->granule;
        size_t last = (ranges[i].offset + ranges[i].length - 1) / r->granule;
        st = no_poison(r, first, last - first + 1, "region commit");
        for (size_t k = first; st == ORTMEM_OK && k <= last; k++)
            want[k - g0] = r->slots[k].state == ORTMEM_GRANULE_UNMAPPED;
    }
    size_t wanted = 0;
    for (size_t k = 0; st == ORTMEM_OK && k < n; k++)
        wanted += want[k];
    om_hold hold = {0, 0};
    if (st == ORTMEM_OK && wanted) {
        st = acquire_granules(r, n, want, phys, (uint64_t)wanted * r->granule, &hold);
        if (st == ORTMEM_OK)
            st = map_granules(r, g0, n, phys, ORTMEM_ACCESS_READ_WRITE, true, &hold);
        release_hold(r, &hold);
    }
    if (st != ORTMEM_OK && count == 1) {
        st = om_error_wrap(st, "region commit [%zu, +%zu) of %zu granule%s", ranges[0].offset,
                           ranges[0].length, wanted, wanted == 1 ? "" : "s");
    } else if (st != ORTMEM_OK) {
        st = om_error_wrap(st, "region commit of %zu ranges (%zu granule%s)", count, wanted,
                           wanted == 1 ? "" : "s");
    } else {
        for (size_t i = 0; i < count; i++) {
            size_t first = ranges[i].offset / r->granule;
            size_t last = (ranges[i].offset + ranges[i].length - 1) / r->granule;
            note_requested(r, first, last - first + 1, ranges[i].offset, ranges[i].length);
            if (r->traced)
                om_trace_line("commit r%llu %zu %zu", (unsigned long long)r->id, ranges[i].offset,
                              ranges[i].length);
        }
    }
    om_free(want);
    om_free(phys);
    r->relief = NULL;
    unpin_region(r);
    return st;
}

ortmem_status ortmem_region_commit_ranges(ortmem_region *r, const ortmem_range *ranges,
                                          size_t count)
{
    om_relief relief = {0};
    ortmem_status st = om_region_commit_for(r, ranges, count, &relief);
    if (om_relief_run(&relief, st))
        st = om_region_commit_for(r, ranges, count, NULL);
    return st;
}

ortmem_status ortmem_region_commit(ortmem_region *r, size_t offset, size_t len)
{
    ortmem_range range = {offset, len};
    return ortmem_region_commit_ranges(r, &range, 1);
}

ortmem_status ortmem_region_decommit_ranges(ortmem_region *r, const ortmem_range *ranges,
                                            size_t count)
{
    om_error_clear();
    ortmem_status st = pin_region(r, "region decommit");
    if (st != ORTMEM_OK)
        return st;
    size_t g0 = 0, n = 0;
    st = ranges_span(r, ranges, count, "region decommit", &g0, &n);
    bool *sel = st == ORTMEM_OK ? om_calloc(n, sizeof *sel) : NULL;
    if (st == ORTMEM_OK && !sel)
        st = OM_ERR(ORTMEM_E_NOMEM, "region decommit: bookkeeping for %zu granules", n);
    /* Only granules wholly inside a range. */
    for (size_t i = 0; sel && i < count; i++) {
        size_t first = (ranges[i].offset + r->granule - 1) / r->granule;
        size_t end = (ranges[i].offset + ranges[i].length) / r->granule;
        for (size_t k = first; k < end; k++)
            sel[k - g0] = r->slots[k].state == ORTMEM_GRANULE_MAPPED;
    }
    if (sel) {
        st = unmap_runs(r, g0, n, sel);
        if (st == ORTMEM_OK)
            st = drop_unmapped(r, g0, n, sel);
        else if (count == 1)
            st = om_error_wrap(st, "region decommit [%zu, +%zu): nothing changed", ranges[0].offset,
                               ranges[0].length);
        else
            st = om_error_wrap(st, "region decommit of %zu ranges: nothing changed", count);
    }
    for (size_t i = 0; (st == ORTMEM_OK || st == ORTMEM_E_QUARANTINED) && r->traced && i < count;
         i++)
        om_trace_line("decommit r%llu %zu %zu", (unsigned long long)r->id, ranges[i].offset,
                      ranges[i].length);
    om_free(sel);
    unpin_region(r);
    return st;
}

ortmem_status ortmem_region_decommit(ortmem_region *r, size_t offset, size_t len)
{
    ortmem_range range = {offset, len};
    return ortmem_region_decommit_ranges(r, &range, 1);
}

ortmem_status ortmem_region_protect(ortmem_region *r, size_t offset, size_t len,
                                    ortmem_access access)
{
    om_error_clear();
    if (access != ORTMEM_ACCESS_NONE && access != ORTMEM_ACCESS_READ &&
        access != ORTMEM_ACCESS_READ_WRITE)
        return OM_ERR(ORTMEM_E_INVALID, "region protect: unknown access %d", (int)access);
    ortmem_status st = pin_region(r, "region protect");
    if (st != ORTMEM_OK)
        return st;
    st = check_range(r, offset, len, "region protect");
    if (st == ORTMEM_OK)
        st = check_aligned(r, offset, len, "region protect");
    size_t g0 = offset / r->granule, n = len / r->granule;
    for (size_t k = 0; st == ORTMEM_OK && k < n; k++) {
        if (r->slots[g0 + k].state != ORTMEM_GRANULE_MAPPED)
            st = OM_ERR(ORTMEM_E_STATE, "region protect: granule at offset %zu is not mapped",
                        (g0 + k) * r->granule);
    }
    if (st == ORTMEM_OK)
        st = om_backend_set_access(r->backend, va_of(r, g0), len, access);
    for (size_t k = 0; st == ORTMEM_OK && k < n; k++)
        r->slots[g0 + k].access = (uint8_t)access;
    unpin_region(r);
    return st;
}

/* ---- share ---- */

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

static void unlock_pair(ortmem_region *a, ortmem_region *b)
{
    pthread_mutex_unlock(&a->lock);
    if (a != b)
        pthread_mutex_unlock(&b->lock);
}

static ortmem_status check_share(ortmem_region *dst, size_t dst_offset, ortmem_region *src,
                                 size_t src_offset, size_t len)
{
    const char *what = "region share";
    ortmem_status st = check_range(dst, dst_offset, len, "region share (destination)");
    if (st == ORTMEM_OK)
        st = check_range(src, src_offset, len, "region share (source)");
    if (st == ORTMEM_OK)
        st = check_aligned(dst, dst_offset, len, "region share (destination)");
    if (st == ORTMEM_OK)
        st = check_aligned(src, src_offset, len, "region share (source)");
    if (st != ORTMEM_OK)
        return st;
    if (dst->backend != src->backend)
        return OM_ERR(ORTMEM_E_INVALID, "%s: regions live on different backends ('%s', '%s')", what,
                      dst->backend->ops.name, src->backend->ops.name);
    if (dst == src && dst_offset < src_offset + len && src_offset < dst_offset + len)
        return OM_ERR(ORTMEM_E_RANGE, "%s: [%zu, +%zu) and [%zu, +%zu) overlap in one region", what,
                      dst_offset, len, src_offset, len);
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
    return ORTMEM_OK;
}

static ortmem_status region_share_once(ortmem_region *dst, size_t dst_offset, ortmem_region *src,
                                       size_t src_offset, size_t len, ortmem_access access,
                                       om_relief *relief)
{
    om_error_clear();
    if (access != ORTMEM_ACCESS_NONE && access != ORTMEM_ACCESS_READ &&
        access != ORTMEM_ACCESS_READ_WRITE)
        return OM_ERR(ORTMEM_E_INVALID, "region share: unknown access %d", (int)access);
    ortmem_status st = om_handle_pin(dst, OM_KIND_REGION, "region share (destination)");
    if (st != ORTMEM_OK)
        return st;
    st = om_handle_pin(src, OM_KIND_REGION, "region share (source)");
    if (st != ORTMEM_OK) {
        om_handle_unpin(&dst->hdr);
        return st;
    }
    lock_pair(dst, src);
    dst->relief = relief;
    st = check_share(dst, dst_offset, src, src_offset, len);
    size_t n = st == ORTMEM_OK ? len / dst->granule : 0;
    om_phys **phys = n ? om_calloc(n, sizeof *phys) : NULL;
    if (st == ORTMEM_OK && !phys)
        st = OM_ERR(ORTMEM_E_NOMEM, "region share: bookkeeping for %zu granules", n);
    if (st == ORTMEM_OK) {
        for (size_t k = 0; k < n; k++)
            phys[k] = src->slots[src_offset / src->granule + k].phys;
        om_hold hold = {0, (uint64_t)len};
        st = om_account_reserve(&dst->account, 0, hold.mapped);
        if (st == ORTMEM_E_BUDGET)
            om_relief_note(dst->relief, &dst->account, 0, hold.mapped);
        if (st == ORTMEM_OK) {
            st = map_granules(dst, dst_offset / dst->granule, n, phys, access, false, &hold);
            release_hold(dst, &hold);
        }
        if (st != ORTMEM_OK)
            st = om_error_wrap(st, "region share of %zu granules", n);
        else if (dst->traced && src->traced)
            om_trace_line("share r%llu %zu r%llu %zu %zu %s", (unsigned long long)dst->id,
                          dst_offset, (unsigned long long)src->id, src_offset, len,
                          access == ORTMEM_ACCESS_READ_WRITE ? "rw"
                          : access == ORTMEM_ACCESS_READ     ? "ro"
                                                             : "none");
    }
    om_free(phys);
    dst->relief = NULL;
    unlock_pair(dst, src);
    om_handle_unpin(&src->hdr);
    om_handle_unpin(&dst->hdr);
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

/* ---- copies ---- */

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

ortmem_status ortmem_region_copy(ortmem_region *dst, size_t dst_offset, ortmem_region *src,
                                 size_t src_offset, size_t len)
{
    om_error_clear();
    ortmem_status st = om_handle_pin(dst, OM_KIND_REGION, "region copy (destination)");
    if (st != ORTMEM_OK)
        return st;
    st = om_handle_pin(src, OM_KIND_REGION, "region copy (source)");
    if (st != ORTMEM_OK) {
        om_handle_unpin(&dst->hdr);
        return st;
    }
    lock_pair(dst, src);
    st = check_range(dst, dst_offset, len, "region copy (destination)");
    if (st == ORTMEM_OK)
        st = check_range(src, src_offset, len, "region copy (source)");
    if (st == ORTMEM_OK && dst->backend != src->backend)
        st = OM_ERR(ORTMEM_E_INVALID, "region copy: regions live on different backends");
    if (st == ORTMEM_OK)
        st = check_accessible(src, src_offset, len, ORTMEM_ACCESS_READ, "region copy (source)");
    if (st == ORTMEM_OK)
        st = check_accessible(dst, dst_offset, len, ORTMEM_ACCESS_READ_WRITE,
                              "region copy (destination)");
    if (st == ORTMEM_OK)
        st = om_backend_copy(dst->backend, dst->base + dst_offset, src->base + src_offset, len);
    unlock_pair(dst, src);
    om_handle_unpin(&src->hdr);
    om_handle_unpin(&dst->hdr);
    return st;
}

/* ---- copy-on-write ---- */

/* Copies each candidate's bytes into its new granule through a scratch VA. */
static ortmem_status cow_fill(ortmem_region *r, size_t g0, size_t n, const bool *cand,
                              om_phys **fresh, size_t count, bool *leaked_va)
{
    ortmem_backend *b = r->backend;
    uintptr_t scratch;
    ortmem_status st = om_backend_reserve(b, count * r->granule, r->granule, &scratch);
    if (st != ORTMEM_OK)
        return st;
    bool *mapped = om_calloc(count, sizeof *mapped);
    om_phys **order = om_calloc(count, sizeof *order);
    if (!mapped || !order)
        st = OM_ERR(ORTMEM_E_NOMEM, "cow: bookkeeping for %zu granules", count);
    size_t j = 0;
    for (size_t k = 0; st == ORTMEM_OK && k < n; k++) {
        if (!cand[k])
            continue;
        order[j] = fresh[k];
        st = om_backend_map(b, scratch + j * r->granule, r->granule, fresh[k]->handle, 0);
        if (st == ORTMEM_OK) {
            mapped[j] = true;
            om_ledger_mapped_add(b, r->granule);
        }
        j++;
    }
    if (st == ORTMEM_OK)
        st = om_backend_set_access(b, scratch, count * r->granule, ORTMEM_ACCESS_READ_WRITE);
    j = 0;
    for (size_t k = 0; st == ORTMEM_OK && k < n; k++) {
        if (!cand[k])
            continue;
        st = om_backend_copy(b, scratch + j * r->granule, va_of(r, g0 + k), r->granule);
        j++;
    }
    /* Tear the scratch mappings down; a failed unmap poisons the new granule. */
    bool unmapped = true;
    size_t i = 0;
    for (size_t len; mapped && (len = next_run(mapped, &i, count)) != 0; i += len) {
        if (om_backend_unmap(b, scratch + i * r->granule, len * r->granule) == ORTMEM_OK) {
            om_ledger_mapped_sub(b, len * r->granule);
            continue;
        }
        unmapped = false;
        for (size_t q = i; q < i + len; q++) {
            om_phys_poison(b, order[q]);
            om_quarantine_mapping(b, &om_no_account, r->granule);
        }
        st = st == ORTMEM_OK ? ORTMEM_E_BACKEND : st;
    }
    if (!unmapped || om_backend_unreserve(b, scratch, count * r->granule) != ORTMEM_OK) {
        om_ledger_count(&b->ledger.leaked_va, count * r->granule, b);
        *leaked_va = true;
    }
    om_free(mapped);
    om_free(order);
    return st;
}

static ortmem_status region_cow_once(ortmem_region *r, size_t offset, size_t len, om_relief *relief)
{
    om_error_clear();
    ortmem_status st = pin_region(r, "region cow");
    if (st != ORTMEM_OK)
        return st;
    r->relief = relief;
    ortmem_backend *b = r->backend;
    st = check_range(r, offset, len, "region cow");
    size_t g0 = offset / r->granule;
    size_t n = st == ORTMEM_OK ? (offset + len - 1) / r->granule + 1 - g0 : 0;
    if (st == ORTMEM_OK)
        st = no_poison(r, g0, n, "region cow");
    bool *cand = st == ORTMEM_OK ? om_calloc(n, sizeof *cand) : NULL;
    om_phys **fresh = cand ? om_calloc(n, sizeof *fresh) : NULL;
    if (st == ORTMEM_OK && (!cand || !fresh))
        st = OM_ERR(ORTMEM_E_NOMEM, "region cow: bookkeeping for %zu granules", n);
    size_t count = 0;
    bool leaked_va = false;
    for (size_t k = 0; st == ORTMEM_OK && k < n; k++) {
        om_slot *s = &r->slots[g0 + k];
        if (s->state != ORTMEM_GRANULE_MAPPED || atomic_load(&s->phys->mappers) < 2)
            continue;
        if (s->access == ORTMEM_ACCESS_NONE)
            st = OM_ERR(ORTMEM_E_STATE,
                        "region cow: shared granule at offset %zu has no access "
                        "and cannot be read",
                        (g0 + k) * r->granule);
        cand[k] = true;
        count++;
    }
    if (st == ORTMEM_OK && count && !om_backend_can_copy(b))
        st = OM_ERR(ORTMEM_E_UNSUPPORTED, "region cow: backend '%s' has no copy primitive",
                    b->ops.name);
    om_hold hold = {0, 0};
    if (st == ORTMEM_OK && count)
        st = acquire_granules(r, n, cand, fresh, (uint64_t)count * r->granule, &hold);
    if (st == ORTMEM_OK && count)
        st = cow_fill(r, g0, n, cand, fresh, count, &leaked_va);
    /* Swap: unmap the shared granules (one call per run), map the copies. */
    if (st == ORTMEM_OK && count) {
        st = unmap_runs(r, g0, n, cand);
        if (st == ORTMEM_OK) {
            om_slot *old = om_calloc(n, sizeof *old);
            if (!old) {
                restore_runs(r, g0, n, cand);
                st = OM_ERR(ORTMEM_E_NOMEM, "region cow: bookkeeping");
            } else {
                for (size_t k = 0; k < n; k++) {
                    if (!cand[k])
                        continue;
                    old[k] = r->slots[g0 + k];
                    /* Same epoch: map_granules counts the swap as one change. */
                    r->slots[g0 + k] = (om_slot){
                        NULL, ORTMEM_GRANULE_UNMAPPED, ORTMEM_ACCESS_NONE, 0, 0, old[k].epoch};
                }
                st = map_granules(r, g0, n, fresh, ORTMEM_ACCESS_READ_WRITE, false, &hold);
                if (st == ORTMEM_OK) {
                    for (size_t k = 0; k < n; k++) {
                        if (!old[k].phys)
                            continue;
                        r->slots[g0 + k].requested_lo = old[k].requested_lo;
                        r->slots[g0 + k].requested_hi = old[k].requested_hi;
                        (void)om_phys_drop(b, old[k].phys);
                    }
                    memset(fresh, 0, n * sizeof *fresh);
                } else {
                    /* The copies are unmapped again; put the shared granules back. */
                    for (size_t k = 0; k < n; k++) {
                        if (!old[k].phys)
                            continue;
                        if (r->slots[g0 + k].state == ORTMEM_GRANULE_POISONED) {
                            /* The copy stuck there poisoned; the old mapping is gone. */
                            (void)om_phys_drop(b, old[k].phys);
                            fresh[k] = NULL;
                            cand[k] = false;
                            continue;
                        }
                        r->slots[g0 + k] = old[k];
                    }
                    restore_runs(r, g0, n, cand);
                }
                om_free(old);
            }
        }
    }
    for (size_t k = 0; fresh && k < n; k++) {
        if (fresh[k] && !fresh[k]->poisoned)
            (void)om_phys_discard(b, fresh[k]);
    }
    release_hold(r, &hold);
    if (st != ORTMEM_OK)
        st = om_error_wrap(st, "region cow [%zu, +%zu) of %zu shared granules", offset, len, count);
    else if (leaked_va)
        st = OM_ERR(ORTMEM_E_QUARANTINED,
                    "region cow [%zu, +%zu): copied, but the %zu-byte scratch VA could not be "
                    "returned and is left reserved",
                    offset, len, count * r->granule);
    om_free(cand);
    om_free(fresh);
    r->relief = NULL;
    unpin_region(r);
    return st;
}

ortmem_status ortmem_region_cow(ortmem_region *r, size_t offset, size_t len)
{
    om_relief relief = {0};
    ortmem_status st = region_cow_once(r, offset, len, &relief);
    if (om_relief_run(&relief, st))
        st = region_cow_once(r, offset, len, NULL);
    return st;
}

ortmem_status ortmem_region_account(ortmem_region *r, ortmem_account *account)
{
    om_error_clear();
    if (!account)
        return OM_ERR(ORTMEM_E_INVALID, "region account: output is NULL");
    ortmem_status st = pin_region(r, "region account");
    if (st != ORTMEM_OK)
        return st;
    if (r->account.set)
        *account = r->account.ops;
    else
        st = OM_ERR(ORTMEM_E_STATE, "region account: the region charges no account");
    unpin_region(r);
    return st;
}

/* ---- export / import ---- */

ortmem_status ortmem_region_export(ortmem_region *r, size_t offset, int *fd)
{
    om_error_clear();
    if (!fd)
        return OM_ERR(ORTMEM_E_INVALID, "region export: fd output is NULL");
    ortmem_status st = pin_region(r, "region export");
    if (st != ORTMEM_OK)
        return st;
    if (offset >= r->size) {
        st = OM_ERR(ORTMEM_E_RANGE, "region export: offset %zu outside %zu bytes", offset, r->size);
    } else {
        om_slot *s = &r->slots[offset / r->granule];
        if (s->state != ORTMEM_GRANULE_MAPPED)
            st = OM_ERR(ORTMEM_E_STATE, "region export: granule at offset %zu is not mapped",
                        offset);
        else if (!(s->phys->flags & (OM_PHYS_EXPORTABLE | OM_PHYS_IMPORTED)))
            st = OM_ERR(ORTMEM_E_UNSUPPORTED,
                        "region export: region was not created with ORTMEM_REGION_EXPORTABLE");
        else
            st = om_backend_export(r->backend, s->phys->handle, fd);
    }
    unpin_region(r);
    return st;
}

static ortmem_status region_import_once(ortmem_region *r, size_t offset, int fd,
                                        ortmem_access access, om_relief *relief)
{
    om_error_clear();
    if (fd < 0)
        return OM_ERR(ORTMEM_E_INVALID, "region import: descriptor %d is negative", fd);
    if (access != ORTMEM_ACCESS_NONE && access != ORTMEM_ACCESS_READ &&
        access != ORTMEM_ACCESS_READ_WRITE)
        return OM_ERR(ORTMEM_E_INVALID, "region import: unknown access %d", (int)access);
    ortmem_status st = pin_region(r, "region import");
    if (st != ORTMEM_OK)
        return st;
    st = check_range(r, offset, r->granule, "region import");
    if (st == ORTMEM_OK)
        st = check_aligned(r, offset, r->granule, "region import");
    size_t gi = offset / r->granule;
    if (st == ORTMEM_OK && r->slots[gi].state != ORTMEM_GRANULE_UNMAPPED)
        st = OM_ERR(ORTMEM_E_STATE, "region import: granule at offset %zu is already committed",
                    offset);
    om_phys *p = NULL;
    om_hold hold = {r->granule, r->granule};
    if (st == ORTMEM_OK) {
        st = om_account_reserve(&r->account, hold.owned, hold.mapped);
        if (st == ORTMEM_E_BUDGET)
            om_relief_note(relief, &r->account, hold.owned, hold.mapped);
    }
    if (st == ORTMEM_OK) {
        st = om_phys_import(r->backend, fd, &r->account, &p);
        if (st == ORTMEM_OK) {
            hold.owned = 0;
            st = map_granules(r, gi, 1, &p, access, true, &hold);
        }
        release_hold(r, &hold);
    }
    unpin_region(r);
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
