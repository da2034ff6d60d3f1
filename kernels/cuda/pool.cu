// CUDA max and average pooling over [N*C] planes: a thread per output. Backward scatters with
// atomics into a float32 (float64 for float64) buffer of the input's shape, rounded once into
// grad_input, so 16-bit gradients are summed in float32 as on the CPU.
#include "framework/dispatch.h"
#include "framework/ops/creation.h"
#include "framework/ops/pool_kernels.h"
#include "kernels/cuda/kernel_loop.cuh"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

struct Planes {
  int64_t planes, h, w, oh, ow;
};
Planes planes_of(const Tensor& in, const Tensor& out) {
  return {in.size(0) * in.size(1), in.size(2), in.size(3), out.size(2), out.size(3)};
}

struct Params {  // Pool2dParams as plain values for the device
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  bool count_include_pad;
};
Params params_of(const Pool2dParams& p) {
  return {p.kernel[0],  p.kernel[1],   p.stride[0],   p.stride[1],        p.padding[0],
          p.padding[1], p.dilation[0], p.dilation[1], p.count_include_pad};
}

template <class T>
using Buf = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
__global__ void max_pool_kernel(T* y, int64_t* ix, const T* x, Planes g, Params p, int64_t total) {
  using A = acc_t<T>;
  HG_KERNEL_LOOP(o, total) {
    const int64_t ox = o % g.ow, oy = (o / g.ow) % g.oh, pl = o / (g.ow * g.oh);
    const T* xp = x + pl * g.h * g.w;
    const int64_t hs = oy * p.sh - p.ph, ws = ox * p.sw - p.pw;
    A best = -INFINITY;
    int64_t best_i = -1;
    for (int64_t i = 0; i < p.kh; ++i) {
      const int64_t iy = hs + i * p.dh;
      if (iy < 0 || iy >= g.h) continue;
      for (int64_t j = 0; j < p.kw; ++j) {
        const int64_t jx = ws + j * p.dw;
        if (jx < 0 || jx >= g.w) continue;
        const A v = to_acc(xp[iy * g.w + jx]);
        if (best_i < 0 || v > best || v != v) best = v, best_i = iy * g.w + jx;
      }
    }
    y[o] = best_i < 0 ? from_acc<T>(best) : xp[best_i];
    ix[o] = best_i < 0 ? 0 : best_i;
  }
}

template <class T>
__global__ void max_pool_backward_kernel(Buf<T>* acc, const T* gy, const int64_t* ix, Planes g, int64_t total) {
  HG_KERNEL_LOOP(o, total) {
    const int64_t pl = o / (g.oh * g.ow);
    atomicAdd(acc + pl * g.h * g.w + ix[o], static_cast<Buf<T>>(to_acc(gy[o])));
  }
}

// The CPU kernel's window rule: clipped to the padded image for the divisor (with
// count_include_pad), to the image for the sum.
struct Window {
  int64_t h0, h1, w0, w1;
  double divisor;
};
__device__ Window avg_window(int64_t oy, int64_t ox, int64_t h, int64_t w, const Params& p) {
  int64_t h0 = oy * p.sh - p.ph, w0 = ox * p.sw - p.pw;
  int64_t h1 = min(h0 + p.kh, h + p.ph), w1 = min(w0 + p.kw, w + p.pw);
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = max(h0, int64_t(0)), w0 = max(w0, int64_t(0));
  h1 = min(h1, h), w1 = min(w1, w);
  const int64_t inside = max(h1 - h0, int64_t(0)) * max(w1 - w0, int64_t(0));
  return {h0, h1, w0, w1, static_cast<double>(p.count_include_pad ? padded : inside)};
}

template <class T>
__global__ void avg_pool_kernel(T* y, const T* x, Planes g, Params p, int64_t total) {
  using A = acc_t<T>;
  HG_KERNEL_LOOP(o, total) {
    const int64_t ox = o % g.ow, oy = (o / g.ow) % g.oh, pl = o / (g.ow * g.oh);
    const T* xp = x + pl * g.h * g.w;
    const Window win = avg_window(oy, ox, g.h, g.w, p);
    A s = 0;
    for (int64_t iy = win.h0; iy < win.h1; ++iy)
      for (int64_t jx = win.w0; jx < win.w1; ++jx) s += to_acc(xp[iy * g.w + jx]);
    y[o] = win.h0 >= win.h1 || win.w0 >= win.w1 ? from_acc<T>(A(0)) : from_acc<T>(s / static_cast<A>(win.divisor));
  }
}

template <class T>
__global__ void avg_pool_backward_kernel(Buf<T>* acc, const T* gy, Planes g, Params p, int64_t total) {
  using A = acc_t<T>;
  HG_KERNEL_LOOP(o, total) {
    const int64_t ox = o % g.ow, oy = (o / g.ow) % g.oh, pl = o / (g.ow * g.oh);
    const Window win = avg_window(oy, ox, g.h, g.w, p);
    if (win.h0 >= win.h1 || win.w0 >= win.w1) continue;
    const A v = to_acc(gy[o]) / static_cast<A>(win.divisor);
    Buf<T>* dst = acc + pl * g.h * g.w;
    for (int64_t iy = win.h0; iy < win.h1; ++iy)
      for (int64_t jx = win.w0; jx < win.w1; ++jx) atomicAdd(dst + iy * g.w + jx, static_cast<Buf<T>>(v));
  }
}

template <class T>
__global__ void round_kernel(T* out, const Buf<T>* acc, int64_t n) {
  HG_KERNEL_LOOP(i, n)
  out[i] = from_acc<T>(static_cast<acc_t<T>>(acc[i]));
}

void max_pool_cuda(const Tensor& out, const Tensor& indices, const Tensor& input, const Pool2dParams& p) {
  const Planes g = planes_of(input, out);
  const int64_t total = out.numel();
  if (total == 0) return;
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(input.dtype(), "max_pool2d", [&]<class T>(TypeTag<T>) {
    max_pool_kernel<T><<<grid_for(total, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(out.raw_data()), static_cast<int64_t*>(indices.raw_data()),
        static_cast<const T*>(input.raw_data()), g, params_of(p), total);
    HG_CUDA_CHECK_LAUNCH();
  });
}

// Runs `scatter` into a zeroed accumulation buffer, then rounds it into grad_input.
template <class T, class F>
void scatter_then_round(const Tensor& grad_input, F&& scatter) {
  const int dev = grad_input.device().index;
  const int64_t n = grad_input.numel();
  if (n == 0) return;
  const Tensor acc = zeros(grad_input.shape(), TensorOptions(dtype_of<Buf<T>>).device(grad_input.device()));
  scatter(static_cast<Buf<T>*>(acc.raw_data()));
  round_kernel<T><<<grid_for(n, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
      static_cast<T*>(grad_input.raw_data()), static_cast<const Buf<T>*>(acc.raw_data()), n);
  HG_CUDA_CHECK_LAUNCH();
}

void max_pool_backward_cuda(const Tensor& grad_input, const Tensor& grad_out, const Tensor& indices) {
  const Planes g = planes_of(grad_input, grad_out);
  const int64_t total = grad_out.numel();
  const int dev = grad_input.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(grad_out.dtype(), "max_pool2d", [&]<class T>(TypeTag<T>) {
    scatter_then_round<T>(grad_input, [&](Buf<T>* acc) {
      if (total == 0) return;
      max_pool_backward_kernel<T><<<grid_for(total, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
          acc, static_cast<const T*>(grad_out.raw_data()), static_cast<const int64_t*>(indices.raw_data()), g, total);
      HG_CUDA_CHECK_LAUNCH();
    });
  });
}

void avg_pool_cuda(const Tensor& out, const Tensor& input, const Pool2dParams& p) {
  const Planes g = planes_of(input, out);
  const int64_t total = out.numel();
  if (total == 0) return;
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(input.dtype(), "avg_pool2d", [&]<class T>(TypeTag<T>) {
    avg_pool_kernel<T><<<grid_for(total, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(out.raw_data()), static_cast<const T*>(input.raw_data()), g, params_of(p), total);
    HG_CUDA_CHECK_LAUNCH();
  });
}

void avg_pool_backward_cuda(const Tensor& grad_input, const Tensor& grad_out, const Pool2dParams& p) {
  const Planes g = planes_of(grad_input, grad_out);
  const int64_t total = grad_out.numel();
  const int dev = grad_input.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(grad_out.dtype(), "avg_pool2d", [&]<class T>(TypeTag<T>) {
    scatter_then_round<T>(grad_input, [&](Buf<T>* acc) {
      if (total == 0) return;
      avg_pool_backward_kernel<T><<<grid_for(total, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
          acc, static_cast<const T*>(grad_out.raw_data()), g, params_of(p), total);
      HG_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace

HG_REGISTER_KERNEL(max_pool2d_stub, kCUDA, max_pool_cuda);
HG_REGISTER_KERNEL(max_pool2d_backward_stub, kCUDA, max_pool_backward_cuda);
HG_REGISTER_KERNEL(avg_pool2d_stub, kCUDA, avg_pool_cuda);
HG_REGISTER_KERNEL(avg_pool2d_backward_stub, kCUDA, avg_pool_backward_cuda);

}  // namespace hg::cuda
