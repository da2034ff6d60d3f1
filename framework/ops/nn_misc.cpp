// embedding (index_select on rows, index_add back) and dropout (one mask kernel, one multiply).
#include "framework/ops/nn_misc_kernels.h"

#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/binary_kernels.h"
#include "framework/ops/copy.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"
#include "framework/ops/indexing_kernels.h"
#include "framework/ops/internal.h"
#include "framework/ops/views.h"

namespace hg {

HG_DEFINE_STUB(dropout_mask_stub, DropoutMaskFn);

namespace {
const OpDef kEmbedding{"embedding", true};
const OpDef kDropout{"dropout", true};
}  // namespace

Tensor embedding(const Tensor& weight_in, const Tensor& indices_in) {
  OpCall call(kEmbedding, {weight_in, indices_in});
  const Tensor &weight = call.input(0), &indices = call.input(1);
  HG_CHECK(weight.defined() && indices.defined(), "embedding", "got an undefined tensor");
  HG_CHECK(weight.dim() == 2, "embedding", "weight must be 2-d [num_embeddings, dim], got shape {}", weight.shape());
  HG_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, "embedding",
           "indices must be int64 or int32, got {} (shape {})", indices.dtype(), indices.shape());
  HG_CHECK(indices.device() == weight.device(), "embedding", "indices are on {} but the weight is on {}",
           indices.device(), weight.device());
  const int64_t rows = weight.shape()[0], d = weight.shape()[1], m = indices.numel();
  const Tensor idx = internal::contiguous(internal::cast(indices, kInt64));
  Shape shape = indices.shape();
  shape.push_back(d);
  Tensor out = empty(shape, TensorOptions(weight.dtype()).device(weight.device()));
  if (m) {
    const Tensor w = internal::contiguous(weight);
    auto bad = index_select_stub(weight.device().type, internal::alias(out, {1, m, d}, {m * d, d, 1}, 0),
                                 internal::alias(w, {1, rows, d}, {rows * d, d, 1}, w.offset()),
                                 internal::alias(idx, {m}, {1}, idx.offset()), "embedding");
    HG_CHECK(!bad, "embedding", "index {} is out of range for an embedding table of {} rows (weight shape {})",
             bad.value_or(0), rows, weight.shape());
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [idx = idx.reshape({m}), rows, d, m](const TensorList& g) -> TensorList {
      Tensor zero = zeros({rows, d}, TensorOptions(g[0].dtype()).device(g[0].device()));
      return {index_add(zero, 0, idx, g[0].reshape({m, d})), Tensor()};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor dropout(const Tensor& x_in, double p, bool training) {
  HG_CHECK(x_in.defined(), "dropout", "got an undefined tensor");
  HG_CHECK(p >= 0.0 && p <= 1.0, "dropout", "p must be in [0, 1], got {}", p);
  HG_CHECK(is_floating(x_in.dtype()), "dropout", "expected a floating-point tensor, got {}", x_in.dtype());
  if (!training || p == 0.0) return x_in;  // as PyTorch: the input itself
  if (p == 1.0) return x_in * 0.0;         // as PyTorch: everything dropped, no draw, zero gradient
  OpCall call(kDropout, {x_in});
  const Tensor& x = call.input(0);
  // The mask is drawn in memory order, so a channels-last x gets a channels-last mask and output.
  const MemoryFormat format = internal::output_format(x.shape(), {&x});
  Tensor mask = empty(x.shape(), TensorOptions(x.dtype()).device(x.device()), format);
  Tensor out = empty(x.shape(), TensorOptions(x.dtype()).device(x.device()), format);
  const uint64_t seed = random_u64();  // drawn even for empty tensors, so the stream stays in step
  if (out.numel()) {
    dropout_mask_stub(x.device().type, mask, p, seed);
    binary_stub(x.device().type, BinaryOp::Mul, out, x, mask, 1.0);
  }
  BackwardFn bw;
  if (call.needs_grad()) bw = [mask](const TensorList& g) -> TensorList { return {g[0] * mask}; };
  call.finish({&out}, std::move(bw));
  return out;
}

}  // namespace hg
