/* Memory over time: the timeline CSV (a row of the ledger after each op, or
 * each K ops) and its plot. The plot is gnuplot's (common/gnuplot.h): this
 * file writes its script, with the CSV inline as a datablock. */
#include "replay.h"

#include "common/gnuplot.h"
#include "common/utf8.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

size_t replay_timeline_every(size_t op_count)
{
    size_t k = op_count / REPLAY_TIMELINE_MAX_ROWS + (op_count % REPLAY_TIMELINE_MAX_ROWS != 0);
    return k ? k : 1;
}

void replay_timeline_header(FILE *timeline)
{
    fputs("op,line,kind,owned_bytes,mapped_bytes,arena_allocated_bytes,arena_committed_bytes,"
          "pool_bytes\n",
          timeline);
}

void replay_timeline_row(FILE *timeline, size_t index, const replay_op *op,
                         const ortmem_vmm_stats *vmm, const ortmem_arena_stats *arena)
{
    fprintf(timeline,
            "%zu,%" PRIu32 ",%s,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 "\n",
            index, op->line, replay_kind_name((replay_kind)op->kind), vmm->owned_bytes,
            vmm->mapped_bytes, arena ? arena->allocated_bytes : 0,
            arena ? arena->committed_bytes : 0, vmm->pool_bytes);
}

/* The title as a gnuplot single-quoted string's inside: ' doubles, and what
 * would break the script or the SVG's XML (control bytes, invalid UTF-8)
 * becomes '?'. gnuplot's svg terminal escapes & and < itself. */
static void put_title_text(FILE *script, const char *text)
{
    const unsigned char *p = (const unsigned char *)text;
    while (*p) {
        size_t len = utf8_sequence_length(p);
        if (len == 0 || *p < 0x20 || *p == 0x7f) {
            fputc('?', script);
            p++;
            continue;
        }
        if (*p == '\'')
            fputc('\'', script);
        fwrite(p, 1, len, script);
        p += len;
    }
}

/* Copies the CSV into the script as datablock $t; returns its data rows. */
static uint64_t put_datablock(FILE *script, FILE *timeline)
{
    char buf[1 << 16];
    uint64_t newlines = 0;
    size_t n;
    fputs("$t << EOD\n", script);
    while ((n = fread(buf, 1, sizeof buf, timeline)) > 0) {
        fwrite(buf, 1, n, script);
        for (size_t i = 0; i < n; i++)
            newlines += buf[i] == '\n';
    }
    fputs("EOD\n", script);
    return newlines ? newlines - 1 : 0; /* less the header */
}

static void put_script(FILE *script, FILE *timeline, const char *title)
{
    /* noenhanced: '_' and '^' in a trace name are not sub- and superscripts. */
    fputs("set terminal svg size 1000,500 noenhanced font 'sans,13' background rgb 'white'\n"
          "set title 'memory over time: ",
          script);
    put_title_text(script, title);
    fputs("' font 'sans,15'\n"
          "set xlabel 'operation (index in the trace)'\n"
          "set ylabel 'MiB'\n"
          "set format x '%.0f'\n"
          "set format y '%g'\n"
          "set grid\n"
          "set key outside right top vertical Left reverse samplen 2\n"
          "set datafile separator ','\n",
          script);
    uint64_t rows = put_datablock(script, timeline);
    if (rows == 0) {
        /* Empty axes still make a file where one was asked for. */
        fputs("set xrange [0:1]\nset yrange [0:1]\nset xtics 1\nset ytics 1\n"
              "set label 'the trace has no operations' at graph 0.5,0.5 center\n"
              "plot NaN notitle\n",
              script);
        return;
    }
    /* A few ops would get tics at halves, printed as repeated integers. */
    if (rows <= 10)
        fputs("set xtics 1\n", script);
    /* xfixmax: the axis ends at the last op, not at the next round tic. The
     * top gets 5% of room so a line at the peak does not run on the border. */
    fputs("set xrange [0:*]\nset autoscale xfixmax\nset yrange [0:*]\n"
          "set offsets 0,0,graph 0.05,0\n"
          "plot ",
          script);
    /* Each line narrower than the one drawn before it: where values are equal
     * (owned and mapped without aliases, all four for an arena-only trace)
     * every line still shows as an edge of the one beneath. */
    static const struct {
        int column;
        const char *width, *colour, *title;
    } series[] = {
        {5, "6", "#a6cee3", "mapped"},
        {4, "3.5", "#1f4e9c", "owned"},
        {7, "2", "#f28e1c", "arena committed"},
        {6, "1", "#1a7f1a", "arena allocated"},
    };
    for (size_t i = 0; i < sizeof series / sizeof series[0]; i++)
        fprintf(script,
                "%s$t skip 1 using 1:($%d/1048576.0) with steps lw %s lc rgb '%s' title '%s'",
                i ? ", \\\n     " : "", series[i].column, series[i].width, series[i].colour,
                series[i].title);
    fputc('\n', script);
}

/* What the script is drawn from: the timeline, read back from its start. */
typedef struct timeline_plot {
    FILE *timeline;
    const char *title;
} timeline_plot;

static const char *write_timeline_script(FILE *script, void *context)
{
    const timeline_plot *plot = context;
    put_script(script, plot->timeline, plot->title);
    return ferror(plot->timeline) ? "reading the timeline back failed" : NULL;
}

bool replay_plot_draw(FILE *timeline, int svg_fd, const char *title, FILE *err)
{
    if (fflush(timeline) != 0 || fseek(timeline, 0, SEEK_SET) != 0) {
        fprintf(err, "ortmem-replay: plot: cannot read the timeline back: %s\n", strerror(errno));
        return false;
    }
    timeline_plot plot = {.timeline = timeline, .title = title};
    return gnuplot_draw(svg_fd, write_timeline_script, &plot, "ortmem-replay: plot", err);
}
