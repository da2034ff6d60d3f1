// tril/triu through one masking kernel; the gradient is the same triangle of the upstream one.
#include "framework/ops/triangular_kernels.h"

#include "framework/op.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"

namespace hg {

HG_DEFINE_STUB(triangle_stub, TriangleFn);

namespace {
const OpDef kTril{"tril", true};
const OpDef kTriu{"triu", true};

Tensor triangle(const OpDef& def, const Tensor& t, int64_t diagonal, bool upper) {
  OpCall call(def, {t});
  const Tensor& x = call.input(0);
  HG_CHECK(x.defined(), def.name, "got an undefined tensor");
  HG_CHECK(x.dim() >= 2, def.name, "expected a tensor of at least 2 dims, got shape {}", x.shape());
  Tensor out = empty(x.shape(), TensorOptions(x.dtype()).device(x.device()));
  if (out.numel()) {
    const int64_t rows = x.size(-2), cols = x.size(-1), batch = x.numel() / (rows * cols);
    const Tensor in = internal::contiguous(x);
    triangle_stub(x.device().type, internal::alias_contiguous(out, {batch, rows, cols}),
                  internal::alias_contiguous(in, {batch, rows, cols}), diagonal, upper);
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [diagonal, upper](const TensorList& g) -> TensorList {
      return {upper ? triu(g[0], diagonal) : tril(g[0], diagonal)};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}
}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) { return triangle(kTril, x, diagonal, false); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle(kTriu, x, diagonal, true); }
Tensor Tensor::tril(int64_t diagonal) const { return hg::tril(*this, diagonal); }
Tensor Tensor::triu(int64_t diagonal) const { return hg::triu(*this, diagonal); }

}  // namespace hg
