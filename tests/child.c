/* Tools run as child processes (see child.h). */
#include "child.h"

#include "tmpdir.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

extern char **environ;

/* Whether entry ("NAME=value", from environ) is the variable change names. */
static bool names_variable(const char *entry, const char *change)
{
    size_t len = strcspn(change, "=");
    return strncmp(entry, change, len) == 0 && entry[len] == '=';
}

/* This process's environment with env's changes; the caller frees the array. */
static char **child_environment(const char *const *env)
{
    size_t envc = 0, changes = 0;
    while (environ[envc])
        envc++;
    while (env && env[changes])
        changes++;
    char **envp = calloc(envc + changes + 1, sizeof *envp);
    cr_assert_not_null(envp);
    size_t k = 0;
    for (size_t i = 0; i < envc; i++) {
        bool changed = false;
        for (size_t c = 0; c < changes && !changed; c++)
            changed = names_variable(environ[i], env[c]);
        if (!changed)
            envp[k++] = environ[i];
    }
    for (size_t c = 0; c < changes; c++) {
        if (strchr(env[c], '='))
            envp[k++] = (char *)env[c];
    }
    envp[k] = NULL;
    return envp;
}

child_result child_run(const char *path, const char *const *args, const char *const *env)
{
    size_t argc = 0;
    while (args[argc])
        argc++;
    const char **argv = calloc(argc + 2, sizeof *argv);
    cr_assert_not_null(argv);
    argv[0] = path;
    memcpy(argv + 1, args, argc * sizeof *argv);
    char **envp = child_environment(env);

    char out_path[512], err_path[512];
    snprintf(out_path, sizeof out_path, "%s/stdout.txt", tmpdir_path());
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", tmpdir_path());
    posix_spawn_file_actions_t actions;
    cr_assert_eq(posix_spawn_file_actions_init(&actions), 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&actions, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    int rc = posix_spawn(&pid, path, &actions, NULL, (char *const *)argv, envp);
    cr_assert_eq(rc, 0, "spawn %s: %s", path, strerror(rc));
    posix_spawn_file_actions_destroy(&actions);
    free(envp);
    free(argv);
    int wstatus = 0;
    cr_assert_eq(waitpid(pid, &wstatus, 0), pid);
    child_result r;
    r.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    r.out = read_file(out_path);
    r.err = read_file(err_path);
    return r;
}

void child_result_free(child_result *r)
{
    free(r->out);
    free(r->err);
}

bool gnuplot_installed(void)
{
    posix_spawn_file_actions_t actions;
    cr_assert_eq(posix_spawn_file_actions_init(&actions), 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    char *argv[] = {(char *)"gnuplot", (char *)"--version", NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "gnuplot", &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    int wstatus = 0;
    return rc == 0 && waitpid(pid, &wstatus, 0) == pid && WIFEXITED(wstatus) &&
           WEXITSTATUS(wstatus) == 0;
}
