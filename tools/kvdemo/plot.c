/* Committed bytes over decode steps, one line per configuration, live bytes
 * for reference, and a line of backend calls per request after the warm-up. The plot is gnuplot's (common/gnuplot.h): this file writes
 * its script, with the timelines inline as datablocks. */
#include "kvdemo.h"

#include "common/gnuplot.h"

#include <inttypes.h>

#define KD_PLOT_MAX_ROWS 2000 /* per configuration; longer timelines keep each window's peak */

/* The title inside a gnuplot single-quoted string: ' doubles; control bytes
 * become '?'. */
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

/* Datablock $cI: step, committed MiB, live MiB, unique live MiB. Long timelines are cut into
 * windows whose row is the one with the most committed bytes, so no peak is
 * lost. */
static void put_block(FILE *script, size_t index, const kd_result *r)
{
    fprintf(script, "$c%zu << EOD\n", index);
    size_t n = r->sample_count;
    size_t every = n / KD_PLOT_MAX_ROWS + (n % KD_PLOT_MAX_ROWS != 0);
    if (every == 0)
        every = 1;
    for (size_t i = 0; i < n; i += every) {
        size_t pick = i;
        for (size_t j = i; j < i + every && j < n; j++) {
            if (r->samples[j].committed_bytes > r->samples[pick].committed_bytes)
                pick = j;
        }
        const kd_sample *x = &r->samples[pick];
        fprintf(script, "%" PRIu64 " %.4f %.4f %.4f\n", x->step,
                (double)x->committed_bytes / 1048576.0, (double)x->live_bytes / 1048576.0,
                (double)x->unique_bytes / 1048576.0);
    }
    fputs("EOD\n", script);
}

static bool same_series(const kd_result *a, const kd_result *b, bool live)
{
    if (a->sample_count != b->sample_count)
        return false;
    for (size_t k = 0; k < a->sample_count; k++) {
        if (live ? a->samples[k].live_bytes != b->samples[k].live_bytes
                 : a->samples[k].committed_bytes != b->samples[k].committed_bytes)
            return false;
    }
    return true;
}

/* Whether every configuration saw the same live bytes at every step (no
 * refusal changed the schedule): then one live area stands for all. */
static bool same_live(const kd_result *results, size_t count)
{
    for (size_t i = 1; i < count; i++) {
        if (!same_series(&results[0], &results[i], true))
            return false;
    }
    return true;
}

/* The y range of the log axis: from the power of two at or below the
 * smallest non-zero value to above the largest. */
static void put_yrange(FILE *script, const kd_result *results, size_t count)
{
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t i = 0; i < count; i++) {
        for (size_t k = 0; k < results[i].sample_count; k++) {
            const kd_sample *x = &results[i].samples[k];
            uint64_t v[2] = {x->committed_bytes, x->live_bytes};
            for (int j = 0; j < 2; j++) {
                if (v[j] && v[j] < lo)
                    lo = v[j];
                if (v[j] > hi)
                    hi = v[j];
            }
        }
    }
    if (!hi)
        lo = hi = 1 << 20;
    double bottom = 1.0 / 1024; /* MiB */
    while (bottom * 2 * 1048576.0 <= (double)lo)
        bottom *= 2;
    fprintf(script, "set yrange [%g:%g]\n", bottom, (double)hi / 1048576.0 * 1.6);
}

static int colour_of(ortmem_kv_layout layout)
{
    return layout == ORTMEM_KV_HEAD_MAJOR ? 0 : layout == ORTMEM_KV_SEQ_MAJOR ? 1 : 2;
}

/* Under the title: each layout's mean backend calls per request after the
 * warm-up, stable / bucket. */
static void put_calls_label(FILE *script, const kd_result *results, size_t count)
{
    char text[512];
    size_t len = (size_t)snprintf(text, sizeof text,
                                  "backend calls per request after the warm-up of %" PRIu64
                                  " (mean; stable / bucket):",
                                  count ? results[0].calls.warmup_requests : 0);
    for (size_t i = 0; i < count && len < sizeof text; i++) {
        const kd_result *r = &results[i];
        double mean = r->calls.after_requests
                          ? (double)r->calls.after_all / (double)r->calls.after_requests
                          : 0.0;
        bool stable = r->strategy == ORTMEM_KV_STABLE;
        len += (size_t)snprintf(text + len, sizeof text - len, "%s%s%s %.1f",
                                stable && i ? "," : "", stable ? " " : " /",
                                stable ? ortmem_kv_layout_name(r->layout) : "", mean);
    }
    fputs("set tmargin 5\nset label 1 '", script);
    put_quoted(script, text);
    fputs("' at screen 0.5, screen 0.925 center font 'sans,11'\n", script);
}

static void put_script(FILE *script, const kd_result *results, size_t count, const char *title)
{
    fputs("set terminal svg size 1000,720 noenhanced font 'sans,13' background rgb 'white'\n"
          "set title '",
          script);
    put_quoted(script, title);
    fputs("' font 'sans,15'\n"
          "set xlabel 'decode step'\n"
          "set ylabel 'MiB (log scale)'\n"
          "set logscale y 2\n"
          "set format y '%g'\n"
          "set format x '%.0f'\n"
          "set grid xtics ytics lc rgb '#dddddd'\n"
          "set key below left Left reverse horizontal maxcols 2 samplen 3 spacing 1.3 width 2\n"
          "set xrange [0:*]\n"
          "set autoscale xfixmax\n",
          script);
    bool any = false;
    for (size_t i = 0; i < count; i++) {
        put_block(script, i, &results[i]);
        any = any || results[i].sample_count > 0;
    }
    if (!any) {
        fputs("unset logscale y\nset xrange [0:1]\nset yrange [0:1]\n"
              "set label 'no configuration ran' at graph 0.5,0.5 center\nplot NaN notitle\n",
              script);
        return;
    }
    put_yrange(script, results, count);
    put_calls_label(script, results, count);
    /* Layout: the colour; strategy: solid (stable) or dashed (bucket). A
     * configuration whose committed bytes equal an earlier one's at every
     * step is named in that one's line instead of hiding under it. */
    static const char *const colours[3] = {"#1f4e9c", "#e66101", "#1a9641"};
    bool all_live = same_live(results, count);
    fputs("plot ", script);
    bool first = true;
    if (all_live) {
        fputs("$c0 using 1:3 with fillsteps fs solid 0.3 noborder lc rgb '#8a8a8a' "
              "title 'live: every sequence''s tokens (each configuration)', \\\n     "
              "$c0 using 1:4 with steps lw 1.5 dt (3,3) lc rgb '#333333' "
              "title 'unique live: the shared system prompt once'",
              script);
        first = false;
    }
    for (size_t i = 0; i < count; i++) {
        const kd_result *r = &results[i];
        bool merged = false;
        for (size_t j = 0; j < i && !merged; j++)
            merged = results[j].strategy == r->strategy && same_series(&results[j], r, false);
        if (!r->sample_count || merged)
            continue;
        char names[160];
        int len = snprintf(names, sizeof names, "%s", ortmem_kv_layout_name(r->layout));
        for (size_t j = i + 1; j < count; j++) {
            if (results[j].strategy == r->strategy && same_series(&results[j], r, false) &&
                len > 0 && (size_t)len < sizeof names)
                len += snprintf(names + len, sizeof names - (size_t)len, " = %s",
                                ortmem_kv_layout_name(results[j].layout));
        }
        bool stable = r->strategy == ORTMEM_KV_STABLE;
        fprintf(script,
                "%s$c%zu using 1:2 with steps lw %s dt %s lc rgb '%s' "
                "title '%s %s (peak %.0f MiB)'",
                first ? "" : ", \\\n     ", i, stable ? "3" : "2.5", stable ? "1" : "(8,4)",
                colours[colour_of(r->layout)], names, ortmem_kv_strategy_name(r->strategy),
                (double)r->peak_committed / 1048576.0);
        first = false;
    }
    for (size_t i = 0; !all_live && i < count; i++) {
        const kd_result *r = &results[i];
        if (!r->sample_count)
            continue;
        fprintf(script, "%s$c%zu using 1:3 with steps lw 1 dt (2,3) lc rgb '%s' title '%s %s live'",
                first ? "" : ", \\\n     ", i, colours[colour_of(r->layout)],
                ortmem_kv_layout_name(r->layout), ortmem_kv_strategy_name(r->strategy));
        first = false;
    }
    fputc('\n', script);
}

typedef struct results_plot {
    const kd_result *results;
    size_t count;
    const char *title;
} results_plot;

static const char *write_results_script(FILE *script, void *context)
{
    const results_plot *plot = context;
    put_script(script, plot->results, plot->count, plot->title);
    return NULL;
}

bool kd_plot_draw(const kd_result *results, size_t count, int svg_fd, const char *title, FILE *err)
{
    results_plot plot = {.results = results, .count = count, .title = title};
    return gnuplot_draw(svg_fd, write_results_script, &plot, "ortmem-kvdemo: plot", err);
}
