/* Running a tool (ortmem-replay, ortmem-geom, ortmem-kvdemo) as a child
 * process and collecting what it did, for the suites that test the tools
 * from the outside. */
#ifndef ORTMEM_TESTS_CHILD_H
#define ORTMEM_TESTS_CHILD_H

#include <stdbool.h>

typedef struct child_result {
    int status; /* exit status, or 128 + signal */
    char *out;  /* all it wrote on stdout, NUL-terminated */
    char *err;  /* and on stderr */
} child_result;

/* Runs path with args (NULL-terminated; argv[0] is path) and waits for it.
 * env (NULL-terminated, or NULL for none) changes the child's environment:
 * "NAME=value" replaces NAME's value, a bare "NAME" removes it. stdout and
 * stderr go through files in the suite's temporary folder (tmpdir.h).
 * Asserts the child could be run. */
child_result child_run(const char *path, const char *const *args, const char *const *env);
void child_result_free(child_result *r);

/* Whether `gnuplot --version` runs and exits 0, as the tools check it
 * before they plot: the plot tests skip without it. */
bool gnuplot_installed(void);

#endif
