// CPU adaptive pooling over [P, H, W] planes, planes split across threads. A 1x1 average (global
// pooling, as ResNet's head) is one contiguous sum per plane; the backward of the average gathers
// each input's share from the bins holding it (no scatter), the max pool records the first
// maximum (NaN wins) as PyTorch's.
#include <limits>
#include <vector>

#include "framework/ops/adaptive_pool_kernels.h"
#include "kernels/common/adaptive_bins.h"
#include "kernels/cpu/loops.h"

namespace hg::cpu {
namespace {

using adaptive::bin_end;
using adaptive::bin_start;

int64_t adaptive_grain(int64_t plane_work) {
  return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(plane_work, 1));
}

void adaptive_avg_cpu(const Tensor& out, const Tensor& in) {
  dispatch_floating(in.dtype(), "adaptive_avg_pool2d", [&]<class T>(TypeTag<T>) {
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const int64_t planes = in.size(0), h = in.size(1), w = in.size(2), oh = out.size(1), ow = out.size(2);
    const T* x = static_cast<const T*>(in.raw_data());
    T* y = static_cast<T*>(out.raw_data());
    parallel_for(planes, adaptive_grain(h * w), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const T* xp = x + p * h * w;
        if (oh == 1 && ow == 1) {  // global pooling: the plane is one contiguous run
          Acc s = 0;
          for (int64_t i = 0; i < h * w; ++i) s += static_cast<Acc>(static_cast<acc_t<T>>(xp[i]));
          y[p] = static_cast<T>(static_cast<acc_t<T>>(s / static_cast<Acc>(h * w)));
          continue;
        }
        for (int64_t i = 0; i < oh; ++i) {
          const int64_t h0 = bin_start(i, h, oh), h1 = bin_end(i, h, oh);
          for (int64_t j = 0; j < ow; ++j) {
            const int64_t w0 = bin_start(j, w, ow), w1 = bin_end(j, w, ow);
            Acc s = 0;
            for (int64_t r = h0; r < h1; ++r)
              for (int64_t c = w0; c < w1; ++c) s += static_cast<Acc>(static_cast<acc_t<T>>(xp[r * w + c]));
            y[(p * oh + i) * ow + j] =
                static_cast<T>(static_cast<acc_t<T>>(s / static_cast<Acc>((h1 - h0) * (w1 - w0))));
          }
        }
      }
    });
  });
}

void adaptive_avg_backward_cpu(const Tensor& grad_in, const Tensor& grad_out) {
  dispatch_floating(grad_out.dtype(), "adaptive_avg_pool2d", [&]<class T>(TypeTag<T>) {
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const int64_t planes = grad_in.size(0), h = grad_in.size(1), w = grad_in.size(2), oh = grad_out.size(1),
                  ow = grad_out.size(2);
    const T* gy = static_cast<const T*>(grad_out.raw_data());
    T* gx = static_cast<T*>(grad_in.raw_data());
    parallel_for(planes, adaptive_grain(h * w), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const T* gp = gy + p * oh * ow;
        T* xp = gx + p * h * w;
        for (int64_t r = 0; r < h; ++r) {
          const int64_t i0 = bin_start(r, oh, h), i1 = bin_end(r, oh, h);
          for (int64_t c = 0; c < w; ++c) {
            const int64_t j0 = bin_start(c, ow, w), j1 = bin_end(c, ow, w);
            Acc s = 0;
            for (int64_t i = i0; i < i1; ++i) {
              const auto rows = static_cast<Acc>(bin_end(i, h, oh) - bin_start(i, h, oh));
              for (int64_t j = j0; j < j1; ++j) {
                const auto cols = static_cast<Acc>(bin_end(j, w, ow) - bin_start(j, w, ow));
                s += static_cast<Acc>(static_cast<acc_t<T>>(gp[i * ow + j])) / (rows * cols);
              }
            }
            xp[r * w + c] = static_cast<T>(static_cast<acc_t<T>>(s));
          }
        }
      }
    });
  });
}

void adaptive_max_cpu(const Tensor& out, const Tensor& indices, const Tensor& in) {
  dispatch_floating(in.dtype(), "adaptive_max_pool2d", [&]<class T>(TypeTag<T>) {
    using Acc = acc_t<T>;
    const int64_t planes = in.size(0), h = in.size(1), w = in.size(2), oh = out.size(1), ow = out.size(2);
    const T* x = static_cast<const T*>(in.raw_data());
    T* y = static_cast<T*>(out.raw_data());
    int64_t* ix = static_cast<int64_t*>(indices.raw_data());
    parallel_for(planes, adaptive_grain(h * w), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const T* xp = x + p * h * w;
        for (int64_t i = 0; i < oh; ++i) {
          const int64_t h0 = bin_start(i, h, oh), h1 = bin_end(i, h, oh);
          for (int64_t j = 0; j < ow; ++j) {
            const int64_t w0 = bin_start(j, w, ow), w1 = bin_end(j, w, ow);
            int64_t best_i = h0 * w + w0;
            Acc best = static_cast<Acc>(xp[best_i]);
            for (int64_t r = h0; r < h1 && best == best; ++r) {
              for (int64_t c = w0; c < w1; ++c) {
                const Acc v = static_cast<Acc>(xp[r * w + c]);
                if (v > best || v != v) {
                  best = v, best_i = r * w + c;
                  if (v != v) break;  // NaN wins: the first one is kept
                }
              }
            }
            y[(p * oh + i) * ow + j] = xp[best_i];
            ix[(p * oh + i) * ow + j] = best_i;
          }
        }
      }
    });
  });
}

}  // namespace

HG_REGISTER_KERNEL(adaptive_avg_pool2d_stub, kCPU, adaptive_avg_cpu);
HG_REGISTER_KERNEL(adaptive_avg_pool2d_backward_stub, kCPU, adaptive_avg_backward_cpu);
HG_REGISTER_KERNEL(adaptive_max_pool2d_stub, kCPU, adaptive_max_cpu);

}  // namespace hg::cpu
