// Pairwise combines of 16-bit floats for native 16-bit reductions (Accumulate::Native): each
// pair is computed in float32 and rounded once to the 16-bit type, as NCCL does.
#include <algorithm>

#include "distributed/backend.h"
#include "framework/half.h"

namespace hg::distributed::detail {

namespace {

template <typename T16>
void combine(BufferOp op, const void* a, const void* b, void* out, size_t n) {
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  auto* z = static_cast<uint16_t*>(out);
  if (op == BufferOp::Max) {
    for (size_t i = 0; i < n; ++i) z[i] = T16::from_float(std::max(T16::to_float(x[i]), T16::to_float(y[i])));
  } else {
    for (size_t i = 0; i < n; ++i) z[i] = T16::from_float(T16::to_float(x[i]) + T16::to_float(y[i]));
  }
}

}  // namespace

void combine_16bit(Dtype dtype, BufferOp op, const void* a, const void* b, void* out, size_t n) {
  if (dtype == kBFloat16)
    combine<BFloat16>(op, a, b, out, n);
  else
    combine<Half>(op, a, b, out, n);
}

}  // namespace hg::distributed::detail
