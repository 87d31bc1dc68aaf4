#include "vmm/account.h"

#include <string.h>

#include "core/error.h"

ortmem_status om_account_init(om_account *dst, const ortmem_account *src, const char *what)
{
    memset(dst, 0, sizeof *dst);
    if (!src)
        return ORTMEM_OK;
    /* The required slots end with refund. */
    ortmem_status st = om_struct_check(what, "account", &src->struct_size,
                                       OM_SIZE_THROUGH(ortmem_account, refund), sizeof *src);
    if (st != ORTMEM_OK)
        return st;
    memcpy(&dst->ops, src, src->struct_size);
    if (!dst->ops.hold || !dst->ops.unhold || !dst->ops.charge || !dst->ops.adopt ||
        !dst->ops.refund)
        return OM_ERR(ORTMEM_E_INVALID,
                      "%s: account lacks a required slot (hold, unhold, charge, adopt, "
                      "refund)",
                      what);
    bool has_retain = dst->ops.struct_size >= OM_SIZE_THROUGH(ortmem_account, unretain);
    if (!has_retain)
        dst->ops.retain = NULL, dst->ops.unretain = NULL;
    if (!dst->ops.retain != !dst->ops.unretain)
        return OM_ERR(ORTMEM_E_INVALID, "%s: account sets only one of retain and unretain", what);
    dst->set = true;
    if (dst->ops.retain)
        dst->ops.retain(dst->ops.self);
    return ORTMEM_OK;
}

om_account om_account_copy(const om_account *src)
{
    if (src->set && src->ops.retain)
        src->ops.retain(src->ops.self);
    return *src;
}

void om_account_drop(om_account *a)
{
    if (a->set && a->ops.unretain)
        a->ops.unretain(a->ops.self);
    a->set = false;
}

ortmem_status om_account_hold(const om_account *a, uint64_t owned, uint64_t mapped)
{
    if (!a->set || (owned == 0 && mapped == 0))
        return ORTMEM_OK;
    return a->ops.hold(a->ops.self, owned, mapped);
}

void om_account_unhold(const om_account *a, uint64_t owned, uint64_t mapped)
{
    if (a->set && (owned || mapped))
        a->ops.unhold(a->ops.self, owned, mapped);
}

void om_account_charge(const om_account *a, uint64_t owned, uint64_t mapped)
{
    if (a->set && (owned || mapped))
        a->ops.charge(a->ops.self, owned, mapped);
}

void om_account_adopt(const om_account *a, uint64_t owned, uint64_t mapped)
{
    if (a->set && (owned || mapped))
        a->ops.adopt(a->ops.self, owned, mapped);
}

void om_account_refund(const om_account *a, uint64_t owned, uint64_t mapped)
{
    if (a->set && (owned || mapped))
        a->ops.refund(a->ops.self, owned, mapped);
}

void om_account_requested(const om_account *a, int64_t delta)
{
    if (a->set && delta && a->ops.struct_size >= OM_SIZE_THROUGH(ortmem_account, requested) &&
        a->ops.requested)
        a->ops.requested(a->ops.self, delta);
}

bool om_account_can_relieve(const om_account *a)
{
    return a->set && a->ops.struct_size >= OM_SIZE_THROUGH(ortmem_account, relieve) &&
           a->ops.relieve;
}

bool om_account_relieve(const om_account *a, uint64_t owned, uint64_t mapped)
{
    if (!om_account_can_relieve(a))
        return false;
    (void)a->ops.relieve(a->ops.self, owned, mapped);
    return true;
}

void om_relief_note(om_relief *relief, const om_account *a, uint64_t owned, uint64_t mapped)
{
    if (!relief || !a->set)
        return;
    if (relief->set)
        om_account_drop(&relief->account);
    relief->account = om_account_copy(a);
    relief->owned = owned;
    relief->mapped = mapped;
    relief->set = true;
}

bool om_relief_run(om_relief *relief, ortmem_status st)
{
    if (!relief->set)
        return false;
    bool retry = st == ORTMEM_E_BUDGET &&
                 om_account_relieve(&relief->account, relief->owned, relief->mapped);
    om_account_drop(&relief->account);
    relief->set = false;
    return retry;
}

static bool om_account_can_move(const om_account *a)
{
    return a->set && a->ops.struct_size >= OM_SIZE_THROUGH(ortmem_account, move) && a->ops.move;
}

void om_account_move(const om_account *from, const om_account *to, uint64_t owned, uint64_t mapped)
{
    if (!owned && !mapped)
        return;
    /* A refund then an adopt would show the bytes free in between, where
     * another hold could take them and the adopt then pass the limit. */
    if (om_account_can_move(from) && om_account_can_move(to) && from->ops.move == to->ops.move &&
        from->ops.move(from->ops.self, to->ops.self, owned, mapped))
        return;
    om_account_refund(from, owned, mapped);
    om_account_adopt(to, owned, mapped);
}
