/* JSON string literals for the tools' --json reports. */
#ifndef ORTMEM_TOOLS_COMMON_JSON_H
#define ORTMEM_TOOLS_COMMON_JSON_H

#include <stdio.h>

/* How control bytes (below 0x20, and DEL) are written. Both are valid JSON;
 * each tool keeps the form its reports have always had. */
typedef enum json_controls {
    JSON_CONTROLS_AS_CODES, /* every one as \u00XX */
    JSON_CONTROLS_NAMED,    /* \n, \r and \t by name, the others as \u00XX */
} json_controls;

/* Writes s as a JSON string literal, quotes included: " and \ escaped,
 * control bytes as controls says, and invalid UTF-8 as U+FFFD, so the report
 * stays valid JSON whatever bytes a path, a name or a message holds. */
void json_put_string(FILE *out, const char *s, json_controls controls);

#endif
