/* Numbers in the tools' JSON reports (see json_scan.h). */
#include "json_scan.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t json_number(const char *json, const char *key)
{
    char pattern[96];
    snprintf(pattern, sizeof pattern, "\"%s\": ", key);
    const char *at = strstr(json, pattern);
    cr_assert_not_null(at, "no \"%s\" in:\n%s", key, json);
    at += strlen(pattern);
    cr_assert(*at >= '0' && *at <= '9', "\"%s\" is not a number in:\n%s", key, json);
    return strtoull(at, NULL, 10);
}
