// Applies the policy table to one op call: the hook the tensor core calls (through
// hg::set_autocast_hook) for every op while any autocast region is enabled on this thread.
#pragma once

#include <string_view>

#include "amp/policy.h"
#include "framework/op.h"

namespace hg::amp {

// Whether a region on `device` may cast t: floating point, not float64, on that device type.
bool is_eligible(const Tensor& t, DeviceType device);

// What `policy` does to an op's inputs in a region on `device` whose lower dtype is `lower`.
// Exposed so each policy can be tested on its own; ops reach it through autocast_hook.
AutocastResult apply_policy(std::string_view op, CastPolicy policy, DeviceType device, Dtype lower, TensorList inputs);

// The region's device is that of the op's inputs (cuda first when inputs are on both); ops
// whose inputs are all on a device type without an enabled region run untouched.
AutocastResult autocast_hook(const OpDef& op, TensorList inputs);

}  // namespace hg::amp
