// CPU max and average pooling over [N*C] independent planes, split across threads by plane
// (so backward scatters never race). 16-bit gradients are summed in float32 per plane and
// rounded once.
#include <algorithm>
#include <cmath>
#if defined(__AVX512F__)
// GCC 12 flags the undefined pass-through operands inside its own AVX-512 intrinsics as "may be
// used uninitialized" once they are inlined (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
#include <limits>
#include <vector>

#include "framework/ops/conv_kernels.h"
#include "framework/ops/pool_kernels.h"
#include "kernels/cpu/conv/pool_2x2.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/convert.h"

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

// One output row: r0 and r1 are the windows' two input rows, r0[0] is element `base` of the
// plane. Same rule as the general loop (the first candidate seeds, a later one wins when larger
// or NaN), in the same order; the stored value is the chosen element itself, NaN payloads
// included. Straight-line selects on restrict pointers: GCC vectorises it (the stride-2 loads
// become shuffles), about 7x faster than the per-window loop it replaces.
template <class T>
void max_pool_2x2_row(const T* __restrict r0, const T* __restrict r1, T* __restrict y, int64_t* __restrict ix,
                      int64_t n, int64_t base, int64_t w) {
  using Acc = acc_t<T>;
  if constexpr (std::is_same_v<T, Half>) {
    // float16: the rows are widened a chunk at a time (F16C; its software conversion per element
    // kept this loop scalar), the float loop picks each window's index, and the chosen element's
    // bits are copied from the plane (r0 is element `base` of it).
    constexpr int64_t kChunk = 128;
    alignas(64) float a[2 * kChunk], b[2 * kChunk], picked[kChunk];
    const auto* plane = reinterpret_cast<const uint16_t*>(r0) - base;
    auto* uy = reinterpret_cast<uint16_t*>(y);
    for (int64_t s = 0; s < n; s += kChunk) {
      const int64_t m = std::min(kChunk, n - s);
      load_run(r0 + 2 * s, a, 2 * m);
      load_run(r1 + 2 * s, b, 2 * m);
      max_pool_2x2_row<float>(a, b, picked, ix + s, m, base + 2 * s, w);
      for (int64_t k = 0; k < m; ++k) uy[s + k] = plane[ix[s + k]];
    }
    return;
  }
  for (int64_t ox = 0; ox < n; ++ox) {
    const T c0 = r0[2 * ox], c1 = r0[2 * ox + 1], c2 = r1[2 * ox], c3 = r1[2 * ox + 1];
    T best = c0;
    Acc bv = static_cast<Acc>(c0);
    int64_t off = 0;
    const Acc v1 = static_cast<Acc>(c1), v2 = static_cast<Acc>(c2), v3 = static_cast<Acc>(c3);
    const bool t1 = v1 > bv || v1 != v1;
    best = t1 ? c1 : best, bv = t1 ? v1 : bv, off = t1 ? 1 : off;
    const bool t2 = v2 > bv || v2 != v2;
    best = t2 ? c2 : best, bv = t2 ? v2 : bv, off = t2 ? w : off;
    const bool t3 = v3 > bv || v3 != v3;
    best = t3 ? c3 : best, off = t3 ? w + 1 : off;
    y[ox] = best;
    ix[ox] = base + 2 * ox + off;
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
// One row of 2x2 windows with AVX-512, 16 windows a step and the last ones under a mask (the
// rows are short: 12 windows in the MNIST CNN, where the compiler's loop spent half its time in
// its scalar tail). The rule of max_pool_2x2_row: c0 seeds, c1, c2, c3 in turn win when larger
// or NaN, compared as float32 (exact for the 16-bit types); the chosen element's bits are stored.
template <class T>
void max_pool_2x2_codes_row_avx512(const T* r0, const T* r1, T* y, uint8_t* codes, int64_t n) {
  for (int64_t ox = 0; ox < n; ox += 16) {
    const int64_t rem = std::min<int64_t>(16, n - ox);
    const __mmask16 m = static_cast<__mmask16>((uint32_t{1} << rem) - 1);
    __m512 c[4];
    __m256i bits[4] = {};  // 16-bit types: the candidates' own bits
    if constexpr (std::is_same_v<T, float>) {
      const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
      const __mmask16 m_lo = static_cast<__mmask16>(rem >= 8 ? 0xffff : (uint32_t{1} << (2 * rem)) - 1);
      const __mmask16 m_hi = static_cast<__mmask16>(rem <= 8 ? 0 : (uint32_t{1} << (2 * rem - 16)) - 1);
      const float* rows[2] = {r0, r1};
      for (int r = 0; r < 2; ++r) {
        const __m512 lo = _mm512_maskz_loadu_ps(m_lo, rows[r] + 2 * ox);
        const __m512 hi = _mm512_maskz_loadu_ps(m_hi, rows[r] + 2 * ox + 16);
        c[2 * r] = _mm512_permutex2var_ps(lo, even, hi);
        c[2 * r + 1] = _mm512_permutex2var_ps(lo, odd, hi);
      }
    } else {
      // A row's 32 values as 16 32-bit lanes: each window's left element in a lane's low half,
      // its right element in the high half.
      const __mmask32 m2 = static_cast<__mmask32>((uint64_t{1} << (2 * rem)) - 1);
      const void* rows[2] = {r0, r1};
      for (int r = 0; r < 2; ++r) {
        const __m512i v = _mm512_maskz_loadu_epi16(m2, static_cast<const uint16_t*>(rows[r]) + 2 * ox);
        bits[2 * r] = _mm512_cvtepi32_epi16(v);
        bits[2 * r + 1] = _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16));
        if constexpr (std::is_same_v<T, BFloat16>) {  // a bfloat16 is a float32's top half
          c[2 * r] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
          c[2 * r + 1] = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
        } else {
          c[2 * r] = _mm512_cvtph_ps(bits[2 * r]);
          c[2 * r + 1] = _mm512_cvtph_ps(bits[2 * r + 1]);
        }
      }
    }
    __m512 best = c[0];
    __m512i code = _mm512_setzero_si512();
    __m256i best_bits = bits[0];
    for (int j = 1; j < 4; ++j) {
      const __mmask16 t = _mm512_cmp_ps_mask(c[j], best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(c[j], c[j], _CMP_UNORD_Q);
      best = _mm512_mask_blend_ps(t, best, c[j]);
      code = _mm512_mask_blend_epi32(t, code, _mm512_set1_epi32(j));
      if constexpr (!std::is_same_v<T, float>) best_bits = _mm256_mask_blend_epi16(t, best_bits, bits[j]);
    }
    if constexpr (std::is_same_v<T, float>) {
      _mm512_mask_storeu_ps(y + ox, m, best);
    } else {
      _mm256_mask_storeu_epi16(reinterpret_cast<uint16_t*>(y) + ox, m, best_bits);
    }
    _mm512_mask_cvtepi32_storeu_epi8(codes + ox, m, code);
  }
}
#endif

// A window's 0..3 code as the flat index of its element in the plane.
inline void expand_codes(const uint8_t* __restrict codes, int64_t* __restrict ix, int64_t n, int64_t base, int64_t w) {
  for (int64_t ox = 0; ox < n; ++ox) ix[ox] = base + 2 * ox + (codes[ox] & 1) + (codes[ox] >> 1) * w;
}

template <class T>
void max_pool_2x2(const Planes& g, const T* x, T* y, int64_t* ix) {
  parallel_for(g.planes, grain_for(g.oh * g.ow * 4), [&](int64_t b, int64_t e) {
    std::vector<uint8_t> codes(static_cast<size_t>(g.ow));
    for (int64_t pl = b; pl < e; ++pl) {
      const T* xp = x + pl * g.h * g.w;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        const int64_t row = 2 * oy * g.w, o = (pl * g.oh + oy) * g.ow;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
        if constexpr (sizeof(T) <= 4) {
          // The vector rows of conv2d_relu_max_pool2d, their 0..3 codes turned into flat indices.
          max_pool_2x2_codes_row_avx512<T>(xp + row, xp + row + g.w, y + o, codes.data(), g.ow);
          expand_codes(codes.data(), ix + o, g.ow, row, g.w);
          continue;
        }
#endif
        max_pool_2x2_row(xp + row, xp + row + g.w, y + o, ix + o, g.ow, row, g.w);
      }
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

// T's bits as an unsigned integer of its width. conv2d_relu_max_pool2d's backward selects and
// masks on those, which GCC vectorises (on float values it made branches).
template <class T>
struct FloatBits {
  using U = std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
  static constexpr int kBits = 8 * sizeof(T);
  static constexpr int kMantissa = std::is_same_v<T, BFloat16> ? 7
                                   : std::is_same_v<T, Half>   ? 10
                                   : sizeof(T) == 4            ? 23
                                                               : 52;
  static constexpr U kSign = U(U(1) << (kBits - 1));
  static constexpr U kInf = U(kSign - (U(1) << kMantissa));  // exponent all ones, mantissa 0
  static constexpr U kQuiet = U(U(1) << (kMantissa - 1));
  static constexpr U kMantissaMask = U((U(1) << kMantissa) - 1);
  // 0 + g on the bits: -0 becomes +0 and a signalling NaN is quietened; anything else is g.
  static U plus_zero(U g) {
    const bool nan = U(g & kInf) == kInf && U(g & kMantissaMask) != 0;
    return g == kSign ? U(0) : nan ? U(g | kQuiet) : g;
  }
  // v > 0: sign clear, not zero, not NaN (infinity is positive).
  static bool positive(U v) { return v != 0 && v <= kInf; }
};

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

// Flat offsets 0, 1, w, w + 1 inside each window (ix minus the window's first element) as
// 0..3. A function of its own, arguments by value and restrict: inside the kernel's lambda the
// uint8_t stores (which may alias anything) made the compiler reload every captured value.
void window_codes(const int64_t* __restrict ix, uint8_t* __restrict codes, int64_t n, int64_t base, int64_t w) {
  for (int64_t ox = 0; ox < n; ++ox) {
    const int64_t off = ix[ox] - (base + 2 * ox);
    codes[ox] = static_cast<uint8_t>(off > 1 ? off - (w - 2) : off);
  }
}

// conv2d_relu_max_pool2d's pooling (framework/ops/conv_kernels.h): the plain 2x2 rows above,
// each window's choice kept as 0..3 (row-major in the window) rather than a flat index.
template <class T>
void max_pool_2x2_codes_typed(const Tensor& out, const Tensor& which, const Tensor& input) {
  const Planes g = planes_of(input, out);
  const T* x = static_cast<const T*>(input.raw_data());
  T* y = static_cast<T*>(out.raw_data());
  uint8_t* codes = static_cast<uint8_t*>(which.raw_data());
  parallel_for(g.planes, grain_for(g.oh * g.ow * 4), [&](int64_t b, int64_t e) {
    const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
    max_pool_2x2_codes_planes(x + b * in_plane, y + b * out_plane, codes + b * out_plane, e - b, g.h, g.w);
  });
}

// One row of windows: see relu_max_pool_2x2_backward_typed.
template <class T>
void relu_max_pool_2x2_backward_row(const uint8_t* __restrict codes, const typename FloatBits<T>::U* __restrict gy,
                                    const typename FloatBits<T>::U* __restrict pooled,
                                    typename FloatBits<T>::U* __restrict r0, typename FloatBits<T>::U* __restrict r1,
                                    int64_t n) {
  using B = FloatBits<T>;
  using U = typename B::U;
  int64_t ox = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if constexpr (sizeof(U) == 4) {
    // 16 windows at a time, the last few under a mask (rows are short: 12 windows in the MNIST
    // CNN; GCC made the loop below scalar with branches): the value each window passes on, then
    // the four positions' vectors interleaved into the two rows.
    const __m512i sign = _mm512_set1_epi32(static_cast<int>(B::kSign)),
                  inf = _mm512_set1_epi32(static_cast<int>(B::kInf));
    const __m512i quiet = _mm512_set1_epi32(static_cast<int>(B::kQuiet)), abs_mask = _mm512_set1_epi32(0x7fffffff);
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    for (; ox < n; ox += 16) {
      const int64_t rem = std::min<int64_t>(16, n - ox);
      const __mmask16 m = static_cast<__mmask16>((uint32_t{1} << rem) - 1);
      const __mmask16 m_lo = static_cast<__mmask16>(rem >= 8 ? 0xffff : (uint32_t{1} << (2 * rem)) - 1);
      const __mmask16 m_hi = static_cast<__mmask16>(rem <= 8 ? 0 : (uint32_t{1} << (2 * rem - 16)) - 1);
      const __m512i k = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, codes + ox));
      const __m512i p = _mm512_maskz_loadu_epi32(m, pooled + ox), g = _mm512_maskz_loadu_epi32(m, gy + ox);
      const __mmask16 keep = _mm512_test_epi32_mask(p, p) & _mm512_cmple_epu32_mask(p, inf);
      const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(g, abs_mask), inf);
      __m512i v = _mm512_mask_or_epi32(g, nan, g, quiet);
      v = _mm512_maskz_mov_epi32(keep & ~_mm512_cmpeq_epi32_mask(g, sign), v);
      const __m512i v0 = _mm512_maskz_mov_epi32(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(0)), v);
      const __m512i v1 = _mm512_maskz_mov_epi32(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(1)), v);
      const __m512i v2 = _mm512_maskz_mov_epi32(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(2)), v);
      const __m512i v3 = _mm512_maskz_mov_epi32(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(3)), v);
      _mm512_mask_storeu_epi32(r0 + 2 * ox, m_lo, _mm512_permutex2var_epi32(v0, lo, v1));
      _mm512_mask_storeu_epi32(r0 + 2 * ox + 16, m_hi, _mm512_permutex2var_epi32(v0, hi, v1));
      _mm512_mask_storeu_epi32(r1 + 2 * ox, m_lo, _mm512_permutex2var_epi32(v2, lo, v3));
      _mm512_mask_storeu_epi32(r1 + 2 * ox + 16, m_hi, _mm512_permutex2var_epi32(v2, hi, v3));
    }
  }
#if defined(__AVX512VL__)
  if constexpr (sizeof(U) == 2) {
    // float16/bfloat16: the same on 16 windows of 16-bit lanes, each row's 32 outputs in one store.
    const __m256i sign = _mm256_set1_epi16(static_cast<int16_t>(B::kSign));
    const __m256i inf = _mm256_set1_epi16(static_cast<int16_t>(B::kInf));
    const __m256i quiet = _mm256_set1_epi16(static_cast<int16_t>(B::kQuiet)), abs_mask = _mm256_set1_epi16(0x7fff);
    alignas(64) int16_t interleave[32];
    for (int i = 0; i < 32; ++i) interleave[i] = static_cast<int16_t>((i % 2) * 32 + i / 2);
    const __m512i pairs = _mm512_load_si512(interleave);
    for (; ox < n; ox += 16) {
      const int64_t rem = std::min<int64_t>(16, n - ox);
      const __mmask16 m = static_cast<__mmask16>((uint32_t{1} << rem) - 1);
      const __mmask32 m_out = static_cast<__mmask32>((uint64_t{1} << (2 * rem)) - 1);
      const __m256i k = _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, codes + ox));
      const __m256i p = _mm256_maskz_loadu_epi16(m, pooled + ox), g = _mm256_maskz_loadu_epi16(m, gy + ox);
      const __mmask16 keep = _mm256_test_epi16_mask(p, p) & _mm256_cmple_epu16_mask(p, inf);
      const __mmask16 nan = _mm256_cmpgt_epu16_mask(_mm256_and_si256(g, abs_mask), inf);
      __m256i v = _mm256_mask_blend_epi16(nan, g, _mm256_or_si256(g, quiet));
      v = _mm256_maskz_mov_epi16(keep & ~_mm256_cmpeq_epi16_mask(g, sign), v);
      const auto pick = [&](int code) {
        return _mm512_castsi256_si512(_mm256_maskz_mov_epi16(_mm256_cmpeq_epi16_mask(k, _mm256_set1_epi16(code)), v));
      };
      _mm512_mask_storeu_epi16(r0 + 2 * ox, m_out, _mm512_permutex2var_epi16(pick(0), pairs, pick(1)));
      _mm512_mask_storeu_epi16(r1 + 2 * ox, m_out, _mm512_permutex2var_epi16(pick(2), pairs, pick(3)));
    }
  }
#endif
#endif
  for (; ox < n; ++ox) {
    const U k = codes[ox];
    const U v = B::positive(pooled[ox]) ? B::plus_zero(gy[ox]) : U(0);
    r0[2 * ox] = k == 0 ? v : U(0);
    r0[2 * ox + 1] = k == 1 ? v : U(0);
    r1[2 * ox] = k == 2 ? v : U(0);
    r1[2 * ox + 1] = k == 3 ? v : U(0);
  }
}

// The gradient of the convolution's output in one pass (relu_max_pool_2x2_backward_planes, over
// the tensor's planes in parallel).
template <class T>
void relu_max_pool_2x2_backward_typed(const Tensor& grad_input, const Tensor& grad_out, const Tensor& which,
                                      const Tensor& out) {
  const Planes g = planes_of(grad_input, grad_out);
  const T* gy = static_cast<const T*>(grad_out.raw_data());
  const T* pooled = static_cast<const T*>(out.raw_data());
  const uint8_t* codes = static_cast<const uint8_t*>(which.raw_data());
  T* gx = static_cast<T*>(grad_input.raw_data());
  parallel_for(g.planes, grain_for(g.h * g.w), [&](int64_t b, int64_t e) {
    const int64_t first = b * g.oh * g.ow;
    relu_max_pool_2x2_backward_planes(gy + first, codes + first, pooled + first, gx + b * g.h * g.w, e - b, g.h, g.w);
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

void max_pool_2x2_codes_cpu(const Tensor& out, const Tensor& which, const Tensor& input) {
  dispatch_floating(input.dtype(), "conv2d_relu_max_pool2d",
                    [&]<class T>(TypeTag<T>) { max_pool_2x2_codes_typed<T>(out, which, input); });
}
void relu_max_pool_2x2_backward_cpu(const Tensor& grad_input, const Tensor& grad_out, const Tensor& which,
                                    const Tensor& out) {
  dispatch_floating(grad_out.dtype(), "conv2d_relu_max_pool2d", [&]<class T>(TypeTag<T>) {
    relu_max_pool_2x2_backward_typed<T>(grad_input, grad_out, which, out);
  });
}

}  // namespace

template <class T>
void max_pool_2x2_codes_planes(const T* x, T* y, uint8_t* codes, int64_t planes, int64_t h, int64_t w) {
  const int64_t oh = h / 2, ow = w / 2;
  std::vector<int64_t> scratch;  // flat indices, for the rows without a vector form
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xp = x + pl * h * w;
    for (int64_t oy = 0; oy < oh; ++oy) {
      const int64_t row = 2 * oy * w, o = (pl * oh + oy) * ow;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
      if constexpr (sizeof(T) <= 4) {
        max_pool_2x2_codes_row_avx512<T>(xp + row, xp + row + w, y + o, codes + o, ow);
        continue;
      }
#endif
      scratch.resize(static_cast<size_t>(ow));
      max_pool_2x2_row(xp + row, xp + row + w, y + o, scratch.data(), ow, row, w);
      window_codes(scratch.data(), codes + o, ow, row, w);
    }
  }
}

template void max_pool_2x2_codes_planes<float>(const float*, float*, uint8_t*, int64_t, int64_t, int64_t);
template void max_pool_2x2_codes_planes<double>(const double*, double*, uint8_t*, int64_t, int64_t, int64_t);
template void max_pool_2x2_codes_planes<Half>(const Half*, Half*, uint8_t*, int64_t, int64_t, int64_t);
template void max_pool_2x2_codes_planes<BFloat16>(const BFloat16*, BFloat16*, uint8_t*, int64_t, int64_t, int64_t);

// The chosen element of each window gets 0 + g when the pooled value is positive (the ReLU's
// mask), every other element 0 (those of the rows and columns no window covers too): the same
// values as max_pool2d's backward followed by relu's, bit for bit.
template <class T>
void relu_max_pool_2x2_backward_planes(const T* grad_pooled, const uint8_t* codes, const T* pooled, T* grad,
                                       int64_t planes, int64_t h, int64_t w) {
  using S = typename FloatBits<T>::U;
  const int64_t oh = h / 2, ow = w / 2;
  const S* gy = reinterpret_cast<const S*>(grad_pooled);
  const S* py = reinterpret_cast<const S*>(pooled);
  S* gx = reinterpret_cast<S*>(grad);
  for (int64_t pl = 0; pl < planes; ++pl) {
    S* dst = gx + pl * h * w;
    for (int64_t oy = 0; oy < oh; ++oy) {
      const int64_t o = (pl * oh + oy) * ow;
      S* r0 = dst + 2 * oy * w;
      S* r1 = r0 + w;
      relu_max_pool_2x2_backward_row<T>(codes + o, gy + o, py + o, r0, r1, ow);
      std::fill(r0 + 2 * ow, r0 + w, S(0));  // the columns right of the last window
      std::fill(r1 + 2 * ow, r1 + w, S(0));
    }
    std::fill(dst + 2 * oh * w, dst + h * w, S(0));  // the rows below the last window
  }
}

template void relu_max_pool_2x2_backward_planes<float>(const float*, const uint8_t*, const float*, float*, int64_t,
                                                       int64_t, int64_t);
template void relu_max_pool_2x2_backward_planes<double>(const double*, const uint8_t*, const double*, double*, int64_t,
                                                        int64_t, int64_t);
template void relu_max_pool_2x2_backward_planes<Half>(const Half*, const uint8_t*, const Half*, Half*, int64_t, int64_t,
                                                      int64_t);
template void relu_max_pool_2x2_backward_planes<BFloat16>(const BFloat16*, const uint8_t*, const BFloat16*, BFloat16*,
                                                          int64_t, int64_t, int64_t);

HG_REGISTER_KERNEL(max_pool_2x2_codes_stub, kCPU, max_pool_2x2_codes_cpu);
HG_REGISTER_KERNEL(relu_max_pool_2x2_backward_stub, kCPU, relu_max_pool_2x2_backward_cpu);
HG_REGISTER_KERNEL(max_pool2d_stub, kCPU, max_pool_cpu);
HG_REGISTER_KERNEL(max_pool2d_backward_stub, kCPU, max_pool_backward_cpu);
HG_REGISTER_KERNEL(avg_pool2d_stub, kCPU, avg_pool_cpu);
HG_REGISTER_KERNEL(avg_pool2d_backward_stub, kCPU, avg_pool_backward_cpu);

}  // namespace hg::cpu
