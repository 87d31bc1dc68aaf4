/* The accounting seam as vmm uses it: an optional ortmem_account copy whose
 * calls do nothing when no account is set. */
#ifndef ORTMEM_SRC_VMM_ACCOUNT_H
#define ORTMEM_SRC_VMM_ACCOUNT_H

#include <stdbool.h>
#include <ortmem/vmm.h>

typedef struct om_account {
    ortmem_account ops;
    bool set;
} om_account;

/* Copies src (NULL = none) after checking its struct_size and required slots,
 * and retains it. Every initialised account is dropped with om_account_drop. */
ortmem_status om_account_init(om_account *dst, const ortmem_account *src, const char *what);
/* Another retained copy of an initialised account. */
om_account om_account_copy(const om_account *src);
void om_account_drop(om_account *a);

ortmem_status om_account_hold(const om_account *a, uint64_t owned, uint64_t mapped);
void om_account_unhold(const om_account *a, uint64_t owned, uint64_t mapped);
void om_account_charge(const om_account *a, uint64_t owned, uint64_t mapped);
void om_account_adopt(const om_account *a, uint64_t owned, uint64_t mapped);
void om_account_refund(const om_account *a, uint64_t owned, uint64_t mapped);
void om_account_requested(const om_account *a, int64_t delta);
/* After a refused hold, with no vmm lock held: asks for room. Returns
 * whether a retry is worth it (the account can relieve at all). */
bool om_account_relieve(const om_account *a, uint64_t owned, uint64_t mapped);
bool om_account_can_relieve(const om_account *a);

/* A refused hold, carried out of the locked section: a retained copy
 * of the account and what it refused. */
typedef struct om_relief {
    om_account account;
    uint64_t owned, mapped;
    bool set;
} om_relief;

/* Records a refusal (relief may be NULL: the caller relieves itself). */
void om_relief_note(om_relief *relief, const om_account *a, uint64_t owned, uint64_t mapped);
/* With no vmm lock held: relieves a recorded refusal of status st and says
 * whether to try once more. Always drops the recorded copy. */
bool om_relief_run(om_relief *relief, ortmem_status st);

/* Moves owned and mapped bytes from one account to another. */
void om_account_move(const om_account *from, const om_account *to, uint64_t owned, uint64_t mapped);

#endif
