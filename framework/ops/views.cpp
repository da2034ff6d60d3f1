#include "framework/ops/views.h"

#include <algorithm>
#include <numeric>

#include "framework/op.h"
#include "framework/ops/copy.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/reduce.h"
#include "framework/view_history.h"

namespace hg {

namespace {
const OpDef kView{"view", true};
const OpDef kReshape{"reshape", true};
const OpDef kTranspose{"transpose", true};
const OpDef kPermute{"permute", true};
const OpDef kSlice{"slice", true};
const OpDef kSelect{"select", true};
const OpDef kExpand{"expand", true};
const OpDef kSqueeze{"squeeze", true};
const OpDef kUnsqueeze{"unsqueeze", true};
const OpDef kAsStrided{"as_strided", false};

using internal::alias;

// Resolves one -1 in `shape` from the element count, checking the total.
Shape infer_shape(const Shape& shape, int64_t numel, std::string_view op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      HG_CHECK(infer < 0, op, "only one dimension can be -1, got shape {}", shape);
      infer = static_cast<int64_t>(i);
    } else {
      HG_CHECK(out[i] >= 0, op, "invalid shape {}", shape);
      HG_CHECK(!__builtin_mul_overflow(known, out[i], &known), op, "shape {} is too large", shape);
    }
  }
  if (infer >= 0) {
    HG_CHECK(known != 0 && numel % known == 0, op, "shape {} is invalid for input of size {}", shape, numel);
    out[static_cast<size_t>(infer)] = numel / known;
  }
  HG_CHECK(checked_numel(out, op) == numel, op, "shape {} is invalid for input of size {}", shape, numel);
  return out;
}

BackwardFn reshape_back(const Tensor& x) {
  return [shape = x.shape()](const TensorList& g) -> TensorList { return {reshape(g[0], shape)}; };
}
}  // namespace

Tensor view(const Tensor& t, const Shape& shape) {
  OpCall call(kView, {t});
  const Tensor& x = call.input(0);
  Shape s = infer_shape(shape, x.numel(), "view");
  auto strides = internal::view_strides(x.shape(), x.strides(), s);
  HG_CHECK(strides.has_value(), "view",
           "shape {} is not compatible with the input's size {} and strides {}; use reshape() instead", s, x.shape(),
           x.strides());
  Tensor out = alias(x, s, *strides, x.offset());
  call.finish({&out}, call.needs_grad() ? reshape_back(x) : nullptr);
  mark_view(out, x, [s](const Tensor& b) { return view(b, s); });
  return out;
}

Tensor reshape(const Tensor& t, const Shape& shape) {
  OpCall call(kReshape, {t});
  const Tensor& x = call.input(0);
  Shape s = infer_shape(shape, x.numel(), "reshape");
  auto strides = internal::view_strides(x.shape(), x.strides(), s);
  Tensor out;
  if (strides) {
    out = alias(x, s, *strides, x.offset());
  } else {
    out = internal::alias_contiguous(internal::contiguous(x), s);
  }
  call.finish({&out}, call.needs_grad() ? reshape_back(x) : nullptr);
  mark_view(out, x, [s](const Tensor& b) { return view(b, s); });
  return out;
}

Tensor permute(const Tensor& t, const std::vector<int64_t>& dims) {
  OpCall call(kPermute, {t});
  const Tensor& x = call.input(0);
  HG_CHECK(static_cast<int64_t>(dims.size()) == x.dim(), "permute", "got {} dims {} for a tensor of {} dims",
           dims.size(), dims, x.dim());
  Shape s(dims.size());
  Strides st(dims.size());
  std::vector<int64_t> inverse(dims.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = normalize_dim(dims[i], x.dim(), "permute");
    HG_CHECK(inverse[static_cast<size_t>(d)] < 0, "permute", "dim {} repeated in {}", d, dims);
    inverse[static_cast<size_t>(d)] = static_cast<int64_t>(i);
    s[i] = x.shape()[static_cast<size_t>(d)];
    st[i] = x.strides()[static_cast<size_t>(d)];
  }
  Tensor out = alias(x, s, st, x.offset());
  BackwardFn bw;
  if (call.needs_grad()) bw = [inverse](const TensorList& g) -> TensorList { return {permute(g[0], inverse)}; };
  call.finish({&out}, std::move(bw));
  mark_view(out, x, [dims](const Tensor& b) { return permute(b, dims); });
  return out;
}

Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1) {
  OpCall call(kTranspose, {t});
  const Tensor& x = call.input(0);
  const int64_t a = normalize_dim(dim0, x.dim(), "transpose"), b = normalize_dim(dim1, x.dim(), "transpose");
  Shape s = x.shape();
  Strides st = x.strides();
  if (x.dim() > 0) {
    std::swap(s[static_cast<size_t>(a)], s[static_cast<size_t>(b)]);
    std::swap(st[static_cast<size_t>(a)], st[static_cast<size_t>(b)]);
  }
  Tensor out = alias(x, s, st, x.offset());
  BackwardFn bw;
  if (call.needs_grad()) bw = [a, b](const TensorList& g) -> TensorList { return {transpose(g[0], a, b)}; };
  call.finish({&out}, std::move(bw));
  mark_view(out, x, [a, b](const Tensor& base) { return transpose(base, a, b); });
  return out;
}

Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  OpCall call(kSlice, {t});
  const Tensor& x = call.input(0);
  HG_CHECK(x.dim() > 0, "slice", "cannot slice a 0-d tensor");
  const int64_t d = normalize_dim(dim, x.dim(), "slice");
  HG_CHECK(step > 0, "slice", "step must be positive, got {}", step);
  const int64_t n = x.shape()[static_cast<size_t>(d)];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = x.shape();
  Strides st = x.strides();
  // Rounded up without end - start + step - 1, which overflows for a huge step.
  const int64_t count = (end - start) / step + ((end - start) % step != 0);
  s[static_cast<size_t>(d)] = count;
  // With two or more elements the step is below n, so the product stays inside the storage's
  // reach; with fewer the stride is never used, and a huge step must not overflow it.
  if (count > 1) {
    HG_CHECK(!__builtin_mul_overflow(st[static_cast<size_t>(d)], step, &st[static_cast<size_t>(d)]), "slice",
             "step {} overflows the stride {} of dim {}", step, x.strides()[static_cast<size_t>(d)], d);
  }
  Tensor out = alias(x, s, st, x.offset() + start * x.strides()[static_cast<size_t>(d)]);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [shape = x.shape(), d, start, end, step](const TensorList& g) -> TensorList {
      Tensor gx = zeros(shape, TensorOptions(g[0].dtype()).device(g[0].device()));
      Tensor window = slice(gx, d, start, end, step);
      window.copy_(g[0]);
      return {gx};
    };
  }
  call.finish({&out}, std::move(bw));
  mark_view(out, x, [d, start, end, step](const Tensor& b) { return slice(b, d, start, end, step); });
  return out;
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  const int64_t d = normalize_dim(dim, t.dim(), "narrow");
  const int64_t n = t.shape()[static_cast<size_t>(d)];
  if (start < 0) start += n;
  // start <= n - length rather than start + length <= n, which overflows for a huge start.
  HG_CHECK(start >= 0 && length >= 0 && length <= n && start <= n - length, "narrow",
           "start {} and length {} out of range for dim {} of size {}", start, length, d, n);
  return slice(t, d, start, start + length);
}

Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  OpCall call(kSelect, {t});
  const Tensor& x = call.input(0);
  HG_CHECK(x.dim() > 0, "select", "cannot select from a 0-d tensor");
  const int64_t d = normalize_dim(dim, x.dim(), "select");
  const int64_t n = x.shape()[static_cast<size_t>(d)];
  HG_CHECK(index >= -n && index < n, "select", "index {} out of range for dim {} of size {}", index, d, n);
  if (index < 0) index += n;
  Shape s = x.shape();
  Strides st = x.strides();
  const int64_t offset = x.offset() + index * st[static_cast<size_t>(d)];
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = alias(x, s, st, offset);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [shape = x.shape(), d, index](const TensorList& g) -> TensorList {
      Tensor gx = zeros(shape, TensorOptions(g[0].dtype()).device(g[0].device()));
      select(gx, d, index).copy_(g[0]);
      return {gx};
    };
  }
  call.finish({&out}, std::move(bw));
  mark_view(out, x, [d, index](const Tensor& b) { return select(b, d, index); });
  return out;
}

Tensor expand(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  OpCall call(kExpand, {t});
  const Tensor& x = call.input(0);
  HG_CHECK(shape.size() >= x.shape().size(), "expand", "cannot expand shape {} to {} (fewer dims)", x.shape(), shape);
  const size_t lead = shape.size() - x.shape().size();
  Shape s(shape.size());
  Strides st(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      HG_CHECK(shape[i] >= 0, "expand", "cannot expand shape {} to {}", x.shape(), shape);
      s[i] = shape[i];
      continue;
    }
    const int64_t have = x.shape()[i - lead];
    const int64_t want = shape[i] == -1 ? have : shape[i];
    HG_CHECK(want >= 0, "expand", "cannot expand shape {} to {}: sizes must be non-negative or -1", x.shape(), shape);
    HG_CHECK(have == want || have == 1, "expand", "cannot expand shape {} to {}", x.shape(), shape);
    s[i] = want;
    st[i] = have == want ? x.strides()[i - lead] : 0;
  }
  checked_numel(s, "expand", element_size(x.dtype()));  // zero strides do not bound the element count
  Tensor out = alias(x, s, st, x.offset());
  BackwardFn bw;  // the engine sums the gradient back to the input's shape
  if (call.needs_grad()) bw = [](const TensorList& g) -> TensorList { return {g[0]}; };
  call.finish({&out}, std::move(bw));
  mark_view(out, x, [s](const Tensor& b) { return expand(b, s); });
  return out;
}

Tensor squeeze(const Tensor& t) {
  Shape s;
  for (int64_t v : t.shape())
    if (v != 1) s.push_back(v);
  if (s.size() == t.shape().size()) return t;
  OpCall call(kSqueeze, {t});
  const Tensor& x = call.input(0);
  Strides st;
  for (size_t i = 0; i < x.shape().size(); ++i)
    if (x.shape()[i] != 1) st.push_back(x.strides()[i]);
  Tensor out = alias(x, s, st, x.offset());
  call.finish({&out}, call.needs_grad() ? reshape_back(x) : nullptr);
  mark_view(out, x, [](const Tensor& b) { return squeeze(b); });
  return out;
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  if (t.dim() == 0) return t;
  const int64_t d = normalize_dim(dim, t.dim(), "squeeze");
  if (t.shape()[static_cast<size_t>(d)] != 1) return t;
  OpCall call(kSqueeze, {t});
  const Tensor& x = call.input(0);
  Shape s = x.shape();
  Strides st = x.strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = alias(x, s, st, x.offset());
  call.finish({&out}, call.needs_grad() ? reshape_back(x) : nullptr);
  mark_view(out, x, [d](const Tensor& b) { return squeeze(b, d); });
  return out;
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  OpCall call(kUnsqueeze, {t});
  const Tensor& x = call.input(0);
  const int64_t d = normalize_dim(dim, x.dim() + 1, "unsqueeze");
  Shape s = x.shape();
  Strides st = x.strides();
  const int64_t stride = d < x.dim() ? st[static_cast<size_t>(d)] * s[static_cast<size_t>(d)] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  Tensor out = alias(x, s, st, x.offset());
  call.finish({&out}, call.needs_grad() ? reshape_back(x) : nullptr);
  mark_view(out, x, [d](const Tensor& b) { return unsqueeze(b, d); });
  return out;
}

Tensor flatten(const Tensor& t, int64_t start_dim, int64_t end_dim) {
  if (t.dim() == 0) return reshape(t, {1});
  const int64_t a = normalize_dim(start_dim, t.dim(), "flatten"), b = normalize_dim(end_dim, t.dim(), "flatten");
  HG_CHECK(a <= b, "flatten", "start_dim {} comes after end_dim {}", start_dim, end_dim);
  Shape s(t.shape().begin(), t.shape().begin() + a);
  int64_t n = 1;
  for (int64_t i = a; i <= b; ++i) n *= t.shape()[static_cast<size_t>(i)];
  s.push_back(n);
  s.insert(s.end(), t.shape().begin() + b + 1, t.shape().end());
  return reshape(t, s);
}

Tensor as_strided(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset) {
  HG_CHECK(shape.size() == strides.size(), "as_strided", "shape {} and strides {} differ in length", shape, strides);
  HG_CHECK(offset >= 0, "as_strided", "offset must be non-negative, got {}", offset);
  for (size_t i = 0; i < shape.size(); ++i)
    HG_CHECK(shape[i] >= 0 && strides[i] >= 0, "as_strided", "invalid shape {} / strides {}", shape, strides);
  checked_numel(shape, "as_strided", element_size(t.dtype()));
  check_view_bounds(shape, strides, offset, static_cast<int64_t>(t.storage()->nbytes / element_size(t.dtype())),
                    "as_strided");
  OpCall call(kAsStrided, {t});
  Tensor out = alias(t, shape, strides, offset);
  call.finish({&out});
  return out;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const size_t lead = grad.shape().size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < grad.shape().size(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && grad.shape()[i] != 1)) dims.push_back(static_cast<int64_t>(i));
  }
  Tensor r = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  return r.shape() == shape ? r : reshape(r, shape);
}

Tensor Tensor::view(const Shape& s) const { return hg::view(*this, s); }
Tensor Tensor::reshape(const Shape& s) const { return hg::reshape(*this, s); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return hg::transpose(*this, a, b); }
Tensor Tensor::t() const {
  HG_CHECK(dim() <= 2, "t", "expects a tensor of at most 2 dims, got shape {}", shape());
  return dim() < 2 ? *this : hg::transpose(*this, 0, 1);
}
Tensor Tensor::permute(const std::vector<int64_t>& d) const { return hg::permute(*this, d); }
Tensor Tensor::narrow(int64_t d, int64_t s, int64_t l) const { return hg::narrow(*this, d, s, l); }
Tensor Tensor::slice(int64_t d, int64_t s, int64_t e, int64_t st) const { return hg::slice(*this, d, s, e, st); }
Tensor Tensor::select(int64_t d, int64_t i) const { return hg::select(*this, d, i); }
Tensor Tensor::expand(const Shape& s) const { return hg::expand(*this, s); }
Tensor Tensor::squeeze() const { return hg::squeeze(*this); }
Tensor Tensor::squeeze(int64_t d) const { return hg::squeeze(*this, d); }
Tensor Tensor::unsqueeze(int64_t d) const { return hg::unsqueeze(*this, d); }
Tensor Tensor::flatten(int64_t a, int64_t b) const { return hg::flatten(*this, a, b); }

}  // namespace hg
