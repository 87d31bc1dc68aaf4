// The activation trace (activation_trace.hpp): generation and fingerprint.
#include "activation_trace.hpp"

#include <cstddef>
#include <utility>

namespace ortmem_bench
{

namespace
{

// splitmix64: a fixed seed gives the same trace on every machine and run.
class SplitMix64
{
  public:
    explicit SplitMix64(uint64_t seed) : state_(seed)
    {
    }
    uint64_t next()
    {
        uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    uint64_t below(uint64_t bound)
    {
        return next() % bound;
    }

  private:
    uint64_t state_;
};

constexpr int kTraceAllocations = 2048;
constexpr size_t kMaxLiveAllocations = 48;
constexpr unsigned kSmallestOctave = 8; // 256 B
constexpr unsigned kLargestOctave = 21; // sizes up to 4 MiB - 1

Trace make_activation_trace()
{
    Trace trace;
    SplitMix64 rng(kTraceSeed);
    std::vector<std::pair<uint32_t, uint32_t>> live; // (slot, size), oldest first
    std::vector<uint32_t> free_slots;
    uint64_t live_bytes = 0;

    auto free_at = [&](size_t index) {
        auto [slot, size] = live[index];
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(index));
        live_bytes -= size;
        free_slots.push_back(slot);
        trace.steps.push_back({slot, 0});
    };

    for (int i = 0; i < kTraceAllocations; i++) {
        // Log-uniform over octaves: as many 256 B norms as 2 MiB logits.
        unsigned octave = kSmallestOctave +
                          static_cast<unsigned>(rng.below(kLargestOctave - kSmallestOctave + 1));
        uint32_t size = (1u << octave) + static_cast<uint32_t>(rng.below(1u << octave));
        uint32_t slot;
        if (free_slots.empty()) {
            slot = trace.slot_count++;
        } else {
            slot = free_slots.back();
            free_slots.pop_back();
        }
        trace.steps.push_back({slot, size});
        trace.allocations++;
        live.emplace_back(slot, size);
        live_bytes += size;
        if (live_bytes > trace.peak_live_bytes)
            trace.peak_live_bytes = live_bytes;

        // Then 0-2 frees, one on average: mostly the newest block (scratch),
        // sometimes the oldest (a consumed input), sometimes any.
        size_t frees = live.size() >= kMaxLiveAllocations ? 2 : rng.below(3);
        for (size_t f = 0; f < frees && !live.empty(); f++) {
            uint64_t pick = rng.below(4);
            size_t index = pick < 2    ? live.size() - 1
                           : pick == 2 ? 0
                                       : static_cast<size_t>(rng.below(live.size()));
            free_at(index);
        }
    }
    // The step ends with everything freed, so every replay starts empty.
    while (!live.empty())
        free_at(static_cast<size_t>(rng.below(live.size())));
    return trace;
}

} // namespace

const Trace &activation_trace()
{
    static const Trace trace = make_activation_trace();
    return trace;
}

uint64_t trace_fingerprint(const Trace &trace)
{
    uint64_t hash = 0xcbf29ce484222325ull;
    auto mix = [&hash](uint32_t word) {
        for (int byte = 0; byte < 4; byte++) {
            hash ^= (word >> (8 * byte)) & 0xffu;
            hash *= 0x100000001b3ull;
        }
    };
    for (const TraceStep &step : trace.steps) {
        mix(step.slot);
        mix(step.size);
    }
    return hash;
}

} // namespace ortmem_bench
