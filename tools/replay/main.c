/* ortmem-replay: command line. Exit status 0 when the replay proved nothing
 * wrong, 1 when it found an overlap, a corruption or an unbalanced ledger, 2
 * for usage, parse and setup errors (then nothing was replayed). */
#include "replay.h"

#include "common/cli.h"
#include "common/gnuplot.h"
#include "common/number.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_FOUND_PROBLEMS 1
#define EXIT_USAGE 2

static const char usage[] =
    "usage: ortmem-replay TRACE [options]      (TRACE '-' reads standard input)\n"
    "\n"
    "Replays an allocation trace through ortmem, checking every byte it makes live,\n"
    "and reports operations, failures, the ledger and backend calls.\n"
    "\n"
    "  --backend cpu          backend to run on (cpu is the only one on every machine)\n"
    "  --granule BYTES        backend granule, a power of two (default: the backend's, 2 MiB)\n"
    "  --pool BYTES           physical pool cap (ortmem_pool_set_cap; default 0)\n"
    "  --fault OP[:N]         wrap the backend with fault injection: fail the Nth OP call\n"
    "                         (OP: reserve unreserve create release map unmap set_access\n"
    "                         export import copy any)\n"
    "  --fault-rate P         fail each OP call (any, without --fault) with probability P\n"
    "  --seed S               seed for --fault-rate (default 1)\n"
    "  --budget BYTES         limit on owned (physical) bytes, enforced by an ortmem\n"
    "                         authority that every region and arena charges through its\n"
    "                         holder; refused ops count in budget_refusals (default: no\n"
    "                         limit, the ledger by holder is still reported)\n"
    "  --arena-capacity BYTES VA of each holder's arena (default: from the trace)\n"
    "  --arena-cache BYTES    empty granules each arena keeps committed (default 64 MiB)\n"
    "  --timeline PATH.csv    the ledger after every op as CSV (after every K-th, K =\n"
    "                         ceil(ops / 20000), and the last): op,line,kind,owned_bytes,\n"
    "                         mapped_bytes,arena_allocated_bytes,arena_committed_bytes,pool_bytes\n"
    "  --plot PATH.svg        draw owned, mapped, arena allocated and arena committed MiB\n"
    "                         against the op with gnuplot (Debian package gnuplot-nox);\n"
    "                         implies a timeline (a temporary one without --timeline)\n"
    "  --json                 print one JSON object instead of the table\n"
    "  --progress             progress lines on stderr (default when stderr is a terminal)\n"
    "  --no-progress          none\n"
    "  -h, --help             this text\n"
    "\n"
    "Sizes take K/KiB, M/MiB, G/GiB suffixes. Exit status: 0 clean, 1 overlaps,\n"
    "corruptions, an unbalanced ledger or a budget exceeded, 2 usage or trace errors,\n"
    "or an output that could not be written. Trace format: tools/replay/README.md.\n";

static int usage_error(const char *fmt, const char *arg)
{
    fputs("ortmem-replay: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n(ortmem-replay --help for usage)\n", stderr);
    return EXIT_USAGE;
}

static bool parse_size_t(const char *text, size_t *out)
{
    uint64_t v;
    if (!parse_size(text, &v) || v > SIZE_MAX)
        return false;
    *out = (size_t)v;
    return true;
}

/* "map:3" or "map". */
static bool parse_fault(const char *text, ortmem_fault_options *fault)
{
    char name[32];
    const char *colon = strchr(text, ':');
    size_t len = colon ? (size_t)(colon - text) : strlen(text);
    if (len == 0 || len >= sizeof name)
        return false;
    memcpy(name, text, len);
    name[len] = '\0';
    if (ortmem_backend_op_parse(name, &fault->op) != ORTMEM_OK)
        return false;
    fault->fail_at = 0;
    if (colon && (!parse_u64(colon + 1, &fault->fail_at) || fault->fail_at == 0))
        return false;
    return true;
}

/* Where the timeline goes: the --timeline file, or for --plot alone a temp
 * file unlinked as soon as it is open (nothing is left behind, even by a
 * killed run). w+: the plot reads it back. */
static FILE *open_timeline(const char *path)
{
    FILE *f = NULL;
    if (path) {
        f = fopen(path, "w+");
        if (!f)
            fprintf(stderr, "ortmem-replay: cannot write the timeline '%s': %s\n", path,
                    strerror(errno));
    } else {
        const char *dir = getenv("TMPDIR");
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s/ortmem-replay-timeline-XXXXXX", dir && *dir ? dir : "/tmp");
        int fd = mkstemp(tmp);
        if (fd >= 0) {
            (void)unlink(tmp);
            f = fdopen(fd, "w+");
            if (!f)
                close(fd);
        }
        if (!f)
            fprintf(stderr, "ortmem-replay: cannot create a temporary timeline for the plot: %s\n",
                    strerror(errno));
    }
    if (f) {
        /* gnuplot, the one child, has no use for it. */
        (void)fcntl(fileno(f), F_SETFD, FD_CLOEXEC);
        replay_timeline_header(f);
    }
    return f;
}

int main(int argc, char **argv)
{
    replay_config config = {.arena_cache = (size_t)64 << 20, .progress = isatty(2) != 0};
    ortmem_fault_options fault = ORTMEM_FAULT_OPTIONS_INIT;
    const char *trace_path = NULL, *timeline_path = NULL, *plot_path = NULL;
    bool json = false, fault_op_given = false, rate_given = false;

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        bool is_operand = arg[0] != '-' || strcmp(arg, "-") == 0;
        if (strcmp(arg, "--") == 0) {
            /* The argument after "--" is the trace, even if it starts with '-'. */
            if (i + 1 >= argc)
                return usage_error("%s", "'--' must be followed by the trace");
            arg = argv[++i];
            is_operand = true;
        } else if (!is_operand && arg[1] != '-') {
            return usage_error("unknown option '%s'", arg);
        }
        if (is_operand) {
            if (trace_path)
                return usage_error("one trace at a time ('%s' is a second one)", arg);
            trace_path = arg;
            continue;
        }
        /* --name VALUE or --name=VALUE */
        char name[32];
        const char *value;
        if (!cli_split_option(arg, name, sizeof name, &value))
            return usage_error("unknown option '%s'", arg);
        bool is_flag = strcmp(name, "--json") == 0 || strcmp(name, "--progress") == 0 ||
                       strcmp(name, "--no-progress") == 0;
        if (is_flag) {
            if (value)
                return usage_error("'%s' takes no value", name);
        } else if (!value) {
            if (i + 1 >= argc)
                return usage_error("'%s' needs a value", name);
            value = argv[++i];
        }

        if (strcmp(name, "--json") == 0) {
            json = true;
        } else if (strcmp(name, "--progress") == 0) {
            config.progress = true;
        } else if (strcmp(name, "--no-progress") == 0) {
            config.progress = false;
        } else if (strcmp(name, "--timeline") == 0) {
            if (!*value)
                return usage_error("%s", "--timeline needs a file name");
            timeline_path = value;
        } else if (strcmp(name, "--plot") == 0) {
            if (!*value)
                return usage_error("%s", "--plot needs a file name");
            plot_path = value;
        } else if (strcmp(name, "--backend") == 0) {
            if (strcmp(value, "cpu") != 0)
                return usage_error("backend '%s' is not available (cpu is)", value);
        } else if (strcmp(name, "--granule") == 0) {
            if (!parse_size_t(value, &config.granule) || config.granule == 0 ||
                (config.granule & (config.granule - 1)))
                return usage_error("--granule '%s' is not a power-of-two byte count", value);
        } else if (strcmp(name, "--pool") == 0) {
            if (!parse_size_t(value, &config.pool_cap))
                return usage_error("--pool '%s' is not a byte count", value);
        } else if (strcmp(name, "--budget") == 0) {
            if (!parse_size(value, &config.budget) || config.budget == 0)
                return usage_error("--budget '%s' is not a byte count above 0", value);
            config.budget_set = true;
        } else if (strcmp(name, "--arena-capacity") == 0) {
            if (!parse_size_t(value, &config.arena_capacity) || config.arena_capacity == 0)
                return usage_error("--arena-capacity '%s' is not a byte count above 0", value);
        } else if (strcmp(name, "--arena-cache") == 0) {
            if (!parse_size_t(value, &config.arena_cache))
                return usage_error("--arena-cache '%s' is not a byte count", value);
        } else if (strcmp(name, "--fault") == 0) {
            if (!parse_fault(value, &fault))
                return usage_error("--fault '%s' is not OP or OP:N with N >= 1 (OP: reserve, "
                                   "unreserve, create, release, map, unmap, set_access, "
                                   "export, import, copy, any)",
                                   value);
            fault_op_given = true;
        } else if (strcmp(name, "--fault-rate") == 0) {
            char *end = NULL;
            errno = 0;
            double p = strtod(value, &end);
            if (errno || end == value || *end || !(p >= 0.0 && p <= 1.0))
                return usage_error("--fault-rate '%s' is not a probability in [0, 1]", value);
            fault.probability = p;
            rate_given = true;
        } else if (strcmp(name, "--seed") == 0) {
            if (!parse_u64(value, &fault.seed))
                return usage_error("--seed '%s' is not an unsigned integer", value);
        } else {
            return usage_error("unknown option '%s'", name);
        }
    }
    if (!trace_path)
        return usage_error("%s", "no trace given: ortmem-replay TRACE [options]");
    if (fault_op_given || rate_given) {
        config.fault = true;
        config.fault_options = fault;
    }

    /* Before anything runs: a replay whose plot cannot be drawn is wasted. */
    if (plot_path && !gnuplot_available()) {
        fputs("ortmem-replay: --plot needs gnuplot, which is not installed (Debian: apt-get "
              "install gnuplot-nox); nothing was replayed\n",
              stderr);
        return EXIT_USAGE;
    }

    struct timespec start, stop;
    clock_gettime(CLOCK_MONOTONIC, &start);
    replay_trace trace;
    if (!replay_trace_load(trace_path, stderr, 20, &trace))
        return EXIT_USAGE;
    clock_gettime(CLOCK_MONOTONIC, &stop);

    /* Outputs are opened before the replay so an unwritable path costs nothing. */
    int svg_fd = -1;
    if (timeline_path || plot_path) {
        config.timeline = open_timeline(timeline_path);
        if (!config.timeline) {
            replay_trace_free(&trace);
            return EXIT_USAGE;
        }
    }
    if (plot_path) {
        svg_fd = open(plot_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (svg_fd < 0) {
            fprintf(stderr, "ortmem-replay: cannot write the plot '%s': %s\n", plot_path,
                    strerror(errno));
            fclose(config.timeline);
            replay_trace_free(&trace);
            return EXIT_USAGE;
        }
    }

    replay_result result;
    memset(&result, 0, sizeof result);
    result.parse_seconds =
        (double)(stop.tv_sec - start.tv_sec) + (double)(stop.tv_nsec - start.tv_nsec) / 1e9;
    if (!replay_run(&trace, &config, &result, stderr)) {
        /* Nothing was replayed: no output stays behind. */
        if (config.timeline) {
            fclose(config.timeline);
            if (timeline_path)
                (void)remove(timeline_path);
        }
        if (svg_fd >= 0)
            (void)gnuplot_svg_close(svg_fd, plot_path, false, NULL);
        replay_trace_free(&trace);
        return EXIT_USAGE;
    }
    bool outputs_ok = true;
    if (config.timeline) {
        if (fflush(config.timeline) != 0 || ferror(config.timeline)) {
            fprintf(stderr, "ortmem-replay: writing the timeline failed: %s\n", strerror(errno));
            result.timeline_failed = true;
        }
        outputs_ok = !result.timeline_failed;
        if (outputs_ok)
            result.timeline_path = timeline_path;
    }
    if (svg_fd >= 0) {
        const char *title = strcmp(trace_path, "-") == 0 ? "standard input" : trace_path;
        bool drawn = outputs_ok && replay_plot_draw(config.timeline, svg_fd, title, stderr);
        int close_errno;
        if (gnuplot_svg_close(svg_fd, plot_path, drawn, &close_errno))
            result.plot_path = plot_path;
        else
            outputs_ok = false;
        if (close_errno)
            fprintf(stderr, "ortmem-replay: writing the plot '%s' failed: %s\n", plot_path,
                    strerror(close_errno));
    }
    if (config.timeline && fclose(config.timeline) != 0 && outputs_ok) {
        fprintf(stderr, "ortmem-replay: writing the timeline failed: %s\n", strerror(errno));
        result.timeline_path = NULL;
        outputs_ok = false;
    }
    if (json)
        replay_report_json(stdout, trace_path, &trace, &config, &result);
    else
        replay_report_text(stdout, trace_path, &trace, &config, &result);
    int status = replay_result_clean(&result) ? 0 : EXIT_FOUND_PROBLEMS;
    if (!outputs_ok)
        status = EXIT_USAGE;
    if (fflush(stdout) != 0) {
        fprintf(stderr, "ortmem-replay: writing the report failed: %s\n", strerror(errno));
        status = EXIT_USAGE;
    }
    replay_result_free(&result);
    replay_trace_free(&trace);
    return status;
}
