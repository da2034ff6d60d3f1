// StateDict: named tensors (module parameters and buffers, optimizer and scaler state, whole
// training checkpoints), ordered by name so a saved file comes out the same every time.
#pragma once

#include <map>
#include <string>

#include "framework/tensor.h"

namespace hg {

using StateDict = std::map<std::string, Tensor>;

}  // namespace hg
