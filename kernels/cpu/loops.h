// The CPU elementwise engine: walks N same-shaped operands (any strides, broadcast included)
// in runs along the innermost dimension, split across threads for large tensors.
#pragma once

#include <array>
#include <cstdint>

#include "framework/tensor.h"
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

// Geometry of N operands that share one shape: dims of size 1 dropped and adjacent dims merged
// wherever every operand allows it, so contiguous tensors become one long run.
template <size_t N>
struct StridedGeometry {
  std::vector<int64_t> sizes;                   // innermost last
  std::array<std::vector<int64_t>, N> strides;  // in bytes, per operand
  int64_t numel = 1;

  StridedGeometry(const Shape& shape, const std::array<const Tensor*, N>& ops) {
    for (int64_t s : shape) numel *= s;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1) continue;
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

// out[i] = f(a[i]) with typed element access; contiguous runs get a plain loop the compiler
// vectorises.
template <class Out, class In, class F>
void unary_loop(const Tensor& out, const Tensor& in, F f) {
  for_each_run<2>(out.shape(), {&out, &in},
                  [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
                    auto* o = reinterpret_cast<Out*>(p[0]);
                    const auto* a = reinterpret_cast<const In*>(p[1]);
                    if (s[0] == sizeof(Out) && s[1] == sizeof(In)) {
                      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
                    } else {
                      for (int64_t i = 0; i < n; ++i)
                        *reinterpret_cast<Out*>(p[0] + i * s[0]) = f(*reinterpret_cast<const In*>(p[1] + i * s[1]));
                    }
                  });
}

template <class Out, class A, class B, class F>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  for_each_run<3>(
      out.shape(), {&out, &a, &b}, [&](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
        auto* o = reinterpret_cast<Out*>(p[0]);
        const auto* x = reinterpret_cast<const A*>(p[1]);
        const auto* y = reinterpret_cast<const B*>(p[2]);
        if (s[0] == sizeof(Out) && s[1] == sizeof(A) && s[2] == sizeof(B)) {
          for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
        } else if (s[0] == sizeof(Out) && s[1] == sizeof(A) && s[2] == 0) {
          const B yv = *y;
          for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
        } else {
          for (int64_t i = 0; i < n; ++i) {
            *reinterpret_cast<Out*>(p[0] + i * s[0]) =
                f(*reinterpret_cast<const A*>(p[1] + i * s[1]), *reinterpret_cast<const B*>(p[2] + i * s[2]));
          }
        }
      });
}

}  // namespace hg::cpu
