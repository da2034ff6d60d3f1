#include "framework/shape.h"

#include "framework/error.h"

namespace hg {

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
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
