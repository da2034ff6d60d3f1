// MNIST in the IDX format: a reader for IDX files and the train/test splits as tensors.
#pragma once

#include <string>

#include "data/dataset.h"

namespace hg::data {

// The IDX file at `path` as a uint8 tensor of the shape its header gives. Only unsigned-byte
// data (type code 0x08) is read. A missing, corrupt or truncated file throws hg::Error
// "[read_idx] <path>: <what is wrong>".
Tensor read_idx(const std::string& path);

enum class Split { Train, Test };

inline constexpr double kMnistMean = 0.1307;
inline constexpr double kMnistStd = 0.3081;

// The MNIST split found in `dir` (train-images-idx3-ubyte, ... as in the original files):
// images float32 [N, 1, 28, 28] normalised as (x/255 - 0.1307) / 0.3081, labels int64 [N].
TensorDataset mnist(const std::string& dir, Split split);

}  // namespace hg::data
