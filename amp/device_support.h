// The one-time warning given when a program asks for CUDA autocast (or a CUDA GradScaler) on a
// machine that cannot honour it. Whether CUDA can is hg::cuda::is_available() (framework/cuda.h).
#pragma once

#include "framework/device.h"

namespace hg::amp {

// Warns on stderr that `what` (e.g. "autocast") cannot run on `device`, once per (device,
// what) in this process, so a CPU-only run of a CUDA program warns once, not on every region.
void warn_once_unavailable(DeviceType device, const char* what);

}  // namespace hg::amp
