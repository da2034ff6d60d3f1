// CPU max and average pooling over [N*C] independent planes, split across threads by plane
// (so backward scatters never race). 16-bit gradients are summed in float32 per plane and
// rounded once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "framework/ops/pool_kernels.h"
#include "kernels/cpu/conv/pool_2x2.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/convert.h"
#include "kernels/cpu/simd/float_bits.h"

namespace hg::cpu {
namespace {

struct Planes {
  int64_t planes, h, w, oh, ow;
};
Planes planes_of(const Tensor& in, const Tensor& out) {
  return {in.size(0) * in.size(1), in.size(2), in.size(3), out.size(2), out.size(3)};
}
int64_t grain_for(int64_t plane_work) {
  return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(plane_work, 1));
}

// The usual 2x2, stride 2 window with no padding or dilation, every window inside the image:
// no bounds checks, and the four candidates compared by selects rather than branches (random
// data makes branches mispredict about every other window).
bool is_plain_2x2(const Planes& g, const Pool2dParams& p) {
  return p.kernel[0] == 2 && p.kernel[1] == 2 && p.stride[0] == 2 && p.stride[1] == 2 && p.padding[0] == 0 &&
         p.padding[1] == 0 && p.dilation[0] == 1 && p.dilation[1] == 1 && 2 * g.oh <= g.h && 2 * g.ow <= g.w;
}

// A window's 0..3 code as the flat index of its element in the plane.
inline void expand_codes(const uint8_t* __restrict codes, int64_t* __restrict ix, int64_t n, int64_t base, int64_t w) {
  for (int64_t ox = 0; ox < n; ++ox) ix[ox] = base + 2 * ox + (codes[ox] & 1) + (codes[ox] >> 1) * w;
}

// The plain 2x2 forward: the rows of conv2d_relu_max_pool2d's pool (kernels/cpu/conv/pool_2x2.h),
// each window's 0..3 code turned into a flat index.
template <class T>
void max_pool_2x2(const Planes& g, const T* x, T* y, int64_t* ix) {
  parallel_for(g.planes, grain_for(g.oh * g.ow * 4), [&](int64_t b, int64_t e) {
    std::vector<uint8_t> codes(static_cast<size_t>(g.oh * g.ow));
    for (int64_t pl = b; pl < e; ++pl) {
      const int64_t o = pl * g.oh * g.ow;
      max_pool_2x2_codes_planes(x + pl * g.h * g.w, y + o, codes.data(), 1, g.h, g.w);
      for (int64_t oy = 0; oy < g.oh; ++oy)
        expand_codes(codes.data() + oy * g.ow, ix + o + oy * g.ow, g.ow, 2 * oy * g.w, g.w);
    }
  });
}

template <class T>
void max_pool_typed(const Tensor& out, const Tensor& indices, const Tensor& input, const Pool2dParams& p) {
  using Acc = acc_t<T>;
  const Planes g = planes_of(input, out);
  const T* x = static_cast<const T*>(input.raw_data());
  T* y = static_cast<T*>(out.raw_data());
  int64_t* ix = static_cast<int64_t*>(indices.raw_data());
  if (is_plain_2x2(g, p)) {
    max_pool_2x2(g, x, y, ix);
    return;
  }
  parallel_for(g.planes, grain_for(g.oh * g.ow * p.kernel[0] * p.kernel[1]), [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; ++pl) {
      const T* xp = x + pl * g.h * g.w;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        // Window rows inside the image: hstart + i * dilation for i with 0 <= row < h.
        const int64_t hs = oy * p.stride[0] - p.padding[0];
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const int64_t ws = ox * p.stride[1] - p.padding[1];
          Acc best = -std::numeric_limits<Acc>::infinity();
          int64_t best_i = -1;
          for (int64_t i = 0; i < p.kernel[0]; ++i) {
            const int64_t iy = hs + i * p.dilation[0];
            if (iy < 0 || iy >= g.h) continue;
            for (int64_t j = 0; j < p.kernel[1]; ++j) {
              const int64_t jx = ws + j * p.dilation[1];
              if (jx < 0 || jx >= g.w) continue;
              const Acc v = static_cast<Acc>(xp[iy * g.w + jx]);
              // The first element seeds the index; a later one replaces it when larger or NaN
              // (so NaN propagates, as in PyTorch).
              if (best_i < 0 || v > best || std::isnan(v)) best = v, best_i = iy * g.w + jx;
            }
          }
          const int64_t o = (pl * g.oh + oy) * g.ow + ox;
          y[o] = best_i < 0 ? static_cast<T>(best) : xp[best_i];
          ix[o] = std::max<int64_t>(best_i, 0);
        }
      }
    }
  });
}

// How the 2x2 backward moves T's values: 16-bit floats as their bits (uint16_t), so its loop
// vectorises (a float round trip per element kept it scalar), the others as themselves.
template <class T>
using Stored = std::conditional_t<sizeof(T) == 2, uint16_t, T>;

// 0 + g, stored. For float/double, computed. For float16/bfloat16, on the bits (FloatBits).
template <class T>
Stored<T> plus_zero(Stored<T> g) {
  if constexpr (sizeof(T) == 2) {
    return FloatBits<T>::plus_zero(g);
  } else {
    return T(0) + g;
  }
}

// The backward of one output row when each index lies in its own output's 2x2 block (as the
// plain forward above leaves them): the blocks are disjoint, so every input element of the
// block rows is written once, with its gradient or 0, and nothing needs zeroing or adding up.
// Returns false when an index lies elsewhere (indices from another window geometry with the
// same sizes); the caller then redoes the plane the general way. 0 + g, as the general path
// adds into zeros (so -0 becomes +0 there and here alike).
template <class T>
bool max_pool_2x2_backward_row(const T* __restrict gy, const int64_t* __restrict ix, T* __restrict r0, T* __restrict r1,
                               int64_t n, int64_t base, int64_t w) {
  using S = Stored<T>;
  const S* __restrict g_in = reinterpret_cast<const S*>(gy);
  S* __restrict o0 = reinterpret_cast<S*>(r0);
  S* __restrict o1 = reinterpret_cast<S*>(r1);
  int64_t stray = 0;  // bitwise ops, not || : a branch-free body vectorises
  for (int64_t ox = 0; ox < n; ++ox) {
    const int64_t off = ix[ox] - (base + 2 * ox);
    const S g = plus_zero<T>(g_in[ox]), z = S(0);
    o0[2 * ox] = off == 0 ? g : z;
    o0[2 * ox + 1] = off == 1 ? g : z;
    o1[2 * ox] = off == w ? g : z;
    o1[2 * ox + 1] = off == w + 1 ? g : z;
    stray += (off != 0) & (off != 1) & (off != w) & (off != w + 1);
  }
  return stray == 0;
}

// Every index inside its own output's 2x2 block: see max_pool_2x2_backward_row.
template <class T>
bool max_pool_2x2_backward_plane(const Planes& g, const T* gy, const int64_t* ix, T* dst) {
  bool ok = true;
  for (int64_t oy = 0; oy < g.oh && ok; ++oy) {
    const int64_t row = 2 * oy * g.w;
    ok = max_pool_2x2_backward_row(gy + oy * g.ow, ix + oy * g.ow, dst + row, dst + row + g.w, g.ow, row, g.w);
    if (2 * g.ow < g.w) {  // the columns right of the last window
      std::fill(dst + row + 2 * g.ow, dst + row + g.w, T(0));
      std::fill(dst + row + g.w + 2 * g.ow, dst + row + 2 * g.w, T(0));
    }
  }
  std::fill(dst + 2 * g.oh * g.w, dst + g.h * g.w, T(0));  // the rows below the last window
  return ok;
}

template <class T>
void max_pool_backward_typed(const Tensor& grad_input, const Tensor& grad_out, const Tensor& indices) {
  using Acc = acc_t<T>;
  const Planes g = planes_of(grad_input, grad_out);
  const T* gy = static_cast<const T*>(grad_out.raw_data());
  const int64_t* ix = static_cast<const int64_t*>(indices.raw_data());
  T* gx = static_cast<T*>(grad_input.raw_data());
  const int64_t hw = g.h * g.w, ohw = g.oh * g.ow;
  const bool maybe_2x2 = 2 * g.oh <= g.h && 2 * g.ow <= g.w;
  parallel_for(g.planes, grain_for(hw + ohw), [&](int64_t b, int64_t e) {
    std::vector<Acc> acc;
    for (int64_t pl = b; pl < e; ++pl) {
      T* dst = gx + pl * hw;
      if (maybe_2x2 && max_pool_2x2_backward_plane(g, gy + pl * ohw, ix + pl * ohw, dst)) continue;
      acc.assign(static_cast<size_t>(hw), Acc(0));
      for (int64_t o = 0; o < ohw; ++o)
        acc[static_cast<size_t>(ix[pl * ohw + o])] += static_cast<Acc>(gy[pl * ohw + o]);
      for (int64_t i = 0; i < hw; ++i) dst[i] = static_cast<T>(acc[static_cast<size_t>(i)]);
    }
  });
}

// The window of output (oy, ox) clipped to the image, and its divisor (PyTorch's rule: with
// count_include_pad the window is clipped to the padded image, else to the image).
struct AvgWindow {
  int64_t h0, h1, w0, w1;
  double divisor;
};
AvgWindow avg_window(int64_t oy, int64_t ox, int64_t h, int64_t w, const Pool2dParams& p) {
  int64_t h0 = oy * p.stride[0] - p.padding[0], w0 = ox * p.stride[1] - p.padding[1];
  int64_t h1 = std::min(h0 + p.kernel[0], h + p.padding[0]), w1 = std::min(w0 + p.kernel[1], w + p.padding[1]);
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0), w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, h), w1 = std::min(w1, w);
  const int64_t inside = std::max<int64_t>(h1 - h0, 0) * std::max<int64_t>(w1 - w0, 0);
  return {h0, h1, w0, w1, static_cast<double>(p.count_include_pad ? padded : inside)};
}

template <class T>
void avg_pool_typed(const Tensor& out, const Tensor& input, const Pool2dParams& p) {
  using Acc = acc_t<T>;
  const Planes g = planes_of(input, out);
  const T* x = static_cast<const T*>(input.raw_data());
  T* y = static_cast<T*>(out.raw_data());
  parallel_for(g.planes, grain_for(g.oh * g.ow * p.kernel[0] * p.kernel[1]), [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; ++pl) {
      const T* xp = x + pl * g.h * g.w;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const AvgWindow win = avg_window(oy, ox, g.h, g.w, p);
          Acc s = 0;
          for (int64_t iy = win.h0; iy < win.h1; ++iy)
            for (int64_t jx = win.w0; jx < win.w1; ++jx) s += static_cast<Acc>(xp[iy * g.w + jx]);
          // An all-padding window (possible with ceil_mode) averages nothing: 0, as PyTorch.
          y[(pl * g.oh + oy) * g.ow + ox] =
              win.h0 >= win.h1 || win.w0 >= win.w1 ? T(0) : static_cast<T>(s / static_cast<Acc>(win.divisor));
        }
      }
    }
  });
}

template <class T>
void avg_pool_backward_typed(const Tensor& grad_input, const Tensor& grad_out, const Pool2dParams& p) {
  using Acc = acc_t<T>;
  const Planes g = planes_of(grad_input, grad_out);
  const T* gy = static_cast<const T*>(grad_out.raw_data());
  T* gx = static_cast<T*>(grad_input.raw_data());
  const int64_t hw = g.h * g.w, ohw = g.oh * g.ow;
  parallel_for(g.planes, grain_for(hw + ohw * p.kernel[0] * p.kernel[1]), [&](int64_t b, int64_t e) {
    std::vector<Acc> acc(static_cast<size_t>(hw));
    for (int64_t pl = b; pl < e; ++pl) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const AvgWindow win = avg_window(oy, ox, g.h, g.w, p);
          if (win.h0 >= win.h1 || win.w0 >= win.w1) continue;
          const Acc v = static_cast<Acc>(gy[pl * ohw + oy * g.ow + ox]) / static_cast<Acc>(win.divisor);
          for (int64_t iy = win.h0; iy < win.h1; ++iy)
            for (int64_t jx = win.w0; jx < win.w1; ++jx) acc[static_cast<size_t>(iy * g.w + jx)] += v;
        }
      }
      T* dst = gx + pl * hw;
      for (int64_t i = 0; i < hw; ++i) dst[i] = static_cast<T>(acc[static_cast<size_t>(i)]);
    }
  });
}

void max_pool_cpu(const Tensor& out, const Tensor& indices, const Tensor& input, const Pool2dParams& p) {
  dispatch_floating(input.dtype(), "max_pool2d",
                    [&]<class T>(TypeTag<T>) { max_pool_typed<T>(out, indices, input, p); });
}
void max_pool_backward_cpu(const Tensor& grad_input, const Tensor& grad_out, const Tensor& indices) {
  dispatch_floating(grad_out.dtype(), "max_pool2d",
                    [&]<class T>(TypeTag<T>) { max_pool_backward_typed<T>(grad_input, grad_out, indices); });
}
void avg_pool_cpu(const Tensor& out, const Tensor& input, const Pool2dParams& p) {
  dispatch_floating(input.dtype(), "avg_pool2d", [&]<class T>(TypeTag<T>) { avg_pool_typed<T>(out, input, p); });
}
void avg_pool_backward_cpu(const Tensor& grad_input, const Tensor& grad_out, const Pool2dParams& p) {
  dispatch_floating(grad_out.dtype(), "avg_pool2d",
                    [&]<class T>(TypeTag<T>) { avg_pool_backward_typed<T>(grad_input, grad_out, p); });
}

}  // namespace

HG_REGISTER_KERNEL(max_pool2d_stub, kCPU, max_pool_cpu);
HG_REGISTER_KERNEL(max_pool2d_backward_stub, kCPU, max_pool_backward_cpu);
HG_REGISTER_KERNEL(avg_pool2d_stub, kCPU, avg_pool_cpu);
HG_REGISTER_KERNEL(avg_pool2d_backward_stub, kCPU, avg_pool_backward_cpu);

}  // namespace hg::cpu
