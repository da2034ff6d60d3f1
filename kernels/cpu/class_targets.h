// Class-index targets for the CPU loss kernels (cross_entropy, nll_loss, cross_entropy_fused_):
// the first out-of-range target noted inside a parallel loop and thrown after it, and the count of
// targets that are not ignore_index (a mean's divisor).
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "framework/error.h"
#include "framework/tensor.h"

namespace hg::cpu {

// Kernels cannot throw inside a parallel region: they note the first bad target here and the
// caller throws once the loop is done.
struct BadTarget {
  std::atomic<int64_t> position{-1};
  void note(int64_t pos) {
    int64_t none = -1;
    position.compare_exchange_strong(none, pos, std::memory_order_relaxed);
  }
  void check(std::string_view op, const int64_t* target, int64_t classes) const {
    const int64_t pos = position.load();
    if (pos >= 0) {
      fail(op, "target {} (at position {}) is out of range for {} classes: expected 0 <= target < {} or ignore_index",
           target[pos], pos, classes, classes);
    }
  }
};

// Writes the number of targets that are not ignore_index into the 0-d int64 `count`; returns it.
inline int64_t count_kept(const Tensor& count, const int64_t* target, int64_t n, int64_t ignore_index) {
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) kept += target[i] != ignore_index;
  *static_cast<int64_t*>(count.raw_data()) = kept;
  return kept;
}

}  // namespace hg::cpu
