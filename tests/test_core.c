/* Status codes, thread-local error details, handle validation, logging. */
#include <pthread.h>
#include <stdio.h>

#include "support.h"

Test(core, every_status_has_a_distinct_name)
{
    for (int i = 0; i < ORTMEM_STATUS_COUNT; i++) {
        const char *a = ortmem_status_str((ortmem_status)i);
        cr_assert(strncmp(a, "ORTMEM_", 7) == 0, "status %d named '%s'", i, a);
        for (int j = 0; j < i; j++)
            cr_assert_str_neq(a, ortmem_status_str((ortmem_status)j));
    }
    cr_assert_str_eq(ortmem_status_str(ORTMEM_STATUS_COUNT), "ORTMEM_E_UNKNOWN");
    cr_assert_str_eq(ortmem_status_str((ortmem_status)-1), "ORTMEM_E_UNKNOWN");
}

Test(core, error_set_returns_status_and_keeps_numbers)
{
    ortmem_status st = ortmem_error_set(ORTMEM_E_RANGE, "asked %d of %d", 7, 3);
    cr_assert_eq(st, ORTMEM_E_RANGE);
    cr_assert_str_eq(ortmem_last_error(), "asked 7 of 3");
}

static void *read_detail(void *arg)
{
    (void)arg;
    return (void *)(uintptr_t)strlen(ortmem_last_error());
}

Test(core, error_detail_is_thread_local)
{
    (void)ortmem_error_set(ORTMEM_E_INVALID, "only on this thread");
    pthread_t t;
    void *len;
    cr_assert_eq(pthread_create(&t, NULL, read_detail, NULL), 0);
    pthread_join(t, &len);
    cr_assert_eq((uintptr_t)len, 0);
    cr_assert_str_eq(ortmem_last_error(), "only on this thread");
}

Test(core, failing_call_names_the_numbers)
{
    ortmem_backend *b = test_backend();
    ortmem_region *r = region_on(b, 4 * TEST_GRANULE, 0);
    EXPECT_STATUS(ortmem_region_commit(r, 3 * TEST_GRANULE, 2 * TEST_GRANULE), ORTMEM_E_RANGE);
    char want[128];
    snprintf(want, sizeof want, "[%zu, %zu) outside the region of %zu bytes", 3 * TEST_GRANULE,
             5 * TEST_GRANULE, 4 * TEST_GRANULE);
    cr_assert(strstr(ortmem_last_error(), want), "detail: %s", ortmem_last_error());
    /* A successful call clears the detail. */
    OK(ortmem_region_commit(r, 0, 1));
    cr_assert_str_eq(ortmem_last_error(), "");
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(b));
}

Test(core, null_foreign_wrong_kind_and_destroyed_handles_are_refused)
{
    ortmem_backend *b = test_backend();
    ortmem_region *r = region_on(b, TEST_GRANULE, 0);
    EXPECT_STATUS(ortmem_region_commit(NULL, 0, 1), ORTMEM_E_INVALID);
    char foreign[256] = {0};
    EXPECT_STATUS(ortmem_region_commit((ortmem_region *)foreign, 0, 1), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_region_commit((ortmem_region *)b, 0, 1), ORTMEM_E_HANDLE);
    cr_assert(strstr(ortmem_last_error(), "is a backend handle, not a region handle"), "detail: %s",
              ortmem_last_error());
    EXPECT_STATUS(ortmem_backend_destroy((ortmem_backend *)r), ORTMEM_E_HANDLE);
    OK(ortmem_region_destroy(r));
    EXPECT_STATUS(ortmem_region_destroy(r), ORTMEM_E_HANDLE);
    EXPECT_STATUS(ortmem_region_commit(r, 0, 1), ORTMEM_E_HANDLE);
    cr_assert_null(ortmem_region_base(r));
    cr_assert_eq(ortmem_region_size(r), 0);
    OK(ortmem_backend_destroy(b));
    EXPECT_STATUS(ortmem_backend_destroy(b), ORTMEM_E_HANDLE);
    cr_assert_str_eq(ortmem_backend_name(b), "(invalid backend)");
}

Test(core, backend_op_names_round_trip)
{
    for (int op = 0; op <= ORTMEM_OP_ANY; op++) {
        const char *name = ortmem_backend_op_name((ortmem_backend_op)op);
        cr_assert_not_null(name);
        ortmem_backend_op parsed;
        OK(ortmem_backend_op_parse(name, &parsed));
        cr_assert_eq(parsed, op);
    }
    ortmem_backend_op parsed;
    EXPECT_STATUS(ortmem_backend_op_parse("mapp", &parsed), ORTMEM_E_INVALID);
    cr_assert_null(ortmem_backend_op_name((ortmem_backend_op)(ORTMEM_OP_ANY + 1)));
}

typedef struct log_capture {
    int warnings;
    char last[512];
} log_capture;

static void capture_log(void *user, ortmem_log_level level, const char *message)
{
    log_capture *c = user;
    if (level == ORTMEM_LOG_WARN)
        c->warnings++;
    snprintf(c->last, sizeof c->last, "%s", message);
}

Test(core, quarantine_is_logged_through_the_callback_only)
{
    log_capture capture = {0};
    ortmem_set_log(capture_log, &capture, ORTMEM_LOG_DEBUG);
    ortmem_backend *cpu = test_backend();
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = ORTMEM_OP_RELEASE;
    fo.fail_at = 1;
    ortmem_backend *b;
    OK(ortmem_fault_backend_create(cpu, &fo, &b));
    ortmem_region *r = region_on(b, TEST_GRANULE, 0);
    OK(ortmem_region_commit(r, 0, TEST_GRANULE));
    EXPECT_STATUS(ortmem_region_decommit(r, 0, TEST_GRANULE), ORTMEM_E_QUARANTINED);
    cr_assert_eq(capture.warnings, 1);
    cr_assert(strstr(capture.last, "quarantined"), "log: %s", capture.last);
    ortmem_set_log(NULL, NULL, ORTMEM_LOG_INFO);
    OK(ortmem_region_destroy(r));
    EXPECT_STATUS(ortmem_backend_destroy(b), ORTMEM_E_QUARANTINED);
    OK(ortmem_backend_destroy(cpu));
}

typedef struct reentrant_capture {
    ortmem_region *region;
    ortmem_status seen;
    int calls;
} reentrant_capture;

/* Calls back into the very region whose lock was held when the message arose. */
static void reentrant_log(void *user, ortmem_log_level level, const char *message)
{
    (void)level;
    (void)message;
    reentrant_capture *c = user;
    ortmem_granule_info info = {.struct_size = sizeof info};
    c->seen = ortmem_region_granule_info(c->region, 0, &info);
    c->calls++;
}

Test(core, a_log_callback_may_call_back_into_the_library, .timeout = 10)
{
    ortmem_backend *cpu = test_backend();
    ortmem_fault_options fo = ORTMEM_FAULT_OPTIONS_INIT;
    fo.op = ORTMEM_OP_RELEASE;
    fo.fail_at = 1;
    ortmem_backend *b;
    OK(ortmem_fault_backend_create(cpu, &fo, &b));
    ortmem_region *r = region_on(b, 2 * TEST_GRANULE, 0);
    reentrant_capture capture = {r, ORTMEM_E_STATE, 0};
    ortmem_set_log(reentrant_log, &capture, ORTMEM_LOG_DEBUG);
    OK(ortmem_region_commit(r, 0, TEST_GRANULE));
    EXPECT_STATUS(ortmem_region_decommit(r, 0, TEST_GRANULE), ORTMEM_E_QUARANTINED);
    ortmem_set_log(NULL, NULL, ORTMEM_LOG_INFO);
    cr_assert_eq(capture.calls, 1, "delivered once, after the call released its locks");
    cr_assert_eq(capture.seen, ORTMEM_OK);
    OK(ortmem_region_destroy(r));
    EXPECT_STATUS(ortmem_backend_destroy(b), ORTMEM_E_QUARANTINED);
    OK(ortmem_backend_destroy(cpu));
}
