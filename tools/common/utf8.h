/* UTF-8 checks for text the tools pass on into formats that must stay valid
 * (JSON reports, the XML of gnuplot's SVG): a path or a name from the command
 * line or a trace can hold any bytes. */
#ifndef ORTMEM_TOOLS_COMMON_UTF8_H
#define ORTMEM_TOOLS_COMMON_UTF8_H

#include <stddef.h>

/* Length of the valid UTF-8 sequence at s (NUL-terminated), or 0 when it is
 * not one. */
size_t utf8_sequence_length(const unsigned char *s);

#endif
