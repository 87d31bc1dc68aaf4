/* Memory over time: the timeline CSV (a row of the ledger after each op, or
 * each K ops) and its plot. The plot is gnuplot's: the replay feeds it a
 * script on a pipe, with the CSV inline as a datablock, so no path has to be
 * quoted for gnuplot and the SVG goes to a descriptor opened here. */
#include "replay.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

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

/* Waits for pid; returns its exit status, or -1 when it did not exit. */
static int wait_exit(pid_t pid)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool replay_plot_available(void)
{
    posix_spawn_file_actions_t actions;
    if (posix_spawn_file_actions_init(&actions) != 0)
        return false;
    /* Only whether it runs matters; its banner would clutter the report. */
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    char name[] = "gnuplot", version[] = "--version";
    char *argv[] = {name, version, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, name, &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    return rc == 0 && wait_exit(pid) == 0;
}

/* The title as a gnuplot single-quoted string's inside: ' doubles, and what
 * would break the script or the SVG's XML (control bytes, invalid UTF-8)
 * becomes '?'. gnuplot's svg terminal escapes & and < itself. */
static void put_title_text(FILE *script, const char *text)
{
    const unsigned char *p = (const unsigned char *)text;
    while (*p) {
        size_t len = replay_utf8_sequence(p);
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

/* Starts gnuplot reading its script from script_fd and writing to svg_fd.
 * Its stderr stays ours, so gnuplot's own complaints reach the user. */
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
        fprintf(err, "ortmem-replay: plot: cannot run gnuplot: %s\n", strerror(rc));
    return rc == 0;
}

bool replay_plot_draw(FILE *timeline, int svg_fd, const char *title, FILE *err)
{
    if (fflush(timeline) != 0 || fseek(timeline, 0, SEEK_SET) != 0) {
        fprintf(err, "ortmem-replay: plot: cannot read the timeline back: %s\n", strerror(errno));
        return false;
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        fprintf(err, "ortmem-replay: plot: pipe: %s\n", strerror(errno));
        return false;
    }
    pid_t pid;
    bool spawned = spawn_gnuplot(fds[0], svg_fd, &pid, err);
    close(fds[0]);
    if (!spawned) {
        close(fds[1]);
        return false;
    }
    /* gnuplot may quit before reading everything: its end of the pipe
     * closing must make a write fail, not kill the replay. */
    struct sigaction ignore, old;
    memset(&ignore, 0, sizeof ignore);
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &old);
    FILE *script = fdopen(fds[1], "w");
    int fdopen_errno = script ? 0 : errno;
    bool read_failed = false, write_failed = false;
    if (script) {
        put_script(script, timeline, title);
        read_failed = ferror(timeline) != 0;
        /* A script cut short could still draw half a plot and exit 0. */
        write_failed = ferror(script) != 0;
        write_failed = fclose(script) != 0 || write_failed;
    } else {
        close(fds[1]); /* gnuplot sees an empty script and ends */
    }
    sigaction(SIGPIPE, &old, NULL);
    int status = wait_exit(pid);
    if (!script)
        fprintf(err, "ortmem-replay: plot: %s\n", strerror(fdopen_errno));
    else if (read_failed)
        fprintf(err, "ortmem-replay: plot: reading the timeline back failed\n");
    else if (status < 0)
        fprintf(err, "ortmem-replay: plot: gnuplot was killed by a signal\n");
    else if (status != 0)
        fprintf(err, "ortmem-replay: plot: gnuplot exited with status %d\n", status);
    else if (write_failed)
        fprintf(err, "ortmem-replay: plot: gnuplot did not read the whole script\n");
    return script && !read_failed && !write_failed && status == 0;
}
