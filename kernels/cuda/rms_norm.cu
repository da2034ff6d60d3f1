// CUDA rms_norm forward: a block per row, the sum of squares in float32 for 16-bit and float32
// data (float64 for float64), then x * rstd * weight rounded once, as the CPU kernel.
#include "framework/dispatch.h"
#include "framework/ops/rms_norm_kernels.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

constexpr int kRowThreads = 256;

// The weight read as A: x's dtype or float32 (the master-weight layout for 16-bit x), or absent.
template <class A>
struct Weight {
  const void* p = nullptr;
  Dtype dtype = kFloat32;
  __device__ A get(int64_t j) const {
    if (p == nullptr) return A(1);
    switch (dtype) {
      case kFloat16: return static_cast<A>(to_acc(static_cast<const Half*>(p)[j]));
      case kBFloat16: return static_cast<A>(to_acc(static_cast<const BFloat16*>(p)[j]));
      case kFloat64: return static_cast<A>(static_cast<const double*>(p)[j]);
      default: return static_cast<A>(static_cast<const float*>(p)[j]);
    }
  }
};

template <class T>
__global__ void rms_norm_kernel(T* y, acc_t<T>* rstd, const T* x, Weight<acc_t<T>> w, int64_t cols, double eps) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  const int64_t r = blockIdx.x;
  const T* xr = x + r * cols;
  A ss = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const A v = to_acc(xr[j]);
    ss += v * v;
  }
  const A inv = static_cast<A>(1.0 / sqrt(static_cast<double>(block_sum(ss, scratch) / static_cast<A>(cols)) + eps));
  if (threadIdx.x == 0) rstd[r] = inv;
  T* yr = y + r * cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = from_acc<T>(to_acc(xr[j]) * inv * w.get(j));
}

void rms_norm_cuda(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight, double eps) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  if (rows == 0 || cols == 0) return;
  HG_CHECK(rows <= INT32_MAX, "rms_norm", "{} rows are too many for one launch", rows);
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(x.dtype(), "rms_norm", [&]<class T>(TypeTag<T>) {
    using A = acc_t<T>;
    Weight<A> w;
    if (weight.defined()) w.p = weight.raw_data(), w.dtype = weight.dtype();
    rms_norm_kernel<T><<<static_cast<unsigned>(rows), kRowThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(out.raw_data()), static_cast<A*>(rstd.raw_data()), static_cast<const T*>(x.raw_data()), w, cols,
        eps);
    HG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

HG_REGISTER_KERNEL(rms_norm_stub, kCUDA, rms_norm_cuda);

}  // namespace hg::cuda
