// The random numbers amp_bench and tools/amp_bench_torch.py both draw, bit for bit: SplitMix64
// counters, so both sides start from the same weights and see the same synthetic batches.
#pragma once

#include <cstdint>

namespace amp_bench {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Element i of stream `stream` under `seed`, uniform in [0, 1) with 24 random bits (exact in
// float32). The Python side computes the same with numpy uint64 arithmetic.
class StreamUniform {
 public:
  StreamUniform(uint64_t seed, uint64_t stream) : key_(splitmix64(seed + splitmix64(stream))) {}
  double operator()(uint64_t i) const { return static_cast<double>(splitmix64(key_ + i) >> 40) * 0x1p-24; }

 private:
  uint64_t key_;
};

}  // namespace amp_bench
