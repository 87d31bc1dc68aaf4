/* Exported granules cross a process boundary over a Unix socket. */
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.h"

#define G TEST_GRANULE

/* Child: commits an exportable granule, fills it, sends it and exits at once. */
static void exporter_process(int sock, uint64_t seed)
{
    ortmem_backend *b = test_backend();
    ortmem_region *r = region_on(b, G, ORTMEM_REGION_EXPORTABLE);
    if (ortmem_region_commit(r, 0, G) != ORTMEM_OK)
        _exit(10);
    fill_pattern(ortmem_region_base(r), G, seed);
    int fd;
    if (ortmem_region_export(r, 0, &fd) != ORTMEM_OK)
        _exit(11);
    if (ortmem_fd_send(sock, fd) != ORTMEM_OK)
        _exit(12);
    _exit(0); /* no teardown: the exporter vanishes */
}

Test(cross_process, imported_granule_shows_the_bytes_and_survives_the_exporter)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        close(sv[0]);
        exporter_process(sv[1], 99);
    }
    close(sv[1]);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exporter status %d", status);
    int fd;
    OK(ortmem_fd_recv(sv[0], &fd));
    close(sv[0]);

    ortmem_backend *b = test_backend();
    ortmem_region *r = region_on(b, 2 * G, 0);
    OK(ortmem_region_import(r, G, fd, ORTMEM_ACCESS_READ_WRITE));
    close(fd);
    uint8_t *p = (uint8_t *)ortmem_region_base(r) + G;
    cr_assert(check_pattern(p, G, 99), "bytes written by the exited exporter are intact");
    p[1] = 0x42;
    cr_assert_eq(p[1], 0x42);
    ortmem_vmm_stats s = stats_of(b);
    cr_assert_eq(s.owned_bytes, G, "an imported granule is owned by the importer");
    cr_assert_eq(s.calls[ORTMEM_OP_IMPORT], 1);
    OK(ortmem_region_destroy(r));
    cr_assert_eq(stats_of(b).owned_bytes, 0);
    OK(ortmem_backend_destroy(b));
}

Test(cross_process, writes_by_the_importer_reach_the_exporter)
{
    ortmem_backend *b = test_backend();
    ortmem_region *r = region_on(b, G, ORTMEM_REGION_EXPORTABLE);
    OK(ortmem_region_commit(r, 0, G));
    int fd;
    OK(ortmem_region_export(r, 0, &fd));
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    OK(ortmem_fd_send(sv[0], fd));
    close(fd);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int got;
        ortmem_backend *cb = test_backend();
        ortmem_region *cr = region_on(cb, G, 0);
        if (ortmem_fd_recv(sv[1], &got) != ORTMEM_OK ||
            ortmem_region_import(cr, 0, got, ORTMEM_ACCESS_READ_WRITE) != ORTMEM_OK)
            _exit(20);
        fill_pattern(ortmem_region_base(cr), G, 1234);
        _exit(0);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "importer status %d", status);
    cr_assert(check_pattern(ortmem_region_base(r), G, 1234));
    close(sv[0]);
    close(sv[1]);
    OK(ortmem_region_destroy(r));
    OK(ortmem_backend_destroy(b));
}

Test(cross_process, export_and_import_refuse_what_cannot_work)
{
    ortmem_backend *b = test_backend();
    ortmem_region *plain = region_on(b, 2 * G, 0);
    ortmem_region *exp = region_on(b, 2 * G, ORTMEM_REGION_EXPORTABLE);
    int fd = -1;
    OK(ortmem_region_commit(plain, 0, G));
    EXPECT_STATUS(ortmem_region_export(plain, 0, &fd), ORTMEM_E_UNSUPPORTED);
    EXPECT_STATUS(ortmem_region_export(exp, 0, &fd), ORTMEM_E_STATE); /* not committed */
    EXPECT_STATUS(ortmem_region_export(exp, 2 * G, &fd), ORTMEM_E_RANGE);
    EXPECT_STATUS(ortmem_region_export(exp, 0, NULL), ORTMEM_E_INVALID);
    OK(ortmem_region_commit(exp, 0, G));
    OK(ortmem_region_export(exp, 0, &fd));
    EXPECT_STATUS(ortmem_region_import(plain, 0, fd, ORTMEM_ACCESS_READ), ORTMEM_E_STATE);
    EXPECT_STATUS(ortmem_region_import(plain, 1, fd, ORTMEM_ACCESS_READ), ORTMEM_E_ALIGN);
    EXPECT_STATUS(ortmem_region_import(plain, G, -1, ORTMEM_ACCESS_READ), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_region_import(plain, G, 1000, ORTMEM_ACCESS_READ), ORTMEM_E_BACKEND);
    cr_assert_eq(stats_of(b).owned_bytes, 2 * G, "failed imports own nothing");
    close(fd);
    EXPECT_STATUS(ortmem_fd_send(-1, 0), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_fd_recv(0, NULL), ORTMEM_E_INVALID);
    OK(ortmem_region_destroy(plain));
    OK(ortmem_region_destroy(exp));
    OK(ortmem_backend_destroy(b));
}
