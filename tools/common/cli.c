/* Option words and one-line errors (see cli.h). */
#include "cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

bool cli_split_option(const char *arg, char *name, size_t size, const char **value)
{
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    if (len >= size)
        return false;
    memcpy(name, arg, len);
    name[len] = '\0';
    *value = eq ? eq + 1 : NULL;
    return true;
}

/* The bool flag name sets, or NULL when name is no flag. */
static bool *flag_target(const cli_parser *p, const char *name)
{
    for (const cli_flag *f = p->flags; f->name; f++) {
        if (strcmp(name, f->name) == 0)
            return f->set;
    }
    return NULL;
}

static bool takes_value(const cli_parser *p, const char *name)
{
    for (const char *const *v = p->valued; *v; v++) {
        if (strcmp(name, *v) == 0)
            return true;
    }
    return false;
}

int cli_parse(const cli_parser *p, int argc, char **argv)
{
    enum { USAGE = 2 };
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        bool *flag = flag_target(p, arg);
        if (flag) {
            *flag = true;
            continue;
        }
        if (strncmp(arg, "--", 2) != 0)
            return cli_fail(p->program, USAGE, "unexpected argument '%s' (%s --help for usage)",
                            arg, p->program);
        char name[64];
        const char *value;
        if (!cli_split_option(arg, name, sizeof name, &value))
            return cli_fail(p->program, USAGE, "unknown option '%.60s...' (%s --help lists them)",
                            arg, p->program);
        /* A flag's name here came with "=VALUE": it was not matched whole. */
        if (flag_target(p, name))
            return cli_fail(p->program, USAGE, "%s takes no value", name);
        if (!takes_value(p, name))
            return cli_fail(p->program, USAGE, "unknown option '%s' (%s --help lists them)", name,
                            p->program);
        if (!value) {
            if (i + 1 >= argc)
                return cli_fail(p->program, USAGE, "%s needs a value", name);
            value = argv[++i];
        }
        int rc = p->apply(p->context, name, value);
        if (rc)
            return rc;
    }
    return 0;
}

int cli_fail(const char *program, int status, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    for (char *p = line; *p; p++) {
        if ((unsigned char)*p < 0x20)
            *p = ' ';
    }
    fprintf(stderr, "%s: %s\n", program, line);
    return status;
}
