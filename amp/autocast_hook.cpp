#include "amp/autocast_hook.h"

#include <optional>

#include "amp/cast_cache.h"
#include "framework/autocast_state.h"
#include "framework/op.h"

namespace hg::amp {

namespace {
void cast_eligible(TensorList& inputs, DeviceType device, Dtype dtype) {
  for (Tensor& t : inputs)
    if (is_eligible(t, device)) t = cast_for_autocast(t, dtype);
}

// The widest floating dtype among the eligible inputs; float16 next to bfloat16 has none.
std::optional<Dtype> widest_eligible(std::string_view op, const TensorList& inputs, DeviceType device) {
  bool f16 = false, bf16 = false, f32 = false;
  for (const Tensor& t : inputs) {
    if (!is_eligible(t, device)) continue;
    f16 |= t.dtype() == kFloat16;
    bf16 |= t.dtype() == kBFloat16;
    f32 |= t.dtype() == kFloat32;
  }
  HG_CHECK(!(f16 && bf16), op,
           "autocast cannot promote float16 and bfloat16 inputs together; convert them to one dtype first");
  if (f32) return kFloat32;
  if (f16) return kFloat16;
  if (bf16) return kBFloat16;
  return std::nullopt;
}

// The device type whose region applies to these inputs, if any.
std::optional<DeviceType> region_device(const TensorList& inputs) {
  const AutocastState& state = autocast_state();
  std::optional<DeviceType> found;
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    const DeviceType d = t.device().type;
    if (!state[d].enabled) continue;
    if (d == kCUDA) return d;
    found = d;
  }
  return found;
}
}  // namespace

bool is_eligible(const Tensor& t, DeviceType device) {
  return t.defined() && is_floating(t.dtype()) && t.dtype() != kFloat64 && t.device().type == device;
}

AutocastResult apply_policy(std::string_view op, CastPolicy policy, DeviceType device, Dtype lower, TensorList inputs) {
  AutocastResult result;
  switch (policy) {
    case CastPolicy::LowerPrecision: cast_eligible(inputs, device, lower); break;
    case CastPolicy::Fp32: cast_eligible(inputs, device, kFloat32); break;
    case CastPolicy::Fp32OutputDtype:
      if (!inputs.empty() && is_eligible(inputs[0], device)) result.output_dtype = kFloat32;
      break;
    case CastPolicy::Promote:
      if (auto widest = widest_eligible(op, inputs, device)) cast_eligible(inputs, device, *widest);
      break;
    case CastPolicy::Refused: {
      const PolicyRow* row = find_policy_row(op);
      fail(op, "is refused inside a {} autocast region: {}", device, row ? row->note : "no safe dtype for it");
    }
    case CastPolicy::PassThrough: break;
  }
  result.inputs = std::move(inputs);
  return result;
}

AutocastResult autocast_hook(const OpDef& op, TensorList inputs) {
  const std::optional<DeviceType> device = region_device(inputs);
  if (!device) return {std::move(inputs), std::nullopt};
  const CastPolicy policy = policy_row(op).on(*device);
  return apply_policy(op.name, policy, *device, autocast_state()[*device].dtype, std::move(inputs));
}

namespace {
[[maybe_unused]] const bool g_installed = (set_autocast_hook(&autocast_hook), true);
}  // namespace

}  // namespace hg::amp
