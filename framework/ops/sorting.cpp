// sort and topk through one kernel that sorts the rows of a [rows, n] copy with the dim moved
// last and keeps the first k of each; argsort is sort's indices.
#include "framework/ops/sorting_kernels.h"

#include "framework/op.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"
#include "framework/ops/internal.h"
#include "framework/ops/views.h"

namespace hg {

HG_DEFINE_STUB(sort_stub, SortFn);

namespace {
const OpDef kSort{"sort", true};
const OpDef kTopk{"topk", true};

// k < 0: every element (sort).
std::pair<Tensor, Tensor> sorted_run(const OpDef& def, const Tensor& t, int64_t k, int64_t dim, bool descending) {
  OpCall call(def, {t});
  const Tensor& x = call.input(0);
  HG_CHECK(x.defined(), def.name, "got an undefined tensor");
  const int64_t d = normalize_dim(dim, x.dim(), def.name);
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  if (k < 0) k = n;
  HG_CHECK(k <= n, def.name, "k ({}) is larger than dim {} of shape {} (size {})", k, d, x.shape(), n);
  // The dim moved last (a view), then rows of n.
  Shape moved_shape, out_shape = x.shape();
  Strides moved_strides;
  std::vector<int64_t> perm, inverse(static_cast<size_t>(x.dim()));
  for (int64_t i = 0; i < x.dim(); ++i)
    if (i != d) perm.push_back(i);
  if (x.dim() > 0) {
    perm.push_back(d);
    out_shape[static_cast<size_t>(d)] = k;
  }
  for (size_t i = 0; i < perm.size(); ++i) {
    moved_shape.push_back(x.shape()[static_cast<size_t>(perm[i])]);
    moved_strides.push_back(x.strides()[static_cast<size_t>(perm[i])]);
    inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  }
  Shape moved_out = moved_shape;
  if (!moved_out.empty()) moved_out.back() = k;
  Tensor values = empty(moved_out, TensorOptions(x.dtype()).device(x.device()));
  Tensor indices = empty(moved_out, TensorOptions(kInt64).device(x.device()));
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  if (rows > 0 && k > 0) {
    const Tensor flat = internal::contiguous(internal::alias(x, moved_shape, moved_strides, x.offset()));
    sort_stub(x.device().type, internal::alias_contiguous(values, {rows, k}),
              internal::alias_contiguous(indices, {rows, k}), internal::alias_contiguous(flat, {rows, n}), descending);
  }
  auto move_back = [&](const Tensor& m) {
    if (m.dim() == 0) return m;
    Shape s(out_shape.size());
    Strides st(out_shape.size());
    for (size_t i = 0; i < s.size(); ++i) {
      s[i] = m.shape()[static_cast<size_t>(inverse[i])];
      st[i] = m.strides()[static_cast<size_t>(inverse[i])];
    }
    return internal::contiguous(internal::alias(m, s, st, m.offset()));
  };
  values = move_back(values);
  indices = move_back(indices);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [shape = x.shape(), d, indices](const TensorList& g) -> TensorList {
      if (shape.empty()) return {g[0]};
      const Tensor gx = zeros(shape, TensorOptions(g[0].dtype()).device(g[0].device()));
      return {scatter_add(gx, d, indices, g[0])};
    };
  }
  call.finish({&values, &indices}, std::move(bw));
  return {values, indices};
}
}  // namespace

std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending, bool /*stable: always*/) {
  return sorted_run(kSort, x, -1, dim, descending);
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  return sort(x, dim, descending, stable).second;
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted: always*/) {
  HG_CHECK(k >= 0, "topk", "k must be non-negative, got {}", k);
  return sorted_run(kTopk, x, k, dim, largest);
}

std::pair<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending) const { return hg::sort(*this, dim, descending); }
Tensor Tensor::argsort(int64_t dim, bool descending) const { return hg::argsort(*this, dim, descending); }
std::pair<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return hg::topk(*this, k, dim, largest, sorted);
}

}  // namespace hg
