// CUDA reflect/replicate/circular pad: a thread per output element. The forward gathers; the
// backward scatters with atomics into a float32 (float64) buffer of the input's shape, rounded
// once into grad_in, as the pooling kernels do.
#include "framework/dispatch.h"
#include "framework/ops/creation.h"
#include "framework/ops/pad_kernels.h"
#include "kernels/common/pad_index.h"
#include "kernels/cuda/kernel_loop.cuh"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

template <class T>
using PadBuf = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
__global__ void pad_kernel(T* y, const T* x, PadGeometry g, int64_t out_plane, int64_t in_plane, int64_t total) {
  HG_KERNEL_LOOP(o, total) { y[o] = x[(o / out_plane) * in_plane + padding::source_offset(o % out_plane, g)]; }
}

template <class T>
__global__ void pad_backward_kernel(PadBuf<T>* acc, const T* gy, PadGeometry g, int64_t out_plane, int64_t in_plane,
                                    int64_t total) {
  HG_KERNEL_LOOP(o, total) {
    atomicAdd(acc + (o / out_plane) * in_plane + padding::source_offset(o % out_plane, g),
              static_cast<PadBuf<T>>(to_acc(gy[o])));
  }
}

template <class T>
__global__ void pad_round_kernel(T* out, const PadBuf<T>* acc, int64_t n) {
  HG_KERNEL_LOOP(i, n) { out[i] = from_acc<T>(static_cast<acc_t<T>>(acc[i])); }
}

void pad_cuda(const Tensor& out, const Tensor& in, const PadGeometry& g) {
  const int64_t total = out.numel();
  if (total == 0) return;
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  const int64_t out_plane = g.out[0] * g.out[1] * g.out[2], in_plane = g.in[0] * g.in[1] * g.in[2];
  dispatch_floating(in.dtype(), "pad", [&]<class T>(TypeTag<T>) {
    pad_kernel<T><<<grid_for(total, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(out.raw_data()), static_cast<const T*>(in.raw_data()), g, out_plane, in_plane, total);
    HG_CUDA_CHECK_LAUNCH();
  });
}

void pad_backward_cuda(const Tensor& grad_in, const Tensor& grad_out, const PadGeometry& g) {
  const int64_t n = grad_in.numel(), total = grad_out.numel();
  if (n == 0) return;
  const int dev = grad_in.device().index;
  DeviceGuard guard(dev);
  const int64_t out_plane = g.out[0] * g.out[1] * g.out[2], in_plane = g.in[0] * g.in[1] * g.in[2];
  dispatch_floating(grad_out.dtype(), "pad", [&]<class T>(TypeTag<T>) {
    const Tensor acc = zeros(grad_in.shape(), TensorOptions(dtype_of<PadBuf<T>>).device(grad_in.device()));
    if (total) {
      pad_backward_kernel<T><<<grid_for(total, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
          static_cast<PadBuf<T>*>(acc.raw_data()), static_cast<const T*>(grad_out.raw_data()), g, out_plane, in_plane,
          total);
      HG_CUDA_CHECK_LAUNCH();
    }
    pad_round_kernel<T><<<grid_for(n, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(grad_in.raw_data()), static_cast<const PadBuf<T>*>(acc.raw_data()), n);
    HG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

HG_REGISTER_KERNEL(pad_stub, kCUDA, pad_cuda);
HG_REGISTER_KERNEL(pad_backward_stub, kCUDA, pad_backward_cuda);

}  // namespace hg::cuda
