/* Numbers as the tools read them (command-line values, trace fields) and
 * print them: plain decimal counts and byte sizes in binary units. */
#ifndef ORTMEM_TOOLS_COMMON_NUMBER_H
#define ORTMEM_TOOLS_COMMON_NUMBER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decimal digits and nothing else: no sign, no blanks, no overflow. */
bool parse_u64(const char *text, uint64_t *out);

/* Digits with an optional K/KiB, M/MiB, G/GiB or T/TiB suffix (any case);
 * false when the bytes do not fit in 64 bits. */
bool parse_size(const char *text, uint64_t *bytes);

/* "2 MiB": bytes in the largest binary unit (up to TiB) that divides it
 * exactly, "1000 bytes" when none does. Returns buf. */
const char *size_text(uint64_t bytes, char *buf, size_t size);

#endif
