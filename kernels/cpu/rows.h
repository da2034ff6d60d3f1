// Row helpers for kernels that normalise along one dim of a contiguous [outer, n, inner] block
// (softmax, cross_entropy, attention): each (outer, inner) pair is a row of n elements `inner`
// apart; and the rows' exponentials, on the vector exp for float32.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "framework/dispatch.h"
#include "kernels/common/scalar_ops.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/vec_math.h"

namespace hg::cpu {

// Calls fn(row, row_base_offset, stride) for every row (row = outer_index * inner + inner_index), rows split across
// threads. The stride is a compile-time 1 when inner == 1 (the common last-dim case), so those loops vectorise.
template <class Fn>
void for_each_row(int64_t outer, int64_t n, int64_t inner, Fn&& fn) {
  const int64_t rows = outer * inner;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1));
  if (inner == 1) {
    parallel_for(rows, grain, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) fn(r, r * n, std::integral_constant<int64_t, 1>{});
    });
  } else {
    parallel_for(rows, grain, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) fn(r, (r / inner) * n * inner + r % inner, inner);
    });
  }
}

// s[j] = exp(s[j] - shift) for j < n, in place, with no s[j] - shift much above 0; returns their
// sum. Float rows go through the vector exp (exp_shifted_row), double ones through std::exp.
template <class C>
C exp_shifted(C* s, C shift, int64_t n) {
  if constexpr (std::is_same_v<C, float>) {
    return exp_shifted_row(s, shift, s, n);
  } else {
    C sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - shift));
    return sum;
  }
}

// A row's exponentials (below) and their sum.
template <class C>
struct RowExps {
  const C* exps;
  C sum;
};

// exp(x[i * stride] - shift) for i < n (shift the row's max or log-sum-exp), computed in C into
// a per-thread buffer that the thread's next call reuses (no allocation per row), and their
// sum. One libm call per value had been most of cross_entropy's time on a [128, 10] batch.
template <class C, class In, class Stride>
RowExps<C> row_exps(const In* x, int64_t n, Stride stride, C shift) {
  thread_local std::vector<C> row;
  row.resize(static_cast<size_t>(n));
  if constexpr (std::is_same_v<C, float> && std::is_same_v<In, float> && !std::is_same_v<Stride, int64_t>) {
    return {row.data(), exp_shifted_row(x, shift, row.data(), n)};  // a contiguous float row, read where it lies
  } else {
    for (int64_t i = 0; i < n; ++i) row[static_cast<size_t>(i)] = static_cast<C>(x[i * stride]);
    const C sum = exp_shifted(row.data(), shift, n);
    return {row.data(), sum};
  }
}

// The largest of x[i * stride] for i < n in C, NaN when one is NaN (the whole row turns NaN, as
// PyTorch's). Contiguous float rows take 16 lanes at a time: the scalar loop's NaN test kept it
// from vectorising, and a [1024, 50257] classifier's rows made it a tenth of a GPT-2 step.
template <class C, class In, class Stride>
C row_max(const In* x, int64_t n, Stride stride) {
  C m = -std::numeric_limits<C>::infinity();
  int64_t i = 0;
  if constexpr (std::is_same_v<C, float> && std::is_same_v<In, float> && !std::is_same_v<Stride, int64_t>) {
    using Mask16 = int32_t __attribute__((vector_size(64)));
    Lanes16 best = Lanes16{} - std::numeric_limits<float>::infinity();
    Mask16 nan{};
    for (; i + kLanes16 <= n; i += kLanes16) {
      Lanes16 v;
      std::memcpy(&v, x + i, sizeof v);
      best = v > best ? v : best;
      nan |= v != v;
    }
    bool any_nan = false;
    for (int64_t l = 0; l < kLanes16; ++l) {
      m = best[l] > m ? best[l] : m;
      any_nan |= nan[l] != 0;
    }
    if (any_nan) return std::numeric_limits<C>::quiet_NaN();
  }
  for (; i < n; ++i) {
    const C v = static_cast<C>(x[i * stride]);
    m = (v > m || v != v) ? v : m;
  }
  return m;
}

// Calls f(TypeTag<T>) for a floating dtype (the kernels' callers have checked it).
template <class F>
void dispatch_float(Dtype d, F&& f) {
  dispatch_floating(d, "kernel", std::forward<F>(f));
}

}  // namespace hg::cpu
