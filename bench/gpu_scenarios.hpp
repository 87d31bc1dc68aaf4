// The GPU benchmark families, one file each, registered by gpu_bench.cpp.
#ifndef ORTMEM_BENCH_GPU_SCENARIOS_HPP
#define ORTMEM_BENCH_GPU_SCENARIOS_HPP

#include <cstdint>
#include <string>

namespace ortmem_bench
{

void register_commit_benchmarks();  // gpu_commit_bench.cpp
void register_kv_benchmarks();      // gpu_kv_bench.cpp
void register_trace_benchmarks();   // gpu_trace_bench.cpp
void register_offload_benchmarks(); // gpu_offload_bench.cpp

// The KV preset and growth the gpu_kv_growth_* scenarios use, for the context.
std::string kv_context();
// Writes the allocation trace for bench/torch_trace.py; false on an I/O error.
bool write_trace_file(const char *path);
std::string hex64(uint64_t value);

} // namespace ortmem_bench

#endif
