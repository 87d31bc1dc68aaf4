/* Reading a number out of a tool's --json report by its key, the way the
 * tool suites check reports without a JSON parser. */
#ifndef ORTMEM_TESTS_JSON_SCAN_H
#define ORTMEM_TESTS_JSON_SCAN_H

#include <stdint.h>

/* The unsigned number after "key": in json (the first occurrence); asserts
 * that there is one. */
uint64_t json_number(const char *json, const char *key);

#endif
