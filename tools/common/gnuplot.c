/* Spawning gnuplot and feeding it a script on a pipe (see gnuplot.h). */
#include "gnuplot.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

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

bool gnuplot_available(void)
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

/* Starts gnuplot reading its script from script_fd and writing to svg_fd. */
static bool spawn_gnuplot(int script_fd, int svg_fd, pid_t *pid, const char *who, FILE *err)
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
        fprintf(err, "%s: cannot run gnuplot: %s\n", who, strerror(rc));
    return rc == 0;
}

bool gnuplot_draw(int svg_fd, gnuplot_script_writer write_script, void *context, const char *who,
                  FILE *err)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        fprintf(err, "%s: pipe: %s\n", who, strerror(errno));
        return false;
    }
    pid_t pid;
    bool spawned = spawn_gnuplot(fds[0], svg_fd, &pid, who, err);
    close(fds[0]);
    if (!spawned) {
        close(fds[1]);
        return false;
    }
    /* gnuplot may quit before reading everything: its end of the pipe
     * closing must make a write fail, not kill the tool. */
    struct sigaction ignore, old;
    memset(&ignore, 0, sizeof ignore);
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &old);
    FILE *script = fdopen(fds[1], "w");
    int fdopen_errno = script ? 0 : errno;
    const char *writer_failed = NULL;
    bool write_failed = false;
    if (script) {
        writer_failed = write_script(script, context);
        /* A script cut short could still draw half a plot and exit 0. */
        write_failed = ferror(script) != 0;
        write_failed = fclose(script) != 0 || write_failed;
    } else {
        close(fds[1]); /* gnuplot sees an empty script and ends */
    }
    sigaction(SIGPIPE, &old, NULL);
    int status = wait_exit(pid);
    if (!script)
        fprintf(err, "%s: %s\n", who, strerror(fdopen_errno));
    else if (writer_failed)
        fprintf(err, "%s: %s\n", who, writer_failed);
    else if (status < 0)
        fprintf(err, "%s: gnuplot was killed by a signal\n", who);
    else if (status != 0)
        fprintf(err, "%s: gnuplot exited with status %d\n", who, status);
    else if (write_failed)
        fprintf(err, "%s: gnuplot did not read the whole script\n", who);
    return script && !writer_failed && !write_failed && status == 0;
}

bool gnuplot_svg_close(int svg_fd, const char *path, bool drawn, int *close_errno)
{
    int closed = close(svg_fd) == 0 ? 0 : errno;
    if (close_errno)
        *close_errno = drawn ? closed : 0;
    if (drawn && closed == 0)
        return true;
    (void)remove(path); /* half an SVG is no plot */
    return false;
}
