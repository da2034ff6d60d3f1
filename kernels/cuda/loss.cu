// CUDA loss kernels: fused cross_entropy (a block per row: max, log-sum-exp, pick), nll_loss
// and the elementwise losses, in float32 (float64 for float64). cross_entropy/nll count the kept
// targets on the device and report bad ones through the device error record (raised at the next
// host synchronisation), so they never wait; binary_cross_entropy still reads its range check back.
#include <cmath>

#include "framework/dispatch.h"
#include "framework/ops/creation.h"
#include "framework/ops/loss_kernels.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/kernel_loop.cuh"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

constexpr int kRowThreads = 128;

// Where the kernels note a target: kept ones are counted into the 0-d int64 count (the mean's
// divisor, which never leaves the device); bad ones go to the device error record.
struct TargetReport {
  unsigned long long* count;
  DeviceErrorRecord* errors;
  int op;
  __device__ __forceinline__ void note(int64_t t, int64_t classes, int64_t ignore, int64_t r) const {
    if (t == ignore) return;
    if (t < 0 || t >= classes)
      report_device_error(errors, DeviceErrorKind::TargetOutOfRange, op, r, t, classes);
    else
      atomicAdd(count, 1ull);
  }
};

template <class T, class C>
__global__ void cross_entropy_kernel(C* loss, C* lse_out, const T* x, const int64_t* target, int64_t c, int64_t s,
                                     int64_t ignore, C eps, TargetReport report) {
  __shared__ C scratch[32];
  const int64_t r = blockIdx.x;
  const int64_t t = target[r];
  if (t == ignore || t < 0 || t >= c) {
    if (threadIdx.x == 0) {
      report.note(t, c, ignore, r);
      loss[r] = C(0), lse_out[r] = C(0);
    }
    return;
  }
  const T* row = x + (r / s) * c * s + r % s;
  C m = -INFINITY, total = 0;
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
    const C v = static_cast<C>(to_acc(row[i * s]));
    m = nan_max(m, v);
    total += v;
  }
  m = block_max(m, scratch);
  total = block_sum(total, scratch);
  C sum = 0;
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x) sum += exp(static_cast<C>(to_acc(row[i * s])) - m);
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) {
    report.note(t, c, ignore, r);
    const C lse = m + ::log(sum);
    lse_out[r] = lse;
    C l = lse - static_cast<C>(to_acc(row[t * s]));
    if (eps != C(0)) l = (C(1) - eps) * l + eps * (lse - total / static_cast<C>(c));
    loss[r] = l;
  }
}

template <class T, class C>
__global__ void cross_entropy_backward_kernel(T* gx, const T* x, const int64_t* target, const C* lse, const C* w,
                                              bool per_sample, int64_t c, int64_t s, int64_t ignore, C eps) {
  const int64_t r = blockIdx.x;
  const int64_t t = target[r];
  const C wr = t == ignore ? C(0) : w[per_sample ? r : 0];
  const C keep = C(1) - eps, spread = eps / static_cast<C>(c);
  const int64_t base = (r / s) * c * s + r % s;
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
    const int64_t k = base + i * s;
    const C p = exp(static_cast<C>(to_acc(x[k])) - lse[r]);
    gx[k] = from_acc<T>(static_cast<acc_t<T>>(wr == C(0) ? C(0) : (p - spread - (i == t ? keep : C(0))) * wr));
  }
}

template <class T, class C>
__global__ void nll_kernel(C* loss, const T* x, const int64_t* target, int64_t rows, int64_t c, int64_t s,
                           int64_t ignore, TargetReport report) {
  HG_KERNEL_LOOP(r, rows) {
    const int64_t t = target[r];
    report.note(t, c, ignore, r);
    const bool ok = t >= 0 && t < c && t != ignore;
    loss[r] = ok ? -static_cast<C>(to_acc(x[(r / s) * c * s + t * s + r % s])) : C(0);
  }
}

template <class T, class C>
__global__ void nll_backward_kernel(T* gx, const C* w, bool per_sample, const int64_t* target, int64_t rows, int64_t c,
                                    int64_t s, int64_t ignore) {
  HG_KERNEL_LOOP(r, rows) {
    const int64_t t = target[r];
    if (t != ignore && t >= 0 && t < c)
      gx[(r / s) * c * s + t * s + r % s] = from_acc<T>(static_cast<acc_t<T>>(-w[per_sample ? r : 0]));
  }
}

unsigned row_blocks(int64_t rows) {
  HG_CHECK(rows <= INT32_MAX, "cross_entropy", "{} rows are too many for one launch", rows);
  return static_cast<unsigned>(rows);
}

// Calls f(TypeTag<T>, TypeTag<C>) for the input dtype and the float32/float64 compute dtype.
template <class F>
void dispatch_loss(Dtype in, Dtype compute, F&& f) {
  dispatch_floating(in, "loss", [&]<class T>(TypeTag<T>) {
    if (compute == kFloat64)
      f(TypeTag<T>{}, TypeTag<double>{});
    else
      f(TypeTag<T>{}, TypeTag<float>{});
  });
}

void cross_entropy_cuda(const Tensor& losses, const Tensor& lse, const Tensor& count, const Tensor& logits,
                        const Tensor& target, int64_t ignore_index, double label_smoothing) {
  const int64_t n = logits.shape()[0], c = logits.shape()[1], s = logits.shape()[2];
  if (n * s == 0) return;
  const int dev = logits.device().index;
  DeviceGuard guard(dev);
  static const int op = device_error_op("cross_entropy");
  dispatch_loss(logits.dtype(), losses.dtype(), [&]<class T, class C>(TypeTag<T>, TypeTag<C>) {
    cross_entropy_kernel<T, C><<<row_blocks(n * s), kRowThreads, 0, current_stream(dev)>>>(
        static_cast<C*>(losses.raw_data()), static_cast<C*>(lse.raw_data()), static_cast<const T*>(logits.raw_data()),
        static_cast<const int64_t*>(target.raw_data()), c, s, ignore_index, static_cast<C>(label_smoothing),
        TargetReport{static_cast<unsigned long long*>(count.raw_data()), device_error_record(), op});
    HG_CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_backward_cuda(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                                 const Tensor& target, const Tensor& lse, int64_t ignore_index,
                                 double label_smoothing) {
  const int64_t n = logits.shape()[0], c = logits.shape()[1], s = logits.shape()[2];
  if (n * s * c == 0) return;
  const int dev = logits.device().index;
  DeviceGuard guard(dev);
  dispatch_loss(logits.dtype(), lse.dtype(), [&]<class T, class C>(TypeTag<T>, TypeTag<C>) {
    cross_entropy_backward_kernel<T, C><<<row_blocks(n * s), kRowThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(grad_logits.raw_data()), static_cast<const T*>(logits.raw_data()),
        static_cast<const int64_t*>(target.raw_data()), static_cast<const C*>(lse.raw_data()),
        static_cast<const C*>(grad_loss.raw_data()), grad_loss.dim() > 0, c, s, ignore_index,
        static_cast<C>(label_smoothing));
    HG_CUDA_CHECK_LAUNCH();
  });
}

void nll_cuda(const Tensor& losses, const Tensor& count, const Tensor& log_probs, const Tensor& target,
              int64_t ignore_index) {
  const int64_t n = log_probs.shape()[0], c = log_probs.shape()[1], s = log_probs.shape()[2], rows = n * s;
  if (rows == 0) return;
  const int dev = log_probs.device().index;
  DeviceGuard guard(dev);
  static const int op = device_error_op("nll_loss");
  dispatch_loss(log_probs.dtype(), losses.dtype(), [&]<class T, class C>(TypeTag<T>, TypeTag<C>) {
    nll_kernel<T, C><<<grid_for(rows, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
        static_cast<C*>(losses.raw_data()), static_cast<const T*>(log_probs.raw_data()),
        static_cast<const int64_t*>(target.raw_data()), rows, c, s, ignore_index,
        TargetReport{static_cast<unsigned long long*>(count.raw_data()), device_error_record(), op});
    HG_CUDA_CHECK_LAUNCH();
  });
}

void nll_backward_cuda(const Tensor& grad_log_probs, const Tensor& grad_loss, const Tensor& target,
                       int64_t ignore_index) {
  const int64_t n = grad_log_probs.shape()[0], c = grad_log_probs.shape()[1], s = grad_log_probs.shape()[2];
  const int64_t rows = n * s;
  if (rows == 0) return;
  const int dev = grad_log_probs.device().index;
  DeviceGuard guard(dev);
  dispatch_loss(grad_log_probs.dtype(), grad_loss.dtype(), [&]<class T, class C>(TypeTag<T>, TypeTag<C>) {
    nll_backward_kernel<T, C><<<grid_for(rows, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(grad_log_probs.raw_data()), static_cast<const C*>(grad_loss.raw_data()), grad_loss.dim() > 0,
        static_cast<const int64_t*>(target.raw_data()), rows, c, s, ignore_index);
    HG_CUDA_CHECK_LAUNCH();
  });
}

template <class C>
__device__ __forceinline__ C clamped_log(C v) {
  return fmax(::log(v), C(-100));
}
template <class C>
__device__ __forceinline__ C bce_logits(C x, C y, C pw) {
  // (1 - y) x + l (log1p(exp(-|x|)) + max(-x, 0)): exp never overflows.
  const C l = C(1) + (pw - C(1)) * y;
  return (C(1) - y) * x + l * (log1p(exp(-fabs(x))) + fmax(-x, C(0)));
}

template <class T>
struct SquaredErrorFn {
  __device__ T operator()(T a, T b) const {
    const acc_t<T> d = to_acc(a) - to_acc(b);
    return from_acc<T>(d * d);
  }
};
template <class T>
struct AbsErrorFn {
  __device__ T operator()(T a, T b) const { return from_acc<T>(fabs(to_acc(a) - to_acc(b))); }
};
template <class T>
struct SmoothL1Fn {
  acc_t<T> beta;
  __device__ T operator()(T a, T b) const {
    using C = acc_t<T>;
    const C z = fabs(to_acc(a) - to_acc(b));
    return from_acc<T>(z < beta ? C(0.5) * z * z / beta : z - C(0.5) * beta);
  }
};
template <class T>
struct HuberFn {
  acc_t<T> delta;
  __device__ T operator()(T a, T b) const {
    using C = acc_t<T>;
    const C z = fabs(to_acc(a) - to_acc(b));
    return from_acc<T>(z < delta ? C(0.5) * z * z : delta * (z - C(0.5) * delta));
  }
};
template <class T>
struct KlDivFn {
  __device__ T operator()(T x, T tin) const {
    using C = acc_t<T>;
    const C t = to_acc(tin);
    return from_acc<T>((t == C(0) ? C(0) : t * log(t)) - t * to_acc(x));  // xlogy(t, t) - t x
  }
};
template <class T>
struct KlDivLogTargetFn {
  __device__ T operator()(T x, T tin) const {
    const auto t = to_acc(tin);
    return from_acc<T>(exp(t) * (t - to_acc(x)));
  }
};
template <class T>
struct BceFn {
  int* out_of_range;
  __device__ T operator()(T pin, T yin) const {
    using C = acc_t<T>;
    const C p = to_acc(pin), y = to_acc(yin);
    if (!(p >= C(0) && p <= C(1))) *out_of_range = 1;
    return from_acc<T>(-(y * clamped_log(p) + (C(1) - y) * clamped_log(C(1) - p)));
  }
};
template <class T>
struct BceLogitsFn {
  __device__ T operator()(T x, T y) const { return from_acc<T>(bce_logits(to_acc(x), to_acc(y), acc_t<T>(1))); }
};

template <class T>
__global__ void bce_logits_weighted_kernel(Geometry<4> g, char* out, const char* a, const char* b, const char* c) {
  HG_KERNEL_LOOP(i, g.numel) {
    int64_t off[4];
    g.offsets(i, off);
    const auto x = to_acc(*reinterpret_cast<const T*>(a + off[1]));
    const auto y = to_acc(*reinterpret_cast<const T*>(b + off[2]));
    const auto pw = to_acc(*reinterpret_cast<const T*>(c + off[3]));
    *reinterpret_cast<T*>(out + off[0]) = from_acc<T>(bce_logits(x, y, pw));
  }
}

void pointwise_loss_cuda(PointwiseLoss kind, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c,
                         double param) {
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(out.dtype(), "loss", [&]<class T>(TypeTag<T>) {
    switch (kind) {
      case PointwiseLoss::SquaredError: launch_binary<T, T>(out, a, b, SquaredErrorFn<T>{}, "mse_loss"); break;
      case PointwiseLoss::AbsoluteError: launch_binary<T, T>(out, a, b, AbsErrorFn<T>{}, "l1_loss"); break;
      case PointwiseLoss::SmoothL1:
        launch_binary<T, T>(out, a, b, SmoothL1Fn<T>{static_cast<acc_t<T>>(param)}, "smooth_l1_loss");
        break;
      case PointwiseLoss::Huber:
        launch_binary<T, T>(out, a, b, HuberFn<T>{static_cast<acc_t<T>>(param)}, "huber_loss");
        break;
      case PointwiseLoss::KlDiv: launch_binary<T, T>(out, a, b, KlDivFn<T>{}, "kl_div"); break;
      case PointwiseLoss::KlDivLogTarget: launch_binary<T, T>(out, a, b, KlDivLogTargetFn<T>{}, "kl_div"); break;
      case PointwiseLoss::BinaryCrossEntropy: {
        const Tensor flag = zeros({1}, TensorOptions(kInt32).device(out.device()));
        launch_binary<T, T>(out, a, b, BceFn<T>{static_cast<int*>(flag.raw_data())}, "binary_cross_entropy");
        int bad = 0;
        if (out.numel() > 0) copy_to_host(&bad, flag.raw_data(), sizeof(bad), current_stream(dev));
        HG_CHECK(bad == 0, "binary_cross_entropy",
                 "all elements of the input (probabilities) must be between 0 and 1; use "
                 "binary_cross_entropy_with_logits on logits");
        break;
      }
      case PointwiseLoss::BinaryCrossEntropyWithLogits: {
        if (!c.defined()) {
          launch_binary<T, T>(out, a, b, BceLogitsFn<T>{}, "binary_cross_entropy_with_logits");
          break;
        }
        const Geometry<4> g = make_geometry<4>(out.shape(), {&out, &a, &b, &c}, "binary_cross_entropy_with_logits");
        if (g.numel == 0) break;
        bce_logits_weighted_kernel<T><<<grid_for(g.numel, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
            g, static_cast<char*>(out.raw_data()), static_cast<const char*>(a.raw_data()),
            static_cast<const char*>(b.raw_data()), static_cast<const char*>(c.raw_data()));
        HG_CUDA_CHECK_LAUNCH();
        break;
      }
    }
  });
}

}  // namespace

HG_REGISTER_KERNEL(cross_entropy_stub, kCUDA, cross_entropy_cuda);
HG_REGISTER_KERNEL(cross_entropy_backward_stub, kCUDA, cross_entropy_backward_cuda);
HG_REGISTER_KERNEL(nll_stub, kCUDA, nll_cuda);
HG_REGISTER_KERNEL(nll_backward_stub, kCUDA, nll_backward_cuda);
HG_REGISTER_KERNEL(pointwise_loss_stub, kCUDA, pointwise_loss_cuda);

}  // namespace hg::cuda
