/* The library's internal helpers in src/core, tested directly (this suite alone
 * sees the internal headers). */
#include <criterion/criterion.h>
#include <ortmem/ortmem.h>
#include <string.h>

#include "core/error.h"

/* A cleanup call that fails on its own and overwrites the thread's detail. */
static void failing_cleanup(void)
{
    (void)OM_ERR(ORTMEM_E_BACKEND, "cleanup: unmap failed");
}

Test(core_helpers, error_restore_reports_the_first_failure_not_the_cleanup)
{
    ortmem_status st = OM_ERR(ORTMEM_E_RANGE, "commit [%d, +%d) outside %d bytes", 64, 32, 80);
    om_error_saved first;
    om_error_save(&first);
    failing_cleanup();
    cr_assert_str_eq(ortmem_last_error(), "cleanup: unmap failed");
    cr_assert_eq(om_error_restore(&first, st), ORTMEM_E_RANGE);
    cr_assert_str_eq(ortmem_last_error(), "commit [64, +32) outside 80 bytes");
    cr_assert_str_eq(first.detail, "commit [64, +32) outside 80 bytes");
}

Test(core_helpers, error_save_keeps_the_longest_detail_whole)
{
    char longest[OM_DETAIL_MAX];
    memset(longest, 'x', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0';
    (void)OM_ERR(ORTMEM_E_INVALID, "%s", longest);
    om_error_saved saved;
    om_error_save(&saved);
    om_error_clear();
    (void)om_error_restore(&saved, ORTMEM_E_INVALID);
    cr_assert_eq(strlen(ortmem_last_error()), OM_DETAIL_MAX - 1);
    cr_assert_str_eq(ortmem_last_error(), longest);
}
