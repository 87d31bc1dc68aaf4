/* The exporting half of the GPU suite's process-isolation test, started by
 * exec from test_gpu. Usage: gpu_ipc_exporter SOCKET_FD
 *
 * Creates an exportable granule on the CUDA backend, fills it with the
 * pattern test_gpu expects (seed 500), sends its file descriptor over the
 * socket, waits for one byte ("imported, now fault") and dies of SIGSEGV
 * without cleaning anything up. Exit 2 when something fails before that. */
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <unistd.h>

#include "gpu_support.h"

static uint8_t pattern(uint64_t seed, size_t i)
{
    /* The same bytes as tests/support.h's pattern_byte. */
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + i * 0xbf58476d1ce4e5b9ULL;
    return (uint8_t)(x >> 56) | 1;
}

static int fail(const char *what, ortmem_status st)
{
    fprintf(stderr, "gpu_ipc_exporter: %s: %s: %s\n", what, ortmem_status_str(st),
            ortmem_last_error());
    return 2;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SOCKET_FD\n", argv[0]);
        return 2;
    }
    int sock = atoi(argv[1]);
    struct rlimit no_core = {0, 0};
    (void)setrlimit(RLIMIT_CORE, &no_core); /* the fault below is on purpose */
    ortmem_backend *b = NULL;
    ortmem_status st = gpu_backend_create((ortmem_cuda_options)ORTMEM_CUDA_OPTIONS_INIT, &b);
    if (st != ORTMEM_OK)
        return fail("cuda backend", st);
    size_t g = 0;
    (void)ortmem_backend_granule(b, &g);
    ortmem_region_options ro = ORTMEM_REGION_OPTIONS_INIT;
    ro.size = g;
    ro.flags = ORTMEM_REGION_EXPORTABLE;
    ortmem_region *r = NULL;
    if ((st = ortmem_region_create(b, &ro, &r)) != ORTMEM_OK)
        return fail("region", st);
    if ((st = ortmem_region_commit(r, 0, g)) != ORTMEM_OK)
        return fail("commit", st);
    uint8_t *tmp = malloc(g);
    if (!tmp)
        return 2;
    for (size_t i = 0; i < g; i++)
        tmp[i] = pattern(500, i);
    if ((st = ortmem_backend_copy(b, ortmem_region_base(r), tmp, g)) != ORTMEM_OK)
        return fail("fill", st);
    int fd = -1;
    if ((st = ortmem_region_export(r, 0, &fd)) != ORTMEM_OK)
        return fail("export", st);
    if ((st = ortmem_fd_send(sock, fd)) != ORTMEM_OK)
        return fail("send", st);
    close(fd);
    char go;
    if (read(sock, &go, 1) != 1)
        return 2;
    /* Fault with the context, the region and the granule all still live. */
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
    return 3;
}
