// The 2x2, stride-2 max pool beside the convolution it is fused with (conv2d_relu_max_pool2d):
// the plane functions of pool_2x2.h, the row kernels under them, and the op's two CPU kernels over
// whole tensors. Plain max_pool2d's 2x2 path (kernels/cpu/pool.cpp) uses the same rows.
#include "kernels/cpu/conv/pool_2x2.h"

#include <algorithm>
#if defined(__AVX512F__)
// GCC 12 flags the undefined pass-through operands inside its own AVX-512 intrinsics as "may be
// used uninitialized" once they are inlined (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
#include <type_traits>
#include <vector>

#include "framework/ops/conv_kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/float_bits.h"

namespace hg::cpu {
namespace {

// A pool's input and output as [planes, h, w] and [planes, oh, ow].
struct Pool2x2Planes {
  int64_t planes, h, w, oh, ow;
};
Pool2x2Planes pool_2x2_planes_of(const Tensor& in, const Tensor& out) {
  return {in.size(0) * in.size(1), in.size(2), in.size(3), out.size(2), out.size(3)};
}
// Threads split the planes; a chunk holds about kParallelGrain elements of work.
int64_t pool_2x2_grain(int64_t plane_work) {
  return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(plane_work, 1));
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
  const Pool2x2Planes g = pool_2x2_planes_of(input, out);
  const T* x = static_cast<const T*>(input.raw_data());
  T* y = static_cast<T*>(out.raw_data());
  uint8_t* codes = static_cast<uint8_t*>(which.raw_data());
  parallel_for(g.planes, pool_2x2_grain(g.oh * g.ow * 4), [&](int64_t b, int64_t e) {
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
  const Pool2x2Planes g = pool_2x2_planes_of(grad_input, grad_out);
  const T* gy = static_cast<const T*>(grad_out.raw_data());
  const T* pooled = static_cast<const T*>(out.raw_data());
  const uint8_t* codes = static_cast<const uint8_t*>(which.raw_data());
  T* gx = static_cast<T*>(grad_input.raw_data());
  parallel_for(g.planes, pool_2x2_grain(g.h * g.w), [&](int64_t b, int64_t e) {
    const int64_t first = b * g.oh * g.ow;
    relu_max_pool_2x2_backward_planes(gy + first, codes + first, pooled + first, gx + b * g.h * g.w, e - b, g.h, g.w);
  });
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

}  // namespace hg::cpu
