// CUDA logsumexp: a block per row of a contiguous [outer, n, inner] block (elements `inner`
// apart): the row's max, then its shifted exponentials summed, float32 maths for 16-bit and
// float32 data and float64 for float64, as the CPU kernel.
#include "framework/dispatch.h"
#include "framework/ops/logsumexp_kernels.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

constexpr int kRowThreads = 256;

template <class T, class C>
__global__ void logsumexp_kernel(T* __restrict__ y, const T* __restrict__ x, int64_t n, int64_t inner) {
  __shared__ C scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + (row / inner) * n * inner + row % inner;
  C m = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = nan_max(m, static_cast<C>(to_acc(xr[i * inner])));
  m = block_max(m, scratch);
  if (isinf(m)) m = 0;  // -inf rows give log(0) = -inf, +inf rows +inf, as PyTorch's
  C part = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) part += exp(static_cast<C>(to_acc(xr[i * inner])) - m);
  const C s = block_sum(part, scratch);
  if (threadIdx.x == 0) y[row] = from_acc<T>(static_cast<acc_t<T>>(m + ::log(s)));
}

void logsumexp_cuda(const Tensor& out, const Tensor& in) {
  const int64_t outer = in.shape()[0], n = in.shape()[1], inner = in.shape()[2];
  if (outer * n * inner == 0) return;
  HG_CHECK(outer * inner <= INT32_MAX, "logsumexp", "{} rows are too many for one launch", outer * inner);
  const int dev = in.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(in.dtype(), "logsumexp", [&]<class T>(TypeTag<T>) {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    logsumexp_kernel<T, C><<<static_cast<unsigned>(outer * inner), kRowThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(out.raw_data()), static_cast<const T*>(in.raw_data()), n, inner);
    HG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

HG_REGISTER_KERNEL(logsumexp_stub, kCUDA, logsumexp_cuda);

}  // namespace hg::cuda
