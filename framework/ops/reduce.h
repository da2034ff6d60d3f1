// Reductions: sum, mean, max, min, argmax (float16/bfloat16 accumulate in float32).
#pragma once

#include <optional>

#include "framework/tensor.h"

namespace hg {

enum class ReduceOp : uint8_t { Sum, Max, Min, ArgMax, ArgMin };

Tensor sum(const Tensor& t, std::optional<Dtype> dtype = std::nullopt);
Tensor sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false,
           std::optional<Dtype> dtype = std::nullopt);
Tensor mean(const Tensor& t);
Tensor mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false);

}  // namespace hg
