// conv2d on CUDA, NCHW or channels-last (NHWC, cuDNN only), float32/float16/bfloat16/float64. float32 and the 16-bit
// types go to cuDNN (cudnn_conv.h: the graph API with cached execution plans, or the legacy calls); the bias add and
// the bias gradient are plain kernels here (float32 accumulation). float64 does not use cuDNN (its double support is
// unproven and deprecated): a direct kernel per output element, exact in float64 and slow, for tests and gradient
// checks. Without cuDNN the other dtypes throw an hg::Error saying so.
#include <cstdlib>
#include <map>
#include <mutex>

#include "framework/cuda.h"
#include "framework/dispatch.h"
#include "framework/ops/conv_kernels.h"
#include "framework/ops/creation.h"
#include "kernels/common/scalar_ops.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/dnn/conv_stats.h"
#include "kernels/cuda/kernel_loop.cuh"
#include "kernels/cuda/loops.cuh"
#ifdef HG_WITH_CUDNN
#include "kernels/cuda/dnn/cudnn_conv.h"
#endif

namespace hg::cuda {
namespace {

// The forward's finish, one pass over out [N, O, P] (or channels-last [N, P, O]): out[n, o, p] +=
// bias[o] (kBias), then ReLU (kRelu, conv2d_relu), in the accumulation type before the one
// rounding to T.
template <class T, bool kBias, bool kRelu>
__global__ void bias_relu_kernel(T* out, const T* bias, int64_t o, int64_t p, int64_t total, bool nhwc) {
  HG_KERNEL_LOOP(i, total) {
    auto v = to_acc(out[i]);
    if constexpr (kBias) v = v + to_acc(bias[nhwc ? i % o : (i / p) % o]);
    if constexpr (kRelu) v = scalar::Relu{}(v);
    out[i] = from_acc<T>(v);
  }
}

// grad_bias[o] = sum over n and p of grad_out[n, o, p]: a block per channel. Channels-last: the
// channel's n * p values lie o apart.
template <class T>
__global__ void bias_grad_kernel(T* grad_bias, const T* grad_out, int64_t n, int64_t o, int64_t p, bool nhwc) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  __shared__ A scratch[32];
  const int64_t ch = blockIdx.x;
  A s = 0;
  if (nhwc) {
    for (int64_t i = threadIdx.x; i < n * p; i += blockDim.x) s += static_cast<A>(to_acc(grad_out[i * o + ch]));
  } else {
    for (int64_t b = 0; b < n; ++b) {
      const T* plane = grad_out + (b * o + ch) * p;
      for (int64_t i = threadIdx.x; i < p; i += blockDim.x) s += static_cast<A>(to_acc(plane[i]));
    }
  }
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) grad_bias[ch] = from_acc<T>(static_cast<acc_t<T>>(s));
}

// Adds the bias (if defined) and applies p.relu (conv2d_relu; conv2d_relu_in_kernel lists CUDA).
void finish_forward(const Tensor& out, const Tensor& bias, const Conv2dParams& params) {
  const int dev = out.device().index;
  const int64_t o = out.size(1), p = out.size(2) * out.size(3), total = out.numel();
  if (total == 0 || (!bias.defined() && !params.relu)) return;
  dispatch_floating(out.dtype(), "conv2d", [&]<class T>(TypeTag<T>) {
    T* po = static_cast<T*>(out.raw_data());
    const T* pb = bias.defined() ? static_cast<const T*>(bias.raw_data()) : nullptr;
    const auto launch = [&](auto kernel) {
      kernel<<<grid_for(total, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(po, pb, o, p, total,
                                                                                      !out.is_contiguous());
      HG_CUDA_CHECK_LAUNCH();
    };
    if (pb != nullptr && params.relu) return launch(bias_relu_kernel<T, true, true>);
    if (pb != nullptr) return launch(bias_relu_kernel<T, true, false>);
    launch(bias_relu_kernel<T, false, true>);
  });
}

void bias_grad(const Tensor& grad_bias, const Tensor& grad_out) {
  const int dev = grad_out.device().index;
  const int64_t o = grad_out.size(1);
  if (o == 0) return;
  dispatch_floating(grad_out.dtype(), "conv2d", [&]<class T>(TypeTag<T>) {
    bias_grad_kernel<T><<<static_cast<unsigned>(o), kThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(grad_bias.raw_data()), static_cast<const T*>(grad_out.raw_data()), grad_out.size(0), o,
        grad_out.size(2) * grad_out.size(3), !grad_out.is_contiguous());
    HG_CUDA_CHECK_LAUNCH();
  });
}

// ---- float64: direct convolution, one thread per output element (grid-stride) ----
struct ConvGeom {
  int64_t n, c, h, w;  // input
  int64_t o, kh, kw;   // weight [o, c / groups, kh, kw]
  int64_t oh, ow;      // output
  int64_t sh, sw, ph, pw, dh, dw, groups;
};

ConvGeom geom_of(const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p) {
  HG_CHECK(x.is_contiguous() && w.is_contiguous() && y.is_contiguous(), "conv2d",
           "the float64 CUDA convolution expects contiguous NCHW tensors");
  return {x.size(0), x.size(1),   x.size(2),   x.size(3),    w.size(0),    w.size(2),     w.size(3),     y.size(2),
          y.size(3), p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0], p.dilation[1], p.groups};
}

__global__ void direct_forward_kernel(ConvGeom g, const double* __restrict__ x, const double* __restrict__ w,
                                      double* __restrict__ y, int64_t total) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  HG_KERNEL_LOOP(i, total) {
    const int64_t ox = i % g.ow, oy = (i / g.ow) % g.oh, o = (i / (g.ow * g.oh)) % g.o, n = i / (g.ow * g.oh * g.o);
    const int64_t c0 = (o / og) * cg;
    double s = 0;
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
        if (iy < 0 || iy >= g.h) continue;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const int64_t ix = ox * g.sw - g.pw + kx * g.dw;
          if (ix < 0 || ix >= g.w) continue;
          s += x[((n * g.c + c0 + c) * g.h + iy) * g.w + ix] * w[((o * cg + c) * g.kh + ky) * g.kw + kx];
        }
      }
    y[i] = s;
  }
}

__global__ void direct_backward_data_kernel(ConvGeom g, const double* __restrict__ dy, const double* __restrict__ w,
                                            double* __restrict__ dx, int64_t total) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  HG_KERNEL_LOOP(i, total) {
    const int64_t ix = i % g.w, iy = (i / g.w) % g.h, c = (i / (g.w * g.h)) % g.c, n = i / (g.w * g.h * g.c);
    const int64_t grp = c / cg, cl = c % cg;
    double s = 0;
    for (int64_t ol = 0; ol < og; ++ol) {
      const int64_t o = grp * og + ol;
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t ty = iy + g.ph - ky * g.dh;
        if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.oh) continue;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const int64_t tx = ix + g.pw - kx * g.dw;
          if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.ow) continue;
          s += dy[((n * g.o + o) * g.oh + ty / g.sh) * g.ow + tx / g.sw] * w[((o * cg + cl) * g.kh + ky) * g.kw + kx];
        }
      }
    }
    dx[i] = s;
  }
}

__global__ void direct_backward_filter_kernel(ConvGeom g, const double* __restrict__ dy, const double* __restrict__ x,
                                              double* __restrict__ dw, int64_t total) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  HG_KERNEL_LOOP(i, total) {
    const int64_t kx = i % g.kw, ky = (i / g.kw) % g.kh, c = (i / (g.kw * g.kh)) % cg, o = i / (g.kw * g.kh * cg);
    const int64_t ci = (o / og) * cg + c;
    double s = 0;
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
        if (iy < 0 || iy >= g.h) continue;
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const int64_t ix = ox * g.sw - g.pw + kx * g.dw;
          if (ix < 0 || ix >= g.w) continue;
          s += dy[((n * g.o + o) * g.oh + oy) * g.ow + ox] * x[((n * g.c + ci) * g.h + iy) * g.w + ix];
        }
      }
    dw[i] = s;
  }
}

void direct_forward(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor& bias,
                    const Conv2dParams& p) {
  const int dev = out.device().index;
  const int64_t total = out.numel();
  direct_forward_kernel<<<grid_for(total, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
      geom_of(input, weight, out, p), static_cast<const double*>(input.raw_data()),
      static_cast<const double*>(weight.raw_data()), static_cast<double*>(out.raw_data()), total);
  HG_CUDA_CHECK_LAUNCH();
  finish_forward(out, bias, p);
}

void direct_backward_data(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight,
                          const Conv2dParams& p) {
  const int dev = grad_input.device().index;
  const int64_t total = grad_input.numel();
  direct_backward_data_kernel<<<grid_for(total, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
      geom_of(grad_input, weight, grad_out, p), static_cast<const double*>(grad_out.raw_data()),
      static_cast<const double*>(weight.raw_data()), static_cast<double*>(grad_input.raw_data()), total);
  HG_CUDA_CHECK_LAUNCH();
}

void direct_backward_filter(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& input,
                            const Conv2dParams& p) {
  const int dev = grad_out.device().index;
  const int64_t total = grad_weight.numel();
  direct_backward_filter_kernel<<<grid_for(total, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
      geom_of(input, grad_weight, grad_out, p), static_cast<const double*>(grad_out.raw_data()),
      static_cast<const double*>(input.raw_data()), static_cast<double*>(grad_weight.raw_data()), total);
  HG_CUDA_CHECK_LAUNCH();
}

#ifdef HG_WITH_CUDNN

void run_cudnn(dnn::ConvPass pass, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p) {
  if (dnn::use_legacy_api() || !dnn::run_conv_graph(pass, x, w, y, p)) dnn::run_conv_legacy(pass, x, w, y, p);
}

void forward_cuda(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor& bias,
                  const Conv2dParams& p) {
  DeviceGuard guard(out.device().index);
  if (out.numel() == 0) return;
  if (input.dtype() == kFloat64) return direct_forward(out, input, weight, bias, p);
  run_cudnn(dnn::ConvPass::Forward, input, weight, out, p);
  finish_forward(out, bias, p);
}

void backward_data_cuda(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight, const Conv2dParams& p) {
  const int dev = grad_input.device().index;
  DeviceGuard guard(dev);
  if (grad_input.numel() == 0) return;
  if (grad_out.numel() == 0 || weight.numel() == 0) {
    HG_CUDA_CHECK(cudaMemsetAsync(grad_input.raw_data(), 0, grad_input.numel() * element_size(grad_input.dtype()),
                                  current_stream(dev)));
    return;
  }
  if (grad_out.dtype() == kFloat64) return direct_backward_data(grad_input, grad_out, weight, p);
  run_cudnn(dnn::ConvPass::BackwardData, grad_input, weight, grad_out, p);
}

void backward_filter_cuda(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                          const Tensor& input, const Conv2dParams& p) {
  const int dev = grad_out.device().index;
  DeviceGuard guard(dev);
  if (grad_bias.defined()) bias_grad(grad_bias, grad_out);
  if (!grad_weight.defined() || grad_weight.numel() == 0) return;
  if (grad_out.numel() == 0 || input.numel() == 0) {
    HG_CUDA_CHECK(cudaMemsetAsync(grad_weight.raw_data(), 0, grad_weight.numel() * element_size(grad_weight.dtype()),
                                  current_stream(dev)));
    return;
  }
  if (grad_out.dtype() == kFloat64) return direct_backward_filter(grad_weight, grad_out, input, p);
  run_cudnn(dnn::ConvPass::BackwardFilter, input, grad_weight, grad_out, p);
}

#else  // no cuDNN: float64 runs the direct kernels, the other dtypes need cuDNN

[[noreturn]] void no_cudnn(Dtype d) {
  fail("conv2d",
       "halfgrad was built without cuDNN, which CUDA convolution in {} needs; install cuDNN 9 and reconfigure with "
       "-Dcudnn=enabled (or run the convolution on the CPU)",
       d);
}
void forward_cuda(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor& bias,
                  const Conv2dParams& p) {
  if (input.dtype() != kFloat64) no_cudnn(input.dtype());
  DeviceGuard guard(out.device().index);
  if (out.numel() != 0) direct_forward(out, input, weight, bias, p);
}
void backward_data_cuda(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight, const Conv2dParams& p) {
  if (grad_out.dtype() != kFloat64) no_cudnn(grad_out.dtype());
  DeviceGuard guard(grad_input.device().index);
  if (grad_input.numel() != 0) direct_backward_data(grad_input, grad_out, weight, p);
}
void backward_filter_cuda(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                          const Tensor& input, const Conv2dParams& p) {
  if (grad_out.dtype() != kFloat64) no_cudnn(grad_out.dtype());
  DeviceGuard guard(grad_out.device().index);
  if (grad_bias.defined()) bias_grad(grad_bias, grad_out);
  if (grad_weight.defined() && grad_weight.numel() != 0) direct_backward_filter(grad_weight, grad_out, input, p);
}

#endif

}  // namespace

HG_REGISTER_KERNEL(conv2d_forward_stub, kCUDA, forward_cuda);
HG_REGISTER_KERNEL(conv2d_backward_data_stub, kCUDA, backward_data_cuda);
HG_REGISTER_KERNEL(conv2d_backward_filter_stub, kCUDA, backward_filter_cuda);

#ifdef HG_WITH_CUDNN
namespace dnn {

std::mutex& cudnn_mutex() {
  static std::mutex m;
  return m;
}

cudnnHandle_t handle_for(int dev) {
  static std::map<int, cudnnHandle_t> handles;
  auto it = handles.find(dev);
  if (it == handles.end()) {
    cudnnHandle_t h = nullptr;
    HG_CUDNN_CHECK(cudnnCreate(&h));
    it = handles.emplace(dev, h).first;
  }
  HG_CUDNN_CHECK(cudnnSetStream(it->second, current_stream(dev)));
  return it->second;
}

cudnnDataType_t cudnn_dtype(Dtype d) {
  switch (d) {
    case kFloat32: return CUDNN_DATA_FLOAT;
    case kFloat16: return CUDNN_DATA_HALF;
    case kBFloat16: return CUDNN_DATA_BFLOAT16;
    default: fail("conv2d", "cuDNN convolution supports float32, float16 and bfloat16, got {}", d);
  }
}

bool use_legacy_api() {
  static const bool legacy = [] {
    const char* v = std::getenv("HG_CUDNN_LEGACY_API");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return legacy;
}

ConvPlanStats conv_plan_stats() {
  return {!use_legacy_api(), conv_graph_plans_built(), conv_graph_executions(), conv_graph_fallbacks(),
          conv_graph_nondeterministic_plans()};
}

}  // namespace dnn
#else
dnn::ConvPlanStats dnn::conv_plan_stats() { return {}; }
#endif

}  // namespace hg::cuda
