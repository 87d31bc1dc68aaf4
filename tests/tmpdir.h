/* A temporary folder for the suites that run the tools as children: their
 * input files, outputs and captured streams live there, and it goes when
 * the test ends. Criterion runs each test in a process of its own, so a
 * suite makes it in .init and removes it in .fini. */
#ifndef ORTMEM_TESTS_TMPDIR_H
#define ORTMEM_TESTS_TMPDIR_H

/* Makes "$TMPDIR/PREFIX-XXXXXX" (/tmp without TMPDIR); asserts it worked. */
void tmpdir_make(const char *prefix);
/* Removes the folder and everything in it, if it was made. */
void tmpdir_remove(void);
/* The folder's path. */
const char *tmpdir_path(void);

/* "FOLDER/name". The buffer is one of 8 used in turn, so a test can hold
 * several paths at once. */
const char *tmp_path(const char *name);

/* The whole file, NUL-terminated; the caller frees it. Asserts it can be read. */
char *read_file(const char *path);
/* Writes text as the whole file; asserts it worked. */
void write_file(const char *path, const char *text);

#endif
