// softmax and log_softmax along one dim (max-subtracted; float16/bfloat16 computed in float32).
#pragma once

#include <optional>

#include "framework/op.h"

namespace hg {

// Normalises `in` viewed as a contiguous [outer, n, inner] block along n into out (same layout).
// in and out may differ in dtype (autocast's float32 output reads float16 input directly).
using SoftmaxFn = void (*)(const Tensor& out, const Tensor& in, bool log);
HG_DECLARE_STUB(softmax_stub, SoftmaxFn);
// grad_in from grad_out and the forward's output y, all contiguous [outer, n, inner], one dtype:
// softmax: y (g - sum(g y)); log_softmax: g - exp(y) sum(g).
using SoftmaxBackwardFn = void (*)(const Tensor& grad_in, const Tensor& grad_out, const Tensor& y, bool log);
HG_DECLARE_STUB(softmax_backward_stub, SoftmaxBackwardFn);

// The output dtype is `dtype` when given, else the one autocast asks for, else x's dtype.
Tensor softmax(const Tensor& x, int64_t dim, std::optional<Dtype> dtype = std::nullopt);
Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<Dtype> dtype = std::nullopt);

}  // namespace hg
