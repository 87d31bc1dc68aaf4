// Kernel and graph-capture tests of ortmem on the CUDA backend.
//
// A plain CUDA C++ program (no Criterion): each test prints PASS or FAIL with
// the reason, main prints "N passed, N failed" and exits 0 when all passed,
// 1 when one failed, and 77 (meson's "skipped") when no GPU is usable.
//
//   remap_survival      a memset kernel captured in a graph writes 0x5A; the
//                       granule under the VA is unmapped, released, and a new
//                       one is created and mapped at the same VA and filled
//                       with 0x77; the same graph replayed writes 0x5A again.
//   read_bounded        a kernel bounded to the live length leaves the tail
//                       uncommitted, also under graph replay; a padded read
//                       over a shared read-only zero granule returns zeros.
//   kv_graph_growth     a graph writing into a stable KV binding keeps working
//                       across growth with zero re-captures; bucket growth
//                       moves the binding (counted as a needed re-capture) and
//                       carries the bytes along on the device.
//   offload_ring_graph  a graph captured over a residency cache's ring slot
//                       and a pinned resident slot replays across ring
//                       refills with no re-capture, reading each refill's
//                       sentinel; a refill waits for the replay still reading
//                       the slot (the release's event on the compute stream).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include <ortmem/governance.h>
#include <ortmem/kv.h>
#include <ortmem/offload.h>
#include <ortmem/vmm.h>

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        std::printf("  FAIL %s:%d: ", __FILE__, __LINE__);                                         \
        std::printf(__VA_ARGS__);                                                                  \
        std::printf("\n");                                                                         \
        return false;                                                                              \
    } while (0)

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            FAIL(__VA_ARGS__);                                                                     \
    } while (0)

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            FAIL("%s -> %s (%s)", #call, cudaGetErrorName(e_), cudaGetErrorString(e_));            \
    } while (0)

#define OM_OK(call)                                                                                \
    do {                                                                                           \
        ortmem_status s_ = (call);                                                                 \
        if (s_ != ORTMEM_OK)                                                                       \
            FAIL("%s -> %s: %s", #call, ortmem_status_str(s_), ortmem_last_error());               \
    } while (0)

__global__ void fill_kernel(unsigned char *p, unsigned char v, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}

__global__ void sum_kernel(const unsigned char *p, size_t n, unsigned long long *out)
{
    unsigned long long local = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        local += p[i];
    atomicAdd(out, local);
}

// Spins for about `cycles` clock cycles: a replay that is still running when
// the host releases the slot it reads.
__global__ void spin_kernel(long long cycles)
{
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

static const int kBlocks = 264, kThreads = 256;

static ortmem_backend *g_backend;
static size_t g_granule;

static uint64_t stream_id(cudaStream_t s)
{
    return (uint64_t)(uintptr_t)s;
}

static ortmem_vmm_stats stats()
{
    ortmem_vmm_stats s;
    std::memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    (void)ortmem_backend_stats(g_backend, &s);
    return s;
}

static ortmem_granule_info granule_info(ortmem_region *r, size_t offset)
{
    ortmem_granule_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    (void)ortmem_region_granule_info(r, offset, &info);
    return info;
}

// Counts bytes of [p, p+n) (device) that differ from v; -1 when the copy fails.
static long long count_not(const void *p, size_t n, unsigned char v)
{
    std::vector<unsigned char> h(n);
    if (cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost) != cudaSuccess)
        return -1;
    long long bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += h[i] != v;
    return bad;
}

static ortmem_region *make_region(size_t size)
{
    ortmem_region_options o = ORTMEM_REGION_OPTIONS_INIT;
    o.size = size;
    ortmem_region *r = nullptr;
    return ortmem_region_create(g_backend, &o, &r) == ORTMEM_OK ? r : nullptr;
}

static bool remap_survival()
{
    const size_t g = g_granule;
    ortmem_region *r = make_region(g);
    CHECK(r, "region: %s", ortmem_last_error());
    OM_OK(ortmem_region_commit(r, 0, g));
    unsigned char *p = (unsigned char *)ortmem_region_base(r);
    uint64_t creates = stats().calls[ORTMEM_OP_CREATE];

    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    fill_kernel<<<kBlocks, kThreads, 0, s>>>(p, 0x5A, g);
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CHECK(count_not(p, g, 0x5A) == 0, "first replay: %lld bytes are not 0x5A",
          count_not(p, g, 0x5A));

    // Unmap and release the granule, create and map a new one at the same VA.
    OM_OK(ortmem_region_decommit(r, 0, g));
    CHECK(granule_info(r, 0).state == ORTMEM_GRANULE_UNMAPPED, "decommitted");
    OM_OK(ortmem_region_commit(r, 0, g));
    CHECK(ortmem_region_base(r) == p, "same VA");
    CHECK(stats().calls[ORTMEM_OP_CREATE] == creates + 1, "a new physical granule was created");
    CHECK(stats().calls[ORTMEM_OP_RELEASE] >= 1, "the old one was released");
    OM_OK(ortmem_backend_memset_async(g_backend, p, 0x77, g, stream_id(s)));
    CUDA_OK(cudaStreamSynchronize(s));
    CHECK(count_not(p, g, 0x77) == 0, "the new granule holds the 0x77 sentinel");

    // The same graph, not re-captured, writes into the new granule.
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaStreamSynchronize(s));
    long long bad = count_not(p, g, 0x5A);
    CHECK(bad == 0, "replay after the remap: %lld bytes are not 0x5A", bad);

    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaStreamDestroy(s));
    OM_OK(ortmem_region_destroy(r));
    return true;
}

static bool read_bounded()
{
    const size_t g = g_granule, span = 8 * g, live = g + g / 2;
    ortmem_region *r = make_region(span);
    CHECK(r, "region: %s", ortmem_last_error());
    OM_OK(ortmem_region_commit(r, 0, live));
    unsigned char *p = (unsigned char *)ortmem_region_base(r);
    CHECK(stats().owned_bytes == 2 * g, "two granules hold the live bytes");

    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned long long *sum = nullptr;
    CUDA_OK(cudaMalloc(&sum, sizeof *sum));
    // Fresh device granules hold whatever they held: zero the committed ones.
    OM_OK(ortmem_backend_memset_async(g_backend, p, 0, 2 * g, stream_id(s)));

    // A graph bounded to the live length: fill [0, live) with 1, then sum it.
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CUDA_OK(cudaMemsetAsync(sum, 0, sizeof *sum, s));
    fill_kernel<<<kBlocks, kThreads, 0, s>>>(p, 1, live);
    sum_kernel<<<kBlocks, kThreads, 0, s>>>(p, live, sum);
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 3; replay++) {
        CUDA_OK(cudaGraphLaunch(exec, s));
        CUDA_OK(cudaStreamSynchronize(s));
        unsigned long long h = 0;
        CUDA_OK(cudaMemcpy(&h, sum, sizeof h, cudaMemcpyDeviceToHost));
        CHECK(h == live, "replay %d: sum %llu, want %zu", replay, h, live);
    }
    for (size_t k = 2; k < 8; k++)
        CHECK(granule_info(r, k * g).state == ORTMEM_GRANULE_UNMAPPED,
              "granule %zu of the tail stays uncommitted", k);
    CHECK(stats().owned_bytes == 2 * g, "nothing else was committed");

    // A zero tail: one read-only granule of zeros shared over granules 2..7.
    ortmem_region *z = make_region(g);
    CHECK(z, "zero region: %s", ortmem_last_error());
    OM_OK(ortmem_region_commit(z, 0, g));
    OM_OK(ortmem_backend_memset_async(g_backend, ortmem_region_base(z), 0, g, stream_id(s)));
    CUDA_OK(cudaStreamSynchronize(s));
    OM_OK(ortmem_region_protect(z, 0, g, ORTMEM_ACCESS_READ));
    for (size_t k = 2; k < 8; k++)
        OM_OK(ortmem_region_share(r, k * g, z, 0, g, ORTMEM_ACCESS_READ));
    CHECK(stats().owned_bytes == 3 * g, "the zero granule is owned once");
    CHECK(granule_info(z, 0).mappers == 7, "mapped by its region and six tail slots");

    // A padded read over the whole span, direct and captured.
    cudaGraph_t padded;
    cudaGraphExec_t padded_exec;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CUDA_OK(cudaMemsetAsync(sum, 0, sizeof *sum, s));
    sum_kernel<<<kBlocks, kThreads, 0, s>>>(p, span, sum);
    CUDA_OK(cudaStreamEndCapture(s, &padded));
    CUDA_OK(cudaGraphInstantiate(&padded_exec, padded, 0));
    for (int replay = 0; replay < 2; replay++) {
        CUDA_OK(cudaGraphLaunch(padded_exec, s));
        CUDA_OK(cudaStreamSynchronize(s));
        unsigned long long h = 0;
        CUDA_OK(cudaMemcpy(&h, sum, sizeof h, cudaMemcpyDeviceToHost));
        CHECK(h == live, "padded read %d: sum %llu, want %zu (the tail reads zeros)", replay, h,
              live);
    }
    CHECK(count_not(p + 5 * g, g, 0) == 0, "the tail reads zeros");

    CUDA_OK(cudaGraphExecDestroy(padded_exec));
    CUDA_OK(cudaGraphDestroy(padded));
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaFree(sum));
    CUDA_OK(cudaStreamDestroy(s));
    OM_OK(ortmem_region_destroy(r));
    OM_OK(ortmem_region_destroy(z));
    CHECK(stats().owned_bytes == 0, "nothing left owned");
    return true;
}

static bool binding(ortmem_kv_seq *seq, ortmem_kv_binding *b)
{
    std::memset(b, 0, sizeof *b);
    b->struct_size = sizeof *b;
    OM_OK(ortmem_kv_seq_binding(seq, 0, 0, b));
    return true;
}

static bool kv_graph_growth()
{
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = (uint64_t)8 << 30;
    ortmem_authority *a = nullptr;
    OM_OK(ortmem_authority_create(g_backend, &ao, &a));
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int recaptures = 0, invalidations = 0;

    for (int strategy = ORTMEM_KV_STABLE; strategy <= ORTMEM_KV_BUCKET; strategy++) {
        ortmem_kv_cache_options o = ORTMEM_KV_CACHE_OPTIONS_INIT;
        o.geometry.layers = 2;
        o.geometry.kv_heads = 2;
        o.geometry.head_dim = 128;
        o.geometry.dtype = ORTMEM_KV_F16;
        o.geometry.layout = ORTMEM_KV_HEAD_MAJOR;
        o.strategy = (ortmem_kv_strategy)strategy;
        o.max_context = 65536;
        o.graph_capture = 1;
        ortmem_kv_cache *c = nullptr;
        OM_OK(ortmem_kv_cache_create(a, &o, &c));
        ortmem_kv_seq *seq = nullptr;
        OM_OK(ortmem_kv_seq_create(c, &seq));
        OM_OK(ortmem_kv_seq_append(seq, 100));
        ortmem_kv_binding before, after;
        if (!binding(seq, &before))
            return false;
        size_t rows = (size_t)before.token_stride * 100;

        // A graph that writes the first 100 tokens of head 0 of layer 0's K.
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        fill_kernel<<<kBlocks, kThreads, 0, s>>>((unsigned char *)before.base, 0xAB, rows);
        CUDA_OK(cudaStreamEndCapture(s, &graph));
        CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
        CUDA_OK(cudaGraphLaunch(exec, s));
        CUDA_OK(cudaStreamSynchronize(s));
        CHECK(count_not(before.base, rows, 0xAB) == 0, "%s: the graph wrote the rows",
              ortmem_kv_strategy_name(o.strategy));

        OM_OK(ortmem_kv_seq_append(seq, 30000));
        if (!binding(seq, &after))
            return false;
        bool stable = after.base == before.base && after.generation == before.generation;
        if (strategy == ORTMEM_KV_STABLE) {
            CHECK(stable, "stable growth kept the binding");
            // Prove the replay after growth is what writes the bytes.
            CUDA_OK(cudaMemsetAsync(before.base, 0, rows, s));
            CUDA_OK(cudaGraphLaunch(exec, s));
            CUDA_OK(cudaStreamSynchronize(s));
            CHECK(count_not(after.base, rows, 0xAB) == 0, "stable: replay after growth");
        } else {
            CHECK(!stable, "bucket growth moved the binding");
            invalidations++; // the engine must re-capture: its graph names the old base
            CHECK(count_not(after.base, rows, 0xAB) == 0, "bucket: the rows moved on the device");
            recaptures++;
        }
        CUDA_OK(cudaGraphExecDestroy(exec));
        CUDA_OK(cudaGraphDestroy(graph));
        OM_OK(ortmem_kv_seq_destroy(seq));
        OM_OK(ortmem_kv_cache_destroy(c));
    }
    std::printf("  kv: stable growth needed 0 re-captures; bucket growth invalidated %d graph(s), "
                "%d re-capture(s)\n",
                invalidations, recaptures);
    CHECK(invalidations == 1, "one invalidation, by the bucket growth");
    CUDA_OK(cudaStreamDestroy(s));
    OM_OK(ortmem_authority_destroy(a));
    return true;
}

static ortmem_status host_register(void *, void *ptr, size_t bytes)
{
    cudaError_t e = cudaHostRegister(ptr, bytes, cudaHostRegisterDefault);
    return e == cudaSuccess ? ORTMEM_OK
                            : ortmem_error_set(ORTMEM_E_BACKEND, "cudaHostRegister(%zu) -> %s",
                                               bytes, cudaGetErrorName(e));
}

static void host_unregister(void *, void *ptr, size_t)
{
    (void)cudaHostUnregister(ptr);
}

static bool offload_ring_graph()
{
    const size_t n = 1 << 20; // bytes per tensor
    const uint32_t tensors = 4;
    ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
    ao.limit_bytes = (uint64_t)1 << 30;
    ortmem_authority *a = nullptr;
    OM_OK(ortmem_authority_create(g_backend, &ao, &a));
    ortmem_staging_options so = ORTMEM_STAGING_OPTIONS_INIT;
    so.host_register = host_register;
    so.host_unregister = host_unregister;
    ortmem_staging *staging = nullptr;
    OM_OK(ortmem_staging_create(&so, &staging));
    const char *names[tensors] = {"t0", "t1", "t2", "t3"};
    ortmem_weight_tensor table[tensors];
    for (uint32_t i = 0; i < tensors; i++)
        table[i] = {names[i], 0, n, i, ORTMEM_WEIGHT_MLP, i};
    ortmem_weight_catalog *catalog = nullptr;
    OM_OK(ortmem_weight_catalog_create_host(staging, table, tensors, &catalog));
    for (uint32_t i = 0; i < tensors; i++) {
        void *host = nullptr;
        OM_OK(ortmem_weight_catalog_host(catalog, i, &host));
        std::memset(host, 0x10 + (int)i, n);
    }
    cudaStream_t s, copy;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
    // Room for one resident slot and one ring slot: t0 pinned resident, the
    // others stream through the ring.
    ortmem_residency_options o = ORTMEM_RESIDENCY_OPTIONS_INIT;
    o.budget_bytes = 2 * g_granule;
    o.ring_slots = 1;
    o.copy_stream = stream_id(copy);
    o.compute_stream = stream_id(s);
    ortmem_residency_cache *cache = nullptr;
    OM_OK(ortmem_residency_cache_create(a, catalog, &o, &cache));
    OM_OK(ortmem_residency_pin(cache, 0));
    void *resident = nullptr, *ring = nullptr, *p = nullptr;
    OM_OK(ortmem_residency_acquire(cache, 0, &resident));
    OM_OK(ortmem_residency_acquire(cache, 1, &ring));
    ortmem_residency_stats st;
    std::memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    OM_OK(ortmem_residency_stats_get(cache, &st));
    CHECK(st.streamed == 1, "t1 went through the ring (%llu streamed)",
          (unsigned long long)st.streamed);

    unsigned long long *sums = nullptr;
    CUDA_OK(cudaMalloc(&sums, 2 * sizeof *sums));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CUDA_OK(cudaMemsetAsync(sums, 0, 2 * sizeof *sums, s));
    spin_kernel<<<1, 1, 0, s>>>(20000000); // ~10 ms: still running at the release
    sum_kernel<<<kBlocks, kThreads, 0, s>>>((const unsigned char *)ring, n, sums);
    sum_kernel<<<kBlocks, kThreads, 0, s>>>((const unsigned char *)resident, n, sums + 1);
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

    for (uint32_t t = 1; t < tensors; t++) {
        // The replay reads tensor t in the ring slot; the host releases it
        // at once and refills the slot with the next tensor: the refill must
        // wait for the replay's reads.
        CUDA_OK(cudaGraphLaunch(exec, s));
        OM_OK(ortmem_residency_release(cache, t));
        if (t + 1 < tensors) {
            OM_OK(ortmem_residency_acquire(cache, t + 1, &p));
            CHECK(p == ring, "tensor %u refilled the same ring slot (%p, the ring is %p)", t + 1, p,
                  ring);
        }
        CUDA_OK(cudaStreamSynchronize(s));
        unsigned long long h[2] = {0, 0};
        CUDA_OK(cudaMemcpy(h, sums, sizeof h, cudaMemcpyDeviceToHost));
        CHECK(h[0] == (unsigned long long)(0x10 + t) * n,
              "replay over tensor %u read sum %llu, want %llu (the refill overtook the replay?)", t,
              h[0], (unsigned long long)(0x10 + t) * n);
        CHECK(h[1] == 0x10ull * n, "the pinned resident slot read %llu, want %llu", h[1],
              0x10ull * n);
    }
    OM_OK(ortmem_residency_stats_get(cache, &st));
    CHECK(st.streamed == tensors - 1, "t1..t3 streamed (%llu)", (unsigned long long)st.streamed);
    CHECK(st.stalls >= 2, "both refills waited for the replay (%llu stalls)",
          (unsigned long long)st.stalls);
    std::printf("  ring refills %u, stalls %llu, stall %.2f ms, bytes moved %llu\n", tensors - 2,
                (unsigned long long)st.stalls, st.stall_ns / 1e6,
                (unsigned long long)st.bytes_moved);

    OM_OK(ortmem_residency_release(cache, 0));
    OM_OK(ortmem_residency_unpin(cache, 0));
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaFree(sums));
    OM_OK(ortmem_residency_cache_destroy(cache));
    OM_OK(ortmem_weight_catalog_destroy(catalog));
    OM_OK(ortmem_staging_destroy(staging));
    CUDA_OK(cudaStreamDestroy(copy));
    CUDA_OK(cudaStreamDestroy(s));
    OM_OK(ortmem_authority_destroy(a));
    return true;
}

int main()
{
    int devices = 0;
    cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0) {
        std::printf("graph_tests: GPU unavailable: %s\n",
                    e != cudaSuccess ? cudaGetErrorString(e) : "no devices");
        std::printf("0 passed, 0 failed (skipped: no GPU)\n");
        return 77;
    }
    if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaFree(nullptr)) != cudaSuccess) {
        std::printf("graph_tests: device 0 unusable: %s\n0 passed, 0 failed (skipped)\n",
                    cudaGetErrorString(e));
        return 77;
    }
    ortmem_cuda_options o = ORTMEM_CUDA_OPTIONS_INIT;
    ortmem_status st = ortmem_cuda_backend_create(&o, &g_backend);
    if (st != ORTMEM_OK) {
        std::printf("graph_tests: CUDA backend unavailable: %s: %s\n", ortmem_status_str(st),
                    ortmem_last_error());
        std::printf("0 passed, 0 failed (skipped)\n");
        return st == ORTMEM_E_UNAVAILABLE ? 77 : 1;
    }
    (void)ortmem_backend_granule(g_backend, &g_granule);
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        std::printf("graph_tests: %s, granule %zu bytes\n", prop.name, g_granule);

    struct {
        const char *name;
        bool (*fn)();
    } tests[] = {
        {"remap_survival", remap_survival},
        {"read_bounded", read_bounded},
        {"kv_graph_growth", kv_graph_growth},
        {"offload_ring_graph", offload_ring_graph},
    };
    int passed = 0, failed = 0;
    for (auto &t : tests) {
        std::printf("[RUN ] %s\n", t.name);
        std::fflush(stdout);
        bool ok = t.fn();
        cudaError_t sticky = cudaDeviceSynchronize();
        if (ok && sticky != cudaSuccess) {
            std::printf("  FAIL: device error after the test: %s\n", cudaGetErrorString(sticky));
            ok = false;
        }
        std::printf("[%s] %s\n", ok ? "PASS" : "FAIL", t.name);
        (ok ? passed : failed)++;
    }
    ortmem_status end = ortmem_backend_destroy(g_backend);
    if (end != ORTMEM_OK)
        std::printf("backend destroy: %s: %s\n", ortmem_status_str(end), ortmem_last_error());
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
