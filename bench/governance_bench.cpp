// Scenario 3: what accounting costs. Commit and decommit one pooled granule of
// a CPU-backend region (no touch, so the mapping calls and the ledger are all
// that is timed), once with no account and once charged to a holder of an
// authority; the baseline is the ungoverned variant, measured in the same run.
#include "harness.hpp"

#include <string>

namespace ortmem_bench
{

namespace
{

struct AuthorityDeleter {
    void operator()(ortmem_authority *a) const
    {
        (void)ortmem_authority_destroy(a);
    }
};

using AuthorityPtr = std::unique_ptr<ortmem_authority, AuthorityDeleter>;

void commit_decommit(benchmark::State &state, bool governed)
{
    ortmem_backend *raw_backend = nullptr;
    if (!ok_or_skip(state, ortmem_cpu_backend_create(nullptr, &raw_backend),
                    "ortmem_cpu_backend_create"))
        return;
    BackendPtr backend(raw_backend);
    size_t granule = 0;
    if (!ok_or_skip(state, ortmem_backend_granule(backend.get(), &granule),
                    "ortmem_backend_granule") ||
        !ok_or_skip(state, ortmem_pool_set_cap(backend.get(), granule), "ortmem_pool_set_cap"))
        return;
    AuthorityPtr authority;
    ortmem_holder *holder = nullptr;
    ortmem_account account;
    ortmem_region_options region_options = ORTMEM_REGION_OPTIONS_INIT;
    region_options.size = granule;
    if (governed) {
        ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
        ao.limit_bytes = 64 * granule;
        ortmem_authority *raw = nullptr;
        if (!ok_or_skip(state, ortmem_authority_create(backend.get(), &ao, &raw),
                        "ortmem_authority_create"))
            return;
        authority.reset(raw);
        ortmem_holder_options ho = ORTMEM_HOLDER_OPTIONS_INIT;
        ho.name = "bench";
        if (!ok_or_skip(state, ortmem_holder_register(raw, &ho, &holder),
                        "ortmem_holder_register") ||
            !ok_or_skip(state, ortmem_holder_account(holder, &account), "ortmem_holder_account"))
            return;
        region_options.account = &account;
    }
    ortmem_region *raw_region = nullptr;
    if (!ok_or_skip(state, ortmem_region_create(backend.get(), &region_options, &raw_region),
                    "ortmem_region_create"))
        return;
    {
        RegionPtr region(raw_region);
        // Warm-up: the granule is created once and pooled from then on.
        if (!ok_or_skip(state, ortmem_region_commit(region.get(), 0, granule), "warm-up commit") ||
            !ok_or_skip(state, ortmem_region_decommit(region.get(), 0, granule),
                        "warm-up decommit"))
            return;
        ortmem_vmm_stats before = backend_stats(backend.get());
        for (auto _ : state) {
            if (!ok_or_skip(state, ortmem_region_commit(region.get(), 0, granule),
                            "ortmem_region_commit") ||
                !ok_or_skip(state, ortmem_region_decommit(region.get(), 0, granule),
                            "ortmem_region_decommit"))
                break;
        }
        ortmem_vmm_stats after = backend_stats(backend.get());
        report_backend_calls(state, before, after, static_cast<double>(state.iterations()));
    }
    if (holder)
        (void)ortmem_holder_unregister(holder);
}

} // namespace

void register_governance_benchmarks()
{
    benchmark::RegisterBenchmark("governed_commit_decommit/ortmem_governed", commit_decommit, true)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark("governed_commit_decommit/baseline_ungoverned", commit_decommit,
                                 false)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
}

} // namespace ortmem_bench
