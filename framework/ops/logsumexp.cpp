// logsumexp: the reduced dims brought together as the middle of an [outer, n, inner] block (a
// view where they already are adjacent, else one permuted copy), one kernel pass; the gradient
// exp(x - y) g in public ops, so it differentiates again.
#include "framework/ops/logsumexp_kernels.h"

#include <algorithm>

#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/unary.h"

namespace hg {

HG_DEFINE_STUB(logsumexp_stub, LogsumexpFn);

namespace {
const OpDef kLogsumexp{"logsumexp", true};
}  // namespace

Tensor logsumexp(const Tensor& t, const std::vector<int64_t>& dims_in, bool keepdim) {
  OpCall call(kLogsumexp, {t});
  const Tensor& x = call.input(0);
  const char* name = kLogsumexp.name;
  HG_CHECK(x.defined(), name, "got an undefined tensor");
  HG_CHECK(x.dtype() != kBool, name, "not supported on bool tensors");
  const int64_t nd = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(std::max<int64_t>(nd, 1)), dims_in.empty());
  for (int64_t d : dims_in) {
    const int64_t k = normalize_dim(d, nd, name);
    HG_CHECK(!reduced[static_cast<size_t>(k)], name, "dim {} appears twice in {}", d, fmt::join(dims_in, ", "));
    reduced[static_cast<size_t>(k)] = true;
  }
  // The kept shape (size 1 at reduced dims) and the result's shape.
  Shape kept, out_shape;
  int64_t n = 1;
  for (int64_t d = 0; d < nd; ++d) {
    const bool r = reduced[static_cast<size_t>(d)];
    kept.push_back(r ? 1 : x.shape()[d]);
    if (r) n *= x.shape()[d];
    if (!r || keepdim) out_shape.push_back(r ? 1 : x.shape()[d]);
  }
  const Dtype dtype = is_floating(x.dtype()) ? x.dtype() : kFloat32;
  Tensor in = internal::cast(x, dtype);
  // Permute the reduced dims (in order) to sit together after the first kept dims: the block is
  // [dims before the first reduced one, the reduced ones, the kept ones after] when they are
  // adjacent, else the kept dims go first ([kept, reduced, 1]).
  int64_t first = 0, last = -1;
  for (int64_t d = 0; d < nd; ++d)
    if (reduced[static_cast<size_t>(d)]) last = d;
  while (first < nd && !reduced[static_cast<size_t>(first)]) ++first;
  bool adjacent = true;
  for (int64_t d = first; d <= last; ++d) adjacent &= reduced[static_cast<size_t>(d)];
  int64_t outer = 1, inner = 1;
  if (adjacent) {
    for (int64_t d = 0; d < first; ++d) outer *= x.shape()[d];
    for (int64_t d = last + 1; d < nd; ++d) inner *= x.shape()[d];
    in = internal::contiguous(in);
  } else {
    Shape shape;
    Strides strides;
    for (bool pick_reduced : {false, true}) {
      for (int64_t d = 0; d < nd; ++d) {
        if (reduced[static_cast<size_t>(d)] != pick_reduced) continue;
        shape.push_back(in.shape()[d]);
        strides.push_back(in.strides()[d]);
        if (!pick_reduced) outer *= x.shape()[d];
      }
    }
    in = internal::contiguous(internal::alias(in, shape, strides, in.offset()));
  }
  // An empty reduction is the log of an empty sum, -inf, as PyTorch's.
  Tensor out = n == 0 ? full(out_shape, -INFINITY, TensorOptions(dtype).device(x.device()))
                      : empty(out_shape, TensorOptions(dtype).device(x.device()));
  if (out.numel() && n) {
    logsumexp_stub(x.device().type, internal::alias_contiguous(out, {outer, inner}),
                   internal::alias_contiguous(in, {outer, n, inner}));
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [kept, sx = SavedTensor(x, name), sy = SavedTensor::output(out, name)](const TensorList& g) -> TensorList {
      // d/dx = exp(x - y) g, with y and g broadcast back over the reduced dims.
      const Tensor x = sx.get();
      const Tensor y = sy.get().reshape(kept), go = g[0].reshape(kept);
      return {go * exp(x - y)};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

}  // namespace hg
