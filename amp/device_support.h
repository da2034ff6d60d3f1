// Whether autocast can act on a device type: the CUDA question, and the one-time warning given
// when a program asks for CUDA autocast on a machine that cannot honour it.
#pragma once

#include "framework/device.h"

namespace hg::amp {

// True when a CUDA device can run ops. There is no CUDA backend yet, so this answers false;
// when kernels/cuda lands it answers here (device count > 0), and nothing else in amp changes.
bool cuda_available();

// Warns on stderr that `what` (e.g. "autocast") cannot run on `device`, once per (device,
// what) in this process, so a CPU-only run of a CUDA program warns once, not on every region.
void warn_once_unavailable(DeviceType device, const char* what);

}  // namespace hg::amp
