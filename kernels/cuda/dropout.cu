// CUDA dropout mask: the CPU kernel's counter-based generator (splitmix64 of seed + i), so the
// same seed gives the same mask bit for bit on either device (and in a CUDA graph's replays, whose
// seeds come from the graph's table: the ones eager calls would have drawn).
#include "framework/dispatch.h"
#include "framework/ops/nn_misc_kernels.h"
#include "kernels/common/splitmix64.h"
#include "kernels/cuda/graph.h"
#include "kernels/cuda/kernel_loop.cuh"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

template <class T>
__global__ void dropout_mask_kernel(T* m, int64_t n, uint64_t threshold, T keep, uint64_t seed,
                                    const uint64_t* seed_table) {
  // Captured in a CUDA graph, `seed` is a slot of the table each replay rewrites.
  if (seed_table != nullptr) seed = seed_table[seed];
  HG_KERNEL_LOOP(i, n) {
    const uint64_t u = splitmix64(seed + static_cast<uint64_t>(i)) >> 11;
    m[i] = u >= threshold ? keep : from_acc<T>(acc_t<T>(0));
  }
}

void dropout_mask_cuda(const Tensor& mask, double p, uint64_t seed) {
  const int64_t n = mask.numel();
  if (n == 0) return;
  const auto threshold = static_cast<uint64_t>(p * 0x1.0p53);
  const double scale = 1.0 / (1.0 - p);
  const int dev = mask.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(mask.dtype(), "dropout", [&]<class T>(TypeTag<T>) {
    // Rounded on the host exactly as the CPU kernel rounds it.
    const T keep = static_cast<T>(static_cast<acc_t<T>>(scale));
    dropout_mask_kernel<T><<<grid_for(n, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(mask.raw_data()), n, threshold, keep, seed, capture_seed_table(dev));
    HG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

HG_REGISTER_KERNEL(dropout_mask_stub, kCUDA, dropout_mask_cuda);

}  // namespace hg::cuda
