/* ortmem-residency-sim: every residency policy replayed over a tensor access
 * trace at a sweep of budgets. Exit status 0 when done, 2 for invalid input
 * (one line on stderr, nothing on stdout), 1 when the plot failed. */
#include "rsim.h"

#include "common/cli.h"
#include "common/gnuplot.h"
#include "common/json.h"
#include "common/number.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define PROGRAM "ortmem-residency-sim"
#define MAX_BUDGETS 64
#define PROGRESS_ACCESSES 2000000ull /* sweeps replaying more report progress */

#define fail(status, ...) cli_fail(PROGRAM, status, __VA_ARGS__)

static void usage(FILE *out)
{
    fputs("usage: ortmem-residency-sim TRACE [--granule SIZE] [--budgets P,P,...] [--json]\n"
          "                            [--plot PATH.svg [--points N]]\n"
          "\n"
          "Replays a tensor access trace against every residency policy (lru,\n"
          "scan-resistant, adaptive, belady) at budgets given as a percentage of the\n"
          "weights, and reports byte and count hit rates, page-ins, evictions, bytes\n"
          "moved host to device, and each policy's byte hit rate as a fraction of\n"
          "Belady's (the oracle with the known future). Pure simulation\n"
          "(ortmem_residency_simulate); docs/memory/OFFLOAD.md has the policies and\n"
          "the trace format.\n"
          "\n"
          "  TRACE              the trace file: 'ortmem-residency-trace 1', then\n"
          "                     'tensor NAME BYTES' lines, then 'access NAME ...' lines\n"
          "                     (tools/residency-sim/gguf_trace.py writes one from a GGUF)\n"
          "  --granule SIZE     each tensor's slot is rounded up to it (default 2MiB)\n"
          "  --budgets LIST     percentages of the granule-rounded weights, comma-separated\n"
          "                     (default 25,50,75); each budget is rounded down to granules\n"
          "  --json             one JSON object instead of the table\n"
          "  --plot PATH.svg    byte hit rate against budget per policy, Belady's on top,\n"
          "                     over a finer sweep; needs gnuplot (Debian: gnuplot-nox),\n"
          "                     skipped with a message without it\n"
          "  --points N         budgets in the plot's sweep, evenly up to 100% (default 40)\n"
          "  -h, --help         this text\n"
          "\n"
          "Exit status: 0 done, 2 invalid input (one line on stderr), 1 the plot failed.\n",
          out);
}

typedef struct options {
    const char *trace, *plot;
    bool json, help;
    uint64_t granule, points;
    double budgets[MAX_BUDGETS];
    size_t budget_count;
} options;

static int parse_budgets(options *o, const char *value)
{
    o->budget_count = 0;
    const char *p = value;
    while (*p) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || !(v > 0.0) || v > 100.0 || (*end && *end != ','))
            return fail(EXIT_USAGE, "--budgets '%s': not a list of percentages above 0, up to 100",
                        value);
        if (o->budget_count == MAX_BUDGETS)
            return fail(EXIT_USAGE, "--budgets '%s': more than %d budgets", value, MAX_BUDGETS);
        o->budgets[o->budget_count++] = v;
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return fail(EXIT_USAGE, "--budgets '%s': a trailing comma", value);
    }
    if (!o->budget_count)
        return fail(EXIT_USAGE, "--budgets is empty");
    return 0;
}

static int apply_option(void *context, const char *name, const char *value)
{
    options *o = context;
    if (strcmp(name, "--plot") == 0)
        o->plot = value;
    else if (strcmp(name, "--budgets") == 0)
        return parse_budgets(o, value);
    else if (strcmp(name, "--granule") == 0) {
        if (!parse_size(value, &o->granule) || o->granule == 0)
            return fail(EXIT_USAGE,
                        "--granule '%s': not a positive size (digits with an optional "
                        "KiB, MiB or GiB suffix)",
                        value);
    } else if (strcmp(name, "--points") == 0) {
        if (!parse_u64(value, &o->points) || o->points == 0 || o->points > 1000)
            return fail(EXIT_USAGE, "--points '%s': not an integer from 1 to 1000", value);
    } else
        return fail(EXIT_USAGE, "unknown option '%s' (" PROGRAM " --help lists them)", name);
    return 0;
}

/* The trace is the one word that is not an option. */
static int parse_args(int argc, char **argv, options *o)
{
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest)
        return fail(EXIT_FAILED, "out of memory");
    int n = 0;
    rest[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || strcmp(a, "-") == 0) {
            if (o->trace) {
                free(rest);
                return fail(EXIT_USAGE, "two traces given ('%s' and '%s'); give one", o->trace, a);
            }
            o->trace = a;
            continue;
        }
        rest[n++] = argv[i];
        /* A value in the next word stays with its option. */
        if (!strchr(a, '=') && i + 1 < argc &&
            (!strcmp(a, "--plot") || !strcmp(a, "--budgets") || !strcmp(a, "--granule") ||
             !strcmp(a, "--points")))
            rest[n++] = argv[++i];
    }
    const cli_flag flags[] = {
        {"-h", &o->help}, {"--help", &o->help}, {"--json", &o->json}, {NULL, NULL}};
    static const char *const valued[] = {"--plot", "--budgets", "--granule", "--points", NULL};
    const cli_parser parser = {PROGRAM, flags, valued, apply_option, o};
    int rc = cli_parse(&parser, n, rest);
    free(rest);
    return rc;
}

double rs_byte_hit_rate(const ortmem_residency_sim_stats *s)
{
    uint64_t all = s->hit_bytes + s->miss_bytes;
    return all ? (double)s->hit_bytes / (double)all : 0.0;
}

double rs_count_hit_rate(const ortmem_residency_sim_stats *s)
{
    return s->accesses ? (double)s->hits / (double)s->accesses : 0.0;
}

typedef struct sizes {
    uint64_t weights; /* granule-rounded */
    uint64_t largest; /* rounded */
    uint64_t raw;     /* the tensors' own bytes */
} sizes;

static bool sizes_of(const rs_trace *t, uint64_t granule, sizes *z)
{
    memset(z, 0, sizeof *z);
    for (uint32_t k = 0; k < t->count; k++) {
        uint64_t g = t->bytes[k] / granule + (t->bytes[k] % granule != 0);
        if (g > UINT64_MAX / granule || g * granule > UINT64_MAX - z->weights ||
            t->bytes[k] > UINT64_MAX - z->raw)
            return false;
        z->weights += g * granule;
        z->raw += t->bytes[k];
        if (g * granule > z->largest)
            z->largest = g * granule;
    }
    return true;
}

/* Runs every policy at percent of the weights; a budget below the largest
 * tensor is marked, not run. Returns 0 or an exit status after a message. */
static int run_budget(const rs_trace *t, const options *o, const sizes *z, double percent,
                      rs_run *runs, size_t stride)
{
    uint64_t granules = z->weights / o->granule;
    uint64_t budget = (uint64_t)((double)granules * percent / 100.0) * o->granule;
    for (unsigned k = 0; k < ORTMEM_RESIDENCY_POLICY_COUNT; k++) {
        rs_run *r = &runs[k * stride];
        memset(r, 0, sizeof *r);
        r->policy = (ortmem_residency_policy)k;
        r->percent = percent;
        r->budget = budget;
        r->fits = budget >= z->largest;
        r->stats.struct_size = sizeof r->stats;
        if (!r->fits)
            continue;
        if (ortmem_residency_simulate(t->bytes, t->count, t->accesses, t->length, o->granule,
                                      budget, r->policy, &r->stats) != ORTMEM_OK)
            return fail(EXIT_USAGE, "%s at %g%%: %s", ortmem_residency_policy_name(r->policy),
                        percent, ortmem_last_error());
    }
    return 0;
}

static const rs_run *belady_of(const rs_run *runs, size_t stride, size_t i)
{
    return &runs[ORTMEM_RESIDENCY_BELADY * stride + i];
}

/* The policy's byte hit rate over Belady's; negative when Belady hits nothing. */
static double of_belady(const rs_run *r, const rs_run *oracle)
{
    double b = rs_byte_hit_rate(&oracle->stats);
    return b > 0 ? rs_byte_hit_rate(&r->stats) / b : -1.0;
}

static void put_table(FILE *out, const rs_trace *t, const options *o, const sizes *z,
                      const rs_run *runs, size_t n)
{
    char g[32], w[32], l[32];
    fprintf(out,
            "trace %s: %" PRIu32 " tensors, %" PRIu64 " accesses in %" PRIu64
            " steps; weights %.2f MiB (%" PRIu64
            " bytes), %s granule-rounded, largest %s; granule %s\n\n",
            o->trace, t->count, t->length, t->steps, (double)z->raw / 1048576.0, z->raw,
            size_text(z->weights, w, sizeof w), size_text(z->largest, l, sizeof l),
            size_text(o->granule, g, sizeof g));
    fprintf(out, "%-15s %7s %11s %9s %9s %9s %9s %9s %11s %9s\n", "policy", "budget", "budget MiB",
            "byte hit", "count hit", "page-ins", "evictions", "streamed", "MiB moved", "of Belady");
    for (size_t i = 0; i < n; i++) {
        for (unsigned k = 0; k < ORTMEM_RESIDENCY_POLICY_COUNT; k++) {
            const rs_run *r = &runs[k * n + i];
            fprintf(out, "%-15s %6g%% %11.1f", ortmem_residency_policy_name(r->policy), r->percent,
                    (double)r->budget / 1048576.0);
            if (!r->fits) {
                fputs("   below the largest tensor: not run\n", out);
                continue;
            }
            double ratio = of_belady(r, belady_of(runs, n, i));
            fprintf(out, " %8.2f%% %8.2f%% %9" PRIu64 " %9" PRIu64 " %9" PRIu64 " %11.1f",
                    100.0 * rs_byte_hit_rate(&r->stats), 100.0 * rs_count_hit_rate(&r->stats),
                    r->stats.page_ins, r->stats.evictions, r->stats.streamed,
                    (double)r->stats.bytes_moved / 1048576.0);
            if (ratio < 0)
                fputs("         -\n", out);
            else
                fprintf(out, " %8.2f%%\n", 100.0 * ratio);
        }
        if (i + 1 < n)
            fputc('\n', out);
    }
}

static void put_json(FILE *out, const rs_trace *t, const options *o, const sizes *z,
                     const rs_run *runs, size_t n)
{
    fputs("{\n  \"trace\": ", out);
    json_put_string(out, o->trace, JSON_CONTROLS_NAMED);
    fprintf(out,
            ",\n  \"tensors\": %" PRIu32 ",\n  \"accesses\": %" PRIu64 ",\n  \"steps\": %" PRIu64
            ",\n  \"granule\": %" PRIu64 ",\n  \"tensor_bytes\": %" PRIu64
            ",\n  \"weights_bytes\": %" PRIu64 ",\n  \"largest_bytes\": %" PRIu64
            ",\n  \"runs\": [",
            t->count, t->length, t->steps, o->granule, z->raw, z->weights, z->largest);
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        for (unsigned k = 0; k < ORTMEM_RESIDENCY_POLICY_COUNT; k++) {
            const rs_run *r = &runs[k * n + i];
            const ortmem_residency_sim_stats *s = &r->stats;
            fprintf(
                out,
                "%s\n    {\"policy\": \"%s\", \"budget_percent\": %g, \"budget_bytes\": %" PRIu64
                ", \"ran\": %s",
                first ? "" : ",", ortmem_residency_policy_name(r->policy), r->percent, r->budget,
                r->fits ? "true" : "false");
            first = false;
            if (r->fits) {
                double ratio = of_belady(r, belady_of(runs, n, i));
                fprintf(out,
                        ", \"accesses\": %" PRIu64 ", \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
                        ", \"hit_bytes\": %" PRIu64 ", \"miss_bytes\": %" PRIu64
                        ", \"page_ins\": %" PRIu64 ", \"evictions\": %" PRIu64
                        ", \"streamed\": %" PRIu64 ", \"bytes_moved\": %" PRIu64
                        ", \"peak_resident_bytes\": %" PRIu64
                        ", \"byte_hit_rate\": %.6f, \"count_hit_rate\": %.6f",
                        s->accesses, s->hits, s->misses, s->hit_bytes, s->miss_bytes, s->page_ins,
                        s->evictions, s->streamed, s->bytes_moved, s->peak_resident_bytes,
                        rs_byte_hit_rate(s), rs_count_hit_rate(s));
                if (ratio < 0)
                    fputs(", \"of_belady\": null", out);
                else
                    fprintf(out, ", \"of_belady\": %.6f", ratio);
            }
            fputc('}', out);
        }
    }
    fputs("\n  ]", out);
    if (o->plot) {
        fputs(",\n  \"plot\": ", out);
        json_put_string(out, o->plot, JSON_CONTROLS_NAMED);
    }
    fputs("\n}\n", out);
}

/* The plot's sweep, then the drawing. Returns 0 or an exit status. */
static int plot(const rs_trace *t, const options *o, const sizes *z)
{
    if (!gnuplot_available()) {
        fprintf(stderr,
                PROGRAM ": --plot skipped: gnuplot is not installed (Debian: apt-get install "
                        "gnuplot-nox)\n");
        return 0;
    }
    size_t n = (size_t)o->points;
    rs_run *runs = calloc(n * ORTMEM_RESIDENCY_POLICY_COUNT, sizeof *runs);
    if (!runs)
        return fail(EXIT_FAILED, "--plot: out of memory");
    bool progress = (uint64_t)n * ORTMEM_RESIDENCY_POLICY_COUNT * t->length > PROGRESS_ACCESSES;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = run_budget(t, o, z, 100.0 * (double)(i + 1) / (double)n, &runs[i], n);
        if (progress)
            fprintf(stderr, PROGRAM ": plot sweep: budget %zu/%zu done\n", i + 1, n);
    }
    if (rc == 0) {
        int fd = open(o->plot, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (fd < 0) {
            rc = fail(EXIT_FAILED, "--plot: cannot write '%s': %s", o->plot, strerror(errno));
        } else {
            char title[512], g[32];
            snprintf(title, sizeof title,
                     "residency policies over %s: %" PRIu32 " tensors, %" PRIu64
                     " accesses, granule %s",
                     o->trace, t->count, t->length, size_text(o->granule, g, sizeof g));
            bool drawn = rs_plot_draw(runs, n, title, fd, stderr);
            int close_errno;
            if (!gnuplot_svg_close(fd, o->plot, drawn, &close_errno)) {
                rc = EXIT_FAILED;
                if (close_errno)
                    fail(EXIT_FAILED, "--plot: writing '%s' failed: %s", o->plot,
                         strerror(close_errno));
            }
        }
    }
    free(runs);
    return rc;
}

int main(int argc, char **argv)
{
    options o = {
        .granule = (uint64_t)2 << 20, .points = 40, .budgets = {25, 50, 75}, .budget_count = 3};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    if (o.help) {
        usage(stdout);
        return 0;
    }
    if (!o.trace)
        return fail(EXIT_USAGE, "no trace given (" PROGRAM " --help)");
    rs_trace t;
    char err[512];
    if (!rs_trace_read(o.trace, &t, err, sizeof err))
        return fail(EXIT_USAGE, "%s: %s", o.trace, err);
    sizes z;
    if (!sizes_of(&t, o.granule, &z)) {
        rs_trace_free(&t);
        return fail(EXIT_USAGE, "%s: the tensors' bytes overflow 64 bits", o.trace);
    }
    size_t n = o.budget_count;
    rs_run runs[MAX_BUDGETS * ORTMEM_RESIDENCY_POLICY_COUNT];
    bool progress = (uint64_t)n * ORTMEM_RESIDENCY_POLICY_COUNT * t.length > PROGRESS_ACCESSES;
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = run_budget(&t, &o, &z, o.budgets[i], &runs[i], n);
        if (progress)
            fprintf(stderr, PROGRAM ": budget %zu/%zu done\n", i + 1, n);
    }
    if (rc == 0) {
        if (o.json)
            put_json(stdout, &t, &o, &z, runs, n);
        else
            put_table(stdout, &t, &o, &z, runs, n);
        fflush(stdout);
        if (o.plot) {
            rc = plot(&t, &o, &z);
            if (rc == 0 && !o.json)
                printf("\nplot: %s\n", o.plot);
        }
    }
    rs_trace_free(&t);
    return rc;
}
