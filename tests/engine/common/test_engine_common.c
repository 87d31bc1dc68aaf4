#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/model_path.h"
#include "common/status.h"

Test(engine_status, fail_records_status_and_numbers)
{
    eng_error err = {0};
    cr_assert_eq(eng_fail(&err, ORTMEM_E_RANGE, "offset %d past %d", 9, 4), ORTMEM_E_RANGE);
    cr_assert_eq(err.status, ORTMEM_E_RANGE);
    cr_assert_str_eq(err.message, "offset 9 past 4");
    cr_assert_eq(eng_wrap(&err, "tensor %s", "blk.0"), ORTMEM_E_RANGE);
    cr_assert_str_eq(err.message, "tensor blk.0: offset 9 past 4");
    cr_assert_eq(eng_fail(NULL, ORTMEM_E_IO, "ignored"), ORTMEM_E_IO);
}

Test(engine_model_path, environment_wins_and_must_be_readable)
{
    char file[] = "/tmp/engine-model-XXXXXX";
    int fd = mkstemp(file);
    cr_assert_geq(fd, 0);
    close(fd);
    setenv("ORTMEM_MODEL", file, 1);
    char path[4096];
    eng_error err = {0};
    cr_assert_eq(eng_default_model_path(path, sizeof path, &err), ORTMEM_OK, "%s", err.message);
    cr_assert_str_eq(path, file);
    char small[4];
    cr_assert_eq(eng_default_model_path(small, sizeof small, &err), ORTMEM_E_RANGE);
    unlink(file);
    cr_assert_eq(eng_default_model_path(path, sizeof path, &err), ORTMEM_E_NOT_FOUND);
    cr_assert(strstr(err.message, file), "%s", err.message);
}

/* The test command installs the default model (scripts/model-env.sh through
 * scripts/setup.sh): without being told, the engine finds the wheel's file. */
Test(engine_model_path, finds_the_installed_default)
{
    unsetenv("ORTMEM_MODEL");
    char path[4096];
    eng_error err = {0};
    cr_assert_eq(eng_default_model_path(path, sizeof path, &err), ORTMEM_OK, "%s", err.message);
    cr_assert(strstr(path, ENG_DEFAULT_MODEL_PACKAGE "/" ENG_DEFAULT_MODEL_FILE), "%s", path);
    FILE *f = fopen(path, "rb");
    cr_assert(f);
    char magic[4];
    cr_assert_eq(fread(magic, 1, 4, f), 4u);
    fclose(f);
    cr_assert_eq(memcmp(magic, "GGUF", 4), 0);
}
