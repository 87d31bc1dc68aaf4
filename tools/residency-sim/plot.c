/* Byte hit rate against budget, one line per policy, Belady's oracle drawn
 * last so it lies on top. The plot is gnuplot's (common/gnuplot.h): this
 * file writes its script with the sweep inline as datablocks. */
#include "rsim.h"

#include "common/gnuplot.h"

#include <inttypes.h>

/* Text for a gnuplot single-quoted string: ' doubles, control bytes become '?'. */
static void put_quoted(FILE *script, const char *text)
{
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p < 0x20 || *p == 0x7f)
            fputc('?', script);
        else if (*p == '\'')
            fputs("''", script);
        else
            fputc(*p, script);
    }
}

typedef struct rs_plot {
    const rs_run *runs;
    size_t points;
    const char *title;
} rs_plot;

static const char *write_script(FILE *script, void *context)
{
    const rs_plot *p = context;
    static const char *const colours[ORTMEM_RESIDENCY_POLICY_COUNT] = {
        [ORTMEM_RESIDENCY_LRU] = "#e66101",
        [ORTMEM_RESIDENCY_SCAN_RESISTANT] = "#1f4e9c",
        [ORTMEM_RESIDENCY_ADAPTIVE] = "#1a9641",
        [ORTMEM_RESIDENCY_BELADY] = "#000000",
    };
    fputs("set terminal svg size 1000,680 noenhanced font 'sans,13' background rgb 'white'\n"
          "set title '",
          script);
    put_quoted(script, p->title);
    fputs("' font 'sans,14'\n"
          "set xlabel 'device budget, % of the weights (granule-rounded)'\n"
          "set ylabel 'byte hit rate, %'\n"
          "set xrange [0:100]\nset yrange [0:100]\n"
          "set grid xtics ytics lc rgb '#dddddd'\n"
          "set key top left Left reverse samplen 3 spacing 1.2\n",
          script);
    for (unsigned k = 0; k < ORTMEM_RESIDENCY_POLICY_COUNT; k++) {
        fprintf(script, "$p%u << EOD\n", k);
        for (size_t i = 0; i < p->points; i++) {
            const rs_run *r = &p->runs[k * p->points + i];
            if (r->fits)
                fprintf(script, "%.6f %.6f\n", r->percent, 100.0 * rs_byte_hit_rate(&r->stats));
        }
        fputs("EOD\n", script);
    }
    /* Belady last: on top of the others, dashed so what it covers shows. */
    static const unsigned order[ORTMEM_RESIDENCY_POLICY_COUNT] = {
        ORTMEM_RESIDENCY_LRU, ORTMEM_RESIDENCY_ADAPTIVE, ORTMEM_RESIDENCY_SCAN_RESISTANT,
        ORTMEM_RESIDENCY_BELADY};
    fputs("plot ", script);
    for (unsigned i = 0; i < ORTMEM_RESIDENCY_POLICY_COUNT; i++) {
        unsigned k = order[i];
        bool oracle = k == ORTMEM_RESIDENCY_BELADY;
        fprintf(script,
                "%s$p%u using 1:2 with linespoints pt 7 ps 0.5 lw %s dt %s lc rgb '%s' "
                "title '%s%s'",
                i ? ", \\\n     " : "", k, oracle ? "2" : "3", oracle ? "(6,4)" : "1", colours[k],
                ortmem_residency_policy_name((ortmem_residency_policy)k),
                oracle ? " (oracle, known future)" : "");
    }
    fputc('\n', script);
    return NULL;
}

bool rs_plot_draw(const rs_run *runs, size_t points, const char *title, int svg_fd, FILE *err)
{
    rs_plot plot = {runs, points, title};
    return gnuplot_draw(svg_fd, write_script, &plot, "ortmem-residency-sim: --plot", err);
}
