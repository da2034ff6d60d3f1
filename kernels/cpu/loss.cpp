// CPU loss kernels: fused cross_entropy (log-sum-exp and pick in one pass per row), nll_loss,
// and the elementwise losses.
#include <atomic>
#include <cmath>
#include <limits>

#include "framework/ops/loss_kernels.h"
#include "kernels/cpu/class_targets.h"
#include "kernels/cpu/rows.h"

namespace hg::cpu {
namespace {

void cross_entropy_cpu(const Tensor& losses, const Tensor& lse_t, const Tensor& count, const Tensor& logits,
                       const Tensor& target_t, int64_t ignore_index, double label_smoothing) {
  const int64_t n = logits.shape()[0], c = logits.shape()[1], s = logits.shape()[2];
  const int64_t* target = static_cast<const int64_t*>(target_t.raw_data());
  BadTarget bad;
  dispatch_float(logits.dtype(), [&]<class T>(TypeTag<T>) {
    dispatch_float(losses.dtype(), [&]<class C>(TypeTag<C>) {
      if constexpr (std::is_same_v<C, float> || std::is_same_v<C, double>) {
        const T* x = static_cast<const T*>(logits.raw_data());
        C* loss = static_cast<C*>(losses.raw_data());
        C* lse_out = static_cast<C*>(lse_t.raw_data());
        const C eps = static_cast<C>(label_smoothing), keep = C(1) - eps;
        for_each_row(n, c, s, [&](int64_t r, int64_t base, auto stride) {
          const int64_t t = target[r];
          if (t == ignore_index || t < 0 || t >= c) {
            if (t != ignore_index) bad.note(r);
            loss[r] = C(0);
            lse_out[r] = C(0);
            return;
          }
          const T* row = x + base;
          const C m = row_max<C>(row, c, stride);
          const C lse = m + std::log(row_exps(row, c, stride, m).sum);
          lse_out[r] = lse;
          C l = lse - static_cast<C>(row[t * stride]);
          // Smoothing mixes in the mean over classes of -log p = lse - x.
          if (eps != C(0)) {
            C total = 0;
            for (int64_t i = 0; i < c; ++i) total += static_cast<C>(row[i * stride]);
            l = keep * l + eps * (lse - total / static_cast<C>(c));
          }
          loss[r] = l;
        });
      }
    });
  });
  bad.check("cross_entropy", target, c);
  count_kept(count, target, n * s, ignore_index);
}

void cross_entropy_backward_cpu(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                                const Tensor& target_t, const Tensor& lse_t, int64_t ignore_index,
                                double label_smoothing) {
  const int64_t n = logits.shape()[0], c = logits.shape()[1], s = logits.shape()[2];
  const int64_t* target = static_cast<const int64_t*>(target_t.raw_data());
  const bool per_sample = grad_loss.dim() > 0;
  dispatch_float(logits.dtype(), [&]<class T>(TypeTag<T>) {
    dispatch_float(lse_t.dtype(), [&]<class C>(TypeTag<C>) {
      if constexpr (std::is_same_v<C, float> || std::is_same_v<C, double>) {
        const T* x = static_cast<const T*>(logits.raw_data());
        T* gx = static_cast<T*>(grad_logits.raw_data());
        const C* lse = static_cast<const C*>(lse_t.raw_data());
        const C* w = static_cast<const C*>(grad_loss.raw_data());
        const C eps = static_cast<C>(label_smoothing), keep = C(1) - eps, spread = eps / static_cast<C>(c);
        for_each_row(n, c, s, [&](int64_t r, int64_t base, auto stride) {
          const int64_t t = target[r];
          const C wr = t == ignore_index ? C(0) : w[per_sample ? r : 0];
          if (wr == C(0)) {
            for (int64_t i = 0; i < c; ++i) gx[base + i * stride] = T(0);
            return;
          }
          const C* p = row_exps(x + base, c, stride, lse[r]).exps;
          for (int64_t i = 0; i < c; ++i)
            gx[base + i * stride] = static_cast<T>((p[i] - spread - (i == t ? keep : C(0))) * wr);
        });
      }
    });
  });
}

void nll_cpu(const Tensor& losses, const Tensor& count, const Tensor& log_probs, const Tensor& target_t,
             int64_t ignore_index) {
  const int64_t n = log_probs.shape()[0], c = log_probs.shape()[1], s = log_probs.shape()[2];
  const int64_t* target = static_cast<const int64_t*>(target_t.raw_data());
  BadTarget bad;
  dispatch_float(log_probs.dtype(), [&]<class T>(TypeTag<T>) {
    dispatch_float(losses.dtype(), [&]<class C>(TypeTag<C>) {
      if constexpr (std::is_same_v<C, float> || std::is_same_v<C, double>) {
        const T* x = static_cast<const T*>(log_probs.raw_data());
        C* loss = static_cast<C*>(losses.raw_data());
        parallel_for(n * s, kParallelGrain, [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) {
            const int64_t t = target[r];
            const bool ok = t >= 0 && t < c;
            if (!ok && t != ignore_index) bad.note(r);
            loss[r] = ok && t != ignore_index ? -static_cast<C>(x[(r / s) * c * s + t * s + r % s]) : C(0);
          }
        });
      }
    });
  });
  bad.check("nll_loss", target, c);
  count_kept(count, target, n * s, ignore_index);
}

void nll_backward_cpu(const Tensor& grad_log_probs, const Tensor& grad_loss, const Tensor& target_t,
                      int64_t ignore_index) {
  const int64_t n = grad_log_probs.shape()[0], c = grad_log_probs.shape()[1], s = grad_log_probs.shape()[2];
  const int64_t* target = static_cast<const int64_t*>(target_t.raw_data());
  const bool per_sample = grad_loss.dim() > 0;
  dispatch_float(grad_log_probs.dtype(), [&]<class T>(TypeTag<T>) {
    dispatch_float(grad_loss.dtype(), [&]<class C>(TypeTag<C>) {
      if constexpr (std::is_same_v<C, float> || std::is_same_v<C, double>) {
        T* gx = static_cast<T*>(grad_log_probs.raw_data());
        const C* w = static_cast<const C*>(grad_loss.raw_data());
        for (int64_t r = 0; r < n * s; ++r) {
          const int64_t t = target[r];
          if (t != ignore_index) gx[(r / s) * c * s + t * s + r % s] = static_cast<T>(-w[per_sample ? r : 0]);
        }
      }
    });
  });
}

template <class C>
C clamped_log(C v) {
  return std::max(std::log(v), C(-100));
}

void pointwise_loss_cpu(PointwiseLoss kind, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c,
                        double param) {
  std::atomic<bool> out_of_range{false};
  dispatch_float(out.dtype(), [&]<class T>(TypeTag<T>) {
    using C = acc_t<T>;
    switch (kind) {
      case PointwiseLoss::SquaredError:
        binary_loop<T, T, T>(out, a, b, [](T x, T y) {
          const C d = C(x) - C(y);
          return T(d * d);
        });
        break;
      case PointwiseLoss::AbsoluteError:
        binary_loop<T, T, T>(out, a, b, [](T x, T y) { return T(std::abs(C(x) - C(y))); });
        break;
      case PointwiseLoss::SmoothL1:
        binary_loop<T, T, T>(out, a, b, [beta = C(param)](T x, T y) {
          const C z = std::abs(C(x) - C(y));
          return T(z < beta ? C(0.5) * z * z / beta : z - C(0.5) * beta);
        });
        break;
      case PointwiseLoss::Huber:
        binary_loop<T, T, T>(out, a, b, [delta = C(param)](T x, T y) {
          const C z = std::abs(C(x) - C(y));
          return T(z < delta ? C(0.5) * z * z : delta * (z - C(0.5) * delta));
        });
        break;
      case PointwiseLoss::KlDiv:
        binary_loop<T, T, T>(out, a, b, [](T x, T t_in) {
          const C t = C(t_in);
          return T((t == C(0) ? C(0) : t * std::log(t)) - t * C(x));  // xlogy(t, t) - t x, as PyTorch
        });
        break;
      case PointwiseLoss::KlDivLogTarget:
        binary_loop<T, T, T>(out, a, b, [](T x, T t_in) {
          const C t = C(t_in);
          return T(std::exp(t) * (t - C(x)));
        });
        break;
      case PointwiseLoss::BinaryCrossEntropy:
        binary_loop<T, T, T>(out, a, b, [&](T p_in, T y_in) {
          const C p = C(p_in), y = C(y_in);
          if (!(p >= C(0) && p <= C(1))) out_of_range.store(true, std::memory_order_relaxed);
          return T(-(y * clamped_log(p) + (C(1) - y) * clamped_log(C(1) - p)));
        });
        break;
      case PointwiseLoss::BinaryCrossEntropyWithLogits: {
        // (1 - y) x + l (log1p(exp(-|x|)) + max(-x, 0)): exp never overflows.
        auto f = [](C x, C y, C pw) {
          const C l = C(1) + (pw - C(1)) * y;
          return (C(1) - y) * x + l * (std::log1p(std::exp(-std::abs(x))) + std::max(-x, C(0)));
        };
        if (!c.defined()) {
          binary_loop<T, T, T>(out, a, b, [&](T x, T y) { return T(f(C(x), C(y), C(1))); });
          break;
        }
        for_each_run<4>(out.shape(), {&out, &a, &b, &c},
                        [&](const std::array<char*, 4>& p, const std::array<int64_t, 4>& st, int64_t cnt) {
                          for (int64_t i = 0; i < cnt; ++i) {
                            const C x = C(*reinterpret_cast<const T*>(p[1] + i * st[1]));
                            const C y = C(*reinterpret_cast<const T*>(p[2] + i * st[2]));
                            const C pw = C(*reinterpret_cast<const T*>(p[3] + i * st[3]));
                            *reinterpret_cast<T*>(p[0] + i * st[0]) = T(f(x, y, pw));
                          }
                        });
        break;
      }
    }
  });
  HG_CHECK(!out_of_range.load(), "binary_cross_entropy",
           "all elements of the input (probabilities) must be between 0 and 1; use "
           "binary_cross_entropy_with_logits on logits");
}

}  // namespace

HG_REGISTER_KERNEL(cross_entropy_stub, kCPU, cross_entropy_cpu);
HG_REGISTER_KERNEL(cross_entropy_backward_stub, kCPU, cross_entropy_backward_cpu);
HG_REGISTER_KERNEL(nll_stub, kCPU, nll_cpu);
HG_REGISTER_KERNEL(nll_backward_stub, kCPU, nll_backward_cpu);
HG_REGISTER_KERNEL(pointwise_loss_stub, kCPU, pointwise_loss_cpu);

}  // namespace hg::cpu
