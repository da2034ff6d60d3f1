// var through a two-pass row kernel (std is sqrt of it), norm through a row kernel; both
// backward formulas are written in public ops, so they can be differentiated again.
#include "framework/ops/statistics_kernels.h"

#include <algorithm>
#include <cmath>

#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/copy_kernels.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"
#include "framework/ops/internal.h"
#include "framework/ops/reduce.h"
#include "framework/ops/reduce_kernels.h"
#include "framework/ops/unary.h"
#include "framework/ops/views.h"

namespace hg {

HG_DEFINE_STUB(var_stub, VarFn);
HG_DEFINE_STUB(norm_stub, NormFn);

namespace {
const OpDef kVar{"var", true};
const OpDef kNorm{"norm", true};

std::vector<int64_t> dims_or_all(const Tensor& t, const std::vector<int64_t>& dims) {
  if (!dims.empty()) return dims;
  std::vector<int64_t> d(static_cast<size_t>(t.dim()));
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<int64_t>(i);
  return d;
}

void check_floating(const Tensor& x, std::string_view op) {
  HG_CHECK(x.defined(), op, "got an undefined tensor");
  HG_CHECK(is_floating(x.dtype()), op,
           "expected a floating-point tensor, got {} (shape {}); convert it with to() first", x.dtype(), x.shape());
}

// -1, 0 or 1 per element, a constant (no gradient flows through it).
Tensor sign_of(const Tensor& x) { return gt(x, zeros_like(x)).to(x.dtype()) - lt(x, zeros_like(x)).to(x.dtype()); }
}  // namespace

Tensor var(const Tensor& t, const std::vector<int64_t>& dims_in, double correction, bool keepdim) {
  OpCall call(kVar, {t});
  const Tensor& x = call.input(0);
  check_floating(x, "var");
  HG_CHECK(std::isfinite(correction), "var", "correction must be finite, got {}", correction);
  const std::vector<int64_t> dims = dims_or_all(x, dims_in);
  const ReduceLayout layout = reduce_layout(x, dims, keepdim, "var");
  Tensor out = empty(layout.out_shape, TensorOptions(x.dtype()).device(x.device()));
  if (out.numel()) {
    const Tensor flat_out = internal::alias(out, {out.numel()}, {1}, 0);
    if (layout.reduced == 0) {
      fill_stub(out.device().type, out, NAN);  // no elements: no mean (as PyTorch)
    } else {
      var_stub(x.device().type, flat_out, layout.flat, correction);
    }
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [sx = SavedTensor(x, "var"), dims, kept = layout.kept_shape, n = layout.reduced,
          correction](const TensorList& g) -> TensorList {
      const Tensor& x = sx.get();
      const double denom = std::max(static_cast<double>(n) - correction, 0.0);
      const Tensor centered = x - mean(x, dims, true);
      return {centered * (reshape(g[0], kept) * (2.0 / denom))};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, bool unbiased, bool keepdim) {
  return var(x, dims, unbiased ? 1.0 : 0.0, keepdim);
}
Tensor var(const Tensor& x) { return var(x, {}, 1.0, false); }

Tensor std(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  return sqrt(var(x, dims, correction, keepdim));
}
Tensor std(const Tensor& x, const std::vector<int64_t>& dims, bool unbiased, bool keepdim) {
  return sqrt(var(x, dims, unbiased ? 1.0 : 0.0, keepdim));
}
Tensor std(const Tensor& x) { return sqrt(var(x, {}, 1.0, false)); }

Tensor norm(const Tensor& t, double p, const std::vector<int64_t>& dims_in, bool keepdim) {
  OpCall call(kNorm, {t});
  const Tensor& x = call.input(0);
  check_floating(x, "norm");
  HG_CHECK(p == 1.0 || p == 2.0 || p == INFINITY, "norm", "p must be 1, 2 or INFINITY, got {}", p);
  const std::vector<int64_t> dims = dims_or_all(x, dims_in);
  const ReduceLayout layout = reduce_layout(x, dims, keepdim, "norm");
  const Dtype out_dtype = call.output_dtype().value_or(x.dtype());
  Tensor out = empty(layout.out_shape, TensorOptions(out_dtype).device(x.device()));
  if (out.numel()) {
    if (layout.reduced == 0) {
      fill_stub(out.device().type, out, 0.0);  // the norm of nothing is 0 (as PyTorch)
    } else {
      norm_stub(x.device().type, internal::alias(out, {out.numel()}, {1}, 0), layout.flat, p);
    }
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [sx = SavedTensor(x, "norm"), sy = SavedTensor::output(out, "norm"), p, dims,
          kept = layout.kept_shape](const TensorList& g) -> TensorList {
      const Tensor& x = sx.get();
      const Tensor n = reshape(sy.get(), kept);
      const Tensor gk = reshape(g[0], kept);
      Tensor gx;
      if (p == 2.0) {
        gx = x * masked_fill(gk / n, eq(n, zeros_like(n)), 0.0);
      } else if (p == 1.0) {
        gx = sign_of(x) * gk;
      } else {
        const Tensor at_max = eq(abs(x), n).to(gk.dtype());
        gx = sign_of(x) * at_max * (gk / sum(at_max, dims, true));
      }
      return {gx.dtype() == x.dtype() ? gx : gx.to(x.dtype())};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor Tensor::var(const std::vector<int64_t>& dims, bool unbiased, bool keepdim) const {
  return hg::var(*this, dims, unbiased, keepdim);
}
Tensor Tensor::std(const std::vector<int64_t>& dims, bool unbiased, bool keepdim) const {
  return hg::std(*this, dims, unbiased, keepdim);
}
Tensor Tensor::norm(double p, const std::vector<int64_t>& dims, bool keepdim) const {
  return hg::norm(*this, p, dims, keepdim);
}

}  // namespace hg
