// Tensor::index and index_put_: the basic indices become views (select, slice, unsqueeze); a
// tensor index becomes an index_select (reading) or per-position copies (writing). Everything
// goes through public ops, so reading is differentiable and writing is copy_'s in-place rules.
#include "framework/ops/tensor_index.h"

#include <cstring>
#include <limits>

#include "framework/memory_overlap.h"
#include "framework/ops/binary.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"
#include "framework/ops/internal.h"
#include "framework/ops/views.h"
#include "framework/view_history.h"

namespace hg {

indexing::TensorIndex::TensorIndex(const char* ellipsis) : kind_(Kind::Ellipsis) {
  HG_CHECK(ellipsis != nullptr && std::strcmp(ellipsis, "...") == 0, "index",
           "the only string index is \"...\" (Ellipsis), got \"{}\"", ellipsis ? ellipsis : "(null)");
}

namespace {
using indexing::TensorIndex;
using Kind = TensorIndex::Kind;

// The view the basic indices give, and where the one tensor index (if any) applies in it.
struct Basic {
  Tensor view;
  Tensor index;  // undefined when there is none
  int64_t dim = 0;
};

Basic apply_basic(const Tensor& x, const std::vector<TensorIndex>& indices, std::string_view op) {
  HG_CHECK(x.defined(), op, "got an undefined tensor");
  int64_t consumed = 0, ellipses = 0, tensors = 0;
  for (const TensorIndex& i : indices) {
    if (i.kind() == Kind::Integer || i.kind() == Kind::Slice) ++consumed;
    if (i.kind() == Kind::Ellipsis) ++ellipses;
    if (i.kind() == Kind::Tensor) {
      HG_CHECK(i.tensor().defined(), op, "got an undefined index tensor");
      HG_CHECK(i.tensor().dtype() == kBool || !is_floating(i.tensor().dtype()), op,
               "index tensors must be integer or bool, got {} (shape {})", i.tensor().dtype(), i.tensor().shape());
      HG_CHECK(i.tensor().dtype() != kBool || i.tensor().dim() > 0, op, "a 0-d bool index is not supported");
      consumed += i.tensor().dtype() == kBool ? i.tensor().dim() : 1;
      ++tensors;
    }
  }
  HG_CHECK(ellipses <= 1, op, "an index can hold only one Ellipsis, got {}", ellipses);
  HG_CHECK(tensors <= 1, op, "only one tensor index is supported, got {}", tensors);
  HG_CHECK(consumed <= x.dim(), op, "too many indices for a tensor of {} dims (shape {}): {} dims indexed", x.dim(),
           x.shape(), consumed);
  Basic b{x, Tensor(), 0};
  int64_t d = 0;  // the dim of b.view the next index applies to
  for (const TensorIndex& i : indices) {
    switch (i.kind()) {
      case Kind::Integer: {
        const int64_t n = b.view.size(d), k = i.integer();
        HG_CHECK(k >= -n && k < n, op, "index {} is out of range for dim {} of size {} (shape {})", k, d, n,
                 b.view.shape());
        b.view = select(b.view, d, k);
        break;
      }
      case Kind::Slice: {
        const indexing::Slice& s = i.slice();
        const int64_t step = s.step.value_or(1);
        HG_CHECK(step > 0, op, "slice steps must be positive, got {}", step);
        b.view = slice(b.view, d, s.start.value_or(0), s.stop.value_or(std::numeric_limits<int64_t>::max()), step);
        ++d;
        break;
      }
      case Kind::None: b.view = unsqueeze(b.view, d++); break;
      case Kind::Ellipsis: d += x.dim() - consumed; break;
      case Kind::Tensor:
        b.index = i.tensor();
        b.dim = d;
        d += b.index.dtype() == kBool ? b.index.dim() : 1;
        break;
    }
  }
  return b;
}

// The positions a tensor index picks along dim `d` of `v` (after flattening a k-dim mask's dims
// into one): int64 on v's device, and the flattened view (or v).
std::pair<Tensor, Tensor> positions(const Tensor& v, const Tensor& index, int64_t d, std::string_view op) {
  if (index.dtype() != kBool) {
    const Tensor idx = index.to(v.device(), kInt64).flatten();
    const Tensor n = full({}, static_cast<double>(v.size(d)), TensorOptions(kInt64).device(v.device()));
    return {where(lt(idx, zeros_like(idx)), idx + n, idx), v};  // negative indices count from the end
  }
  const int64_t k = index.dim();
  const Shape dims(v.shape().begin() + d, v.shape().begin() + d + k);
  HG_CHECK(dims == index.shape(), op, "the bool index of shape {} does not match the indexed dims {} of shape {}",
           index.shape(), dims, v.shape());
  std::vector<int64_t> where_true;
  const auto m = index.to_vector<bool>();
  for (size_t i = 0; i < m.size(); ++i)
    if (m[i]) where_true.push_back(static_cast<int64_t>(i));
  const Tensor flat = k == 1 ? v : v.flatten(d, d + k - 1);
  return {tensor(where_true).to(v.device()), flat};
}
}  // namespace

Tensor index(const Tensor& x, const std::vector<TensorIndex>& indices) {
  Basic b = apply_basic(x, indices, "index");
  if (!b.index.defined()) return b.view;
  const auto [idx, flat] = positions(b.view, b.index, b.dim, "index");
  const Tensor picked = index_select(flat, b.dim, idx);
  if (b.index.dtype() == kBool || b.index.dim() == 1) return picked;
  // An int64 index of any shape: its dims replace the indexed one.
  Shape s(flat.shape().begin(), flat.shape().begin() + b.dim);
  s.insert(s.end(), b.index.shape().begin(), b.index.shape().end());
  s.insert(s.end(), flat.shape().begin() + b.dim + 1, flat.shape().end());
  return reshape(picked, s);
}

Tensor& index_put_(Tensor& x, const std::vector<TensorIndex>& indices, const Tensor& value) {
  HG_CHECK(value.defined(), "index_put_", "got an undefined value");
  check_in_place(x, "index_put_");
  Basic b = apply_basic(x, indices, "index_put_");
  if (!b.index.defined()) {
    check_in_place(b.view, "index_put_", {value});
    HG_CHECK(broadcast_shapes(value.shape(), b.view.shape(), "index_put_") == b.view.shape(), "index_put_",
             "value of shape {} does not broadcast to the indexed shape {}", value.shape(), b.view.shape());
    b.view.copy_(value);
    return x;
  }
  if (b.index.dtype() == kBool && value.numel() == 1) {
    // The common masked fill: one where over the view, written back in one copy.
    Shape mask_shape(static_cast<size_t>(b.dim), 1);
    mask_shape.insert(mask_shape.end(), b.index.shape().begin(), b.index.shape().end());
    mask_shape.resize(static_cast<size_t>(b.view.dim()), 1);
    const Tensor mask = reshape(b.index.to(x.device()), mask_shape);
    b.view.copy_(where(mask, value.to(x.device(), x.dtype()).reshape({}), b.view));
    return x;
  }
  const auto [idx, flat] = positions(b.view, b.index, b.dim, "index_put_");
  HG_CHECK(flat.storage() == x.storage(), "index_put_",
           "the bool index's dims of shape {} cannot be flattened into a view; make the tensor contiguous first",
           b.index.shape());
  // One copy per picked position (the values broadcast to the shape index() would return): a value
  // sharing x's memory would be read after earlier copies wrote it.
  assert_no_overlap(x, value, "index_put_");
  Shape picked = flat.shape();
  picked[static_cast<size_t>(b.dim)] = idx.numel();
  HG_CHECK(broadcast_shapes(value.shape(), picked, "index_put_") == picked, "index_put_",
           "value of shape {} does not broadcast to the indexed shape {}", value.shape(), picked);
  const Tensor values = expand(value.to(x.device()), picked);
  const auto where_to = idx.to(kCPU).to_vector<int64_t>();
  const int64_t n = flat.size(b.dim);
  for (size_t j = 0; j < where_to.size(); ++j) {
    HG_CHECK(where_to[j] >= 0 && where_to[j] < n, "index_put_", "index {} is out of range for dim {} of size {}",
             where_to[j], b.dim, n);
    select(flat, b.dim, where_to[j]).copy_(select(values, b.dim, static_cast<int64_t>(j)));
  }
  return x;
}

Tensor Tensor::index(std::initializer_list<indexing::TensorIndex> indices) const {
  return hg::index(*this, std::vector<indexing::TensorIndex>(indices));
}
Tensor Tensor::index(const std::vector<indexing::TensorIndex>& indices) const { return hg::index(*this, indices); }
Tensor& Tensor::index_put_(std::initializer_list<indexing::TensorIndex> indices, const Tensor& value) {
  return hg::index_put_(*this, std::vector<indexing::TensorIndex>(indices), value);
}
Tensor& Tensor::index_put_(std::initializer_list<indexing::TensorIndex> indices, double value) {
  return hg::index_put_(*this, std::vector<indexing::TensorIndex>(indices), scalar_tensor(value, dtype()));
}

}  // namespace hg
