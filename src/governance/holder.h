/* Holders inside the governance layer. */
#ifndef ORTMEM_SRC_GOVERNANCE_HOLDER_H
#define ORTMEM_SRC_GOVERNANCE_HOLDER_H

#include "governance/authority.h"

/* Creates and registers a holder of a; builtin holders never unregister. */
ortmem_status om_holder_add(ortmem_authority *a, const ortmem_holder_options *options, bool builtin,
                            ortmem_holder **out);
/* Unregisters and frees every holder (authority teardown). */
void om_holders_free_all(ortmem_authority *a);
/* The account that charges h. */
void om_holder_fill_account(ortmem_holder *h, ortmem_account *account);
/* The holder behind an account made by om_holder_fill_account, or NULL. */
ortmem_holder *om_holder_of_account(const ortmem_account *account);

/* Leases (lease.c): frees every lease record at authority teardown. */
void om_leases_free_all(ortmem_authority *a);

#endif
