// CPU cumsum along dim 1 of contiguous [outer, n, inner] tensors: float64 (or int64) running
// sums, one (outer, inner) row per step of the parallel loop.
#include <type_traits>

#include "framework/ops/scan_kernels.h"
#include "kernels/cpu/rows.h"

namespace hg::cpu {
namespace {

template <class T, class O>
void cumsum_typed(const Tensor& out, const Tensor& in) {
  const int64_t outer = in.shape()[0], n = in.shape()[1], inner = in.shape()[2];
  using Acc = std::conditional_t<std::is_floating_point_v<acc_t<O>>, double, int64_t>;
  const T* src = static_cast<const T*>(in.raw_data());
  O* dst = static_cast<O*>(out.raw_data());
  for_each_row(outer, n, inner, [&](int64_t, int64_t base, auto stride) {
    Acc acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      acc += static_cast<Acc>(static_cast<acc_t<T>>(src[base + i * stride]));
      dst[base + i * stride] = static_cast<O>(static_cast<acc_t<O>>(acc));
    }
  });
}

void cumsum_cpu(const Tensor& out, const Tensor& in) {
  dispatch_dtype(in.dtype(), [&]<class T>(TypeTag<T>) {
    dispatch_dtype(out.dtype(), [&]<class O>(TypeTag<O>) {
      if constexpr (!std::is_same_v<O, bool>) cumsum_typed<T, O>(out, in);
    });
  });
}

}  // namespace

HG_REGISTER_KERNEL(cumsum_stub, kCPU, cumsum_cpu);

}  // namespace hg::cpu
