// The CPU elementwise engine: walks N same-shaped operands (any strides, broadcast included)
// in runs along the innermost dimension, split across threads for large tensors.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "framework/tensor.h"
#include "kernels/common/scalar_ops.h"
#include "kernels/cpu/elementwise_choice.h"
#include "kernels/cpu/simd/convert.h"
#include "kernels/cpu/stream_store.h"
#include "kernels/cpu/thread_pool.h"

namespace hg::cpu {

inline constexpr int64_t kParallelGrain = 32768;

// Runs fn(begin, end) over [0, n) in chunks of at least `grain`, on all threads when n is large
// enough.
template <class Fn>
void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  const int64_t chunks = std::min<int64_t>(num_threads(), (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (chunks <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t step = (n + chunks - 1) / chunks;
  run_parallel(chunks, [&](int64_t c) {
    const int64_t begin = c * step, end = std::min(n, begin + step);
    if (begin < end) fn(begin, end);
  });
}

// Geometry of N operands that share one shape: dims of size 1 dropped, the rest ordered as operand
// 0 lies in memory, and adjacent dims merged wherever every operand allows it, so contiguous (or
// alike channels-last) tensors become one long run.
template <size_t N>
struct StridedGeometry {
  std::vector<int64_t> sizes;                   // innermost last
  std::array<std::vector<int64_t>, N> strides;  // in bytes, per operand
  int64_t numel = 1;

  StridedGeometry(const Shape& shape, const std::array<const Tensor*, N>& ops) {
    for (int64_t s : shape) numel *= s;
    // Dims in operand 0's memory order (the output's): a contiguous output keeps the dims' own
    // order, a channels-last one with channels-last inputs merges into one dense run.
    for (size_t d : dims_in_memory_order(shape, ops[0]->strides())) {
      std::array<int64_t, N> st;
      for (size_t k = 0; k < N; ++k) st[k] = ops[k]->strides()[d] * static_cast<int64_t>(element_size(ops[k]->dtype()));
      bool merge = !sizes.empty();
      for (size_t k = 0; k < N && merge; ++k) merge = strides[k].back() == st[k] * shape[d];
      if (merge) {
        sizes.back() *= shape[d];
        for (size_t k = 0; k < N; ++k) strides[k].back() = st[k];
      } else {
        sizes.push_back(shape[d]);
        for (size_t k = 0; k < N; ++k) strides[k].push_back(st[k]);
      }
    }
    if (sizes.empty()) {
      sizes.push_back(1);
      for (size_t k = 0; k < N; ++k) strides[k].push_back(0);
    }
  }
};

// Calls run(ptrs, inner_strides, count) for consecutive runs of elements covering all of the
// operands' elements; ptrs[k] points at operand k's first element of the run.
template <size_t N, class Run>
void for_each_run(const Shape& shape, const std::array<const Tensor*, N>& ops, Run&& run,
                  int64_t grain = kParallelGrain) {
  const StridedGeometry<N> g(shape, ops);
  if (g.numel == 0) return;
  std::array<char*, N> base;
  for (size_t k = 0; k < N; ++k) base[k] = static_cast<char*>(ops[k]->raw_data());
  const auto nd = static_cast<int64_t>(g.sizes.size());
  const int64_t inner = g.sizes.back();
  parallel_for(g.numel, grain, [&](int64_t begin, int64_t end) {
    // Multi-index of `begin`.
    std::vector<int64_t> idx(static_cast<size_t>(nd));
    int64_t rest = begin;
    for (int64_t d = nd - 1; d >= 0; --d) {
      idx[static_cast<size_t>(d)] = rest % g.sizes[static_cast<size_t>(d)];
      rest /= g.sizes[static_cast<size_t>(d)];
    }
    std::array<char*, N> ptr;
    std::array<int64_t, N> inner_stride;
    for (size_t k = 0; k < N; ++k) {
      ptr[k] = base[k];
      for (int64_t d = 0; d < nd; ++d) ptr[k] += idx[static_cast<size_t>(d)] * g.strides[k][static_cast<size_t>(d)];
      inner_stride[k] = g.strides[k].back();
    }
    int64_t pos = begin;
    while (pos < end) {
      const int64_t count = std::min(inner - idx.back(), end - pos);
      run(ptr, inner_stride, count);
      pos += count;
      // Advance the multi-index by `count` (the run ends at the end of the inner dim or `end`).
      idx.back() += count;
      for (size_t k = 0; k < N; ++k) ptr[k] += count * inner_stride[k];
      for (int64_t d = nd - 1; d > 0 && idx[static_cast<size_t>(d)] == g.sizes[static_cast<size_t>(d)]; --d) {
        idx[static_cast<size_t>(d)] = 0;
        ++idx[static_cast<size_t>(d - 1)];
        for (size_t k = 0; k < N; ++k) {
          ptr[k] += g.strides[k][static_cast<size_t>(d - 1)] -
                    g.sizes[static_cast<size_t>(d)] * g.strides[k][static_cast<size_t>(d)];
        }
      }
    }
  });
}

// Elements per block where float32 runs are staged or streamed through an L1 buffer.
inline constexpr int64_t kMapBlock = 512;

// Elements per block in the widened (16-bit) loops, which widen a block of each input into float
// buffers, map them and round the results back. Short blocks let the loads and conversions of
// one block run while the arithmetic of the last is still in flight: bfloat16 division (bound by
// the divider) went from 1.45 to 1.15 ms on 4M elements at 128 against 512, mul and exp gained
// a little, and nothing lost.
inline constexpr int64_t kWidenBlock = 128;

// Whether bfloat16 elementwise loops with a plain scalar functor convert in registers, element by
// element (the compiler vectorises the widening shift, the functor and the round-to-nearest-even
// integer sequence into one loop), rather than a block at a time through float buffers. On a CPU
// without AVX512_BF16 the rounding is that integer sequence either way, and the buffer round
// trips were the difference: blocked, bfloat16 div and reciprocal were slower than PyTorch's
// (figures in docs/history/PERF-CPU.md's table of changes). With AVX512_BF16 the blocked loops
// round with vcvtneps2bf16 and stay as measured there.
#if defined(__AVX512BF16__)
inline constexpr bool kBf16InRegisters = false;
#else
inline constexpr bool kBf16InRegisters = true;
#endif

// v[i] = relu(v[i]) for i < n, computed in acc_t<T> with relu's own functor (NaN stays NaN, a
// negative or -0 becomes +0): how the fused conv2d_relu kernels apply the ReLU to a block they
// have just written.
template <class T>
void relu_in_place(T* v, int64_t n) {
  const scalar::Relu relu;
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>(relu(static_cast<acc_t<T>>(v[i])));
}

// relu's gradient of one element from the ReLU's output y: g times the 0/1 mask (an infinite or
// NaN g where y <= 0 gives NaN, a NaN y selects 0), written so a loop over it vectorises. Shared
// by relu_backward's kernel and relu_gradient_rows, so both give the same bits.
template <class Acc>
inline Acc relu_gradient_of(Acc g, Acc y) {
  return g * (y > Acc(0) ? Acc(1) : Acc(0));
}

// out[i] = relu_gradient_of(g[i], y[i]) for i < n, computed in acc_t<T>, 16-bit types a block at
// a time through the vectorised conversions. For the fused conv2d_relu kernels, which make a few
// samples' output gradient right before their backward passes.
template <class T>
void relu_gradient_rows(const T* g, const T* y, T* out, int64_t n) {
  using Acc = acc_t<T>;
  const auto mask = [](Acc gv, Acc yv) { return relu_gradient_of(gv, yv); };
  if constexpr (std::is_same_v<T, Acc>) {
    for (int64_t i = 0; i < n; ++i) out[i] = mask(g[i], y[i]);
  } else {
    Acc gb[kWidenBlock], yb[kWidenBlock];
    for (int64_t i = 0; i < n; i += kWidenBlock) {
      const int64_t m = std::min(kWidenBlock, n - i);
      load_run(g + i, gb, m);
      load_run(y + i, yb, m);
      for (int64_t j = 0; j < m; ++j) gb[j] = mask(gb[j], yb[j]);
      store_run(gb, out + i, m);
    }
  }
}

// Contiguous o[i] = g(i) for i < n; with `stream` (use_stream_stores) the results go through an L1
// block and streaming stores.
template <class Out, class G>
inline void store_contiguous(Out* o, int64_t n, bool stream, G g) {
  if (!stream) {
    for (int64_t i = 0; i < n; ++i) o[i] = g(i);
    return;
  }
  alignas(64) Out buf[kMapBlock];
  for (int64_t i = 0; i < n; i += kMapBlock) {
    const int64_t m = std::min(kMapBlock, n - i);
    for (int64_t j = 0; j < m; ++j) buf[j] = g(i + j);
    stream_copy(o + i, buf, static_cast<size_t>(m) * sizeof(Out));
  }
  stream_fence();
}

// out[i] = f(a[i]) with typed element access; contiguous runs get a plain loop the compiler
// vectorises.
template <class Out, class In, class F>
void unary_loop(const Tensor& out, const Tensor& in, F f) {
  const bool stream = use_stream_stores(out, {&in});
  for_each_run<2>(out.shape(), {&out, &in},
                  [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
                    auto* o = reinterpret_cast<Out*>(p[0]);
                    const auto* a = reinterpret_cast<const In*>(p[1]);
                    if (s[0] == sizeof(Out) && s[1] == sizeof(In)) {
                      store_contiguous(o, n, stream, [&](int64_t i) { return f(a[i]); });
                    } else {
                      for (int64_t i = 0; i < n; ++i)
                        *reinterpret_cast<Out*>(p[0] + i * s[0]) = f(*reinterpret_cast<const In*>(p[1] + i * s[1]));
                    }
                  });
}

// One run of a binary loop in the shapes a plain loop vectorises: out and a contiguous, b
// contiguous or a broadcast scalar. Returns false, writing nothing, for any other run.
template <class Out, class A, class B, class F>
bool binary_dense_run(const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n, bool stream, F& f) {
  if (s[0] != sizeof(Out) || s[1] != sizeof(A) || (s[2] != sizeof(B) && s[2] != 0)) return false;
  auto* o = reinterpret_cast<Out*>(p[0]);
  const auto* x = reinterpret_cast<const A*>(p[1]);
  const auto* y = reinterpret_cast<const B*>(p[2]);
  if (s[2] == 0) {
    const B yv = *y;
    store_contiguous(o, n, stream, [&](int64_t i) { return f(x[i], yv); });
  } else {
    store_contiguous(o, n, stream, [&](int64_t i) { return f(x[i], y[i]); });
  }
  return true;
}

template <class Out, class A, class B, class F>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  const bool stream = use_stream_stores(out, {&a, &b});
  for_each_run<3>(out.shape(), {&out, &a, &b},
                  [&](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
                    if (binary_dense_run<Out, A, B>(p, s, n, stream, f)) return;
                    for (int64_t i = 0; i < n; ++i) {
                      *reinterpret_cast<Out*>(p[0] + i * s[0]) =
                          f(*reinterpret_cast<const A*>(p[1] + i * s[1]), *reinterpret_cast<const B*>(p[2] + i * s[2]));
                    }
                  });
}

// out[i] = In(map(in[i])) with the maths done on float arrays: map(const float* x, float* y, n).
// float32 runs that are contiguous are mapped in place; everything else (16-bit floats, strided
// or broadcast operands) is gathered a block at a time into a float buffer (16-bit floats
// widened in vector registers by load_run), mapped, and stored back rounded to nearest even.
// `may_stream` false keeps plain stores however large the tensors (elementwise.cpp's
// memory_bound_map says which maps stream).
template <class T, class Map>
void unary_map_loop(const Tensor& out, const Tensor& in, Map map, bool may_stream = true) {
  const bool stream = may_stream && use_stream_stores(out, {&in});
  const bool stage_aliased = elementwise_choice().stage_aliased_maps;
  for_each_run<2>(
      out.shape(), {&out, &in}, [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
        auto* o = reinterpret_cast<T*>(p[0]);
        const auto* a = reinterpret_cast<const T*>(p[1]);
        if constexpr (std::is_same_v<T, float>) {
          if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
            if (!stream) {
              // An output whose distance from the input is a multiple of 4 KiB (fresh
              // page-aligned buffers) makes each load look like it depends on an
              // earlier store to the same page offset (4K aliasing): on the AMX
              // machine the long transcendental maps ran 1.5-2.3x slower. There such
              // inputs are staged through a buffer on the stack a block at a time;
              // elsewhere the copy cost more than it saved (elementwise_choice.h).
              if (!stage_aliased || (reinterpret_cast<uintptr_t>(o) - reinterpret_cast<uintptr_t>(a)) % 4096 != 0) {
                map(a, o, n);
                return;
              }
              alignas(64) float staged[kMapBlock];
              for (int64_t i = 0; i < n; i += kMapBlock) {
                const int64_t m = std::min(kMapBlock, n - i);
                std::memcpy(staged, a + i, static_cast<size_t>(m) * sizeof(float));
                map(staged, o + i, m);
              }
              return;
            }
            alignas(64) float y[kMapBlock];
            for (int64_t i = 0; i < n; i += kMapBlock) {
              const int64_t m = std::min(kMapBlock, n - i);
              map(a + i, y, m);
              stream_copy(o + i, y, static_cast<size_t>(m) * sizeof(float));
            }
            stream_fence();
            return;
          }
        }
        alignas(64) float x[kWidenBlock], y[kWidenBlock];
        alignas(64) T rounded[kWidenBlock];
        for (int64_t i = 0; i < n; i += kWidenBlock) {
          const int64_t m = std::min(kWidenBlock, n - i);
          if (s[1] == sizeof(T)) {
            load_run(a + i, x, m);
          } else {
            for (int64_t j = 0; j < m; ++j)
              x[j] = static_cast<float>(*reinterpret_cast<const T*>(p[1] + (i + j) * s[1]));
          }
          map(x, y, m);
          if (s[0] == sizeof(T) && stream) {
            store_run(y, rounded, m);
            stream_copy(o + i, rounded, static_cast<size_t>(m) * sizeof(T));
          } else if (s[0] == sizeof(T)) {
            store_run(y, o + i, m);
          } else {
            for (int64_t j = 0; j < m; ++j) *reinterpret_cast<T*>(p[0] + (i + j) * s[0]) = T(y[j]);
          }
        }
        if (stream) stream_fence();
      });
}

// out = map over a and b for floating inputs, computed in float: each block of a and b is
// widened into float buffers (a broadcast scalar is widened once), map(x, y, z, m) fills z[j]
// from x[j] and y[j] for j < m over plain float arrays, and the results are rounded back
// (Out = T) or stored (Out = bool).
// A `direct(float, float) -> Out` functor, when given, computes the dense runs (binary_dense_run)
// element by element instead (see kBf16InRegisters).
template <class Out, class T, class Map, class Direct = std::nullptr_t>
void binary_widened_map_loop(const Tensor& out, const Tensor& a, const Tensor& b, Map map, Direct direct = nullptr) {
  const bool stream = use_stream_stores(out, {&a, &b});
  for_each_run<3>(
      out.shape(), {&out, &a, &b}, [&](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
        if constexpr (!std::is_same_v<Direct, std::nullptr_t>) {
          const auto typed = [&direct](T x, T y) { return direct(static_cast<float>(x), static_cast<float>(y)); };
          if (binary_dense_run<Out, T, T>(p, s, n, stream, typed)) return;
        }
        using R = std::conditional_t<std::is_same_v<Out, bool>, bool, float>;
        alignas(64) float x[kWidenBlock], y[kWidenBlock];
        alignas(64) R z[kWidenBlock];
        alignas(64) Out rounded[kWidenBlock];
        auto widen = [&](int k, float* dst, int64_t i, int64_t m) {
          if (s[k] == sizeof(T)) {
            load_run(reinterpret_cast<const T*>(p[k]) + i, dst, m);
          } else if (s[k] == 0) {
            const float v = static_cast<float>(*reinterpret_cast<const T*>(p[k]));
            for (int64_t j = 0; j < m; ++j) dst[j] = v;
          } else {
            for (int64_t j = 0; j < m; ++j)
              dst[j] = static_cast<float>(*reinterpret_cast<const T*>(p[k] + (i + j) * s[k]));
          }
        };
        for (int64_t i = 0; i < n; i += kWidenBlock) {
          const int64_t m = std::min(kWidenBlock, n - i);
          widen(1, x, i, m);
          widen(2, y, i, m);
          map(x, y, z, m);
          if constexpr (std::is_same_v<Out, bool>) {
            if (stream && s[0] == 1) {
              stream_copy(p[0] + i, z, static_cast<size_t>(m));
            } else {
              for (int64_t j = 0; j < m; ++j) *reinterpret_cast<bool*>(p[0] + (i + j) * s[0]) = z[j];
            }
          } else if (s[0] == sizeof(Out) && stream) {
            store_run(z, rounded, m);
            stream_copy(reinterpret_cast<Out*>(p[0]) + i, rounded, static_cast<size_t>(m) * sizeof(Out));
          } else if (s[0] == sizeof(Out)) {
            store_run(z, reinterpret_cast<Out*>(p[0]) + i, m);
          } else {
            for (int64_t j = 0; j < m; ++j) *reinterpret_cast<Out*>(p[0] + (i + j) * s[0]) = Out(z[j]);
          }
        }
        if (stream) stream_fence();
      });
}

// out[i] = f(a[i], b[i]) for 16-bit float inputs, computed in float a block at a time (the
// per-element loop over plain float arrays vectorises); bfloat16 in registers where
// kBf16InRegisters says so.
template <class Out, class T, class F>
void binary_widened_loop(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  using R = std::conditional_t<std::is_same_v<Out, bool>, bool, float>;
  const auto map = [&f](const float* x, const float* y, R* z, int64_t m) {
    for (int64_t j = 0; j < m; ++j) z[j] = f(x[j], y[j]);
  };
  if constexpr (std::is_same_v<T, BFloat16> && kBf16InRegisters) {
    binary_widened_map_loop<Out, T>(out, a, b, map, [&f](float x, float y) { return Out(f(x, y)); });
  } else {
    binary_widened_map_loop<Out, T>(out, a, b, map);
  }
}

}  // namespace hg::cpu
