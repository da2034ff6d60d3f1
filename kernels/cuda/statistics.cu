// CUDA var and norm: a block per row of a contiguous [rows, n] tensor, float32 sums for 16-bit and
// float32 data (float64 for float64), as the other row kernels.
#include <cmath>

#include "framework/dispatch.h"
#include "framework/ops/statistics_kernels.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

constexpr int kRowThreads = 256;

unsigned rows_grid(int64_t rows, const char* op) {
  HG_CHECK(rows <= INT32_MAX, op, "{} rows are too many for one launch", rows);
  return static_cast<unsigned>(rows);
}

template <class T>
__global__ void var_kernel(T* __restrict__ out, const T* __restrict__ in, int64_t n, double denom) {
  using C = acc_t<T>;
  __shared__ C scratch[32];
  const T* row = in + static_cast<int64_t>(blockIdx.x) * n;
  C s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += to_acc(row[i]);
  const C mean = block_sum(s, scratch) / static_cast<C>(n);
  C ss = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const C d = to_acc(row[i]) - mean;
    ss += d * d;
  }
  ss = block_sum(ss, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = from_acc<T>(static_cast<C>(ss / static_cast<C>(denom)));
}

template <class T, class O>
__global__ void norm_kernel(O* __restrict__ out, const T* __restrict__ in, int64_t n, int mode) {
  using C = std::conditional_t<std::is_same_v<T, double> || std::is_same_v<O, double>, double, float>;
  __shared__ C scratch[32];
  const T* row = in + static_cast<int64_t>(blockIdx.x) * n;
  C acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const C a = ::fabs(static_cast<C>(to_acc(row[i])));
    acc = mode == 1 ? acc + a : mode == 2 ? acc + a * a : nan_max(acc, a);
  }
  acc = mode == 0 ? block_max(acc, scratch) : block_sum(acc, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = from_acc<O>(static_cast<acc_t<O>>(mode == 2 ? ::sqrt(acc) : acc));
}

void var_cuda(const Tensor& out, const Tensor& in, double correction) {
  const int64_t rows = in.shape()[0], n = in.shape()[1];
  const int dev = in.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(in.dtype(), "var", [&]<class T>(TypeTag<T>) {
    var_kernel<T><<<rows_grid(rows, "var"), kRowThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(out.raw_data()), static_cast<const T*>(in.raw_data()), n,
        std::max(static_cast<double>(n) - correction, 0.0));
    HG_CUDA_CHECK_LAUNCH();
  });
}

void norm_cuda(const Tensor& out, const Tensor& in, double p) {
  const int64_t rows = in.shape()[0], n = in.shape()[1];
  const int mode = p == 1.0 ? 1 : p == 2.0 ? 2 : 0;  // 0: infinity
  const int dev = in.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(in.dtype(), "norm", [&]<class T>(TypeTag<T>) {
    dispatch_floating(out.dtype(), "norm", [&]<class O>(TypeTag<O>) {
      norm_kernel<T, O><<<rows_grid(rows, "norm"), kRowThreads, 0, current_stream(dev)>>>(
          static_cast<O*>(out.raw_data()), static_cast<const T*>(in.raw_data()), n, mode);
      HG_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace

HG_REGISTER_KERNEL(var_stub, kCUDA, var_cuda);
HG_REGISTER_KERNEL(norm_stub, kCUDA, norm_cuda);

}  // namespace hg::cuda
