// interpolate: torch.nn.functional.interpolate for 4-d [N, C, H, W] images, modes "nearest" and
// "bilinear", with PyTorch's coordinate formulas (nearest: src = floor(dst * scale); bilinear:
// align_corners maps the corner pixels' centres onto each other, else the half-pixel rule).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace hg {

// Keyword arguments as PyTorch's: give size or scale_factor, not both.
struct InterpolateOptions {
  std::vector<int64_t> size;          // the output's {H, W}, or one value for both
  std::vector<double> scale_factor;   // one factor, or one per dim; the output is floor(in * factor)
  std::string mode = "nearest";       // "nearest" or "bilinear"
  std::optional<bool> align_corners;  // bilinear only (unset: false)
  // true: the factor only sizes the output, and the kernel maps coordinates by in / out, as when
  // a size is given (PyTorch's recompute_scale_factor). Unset or false: by 1 / factor.
  std::optional<bool> recompute_scale_factor;
};

// x [N, C, H, W], floating. Runs as the op "upsample_nearest2d" or "upsample_bilinear2d".
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);

}  // namespace hg
