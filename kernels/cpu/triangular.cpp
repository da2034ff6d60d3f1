// CPU tril/triu: copies the kept part of each row of each matrix and zero-fills the rest.
#include <algorithm>
#include <cstring>

#include "framework/ops/triangular_kernels.h"
#include "kernels/cpu/loops.h"

namespace hg::cpu {
namespace {

template <class T>
void triangle_typed(const Tensor& out, const Tensor& in, int64_t diagonal, bool upper) {
  const int64_t batch = in.shape()[0], rows = in.shape()[1], cols = in.shape()[2];
  const T* src = static_cast<const T*>(in.raw_data());
  T* dst = static_cast<T*>(out.raw_data());
  parallel_for(batch * rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(cols, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) {
                   const int64_t i = r % rows;
                   // Columns [lo, hi) are kept: j - i <= diagonal (lower) or j - i >= diagonal (upper).
                   const int64_t lo = upper ? std::clamp<int64_t>(i + diagonal, 0, cols) : 0;
                   const int64_t hi = upper ? cols : std::clamp<int64_t>(i + diagonal + 1, 0, cols);
                   const T* s = src + r * cols;
                   T* d = dst + r * cols;
                   for (int64_t j = 0; j < cols; ++j) d[j] = (j >= lo && j < hi) ? s[j] : T{};
                 }
               });
}

void triangle_cpu(const Tensor& out, const Tensor& in, int64_t diagonal, bool upper) {
  dispatch_dtype(in.dtype(), [&]<class T>(TypeTag<T>) { triangle_typed<T>(out, in, diagonal, upper); });
}

}  // namespace

HG_REGISTER_KERNEL(triangle_stub, kCPU, triangle_cpu);

}  // namespace hg::cpu
