// Tensor::to_string: PyTorch-like repr, abbreviated with "..." past 1000 elements.
#include <cmath>

#include "framework/tensor.h"

namespace hg {

namespace {
constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  bool floating;
  bool scientific = false;
  int width = 1;

  std::string one(double v) const {
    if (!floating) return fmt::format("{}", static_cast<int64_t>(v));
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return scientific ? fmt::format("{:.4e}", v) : fmt::format("{:.4f}", v);
  }
};

void render(std::string& s, const std::vector<double>& values, const Shape& shape, const Strides& strides, size_t dim,
            int64_t offset, const Formatter& f, bool summarize, int indent) {
  const int64_t n = shape[dim];
  s += '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      s += dim + 1 == shape.size() ? "..., " : fmt::format("...,\n{:{}}", "", indent + 1);
      i = n - kEdgeItems;
    }
    const int64_t at = offset + i * strides[dim];
    if (dim + 1 == shape.size()) {
      s += fmt::format("{:>{}}", f.one(values[static_cast<size_t>(at)]), f.width);
    } else {
      render(s, values, shape, strides, dim + 1, at, f, summarize, indent + 1);
    }
    if (i + 1 < n) s += dim + 1 == shape.size() ? ", " : fmt::format(",\n{:{}}", "", indent + 1);
  }
  s += ']';
}
}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  const std::vector<double> values = to_vector<double>();
  Formatter f{is_floating(dtype()) || dtype() == kBool};
  if (dtype() == kBool) f.floating = false;
  double max_abs = 0, min_abs = INFINITY;
  for (double v : values) {
    if (!std::isfinite(v) || v == 0) continue;
    max_abs = std::max(max_abs, std::abs(v));
    min_abs = std::min(min_abs, std::abs(v));
  }
  f.scientific = f.floating && (max_abs >= 1e8 || (min_abs < 1e-4 && min_abs != INFINITY));
  for (double v : values) f.width = std::max<int>(f.width, static_cast<int>(f.one(v).size()));

  std::string body;
  if (dim() == 0) {
    body = f.one(values.empty() ? 0.0 : values[0]);
  } else if (numel() == 0) {
    body = "[]";
  } else {
    render(body, values, shape(), contiguous_strides(shape()), 0, 0, f, numel() > kSummarizeAbove, 7);
  }
  if (dtype() == kBool) {
    std::string b;
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] == '1' && (i == 0 || !isdigit(body[i - 1])))
        b += "True";
      else if (body[i] == '0' && (i == 0 || !isdigit(body[i - 1])))
        b += "False";
      else
        b += body[i];
    }
    body = b;
  }
  std::string extra;
  if (dtype() != kFloat32 && dtype() != kInt64 && dtype() != kBool) extra += fmt::format(", dtype={}", dtype());
  if (numel() == 0) extra += fmt::format(", size={}", shape());
  if (!device().is_cpu()) extra += fmt::format(", device='{}'", device());
  if (grad_fn())
    extra += ", grad_fn";
  else if (requires_grad())
    extra += ", requires_grad=True";
  return fmt::format("tensor({}{})", body, extra);
}

}  // namespace hg
