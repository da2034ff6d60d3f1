#include "framework/ops/copy_kernels.h"

#include "framework/capture_state.h"
#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/views.h"
#include "framework/view_history.h"

namespace hg {

HG_DEFINE_STUB(copy_stub, CopyFn);
HG_DEFINE_OPTIONAL_STUB(widen_noting_finite_stub, WidenNotingFiniteFn);
HG_DEFINE_OPTIONAL_STUB(cross_device_copy_stub, CopyFn);
HG_DEFINE_STUB(fill_stub, FillFn);

namespace {
const OpDef kTo{"to", {.dtype_cast = true}};
const OpDef kContiguous{"contiguous", true};
const OpDef kClone{"clone", true};
const OpDef kCopyInPlace{"copy_", true};
const OpDef kFillInPlace{"fill_", true};
const OpDef kZeroInPlace{"zero_", true};
}  // namespace

Tensor to(const Tensor& t, Device device, Dtype dtype) {
  if (t.device() == device && t.dtype() == dtype) return t;
  OpCall call(kTo, {t});
  const Tensor& x = call.input(0);
  Tensor out;
  if (x.device() == device) {
    // A channels-last tensor stays channels-last through a cast, as with PyTorch's
    // preserve_format (autocast's casts of activations included).
    out = internal::converted(x, dtype, x.suggest_memory_format());
  } else {
    // Convert on the side that is the CPU, then move the bytes.
    capture::refuse_host_sync("to", x.device(), "copy a tensor to another device (the host would wait for it)");
    capture::refuse_host_sync("to", device, "copy a tensor to this device from host memory the replays would read");
    Tensor src = x.device().is_cpu() ? internal::converted(x, dtype) : x.contiguous();
    out = empty(x.shape(), TensorOptions(src.dtype()).device(device));
    if (x.numel()) cross_device_copy_stub(kCUDA, out, src);
    if (out.dtype() != dtype) out = internal::converted(out, dtype);
    if (x.suggest_memory_format() == MemoryFormat::ChannelsLast)
      out = internal::laid_out(out, MemoryFormat::ChannelsLast);
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [device = x.device(), dtype = x.dtype()](const TensorList& g) -> TensorList {
      return {to(g[0], device, dtype)};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor to_with_result(const Tensor& t, const Tensor& value) {
  // Dense: contiguous, or channels-last (a channels-last weight's warm cast, laid out as the weight).
  HG_CHECK(value.defined() && value.shape() == t.shape() && value.device() == t.device() &&
               internal::owns_whole_storage(value),
           "to", "a precomputed conversion of a {} tensor on {} must be dense with its shape and device, got {}",
           t.shape(), t.device(), value.defined() ? fmt::format("{} on {}", value.shape(), value.device()) : "none");
  OpCall call(kTo, {t});
  // Its own handle (finish() gives it the node), with the value's strides.
  Tensor out = internal::alias(value, value.shape(), value.strides(), 0);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [device = t.device(), dtype = t.dtype()](const TensorList& g) -> TensorList {
      return {to(g[0], device, dtype)};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  OpCall call(kContiguous, {t});
  Tensor out = internal::converted(call.input(0), t.dtype());
  BackwardFn bw;
  if (call.needs_grad()) bw = [](const TensorList& g) -> TensorList { return {g[0]}; };
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor contiguous(const Tensor& t, MemoryFormat format) {
  if (format == MemoryFormat::Preserve) format = t.suggest_memory_format();
  if (format == MemoryFormat::Contiguous) return contiguous(t);
  HG_CHECK(t.dim() == 4, "contiguous", "{} needs a 4-d [N, C, H, W] tensor, got shape {}", memory_format_name(format),
           t.shape());
  if (t.is_contiguous(format)) return t;
  OpCall call(kContiguous, {t});
  Tensor out = internal::converted(call.input(0), t.dtype(), format);
  BackwardFn bw;
  if (call.needs_grad()) bw = [](const TensorList& g) -> TensorList { return {g[0]}; };
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor to(const Tensor& t, Device device, Dtype dtype, MemoryFormat format) {
  return contiguous(to(t, device, dtype), format);
}

Tensor clone(const Tensor& t) {
  OpCall call(kClone, {t});
  // As PyTorch's clone (preserve_format): a channels-last tensor's copy is channels-last.
  Tensor out = internal::converted(call.input(0), t.dtype(), t.suggest_memory_format());
  BackwardFn bw;
  if (call.needs_grad()) bw = [](const TensorList& g) -> TensorList { return {g[0]}; };
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor Tensor::to(Dtype d) const { return hg::to(*this, device(), d); }
Tensor Tensor::to(Device d) const { return hg::to(*this, d, dtype()); }
Tensor Tensor::to(Device d, Dtype dt) const { return hg::to(*this, d, dt); }
Tensor Tensor::contiguous() const { return hg::contiguous(*this); }
Tensor Tensor::contiguous(MemoryFormat format) const { return hg::contiguous(*this, format); }
Tensor Tensor::to(Device d, Dtype dt, MemoryFormat format) const { return hg::to(*this, d, dt, format); }
Tensor Tensor::clone() const { return hg::clone(*this); }

Tensor& Tensor::copy_(const Tensor& src) {
  check_in_place(*this, "copy_", {src});
  OpCall call(kCopyInPlace, {*this, src});
  HG_CHECK(src.defined(), "copy_", "source tensor is undefined");
  const Tensor s = internal::expanded(internal::moved_to(src, device()), shape());
  if (numel()) copy_stub(device().type, *this, s);
  bump_version();
  // The old value is overwritten (no gradient); src's arrives in its shape, dtype and device.
  BackwardFn bw;
  if (call.needs_grad()) bw = [](const TensorList& g) -> TensorList { return {Tensor(), g[0]}; };
  finish_in_place(call, *this, std::move(bw));
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_in_place(*this, "fill_");
  OpCall call(kFillInPlace, {*this});
  if (numel()) fill_stub(device().type, *this, value);
  bump_version();
  BackwardFn bw;
  if (call.needs_grad()) bw = [](const TensorList&) -> TensorList { return {Tensor()}; };
  finish_in_place(call, *this, std::move(bw));
  return *this;
}

Tensor& Tensor::zero_() {
  check_in_place(*this, "zero_");
  OpCall call(kZeroInPlace, {*this});
  if (numel()) fill_stub(device().type, *this, 0.0);
  bump_version();
  BackwardFn bw;
  if (call.needs_grad()) bw = [](const TensorList&) -> TensorList { return {Tensor()}; };
  finish_in_place(call, *this, std::move(bw));
  return *this;
}

}  // namespace hg
