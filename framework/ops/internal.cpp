#include "framework/ops/internal.h"

#include <optional>

#include "framework/capture_state.h"
#include "framework/ops/copy_kernels.h"
#include "framework/ops/creation.h"
#include "framework/shape.h"

namespace hg::internal {

// Strides that let `shape` view memory laid out as (old_shape, old_strides), if any exist
// (the rule PyTorch's view uses: each new chunk of dims must span contiguous old dims).
std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& shape) {
  if (numel_of(old_shape) == 0) return contiguous_strides(shape);
  Strides out(shape.size());
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

Tensor alias(const Tensor& t, Shape shape, Strides strides, int64_t offset) {
  return Tensor(t.storage(), std::move(shape), std::move(strides), offset, t.dtype());
}

Tensor alias_contiguous(const Tensor& t, const Shape& shape) {
  return Tensor(t.storage(), shape, contiguous_strides(shape), t.offset(), t.dtype());
}

Tensor reshaped(const Tensor& t, const Shape& shape) {
  if (auto strides = view_strides(t.shape(), t.strides(), shape))
    return alias(t, shape, std::move(*strides), t.offset());
  return alias_contiguous(internal::contiguous(t), shape);
}

Tensor transposed(const Tensor& t) {
  return alias(t, {t.shape()[1], t.shape()[0]}, {t.strides()[1], t.strides()[0]}, t.offset());
}

Tensor expanded(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t.detach();
  const size_t lead = shape.size() - t.shape().size();
  Strides strides(shape.size(), 0);
  for (size_t i = 0; i < t.shape().size(); ++i)
    if (t.shape()[i] != 1) strides[lead + i] = t.strides()[i];
  return alias(t, shape, std::move(strides), t.offset());
}

Tensor unsqueezed(const Tensor& t, int64_t dim) {
  Shape shape = t.shape();
  Strides strides = t.strides();
  const auto d = static_cast<size_t>(dim);
  const int64_t stride = d < shape.size() ? shape[d] * strides[d] : 1;
  shape.insert(shape.begin() + dim, 1);
  strides.insert(strides.begin() + dim, stride);
  return alias(t, std::move(shape), std::move(strides), t.offset());
}

Tensor converted(const Tensor& t, Dtype dtype, MemoryFormat format) {
  Tensor out = empty(t.shape(), TensorOptions(dtype).device(t.device()), format);
  if (!t.numel()) return out;
  const DeviceType device = t.device().type;
  if (dtype == kFloat32 && is_reduced_float(t.dtype()) && t.is_contiguous() && out.is_contiguous() &&
      widen_noting_finite_stub.has(device)) {
    if (widen_noting_finite_stub(device, out, t)) note_all_finite(out);
  } else {
    copy_stub(device, out, t);
  }
  return out;
}

Tensor laid_out(const Tensor& t, MemoryFormat format) {
  return t.is_contiguous(format) ? t.detach() : converted(t, t.dtype(), format);
}

MemoryFormat output_format(const Shape& out_shape, std::initializer_list<const Tensor*> inputs) {
  if (out_shape.size() != 4) return MemoryFormat::Contiguous;
  for (const Tensor* t : inputs) {
    if (!t->defined() || t->shape() != out_shape) continue;
    if (t->is_contiguous()) return MemoryFormat::Contiguous;
    if (t->is_contiguous(MemoryFormat::ChannelsLast)) return MemoryFormat::ChannelsLast;
  }
  return MemoryFormat::Contiguous;
}

// suggest_memory_format is ChannelsLast only for a channels-last tensor that is not also contiguous.
bool is_dense(const Tensor& t) { return t.is_contiguous(t.suggest_memory_format()); }

bool owns_whole_storage(const Tensor& t) {
  return t.offset() == 0 && is_dense(t) &&
         static_cast<size_t>(t.numel()) * element_size(t.dtype()) == t.storage()->nbytes;
}

void note_all_finite(const Tensor& t) {
  HG_CHECK(owns_whole_storage(t), "note_all_finite", "the tensor must own its whole storage");
  t.storage()->finite_at_version_plus_one.store(t.version() + 1, std::memory_order_relaxed);
}

bool known_all_finite(const Tensor& t) {
  return t.defined() && owns_whole_storage(t) &&
         t.storage()->finite_at_version_plus_one.load(std::memory_order_relaxed) == t.version() + 1;
}

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t.detach() : converted(t, t.dtype()); }

Tensor cast(const Tensor& t, Dtype dtype) { return t.dtype() == dtype ? t.detach() : converted(t, dtype); }

Tensor dense_as(const Tensor& t, Dtype dtype, const Shape& shape) {
  return internal::contiguous(reshaped(cast(t, dtype), shape));
}

Tensor moved_to(const Tensor& t, Device device) {
  if (t.device() == device) return t.detach();
  capture::refuse_host_sync("to", t.device(), "copy a tensor to another device (the host would wait for it)");
  capture::refuse_host_sync("to", device, "copy a tensor to this device from host memory the replays would read");
  const Tensor src = internal::contiguous(t);
  Tensor out = empty(t.shape(), TensorOptions(t.dtype()).device(device));
  if (t.numel()) cross_device_copy_stub(kCUDA, out, src);
  return out;
}

Tensor as_3d(const Tensor& t, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d < dim) outer *= t.shape()[static_cast<size_t>(d)];
    if (d > dim) inner *= t.shape()[static_cast<size_t>(d)];
  }
  const int64_t n = t.dim() == 0 ? 1 : t.shape()[static_cast<size_t>(dim)];
  return alias(t, {outer, n, inner}, {n * inner, inner, 1}, t.offset());
}

}  // namespace hg::internal
