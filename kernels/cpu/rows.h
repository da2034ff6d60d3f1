// Row helpers for kernels that normalise along one dim of a contiguous [outer, n, inner] block
// (softmax, cross_entropy): each (outer, inner) pair is a row of n elements `inner` apart.
#pragma once

#include <type_traits>

#include "framework/dispatch.h"
#include "kernels/cpu/loops.h"

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

// Calls f(TypeTag<T>) for a floating dtype (the kernels' callers have checked it).
template <class F>
void dispatch_float(Dtype d, F&& f) {
  dispatch_floating(d, "kernel", std::forward<F>(f));
}

}  // namespace hg::cpu
