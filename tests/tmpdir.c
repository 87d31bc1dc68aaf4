/* The suites' temporary folder and whole-file helpers (see tmpdir.h). */
#include "tmpdir.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char tmpdir[256];

void tmpdir_make(const char *prefix)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/%s-XXXXXX", base && *base ? base : "/tmp", prefix);
    cr_assert_not_null(mkdtemp(tmpdir), "mkdtemp: %s", strerror(errno));
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void tmpdir_remove(void)
{
    if (tmpdir[0])
        (void)nftw(tmpdir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

const char *tmpdir_path(void)
{
    return tmpdir;
}

const char *tmp_path(const char *name)
{
    static char paths[8][512];
    static unsigned next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof paths[0], "%s/%s", tmpdir, name);
    return p;
}

char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "open %s: %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *text = malloc(cap);
    cr_assert_not_null(text);
    size_t n;
    while ((n = fread(text + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len - 1 == 0) {
            cap *= 2;
            text = realloc(text, cap);
            cr_assert_not_null(text);
        }
    }
    text[len] = '\0';
    fclose(f);
    return text;
}

void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "open %s: %s", path, strerror(errno));
    cr_assert_eq(fputs(text, f) >= 0, 1);
    cr_assert_eq(fclose(f), 0);
}
