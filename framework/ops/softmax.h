// softmax and log_softmax along one dim (max-subtracted; float16/bfloat16 computed in float32).
#pragma once

#include <optional>

#include "framework/tensor.h"

namespace hg {

// The output dtype is `dtype` when given, else the one autocast asks for, else x's dtype.
Tensor softmax(const Tensor& x, int64_t dim, std::optional<Dtype> dtype = std::nullopt);
Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<Dtype> dtype = std::nullopt);

}  // namespace hg
