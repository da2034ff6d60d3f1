#include "framework/shape.h"

#include <algorithm>

#include "framework/error.h"

namespace hg {

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t checked_numel(const Shape& shape, std::string_view op, size_t element_size) {
  int64_t n = 1, extent = 1;
  for (int64_t s : shape) {
    HG_CHECK(s >= 0, op, "negative dimension in shape {}", shape);
    HG_CHECK(!__builtin_mul_overflow(extent, std::max<int64_t>(s, 1), &extent), op,
             "shape {} is too large: its extent overflows 64-bit integers", shape);
    n *= s;  // cannot overflow: |n| <= extent
  }
  int64_t bytes = 0;
  HG_CHECK(!__builtin_mul_overflow(extent, static_cast<int64_t>(element_size), &bytes), op,
           "shape {} is too large: {} elements of {} bytes overflow 64-bit byte counts", shape, n, element_size);
  return n;
}

void check_view_bounds(const Shape& shape, const Strides& strides, int64_t offset, int64_t capacity,
                       std::string_view op) {
  HG_CHECK(shape.size() == strides.size(), op, "shape {} and strides {} differ in length", shape, strides);
  for (int64_t s : shape) HG_CHECK(s >= 0, op, "negative dimension in shape {}", shape);
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return;  // an empty view touches no memory
  int64_t lo = offset, hi = offset;
  bool ok = true;
  for (size_t i = 0; i < shape.size() && ok; ++i) {
    int64_t reach = 0;
    ok = !__builtin_mul_overflow(shape[i] - 1, strides[i], &reach) &&
         !__builtin_add_overflow(reach > 0 ? hi : lo, reach, reach > 0 ? &hi : &lo);
  }
  HG_CHECK(ok && lo >= 0 && hi < capacity, op,
           "a view of shape {} strides {} offset {} reaches outside its storage of {} elements", shape, strides, offset,
           capacity);
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

std::string_view memory_format_name(MemoryFormat format) {
  switch (format) {
    case MemoryFormat::Contiguous: return "contiguous_format";
    case MemoryFormat::ChannelsLast: return "channels_last";
    case MemoryFormat::Preserve: return "preserve_format";
  }
  return "?";
}

Strides format_strides(const Shape& shape, MemoryFormat format, std::string_view op) {
  HG_CHECK(format != MemoryFormat::Preserve, op, "preserve_format names no strides of its own");
  if (format == MemoryFormat::Contiguous) return contiguous_strides(shape);
  HG_CHECK(shape.size() == 4, op, "channels_last needs a 4-d [N, C, H, W] tensor, got shape {}", shape);
  const int64_t c = std::max<int64_t>(shape[1], 1), h = std::max<int64_t>(shape[2], 1);
  const int64_t w = std::max<int64_t>(shape[3], 1);
  return {h * w * c, 1, w * c, c};
}

bool has_format(const Shape& shape, const Strides& strides, MemoryFormat format) {
  if (format == MemoryFormat::ChannelsLast && shape.size() != 4) return false;
  if (format == MemoryFormat::Preserve) return true;
  const Strides want = format_strides(shape, format, "has_format");
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1 && strides[d] != want[d]) return false;
  return true;
}

MemoryFormat suggest_memory_format(const Shape& shape, const Strides& strides) {
  return has_format(shape, strides, MemoryFormat::ChannelsLast) && !has_format(shape, strides, MemoryFormat::Contiguous)
             ? MemoryFormat::ChannelsLast
             : MemoryFormat::Contiguous;
}

std::vector<size_t> dims_in_memory_order(const Shape& shape, const Strides& strides) {
  std::vector<size_t> dims;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) dims.push_back(d);
  std::stable_sort(dims.begin(), dims.end(), [&](size_t a, size_t b) { return strides[a] > strides[b]; });
  return dims;
}

int64_t normalize_dim(int64_t dim, int64_t ndim, std::string_view op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim;
  const int64_t hi = ndim == 0 ? 0 : ndim - 1;
  HG_CHECK(dim >= lo && dim <= hi, op, "dim {} out of range for a tensor of {} dims (expected [{}, {}])", dim, ndim, lo,
           hi);
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    HG_CHECK(da == db || da == 1 || db == 1, op, "shapes {} and {} cannot be broadcast together", a, b);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace hg
