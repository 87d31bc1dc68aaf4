// The fixed-seed allocation trace both benchmark binaries replay: 2,048
// allocations of 256 B to 4 MiB (log-uniform over octaves) with interleaved
// frees, shaped like the activations of an inference step. ortmem-bench
// replays it on the CPU, ortmem-gpu-bench on the device, so their counters
// and fingerprints match.
#pragma once

#include <cstdint>
#include <vector>

namespace ortmem_bench
{

// One step of the trace: allocate `size` bytes into `slot`, or free `slot`
// when size is 0.
struct TraceStep {
    uint32_t slot;
    uint32_t size;
};

struct Trace {
    std::vector<TraceStep> steps;
    uint32_t slot_count = 0;
    uint64_t allocations = 0;
    uint64_t peak_live_bytes = 0;
};

constexpr uint64_t kTraceSeed = 0x6f72746d656d0001ull;

// Generated once per process; every replay starts and ends empty.
const Trace &activation_trace();

// FNV-1a 64 over each step's slot and size (little-endian 32-bit words);
// bench/torch_trace.py computes the same over the trace file it reads.
uint64_t trace_fingerprint(const Trace &trace);

} // namespace ortmem_bench
