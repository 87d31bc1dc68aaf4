/* gnuplot as the tools' plotter: each tool writes a gnuplot script with its
 * data inline (datablocks), so no path has to be quoted for gnuplot, and the
 * SVG goes to a descriptor the tool opened itself. */
#ifndef ORTMEM_TOOLS_COMMON_GNUPLOT_H
#define ORTMEM_TOOLS_COMMON_GNUPLOT_H

#include <stdbool.h>
#include <stdio.h>

/* Whether `gnuplot --version` runs and exits 0. Asked before any work, so a
 * run whose plot cannot be drawn is refused up front instead of wasted. */
bool gnuplot_available(void);

/* Writes the whole script to script. Returns NULL, or what went wrong on the
 * writer's side (e.g. its data could not be read back), which then fails the
 * plot with that text. */
typedef const char *(*gnuplot_script_writer)(FILE *script, void *context);

/* Runs gnuplot with the script write_script writes on a pipe to its stdin
 * and svg_fd as its stdout; gnuplot's stderr stays the tool's, so its own
 * complaints reach the user. Returns true when gnuplot read the whole script
 * and exited 0; otherwise one line "WHO: what failed" went to err. */
bool gnuplot_draw(int svg_fd, gnuplot_script_writer write_script, void *context, const char *who,
                  FILE *err);

/* Closes svg_fd, the SVG at path that gnuplot_draw wrote (drawn: whether it
 * succeeded; false when the run is abandoned before drawing). A failed
 * drawing or close leaves half an SVG, which is no plot: the file is then
 * removed. Returns true when the plot stands. close_errno (may be NULL) gets
 * the errno of a close that failed after a good drawing, for the caller's
 * message, and 0 otherwise. */
bool gnuplot_svg_close(int svg_fd, const char *path, bool drawn, int *close_errno);

#endif
