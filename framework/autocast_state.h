// The thread-local autocast settings, as plain data. The tensor core keeps them so that the
// autograd layer can snapshot them per node and restore them in backward; everything that
// *uses* them (the policy table, casting, the cast cache, the scopes) lives in amp/.
#pragma once

#include <array>

#include "framework/device.h"
#include "framework/dtype.h"

namespace hg {

struct AutocastDeviceState {
  bool enabled = false;
  Dtype dtype = kFloat32;  // set to the device's default lower-precision dtype at thread start
  bool cache_enabled = true;
  friend bool operator==(const AutocastDeviceState&, const AutocastDeviceState&) = default;
};

struct AutocastState {
  std::array<AutocastDeviceState, kNumDeviceTypes> devices{
      AutocastDeviceState{false, kBFloat16, true},  // cpu
      AutocastDeviceState{false, kFloat16, true},   // cuda
  };
  AutocastDeviceState& operator[](DeviceType d) { return devices[static_cast<int>(d)]; }
  const AutocastDeviceState& operator[](DeviceType d) const { return devices[static_cast<int>(d)]; }
  bool any_enabled() const { return devices[0].enabled || devices[1].enabled; }
  friend bool operator==(const AutocastState&, const AutocastState&) = default;
};

// This thread's state (a new thread starts with autocast off).
AutocastState& autocast_state();

}  // namespace hg
