// CPU nearest and bilinear upsampling over [P, H, W] planes, planes split across threads. The
// source taps of each output row and column are found once per call (interp_index.h); the
// backward adds each output's gradient to its taps in a float32 (float64) plane buffer, rounded
// once.
#include <vector>

#include "framework/ops/interpolate_kernels.h"
#include "kernels/common/interp_index.h"
#include "kernels/cpu/loops.h"

namespace hg::cpu {
namespace {

// The taps along one dim: nearest uses i0 with weight 1 (i1 = i0, l1 = 0).
template <class A>
std::vector<interp::LinearTap<A>> taps_for(int64_t in, int64_t out, const InterpParams& p, int d) {
  std::vector<interp::LinearTap<A>> taps(static_cast<size_t>(out));
  if (p.bilinear) {
    const A step = interp::step<A>(in, out, p.align_corners, p.scale[d]);
    for (int64_t o = 0; o < out; ++o)
      taps[static_cast<size_t>(o)] = interp::linear_source(o, in, step, p.align_corners);
  } else {
    const float step = interp::step<float>(in, out, false, p.scale[d]);
    for (int64_t o = 0; o < out; ++o) {
      const int64_t i = interp::nearest_source(o, in, step);
      taps[static_cast<size_t>(o)] = {i, i, A(1), A(0)};
    }
  }
  return taps;
}

int64_t interp_grain(int64_t plane_work) {
  return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(plane_work, 1));
}

void interpolate_cpu(const Tensor& out, const Tensor& in, const InterpParams& p) {
  dispatch_floating(in.dtype(), "interpolate", [&]<class T>(TypeTag<T>) {
    using A = acc_t<T>;
    const int64_t planes = in.size(0), h = in.size(1), w = in.size(2), oh = out.size(1), ow = out.size(2);
    const auto rows = taps_for<A>(h, oh, p, 0), cols = taps_for<A>(w, ow, p, 1);
    const T* x = static_cast<const T*>(in.raw_data());
    T* y = static_cast<T*>(out.raw_data());
    parallel_for(planes, interp_grain(oh * ow), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) {
        const T* xp = x + pl * h * w;
        T* yp = y + pl * oh * ow;
        for (int64_t i = 0; i < oh; ++i) {
          const auto& r = rows[static_cast<size_t>(i)];
          const T* x0 = xp + r.i0 * w;
          const T* x1 = xp + r.i1 * w;
          for (int64_t j = 0; j < ow; ++j) {
            const auto& c = cols[static_cast<size_t>(j)];
            if (!p.bilinear) {
              yp[i * ow + j] = x0[c.i0];
              continue;
            }
            const A top = c.l0 * static_cast<A>(x0[c.i0]) + c.l1 * static_cast<A>(x0[c.i1]);
            const A bottom = c.l0 * static_cast<A>(x1[c.i0]) + c.l1 * static_cast<A>(x1[c.i1]);
            yp[i * ow + j] = static_cast<T>(r.l0 * top + r.l1 * bottom);
          }
        }
      }
    });
  });
}

void interpolate_backward_cpu(const Tensor& grad_in, const Tensor& grad_out, const InterpParams& p) {
  dispatch_floating(grad_out.dtype(), "interpolate", [&]<class T>(TypeTag<T>) {
    using A = acc_t<T>;
    using Buf = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const int64_t planes = grad_in.size(0), h = grad_in.size(1), w = grad_in.size(2), oh = grad_out.size(1),
                  ow = grad_out.size(2);
    const auto rows = taps_for<A>(h, oh, p, 0), cols = taps_for<A>(w, ow, p, 1);
    const T* gy = static_cast<const T*>(grad_out.raw_data());
    T* gx = static_cast<T*>(grad_in.raw_data());
    parallel_for(planes, interp_grain(oh * ow + h * w), [&](int64_t b, int64_t e) {
      std::vector<Buf> acc(static_cast<size_t>(h * w));
      for (int64_t pl = b; pl < e; ++pl) {
        std::fill(acc.begin(), acc.end(), Buf(0));
        const T* gp = gy + pl * oh * ow;
        for (int64_t i = 0; i < oh; ++i) {
          const auto& r = rows[static_cast<size_t>(i)];
          Buf* a0 = acc.data() + r.i0 * w;
          Buf* a1 = acc.data() + r.i1 * w;
          for (int64_t j = 0; j < ow; ++j) {
            const auto& c = cols[static_cast<size_t>(j)];
            const auto g = static_cast<Buf>(static_cast<A>(gp[i * ow + j]));
            a0[c.i0] += static_cast<Buf>(r.l0 * c.l0) * g;
            a0[c.i1] += static_cast<Buf>(r.l0 * c.l1) * g;
            a1[c.i0] += static_cast<Buf>(r.l1 * c.l0) * g;
            a1[c.i1] += static_cast<Buf>(r.l1 * c.l1) * g;
          }
        }
        T* xp = gx + pl * h * w;
        for (int64_t k = 0; k < h * w; ++k) xp[k] = static_cast<T>(static_cast<A>(acc[static_cast<size_t>(k)]));
      }
    });
  });
}

}  // namespace

HG_REGISTER_KERNEL(interpolate_stub, kCPU, interpolate_cpu);
HG_REGISTER_KERNEL(interpolate_backward_stub, kCPU, interpolate_backward_cpu);

}  // namespace hg::cpu
