// Reading numbers out of loaded state dicts (checkpoints) defensively: a checkpoint is untrusted
// input, so every scalar is range-checked before it becomes a learning rate, a count or an index.
#pragma once

#include <cstdint>
#include <string_view>

#include "framework/tensor.h"

namespace hg {

// The one value of `t` as a finite double in [lo, hi]; throws "[op] load_state_dict: '<key>' ..."
// for an undefined tensor, more or fewer than one element, NaN, infinities or a value out of range.
double state_number(const Tensor& t, std::string_view op, std::string_view key, double lo, double hi);
// The same for a count: additionally a whole number (float-typed entries are accepted when integral).
int64_t state_count(const Tensor& t, std::string_view op, std::string_view key, int64_t lo, int64_t hi);
// Parses the decimal index at the start of `text` (up to a '.' or the end) and checks it is below
// `count`; throws naming `key` when it is not a plain number or out of range (never std::stoul).
size_t state_index(std::string_view text, size_t count, std::string_view op, std::string_view key);

}  // namespace hg
