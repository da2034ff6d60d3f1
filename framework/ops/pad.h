// pad: torch.nn.functional.pad, constant (any dims, negative pads crop), reflect, replicate and
// circular (the last one, two or three dims of a batched or unbatched input, as PyTorch 1.13).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "framework/tensor.h"

namespace hg {

// pads lists (before, after) pairs starting from the LAST dim, as PyTorch: {left, right, top,
// bottom, ...}. mode is "constant", "reflect", "replicate" or "circular"; value (constant mode
// only, default 0) fills the new elements. Constant mode takes any dtype; the others floating
// dtypes, pads.size() in {2, 4, 6}, and an input of pads.size() / 2 + 1 or + 2 dims (circular: + 2
// only). Reflect needs each pad smaller than its dim, circular no larger than it.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, std::string_view mode = "constant",
           std::optional<double> value = std::nullopt);

}  // namespace hg
