/* Command-line conventions the tools share: options written "--name VALUE"
 * or "--name=VALUE", and invalid input reported as one line on stderr with
 * exit status 2. */
#ifndef ORTMEM_TOOLS_COMMON_CLI_H
#define ORTMEM_TOOLS_COMMON_CLI_H

#include <stdbool.h>
#include <stddef.h>

/* Splits an option word: the part before any '=' is copied into name (size
 * bytes), *value points after the '=' or is NULL when there is none. False
 * when the name does not fit. */
bool cli_split_option(const char *arg, char *name, size_t size, const char **value);

/* An option without a value ("--json", "-h") and the bool it sets. */
typedef struct cli_flag {
    const char *name;
    bool *set;
} cli_flag;

/* What a tool's command line holds: flags, and options with a value that
 * apply() takes in (it returns 0, or an exit status after its own message).
 * Both lists end with a NULL name. */
typedef struct cli_parser {
    const char *program; /* "ortmem-geom": every message starts with it */
    const cli_flag *flags;
    const char *const *valued; /* the names of the options with a value */
    int (*apply)(void *context, const char *name, const char *value);
    void *context;
} cli_parser;

/* Reads argv[1 ..]: flags, and options with a value written "--name VALUE"
 * or "--name=VALUE". Returns 0, what apply() returned, or 2 (invalid input)
 * after a one-line message on an argument that is not an option, an unknown
 * option, a flag given a value or an option missing its value. */
int cli_parse(const cli_parser *parser, int argc, char **argv);

/* Writes "PROGRAM: message" as one line on stderr, control bytes (a newline
 * in a detail) turned into spaces so scripts and tests can rely on one line.
 * Returns status, the exit status to return. */
int cli_fail(const char *program, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
