// CUDA adaptive pooling over [P, H, W] planes: a thread per output (a block per plane for a 1x1
// average, the global pooling of ResNet's head), and for the average's backward a thread per
// input element gathering from the bins that hold it (no atomics). Sums in float32 (float64 for
// float64), as the CPU kernels.
#include "framework/dispatch.h"
#include "framework/ops/adaptive_pool_kernels.h"
#include "kernels/common/adaptive_bins.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/kernel_loop.cuh"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

using adaptive::bin_end;
using adaptive::bin_start;

constexpr int kPlaneThreads = 256;

template <class T>
using PoolAcc = std::conditional_t<std::is_same_v<T, double>, double, float>;

struct AdaptiveShape {
  int64_t h, w, oh, ow;
};

template <class T>
__global__ void adaptive_avg_kernel(T* y, const T* x, AdaptiveShape s, int64_t total) {
  using A = PoolAcc<T>;
  HG_KERNEL_LOOP(o, total) {
    const int64_t j = o % s.ow, i = (o / s.ow) % s.oh, p = o / (s.ow * s.oh);
    const int64_t h0 = bin_start(i, s.h, s.oh), h1 = bin_end(i, s.h, s.oh);
    const int64_t w0 = bin_start(j, s.w, s.ow), w1 = bin_end(j, s.w, s.ow);
    const T* xp = x + p * s.h * s.w;
    A sum = 0;
    for (int64_t r = h0; r < h1; ++r)
      for (int64_t c = w0; c < w1; ++c) sum += static_cast<A>(to_acc(xp[r * s.w + c]));
    y[o] = from_acc<T>(static_cast<acc_t<T>>(sum / static_cast<A>((h1 - h0) * (w1 - w0))));
  }
}

// Global pooling: a block per plane sums its contiguous h * w run.
template <class T>
__global__ void adaptive_avg_global_kernel(T* y, const T* x, int64_t hw) {
  using A = PoolAcc<T>;
  __shared__ A scratch[32];
  const T* xp = x + static_cast<int64_t>(blockIdx.x) * hw;
  A part = 0;
  for (int64_t i = threadIdx.x; i < hw; i += blockDim.x) part += static_cast<A>(to_acc(xp[i]));
  const A sum = block_sum(part, scratch);
  if (threadIdx.x == 0) y[blockIdx.x] = from_acc<T>(static_cast<acc_t<T>>(sum / static_cast<A>(hw)));
}

template <class T>
__global__ void adaptive_avg_backward_kernel(T* gx, const T* gy, AdaptiveShape s, int64_t total) {
  using A = PoolAcc<T>;
  HG_KERNEL_LOOP(k, total) {
    const int64_t c = k % s.w, r = (k / s.w) % s.h, p = k / (s.w * s.h);
    const T* gp = gy + p * s.oh * s.ow;
    A sum = 0;
    for (int64_t i = bin_start(r, s.oh, s.h); i < bin_end(r, s.oh, s.h); ++i) {
      const A rows = static_cast<A>(bin_end(i, s.h, s.oh) - bin_start(i, s.h, s.oh));
      for (int64_t j = bin_start(c, s.ow, s.w); j < bin_end(c, s.ow, s.w); ++j) {
        const A cols = static_cast<A>(bin_end(j, s.w, s.ow) - bin_start(j, s.w, s.ow));
        sum += static_cast<A>(to_acc(gp[i * s.ow + j])) / (rows * cols);
      }
    }
    gx[k] = from_acc<T>(static_cast<acc_t<T>>(sum));
  }
}

template <class T>
__global__ void adaptive_max_kernel(T* y, int64_t* ix, const T* x, AdaptiveShape s, int64_t total) {
  using A = acc_t<T>;
  HG_KERNEL_LOOP(o, total) {
    const int64_t j = o % s.ow, i = (o / s.ow) % s.oh, p = o / (s.ow * s.oh);
    const int64_t h0 = bin_start(i, s.h, s.oh), h1 = bin_end(i, s.h, s.oh);
    const int64_t w0 = bin_start(j, s.w, s.ow), w1 = bin_end(j, s.w, s.ow);
    const T* xp = x + p * s.h * s.w;
    int64_t best_i = h0 * s.w + w0;
    A best = to_acc(xp[best_i]);
    for (int64_t r = h0; r < h1 && best == best; ++r) {
      for (int64_t c = w0; c < w1; ++c) {
        const A v = to_acc(xp[r * s.w + c]);
        if (v > best || v != v) {
          best = v, best_i = r * s.w + c;
          if (v != v) break;  // NaN wins: the first one is kept, as on the CPU
        }
      }
    }
    y[o] = xp[best_i];
    ix[o] = best_i;
  }
}

AdaptiveShape adaptive_shape(const Tensor& in, const Tensor& out) {
  return {in.size(1), in.size(2), out.size(1), out.size(2)};
}

void adaptive_avg_cuda(const Tensor& out, const Tensor& in) {
  const int64_t total = out.numel();
  if (total == 0) return;
  const AdaptiveShape s = adaptive_shape(in, out);
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(in.dtype(), "adaptive_avg_pool2d", [&]<class T>(TypeTag<T>) {
    if (s.oh == 1 && s.ow == 1 && total <= INT32_MAX) {
      adaptive_avg_global_kernel<T><<<static_cast<unsigned>(total), kPlaneThreads, 0, current_stream(dev)>>>(
          static_cast<T*>(out.raw_data()), static_cast<const T*>(in.raw_data()), s.h * s.w);
    } else {
      adaptive_avg_kernel<T><<<grid_for(total, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
          static_cast<T*>(out.raw_data()), static_cast<const T*>(in.raw_data()), s, total);
    }
    HG_CUDA_CHECK_LAUNCH();
  });
}

void adaptive_avg_backward_cuda(const Tensor& grad_in, const Tensor& grad_out) {
  const int64_t total = grad_in.numel();
  if (total == 0) return;
  const AdaptiveShape s = adaptive_shape(grad_in, grad_out);
  const int dev = grad_in.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(grad_out.dtype(), "adaptive_avg_pool2d", [&]<class T>(TypeTag<T>) {
    adaptive_avg_backward_kernel<T><<<grid_for(total, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(grad_in.raw_data()), static_cast<const T*>(grad_out.raw_data()), s, total);
    HG_CUDA_CHECK_LAUNCH();
  });
}

void adaptive_max_cuda(const Tensor& out, const Tensor& indices, const Tensor& in) {
  const int64_t total = out.numel();
  if (total == 0) return;
  const AdaptiveShape s = adaptive_shape(in, out);
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(in.dtype(), "adaptive_max_pool2d", [&]<class T>(TypeTag<T>) {
    adaptive_max_kernel<T><<<grid_for(total, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(out.raw_data()), static_cast<int64_t*>(indices.raw_data()),
        static_cast<const T*>(in.raw_data()), s, total);
    HG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

HG_REGISTER_KERNEL(adaptive_avg_pool2d_stub, kCUDA, adaptive_avg_cuda);
HG_REGISTER_KERNEL(adaptive_avg_pool2d_backward_stub, kCUDA, adaptive_avg_backward_cuda);
HG_REGISTER_KERNEL(adaptive_max_pool2d_stub, kCUDA, adaptive_max_cuda);

}  // namespace hg::cuda
