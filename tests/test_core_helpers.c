/* The library's internal helpers in src/core, tested directly (this suite alone
 * sees the internal headers). */
#include <criterion/criterion.h>
#include <ortmem/ortmem.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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

typedef struct versioned {
    size_t struct_size;
    int required;
    int optional;
} versioned;

Test(core_helpers, struct_check_takes_any_set_size_up_to_the_known_struct)
{
    versioned v = {.struct_size = sizeof v};
    versioned *opts = &v;
    cr_assert_eq(OM_STRUCT_CHECK("demo call", "options", opts), ORTMEM_OK);
    v.struct_size = 1; /* an older caller: the rest takes defaults */
    cr_assert_eq(OM_STRUCT_CHECK("demo call", "options", opts), ORTMEM_OK);
    v.struct_size = 0;
    cr_assert_eq(OM_STRUCT_CHECK("demo call", "options", opts), ORTMEM_E_INVALID);
    cr_assert_str_eq(ortmem_last_error(),
                     "demo call: options struct_size is 0 (set it to sizeof the struct)");
    v.struct_size = sizeof v + 8;
    cr_assert_eq(OM_STRUCT_CHECK("demo call", "options", opts), ORTMEM_E_INVALID);
    char want[160];
    snprintf(want, sizeof want,
             "demo call: options struct_size %zu is larger than the %zu bytes this library knows",
             sizeof v + 8, sizeof v);
    cr_assert_str_eq(ortmem_last_error(), want);
    versioned *none = NULL;
    cr_assert_eq(OM_STRUCT_CHECK("demo call", "options", none), ORTMEM_E_INVALID);
    cr_assert_str_eq(ortmem_last_error(), "demo call: options is NULL");
}

Test(core_helpers, struct_check_needs_the_required_fields_and_may_take_larger_structs)
{
    size_t need = OM_SIZE_THROUGH(versioned, required);
    cr_assert_eq(need, offsetof(versioned, required) + sizeof(int));
    versioned v = {.struct_size = need};
    cr_assert_eq(om_struct_check("demo create", "ops", &v.struct_size, need, SIZE_MAX), ORTMEM_OK);
    v.struct_size = 4096; /* a newer caller: slots past the known ones are not read */
    cr_assert_eq(om_struct_check("demo create", "ops", &v.struct_size, need, SIZE_MAX), ORTMEM_OK);
    v.struct_size = need - 1;
    cr_assert_eq(om_struct_check("demo create", "ops", &v.struct_size, need, SIZE_MAX),
                 ORTMEM_E_INVALID);
    char want[160];
    snprintf(want, sizeof want,
             "demo create: ops struct_size %zu is smaller than the %zu bytes this library needs",
             need - 1, need);
    cr_assert_str_eq(ortmem_last_error(), want);
}
