#include "framework/ops/conv_args.h"

#include "framework/error.h"

namespace hg::conv_args {

void check_tensors(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias,
                   const char* input_layout, const char* weight_layout) {
  HG_CHECK(input.defined() && weight.defined(), op, "got an undefined input or weight");
  HG_CHECK(input.dim() == 3 || input.dim() == 4, op, "expected a 3-d (unbatched) or 4-d input {}, got shape {}",
           input_layout, input.shape());
  HG_CHECK(weight.dim() == 4, op, "expected a 4-d weight {}, got shape {}", weight_layout, weight.shape());
  HG_CHECK(input.device() == weight.device() && (!bias.defined() || bias.device() == input.device()), op,
           "input, weight and bias must be on one device, got {} and {}", input.device(), weight.device());
  HG_CHECK(is_floating(input.dtype()), op, "expected a floating-point input, got {}", input.dtype());
  HG_CHECK(input.dtype() == weight.dtype() && (!bias.defined() || bias.dtype() == input.dtype()), op,
           "input ({}), weight ({}) and bias ({}) must have the same dtype; convert with to() or use autocast",
           input.dtype(), weight.dtype(), bias.defined() ? dtype_name(bias.dtype()) : "none");
}

void pair(const char* op, const std::vector<int64_t>& v, const char* what, int64_t out[2]) {
  HG_CHECK(v.size() == 1 || v.size() == 2, op, "{} must have 1 or 2 values, got {}", what, v.size());
  out[0] = v[0];
  out[1] = v.size() == 2 ? v[1] : v[0];
}

}  // namespace hg::conv_args
