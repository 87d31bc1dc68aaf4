/* Regions: a reserved VA range whose granules are mapped only where bytes live.
 * This file: create and destroy, the slot table and its lookups, and the range
 * checks every operation starts with. The operations live in region_*.c
 * (src/vmm/region_internal.h lists them).
 *
 * Invariants (docs/memory/ARCHITECTURE.md):
 * - every map is followed by set-access; a rollback restores recorded access;
 * - commit, decommit, share, cow and import are all-or-nothing;
 * - one unmap and one set-access per contiguous run of granules;
 * - a granule whose unmap or release failed is quarantined: it stays charged, is
 *   never reused and is reported; the VA is freed only when nothing stays. */
#include "core/alloc.h"
#include "vmm/region_internal.h"

#include <string.h>

#include "core/error.h"
#include "core/trace.h"

static _Atomic uint64_t om_region_ids;

/* ---- locking and checks ---- */

ortmem_status om_region_lock(ortmem_region *r, const char *what)
{
    ortmem_status st = om_handle_pin(r, OM_KIND_REGION, what);
    if (st != ORTMEM_OK)
        return st;
    pthread_mutex_lock(&r->lock);
    return ORTMEM_OK;
}

void om_region_unlock(ortmem_region *r)
{
    pthread_mutex_unlock(&r->lock);
    om_handle_unpin(&r->hdr);
}

ortmem_status om_region_check_range(const ortmem_region *r, size_t off, size_t len,
                                    const char *what)
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

ortmem_status om_region_check_aligned(const ortmem_region *r, size_t off, size_t len,
                                      const char *what)
{
    if (off % r->granule || len % r->granule)
        return OM_ERR(ORTMEM_E_ALIGN,
                      "%s: offset %zu and length %zu must be multiples of the granule %zu", what,
                      off, len, r->granule);
    return ORTMEM_OK;
}

ortmem_status om_region_check_unquarantined(const ortmem_region *r, size_t g0, size_t n,
                                            const char *what)
{
    for (size_t i = g0; i < g0 + n; i++) {
        if (r->slots[i].state == ORTMEM_GRANULE_QUARANTINED)
            return OM_ERR(ORTMEM_E_STATE,
                          "%s: granule %zu (offset %zu) is quarantined after a failed backend "
                          "call and cannot be used",
                          what, i, i * r->granule);
    }
    return ORTMEM_OK;
}

/* ---- create ---- */

/* Copies the caller's options over the defaults, checking what needs no backend. */
static ortmem_status read_options(const ortmem_region_options *options, ortmem_region_options *opt)
{
    ortmem_status st = OM_STRUCT_CHECK("region create", "options", options);
    if (st != ORTMEM_OK)
        return st;
    memcpy(opt, options, options->struct_size);
    if (opt->size == 0)
        return OM_ERR(ORTMEM_E_INVALID, "region create: size is 0");
    if (opt->flags & ~(unsigned)ORTMEM_REGION_EXPORTABLE)
        return OM_ERR(ORTMEM_E_INVALID, "region create: unknown flags 0x%x", opt->flags);
    if (opt->extents.struct_size == 0) /* a zeroed policy: one extent per granule */
        opt->extents = (ortmem_extent_policy){sizeof opt->extents, ORTMEM_EXTENT_GRANULE, 0};
    return ORTMEM_OK;
}

/* Size rounded to the granule g and the reservation's alignment. */
static ortmem_status size_for_granule(const ortmem_region_options *opt, size_t g, size_t *size,
                                      size_t *align)
{
    if (g > UINT32_MAX)
        return OM_ERR(ORTMEM_E_UNSUPPORTED, "region create: granule %zu above 4 GiB", g);
    if (opt->size > SIZE_MAX - (g - 1))
        return OM_ERR(ORTMEM_E_OVERFLOW,
                      "region create: %zu bytes rounded to the granule %zu "
                      "overflows",
                      opt->size, g);
    uint64_t cap = 0;
    ortmem_status st = ortmem_extent_cap_granules(&opt->extents, g, &cap);
    if (st != ORTMEM_OK)
        return om_error_wrap(st, "region create: extent policy");
    *align = opt->alignment ? opt->alignment : g;
    if (*align & (*align - 1) || *align < g)
        return OM_ERR(ORTMEM_E_ALIGN,
                      "region create: alignment %zu must be a power of two >= the granule %zu",
                      opt->alignment, g);
    *size = (opt->size + g - 1) & ~(g - 1);
    return ORTMEM_OK;
}

/* The region, its slot table and selection flags, all zeroed, or none. */
static ortmem_status alloc_region(size_t count, ortmem_region **out)
{
    ortmem_region *r = om_calloc(1, sizeof *r);
    om_slot *slots = r ? om_calloc(count, sizeof *slots) : NULL;
    bool *selection = slots ? om_calloc(count ? count : 1, sizeof *selection) : NULL;
    if (!selection) {
        om_free(slots);
        om_free(r);
        return OM_ERR(ORTMEM_E_NOMEM, "region create: bookkeeping for %zu granules", count);
    }
    r->slots = slots;
    r->selection = selection;
    *out = r;
    return ORTMEM_OK;
}

/* Fills in a region whose VA is reserved; it takes over the account. */
static void init_region(ortmem_region *r, ortmem_backend *b, const ortmem_region_options *opt,
                        size_t size, bool traced, bool report_requested, const om_account *account)
{
    r->backend = b;
    r->size = size;
    r->granule = b->granule;
    r->count = size / b->granule;
    r->flags = opt->flags;
    r->extents = opt->extents;
    r->traced = traced;
    r->report_requested = report_requested;
    r->account = *account;
    r->id = atomic_fetch_add(&om_region_ids, 1) + 1;
}

ortmem_status om_region_create(ortmem_backend *b, const ortmem_region_options *options, bool traced,
                               bool report_requested, ortmem_region **out)
{
    if (!options || !out)
        return OM_ERR(ORTMEM_E_INVALID, "region create: options or out is NULL");
    ortmem_region_options opt = ORTMEM_REGION_OPTIONS_INIT;
    ortmem_status st = read_options(options, &opt);
    if (st != ORTMEM_OK)
        return st;
    om_account account;
    st = om_account_init(&account, opt.account, "region create");
    if (st != ORTMEM_OK)
        return st;
    size_t size = 0, align = 0;
    ortmem_region *r = NULL;
    st = om_backend_pin(b, "region create");
    if (st != ORTMEM_OK)
        goto drop_account;
    st = size_for_granule(&opt, b->granule, &size, &align);
    if (st == ORTMEM_OK)
        st = alloc_region(size / b->granule, &r);
    if (st != ORTMEM_OK)
        goto unpin;
    st = om_backend_reserve(b, size, align, &r->base);
    if (st != ORTMEM_OK) {
        st = om_error_wrap(st, "region create (%zu bytes)", size);
        goto free_region;
    }
    init_region(r, b, &opt, size, traced, report_requested, &account);
    pthread_mutex_init(&r->lock, NULL);
    st = om_handle_register(&r->hdr, OM_KIND_REGION);
    if (st != ORTMEM_OK)
        goto unreserve;
    om_ledger_count(&b->ledger.reserved, size, b);
    om_backend_use(b);
    om_backend_unpin(b);
    if (traced)
        om_trace_line("region r%llu %zu", (unsigned long long)r->id, size);
    *out = r;
    return ORTMEM_OK;

unreserve:
    (void)om_backend_unreserve(b, r->base, size);
    pthread_mutex_destroy(&r->lock);
free_region:
    om_free(r->selection);
    om_free(r->slots);
    om_free(r);
unpin:
    om_backend_unpin(b);
drop_account:
    om_account_drop(&account);
    return st;
}

ortmem_status ortmem_region_create(ortmem_backend *backend, const ortmem_region_options *options,
                                   ortmem_region **out)
{
    om_error_clear();
    return om_region_create(backend, options, true, true, out);
}

/* ---- destroy ---- */

/* Unmaps and drops the run [i, i + len) of mapped granules; a failed unmap
 * quarantines it. Needs no host memory, so a destroy cannot fail for lack of it. */
static ortmem_status destroy_run(ortmem_region *r, size_t i, size_t len)
{
    size_t bytes = len * r->granule;
    if (om_backend_unmap(r->backend, om_region_va(r, i), bytes) != ORTMEM_OK) {
        for (size_t k = i; k < i + len; k++)
            om_region_quarantine_slot(r, k, r->slots[k].phys, r->slots[k].index, true);
        return ORTMEM_E_QUARANTINED;
    }
    om_region_mapped_out(r, i, len);
    ortmem_status result = ORTMEM_OK;
    for (size_t k = i; k < i + len; k++) {
        if (om_region_drop_slot(r, k, 0) != ORTMEM_OK)
            result = ORTMEM_E_QUARANTINED;
    }
    return result;
}

/* Unmaps every maximal run of mapped granules; a run that fails is
 * quarantined and the rest go on. */
static ortmem_status unmap_all(ortmem_region *r)
{
    ortmem_status result = ORTMEM_OK;
    for (size_t i = 0; i < r->count;) {
        size_t len = 0;
        while (i + len < r->count && r->slots[i + len].state == ORTMEM_GRANULE_MAPPED)
            len++;
        if (len && destroy_run(r, i, len) != ORTMEM_OK)
            result = ORTMEM_E_QUARANTINED;
        i += len ? len : 1;
    }
    return result;
}

/* Gives the VA back unless a granule stays quarantined in it (then it stays
 * reserved on purpose and is counted as leaked). */
static ortmem_status release_va(ortmem_region *r, ortmem_status result)
{
    ortmem_backend *b = r->backend;
    size_t quarantined = 0;
    for (size_t i = 0; i < r->count; i++)
        quarantined += r->slots[i].state == ORTMEM_GRANULE_QUARANTINED;
    if (quarantined) {
        om_ledger_count(&b->ledger.leaked_va, r->size, b);
        return OM_ERR(ORTMEM_E_QUARANTINED,
                      "region destroy: %zu of %zu granules quarantined; the %zu-byte VA range "
                      "at %p stays reserved on purpose",
                      quarantined, r->count, r->size, (void *)r->base);
    }
    if (om_backend_unreserve(b, r->base, r->size) != ORTMEM_OK) {
        om_ledger_count(&b->ledger.leaked_va, r->size, b);
        return om_error_wrap(ORTMEM_E_QUARANTINED, "region destroy: VA of %zu bytes leaked",
                             r->size);
    }
    if (result == ORTMEM_E_QUARANTINED)
        return om_error_wrap(result, "region destroy: a granule release failed");
    return result;
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
    st = release_va(r, unmap_all(r));
    om_counter_sub(&b->ledger.reserved, r->size, &b->ledger.saturations);
    if (r->traced)
        om_trace_line("destroy r%llu", (unsigned long long)r->id);
    pthread_mutex_unlock(&r->lock);
    pthread_mutex_destroy(&r->lock);
    om_free(r->selection);
    om_free(r->slots);
    om_backend_unuse(b);
    om_account_drop(&r->account);
    om_free(r);
    om_handle_end_destroy();
    return st;
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
    ortmem_status st = OM_STRUCT_CHECK("region granule info", "info", info);
    if (st != ORTMEM_OK)
        return st;
    st = om_region_lock(r, "region granule info");
    if (st != ORTMEM_OK)
        return st;
    if (offset >= r->size) {
        st = OM_ERR(ORTMEM_E_RANGE, "region granule info: offset %zu outside %zu bytes", offset,
                    r->size);
    } else {
        size_t i = offset / r->granule;
        om_slot *s = &r->slots[i];
        ortmem_granule_info out = {sizeof out,
                                   (ortmem_granule_state)s->state,
                                   (ortmem_access)s->access,
                                   s->phys ? atomic_load(&s->phys->mappers) : 0,
                                   0,
                                   0};
        if (s->phys) {
            out.extent_offset = om_extent_first(r, i) * r->granule;
            out.extent_granules = s->phys->granules;
        }
        out.struct_size = info->struct_size;
        memcpy(info, &out, info->struct_size);
    }
    om_region_unlock(r);
    return st;
}

ortmem_status ortmem_region_range_state(ortmem_region *r, size_t offset, size_t len,
                                        ortmem_range_state *out)
{
    om_error_clear();
    ortmem_status st = OM_STRUCT_CHECK("region range state", "out", out);
    if (st != ORTMEM_OK)
        return st;
    st = om_region_lock(r, "region range state");
    if (st != ORTMEM_OK)
        return st;
    st = om_region_check_range(r, offset, len, "region range state");
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
    om_region_unlock(r);
    return st;
}

ortmem_status ortmem_region_account(ortmem_region *r, ortmem_account *account)
{
    om_error_clear();
    if (!account)
        return OM_ERR(ORTMEM_E_INVALID, "region account: output is NULL");
    ortmem_status st = om_region_lock(r, "region account");
    if (st != ORTMEM_OK)
        return st;
    if (r->account.set)
        *account = r->account.ops;
    else
        st = OM_ERR(ORTMEM_E_STATE, "region account: the region charges no account");
    om_region_unlock(r);
    return st;
}

/* ---- account move ---- */

/* Whether two accounts are the same sink (the same callbacks on the same self). */
static bool om_account_same(const om_account *a, const om_account *b)
{
    if (!a->set || !b->set)
        return a->set == b->set;
    return a->ops.self == b->ops.self && a->ops.hold == b->ops.hold &&
           a->ops.adopt == b->ops.adopt && a->ops.refund == b->ops.refund;
}

ortmem_status ortmem_region_set_account(ortmem_region *r, const ortmem_account *account)
{
    om_error_clear();
    if (!account)
        return OM_ERR(ORTMEM_E_INVALID, "region set account: account is NULL");
    om_account next;
    ortmem_status st = om_account_init(&next, account, "region set account");
    if (st != ORTMEM_OK)
        return st;
    st = om_region_lock(r, "region set account");
    if (st != ORTMEM_OK) {
        om_account_drop(&next);
        return st;
    }
    /* Mapped bytes: every mapping this region holds (quarantined ones were
     * moved to the quarantine account already). Owned bytes: the extents
     * this region alone maps and the old account owns; an extent another
     * region maps too keeps its owner, so no live holder loses bytes. */
    uint64_t mapped = 0, owned = 0;
    int64_t requested = 0;
    for (size_t i = 0; i < r->count; i++) {
        om_slot *s = &r->slots[i];
        if (s->state != ORTMEM_GRANULE_MAPPED)
            continue;
        mapped += r->granule;
        requested += (int64_t)s->requested_hi - (int64_t)s->requested_lo;
        if (s->index == 0 && atomic_load(&s->phys->mappers) == 1 &&
            om_account_same(&s->phys->owner, &r->account)) {
            owned += s->phys->size;
            om_phys_set_owner(s->phys, &next);
        }
    }
    om_account_move(&r->account, &next, owned, mapped);
    if (r->report_requested && requested) {
        om_account_requested(&r->account, -requested);
        om_account_requested(&next, requested);
    }
    om_account previous = r->account;
    r->account = next;
    om_account_drop(&previous);
    if (r->traced)
        om_trace_line("set_account r%llu owned %llu mapped %llu", (unsigned long long)r->id,
                      (unsigned long long)owned, (unsigned long long)mapped);
    om_region_unlock(r);
    return ORTMEM_OK;
}

ortmem_status ortmem_region_maps_same(ortmem_region *a, size_t a_offset, ortmem_region *b,
                                      size_t b_offset, size_t len, int *same)
{
    om_error_clear();
    if (!same)
        return OM_ERR(ORTMEM_E_INVALID, "region maps same: output is NULL");
    ortmem_status st = om_handle_pin(a, OM_KIND_REGION, "region maps same");
    if (st != ORTMEM_OK)
        return st;
    st = om_handle_pin(b, OM_KIND_REGION, "region maps same");
    if (st != ORTMEM_OK) {
        om_handle_unpin(&a->hdr);
        return st;
    }
    /* Lock order between regions: by id. */
    ortmem_region *first = a->id <= b->id ? a : b, *second = first == a ? b : a;
    pthread_mutex_lock(&first->lock);
    if (second != first)
        pthread_mutex_lock(&second->lock);
    st = om_region_check_range(a, a_offset, len, "region maps same");
    if (st == ORTMEM_OK)
        st = om_region_check_range(b, b_offset, len, "region maps same");
    if (st == ORTMEM_OK)
        st = om_region_check_aligned(a, a_offset, len, "region maps same");
    if (st == ORTMEM_OK)
        st = om_region_check_aligned(b, b_offset, len, "region maps same");
    if (st == ORTMEM_OK && (a->backend != b->backend || a->granule != b->granule))
        st = OM_ERR(ORTMEM_E_INVALID,
                    "region maps same: the regions use different backends or granules (%zu, %zu)",
                    a->granule, b->granule);
    if (st == ORTMEM_OK) {
        int result = 1;
        size_t n = len / a->granule, ai = a_offset / a->granule, bi = b_offset / b->granule;
        for (size_t k = 0; result && k < n; k++) {
            const om_slot *x = &a->slots[ai + k], *y = &b->slots[bi + k];
            result = x->state == ORTMEM_GRANULE_MAPPED && y->state == ORTMEM_GRANULE_MAPPED &&
                     x->phys == y->phys && x->index == y->index;
        }
        *same = result;
    }
    if (second != first)
        pthread_mutex_unlock(&second->lock);
    pthread_mutex_unlock(&first->lock);
    om_handle_unpin(&b->hdr);
    om_handle_unpin(&a->hdr);
    return st;
}
