/* Committed bytes over decode steps, one line per configuration, live bytes
 * for reference. The plot is gnuplot's: it reads a script on a pipe with the
 * timelines inline as datablocks, and writes the SVG to a descriptor opened
 * here (as ortmem-replay's plot does). */
#include "kvdemo.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define KD_PLOT_MAX_ROWS 2000 /* per configuration; longer timelines keep each window's peak */

static int wait_exit(pid_t pid)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool kd_plot_available(void)
{
    posix_spawn_file_actions_t actions;
    if (posix_spawn_file_actions_init(&actions) != 0)
        return false;
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    char name[] = "gnuplot", version[] = "--version";
    char *argv[] = {name, version, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, name, &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    return rc == 0 && wait_exit(pid) == 0;
}

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

static bool spawn_gnuplot(int script_fd, int svg_fd, pid_t *pid, FILE *err)
{
    posix_spawn_file_actions_t actions;
    int rc = posix_spawn_file_actions_init(&actions);
    if (rc == 0) {
        rc = posix_spawn_file_actions_adddup2(&actions, script_fd, 0);
        if (rc == 0)
            rc = posix_spawn_file_actions_adddup2(&actions, svg_fd, 1);
        char name[] = "gnuplot";
        char *argv[] = {name, NULL};
        if (rc == 0)
            rc = posix_spawnp(pid, name, &actions, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&actions);
    }
    if (rc != 0)
        fprintf(err, "ortmem-kvdemo: plot: cannot run gnuplot: %s\n", strerror(rc));
    return rc == 0;
}

bool kd_plot_draw(const kd_result *results, size_t count, int svg_fd, const char *title, FILE *err)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        fprintf(err, "ortmem-kvdemo: plot: pipe: %s\n", strerror(errno));
        return false;
    }
    pid_t pid;
    bool spawned = spawn_gnuplot(fds[0], svg_fd, &pid, err);
    close(fds[0]);
    if (!spawned) {
        close(fds[1]);
        return false;
    }
    /* gnuplot may quit before reading everything: a write must fail then,
     * not kill the demo. */
    struct sigaction ignore, old;
    memset(&ignore, 0, sizeof ignore);
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &old);
    FILE *script = fdopen(fds[1], "w");
    int fdopen_errno = script ? 0 : errno;
    bool write_failed = false;
    if (script) {
        put_script(script, results, count, title);
        write_failed = ferror(script) != 0;
        write_failed = fclose(script) != 0 || write_failed;
    } else {
        close(fds[1]);
    }
    sigaction(SIGPIPE, &old, NULL);
    int status = wait_exit(pid);
    if (!script)
        fprintf(err, "ortmem-kvdemo: plot: %s\n", strerror(fdopen_errno));
    else if (status < 0)
        fprintf(err, "ortmem-kvdemo: plot: gnuplot was killed by a signal\n");
    else if (status != 0)
        fprintf(err, "ortmem-kvdemo: plot: gnuplot exited with status %d\n", status);
    else if (write_failed)
        fprintf(err, "ortmem-kvdemo: plot: gnuplot did not read the whole script\n");
    return script && !write_failed && status == 0;
}
