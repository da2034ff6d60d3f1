// CPU dropout mask: a counter-based generator (splitmix64 of seed + i), so each element's draw
// is independent of how the loop is split across threads.
#include "framework/ops/nn_misc_kernels.h"
#include "kernels/common/splitmix64.h"
#include "kernels/cpu/loops.h"

namespace hg::cpu {
namespace {

void dropout_mask_cpu(const Tensor& mask, double p, uint64_t seed) {
  // Keep when the 53-bit uniform draw u >= p: P(drop) = p exactly up to 2^-53.
  const auto threshold = static_cast<uint64_t>(p * 0x1.0p53);
  const double scale = 1.0 / (1.0 - p);
  dispatch_floating(mask.dtype(), "dropout", [&]<class T>(TypeTag<T>) {
    T* m = static_cast<T*>(mask.raw_data());
    const T keep = static_cast<T>(static_cast<acc_t<T>>(scale));
    parallel_for(mask.numel(), kParallelGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const uint64_t u = splitmix64(seed + static_cast<uint64_t>(i)) >> 11;
        m[i] = u >= threshold ? keep : T(0);
      }
    });
  });
}

}  // namespace

HG_REGISTER_KERNEL(dropout_mask_stub, kCPU, dropout_mask_cpu);

}  // namespace hg::cpu
