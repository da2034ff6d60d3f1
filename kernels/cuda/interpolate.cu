// CUDA nearest and bilinear upsampling over [P, H, W] planes: a thread per output element,
// computing its taps with the CPU's formulas (kernels/common/interp_index.h). The backward adds
// each output's gradient to its taps with atomics in a float32 (float64) buffer, rounded once.
#include "framework/dispatch.h"
#include "framework/ops/creation.h"
#include "framework/ops/interpolate_kernels.h"
#include "kernels/common/interp_index.h"
#include "kernels/cuda/kernel_loop.cuh"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

template <class T>
using InterpBuf = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The geometry and the steps along h and w, found on the host once.
template <class A>
struct InterpGeometry {
  int64_t h, w, oh, ow;
  bool bilinear, align_corners;
  A step_h, step_w;      // bilinear
  float near_h, near_w;  // nearest
};

template <class A>
__device__ interp::LinearTap<A> tap(int64_t o, int64_t in, A step, float near, const InterpGeometry<A>& g) {
  if (g.bilinear) return interp::linear_source(o, in, step, g.align_corners);
  const int64_t i = interp::nearest_source(o, in, near);
  return {i, i, A(1), A(0)};
}

template <class T>
__global__ void interpolate_kernel(T* y, const T* x, InterpGeometry<acc_t<T>> g, int64_t total) {
  using A = acc_t<T>;
  HG_KERNEL_LOOP(o, total) {
    const int64_t j = o % g.ow, i = (o / g.ow) % g.oh, pl = o / (g.ow * g.oh);
    const T* xp = x + pl * g.h * g.w;
    const auto r = tap<A>(i, g.h, g.step_h, g.near_h, g), c = tap<A>(j, g.w, g.step_w, g.near_w, g);
    if (!g.bilinear) {
      y[o] = xp[r.i0 * g.w + c.i0];
      continue;
    }
    const A top = c.l0 * to_acc(xp[r.i0 * g.w + c.i0]) + c.l1 * to_acc(xp[r.i0 * g.w + c.i1]);
    const A bottom = c.l0 * to_acc(xp[r.i1 * g.w + c.i0]) + c.l1 * to_acc(xp[r.i1 * g.w + c.i1]);
    y[o] = from_acc<T>(r.l0 * top + r.l1 * bottom);
  }
}

template <class T>
__global__ void interpolate_backward_kernel(InterpBuf<T>* acc, const T* gy, InterpGeometry<acc_t<T>> g, int64_t total) {
  using A = acc_t<T>;
  using B = InterpBuf<T>;
  HG_KERNEL_LOOP(o, total) {
    const int64_t j = o % g.ow, i = (o / g.ow) % g.oh, pl = o / (g.ow * g.oh);
    B* ap = acc + pl * g.h * g.w;
    const auto r = tap<A>(i, g.h, g.step_h, g.near_h, g), c = tap<A>(j, g.w, g.step_w, g.near_w, g);
    const B v = static_cast<B>(to_acc(gy[o]));
    atomicAdd(ap + r.i0 * g.w + c.i0, static_cast<B>(r.l0 * c.l0) * v);
    if (!g.bilinear) continue;
    atomicAdd(ap + r.i0 * g.w + c.i1, static_cast<B>(r.l0 * c.l1) * v);
    atomicAdd(ap + r.i1 * g.w + c.i0, static_cast<B>(r.l1 * c.l0) * v);
    atomicAdd(ap + r.i1 * g.w + c.i1, static_cast<B>(r.l1 * c.l1) * v);
  }
}

template <class T>
__global__ void interpolate_round_kernel(T* out, const InterpBuf<T>* acc, int64_t n) {
  HG_KERNEL_LOOP(i, n) { out[i] = from_acc<T>(static_cast<acc_t<T>>(acc[i])); }
}

template <class A>
InterpGeometry<A> geometry_of(const Tensor& image, const Tensor& resized, const InterpParams& p) {
  InterpGeometry<A> g{
      image.size(1), image.size(2), resized.size(1), resized.size(2), p.bilinear, p.align_corners, A(0), A(0),
      0.0f,          0.0f};
  g.step_h = interp::step<A>(g.h, g.oh, p.align_corners, p.scale[0]);
  g.step_w = interp::step<A>(g.w, g.ow, p.align_corners, p.scale[1]);
  g.near_h = interp::step<float>(g.h, g.oh, false, p.scale[0]);
  g.near_w = interp::step<float>(g.w, g.ow, false, p.scale[1]);
  return g;
}

void interpolate_cuda(const Tensor& out, const Tensor& in, const InterpParams& p) {
  const int64_t total = out.numel();
  if (total == 0) return;
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(in.dtype(), "interpolate", [&]<class T>(TypeTag<T>) {
    interpolate_kernel<T><<<grid_for(total, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(out.raw_data()), static_cast<const T*>(in.raw_data()), geometry_of<acc_t<T>>(in, out, p),
        total);
    HG_CUDA_CHECK_LAUNCH();
  });
}

void interpolate_backward_cuda(const Tensor& grad_in, const Tensor& grad_out, const InterpParams& p) {
  const int64_t n = grad_in.numel(), total = grad_out.numel();
  if (n == 0) return;
  const int dev = grad_in.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(grad_out.dtype(), "interpolate", [&]<class T>(TypeTag<T>) {
    const Tensor acc = zeros(grad_in.shape(), TensorOptions(dtype_of<InterpBuf<T>>).device(grad_in.device()));
    if (total) {
      interpolate_backward_kernel<T><<<grid_for(total, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
          static_cast<InterpBuf<T>*>(acc.raw_data()), static_cast<const T*>(grad_out.raw_data()),
          geometry_of<acc_t<T>>(grad_in, grad_out, p), total);
      HG_CUDA_CHECK_LAUNCH();
    }
    interpolate_round_kernel<T><<<grid_for(n, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(grad_in.raw_data()), static_cast<const InterpBuf<T>*>(acc.raw_data()), n);
    HG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

HG_REGISTER_KERNEL(interpolate_stub, kCUDA, interpolate_cuda);
HG_REGISTER_KERNEL(interpolate_backward_stub, kCUDA, interpolate_backward_cuda);

}  // namespace hg::cuda
