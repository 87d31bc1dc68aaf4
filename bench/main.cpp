// ortmem-bench entry point: opens the jemalloc baseline, records the machine
// facts that change the numbers, and runs every scenario interleaved.
#include "harness.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace ortmem_bench
{

namespace
{

void *g_jemalloc = nullptr;
std::string g_jemalloc_missing_reason;

// Debian's libjemalloc.so.2 uses initial-exec TLS, which a dlopen can only
// place in glibc's small surplus of static TLS; this tunable enlarges it.
constexpr const char *kStaticTlsTunable = "glibc.rtld.optional_static_tls=16384";

bool static_tls_tunable_set()
{
    const char *tunables = std::getenv("GLIBC_TUNABLES");
    return tunables && std::strstr(tunables, "glibc.rtld.optional_static_tls");
}

// The tunable is read only at process start, so the harness restarts itself
// once with it set; a second failure is reported and the baseline skipped.
void reexec_with_static_tls(char **argv)
{
    const char *old_tunables = std::getenv("GLIBC_TUNABLES");
    std::string tunables = old_tunables && *old_tunables
                               ? std::string(old_tunables) + ":" + kStaticTlsTunable
                               : std::string(kStaticTlsTunable);
    if (setenv("GLIBC_TUNABLES", tunables.c_str(), 1) != 0)
        return;
    std::fflush(nullptr);
    execv("/proc/self/exe", argv);
    g_jemalloc_missing_reason +=
        "; re-exec with GLIBC_TUNABLES=" + tunables + " failed: " + std::strerror(errno);
}

void open_jemalloc(char **argv)
{
    // RTLD_LOCAL | RTLD_DEEPBIND: jemalloc's malloc binds to itself and does
    // not replace glibc malloc for the rest of the process (the other baseline).
    g_jemalloc = dlopen("libjemalloc.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (g_jemalloc)
        return;
    const char *error = dlerror();
    g_jemalloc_missing_reason = std::string("dlopen(libjemalloc.so.2) failed: ") +
                                (error ? error : "unknown error") +
                                " (Debian package libjemalloc2)";
    if (error && std::strstr(error, "static TLS") && !static_tls_tunable_set())
        reexec_with_static_tls(argv);
}

std::string first_line_of(const char *path)
{
    std::ifstream file(path);
    std::string line;
    if (!file || !std::getline(file, line))
        return "unreadable";
    return line;
}

void add_machine_context()
{
    // Anonymous THP would give the mmap baseline one 2 MiB fault instead of 512
    // 4 KiB faults; shmem THP does the same for ortmem's memfd granules.
    benchmark::AddCustomContext("thp_enabled",
                                first_line_of("/sys/kernel/mm/transparent_hugepage/enabled"));
    benchmark::AddCustomContext("thp_shmem_enabled",
                                first_line_of("/sys/kernel/mm/transparent_hugepage/shmem_enabled"));
    benchmark::AddCustomContext("page_size", std::to_string(sysconf(_SC_PAGESIZE)));
    if (!g_jemalloc) {
        benchmark::AddCustomContext("jemalloc", "missing: " + g_jemalloc_missing_reason);
        return;
    }
    using mallctl_fn = int (*)(const char *, void *, size_t *, void *, size_t);
    auto mallctl = reinterpret_cast<mallctl_fn>(dlsym(g_jemalloc, "mallctl"));
    const char *version = nullptr;
    size_t version_size = sizeof version;
    if (mallctl && mallctl("version", &version, &version_size, nullptr, 0) == 0 && version)
        benchmark::AddCustomContext("jemalloc", version);
    else
        benchmark::AddCustomContext("jemalloc", "loaded, version unknown");
}

} // namespace

void *jemalloc_handle()
{
    return g_jemalloc;
}

const std::string &jemalloc_missing_reason()
{
    return g_jemalloc_missing_reason;
}

} // namespace ortmem_bench

int main(int argc, char **argv)
{
    ortmem_bench::open_jemalloc(argv);

    // Defaults first so that the same flags given on the command line win:
    // repetitions of ortmem and its baselines run in one shuffled sequence.
    std::vector<char *> args;
    args.push_back(argv[0]);
    static char interleave[] = "--benchmark_enable_random_interleaving=true";
    static char repetitions[] = "--benchmark_repetitions=5";
    args.push_back(interleave);
    args.push_back(repetitions);
    for (int i = 1; i < argc; i++)
        args.push_back(argv[i]);
    int arg_count = static_cast<int>(args.size());
    args.push_back(nullptr);

    benchmark::Initialize(&arg_count, args.data());
    if (benchmark::ReportUnrecognizedArguments(arg_count, args.data()))
        return 1;
    ortmem_bench::add_machine_context();
    ortmem_bench::register_granule_benchmarks();
    ortmem_bench::register_arena_benchmarks();
    ortmem_bench::register_governance_benchmarks();
    ortmem_bench::register_kv_cpu_benchmarks();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
