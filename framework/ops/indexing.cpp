// gather / scatter_add and index_select / index_add: each pair is the other's gradient.
#include "framework/ops/indexing_kernels.h"

#include "framework/op.h"
#include "framework/ops/copy.h"
#include "framework/ops/copy_kernels.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/views.h"

namespace hg {

HG_DEFINE_STUB(gather_stub, GatherFn);
HG_DEFINE_STUB(scatter_add_stub, ScatterAddFn);
HG_DEFINE_STUB(index_select_stub, IndexSelectFn);
HG_DEFINE_STUB(index_add_stub, IndexAddFn);

namespace {
const OpDef kGather{"gather", true};
const OpDef kScatterAdd{"scatter_add", true};
const OpDef kIndexSelect{"index_select", true};
const OpDef kIndexAdd{"index_add", true};

// A contiguous copy made with the kernels only (no op recorded: it is an op's private buffer).
Tensor private_copy(const Tensor& t) {
  Tensor out = empty(t.shape(), TensorOptions(t.dtype()).device(t.device()));
  if (out.numel()) copy_stub(t.device().type, out, t);
  return out;
}

void check_index(std::string_view op, const Tensor& x, const Tensor& index) {
  HG_CHECK(x.defined() && index.defined(), op, "got an undefined tensor");
  HG_CHECK(index.dtype() == kInt64, op, "expected an int64 index tensor, got {} (shape {})", index.dtype(),
           index.shape());
  HG_CHECK(index.device() == x.device(), op, "index is on {} but the input is on {}", index.device(), x.device());
}

[[noreturn]] void out_of_range(std::string_view op, int64_t value, int64_t dim, int64_t size) {
  fail(op, "index {} is out of bounds for dim {} with size {}", value, dim, size);
}

// gather/scatter_add shape rule: same number of dims, index no larger than `t` outside `dim`
// (or anywhere, for scatter_add's src).
void check_gather_shapes(std::string_view op, const Tensor& t, const char* what, int64_t dim, const Tensor& index,
                         bool including_dim) {
  HG_CHECK(index.dim() == t.dim(), op, "index has {} dims (shape {}) but {} has {} (shape {})", index.dim(),
           index.shape(), what, t.dim(), t.shape());
  for (int64_t d = 0; d < t.dim(); ++d) {
    HG_CHECK((d == dim && !including_dim) || index.size(d) <= t.size(d), op,
             "index shape {} is larger than {} shape {} in dim {}", index.shape(), what, t.shape(), d);
  }
}
}  // namespace

Tensor gather(const Tensor& x_in, int64_t dim_in, const Tensor& index_in) {
  OpCall call(kGather, {x_in, index_in});
  const Tensor& x = call.input(0);
  check_index("gather", x, call.input(1));
  const int64_t dim = normalize_dim(dim_in, x.dim(), "gather");
  check_gather_shapes("gather", x, "input", dim, call.input(1), false);
  const Tensor index = internal::contiguous(call.input(1));
  Tensor out = empty(index.shape(), TensorOptions(x.dtype()).device(x.device()));
  if (out.numel()) {
    if (auto bad = gather_stub(x.device().type, out, x, dim, index)) {
      out_of_range("gather", *bad, dim, x.dim() ? x.size(dim) : 1);
    }
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [shape = x.shape(), dim, index](const TensorList& g) -> TensorList {
      Tensor zero = zeros(shape, TensorOptions(g[0].dtype()).device(g[0].device()));
      return {scatter_add(zero, dim, index, g[0]), Tensor()};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor scatter_add(const Tensor& self_in, int64_t dim_in, const Tensor& index_in, const Tensor& src_in) {
  OpCall call(kScatterAdd, {self_in, index_in, src_in});
  const Tensor& self = call.input(0);
  const Tensor& src = call.input(2);
  check_index("scatter_add", self, call.input(1));
  HG_CHECK(src.defined() && src.dtype() == self.dtype() && src.device() == self.device(), "scatter_add",
           "src must match self's dtype and device: self {} on {}, src {}", self.dtype(), self.device(),
           src.defined() ? fmt::format("{} on {}", src.dtype(), src.device()) : "undefined");
  const int64_t dim = normalize_dim(dim_in, self.dim(), "scatter_add");
  check_gather_shapes("scatter_add", self, "self", dim, call.input(1), false);
  check_gather_shapes("scatter_add", src, "src", dim, call.input(1), true);
  const Tensor index = internal::contiguous(call.input(1));
  Tensor out = private_copy(self);
  if (index.numel()) {
    if (auto bad = scatter_add_stub(self.device().type, out, dim, index, src)) {
      out_of_range("scatter_add", *bad, dim, self.dim() ? self.size(dim) : 1);
    }
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [dim, index, src_shape = src.shape()](const TensorList& g) -> TensorList {
      Tensor gsrc = gather(g[0], dim, index);
      if (gsrc.shape() != src_shape) {  // src elements beyond index's shape were not used
        Tensor padded = zeros(src_shape, TensorOptions(gsrc.dtype()).device(gsrc.device()));
        Tensor window = padded;
        for (int64_t d = 0; d < gsrc.dim(); ++d) window = window.narrow(d, 0, gsrc.size(d));
        window.copy_(gsrc);
        gsrc = padded;
      }
      return {g[0], Tensor(), gsrc};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor index_select(const Tensor& x_in, int64_t dim_in, const Tensor& index_in) {
  OpCall call(kIndexSelect, {x_in, index_in});
  const Tensor& x = call.input(0);
  check_index("index_select", x, call.input(1));
  HG_CHECK(call.input(1).dim() <= 1, "index_select", "index must be 1-d, got shape {}", call.input(1).shape());
  const int64_t dim = normalize_dim(dim_in, x.dim(), "index_select");
  const Tensor index = internal::contiguous(call.input(1));
  Shape shape = x.shape();
  if (x.dim() == 0) {
    shape = index.shape();
  } else {
    shape[static_cast<size_t>(dim)] = index.numel();
  }
  Tensor out = empty(shape, TensorOptions(x.dtype()).device(x.device()));
  if (index.numel()) {  // the kernel checks the indices even when x has no elements
    const Tensor xc = internal::contiguous(x);
    const Tensor out3 = x.dim() == 0 ? internal::alias(out, {1, index.numel(), 1}, {index.numel(), 1, 1}, 0)
                                     : internal::as_3d(out, dim);
    if (auto bad = index_select_stub(x.device().type, out3, internal::as_3d(xc, dim), index, "index_select")) {
      out_of_range("index_select", *bad, dim, x.dim() ? x.size(dim) : 1);
    }
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [shape = x.shape(), dim, index](const TensorList& g) -> TensorList {
      if (shape.empty()) return {g[0].sum(), Tensor()};  // every index picked the one element
      Tensor zero = zeros(shape, TensorOptions(g[0].dtype()).device(g[0].device()));
      return {index_add(zero, dim, index, g[0]), Tensor()};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor index_add(const Tensor& self_in, int64_t dim_in, const Tensor& index_in, const Tensor& src_in) {
  OpCall call(kIndexAdd, {self_in, index_in, src_in});
  const Tensor& self = call.input(0);
  const Tensor& src = call.input(2);
  check_index("index_add", self, call.input(1));
  HG_CHECK(call.input(1).dim() <= 1, "index_add", "index must be 1-d, got shape {}", call.input(1).shape());
  const int64_t dim = normalize_dim(dim_in, self.dim(), "index_add");
  HG_CHECK(src.defined() && src.dtype() == self.dtype() && src.device() == self.device(), "index_add",
           "src must match self's dtype and device: self {} on {}", self.dtype(), self.device());
  Shape want = self.shape();
  if (self.dim() > 0) want[static_cast<size_t>(dim)] = call.input(1).numel();
  HG_CHECK(src.shape() == want || (self.dim() == 0 && src.numel() == call.input(1).numel()), "index_add",
           "src must have shape {} (self {} with {} indices along dim {}), got {}", want, self.shape(),
           call.input(1).numel(), dim, src.shape());
  const Tensor index = internal::contiguous(call.input(1));
  Tensor out = private_copy(self);
  if (index.numel()) {
    const Tensor sc = internal::contiguous(src);
    const Tensor src3 = self.dim() == 0 ? internal::alias(sc, {1, index.numel(), 1}, {index.numel(), 1, 1}, sc.offset())
                                        : internal::as_3d(sc, dim);
    if (auto bad = index_add_stub(self.device().type, internal::as_3d(out, dim), index, src3)) {
      out_of_range("index_add", *bad, dim, self.dim() ? self.size(dim) : 1);
    }
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [dim, index, src_shape = src.shape()](const TensorList& g) -> TensorList {
      return {g[0], Tensor(), index_select(g[0], dim, index).reshape(src_shape)};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

}  // namespace hg
