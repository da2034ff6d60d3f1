#include "serialize/state_value.h"

#include <cmath>

#include "framework/error.h"

namespace hg {

double state_number(const Tensor& t, std::string_view op, std::string_view key, double lo, double hi) {
  HG_CHECK(t.defined(), op, "load_state_dict: '{}' is undefined", key);
  HG_CHECK(t.numel() == 1, op, "load_state_dict: '{}' must hold one number, has shape {}", key, t.shape());
  // item<double>() converts every dtype exactly or by rounding: no undefined float-to-int casts.
  const double v = t.item<double>();
  HG_CHECK(std::isfinite(v), op, "load_state_dict: '{}' is {}, expected a finite number", key, v);
  HG_CHECK(v >= lo && v <= hi, op, "load_state_dict: '{}' is {}, expected a value in [{}, {}]", key, v, lo, hi);
  return v;
}

int64_t state_count(const Tensor& t, std::string_view op, std::string_view key, int64_t lo, int64_t hi) {
  const double v = state_number(t, op, key, static_cast<double>(lo), static_cast<double>(hi));
  HG_CHECK(v == std::floor(v), op, "load_state_dict: '{}' is {}, expected a whole number", key, v);
  // lo and hi round to doubles; clamp again after the cast, which is now in range.
  const auto n = static_cast<int64_t>(v);
  HG_CHECK(n >= lo && n <= hi, op, "load_state_dict: '{}' is {}, expected a value in [{}, {}]", key, n, lo, hi);
  return n;
}

size_t state_index(std::string_view text, size_t count, std::string_view op, std::string_view key) {
  const size_t end = std::min(text.find('.'), text.size());
  HG_CHECK(end > 0 && end <= 19, op, "load_state_dict: '{}' does not start with a parameter index", key);
  uint64_t index = 0;
  for (size_t i = 0; i < end; ++i) {
    HG_CHECK(text[i] >= '0' && text[i] <= '9', op, "load_state_dict: '{}' does not start with a parameter index", key);
    index = index * 10 + static_cast<uint64_t>(text[i] - '0');  // at most 19 digits: no overflow
  }
  HG_CHECK(index < count, op, "load_state_dict: '{}' names parameter {} but there are {}", key, index, count);
  return static_cast<size_t>(index);
}

}  // namespace hg
