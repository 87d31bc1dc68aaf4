/* --sweep: committed bytes against live tokens, 1 .. capacity, for every
 * layout (stable full-context VA and bucket growth), with each layout's
 * crossover marked. The plot is gnuplot's (common/gnuplot.h): this file
 * writes its script, with the data inline as datablocks, and the SVG goes to
 * a descriptor the caller opened. */
#include "geom.h"

#include "common/gnuplot.h"
#include "common/utf8.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define MIB 1048576.0

/* Per layout: the stable line dark and narrow, drawn over its bucket line,
 * light and wide, so that where the two are equal both still show. */
static const struct {
    const char *dark, *light;
} colours[ORTMEM_KV_LAYOUT_COUNT] = {
    {"#1f4e9c", "#a6c8ec"},
    {"#c0390b", "#f2a072"},
    {"#1a7f1a", "#a9dca0"},
};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

typedef struct points {
    uint64_t *n;
    size_t count, cap;
} points;

static bool add_point(points *p, uint64_t n, uint64_t capacity)
{
    if (n < 1 || n > capacity)
        return true;
    if (p->count == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 4096;
        uint64_t *grown = realloc(p->n, cap * sizeof *grown);
        if (!grown)
            return false;
        p->n = grown;
        p->cap = cap;
    }
    p->n[p->count++] = n;
    return true;
}

/* The token counts evaluated: every count up to 1024, then steps of 0.3%
 * (under a pixel on a log axis), every power of two and its neighbours (the
 * bucket edges), each crossover and its neighbours, and the capacity. Steps
 * between two samples are drawn at the later one. */
static bool sample_points(uint64_t capacity, const uint64_t *crossovers, points *p)
{
    bool ok = true;
    for (uint64_t n = 1; ok && n <= 1024 && n <= capacity; n++)
        ok = add_point(p, n, capacity);
    for (double x = 1024; ok && x < (double)capacity; x *= 1.003)
        ok = add_point(p, (uint64_t)x, capacity);
    for (unsigned k = 0; ok && k < 64; k++) {
        uint64_t pow2 = (uint64_t)1 << k;
        ok = add_point(p, pow2 - 1, capacity) && add_point(p, pow2, capacity) &&
             (pow2 == UINT64_MAX || add_point(p, pow2 + 1, capacity));
    }
    for (unsigned l = 0; ok && l < ORTMEM_KV_LAYOUT_COUNT; l++)
        ok = add_point(p, crossovers[l] - 1, capacity) && add_point(p, crossovers[l], capacity) &&
             add_point(p, crossovers[l] + 1, capacity);
    ok = ok && add_point(p, capacity, capacity);
    if (!ok)
        return false;
    qsort(p->n, p->count, sizeof *p->n, cmp_u64);
    size_t out = 0;
    for (size_t i = 0; i < p->count; i++) {
        if (out == 0 || p->n[i] != p->n[out - 1])
            p->n[out++] = p->n[i];
    }
    p->count = out;
    return true;
}

/* One step series as a datablock: a row where the value changes, and a last
 * row at x_end so the final step is drawn to the axis' end. */
static void put_series(FILE *script, const char *name, const points *p, const uint64_t *bytes,
                       uint64_t x_end)
{
    fprintf(script, "$%s << EOD\n", name);
    for (size_t i = 0; i < p->count; i++) {
        if (i == 0 || bytes[i] != bytes[i - 1])
            fprintf(script, "%" PRIu64 " %.10g\n", p->n[i], (double)bytes[i] / MIB);
    }
    fprintf(script, "%" PRIu64 " %.10g\nEOD\n", x_end, (double)bytes[p->count - 1] / MIB);
}

/* Text for a gnuplot double-quoted string: " and \ escaped, control bytes and
 * invalid UTF-8 (which would break the SVG's XML) as '?'. */
static void put_quoted_text(FILE *script, const char *text)
{
    const unsigned char *s = (const unsigned char *)text;
    while (*s) {
        size_t len = utf8_sequence_length(s);
        if (len == 0 || *s < 0x20 || *s == 0x7f) {
            fputc('?', script);
            s++;
            continue;
        }
        if (*s == '"' || *s == '\\')
            fputc('\\', script);
        fwrite(s, 1, len, script);
        s += len;
    }
}

static void put_size(FILE *script, uint64_t bytes)
{
    if (bytes >= ((uint64_t)1 << 30) && bytes % ((uint64_t)1 << 30) == 0)
        fprintf(script, "%" PRIu64 " GiB", bytes >> 30);
    else if (bytes >= ((uint64_t)1 << 20) && bytes % ((uint64_t)1 << 20) == 0)
        fprintf(script, "%" PRIu64 " MiB", bytes >> 20);
    else if (bytes >= 1024 && bytes % 1024 == 0)
        fprintf(script, "%" PRIu64 " KiB", bytes >> 10);
    else
        fprintf(script, "%" PRIu64 " bytes", bytes);
}

typedef struct sweep_data {
    points p;
    uint64_t *stable[ORTMEM_KV_LAYOUT_COUNT], *bucket[ORTMEM_KV_LAYOUT_COUNT];
    uint64_t crossover[ORTMEM_KV_LAYOUT_COUNT];
    uint64_t bytes_per_token;
} sweep_data;

static void put_script(FILE *script, const geom_input *in, const sweep_data *d)
{
    const ortmem_kv_geometry *g = &in->geometry;
    uint64_t cap = in->capacity, x_end = cap > 1 ? cap : 2;
    fputs("set terminal svg size 1100,700 noenhanced font 'sans,13' background rgb 'white'\n"
          "set title \"committed KV memory against live tokens: ",
          script);
    put_quoted_text(script, in->source ? in->source : "custom geometry");
    fprintf(script,
            "\\n%" PRIu32 " layers, %" PRIu32 " KV heads, head dim %" PRIu32 ", %s; granule ",
            g->layers, g->kv_heads, g->head_dim, ortmem_kv_dtype_name(g->dtype));
    put_size(script, g->granule);
    fprintf(script, "; capacity %" PRIu64 " tokens, batch %" PRIu64 ", min bucket %" PRIu64, cap,
            in->batch, in->min_bucket ? in->min_bucket : 256);
    fputs("\" font 'sans,14'\n"
          "set xlabel 'live tokens per sequence (log scale)'\n"
          "set ylabel 'MiB (log scale)'\n"
          "set logscale x 2\nset logscale y 10\n"
          "set format x '%.0f'\nset format y '%g'\n"
          "set grid xtics ytics mytics lc rgb '#dddddd' lw 1, lc rgb '#eeeeee' lw 1\n"
          "set key outside below center vertical maxrows 3 Left reverse samplen 3 "
          "spacing 1.2\n",
          script);
    fprintf(script, "set xrange [1:%" PRIu64 "]\n", x_end);
    /* Tics at every power of four (of two for small capacities) keep the
     * labels apart; the capacity gets one of its own. */
    fputs(cap > 4096 ? "set xtics 4\n" : "set xtics 2\n", script);
    /* gnuplot drops a tic exactly on a log axis' end: this one sits a hair inside. */
    if ((cap & (cap - 1)) || (cap > 4096 && (__builtin_ctzll(cap) & 1)))
        fprintf(script, "set xtics add ('%" PRIu64 "' %.12g)\n", cap, (double)cap * (1 - 1e-9));
    fputs("set autoscale yfix\nset offsets 0,0,graph 0.1,graph 0.02\n", script);
    for (unsigned l = 0; l < ORTMEM_KV_LAYOUT_COUNT; l++) {
        uint64_t c = d->crossover[l];
        if (c > cap)
            continue;
        fprintf(script,
                "set arrow from %" PRIu64 ", graph 0 to %" PRIu64
                ", graph 1 nohead dt 2 lw 1.5 lc rgb '%s' back\n",
                c, c, colours[l].dark);
        fprintf(script,
                "set label \"%s crossover: %" PRIu64 " tokens\" at %" PRIu64
                ", graph 0.02 left rotate by 90 offset char %s,0 textcolor rgb '%s' front\n",
                ortmem_kv_layout_name((ortmem_kv_layout)l), c, c, c == 1 ? "1.2" : "-0.5",
                colours[l].dark);
    }
    char name[16];
    for (unsigned l = 0; l < ORTMEM_KV_LAYOUT_COUNT; l++) {
        snprintf(name, sizeof name, "s%u", l);
        put_series(script, name, &d->p, d->stable[l], x_end);
        snprintf(name, sizeof name, "b%u", l);
        put_series(script, name, &d->p, d->bucket[l], x_end);
    }
    /* Live bytes are proportional to n: a straight line on log-log axes. */
    fprintf(script, "$live << EOD\n1 %.10g\n%" PRIu64 " %.10g\nEOD\n",
            (double)(in->batch * d->bytes_per_token) / MIB, x_end,
            (double)x_end * (double)(in->batch * d->bytes_per_token) / MIB);
    /* Each line narrower than the one of its kind drawn before it: where
     * layouts commit the same, every line still shows as an edge. */
    static const char *const bucket_width[] = {"13", "8", "4"};
    static const char *const stable_width[] = {"5", "3", "1.5"};
    fputs("plot ", script);
    for (unsigned l = 0; l < ORTMEM_KV_LAYOUT_COUNT; l++)
        fprintf(script, "%s$b%u using 1:2 with steps lw %s lc rgb '%s' title 'bucket growth, %s'",
                l ? ", \\\n     " : "", l, bucket_width[l], colours[l].light,
                ortmem_kv_layout_name((ortmem_kv_layout)l));
    for (unsigned l = 0; l < ORTMEM_KV_LAYOUT_COUNT; l++)
        fprintf(script,
                ", \\\n     $s%u using 1:2 with steps lw %s lc rgb '%s' title 'stable "
                "full-context VA, %s'",
                l, stable_width[l], colours[l].dark, ortmem_kv_layout_name((ortmem_kv_layout)l));
    fputs(", \\\n     $live using 1:2 with lines dt 3 lw 2 lc rgb '#333333' title 'live bytes "
          "(tokens x "
          "bytes per token)'\n",
          script);
}

/* Evaluates every sample point for every layout. On failure err has a line. */
static int evaluate_all(const geom_input *in, sweep_data *d, FILE *err)
{
    ortmem_kv_geometry g = in->geometry;
    for (unsigned l = 0; l < ORTMEM_KV_LAYOUT_COUNT; l++) {
        g.layout = (ortmem_kv_layout)l;
        ortmem_kv_eval e = {.struct_size = sizeof e};
        ortmem_status st =
            ortmem_kv_evaluate(&g, 1, in->capacity, in->batch, 0, in->min_bucket, &e);
        if (st != ORTMEM_OK) {
            fprintf(err, "ortmem-geom: --sweep: %s: %s\n", ortmem_kv_layout_name(g.layout),
                    ortmem_last_error());
            return 2;
        }
        d->crossover[l] = e.crossover_tokens;
        d->bytes_per_token = e.bytes_per_token;
    }
    if (!sample_points(in->capacity, d->crossover, &d->p)) {
        fprintf(err, "ortmem-geom: --sweep: out of memory\n");
        return 1;
    }
    for (unsigned l = 0; l < ORTMEM_KV_LAYOUT_COUNT; l++) {
        d->stable[l] = malloc(d->p.count * sizeof(uint64_t));
        d->bucket[l] = malloc(d->p.count * sizeof(uint64_t));
        if (!d->stable[l] || !d->bucket[l]) {
            fprintf(err, "ortmem-geom: --sweep: out of memory\n");
            return 1;
        }
        g.layout = (ortmem_kv_layout)l;
        for (size_t i = 0; i < d->p.count; i++) {
            ortmem_kv_eval e = {.struct_size = sizeof e};
            ortmem_status st =
                ortmem_kv_evaluate(&g, d->p.n[i], in->capacity, in->batch, 0, in->min_bucket, &e);
            if (st != ORTMEM_OK) {
                fprintf(err, "ortmem-geom: --sweep: %s at %" PRIu64 " tokens: %s\n",
                        ortmem_kv_layout_name(g.layout), d->p.n[i], ortmem_last_error());
                return 2;
            }
            d->stable[l][i] = e.committed_bytes;
            d->bucket[l][i] = e.bucket_committed_bytes;
        }
    }
    return 0;
}

static void sweep_data_free(sweep_data *d)
{
    free(d->p.n);
    for (unsigned l = 0; l < ORTMEM_KV_LAYOUT_COUNT; l++) {
        free(d->stable[l]);
        free(d->bucket[l]);
    }
}

typedef struct sweep_plot {
    const geom_input *in;
    const sweep_data *data;
} sweep_plot;

static const char *write_sweep_script(FILE *script, void *context)
{
    const sweep_plot *plot = context;
    put_script(script, plot->in, plot->data);
    return NULL;
}

int geom_plot_draw(const geom_input *in, int svg_fd, FILE *err)
{
    sweep_data d;
    memset(&d, 0, sizeof d);
    int rc = evaluate_all(in, &d, err);
    if (rc == 0) {
        sweep_plot plot = {.in = in, .data = &d};
        rc = gnuplot_draw(svg_fd, write_sweep_script, &plot, "ortmem-geom: --sweep", err) ? 0 : 1;
    }
    sweep_data_free(&d);
    return rc;
}
