// one_hot as a comparison with arange (a composite), multinomial through a sampling kernel fed
// with uniforms drawn on the host from the global generator, so CPU and CUDA draw the same.
#include "framework/ops/categorical_kernels.h"

#include <cmath>

#include "framework/capture_state.h"
#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/minmax.h"
#include "framework/ops/reduce.h"
#include "framework/ops/views.h"

namespace hg {

HG_DEFINE_STUB(multinomial_stub, MultinomialFn);

namespace {
const OpDef kMultinomial{"multinomial", false};
}  // namespace

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  HG_CHECK(indices.defined(), "one_hot", "got an undefined tensor");
  HG_CHECK(indices.dtype() == kInt64, "one_hot", "expected int64 class indices, got {} (shape {})", indices.dtype(),
           indices.shape());
  HG_CHECK(num_classes >= -1, "one_hot", "num_classes must be -1 (inferred) or non-negative, got {}", num_classes);
  if (indices.numel() > 0) {
    capture::refuse_host_sync("one_hot", indices.device(), "check the class values on the host");
    const int64_t lo = min(indices).item<int64_t>(), hi = max(indices).item<int64_t>();
    HG_CHECK(lo >= 0, "one_hot", "class values must be non-negative, got {}", lo);
    if (num_classes == -1) num_classes = hi + 1;
    HG_CHECK(hi < num_classes, "one_hot", "class value {} is out of range for num_classes {}", hi, num_classes);
  } else {
    HG_CHECK(num_classes != -1, "one_hot", "cannot infer num_classes from an empty tensor (shape {}); pass it",
             indices.shape());
  }
  const Tensor classes = arange(num_classes).to(indices.device());
  return eq(unsqueeze(indices, -1), classes).to(kInt64);
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement) {
  OpCall call(kMultinomial, {probs});
  const Tensor& p = call.input(0);
  HG_CHECK(p.defined(), "multinomial", "got an undefined tensor");
  HG_CHECK(is_floating(p.dtype()), "multinomial", "expected floating-point probabilities, got {} (shape {})", p.dtype(),
           p.shape());
  HG_CHECK(p.dim() == 1 || p.dim() == 2, "multinomial", "expected a 1-d or 2-d tensor of probabilities, got shape {}",
           p.shape());
  const int64_t n = p.size(-1), rows = p.dim() == 2 ? p.size(0) : 1;
  HG_CHECK(n > 0, "multinomial", "needs at least one category, got shape {}", p.shape());
  HG_CHECK(num_samples > 0, "multinomial", "num_samples must be positive, got {}", num_samples);
  HG_CHECK(replacement || num_samples <= n, "multinomial",
           "cannot draw {} samples without replacement from {} categories (shape {})", num_samples, n, p.shape());
  Tensor out = empty({rows, num_samples}, TensorOptions(kInt64).device(p.device()));
  if (rows > 0) {
    const Tensor flat = internal::alias_contiguous(internal::contiguous(p), {rows, n});
    {
      // Invalid weights are an error here, as in PyTorch, at the cost of reading a few values back.
      NoGradGuard no_grad;
      capture::refuse_host_sync("multinomial", p.device(), "check the probabilities on the host");
      const double lo = min(flat).item<double>();
      HG_CHECK(lo >= 0 && std::isfinite(lo), "multinomial", "probabilities must be finite and non-negative, found {}",
               lo);
      const Tensor sums = sum(flat, {1}, false, kFloat64);
      const double smin = min(sums).item<double>(), smax = max(sums).item<double>();
      HG_CHECK(std::isfinite(smax), "multinomial", "probabilities must be finite (a row sums to {})", smax);
      HG_CHECK(smin > 0, "multinomial", "every row of probabilities needs a positive sum (one sums to {})", smin);
      if (!replacement) {
        const int64_t nonzero =
            min(sum(gt(flat, zeros({}, TensorOptions(p.dtype()).device(p.device()))), {1})).item<int64_t>();
        HG_CHECK(nonzero >= num_samples, "multinomial",
                 "a row has only {} non-zero probabilities, fewer than the {} samples drawn without replacement",
                 nonzero, num_samples);
      }
    }
    const Tensor uniforms = rand({rows, replacement ? num_samples : n}, TensorOptions(kFloat64)).to(p.device());
    multinomial_stub(p.device().type, out, flat, uniforms, replacement);
  }
  if (p.dim() == 1) out = internal::alias_contiguous(out, {num_samples});
  call.finish({&out});
  return out;
}

Tensor Tensor::multinomial(int64_t num_samples, bool replacement) const {
  return hg::multinomial(*this, num_samples, replacement);
}

}  // namespace hg
