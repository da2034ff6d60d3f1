// CUDA cumsum and tril/triu. cumsum runs one thread per (outer, inner) row, a serial running sum
// along the dim (float32 for 16-bit and float32 data, float64 for float64, int64 for integers):
// plain, and fast enough for the row counts a model has; a block-wide scan for a few very long
// rows is left for when a profile asks for it. tril/triu is an elementwise mask.
#include "framework/dispatch.h"
#include "framework/ops/scan_kernels.h"
#include "framework/ops/triangular_kernels.h"
#include "kernels/cuda/kernel_loop.cuh"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

template <class T, class O>
__global__ void cumsum_kernel(O* __restrict__ out, const T* __restrict__ in, int64_t rows, int64_t n, int64_t inner) {
  using Acc = std::conditional_t<std::is_floating_point_v<acc_t<O>>,
                                 std::conditional_t<std::is_same_v<O, double>, double, float>, int64_t>;
  HG_KERNEL_LOOP(r, rows) {
    const int64_t base = (r / inner) * n * inner + r % inner;
    Acc acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      acc += static_cast<Acc>(to_acc(in[base + i * inner]));
      out[base + i * inner] = convert<O>(static_cast<acc_t<O>>(acc));
    }
  }
}

void cumsum_cuda(const Tensor& out, const Tensor& in) {
  const int64_t outer = in.shape()[0], n = in.shape()[1], inner = in.shape()[2];
  const int64_t rows = outer * inner;
  const int dev = in.device().index;
  DeviceGuard guard(dev);
  dispatch_dtype(in.dtype(), [&]<class T>(TypeTag<T>) {
    dispatch_dtype(out.dtype(), [&]<class O>(TypeTag<O>) {
      if constexpr (!std::is_same_v<O, bool>) {
        cumsum_kernel<T, O><<<grid_for(rows, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
            static_cast<O*>(out.raw_data()), static_cast<const T*>(in.raw_data()), rows, n, inner);
        HG_CUDA_CHECK_LAUNCH();
      }
    });
  });
}

template <class T>
__global__ void triangle_kernel(T* __restrict__ out, const T* __restrict__ in, int64_t total, int64_t rows,
                                int64_t cols, int64_t diagonal, bool upper) {
  HG_KERNEL_LOOP(k, total) {
    const int64_t j = k % cols, i = (k / cols) % rows;
    const bool keep = upper ? j - i >= diagonal : j - i <= diagonal;
    out[k] = keep ? in[k] : T{};
  }
}

void triangle_cuda(const Tensor& out, const Tensor& in, int64_t diagonal, bool upper) {
  const int64_t total = in.numel(), rows = in.shape()[1], cols = in.shape()[2];
  const int dev = in.device().index;
  DeviceGuard guard(dev);
  dispatch_dtype(in.dtype(), [&]<class T>(TypeTag<T>) {
    triangle_kernel<T><<<grid_for(total, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(out.raw_data()), static_cast<const T*>(in.raw_data()), total, rows, cols, diagonal, upper);
    HG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

HG_REGISTER_KERNEL(cumsum_stub, kCUDA, cumsum_cuda);
HG_REGISTER_KERNEL(triangle_stub, kCUDA, triangle_cuda);

}  // namespace hg::cuda
