// cat and stack: one kernel copy per input into its slice of the output; the gradient of each
// input is its slice of the output's gradient.
#include "framework/op.h"
#include "framework/ops/copy.h"
#include "framework/ops/copy_kernels.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"
#include "framework/ops/internal.h"
#include "framework/ops/views.h"

namespace hg {

namespace {
const OpDef kCat{"cat", true};
const OpDef kStack{"stack", true};

void check_list(std::string_view op, const TensorList& ts) {
  HG_CHECK(!ts.empty(), op, "expected a non-empty list of tensors");
  for (size_t i = 0; i < ts.size(); ++i) {
    HG_CHECK(ts[i].defined(), op, "tensor {} is undefined", i);
    HG_CHECK(ts[i].device() == ts[0].device(), op, "tensor {} is on {} but tensor 0 is on {}", i, ts[i].device(),
             ts[0].device());
  }
}

Dtype promoted(const TensorList& ts) {
  Dtype d = ts[0].dtype();
  for (const Tensor& t : ts) d = promote_types(d, t.dtype());
  return d;
}
}  // namespace

Tensor cat(const TensorList& tensors, int64_t dim_in) {
  check_list("cat", tensors);
  OpCall call(kCat, tensors);
  const TensorList& ts = call.inputs();
  // PyTorch skips 1-d empty tensors (a legacy placeholder) when they do not match the others.
  auto skipped = [](const Tensor& t) { return t.dim() == 1 && t.numel() == 0; };
  size_t ref = 0;
  while (ref + 1 < ts.size() && skipped(ts[ref])) ++ref;
  const Tensor& first = ts[ref];
  HG_CHECK(first.dim() > 0, "cat", "zero-dimensional tensor (at position {}) cannot be concatenated", ref);
  const int64_t dim = normalize_dim(dim_in, first.dim(), "cat");
  Shape shape = first.shape();
  shape[static_cast<size_t>(dim)] = 0;
  std::vector<bool> skip(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    skip[i] = skipped(t) && first.dim() != 1;
    if (skip[i]) continue;
    HG_CHECK(t.dim() == first.dim(), "cat", "tensor {} has {} dims (shape {}) but tensor {} has {} (shape {})", i,
             t.dim(), t.shape(), ref, first.dim(), first.shape());
    for (int64_t d = 0; d < t.dim(); ++d) {
      HG_CHECK(d == dim || t.size(d) == first.size(d), "cat",
               "sizes must match except in dim {}: tensor {} has shape {}, tensor {} has shape {}", dim, i, t.shape(),
               ref, first.shape());
    }
    shape[static_cast<size_t>(dim)] += t.size(dim);
  }
  Tensor out = empty(shape, TensorOptions(promoted(ts)).device(first.device()));
  std::vector<int64_t> starts(ts.size(), 0);
  int64_t start = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (skip[i]) continue;
    starts[i] = start;
    const Tensor window =
        internal::alias(out, ts[i].shape(), out.strides(), start * out.strides()[static_cast<size_t>(dim)]);
    if (window.numel()) copy_stub(out.device().type, window, ts[i]);
    start += ts[i].size(dim);
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    std::vector<Shape> shapes;
    for (const Tensor& t : ts) shapes.push_back(t.shape());
    bw = [dim, starts, skip, shapes](const TensorList& g) -> TensorList {
      TensorList grads;
      for (size_t i = 0; i < shapes.size(); ++i) {
        grads.push_back(skip[i] ? zeros(shapes[i], TensorOptions(g[0].dtype()).device(g[0].device()))
                                : g[0].narrow(dim, starts[i], shapes[i][static_cast<size_t>(dim)]));
      }
      return grads;
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor stack(const TensorList& tensors, int64_t dim_in) {
  check_list("stack", tensors);
  OpCall call(kStack, tensors);
  const TensorList& ts = call.inputs();
  for (size_t i = 1; i < ts.size(); ++i) {
    HG_CHECK(ts[i].shape() == ts[0].shape(), "stack",
             "expects tensors of one shape, got {} (tensor 0) and {} (tensor {})", ts[0].shape(), ts[i].shape(), i);
  }
  const int64_t dim = normalize_dim(dim_in, ts[0].dim() + 1, "stack");
  Shape shape = ts[0].shape();
  shape.insert(shape.begin() + dim, static_cast<int64_t>(ts.size()));
  Tensor out = empty(shape, TensorOptions(promoted(ts)).device(ts[0].device()));
  Strides window_strides = out.strides();
  const int64_t step = window_strides[static_cast<size_t>(dim)];
  window_strides.erase(window_strides.begin() + dim);
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor window = internal::alias(out, ts[i].shape(), window_strides, static_cast<int64_t>(i) * step);
    if (window.numel()) copy_stub(out.device().type, window, ts[i]);
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [dim, n = ts.size()](const TensorList& g) -> TensorList {
      TensorList grads;
      for (size_t i = 0; i < n; ++i) grads.push_back(g[0].select(dim, static_cast<int64_t>(i)));
      return grads;
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

}  // namespace hg
